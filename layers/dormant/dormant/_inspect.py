"""Render sessions for people: the ``dormant sessions list|show`` views."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from dormant._resume import validate_resume_state
from dormant.events import Event, Usage
from dormant.session import Session
from dormant.types import SessionSummary

__all__ = ["describe_input", "render_list", "render_session", "session_json"]

_WIDTH = 72


def _when(ms: int, *, date: bool = False) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, tz=UTC)
    if date:
        return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")
    return stamp.strftime("%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}"


def _short(value: Any, limit: int = _WIDTH) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render_list(summaries: list[SessionSummary]) -> str:
    """One line per session, newest first."""
    if not summaries:
        return "no sessions yet"
    rows = [("SESSION", "VERSION", "STATUS", "PRINCIPAL", "UPDATED")]
    rows += [(s.session_id, str(s.version), s.status.replace("_", " "), s.principal or "-",
              _when(s.updated_at, date=True)) for s in summaries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


def _cost(cost: float) -> str:
    """A cost in the price table's currency: cents kept, small sums to six places."""
    return f"{cost:,.2f}" if cost >= 1 else f"{cost:.6f}".rstrip("0").rstrip(".")


def _tokens(usage: Usage | dict[str, Any], *, detail: bool = True) -> str:
    """``tokens 1,210 in (1,000 cached) / 305 out (100 reasoning)``; with ``detail`` off,
    the in and out counts only."""
    if isinstance(usage, dict):
        usage = Usage.model_validate(usage)
    cached = f" ({usage.cached_tokens:,} cached)" if detail and usage.cached_tokens else ""
    reasoning = f" ({usage.reasoning_tokens:,} reasoning)" \
        if detail and usage.reasoning_tokens else ""
    return (f"tokens {usage.input_tokens:,} in{cached} / {usage.output_tokens:,} "
            f"out{reasoning}")


def _totals(usage: dict[str, Any]) -> str:
    """The header's line of what the session's turns used and cost (``Head.usage``)."""
    turns = usage.get("turns", 0)
    cost = usage.get("cost")
    priced = f"cost {_cost(cost)}" if cost is not None else "no price for its models"
    return f"  usage: {turns} turn{'s' if turns != 1 else ''} · {_tokens(usage)} · {priced}"


def _took(event: Event) -> str:
    """What an ending event's turn took: its time, tokens and cost (none: untimed)."""
    timing = getattr(event, "timing", None)
    if timing is None:
        return ""
    ms = timing.elapsed_ms
    parts = [f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.0f} s"]
    usage = timing.usage
    if usage.input_tokens or usage.output_tokens:
        parts.append(_tokens(usage, detail=False))
    if usage.cost is not None:
        parts.append(f"cost {_cost(usage.cost)}")
    return " · " + " · ".join(parts)


