"""Forks: a new session whose history is another's up to a version, copy-on-write.

A fork owns no copy of what it inherits. Its head says, in ``lineage``, which sessions hold
the ledger positions below its fork point; stores read those positions from there, and write
only the fork's own events (from the fork point on). Each source keeps a record of the forks
that read it, so deleting a source hides it (its id is free at once) but keeps the events its
forks read until the last of them is deleted.

The fork's head is the source's head as it was at that version: the source's events up to
there folded afresh, less what belongs to the source alone: its timers (scheduled for the
source's id) and its control record's revision. State is the one part of a head the ledger
may not hold whole: what turns write is in it (``state_delta``), but a session's initial
state and state written by trusted code between turns are not. So a fork at the current
version takes the source's state as it is; a fork at an earlier version, the state the
ledger's state changes give.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from dormant._fold import apply
from dormant._head import Head
from dormant._ids import birth_ms
from dormant.errors import InputError
from dormant.events import Event
from dormant.types import StoredSession

__all__ = ["fork_head", "fork_lineage", "fork_of_head"]


def fork_lineage(source: Head, version: int, end: int) -> list[dict[str, Any]]:
    """The lineage of a fork of ``source`` at ``version`` (whose events end at ``end``): the
    source's own lineage cut at ``end``, then the source itself for what it wrote."""
    lineage: list[dict[str, Any]] = []
    start = 0
    for segment in source.lineage:
        if start >= end:
            break
        lineage.append({**segment, "end": min(int(segment["end"]), end)})
        start = int(segment["end"])
    if end > source.fork_point:
        lineage.append({"session": source.session_id, "created_at": source.created_at,
                        "version": version, "end": end})
    return lineage


def fork_head(source: StoredSession, version: int, end: int, session_id: str,
              owner: str | None) -> Head:
    """The head of a new fork of ``source`` (loaded whole) at ``version``, named
    ``session_id`` and owned by ``owner``; not yet written (version 0)."""
    if source.first_seq > 0:
        raise InputError(f"session {source.head.session_id}: its history before position "
                         f"{source.first_seq} has aged out; it cannot be forked")
    events: Sequence[Event] = source.events[:end]
    if len(events) != end:
        raise InputError(f"session {source.head.session_id}: version {version} ends at "
                         f"position {end}, past the {len(source.events)} events read")
    stamp = birth_ms()
    head = Head(session_id=session_id, principal=owner, created_at=stamp, updated_at=stamp,
                messages=0)
    for event in events:
        apply(head, event)
    if end == source.head.seq:
        head.state = copy.deepcopy(source.head.state)
    head.timers = {}  # the source's timers fire for the source
    head.control_rev = 0  # the fork has no control record yet
    head.usage = None  # what the source's turns cost, the source counts
    head.lineage = fork_lineage(source.head, version, end)
    head.fork_of = {"session": source.head.session_id, "version": version, "seq": end}
    return head


def fork_of_head(source: Head, session_id: str, owner: str | None) -> Head:
    """The head of a new fork of ``source`` at its current version, from that head alone (no
    event read): what :func:`fork_head` folds from the events up to there is the head as it
    stands, less what belongs to the source alone (its id, owner, times, timers, control
    revision, commit positions, lineage, what its turns cost); not yet written (version
    0)."""
    stamp = birth_ms()
    head = source.clone()
    head.session_id, head.principal = session_id, owner
    head.created_at = head.updated_at = stamp
    head.version = 0
    head.timers = {}  # the source's timers fire for the source
    head.control_rev = 0  # the fork has no control record yet
    head.usage = None  # what the source's turns cost, the source counts
    head.commit_seqs = []
    head.lineage = fork_lineage(source, source.version, source.seq)
    head.fork_of = {"session": source.session_id, "version": source.version,
                    "seq": source.seq}
    return head
