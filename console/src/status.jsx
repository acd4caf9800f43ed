// How a session's status and what it waits for read, in the list and on the session page.

const LABELS = {
  awaiting_input: "awaiting input",
  active: "active",
  failed: "failed",
  paused: "paused",
  running: "running",
  new: "new",
};

export function StatusBadge({ status }) {
  return <span class={`badge status-${status}`}>{LABELS[status] || status}</span>;
}

const KINDS = { yield: "answer to", approval: "approval of", input: "input:", message: "a message" };

/** One line: what the session waits for, from GET /sessions?detail=true's `waiting`, or from a
 * session view's pending lists. */
export function waitingSummary(session) {
  const waiting = session.waiting || [
    ...(session.yieldedTools || []).map((c) => ({ kind: "yield", id: c.callId, name: c.name })),
    ...(session.pendingApprovals || []).map((a) => ({ kind: "approval", id: a.approvalId, name: a.tool })),
    ...(session.pendingInputs || []).map((i) => ({ kind: "input", id: i.inputId, name: i.prompt || i.inputId })),
  ];
  const parts = waiting.map((w) => (w.kind === "message" ? KINDS.message : `${KINDS[w.kind] || w.kind} ${w.name}`));
  if (!parts.length && session.status === "awaiting_input") parts.push(KINDS.message);
  if (session.status === "failed") parts.push("a retry");
  if (session.status === "paused") parts.push("resume");
  const queued = typeof session.inbox === "number" ? session.inbox : (session.inbox || []).length;
  const text = parts.length ? `waits for ${parts.join(", ")}` : "waits for nothing";
  return queued ? `${text} · ${queued} queued` : text;
}