def _line(event: Event, waits: dict[str, str]) -> str:
    match event.type:
        case "invocation_start":
            return f"▶ run {event.invocation_id} started (agent {event.agent or '?'})"
        case "user":
            how = " (steer)" if event.steer else " (from the inbox)" if event.queued else ""
            return f"user{how}: {_short(event.text)}"
        case "assistant":
            return f"assistant: {_short(event.text)}"
        case "tool_call":
            return f"→ {event.name} called with {_short(event.args, 48)}  [{event.call_id}]"
        case "tool_yield":
            waits[event.call_id] = event.name
            return f"⏸ {event.name} yielded: waits for input on {_short(event.args, 40)}  " \
                   f"[{event.call_id}]"
        case "tool_deferred":
            waits[event.call_id] = event.name
            return f"⏸ {event.name} deferred: waits for its result from outside  " \
                   f"[{event.call_id}]"
        case "tool_call_draft":
            name = event.name or "a tool"
            return f"✎ draft of {name} (its arguments were still streaming when stopped): " \
                   f"{_short(event.args_text, 40)}" + (f"  [{event.call_id}]"
                                                       if event.call_id else "")
        case "invocation_yield":
            what = "tool input" if event.reason == "tool" else "the next user message"
            return f"⏸ run waiting for {what}"
        case "tool_input":
            name = waits.get(event.call_id, "call")
            return f"← input for {name}: {_short(event.input, 48)}  [{event.call_id}]"
        case "invocation_resume":
            return f"▶ run {event.invocation_id} resumed"
        case "approval_requested":
            waits[event.call_id] = event.name
            return f"⏸ {event.name} needs approval: {_short(event.args, 40)}  " \
                   f"[{event.approval_id}]"
        case "approval_decided":
            verdict = "approved" if event.approved else "denied"
            why = f" ({_short(event.reason, 40)})" if event.reason else ""
            return f"← {waits.get(event.call_id, 'call')} {verdict}{why}  [{event.approval_id}]"
        case "tool_result":
            if event.preliminary:
                return f"… {event.name} progress: {_short(event.result, 52)}"
            if event.denied:
                return f"✗ {event.name} denied: {_short(event.error, 56)}"
            outside = " (from outside)" if event.deferred else ""
            if event.error is not None:
                return f"✗ {event.name} failed{outside}: {_short(event.error, 56)}"
            return f"✓ {event.name} returned{outside} {_short(event.result, 52)}"
        case "timer_set":
            return f"⏱ timer {event.name} set for {_when(event.fire_at, date=True)}: " \
                   f"{_delivers(event.message, event.tool_input)}"
        case "timer_cancelled":
            return f"⏱ timer {event.name} cancelled"
        case "timer_fired":
            return f"⏱ timer {event.name} fired (due {_when(event.fire_at, date=True)})"
        case "state_delta":
            return "state: " + "; ".join(_op(op) for op in event.patch)
        case "error":
            return f"error ({event.code}): {_short(event.message)}"
        case "invocation_end":
            return f"■ run ended ({event.status})"
        case "invocation_failed":
            again = "retry with input.retry" if event.retryable else "not retryable"
            return f"✗ run failed ({event.code}): {_short(event.message, 48)} — {again}"
        case "retry":
            return f"↻ run {event.invocation_id} retried  [{event.retry_id}]"
        case "stop_requested":
            seen = "" if event.seen is None else f" at event {event.seen}"
            return f"■ stop{seen}: run {event.invocation_id} rewound to what the client saw"
        case "steer":
            return f"↪ steer joined run {event.invocation_id}  [{event.message_id}]"
        case "pause":
            where = f" at a step of run {event.invocation_id}" if event.invocation_id else ""
            return f"⏸ session paused{where}"
        case "resume":
            return "▶ session resumed"
        case "interrupt":
            return f"■ interrupted [{event.owner}]"
        case "queued":
            return f"✉ queued #{event.position}: {_short(event.text, 56)}  [{event.message_id}]"
        case "queue_edit":
            return f"✉ queued message edited: {_short(event.text, 48)}  [{event.message_id}]"
        case "queue_move":
            return f"✉ queued message moved to #{event.position}  [{event.message_id}]"
        case "queue_remove":
            return f"✉ queued message removed  [{event.message_id}]"
        case "queue_send_now":
            return f"✉ queued message sent now  [{event.message_id}]"
        case "input_requested":
            return f"⏸ input requested: {_short(event.prompt or '', 48)}  [{event.input_id}]"
        case "input_response":
            return f"← input {_short(event.value, 48)}  [{event.input_id}]"
        case "seed":
            return f"{event.role} (seed): {_short(event.text)}"
        case "compaction":
            return f"⇊ compacted {event.turns} turn(s) (events {event.covered_from}-" \
                   f"{event.tail_start - 1}) into a summary: {_short(event.summary, 48)}"
        case "reasoning":
            return f"(reasoning: {len(event.items)} item(s), kept for the model)"
        case "app_event":
            where = f"  [{event.event_id}]" if event.event_id else ""
            return f"◆ event {event.name} {_short(event.data, 56)}{where}"
        case "handoff":
            why = f" ({_short(event.reason, 40)})" if event.reason else ""
            return f"⇄ {event.from_agent} handed over to {event.to_agent}{why}  [{event.call_id}]"
    return event.type  # a type added later without a line here


