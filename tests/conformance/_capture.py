"""Every ledger a conformance test writes, captured for comparing two runs of the suite
(``tests/conformance/test_fast_path.py``: the fast path off, off again, then on).

With ``DORMANT_LEDGER_CAPTURE=DIR`` set, each test's successful commits (every
``CommitPolicy.write`` that landed: turns, write-aheads, claims) are written to
``DIR/<test id>.json`` as it ends: ``{"test": node id, "landed": [[session id, [event,
...]], ...]}``, in the order they landed. Unset (always, but for those runs), nothing is captured.

:func:`canonical` makes two runs' captures comparable: what differs between any two runs of
the same test is taken out (times, and random ids, renamed by first appearance); whatever
else differs is a difference in behaviour.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dormant._commit import CommitPolicy

ENV = "DORMANT_LEDGER_CAPTURE"

#: Random ids: 16+ hex digits (a process seed, a hash, a uuid's hex), with a counter after.
_RANDOM = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                     r"|[0-9a-f]{16,}(?:_[0-9a-f]+)?")
#: Fields that hold a time: they differ run to run, whatever the code does.
_TIMES = frozenset({"ts", "timing", "at", "fire_at", "since", "until", "created_at",
                    "updated_at", "elapsed_ms"})


@pytest.fixture(autouse=True)
def ledger_capture(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
                   ) -> Iterator[None]:
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    landed: list[list[Any]] = []
    write = CommitPolicy.write

    def captured(policy: CommitPolicy, session: Any) -> Any:
        events = [event.model_dump(mode="json") for event in session.new_events]
        result = write(policy, session)
        if result.ok:
            landed.append([session.session_id, events])
        return result

    monkeypatch.setattr(CommitPolicy, "write", captured)
    yield
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-200:]
    Path(folder, f"{name}.json").write_text(json.dumps({"test": request.node.nodeid,
                                                        "landed": landed}))


def canonical(captured: list[list[Any]]) -> str:
    """A capture as text, times taken out and random ids renamed ``<1>``, ``<2>``… in the
    order they first appear."""
    text = json.dumps(_timeless(captured), sort_keys=True)
    names: dict[str, str] = {}
    return _RANDOM.sub(lambda found: names.setdefault(found.group(), f"<{len(names) + 1}>"),
                       text)


def _timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _timeless(item) for key, item in value.items() if key not in _TIMES}
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value
