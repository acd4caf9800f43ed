// The session as a conversation: what people said and the assistant answered, as chat
// bubbles (a structured answer as key / value pairs); each tool call as a card (closed: its
// name and a line; open: its arguments and result as JSON); what the session waits for (an
// answer, an approval, an input) as a form right where the agent asked, and once answered
// what it asked, above the answer; a failed turn's code, message and whether a retry helps.
// The ledger's bookkeeping (runs, commits, timers, the inbox's moves, application events)
// shows only with Details on: then nothing is left out. A sub-agent's work (an agent used as a
// tool: its events carry a `scope`) is a nested card under the call it runs for, with its own
// conversation; a hand-off to another agent is a divider naming it (the hand-off's tool call,
// `transfer_to_<agent>`, shows as a card only with Details on), and the bubbles after it
// carry the name of the agent answering. A delegated call (an agent run in a child session of
// its own) links to that session under its card.
import { useState } from "preact/hooks";
import { SchemaForm } from "./SchemaForm.jsx";
import { describe } from "./Timeline.jsx";
import { TurnTiming } from "./TurnTiming.jsx";
import { KeyValue } from "./Value.jsx";
import { shortId } from "./api.js";

const clock = (ts) => (ts ? new Date(ts).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }) : "");

/** A JSON value as people read it: indented on several lines. */
export const pretty = (value) => {
  if (value === undefined) return "";
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
};

/** A value on one short line: `key: value, …` for an object, cut to `max` characters. */
export function oneLine(value, max = 90) {
  let text;
  if (value === undefined || value === null || value === "") text = "";
  else if (typeof value === "string") {
    try {
      return oneLine(JSON.parse(value), max);
    } catch {
      text = value;
    }
  } else if (typeof value === "object" && !Array.isArray(value)) {
    text = Object.entries(value).map(([key, item]) => `${key}: ${typeof item === "string" ? item : JSON.stringify(item)}`).join(", ");
  } else text = JSON.stringify(value);
  text = text.replace(/\s+/g, " ").trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** What a person typed as an answer, shown as they would say it: the one string of an object
 * with one field, else its fields as key / value pairs. */
function spoken(value) {
  if (typeof value === "string") return { text: value };
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const values = Object.values(value);
    if (values.length === 1 && typeof values[0] === "string") return { text: values[0] };
  }
  return { value };
}

/** Whether a retry can help a failed turn, in a sentence. */
export function retryAdvice(retryable) {
  if (retryable === true) return "Retry can help: it runs the turn again from where it stopped, keeping what its tools did.";
  if (retryable === false) return "Retrying will not help: the same turn would fail the same way until its cause is fixed.";
  return null;
}

const USER_LABEL = (e) => (e.steer ? "user (steer)" : e.queued ? "user (from the inbox)" : e.audio ? "user (spoken)" : "user");

/**
 * The ledger as conversation entries, in order: bubbles, tool cards (one per call, its
 * result, approval and answer folded in), asks (what is pending, from the head; once
 * answered, what was asked stays above its answer), failures (code, message, whether a retry
 * can help; `requests`: the request id the server logged each under, by invocation, when
 * this page saw it), notes (stops, the fork point), each turn's timing (after the event that
 * ended it) and, with `details`, a log row for every other event.
 */
export function conversation(events, { details = false, forkOf, outcomes = {}, requests = {}, pending = {} } = {}) {
  const lastTerminal = {};
  for (const event of events) {
    if (event.type === "invocation_yield" || event.type === "invocation_end") lastTerminal[event.invocation_id] = event.id;
  }
  const groups = scoped(events);
  // The calls that handed the conversation over: their divider says it all.
  const moves = details ? new Set() : new Set(events.filter((e) => e.type === "handoff").map((e) => e.call_id));
  const positions = new Map(events.map((e, position) => [e, position]));
  const options = { details, forkOf, outcomes, requests, pending, lastTerminal, groups, positions, moves };
  const entries = converse(groups.get(ROOT) || [], options);
  // Anything pending that the ledger shown did not place (it was asked before a fork's cut or
  // a compaction): at the end, so it can still be answered.
  const placed = new Set(flatten(entries).filter((x) => x.kind.startsWith("ask-")).map((x) => x.key));
  for (const call of Object.values(pending.calls || {})) {
    if (!placed.has(`ask-${call.callId}`)) entries.push({ kind: "ask-call", key: `ask-${call.callId}`, types: [], call });
  }
  for (const approval of Object.values(pending.approvals || {})) {
    if (!placed.has(`ask-${approval.approvalId}`)) entries.push({ kind: "ask-approval", key: `ask-${approval.approvalId}`, types: [], approval });
  }
  for (const request of Object.values(pending.inputs || {})) {
    if (!placed.has(`ask-${request.inputId}`)) entries.push({ kind: "ask-input", key: `ask-${request.inputId}`, types: [], request });
  }
  return entries;
}