def _scoped(event: Event) -> str:
    """A sub-agent's event is indented under its caller's call, one step per level, and
    labelled with its agent's path (``[concierge/billing]``); the session agent's is not."""
    scope = getattr(event, "scope", None)
    if scope is None:
        return ""
    path: str = scope.path
    return "  " * path.count("/") + f"[{path}] "


def _in(agent: str | None) -> str:
    """Which agent a pending item waits in: `` in concierge/billing`` for a sub-agent's."""
    return f" in {agent}" if agent else ""


def _delivers(message: str | None, tool_input: dict[str, Any] | None) -> str:
    """What a timer delivers: a user message, or an answer to a yielded call."""
    if message is not None:
        return f"message {json.dumps(_short(message, 48), ensure_ascii=False)}"
    answer = tool_input or {}
    return f"input for [{answer.get('call_id', '?')}] {_short(answer.get('input'), 40)}"


def _op(op: dict[str, Any]) -> str:
    path = str(op.get("path", "")).lstrip("/").replace("/", ".") or "(all)"
    if op.get("op") == "remove":
        return f"{path} removed"
    return f"{path} = {_short(op.get('value'), 40)}"


def describe_input(schema: dict[str, Any]) -> str:
    """What a call expects, as ``sessions show`` prints it: ``{answer: string}`` (each
    property of the JSON Schema with its type; ``any`` where it names no single type)."""
    props = schema.get("properties") or {}
    return "{" + ", ".join(
        f"{key}: {spec.get('type', 'any') if isinstance(spec, dict) else 'any'}"
        for key, spec in props.items()) + "}"


def _input_schemas(session: Session) -> dict[str, dict[str, Any]]:
    """The JSON Schema each unanswered call expects, by call id, as its ``tool_yield``
    recorded it (a ledger written before they were recorded has none)."""
    return {u.call_id: u.input_schema for u in validate_resume_state(session.events)
            if u.input_schema is not None}


