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

const KINDS = { yield: "answer to", approval: "approval of", input: "input:", deferred: "the result of", message: "a message" };

/** One line: what the session waits for, from the server's `waiting` (a line of
 * GET /sessions?detail=true, or GET /sessions/{id}). */
export function waitingSummary(session) {
  const parts = (session.waiting || []).map((w) => (w.kind === "message" ? KINDS.message : `${KINDS[w.kind] || w.kind} ${w.name}`));
  if (session.status === "failed") parts.push("a retry");
  if (session.status === "paused") parts.push("resume");
  const queued = typeof session.inbox === "number" ? session.inbox : (session.inbox || []).length;
  const runs = session.activeInvocation || (session.running && !session.running.stranded);
  const text = parts.length ? `waits for ${parts.join(", ")}` : runs ? "a turn is running" : "waits for nothing";
  return queued ? `${text} · ${queued} queued` : text;
}