/** The conversation's own events (key ROOT) and each sub-agent's, keyed by the call it runs
 * for, each in ledger order. An event with no scope that answers a sub-agent's call (a
 * decision, an answer) belongs to that sub-agent. */
const ROOT = "";
function scoped(events) {
  const owner = {};
  for (const e of events) {
    if (e.type === "tool_call" && e.scope) owner[e.call_id] = e.scope.call_id;
  }
  const groups = new Map();
  for (const e of events) {
    const key = e.scope ? e.scope.call_id : (e.call_id && owner[e.call_id]) || ROOT;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(e);
  }
  return groups;
}

/** Entries and the entries of their sub-agents' cards, all in one list. */
function flatten(entries) {
  return entries.flatMap((x) => [x, ...(x.sub ? flatten(x.sub.entries) : [])]);
}

/** One agent's conversation entries (see conversation()); a tool call a sub-agent ran for
 * gets `sub`: that agent's name, path, task and entries. */
function converse(events, { details, forkOf, outcomes, requests, pending, lastTerminal, groups, positions, moves }) {
  const entries = [];
  let forkShown = false;
  const cards = {};
  const prompts = {};
  let speaker = "assistant";
  const card = (e) => {
    if (!cards[e.call_id]) {
      cards[e.call_id] = { kind: "tool", key: `tool-${e.call_id}`, callId: e.call_id, name: e.name, args: e.args, ts: e.ts, types: [], progress: [] };
      entries.push(cards[e.call_id]);
      const sub = groups.get(e.call_id);
      if (sub && sub.length) {
        const scope = sub.find((x) => x.scope)?.scope || {};
        cards[e.call_id].sub = { agent: scope.agent || e.name, path: scope.path || e.name, task: e.args?.input ?? e.args,
          entries: converse(sub, { details, outcomes, requests, pending, lastTerminal, groups, positions, moves }) };
      }
    }
    const found = cards[e.call_id];
    found.types.push(e.type);
    return found;
  };
  const log = (e) => {
    if (!details) return;
    const shown = describe(e, lastTerminal[e.invocation_id] === e.id ? outcomes : {});
    if (shown) entries.push({ kind: "log", key: e.id, types: [e.type], ts: e.ts, shown });
  };
  const bubble = (e, role, label, text, extra = {}) => entries.push({ kind: "bubble", key: e.id, types: [e.type], ts: e.ts, role, label, text, ...extra });
  const note = (e, tone, text) => entries.push({ kind: "note", key: e.id, types: [e.type], ts: e.ts, tone, text });

  const place = (e, position) => {
    if ((e.type === "tool_call" || e.type === "tool_result") && moves.has(e.call_id)) return;
    if (forkOf && !forkShown && position >= forkOf.seq) {
      forkShown = true;
      entries.push({ kind: "fork", key: "fork", types: [], text: `forked here from ${shortId(forkOf.session)} at version ${forkOf.version}` });
    }
    switch (e.type) {
      case "user":
        return bubble(e, "user", USER_LABEL(e), e.text);
      case "seed":
        return e.role === "system" ? note(e, "system", `system (seeded): ${e.text}`) : bubble(e, "user", "user (seeded)", e.text);
      case "assistant":
        return bubble(e, "assistant", e.scope ? e.scope.agent : speaker, e.text);
      case "handoff":
        // From here on the agent handed to answers: its bubbles say its name.
        speaker = e.to_agent;
        return void entries.push({ kind: "handoff", key: e.id, types: [e.type], ts: e.ts, from: e.from_agent, to: e.to_agent, reason: e.reason });
      case "tool_call":
        return void card(e);
      case "tool_yield": {
        const c = card(e);
        c.asks = e.args;
        if (pending.calls?.[e.call_id]) entries.push({ kind: "ask-call", key: `ask-${e.call_id}`, types: [], call: pending.calls[e.call_id] });
        // Answered (or ended): the question stays above its answer.
        else entries.push({ kind: "asked", key: `asked-${e.call_id}`, types: [], ts: e.ts, title: `${e.name} asked`, args: e.args });
        return;
      }
      case "tool_input": {
        const c = cards[e.call_id];
        if (c) c.answered = true;
        return bubble(e, "user", `answer to ${c ? c.name : "a question"}`, null, spoken(e.input));
      }
      case "tool_deferred": {
        const c = card(e);
        c.deferred = true;
        if (e.delegate) c.delegate = e.delegate;
        return;
      }
      case "tool_result": {
        const c = card(e);
        if (e.preliminary) c.progress.push(e.result);
        else Object.assign(c, { done: true, result: e.result, error: e.error, denied: e.denied });
        return;
      }
      case "approval_requested": {
        const c = card(e);
        c.approval = "pending";
        if (pending.approvals?.[e.approval_id]) entries.push({ kind: "ask-approval", key: `ask-${e.approval_id}`, types: [], approval: pending.approvals[e.approval_id] });
        else entries.push({ kind: "asked", key: `asked-${e.approval_id}`, types: [], ts: e.ts, title: `${e.name} asked for approval`, args: e.args });
        return;
      }
      case "approval_decided": {
        const c = cards[e.call_id];
        if (c) c.approval = e.approved ? "approved" : "denied";
        return bubble(e, "user", `approval of ${c ? c.name : "a tool call"}`, `${e.approved ? "approved" : "denied"}${e.reason ? `: ${e.reason}` : ""}`);
      }
      case "input_requested":
        prompts[e.input_id] = e.prompt;
        if (pending.inputs?.[e.input_id]) {
          entries.push({ kind: "ask-input", key: `ask-${e.input_id}`, types: [e.type], request: pending.inputs[e.input_id] });
          return;
        }
        if (details) log(e);
        return void entries.push({ kind: "asked", key: `asked-${e.input_id}`, types: [], ts: e.ts, title: "input requested", args: e.prompt || e.input_id });
      case "input_response":
        return bubble(e, "user", `input: ${prompts[e.input_id] || e.input_id}`, null, spoken(e.value));
      case "invocation_failed":
        return void entries.push({ kind: "failure", key: e.id, types: [e.type], ts: e.ts, code: e.code, message: e.message, retryable: e.retryable, invocationId: e.invocation_id, requestId: requests[e.invocation_id] });
      case "error":
        return note(e, "error", `${e.code}: ${e.message}`);
      case "invocation_end":
        if (e.status !== "completed") {
          if (details) return log(e);
          return note(e, e.status === "stopped" ? "stopped" : "quiet", e.status === "stopped" ? "Stopped" : `Ended (${e.status})`);
        }
        return log(e);
      default:
        return log(e);
    }
  };
  events.forEach((e) => {
    place(e, positions.get(e));
    // The event that ends a request's turn keeps what it took: its timeline, closed.
    if (e.timing) entries.push({ kind: "timing", key: `timing-${e.id}`, types: [], timing: e.timing });
  });
  return entries;
}

