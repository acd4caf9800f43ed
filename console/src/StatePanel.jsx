// A session's state: what it holds now (the head's `state`) and what each turn changed (the
// ledger's `state_delta` patches, grouped by the turn that wrote them), read from what the
// page already loaded: GET /sessions/{id} and its ledger.
import { KeyValue } from "./Value.jsx";

const clock = (ts) => (ts ? new Date(ts).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" }) : "");

/** A JSON Pointer as a person reads it: `/guest/name` is `guest.name`. */
const keyOf = (path) => (path || "").split("/").slice(1).map((part) => part.replaceAll("~1", "/").replaceAll("~0", "~")).join(".") || "(the whole state)";

const VERBS = { add: "set", replace: "changed", remove: "removed", move: "moved", copy: "copied", test: "checked" };

/**
 * The turns of `events` in order, each `{key, label, ts, ops}`: its `state_delta` operations
 * (none: it changed nothing). A change written outside any turn (a client's `state`) is a
 * step of its own.
 */
export function stateChanges(events) {
  const turns = [];
  const byInvocation = {};
  let number = 0;
  for (const event of events) {
    if (event.type === "invocation_start") {
      number += 1;
      byInvocation[event.invocation_id] = { key: event.id, label: `Turn ${number}`, ts: event.ts, ops: [] };
      turns.push(byInvocation[event.invocation_id]);
    } else if (event.type === "state_delta") {
      let turn = byInvocation[event.invocation_id];
      if (!turn) {
        turn = { key: event.id, label: "Outside a turn", ts: event.ts, ops: [] };
        turns.push(turn);
        if (event.invocation_id) byInvocation[event.invocation_id] = turn;
      }
      turn.ops.push(...(event.patch || []).map((op, index) => ({ ...op, key: `${event.id}-${index}` })));
    }
  }
  return turns;
}

function Op({ op }) {
  return (
    <li class={`state-op op-${op.op}`}>
      <span class="op-verb">{VERBS[op.op] || op.op}</span> <code>{keyOf(op.path)}</code>
      {op.from !== undefined && <> from <code>{keyOf(op.from)}</code></>}
      {op.value !== undefined && op.op !== "remove" && <> <span class="op-to">to</span> <KeyValue value={op.value} /></>}
    </li>
  );
}

export function StatePanel({ state, events }) {
  const turns = stateChanges(events);
  const empty = !state || !Object.keys(state).length;
  return (
    <section class="state-panel" aria-labelledby="state-title">
      <h2 id="state-title">State</h2>
      <div class="card state-now">
        {empty ? <p class="quiet">Empty: nothing has been stored yet.</p> : <KeyValue value={state} label="Current state" />}
      </div>
      {turns.length > 0 && (
        <>
          <h3 id="changes-title">What each turn changed</h3>
          <ol class="state-changes" aria-labelledby="changes-title">
            {turns.map((turn) => (
              <li key={turn.key} class={turn.ops.length ? "changed" : "unchanged"}>
                <span class="turn-label">{turn.label}</span>{turn.ts ? <time dateTime={new Date(turn.ts).toISOString()}> · {clock(turn.ts)}</time> : null}
                {turn.ops.length
                  ? <ul>{turn.ops.map((op) => <Op key={op.key} op={op} />)}</ul>
                  : <span class="quiet"> · no change</span>}
              </li>
            ))}
          </ol>
        </>
      )}
    </section>
  );
}
