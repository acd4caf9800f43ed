// The ledger's events as log lines, what the conversation shows with Details on for what is not
// a message, a tool call or a question (state deltas and reasoning items are folded away: the
// raw ledger under Details has them).

const json = (value) => {
  if (value === undefined || value === null) return "";
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return text.length > 400 ? `${text.slice(0, 400)}…` : text;
};

/** {kind, label, text} for a ledger event, or null for what the timeline leaves out. */
export function describe(event, outcomes = {}) {
  const e = event;
  switch (e.type) {
    case "invocation_start":
      return { kind: "run", label: "run", text: `started${e.agent ? ` (agent ${e.agent})` : ""}` };
    case "user":
      return { kind: "user", label: e.steer ? "user (steer)" : e.queued ? "user (from the inbox)" : e.audio ? "user (spoken)" : "user", text: e.text };
    case "seed":
      return { kind: e.role === "system" ? "system" : "user", label: `${e.role} (seeded)`, text: e.text };
    case "assistant":
      return { kind: "assistant", label: "assistant", text: e.text };
    case "tool_call":
      return { kind: "tool", label: "tool call", text: `${e.name}(${json(e.args)})` };
    case "tool_yield":
      return { kind: "yield", label: "yield", text: `${e.name} waits for input on ${json(e.args)}` };
    case "invocation_yield":
      return { kind: "wait", label: "run", text: e.reason === "message" ? "parked: waits for a message" : "parked: waits for an answer or a decision", outcome: outcomes[e.invocation_id] };
    case "tool_input":
      return { kind: "answer", label: "answer", text: json(e.input) };
    case "invocation_resume":
      return { kind: "run", label: "run", text: "resumed" };
    case "tool_result":
      if (e.preliminary) return { kind: "tool", label: "progress", text: `${e.name}: ${json(e.result)}` };
      if (e.denied) return { kind: "denied", label: "denied", text: `${e.name}: ${e.error || "denied"}` };
      if (e.error) return { kind: "error", label: "tool error", text: `${e.name}: ${e.error}` };
      return { kind: "result", label: "result", text: `${e.name} returned ${json(e.result)}` };
    case "approval_requested":
      return { kind: "approval", label: "approval", text: `requested for ${e.name}(${json(e.args)})` };
    case "approval_decided":
      return { kind: "approval", label: "approval", text: `${e.approved ? "approved" : "denied"}${e.reason ? `: ${e.reason}` : ""}` };
    case "timer_set":
      return { kind: "timer", label: "timer", text: `${e.name} set for ${new Date(e.fire_at).toLocaleString()}${e.message ? `: ${e.message}` : ""}` };
    case "timer_cancelled":
      return { kind: "timer", label: "timer", text: `${e.name} cancelled` };
    case "timer_fired":
      return { kind: "timer", label: "timer", text: `${e.name} fired` };
    case "invocation_end":
      return { kind: e.status === "completed" ? "end" : "stop", label: "run", text: `ended (${e.status})`, outcome: outcomes[e.invocation_id] };
    case "invocation_failed":
      return { kind: "error", label: "failed", text: `${e.code}: ${e.message}${e.retryable ? " (retryable)" : ""}` };
    case "error":
      return { kind: "error", label: "error", text: `${e.code}: ${e.message}` };
    case "retry":
      return { kind: "retry", label: "retry", text: `retry ${e.retry_id}` };
    case "stop_requested":
      return { kind: "stop", label: "stop", text: `requested${e.seen != null ? ` after ${e.seen} events shown` : ""}` };
    case "steer":
      return { kind: "user", label: "steer", text: `joined the run (${e.message_id})` };
    case "pause":
      return { kind: "stop", label: "pause", text: "session paused" };
    case "resume":
      return { kind: "run", label: "resume", text: "session resumed" };
    case "interrupt":
      return { kind: "stop", label: "interrupt", text: `ended what waited on ${e.owner}` };
    case "queued":
      return { kind: "inbox", label: "queued", text: `#${e.position}: ${e.text}` };
    case "queue_edit":
      return { kind: "inbox", label: "inbox", text: `edited ${e.message_id}: ${e.text}` };
    case "queue_move":
      return { kind: "inbox", label: "inbox", text: `moved ${e.message_id} to #${e.position}` };
    case "queue_remove":
      return { kind: "inbox", label: "inbox", text: `removed ${e.message_id}` };
    case "queue_send_now":
      return { kind: "inbox", label: "inbox", text: `sent ${e.message_id} now` };
    case "input_requested":
      return { kind: "yield", label: "input request", text: e.prompt || e.input_id };
    case "input_response":
      return { kind: "answer", label: "input", text: `${e.input_id}: ${json(e.value)}` };
    case "compaction":
      return { kind: "compaction", label: "compaction", text: `${e.turns} turns folded into a summary: ${json(e.summary)}` };
    case "tool_deferred":
      return { kind: "yield", label: "deferred", text: `${e.name}(${json(e.args)}) waits for its result (call ${e.call_id})` };
    case "tool_call_draft":
      return { kind: "stop", label: "draft", text: `${e.name || "a tool call"} was still streaming when stopped: ${json(e.args_text)}` };
    case "app_event":
      return { kind: "event", label: `event ${e.name}`, text: `${json(e.data)}${e.event_id ? `  [${e.event_id}]` : ""}` };
    default:
      return null; // state_delta, reasoning: in the ledger, not in a person's timeline
  }
}