/** The head's pending work by id, as conversation() places it. */
export function pendingOf(view) {
  const by = (items, key) => Object.fromEntries((items || []).map((item) => [item[key], item]));
  return { calls: by(view?.yieldedTools, "callId"), approvals: by(view?.pendingApprovals, "approvalId"), inputs: by(view?.pendingInputs, "inputId") };
}

export function Conversation({ entries, live, details, busy, actions }) {
  return (
    <ol class={`conversation${details ? " with-details" : ""}`} aria-label="Timeline">
      {entries.length === 0 && !live && <li class="empty">Nothing yet: send a message to start the session.</li>}
      {entries.map((entry) => <Entry key={entry.key} entry={entry} details={details} busy={busy} actions={actions} />)}
      {live && <Live live={live} />}
    </ol>
  );
}

function Entry({ entry, details, busy, actions }) {
  const attrs = { "data-type": entry.types[0], "data-types": entry.types.join(" ") };
  switch (entry.kind) {
    case "bubble":
      return (
        <li class={`bubble from-${entry.role}`} {...attrs}>
          <div class="said">
            <span class="who">{entry.label}{details && entry.ts ? <> · <time dateTime={new Date(entry.ts).toISOString()}>{clock(entry.ts)}</time></> : null}</span>
            {entry.value !== undefined ? <KeyValue value={entry.value} label={entry.label} /> : <p class="text">{entry.text}</p>}
          </div>
        </li>
      );
    case "tool":
      return (
        <li class="tool-entry" {...attrs}>
          <ToolCard call={entry} details={details} />
          {entry.delegate && <Delegation call={entry} />}
          {entry.sub && <SubAgent call={entry} details={details} busy={busy} actions={actions} />}
        </li>
      );
    case "handoff":
      return (
        <li class="handoff" {...attrs} data-agent={entry.to}>
          <span class="handoff-line">{handedOver(entry)}</span>
          {details && entry.from ? <span class="hint"> (from {entry.from})</span> : null}
        </li>
      );
    case "ask-call":
      return <li class="ask-entry" {...attrs}><AskCall call={entry.call} busy={busy} onAnswer={actions.answer} /></li>;
    case "ask-approval":
      return <li class="ask-entry" {...attrs}><AskApproval approval={entry.approval} busy={busy} onDecide={actions.decide} /></li>;
    case "ask-input":
      return <li class="ask-entry" {...attrs}><AskInput request={entry.request} busy={busy} onRespond={actions.respond} /></li>;
    case "asked":
      return (
        <li class="bubble from-assistant asked" {...attrs}>
          <div class="said">
            <span class="who">{entry.title}{details && entry.ts ? <> · <time dateTime={new Date(entry.ts).toISOString()}>{clock(entry.ts)}</time></> : null}</span>
            <Args args={entry.args} />
          </div>
        </li>
      );
    case "failure":
      return <li class="failure" {...attrs}><Failure failure={entry} details={details} /></li>;
    case "note":
      return <li class={`note tone-${entry.tone}`} {...attrs}>{entry.text}</li>;
    case "timing":
      return <li class="timing-entry" {...attrs}><TurnTiming timing={entry.timing} /></li>;
    case "fork":
      return <li class="note fork">── {entry.text} ──</li>;
    default: // log
      return (
        <li class={`log kind-${entry.shown.kind}`} {...attrs}>
          <time dateTime={new Date(entry.ts).toISOString()}>{clock(entry.ts)}</time>
          <span class="who">{entry.shown.label}</span>
          <span class="text">{entry.shown.text}</span>
          {entry.shown.outcome && <span class="outcome">commit: {entry.shown.outcome}</span>}
        </li>
      );
  }
}

