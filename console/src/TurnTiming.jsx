// What a turn took, as the ledger keeps it: the event that ends a request's turn
// (invocation_end, invocation_yield, invocation_failed, a pause) carries its `timing`, the
// store's phases, each model call (time to its first token, tokens, cost) and each tool on
// one time axis from the request's start; the commit comes after `elapsed_ms` (its own time
// is not on the ledger). And the session's tokens and cost: the head's `usage` when the
// server sends it, else the sum of the timings this page loaded.

import { useState } from "preact/hooks";

const PHASES = { load: "load", claim: "claim", write_ahead: "write-ahead" };

/** Milliseconds as a person reads them: `85 ms`, `1.25 s`. */
export const duration = (ms) => (ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`);

const count = (n) => (n || 0).toLocaleString("en-US");

/**
 * A cost in the price table's own currency (`0.0123`: the app's prices say which), a tiny one
 * to two significant digits; unpriced: `—`.
 */
export function money(cost) {
  if (cost === null || cost === undefined) return "—";
  if (cost === 0 || cost >= 0.0001) return cost.toFixed(4);
  return cost.toFixed(1 - Math.floor(Math.log10(cost)));
}

/** `1,200 in · 80 out` with the cached and reasoning parts when there are any. */
export function tokens(usage) {
  const u = usage || {};
  const input = `${count(u.input_tokens)} in${u.cached_tokens ? ` (${count(u.cached_tokens)} cached)` : ""}`;
  const output = `${count(u.output_tokens)} out${u.reasoning_tokens ? ` (${count(u.reasoning_tokens)} reasoning)` : ""}`;
  return `${input} · ${output}`;
}

/** Whether `usage` says anything: some tokens, or a cost. */
const reported = (u) => Boolean(u && (u.input_tokens || u.output_tokens || (u.cost !== null && u.cost !== undefined)));

/** Tokens and cost in a few words (`no tokens reported` for a model that tells none). */
const spent = (usage) => (reported(usage) ? `${tokens(usage)} tokens · cost ${money(usage.cost)}` : "no tokens reported");

/** A cost summed: null (unpriced) unless some part had a price. */
const addCost = (a, b) => (a === null || a === undefined ? (b ?? null) : b === null || b === undefined ? a : a + b);

/**
 * The session's tokens and cost, in the ledger's field names (snake_case), with `turns`: the
 * head's `usage` (camelCase on the wire) when the server sends it, else the sum of the
 * timings of `events`. Null when no turn was timed.
 */
export function sessionUsage(view, events) {
  const u = view?.usage;
  if (u && typeof u === "object") {
    return { input_tokens: u.inputTokens || 0, output_tokens: u.outputTokens || 0, cached_tokens: u.cachedTokens || 0,
      reasoning_tokens: u.reasoningTokens || 0, cost: u.cost ?? null, turns: u.turns || 0 };
  }
  const timed = events.filter((e) => e.timing);
  if (!timed.length) return null;
  const sum = { input_tokens: 0, output_tokens: 0, cached_tokens: 0, reasoning_tokens: 0, cost: null, turns: timed.length };
  for (const { timing } of timed) {
    const t = timing.usage || {};
    for (const key of ["input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"]) sum[key] += t[key] || 0;
    sum.cost = addCost(sum.cost, t.cost);
  }
  return sum;
}

/** The session's tokens and cost, for its header. */
export function UsageTotal({ usage }) {
  if (!reported(usage)) return null;
  const total = usage.input_tokens + usage.output_tokens;
  return (
    <span class="usage-total" aria-label="Tokens and cost">
      used {count(total)} tokens ({tokens(usage)}) · cost {money(usage.cost)}
      {usage.turns ? ` over ${usage.turns} timed turn${usage.turns === 1 ? "" : "s"}` : ""}
    </span>
  );
}

/** How long a phase, call or tool took, and from when. */
const took = (part) => `${duration(part.duration_ms)}, from ${duration(part.start_ms)}`;

/** The timing's rows in the order they started: `{key, kind, label, start, length, mark?,
 * failed?, figures}` (`length` null: the commit, whose own time is not on the ledger). */
export function timingRows(timing) {
  const rows = [];
  for (const [index, p] of (timing.phases || []).entries()) {
    const store = [p.requests != null ? `${p.requests} request${p.requests === 1 ? "" : "s"}` : "",
      p.capacity != null ? `${p.capacity} capacity units` : ""].filter(Boolean);
    rows.push({ key: `phase-${index}`, kind: "phase", label: PHASES[p.name] || p.name, start: p.start_ms, length: p.duration_ms,
      figures: [took(p), ...store] });
  }
  for (const c of timing.model_calls || []) {
    const name = c.response_model || c.model;
    rows.push({ key: `call-${c.step}-${c.start_ms}`, kind: "call", failed: Boolean(c.error), label: `model call ${c.step}`, detail: name,
      start: c.start_ms, length: c.duration_ms, mark: c.first_token_ms,
      figures: [took(c), c.first_token_ms != null ? `first token after ${duration(c.first_token_ms)}` : "",
        spent(c.usage), c.finish_reason ? `finished: ${c.finish_reason}` : "",
        c.error ? `failed: ${c.error}` : ""].filter(Boolean) });
  }
  for (const t of timing.tools || []) {
    rows.push({ key: `tool-${t.call_id}`, kind: "tool", failed: Boolean(t.error_type) || t.outcome === "error", label: `tool ${t.name}`,
      start: t.start_ms, length: t.duration_ms,
      figures: [took(t), t.outcome, t.error_type || ""].filter(Boolean) });
  }
  rows.sort((a, b) => a.start - b.start);
  rows.push({ key: "commit", kind: "commit", label: "commit", start: timing.elapsed_ms, length: null, figures: [`commit follows, from ${duration(timing.elapsed_ms)}`] });
  return rows;
}

function Row({ row, span }) {
  const left = (100 * row.start) / span;
  // The commit's own time is not on the ledger: its bar runs to the axis's end, dashed.
  const width = row.length === null ? 100 - left : (100 * row.length) / span;
  return (
    <li class={`timing-row kind-${row.kind}${row.failed ? " failed" : ""}`}>
      <span class="timing-label">{row.label}{row.detail && <span class="timing-detail"> {row.detail}</span>}</span>
      <span class="timing-track" aria-hidden="true">
        <span class="timing-bar" style={{ left: `${left}%`, width: `${width}%` }} />
        {row.mark != null && <span class="timing-mark" title="first token" style={{ left: `${(100 * (row.start + row.mark)) / span}%` }} />}
      </span>
      <span class="timing-figures">{row.figures.join(" · ")}</span>
    </li>
  );
}

/** One request's turn, closed by default: its duration, tokens and cost; open, its bars
 * (rendered only then: a long session has many turns). */
export function TurnTiming({ timing }) {
  const [open, setOpen] = useState(false);
  return (
    <details class="turn-timing" onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>
        <span class="timing-title">Timeline</span>
        <span class="timing-sum">{duration(timing.elapsed_ms)} · {spent(timing.usage)}</span>
      </summary>
      {open && <TimingBody timing={timing} />}
    </details>
  );
}

function TimingBody({ timing }) {
  const rows = timingRows(timing);
  const ends = rows.map((r) => r.start + (r.length || 0));
  const end = Math.max(timing.elapsed_ms, ...ends, 1);
  // Room after the last event for the commit that follows it.
  const span = end + Math.max(end * 0.08, 1);
  return (
    <div class="timing-body">
      <p class="timing-axis" aria-hidden="true">
        <span class="timing-label">from the start</span>
        <span class="timing-scale">
          {[0, end / 2, end].map((at) => <span key={at} style={{ left: `${(100 * at) / span}%` }}>{duration(at)}</span>)}
        </span>
      </p>
      <ol class="timing-rows" aria-label="What the turn took">
        {rows.map((row) => <Row key={row.key} row={row} span={span} />)}
      </ol>
      <p class="timing-total">
        Started {new Date(timing.started).toLocaleTimeString([], { hourCycle: "h23" })} · {duration(timing.elapsed_ms)} until the commit ·{" "}
        {spent(timing.usage)}
      </p>
    </div>
  );
}