def render_session(session: Session, expects: dict[str, str] | None = None) -> str:
    """A readable timeline: who said what, which tool yielded and what it waits for, what
    the session's turns used and cost, and each turn's time, tokens and cost. A sub-agent's
    events (an agent used as a tool) are indented under its caller's call and labelled with
    its agent's path; a pending item of a sub-agent says which agent it waits in.

    What a waiting call expects comes from the ledger (its ``tool_yield`` records the
    schema). ``expects``, when given, maps a yielding tool's name to a description of the
    input it takes and wins over the ledger's."""
    head = session.head
    status = session.status.replace("_", " ")
    out = [
        f"{session.session_id}",
        f"  version {session.version} · {status} · principal {head.principal or '-'} · "
        f"{len(session.events)} events",
        f"  created {_when(head.created_at, date=True)} · updated "
        f"{_when(head.updated_at, date=True)}",
        "",
    ]
    usage = head.usage
    if usage and (usage.get("input_tokens") or usage.get("output_tokens")
                  or usage.get("cost") is not None):  # (a model that counts no tokens: none)
        out.insert(-1, _totals(usage))
    waits: dict[str, str] = {}
    fork_of = head.fork_of
    if fork_of is not None:
        out.insert(-1, f"  fork of {fork_of['session']} at version {fork_of['version']} "
                       f"(its first {fork_of['seq']} events are inherited, not copied)")
    if head.parent is not None:
        out.insert(-1, f"  child of {head.parent['session']} (runs its call "
                       f"{head.parent['call_id']}; its end is that call's result)")
    for child in head.children:
        out.insert(-1, f"  child {child['session']} runs call {child['call_id']}")
    if head.compactions:
        out.insert(-1, f"  compacted {head.compactions} time(s): the model is sent the latest "
                       f"summary and events from {head.compacted_to} on")
    for position, event in enumerate(session.events, session.first_seq):
        if fork_of is not None and position == fork_of["seq"]:
            out.append(f"  ── forked here from {fork_of['session']} v{fork_of['version']} ──")
        out.append(f"  {_when(event.ts)}  {_scoped(event)}{_line(event, waits)}{_took(event)}")
    if session.state:
        out += ["", f"  state: {_short(session.state, 100)}"]
    timers = session.timers
    if timers:
        out += ["", "  timers:"]
    for timer in timers:
        out.append(f"    {timer.name} fires {_when(timer.fire_at, date=True)}: "
                   f"{_delivers(timer.message, timer.tool_input)}")
    pending = session.yielded_tools
    schemas = _input_schemas(session) if pending else {}
    approvals = session.pending_approvals
    deferred = session.deferred_tools
    out.append("")
    if pending or approvals or deferred:
        out.append("  pending:")
    for call in deferred:
        out.append(f"    {call.name} [{call.call_id}]{_in(call.agent)} is deferred: waits for "
                   "its result from "
                   "server code (input.tool_result)")
    for call in pending:
        out.append(f"    {call.name} [{call.call_id}]{_in(call.agent)} waits for input; it was "
                   "asked "
                   f"{_short(call.args, 48)}")
        described = (expects or {}).get(call.name)
        if described is None and call.call_id in schemas:
            described = describe_input(schemas[call.call_id])
        if described is not None:
            out.append(f"      expects input {described}")
    if pending:
        example: dict[str, Any] = {
            "sessionId": session.session_id,
            "tools": [{"callId": pending[0].call_id, "input": {"...": "..."}}]}
        out.append(f"  answer with: POST /turns {json.dumps(example)}")
    for request in approvals:
        out.append(f"    {request.tool} [{request.call_id}]{_in(request.agent)} needs approval "
                   f"{request.approval_id}; it would run with {_short(request.args, 40)}")
    if approvals:
        example = {"sessionId": session.session_id, "approvals": [
            {"approvalId": approvals[0].approval_id, "approved": True}]}
        out.append(f"  decide with: POST /turns {json.dumps(example)}")
    for request_ in session.pending_inputs:
        out.append(f"    input request [{request_.input_id}]: {_short(request_.prompt or '', 48)}")
    inbox = session.inbox
    if inbox:
        out += ["", "  inbox:"]
        out += [f"    #{index} {_short(item.text, 56)}  [{item.id}]"
                for index, item in enumerate(inbox)]
    if not pending and not approvals and not deferred and not session.pending_inputs:
        out.append("  pending: nothing")
    return "\n".join(out)


def session_json(session: Session) -> dict[str, Any]:
    """The ``--json`` form of ``sessions show``: a yielded call carries ``inputSchema``
    when its ``tool_yield`` recorded what the call expects."""
    schemas = _input_schemas(session)
    return {
        "sessionId": session.session_id,
        "version": session.version,
        "status": session.status,
        "principal": session.principal,
        "state": session.state,
        "yieldedTools": [_with_schema(c.model_dump(by_alias=True, mode="json"), schemas)
                         for c in session.yielded_tools],
        "pendingApprovals": [a.model_dump(by_alias=True, mode="json")
                             for a in session.pending_approvals],
        "deferredTools": [c.model_dump(by_alias=True, mode="json")
                          for c in session.deferred_tools],
        "timers": [t.model_dump(by_alias=True, mode="json", exclude_none=True)
                   for t in session.timers],
        "pendingInputs": [i.model_dump(by_alias=True, mode="json")
                          for i in session.pending_inputs],
        "inbox": [m.model_dump(by_alias=True, mode="json") for m in session.inbox],
        "forkOf": session.head.fork_of,
        "parent": ({"sessionId": session.head.parent["session"],
                    "callId": session.head.parent["call_id"]} if session.head.parent else None),
        "children": [{"sessionId": c["session"], "callId": c["call_id"]}
                     for c in session.head.children],
        "compactions": session.head.compactions,
        "compactedTo": session.head.compacted_to,
        "usage": session.head.usage,
        "createdAt": session.head.created_at,
        "updatedAt": session.head.updated_at,
        "events": [e.model_dump(mode="json") for e in session.events],
    }


def _with_schema(call: dict[str, Any], schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    schema = schemas.get(call["callId"])
    return call if schema is None else {**call, "inputSchema": schema}