/** A sub-agent's work for `call` (an agent used as a tool): its name and path, the task it
 * was given, and its own conversation, with what it waits for answered in place. */
function SubAgent({ call, details, busy, actions }) {
  const { agent, path, task, entries } = call.sub;
  const id = `sub-${call.callId}`;
  return (
    <section class="subagent" aria-labelledby={id} data-agent={agent} data-path={path}>
      <p class="subagent-head" id={id}>
        <span class="subagent-name">{agent}</span>
        <span class="subagent-path">{path}</span>
        <span class={`chip tone-${call.done ? "good" : "quiet"}`}>{call.done ? "done" : "working"}</span>
      </p>
      {task !== undefined && task !== null && task !== "" && <p class="subagent-task"><span class="who">task</span> {typeof task === "string" ? task : oneLine(task)}</p>}
      <ol class="conversation sub" aria-label={`${agent}'s conversation`}>
        {entries.map((entry) => <Entry key={entry.key} entry={entry} details={details} busy={busy} actions={actions} />)}
      </ol>
    </section>
  );
}

/** Where a delegated call runs: the child session its agent works in, a link to it. */
function Delegation({ call }) {
  const href = `#/sessions/${encodeURIComponent(call.delegate)}`;
  return (
    <p class="delegation" data-session={call.delegate}>
      {call.done ? "ran in child session " : "running in child session "}
      <a href={href}>{shortId(call.delegate)}</a>
    </p>
  );
}

