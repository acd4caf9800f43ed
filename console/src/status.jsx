// How a session's status reads, in the list and on the session page: the API's status word
// (`active`, `awaiting_input`, `failed`, `paused`) told apart by what the session does now, so
// that a session whose turn ended reads "idle", never "active · waits for nothing".

const KINDS = { yield: "an answer to", approval: "approval of", input: "input:", deferred: "the result of" };

/** Whether a turn runs now, from a line of GET /sessions?detail=true or GET /sessions/{id}. */
export const runsNow = (session) => Boolean(session.activeInvocation || (session.running && !session.running.stranded));

/**
 * `{key, label, sentence}` for `session` (a list line or a head; null: not created yet).
 * `running`: a turn runs now as far as the page knows (it may stream one itself).
 */
export function statusOf(session, { running = false } = {}) {
  if (!session) return { key: "new", label: "new", sentence: "the first message creates it" };
  const queued = typeof session.inbox === "number" ? session.inbox : (session.inbox || []).length;
  const inbox = queued ? ` · ${queued} queued` : "";
  if (running || runsNow(session)) return { key: "running", label: "running", sentence: `a turn is running${inbox}` };
  const waiting = session.waiting || [];
  const person = waiting.filter((w) => w.kind === "yield" || w.kind === "approval" || w.kind === "input");
  const listed = (items) => items.map((w) => `${KINDS[w.kind] || w.kind} ${w.name}`).join(", ");
  switch (session.status) {
    case "failed":
      return { key: "failed", label: "failed", sentence: `its last turn failed: Retry runs it again${inbox}` };
    case "paused":
      return { key: "paused", label: "paused", sentence: `nothing runs until Resume${inbox}` };
    case "awaiting_input":
      if (person.length) return { key: "awaiting_input", label: "awaiting input", sentence: `waits for ${listed(person)}${inbox}` };
      if (waiting.some((w) => w.kind === "deferred")) {
        return { key: "awaiting_result", label: "awaiting a result", sentence: `waits for ${listed(waiting.filter((w) => w.kind === "deferred"))} (server code supplies it)${inbox}` };
      }
      return { key: "awaiting_message", label: "awaiting a message", sentence: `the agent handed the turn back: a message continues it${inbox}` };
    default:
      if (session.running && session.running.stranded) {
        return { key: "stranded", label: "interrupted", sentence: `a turn's request died mid-way: the server takes it over${inbox}` };
      }
      if (!session.version) return { key: "new", label: "new", sentence: "no turn has run yet" };
      return { key: "idle", label: "idle", sentence: queued ? `its turn ended${inbox}` : "its last turn ended: a message starts the next" };
  }
}

export function StatusBadge({ status }) {
  return <span class={`badge status-${status.key}`}>{status.label}</span>;
}
