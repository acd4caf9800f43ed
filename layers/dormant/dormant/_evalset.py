"""Eval sets: recorded sessions written to one JSON file, and read back as cases.

``dormant sessions export`` writes an :class:`EvalSet`: each session whole (its head's
status, principal, version and state, and its ledger exactly as ``events.dump_ledger`` writes
it), so a replay (``dormant.testing.replay``) or ``dormant eval`` works from what the store
held, on any machine, without the store. :func:`read_set` reads such a file, a bare ledger
file (``{"format": 1, "events": [...]}``, as the golden fixtures in
``tests/fixtures/ledger`` are), or a directory of either: the cases of an eval.

Redaction is the app's: a function ``redact(text) -> text`` applied to what people wrote and
read (the texts of messages, replies, queued and seeded messages, timer messages, compaction
summaries, input prompts, the reasons of decisions and hand-offs) and to every string in the
session's state and in its ``state_delta`` events. Tool arguments, tool results (a denial's
included, which quotes its reason) and answers are kept as they are: a replay feeds them back
to the tools and checks the model's calls against them, so a changed value would be a changed
case, not a hidden one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ValidationError

from dormant._ids import now_ms
from dormant.errors import InputError
from dormant.events import (
    ApprovalDecided,
    AssistantEvent,
    CompactionEvent,
    Event,
    HandoffEvent,
    InputRequested,
    InvocationStart,
    QueuedEvent,
    QueueEdit,
    SeedEvent,
    StateDelta,
    TimerSet,
    UserEvent,
    dump_ledger,
    load_ledger,
)
from dormant.session import Session, normalize_session_id
from dormant.stores._base import Store

__all__ = ["SET_FORMAT", "EvalSet", "EvalSetError", "ExportedSession", "export_sessions",
           "read_set", "write_set"]

#: The ``format`` of an export file; a reader refuses any other.
SET_FORMAT: Final = "dormant.sessions/1"

Redact = Callable[[str], str]

#: The text fields redaction rewrites, by event class (tool arguments, results and answers are
#: never among them: see the module doc).
_TEXTS: dict[type[BaseModel], tuple[str, ...]] = {
    UserEvent: ("text",),
    AssistantEvent: ("text",),
    QueuedEvent: ("text",),
    QueueEdit: ("text",),
    SeedEvent: ("text",),
    TimerSet: ("message",),
    CompactionEvent: ("summary",),
    InputRequested: ("prompt",),
    ApprovalDecided: ("reason",),
    HandoffEvent: ("reason",),
}


class EvalSetError(ValueError):
    """A session asked for that is not in the store, or a file that is not an eval set."""


class ExportedSession(BaseModel):
    """One recorded session, as an eval set holds it; its name in a report is its id."""

    session_id: str
    agent: str | None = None
    principal: str | None = None
    status: str | None = None
    version: int | None = None
    updated_at: int | None = None
    state: dict[str, Any] = {}
    ledger: dict[str, Any]

    @property
    def name(self) -> str:
        return self.session_id

    def events(self) -> list[Event]:
        """The session's ledger events (read with ``events.load_ledger``: any ledger format
        this dormant reads)."""
        return load_ledger(self.ledger)


class EvalSet(BaseModel):
    """An export file: when, from where, and the sessions."""

    format: Literal["dormant.sessions/1"] = SET_FORMAT
    exported_at: int
    source: str = ""
    sessions: list[ExportedSession]


def export_sessions(store: Store, session_ids: Sequence[str] | None = None, *,
                    principal: str | None = None, limit: int | None = None,
                    since: int | None = None, redact: Redact | None = None,
                    source: str = "") -> EvalSet:
    """The sessions ``session_ids`` names (with or without the ``session_`` prefix; one that
    does not exist raises :class:`EvalSetError` naming it), or, when None, those
    ``store.list(principal=..., limit=...)`` gives (``limit`` None: the store's default,
    100), newest first, updated at or after ``since`` (epoch ms). Each is loaded whole (a
    fork's lineage events too); a listed one deleted before it is loaded is left out.
    ``redact`` rewrites texts and state strings only, in copies (see the module doc): tool
    arguments, tool results and answers are kept, and the store's events never change."""
    if session_ids is None:
        listed = store.list(principal=principal, limit=limit if limit is not None else 100)
        wanted = [s.session_id for s in listed if since is None or s.updated_at >= since]
    else:
        wanted = [_session_id(sid) for sid in session_ids]
    exported = []
    for sid in wanted:
        stored = store.load(sid, turns=None)
        if stored is None:
            if session_ids is None:
                continue  # deleted between the list and the load
            raise EvalSetError(f"session {sid} not found{_in(source)}")
        exported.append(_exported(Session.from_stored(stored), stored.head.updated_at, redact))
    return EvalSet(exported_at=now_ms(), source=source, sessions=exported)


def _session_id(given: str) -> str:
    try:
        return normalize_session_id(given)
    except InputError as error:
        raise EvalSetError(str(error)) from error


def _in(source: str) -> str:
    return f" in {source}" if source else ""


def _exported(session: Session, updated_at: int, redact: Redact | None) -> ExportedSession:
    events = session.events
    state = session.state
    if redact is not None:
        events = [_redacted(event, redact) for event in events]
        state = _strings(state, redact)
    agent = next((e.agent for e in events if isinstance(e, InvocationStart)), None)
    return ExportedSession(
        session_id=session.session_id, agent=agent, principal=session.principal,
        status=session.status, version=session.version, updated_at=updated_at,
        state=state, ledger=dump_ledger(events))


def _redacted(event: Event, redact: Redact) -> Event:
    """A copy of ``event`` with its texts (and a state delta's values) redacted."""
    if isinstance(event, StateDelta):
        patch = [{**op, "value": _strings(op["value"], redact)} if "value" in op else op
                 for op in event.patch]
        return event.model_copy(update={"patch": patch})
    fields = _TEXTS.get(type(event), ())
    update = {name: redact(value) for name in fields
              if isinstance(value := getattr(event, name), str)}
    return event.model_copy(update=update) if update else event


def _strings(value: Any, redact: Redact) -> Any:
    """``value`` with every string in it (keys aside) redacted, in a new structure."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {key: _strings(item, redact) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strings(item, redact) for item in value]
    return value


def write_set(evalset: EvalSet, path: str | Path) -> None:
    """Write ``evalset`` as JSON (indent 1) to ``path`` (``-``: standard output)."""
    text = evalset.model_dump_json(indent=1) + "\n"
    if str(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(path).write_text(text, encoding="utf-8")


def read_set(path: str | Path) -> list[ExportedSession]:
    """The cases in ``path``: an export file, a bare ledger file (``{"format": 1, "events":
    [...]}``; its session id is the file's stem), or a directory of either (every ``*.json``
    in it, by name). A case's name is its session id; when two files hold the same id, the
    later one's cases are named ``STEM/ID``. Anything else raises :class:`EvalSetError`
    naming the file."""
    where = Path(path)
    if where.is_dir():
        files = sorted(where.glob("*.json"))
        if not files:
            raise EvalSetError(f"{where} holds no *.json eval set or ledger files")
    elif where.is_file():
        files = [where]
    else:
        raise EvalSetError(f"no eval set at {where} (a file or a directory of *.json files)")
    cases: list[ExportedSession] = []
    seen: set[str] = set()
    for file in files:
        for case in _read_file(file):
            if case.session_id in seen:
                case = case.model_copy(update={"session_id": f"{file.stem}/{case.session_id}"})
            seen.add(case.session_id)
            cases.append(case)
    return cases


def _read_file(file: Path) -> list[ExportedSession]:
    expected = (f'an eval set ({{"format": "{SET_FORMAT}", "sessions": [...]}}) or a ledger '
                f'({{"format": 1, "events": [...]}})')
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise EvalSetError(f"cannot read {file}: {error.strerror or error}") from error
    except ValueError as error:
        raise EvalSetError(f"{file} is not JSON ({error}); expected {expected}") from error
    kind = data.get("format") if isinstance(data, dict) else None
    try:
        if kind == SET_FORMAT:
            return EvalSet.model_validate(data).sessions
        if isinstance(kind, int) and not isinstance(kind, bool) and "events" in data:
            events = load_ledger(data)
            agent = next((e.agent for e in events if isinstance(e, InvocationStart)), None)
            return [ExportedSession(session_id=file.stem, agent=agent, ledger=data)]
    except (ValidationError, ValueError) as error:
        first = str(error).splitlines()[0]
        raise EvalSetError(f"{file} is not a valid eval set or ledger: {first}") from error
    raise EvalSetError(f"{file} is not {expected}")