/** The errors of a call ended by a person (a stop, an interrupt), not by a failure. */
const ENDED = new Set(["stopped", "interrupted", "cancelled by the user"]);

/** A call's state in a word or two, and its tone. */
function stateOf(call) {
  if (call.denied) return ["denied", "bad"];
  if (call.error && ENDED.has(call.error)) return [call.error, "quiet"];
  if (call.error) return ["error", "bad"];
  if (call.done) return [call.approval === "approved" ? "approved · returned" : "returned", "good"];
  if (call.approval === "pending") return ["wants approval", "wait"];
  if (call.approval === "denied") return ["denied", "bad"];
  if (call.asks !== undefined && !call.answered) return ["asks", "wait"];
  if (call.deferred && call.delegate) return ["delegated", "wait"];
  if (call.deferred) return ["waits for its result", "wait"];
  if (call.sub) {
    const waits = flatten(call.sub.entries).some((x) => x.kind.startsWith("ask-"));
    return waits ? [`${call.sub.agent} waits for you`, "wait"] : [`${call.sub.agent} working`, "quiet"];
  }
  if (call.live) return [call.live, "quiet"];
  return ["running", "quiet"];
}

function ToolCard({ call, details }) {
  const [state, tone] = stateOf(call);
  const line = call.error ? call.error : call.done ? oneLine(call.result) : oneLine(call.asks ?? call.args);
  return (
    <details class={`tool tone-${tone}`}>
      <summary>
        <span class="tool-name">{call.name}</span>
        <span class="tool-line">{line}</span>
        <span class={`chip tone-${tone}`}>{state}</span>
        {details && call.ts ? <time class="tool-time" dateTime={new Date(call.ts).toISOString()}>{clock(call.ts)}</time> : null}
      </summary>
      <div class="tool-body">
        <h4>Arguments</h4>
        <pre class="json" tabIndex={0}>{pretty(call.args) || "—"}</pre>
        {call.asks !== undefined && pretty(call.asks) !== pretty(call.args) && <><h4>Asked</h4><pre class="json" tabIndex={0}>{pretty(call.asks)}</pre></>}
        {call.progress.length > 0 && <><h4>Progress</h4>{call.progress.map((p, i) => <pre key={i} class="json" tabIndex={0}>{pretty(p)}</pre>)}</>}
        {call.done && (call.error
          ? <><h4>{call.denied ? "Denied" : ENDED.has(call.error) ? "Ended" : "Error"}</h4><pre class="json error-text" tabIndex={0}>{call.error}</pre></>
          : <><h4>Result</h4><pre class="json" tabIndex={0}>{pretty(call.result)}</pre></>)}
        {details && <p class="hint">call {call.callId}</p>}
      </div>
    </details>
  );
}

/** A tool's arguments as a person reads them: one question as a sentence, else key / value. */
function Args({ args }) {
  if (typeof args === "string") return <p class="question">{args}</p>;
  if (args && typeof args === "object" && !Array.isArray(args)) {
    const entries = Object.entries(args);
    if (entries.length === 1 && typeof entries[0][1] === "string") return <p class="question">{entries[0][1]}</p>;
  }
  return args === undefined || args === null ? null : <KeyValue value={args} />;
}

/** A failed turn, where it failed: its code, what failed (never the server's exception text:
 * that is in the server's log) and whether a retry can help. */
