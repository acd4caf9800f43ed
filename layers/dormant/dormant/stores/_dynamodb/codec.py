"""The compact encoding of a version item's payload: a commit's events and the session head.

The store's private business: what goes in is ledger events and a ``Head``, what comes out is
exactly the same objects (``load_events`` and ``Head.model_validate`` of the same JSON the
models dump). Everything here is **format 1** and permanent: an item written today must decode
with any later release, so a change to a rule below is a new format (a new first byte), never
an edit.

A payload is one JSON document, ``{"s": first position, "i": invocation id, "ev": [events],
"h": head | "d": head delta}`` (neither: an empty delta), stored as bytes: a format byte,
then either the UTF-8 JSON (``RAW``) or its raw DEFLATE stream primed with a preset
dictionary of the ledger's usual words (``DEFLATE``), whichever is smaller.

Events: each is its JSON form (``model_dump(mode="json")``) less what can be restored:

- ``invocation_id`` when it is the document's ``"i"`` (most events of a commit share one);
- ``ts`` when it equals the previous event's (a commit's events are stamped in the same
  millisecond or close);
- every field holding its model's plain default (``False``, ``None``, ``""``, ``0``, ``[]``,
  ``{}``…; the defaults as of format 1 are frozen in :data:`EVENT_DEFAULTS` and restored from
  there, so a later change of a model default cannot change what an old item means).

The head: a *checkpoint* item carries it whole (``"h"``: the head's JSON less the session id and
version, which the item's keys give, and less fields at their defaults). Every other item
carries a *delta* (``"d"``): the fields whose value differs from :func:`predict`, which folds
the previous head over the commit's events with a few fixed rules (positions, the last event,
the turn and commit indexes, message and invocation digests). An ordinary turn's delta is
empty: its head costs nothing beyond the events. In both, the head's windows are stored
tightly: digests as one base64 string, positions as the first and the gaps. The predictor is
not the session fold (``dormant._head.apply``), which may change between releases; it is
frozen here, and when it guesses wrong the delta simply holds the field.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import re
import typing
import zlib
from typing import Any

from dormant import events as ev
from dormant._head import preview_of

__all__ = [
    "DEFLATE",
    "EVENT_DEFAULTS",
    "HEAD_DEFAULTS",
    "RAW",
    "decode_events",
    "decode_head",
    "encode_events",
    "encode_head",
    "head_delta",
    "pack",
    "predict",
    "unpack",
]

RAW = 1
DEFLATE = 2

#: Primes DEFLATE with what a ledger usually says, so even a small commit compresses.
#: Part of format 1: never edit it (a new dictionary is a new format byte).
_ZDICT = (
    b'"tool_call_id":"call_","name":"","args":{},"result":{"ok":true},"preliminary":'
    b'"approval_requested","approval_id":"appr_","approved":true,"reason":null,'
    b'"tool_result","tool_call","call_id":"call_","state_delta","patch":[{"op":"replace",'
    b'"path":"/","value":},"invocation_yield","reason":"tool","tool_yield","tool_input",'
    b'"input":,"invocation_resume","status":"yielded","error":{"code":"","message":""},'
    b'{"s":0,"i":"inv_","ev":[{"id":"evt_","type":"invocation_start","ts":1,"agent":""},'
    b'{"id":"evt_","type":"user","text":"","message_id":"msg_"},'
    b'{"id":"evt_","type":"assistant","text":"","usage":{"input_tokens":0,"output_tokens":0}},'
    b'{"id":"evt_","type":"invocation_end","status":"completed"}],"d":{}}'
)
_MEMBERS: tuple[type[Any], ...] = typing.get_args(ev.LedgerEvent)


def _plain(value: Any) -> bool:
    return value is None or (value in (False, 0, "", [], {}) and not isinstance(value, float))


def _event_defaults() -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {}
    for model in _MEMBERS:
        name = model.model_fields["type"].default
        table[name] = {
            field: info.default for field, info in model.model_fields.items()
            if field not in ("type", "seq", "invocation_id") and info.default_factory is None
            and _plain(info.default)
        }
    return table


#: Per event type, the fields omitted when at their default and restored on decode (format 1;
#: ``tests/unit/test_dynamodb_codec.py`` pins it: a model default that changes fails there).
EVENT_DEFAULTS: dict[str, dict[str, Any]] = _event_defaults()

#: Head fields omitted from a checkpoint when at these values (format 1, pinned by the tests).
HEAD_DEFAULTS: dict[str, Any] = {
    "format": 1, "seq": 0, "state": {}, "principal": None, "created_at": 0, "updated_at": 0,
    "open_invocation": None, "agent": None, "parked": None, "step": [], "inbox": 0,
    "last_user_ts": 0, "turn_starts": [], "message_ids": [], "last_event": None, "timers": {},
    "failed": False, "messages": -1, "settled_ids": [], "retries": 0, "calls": 0,
    "paused": False, "queue": [], "inputs": [], "control_rev": 0, "invocations": [],
    "commit_seqs": [], "lineage": [], "fork_of": None, "compacted_to": 0, "compactions": 0,
    "lease": 0, "takeovers": 0, "preview": None,
}
#: Keys of the head's JSON the item's keys give instead.
_KEYED = ("session_id", "version")

# The predictor's windows (format 1: the sizes the head used when it was written; if the
# session fold keeps more or fewer, the delta holds the list).
_TURNS = 64
_MESSAGES = 32
_COMMITS = 32
_INVOCATIONS = 16


# --- bytes -----------------------------------------------------------------------------------


def pack(doc: dict[str, Any]) -> bytes:
    """A payload document as stored: format byte + JSON, deflated when that is smaller."""
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    squeezer = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _ZDICT)
    squeezed = squeezer.compress(text) + squeezer.flush()
    if len(squeezed) < len(text):
        return bytes([DEFLATE]) + squeezed
    return bytes([RAW]) + text


def unpack(data: bytes) -> dict[str, Any]:
    kind, body = data[0], data[1:]
    if kind == DEFLATE:
        opener = zlib.decompressobj(-15, _ZDICT)
        body = opener.decompress(body) + opener.flush()
    elif kind != RAW:
        raise ValueError(f"unknown payload format {kind}: written by a newer dormant?")
    doc: dict[str, Any] = json.loads(body)
    return doc


# --- events ----------------------------------------------------------------------------------


def encode_events(dumped: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Events' JSON forms (or S3 pointers) -> (the shared invocation id, compact forms)."""
    invocations = [e.get("invocation_id") for e in dumped if "type" in e]
    shared = max(set(invocations), key=invocations.count) if invocations else None
    compact: list[dict[str, Any]] = []
    last_ts: int | None = None
    for event in dumped:
        if "type" not in event:  # an S3 pointer
            compact.append(event)
            continue
        defaults = EVENT_DEFAULTS.get(event["type"], {})
        out: dict[str, Any] = {}
        for key, value in event.items():
            if key == "invocation_id" and value == shared:
                continue
            if key == "ts" and value == last_ts:
                continue
            if key in defaults and value == defaults[key] and type(value) is type(
                    defaults[key]):
                continue
            out[key] = value
        last_ts = event["ts"]
        compact.append(out)
    return shared, compact


