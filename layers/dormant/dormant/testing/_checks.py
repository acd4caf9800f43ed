"""Checks of a replay: what a team asks of a change before it ships.

A check is any function of a :class:`~dormant.testing.Replay` that returns None or True when
the replay passes, and False, a reason (a string) or a list of reasons when it does not; its
name is its ``__name__``. The few a team needs most are here, each a factory so it can take
options: :func:`same_tools` (the tool trajectory, names and arguments), :func:`no_new_approvals`,
:func:`same_questions`, :func:`same_status`, :func:`no_orphans`, :func:`similar_text` (a text
score floor) and :func:`judge`, an LLM judge run on any dormant model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from dormant.models._base import ModelRequest, TextDelta, UserMessage
from dormant.tools import Signal

if TYPE_CHECKING:
    from dormant.models._base import Model
    from dormant.testing._outcomes import TurnDiff
    from dormant.testing._replay import Replay

__all__ = ["DEFAULT_CHECKS", "Check", "CheckResult", "judge", "no_new_approvals", "no_orphans",
           "run_checks", "same_questions", "same_status", "same_tools", "similar_text"]

Check = Callable[["Replay"], Any]


class CheckResult(BaseModel):
    """One check of one replay: passed, or the reasons it did not."""

    model_config = ConfigDict(frozen=True)

    name: str
    passed: bool
    reasons: list[str] = []


class _Named:
    """A check with a name (and the options it was made with)."""

    def __init__(self, name: str, run: Callable[[Replay], list[str]]) -> None:
        self.__name__ = name
        self._run = run

    def __call__(self, replayed: Replay) -> list[str]:
        return self._run(replayed)

    def __repr__(self) -> str:
        return self.__name__


def _per_turn(name: str, failing: Callable[[TurnDiff], str | None]) -> _Named:
    def run(replayed: Replay) -> list[str]:
        return [f"turn {turn.index + 1} ({turn.recorded.input}): {reason}"
                for turn in replayed.diff.turns
                if turn.replayed is not None and (reason := failing(turn)) is not None]
    return _Named(name, run)


def _field(turn: TurnDiff, field: str) -> str | None:
    assert turn.replayed is not None
    was, now = getattr(turn.recorded, field), getattr(turn.replayed, field)
    if was == now:
        return None
    return f"{field} {', '.join(was) or 'none'} -> {', '.join(now) or 'none'}"


def same_tools() -> Check:
    """Each turn calls the same tools, in the same order, with the same arguments."""
    return _per_turn("same_tools", lambda turn: _field(turn, "tools"))


def no_new_approvals() -> Check:
    """No turn asks a person to approve a call its recording did not."""
    return _per_turn("no_new_approvals", lambda turn: (
        f"new approval of {', '.join(turn.new_approvals)}" if turn.new_approvals else None))


def same_questions() -> Check:
    """Each turn asks people the same questions (yielded tools and input requests)."""
    return _per_turn("same_questions", lambda turn: _field(turn, "questions"))


def same_status() -> Check:
    """Each turn ends as its recording did (completed, waiting, failed…)."""
    def status(turn: TurnDiff) -> str | None:
        assert turn.replayed is not None
        was, now = turn.recorded.status, turn.replayed.status
        return None if was == now else f"status {was} -> {now}"
    return _per_turn("same_status", status)


def no_orphans() -> Check:
    """Every recorded input still fits: each answer, decision or result finds its call."""
    return _Named("no_orphans", lambda replayed: [
        f"{orphan.input}: {orphan.reason}" for orphan in replayed.orphans])


def similar_text(at_least: float = 0.8) -> Check:
    """Each turn's text scores at least ``at_least`` against its recording's (difflib's
    ratio over words, 0 to 1)."""
    if not 0 <= at_least <= 1:
        raise ValueError(f"similar_text(at_least=...) is a score from 0 to 1, got {at_least}")
    return _per_turn(f"similar_text({at_least:g})", lambda turn: (
        f"text score {turn.text_score:.2f} < {at_least:g}"
        if turn.text_score < at_least else None))


#: What ``dormant eval`` checks unless told otherwise.
DEFAULT_CHECKS: tuple[Callable[[], Check], ...] = (
    no_orphans, same_tools, no_new_approvals, same_questions, same_status)

JUDGE_SYSTEM = (
    "You compare two replies an AI agent gave to the same conversation: the one it gave before "
    "a change (RECORDED) and the one it gives now (NEW). Decide whether the NEW reply meets "
    "the criteria. Answer with one line: PASS or FAIL, then a colon and the reason in a few "
    "words.")


def judge(model: Model, criteria: str = "The new reply serves the user at least as well as "
          "the recorded one: it is correct, complete and polite.") -> Check:
    """An LLM judge: ``model`` (any dormant model: OpenAI, Bedrock, scripted) reads each
    turn's recorded and new text against ``criteria`` and answers PASS or FAIL; a turn it
    fails, or whose answer is neither, fails the check with its reason. Turns with no text
    on either side are not judged. A model call per judged turn."""

    def failing(turn: TurnDiff) -> str | None:
        assert turn.replayed is not None
        if not turn.recorded.text and not turn.replayed.text:
            return None
        verdict = _ask(model, f"Criteria: {criteria}\n\nINPUT: {turn.recorded.input}\n\n"
                              f"RECORDED: {turn.recorded.text}\n\nNEW: {turn.replayed.text}")
        word, _, reason = verdict.strip().partition(":")
        if word.strip().upper() == "PASS":
            return None
        if word.strip().upper() == "FAIL":
            return f"judged FAIL: {reason.strip() or 'no reason given'}"
        return f"the judge answered neither PASS nor FAIL: {verdict.strip()[:120]!r}"

    return _per_turn("judge", failing)


def _ask(model: Model, question: str) -> str:
    request = ModelRequest(system=[JUDGE_SYSTEM], tools=[], messages=[UserMessage(question)])
    return "".join(chunk.text for chunk in model.stream(request, signal=Signal())
                   if isinstance(chunk, TextDelta))


def run_checks(replayed: Replay, checks: Sequence[Check]) -> list[CheckResult]:
    """Each check's result on ``replayed``. A check that raises fails with the error."""
    results = []
    for check in checks:
        name = getattr(check, "__name__", None) or type(check).__name__
        try:
            said = check(replayed)
        except Exception as error:  # a team's check is code like any other
            results.append(CheckResult(name=name, passed=False,
                                       reasons=[f"the check raised {type(error).__name__}: "
                                                f"{error}"]))
            continue
        results.append(CheckResult(name=name, passed=not _reasons(said),
                                   reasons=_reasons(said)))
    return results


def _reasons(said: Any) -> list[str]:
    if said is None or said is True:
        return []
    if said is False:
        return ["failed"]
    if isinstance(said, str):
        return [said]
    if isinstance(said, Iterable):
        return [str(each) for each in said]
    raise TypeError(f"a check returns None, a bool, a reason or reasons; got {said!r}")