export function Failure({ failure, details }) {
  const advice = retryAdvice(failure.retryable);
  return (
    <section class="failure-box" aria-label="The turn failed">
      <p class="failure-head">
        <strong>The turn failed</strong>
        {failure.code && <code class="code" title="error code">{failure.code}</code>}
        {failure.retryable !== undefined && failure.retryable !== null && (
          <span class={`chip ${failure.retryable ? "tone-wait" : "tone-bad"}`}>{failure.retryable ? "retryable" : "not retryable"}</span>
        )}
      </p>
      <p class="failure-message">{failure.message}</p>
      {advice && <p class="failure-advice">{advice}</p>}
      {details && (failure.invocationId || failure.requestId) && (
        <p class="hint">
          {failure.invocationId ? `invocation ${failure.invocationId}` : ""}
          {failure.invocationId && failure.requestId ? " · " : ""}
          {failure.requestId ? `request ${failure.requestId}` : ""}
        </p>
      )}
    </section>
  );
}

function AskCall({ call, busy, onAnswer }) {
  const id = `ask-${call.callId}`;
  return (
    <article class="ask" aria-labelledby={id}>
      <h3 id={id}>{call.name} asks</h3>
      <Args args={call.args} />
      <SchemaForm schema={call.inputSchema || {}} idPrefix={`answer-${call.callId}`} submitLabel="Send answer" disabled={busy}
        onSubmit={(value) => onAnswer(call, value)} />
    </article>
  );
}

function AskApproval({ approval, busy, onDecide }) {
  const [reason, setReason] = useState("");
  const id = `ask-${approval.approvalId}`;
  const reasonId = `reason-${approval.approvalId}`;
  const decide = (approved) => onDecide(approval, approved, reason.trim());
  return (
    <article class="ask approval" aria-labelledby={id}>
      <h3 id={id}>{approval.tool} wants approval</h3>
      {approval.agent && <p class="hint asked-by">asked by <span class="agent-path">{approval.agent}</span></p>}
      <Args args={approval.args} />
      <label for={reasonId}>Reason (optional)</label>
      <input id={reasonId} type="text" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
      <div class="buttons">
        <button type="button" disabled={busy} onClick={() => decide(true)}>Approve</button>
        <button type="button" class="danger" disabled={busy} onClick={() => decide(false)}>Deny</button>
      </div>
    </article>
  );
}

function AskInput({ request, busy, onRespond }) {
  const id = `ask-${request.inputId}`;
  return (
    <article class="ask" aria-labelledby={id}>
      <h3 id={id}>{request.prompt || `Input ${request.inputId}`}</h3>
      <SchemaForm schema={request.schema || {}} idPrefix={`input-${request.inputId}`} submitLabel="Send response" disabled={busy}
        onSubmit={(value) => onRespond(request, value)} />
    </article>
  );
}

/** The turn streaming now, as the AG-UI events arrive (replaced by the ledger once committed). */
/** A hand-off's divider line: the agent handed to, and why when the model said. */
const handedOver = ({ to, reason }) => `Handed over to ${to}${reason ? `: ${reason}` : ""}`;

/** The agent answering the conversation after `events` (the last hand-off's; else the
 * plain "assistant" the ledger's bubbles say before any hand-off). */
export function speakerAfter(events) {
  const move = events.findLast((e) => e.type === "handoff" && !e.scope);
  return move ? move.to_agent : "assistant";
}

function Live({ live }) {
  return (
    <li class="live" aria-live="polite" aria-busy={live.done ? "false" : "true"}>
      <ol aria-label="Streaming now">
        {live.items.map((item) => {
          if (item.kind === "tool") {
            return <li key={item.id} class="tool-entry" data-live="tool"><ToolCard call={item} details={false} /></li>;
          }
          if (item.kind === "handoff") {
            return <li key={item.id} class="handoff" data-live="handoff" data-agent={item.to}><span class="handoff-line">{handedOver(item)}</span></li>;
          }
          return (
            <li key={item.id} class={`bubble from-${item.kind}`} data-live={item.kind}>
              <div class="said"><span class="who">{item.label}</span><p class="text">{item.text}</p></div>
            </li>
          );
        })}
        {!live.done && <li class="note tone-quiet typing" data-live="working">working…</li>}
        {live.outcome && <li class="note tone-quiet" data-live="outcome">{live.outcome}</li>}
      </ol>
    </li>
  );
}
