"""The compact encoding of a version item's payload: a commit's events and the session head.

The store's private business: what goes in is ledger events and a ``Head``, what comes out is
exactly the same objects (``load_events`` and ``Head.model_validate`` of the same JSON the
models dump). Every format is permanent: an item written today must decode with any later
release, so a change to a rule below is a new format (new first bytes), never an edit. Items
of **format 1** (first byte 1 or 2) are in users' tables and decode as they always did
(:func:`decode_events_format1`); new items are **format 2** (first byte 3 or 4).

A payload is one JSON document, ``{"s": first position, "i": invocation id, "ev": [events],
"h": head | "d": head delta, "l": listed}`` (neither ``h`` nor ``d``: an empty delta), stored
as bytes: a format byte, then either the UTF-8 JSON (``RAW``, ``RAW_2``) or its raw DEFLATE
stream primed with a preset dictionary of the ledger's usual words (``DEFLATE``,
``DEFLATE_2``), whichever is smaller.

Events: each is its JSON form (``model_dump(mode="json")``) less what can be restored:

- ``invocation_id`` when it is the document's ``"i"`` (most events of a commit share one);
- every field holding its model's plain default (``False``, ``None``, ``""``, ``0``, ``[]``,
  ``{}``…; the defaults as of format 1 are frozen in :data:`EVENT_DEFAULTS` and restored from
  there, so a later change of a model default cannot change what an old item means);
- ``ts``: format 1 drops it when it equals the previous event's; format 2 stores each as its
  difference from the previous event's, the first event's from the item's ``ua`` (the
  commit's updated-at, which the item carries anyway), and drops it when that is 0: an
  ordinary turn's four events carry no 13-digit time at all, only a few small differences.

``"l"`` (format 2): on an item outside ``list``'s index (no ``own``), its ``ua`` less the
updated-at of the session's newest index entry (format 1 kept that as an attribute, ``li``).

The head: a *checkpoint* item carries it whole (``"h"``: the head's JSON less the session id and
version, which the item's keys give, less fields at their defaults, and in format 2 less
``updated_at``, the item's ``ua``). Every other item carries a *delta* (``"d"``): the fields
whose value differs from :func:`predict`, which folds the previous head over the commit's
events with a few fixed rules (positions, the last event, the turn and commit indexes, message
and invocation digests). An ordinary turn's delta is empty: its head costs nothing beyond the
events. In both, the head's windows are stored tightly: digests as one base64 string,
positions as the first and the gaps. The predictor is not the session fold
(``dormant._fold.apply``), which may change between releases; it is frozen here (the same in
both formats), and when it guesses wrong the delta simply holds the field.
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
    "DEFLATE_2",
    "EVENT_DEFAULTS",
    "HEAD_DEFAULTS",
    "RAW",
    "RAW_2",
    "apply_delta",
    "decode_events",
    "decode_events_format1",
    "decode_head",
    "encode_events",
    "encode_head",
    "format_of",
    "head_delta",
    "pack",
    "predict",
    "unpack",
]

#: Format 1's first bytes (read only: in tables written before format 2).
RAW = 1
DEFLATE = 2
#: Format 2's first bytes (what is written).
RAW_2 = 3
DEFLATE_2 = 4
_FORMATS = {RAW: 1, DEFLATE: 1, RAW_2: 2, DEFLATE_2: 2}

#: Primes DEFLATE with what a ledger usually says, so even a small commit compresses.
#: Part of formats 1 and 2: never edit it (a new dictionary is a new format byte).
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
            # (``scope`` is left out of the JSON when None: nothing to restore)
            if field not in ("type", "seq", "invocation_id", "scope")
            and info.default_factory is None
            and _plain(info.default)
        }
    return table


#: Per event type, the fields omitted when at their default and restored on decode (formats 1
#: and 2;
#: ``tests/unit/test_dynamodb_codec.py`` pins it: a model default that changes fails there).
EVENT_DEFAULTS: dict[str, dict[str, Any]] = _event_defaults()

# What decoding restores per type, split once: values safe to share (``False``, ``None``, ``""``,
# ``0``) and the fields needing a fresh ``[]`` / ``{}`` each time (no deep copy per event).
_SHARED = {kind: {k: v for k, v in d.items() if not isinstance(v, (list, dict))}
           for kind, d in EVENT_DEFAULTS.items()}
_FRESH = {kind: tuple((k, type(v)) for k, v in d.items() if isinstance(v, (list, dict)))
          for kind, d in EVENT_DEFAULTS.items()}

#: Head fields omitted from a checkpoint when at these values (formats 1 and 2, pinned by the
#: tests).
HEAD_DEFAULTS: dict[str, Any] = {
    "format": 1, "seq": 0, "state": {}, "principal": None, "created_at": 0, "updated_at": 0,
    "open_invocation": None, "agent": None, "parked": None, "step": [], "inbox": 0,
    "last_user_ts": 0, "turn_starts": [], "message_ids": [], "last_event": None, "timers": {},
    "failed": False, "messages": -1, "settled_ids": [], "retries": 0, "calls": 0,
    "paused": False, "queue": [], "inputs": [], "control_rev": 0, "invocations": [],
    "commit_seqs": [], "lineage": [], "fork_of": None, "compacted_to": 0, "compactions": 0,
    "lease": 0, "takeovers": 0, "preview": None, "holder": "", "usage": None,
    "parent": None, "children": [],
}
#: Keys of the head's JSON the item's keys give instead.
_KEYED = ("session_id", "version")
#: Keys a format 2 checkpoint leaves out besides: the item's ``ua`` is the head's updated-at.
_ITEM_GIVES = (*_KEYED, "updated_at")

# The predictor's windows (formats 1 and 2: the sizes the head used when it was written; if the
# session fold keeps more or fewer, the delta holds the list).
_TURNS = 64
_MESSAGES = 32
_COMMITS = 32
_INVOCATIONS = 16


# --- bytes -----------------------------------------------------------------------------------


def pack(doc: dict[str, Any]) -> bytes:
    """A payload document as stored (format 2): format byte + JSON, deflated when that is
    smaller."""
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    squeezer = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _ZDICT)
    squeezed = squeezer.compress(text) + squeezer.flush()
    if len(squeezed) < len(text):
        return bytes([DEFLATE_2]) + squeezed
    return bytes([RAW_2]) + text


def format_of(data: bytes) -> int:
    """The payload format (1 or 2) of a version item's bytes (its first part's)."""
    try:
        return _FORMATS[data[0]]
    except (KeyError, IndexError):
        raise ValueError(f"unknown payload format {data[:1]!r}: written by a newer dormant?"
                         ) from None


def unpack(data: bytes) -> dict[str, Any]:
    """A payload's document, of either format (:func:`format_of` says which, and refuses an
    unknown one)."""
    format_of(data)
    body = data[1:]
    if data[0] in (DEFLATE, DEFLATE_2):
        opener = zlib.decompressobj(-15, _ZDICT)
        body = opener.decompress(body) + opener.flush()
    doc: dict[str, Any] = json.loads(body)
    return doc


# --- events ----------------------------------------------------------------------------------


def encode_events(dumped: list[dict[str, Any]],
                  updated_at: int = 0) -> tuple[str | None, list[dict[str, Any]]]:
    """Events' JSON forms (or S3 pointers) -> (the shared invocation id, compact forms), in
    format 2 (``updated_at``: the item's ``ua``, the first event's time is relative to it;
    0: that time is stored whole)."""
    invocations = [e.get("invocation_id") for e in dumped if "type" in e]
    shared = max(set(invocations), key=invocations.count) if invocations else None
    compact: list[dict[str, Any]] = []
    last_ts = updated_at
    for event in dumped:
        if "type" not in event:  # an S3 pointer
            compact.append(event)
            continue
        defaults = EVENT_DEFAULTS.get(event["type"], {})
        out: dict[str, Any] = {}
        for key, value in event.items():
            if key == "ts":
                if value != last_ts:
                    out[key] = value - last_ts
                continue
            if key == "invocation_id" and value == shared:
                continue
            if key in defaults and value == defaults[key] and type(value) is type(
                    defaults[key]):
                continue
            out[key] = value
        last_ts = event["ts"]
        compact.append(out)
    return shared, compact


def decode_events(shared: str | None, compact: list[dict[str, Any]],
                  updated_at: int = 0) -> list[dict[str, Any]]:
    """The inverse of :func:`encode_events` (format 2; pointers pass through)."""
    full: list[dict[str, Any]] = []
    last_ts = updated_at
    for event in compact:
        kind = event.get("type")
        if kind is None:
            full.append(event)
            continue
        out = {**_SHARED.get(kind, {}), "invocation_id": shared}
        for key, fresh in _FRESH.get(kind, ()):
            out[key] = fresh()
        out.update(event)
        last_ts = out["ts"] = last_ts + event.get("ts", 0)
        full.append(out)
    return full


def decode_events_format1(shared: str | None,
                          compact: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A format 1 item's events (each ``ts`` absolute, dropped when equal to the previous
    event's; pointers pass through). Never edit: items in users' tables are written so."""
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
    """A head's JSON (``Head.model_dump(mode="json")``) as a format 2 checkpoint carries it
    (its ``updated_at`` is the item's ``ua``)."""
    return {k: _pack_field(k, v) for k, v in head.items()
            if k not in _ITEM_GIVES and not (k in HEAD_DEFAULTS and _same(v, HEAD_DEFAULTS[k]))}


def decode_head(stored: dict[str, Any], session_id: str, version: int,
                updated_at: int) -> dict[str, Any]:
    """A checkpoint's head back to the head's full JSON, of either format (format 1 keeps
    ``updated_at`` in the head, which wins over the item's ``ua``: they are equal)."""
    return {**copy.deepcopy(HEAD_DEFAULTS), "updated_at": updated_at,
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
    as version ``version`` written at ``updated_at``, by the formats' fixed rules."""
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