def decode_events(shared: str | None, compact: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inverse of :func:`encode_events` (pointers pass through)."""
    full: list[dict[str, Any]] = []
    last_ts: Any = None
    for event in compact:
        if "type" not in event:
            full.append(event)
            continue
        out = {**copy.deepcopy(EVENT_DEFAULTS.get(event["type"], {})), "invocation_id": shared}
        out.update(event)
        out.setdefault("ts", last_ts)
        last_ts = out["ts"]
        full.append(out)
    return full


# --- the head --------------------------------------------------------------------------------


#: The head's windows of 48-bit digests (12 hex digits each): stored as one base64 string of
#: their bytes (random bytes do not compress: 8 characters each instead of 12).
_DIGESTS = ("message_ids", "invocations", "settled_ids")
#: The head's windows of ascending positions: stored as the first and the gaps (``["+", …]``).
_POSITIONS = ("turn_starts", "commit_seqs")
_HEX12 = re.compile(r"[0-9a-f]{12}")


def _pack_field(key: str, value: Any) -> Any:
    if key in _DIGESTS and isinstance(value, list) and value and all(
            isinstance(v, str) and _HEX12.fullmatch(v) for v in value):
        return base64.b64encode(bytes.fromhex("".join(value))).decode()
    if key in _POSITIONS and isinstance(value, list) and value and all(
            type(v) is int for v in value):
        return ["+", value[0], *(b - a for a, b in itertools.pairwise(value))]
    return value


def _unpack_field(key: str, value: Any) -> Any:
    if key in _DIGESTS and isinstance(value, str):
        joined = base64.b64decode(value).hex()
        return [joined[i:i + 12] for i in range(0, len(joined), 12)]
    if key in _POSITIONS and isinstance(value, list) and value and value[0] == "+":
        return list(itertools.accumulate(value[1:]))
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON, types included (``1 == 1.0 == True`` in Python, not in a ledger)."""
    return a is b or json.dumps(a) == json.dumps(b)


def encode_head(head: dict[str, Any]) -> dict[str, Any]:
    """A head's JSON (``Head.model_dump(mode="json")``) as a checkpoint carries it."""
    return {k: _pack_field(k, v) for k, v in head.items()
            if k not in _KEYED and not (k in HEAD_DEFAULTS and _same(v, HEAD_DEFAULTS[k]))}


def decode_head(stored: dict[str, Any], session_id: str, version: int) -> dict[str, Any]:
    """A checkpoint's head back to the head's full JSON."""
    return {**copy.deepcopy(HEAD_DEFAULTS),
            **{k: _unpack_field(k, v) for k, v in stored.items()},
            "session_id": session_id, "version": version}


def head_delta(written: dict[str, Any], predicted: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``written`` that :func:`predict` did not guess."""
    delta = {k: _pack_field(k, v) for k, v in written.items()
             if k not in _KEYED and (k not in predicted or not _same(predicted[k], v))}
    dropped = [k for k in predicted if k not in written]
    if dropped:
        delta["-"] = dropped
    return delta


def apply_delta(predicted: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    head = {**predicted, **{k: _unpack_field(k, v) for k, v in delta.items() if k != "-"}}
    for key in delta.get("-", []):
        head.pop(key, None)
    return head


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def predict(prev: dict[str, Any], events: list[dict[str, Any]], first_seq: int,
            version: int, updated_at: int) -> dict[str, Any]:
    """The head after ``prev`` took ``events`` (full JSON forms, positions from ``first_seq``)
    as version ``version`` written at ``updated_at``, by format 1's fixed rules."""
    head = dict(prev)  # what changes is replaced below, never changed in place
    head["version"] = version
    head["updated_at"] = updated_at
    head["seq"] = first_seq + len(events)
    head["commit_seqs"] = [*head["commit_seqs"], first_seq][-_COMMITS:]
    if events and "id" in events[-1]:
        head["last_event"] = events[-1]["id"]
    for position, event in enumerate(events, first_seq):
        kind = event.get("type")
        if kind == "user":
            if not event.get("queued"):
                head["message_ids"] = [*head["message_ids"],
                                       _digest(event["message_id"])][-_MESSAGES:]
                if head["messages"] >= 0:
                    head["messages"] += 1
            head["turn_starts"] = [*head["turn_starts"], position][-_TURNS:]
            head["last_user_ts"] = max(head["last_user_ts"], event["ts"])
            if not event.get("steer") and (head["open_invocation"] is None
                                           or head["parked"] == "message"):
                head["inbox"] += 1
            if not event.get("steer") and head.get("preview") is None:
                head["preview"] = preview_of(event["text"])
        elif kind == "invocation_start":
            if event.get("invocation_id") is not None:
                head["invocations"] = [*head["invocations"],
                                       _digest(event["invocation_id"])][-_INVOCATIONS:]
            head.update(open_invocation=event.get("invocation_id"), retries=0, calls=0,
                        parked=None, step=[], inbox=0,
                        agent=event.get("agent") or head["agent"])
        elif kind == "invocation_end":
            head.update(open_invocation=None, parked=None, step=[], failed=False)
    return head
