// One session: its conversation (the ledger, then what streams now) with what it waits for
// answered in place, turn control (Stop, Pause, Resume, Retry), the inbox and a message box.
// What the page starts (a message, an answer, a decision, a retry, a resume, an input, "send
// now") streams through POST /agui; turns that begin elsewhere (a webhook, a timer, another tab,
// curl) arrive through the session's event feed, and one running now can be stopped from here.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { aguiRunsControls, ApiError, follow, getSession, getSessionHead, missingFeature, newId, postTurn, replaySession, runAgui, shortId } from "./api.js";
import { Conversation, conversation, pendingOf, retryAdvice, speakerAfter } from "./Conversation.jsx";
import { Inbox } from "./Inbox.jsx";
import { ReplayView } from "./Replay.jsx";
import { StatePanel } from "./StatePanel.jsx";
import { sessionUsage, UsageTotal } from "./TurnTiming.jsx";
import { VoiceButton } from "./Voice.jsx";
import { StatusBadge, statusOf } from "./status.jsx";

/** How often the page reads the session's head: while a turn runs somewhere (to offer Stop
 * and see it end), and otherwise (a turn started elsewhere announces itself only there). */
const RUNNING_POLL_MS = 1000;
const IDLE_POLL_MS = 3000;
const DETAILS_KEY = "dormant.console.details";

/** `incoming` appended to `events` once each (the feed and a reload may both bring one). */
function merge(events, incoming) {
  const seen = new Set(events.map((e) => e.id));
  const added = incoming.filter((e) => !seen.has(e.id));
  return added.length ? [...events, ...added] : events;
}

/** The invocation running now that the head names (announced or claimed), or null. */
function activeOf(view) {
  if (!view) return null;
  if (view.activeInvocation) return view.activeInvocation.invocationId;
  return view.running && !view.running.stranded ? view.running.invocationId : null;
}

function storedDetails() {
  try {
    return localStorage.getItem(DETAILS_KEY) === "on";
  } catch {
    return false;
  }
}

export function SessionPage({ sessionId }) {
  const [view, setView] = useState(undefined); // undefined: loading; null: not started yet
  const [events, setEvents] = useState([]);
  const [live, setLive] = useState(null);
  const [notice, setNotice] = useState(null);
  const [busy, setBusy] = useState(false);
  const [outcomes, setOutcomes] = useState({});
  const [requests, setRequests] = useState({});
  const [details, setDetails] = useState(storedDetails);
  const [replay, setReplay] = useState(null); // null: closed; "running"; else the answer
  const replayHeading = useRef(null);
  const replayButton = useRef(null);
  const eventsRef = useRef(events);
  eventsRef.current = events;
  const following = useRef(null);
  const missing = missingFeature();

  const reload = useCallback(async () => {
    const fresh = await getSession(sessionId);
    setView(fresh);
    setEvents(fresh ? fresh.events || [] : []);
    return fresh;
  }, [sessionId]);

  /** Follow the session's feed, once it exists (a session not created yet has none). */
  const startFollowing = useCallback((version) => {
    if (following.current) return;
    const stop = new AbortController();
    following.current = stop;
    follow(sessionId, version, async (feed) => {
      setEvents((held) => (feed.resync ? feed.events : merge(held, feed.events)));
      const head = await getSessionHead(sessionId).catch(() => null);
      if (head && !stop.signal.aborted) setView(head);
    }, stop.signal).finally(() => { if (following.current === stop) following.current = null; });
  }, [sessionId]);

  /** Read the session again and follow it from there: after anything this page sent. */
  const refresh = useCallback(async () => {
    const fresh = await reload().catch(() => undefined);
    if (fresh) startFollowing(fresh.version);
  }, [reload, startFollowing]);

  useEffect(() => {
    setView(undefined);
    setEvents([]);
    setLive(null);
    setNotice(null);
    setReplay(null);
    reload()
      .then((fresh) => { if (fresh) startFollowing(fresh.version); })
      .catch((error) => setNotice({ kind: "error", text: `Could not load the session: ${error.message}` }));
    return () => {
      following.current?.abort();
      following.current = null;
    };
  }, [sessionId]);

  const running = live && !live.done && live.runId ? live.runId : null;
  const elsewhere = running ? null : activeOf(view);
  const exists = Boolean(view);

  // The head, read again and again only for a session that exists and while this page is not
  // streaming a turn itself (then the stream says it all): fast while a turn runs elsewhere.
  const activeRef = useRef(elsewhere);
  activeRef.current = elsewhere;
  const runningNow = useRef(null);
  runningNow.current = running || elsewhere;
  useEffect(() => {
    if (!exists || running) return undefined;
    let timer;
    let stopped = false;
    const next = () => { timer = setTimeout(tick, activeRef.current ? RUNNING_POLL_MS : IDLE_POLL_MS); };
    const tick = async () => {
      if (!document.hidden) {
        const head = await getSessionHead(sessionId).catch(() => null);
        if (stopped) return;
        if (head) setView((held) => (held ? head : held)); // absent fields are gone (null)
      }
      if (!stopped) next();
    };
    next();
    return () => { stopped = true; clearTimeout(timer); };
  }, [sessionId, exists, running]);

  // "Stop sent" is true only until the run it stopped has ended.
  useEffect(() => {
    if (!running && !elsewhere) setNotice((held) => (held && held.tag === "stop" ? null : held));
  }, [running, elsewhere]);

  /**
   * One turn through POST /agui, shown as it streams; then the committed ledger replaces it.
   * `fallback(error)`: true for a refusal the caller will send another way (nothing shown).
   */
  const stream = async (input, userText, fallback) => {
    setBusy(true);
    setNotice(null);
    const known = new Set(eventsRef.current.map((e) => e.id));
    // `speaker`: who the streamed replies are from (a hand-off in the stream changes it).
    let state = { runId: null, known, seen: undefined, done: false, outcome: null, speaker: speakerAfter(eventsRef.current), items: userText ? [{ id: "you", kind: "user", label: "user", text: userText }] : [] };
    const update = (change) => { state = change(state); setLive(state); };
    const edit = (id, change) => update((s) => ({ ...s, items: s.items.map((item) => (item.id === id ? change(item) : item)) }));
    const push = (item) => update((s) => ({ ...s, items: [...s.items, item] }));
    update((s) => s);
    let refused = false;
    try {
      await runAgui(sessionId, input, {
        // What a Stop's `seen` says: the last stream position this page received (and showed).
        onEvent: ({ event }) => {
          const seq = event.rawEvent?.seq;
          if (typeof seq === "number" && !(state.seen >= seq)) state = { ...state, seen: seq };
        },
        onRunStartedEvent: ({ event }) => update((s) => ({ ...s, runId: event.metadata?.invocationId || event.runId })),
        onTextMessageStartEvent: ({ event }) => push({ id: event.messageId, kind: event.role === "user" ? "user" : "assistant", label: event.role === "user" ? "user" : state.speaker, text: "" }),
        onTextMessageContentEvent: ({ event }) => edit(event.messageId, (item) => ({ ...item, text: item.text + event.delta })),
        onToolCallStartEvent: ({ event }) => push({ id: event.toolCallId, kind: "tool", name: event.toolCallName, args: "", progress: [], live: "running" }),
        onToolCallArgsEvent: ({ event }) => edit(event.toolCallId, (item) => ({ ...item, args: item.args + event.delta })),
        onToolCallResultEvent: ({ event }) => edit(event.toolCallId, (item) => ({ ...item, done: true, result: event.content })),
        onCustomEvent: ({ event }) => {
          if (event.name === "QUEUED") {
            setNotice({ kind: "info", text: `The session can't take a message now: yours waits in the inbox at position ${event.value.position + 1}.` });
          }
          // A hand-off: its divider in place of its call's card; the agent handed to answers on.
          if (event.name === "dormant.handoff" && !event.value?.scope) {
            const move = event.value;
            update((s) => ({ ...s, speaker: move.to_agent, items: [...s.items.filter((item) => item.id !== move.call_id), { id: move.id, kind: "handoff", to: move.to_agent, reason: move.reason }] }));
          }
        },
        onRunFinishedEvent: ({ event, outcome }) => {
          const result = event.result || {};
          const what = outcome === "interrupt" ? "waiting for you" : result.status || "finished";
          update((s) => ({ ...s, done: true, outcome: what }));
          if (state.runId && result.commitStatus) setOutcomes((held) => ({ ...held, [state.runId]: result.commitStatus }));
        },
        onRunErrorEvent: ({ event }) => {
          update((s) => ({ ...s, done: true }));
          const said = event.metadata || {};
          setNotice({ kind: "error", text: event.message, code: event.code, retryable: said.retryable });
          // The request id the server logged the failure under: shown with Details.
          if (state.runId && said.requestId) setRequests((held) => ({ ...held, [state.runId]: said.requestId }));
        },
      });
    } catch (error) {
      if (fallback && error instanceof ApiError && fallback(error)) refused = true;
      else setNotice(errorNotice(error));
    } finally {
      await refresh();
      setLive(null);
      setBusy(false);
    }
    return !refused;
  };

  /** One POST /turns (a control, an input response, an inbox change): the answer's refusal is shown as the server gave it. */
  const control = async (body, done) => {
    setBusy(true);
    setNotice(null);
    try {
      const reply = await postTurn(sessionId, body);
      if (done) setNotice({ kind: "info", text: done(reply) });
      else if (reply && reply.error) setNotice({ kind: "error", text: reply.error, code: reply.code, retryable: reply.retryable });
    } catch (error) {
      setNotice(errorNotice(error));
    } finally {
      await refresh();
      setBusy(false);
    }
  };

  /**
   * A control that runs the session (retry, resume, send now, an input's response): streamed
   * over POST /agui when the server takes controls there, else through POST /turns (also
   * when it refuses one of these keys: an older server).
   */
  const act = async (fields) => {
    if (!missing && aguiRunsControls()) {
      const keys = Object.keys(fields);
      const sent = await stream({ dormant: fields }, null,
        (error) => error.status === 422 && keys.some((key) => error.message.includes(key)));
      if (sent) return;
    }
    await control(fields);
  };

  /** Stop and pause act on a turn running now: they must not wait for it. (A stop answered
   * after its run ended says nothing: the conversation shows how it ended.) */
  const signalRun = async (body, what, tag) => {
    try {
      await postTurn(sessionId, body);
      if (tag !== "stop" || runningNow.current) setNotice({ kind: "info", text: what, tag });
    } catch (error) {
      setNotice(errorNotice(error));
    }
  };

  const actions = {
    answer: (call, value) => (missing
      ? control({ tools: [{ callId: call.callId, input: value }] })
      : stream({ resume: [{ interruptId: call.callId, status: "resolved", payload: value }] })),
    decide: (approval, approved, reason) => (missing
      ? control({ approvals: [{ approvalId: approval.approvalId, approved, ...(reason ? { reason } : {}) }] })
      : stream({ resume: [{ interruptId: approval.approvalId, status: "resolved", payload: { approved, ...(reason ? { reason } : {}) } }] })),
    respond: (request, value) => act({ inputs: [{ inputId: request.inputId, value }] }),
  };

  const sendMessage = (text) => {
    if (running) return signalRun({ steer: { text, invocationId: running, id: newId("steer") } }, "Steer sent: the run takes it at its next step.");
    const messageId = newId("msg");
    if (missing) return control({ message: text, messageId }, (reply) => (reply.status === "queued" ? "The session can't take a message now: yours waits in the inbox." : ""));
    return stream({ message: text, messageId }, text);
  };

  const stopId = running || elsewhere;
  const stop = () => signalRun(
    { stop: { invocationId: stopId, ...(running && live.seen ? { seen: live.seen } : {}) } },
    running ? "Stop sent: the run ends within a second, keeping what you saw."
      : "Stop sent: the run ends at its next step.", "stop");

  /** POST /sessions/{id}/replay, then the side-by-side view (focused) in place of the page. */
  const startReplay = async (tools) => {
    setReplay("running");
    setNotice(null);
    try {
      const answer = await replaySession(sessionId, tools);
      setReplay(answer);
      setTimeout(() => replayHeading.current?.focus(), 0);
    } catch (error) {
      setReplay(null);
      setNotice(errorNotice(error));
    }
  };
  const closeReplay = () => {
    setReplay(null);
    setTimeout(() => replayButton.current?.focus(), 0);
  };

  const status = view ? view.status : "new";
  const told = statusOf(view, { running: Boolean(stopId) });
  const shown = live ? events.filter((e) => live.known.has(e.id) || e.invocation_id !== live.runId) : events;
  const entries = conversation(shown, { details, forkOf: view?.forkOf, outcomes, requests, pending: pendingOf(view) });
  const toggleDetails = () => {
    const next = !details;
    setDetails(next);
    try { localStorage.setItem(DETAILS_KEY, next ? "on" : "off"); } catch { /* this page only */ }
  };
  return (
    <section class="session" aria-labelledby="session-title">
      <p class="back"><a href="#/">← All sessions</a></p>
      <h1 id="session-title">{shortId(sessionId)}</h1>
      <p class="meta">
        <StatusBadge status={told} />
        {view && <span class="status-sentence">{told.sentence}</span>}
        {view?.forkOf && <span>fork of <a href={`#/sessions/${encodeURIComponent(view.forkOf.session)}`}>{shortId(view.forkOf.session)}</a> at version {view.forkOf.version}</span>}
        {view?.parent && <span>delegated from <a href={`#/sessions/${encodeURIComponent(view.parent.sessionId)}`}>{shortId(view.parent.sessionId)}</a></span>}
        {view?.children?.length ? <span>delegated to {view.children.map((child, i) => (
          <>{i ? ", " : ""}<a key={child.sessionId} href={`#/sessions/${encodeURIComponent(child.sessionId)}`}>{shortId(child.sessionId)}</a></>
        ))}</span> : null}
        {view?.compactions ? <span>compacted {view.compactions}×</span> : null}
        <UsageTotal usage={sessionUsage(view, events)} />
        {view && details && <span>version {view.version}</span>}
        {view === null && <span>new: the first message creates it</span>}
      </p>
      <div class="notices" aria-live="polite">
        {notice && notice.text && <Notice notice={notice} />}
      </div>
      {replay && replay !== "running" ? <ReplayView answer={replay} onClose={closeReplay} headingRef={replayHeading} /> : (
      <div class="columns">
        <div class="main-column">
          <div class="conversation-head">
            <h2>Conversation</h2>
            <button type="button" class="toggle" aria-pressed={details ? "true" : "false"} onClick={toggleDetails}
              title="Runs, commits, timers, the inbox's moves and the raw ledger">Details</button>
          </div>
          <Conversation entries={entries} live={live} details={details} busy={busy} actions={actions} />
          {details && <RawLedger events={events} />}
          <MessageBox busy={busy && !running} status={status} running={Boolean(running)} onSend={sendMessage} />
          <VoiceButton sessionId={sessionId} disabled={busy || Boolean(running)} onNotice={setNotice}
            onDone={() => refresh()} />
        </div>
        <aside class="side-column" aria-label="Turn control, inbox and state">
          <h2>Turn</h2>
          <p class="quiet">{turnSummary(view, stopId, details, Boolean(running), events)}</p>
          <div class="buttons">
            <button type="button" disabled={!stopId} onClick={stop}>Stop</button>
            <button type="button" class="secondary" disabled={!stopId} onClick={() => signalRun({ pause: true }, "Pause sent: the run pauses at its next step.")}>Pause</button>
            <button type="button" class={status === "paused" ? "" : "secondary"} disabled={busy || status !== "paused"} onClick={() => act({ resume: true })}>Resume</button>
            <button type="button" class={status === "failed" ? "" : "secondary"} disabled={busy || status !== "failed"} onClick={() => act({ retry: { retryId: newId("retry") } })}>Retry</button>
          </div>
          {view?.openInvocation && status === "awaiting_input" && !stopId && (
            <p><button type="button" class="secondary" disabled={busy} onClick={() => control({ stop: { invocationId: view.openInvocation } })}>Stop waiting</button></p>
          )}
          <Inbox items={view?.inbox || []} busy={busy}
            onOp={(op) => (op.op === "send_now" ? act({ queue: [op] }) : control({ queue: [op] }))} />
          {view && <StatePanel state={view.state} events={events} />}
          {view && <ReplayControl running={replay === "running"} disabled={busy || Boolean(stopId)} onReplay={startReplay} buttonRef={replayButton} />}
        </aside>
      </div>
      )}
    </section>
  );
}

/** A refusal or failure as a notice: the server's code and message, and whether a retry
 * can help when the server said. */
function errorNotice(error) {
  const body = error instanceof ApiError ? error.body : null;
  return { kind: "error", text: error.message || String(error), code: error instanceof ApiError && body?.code ? body.code : undefined,
    retryable: typeof body?.retryable === "boolean" ? body.retryable : undefined };
}

function Notice({ notice }) {
  const advice = notice.kind === "error" ? retryAdvice(notice.retryable) : null;
  return (
    <p class={`notice ${notice.kind}`} role={notice.kind === "error" ? "alert" : "status"}>
      {notice.code && <><code class="code">{notice.code}</code> </>}
      {notice.text}
      {advice && <span class="notice-advice"> {advice}</span>}
    </p>
  );
}

/** The session's inputs sent again to the agent served now (`dormant dev` only): with the
 * recorded tool results (nothing outside is touched) unless "run the tools" is ticked. */
function ReplayControl({ running, disabled, onReplay, buttonRef }) {
  const [real, setReal] = useState(false);
  return (
    <div class="replay-control">
      <h2>Replay</h2>
      <p class="quiet">What would the agent served now do with this session's inputs? Nothing here is changed.</p>
      <p>
        <label class="check"><input type="checkbox" checked={real} onChange={(e) => setReal(e.currentTarget.checked)} /> run the tools (else their recorded results)</label>
      </p>
      <button type="button" class="secondary" ref={buttonRef} disabled={running || disabled}
        onClick={() => onReplay(real ? "real" : "recorded")}>{running ? "Replaying…" : "Replay against the current agent"}</button>
    </div>
  );
}

/** One sentence: where the turn is, next to the buttons that act on it. */
function turnSummary(view, running, details, mine, events) {
  if (running) return `A turn is running now${details ? ` (${running})` : ""}${mine ? "." : ", started elsewhere: it shows here once it commits."}`;
  if (!view) return "Nothing has run yet: the first message starts the session.";
  if (view.status === "failed") {
    const failed = events.findLast((e) => e.type === "invocation_failed");
    return failed && failed.retryable === false
      ? "The last turn failed, and retrying will not help until its cause is fixed (Retry still runs it again)."
      : "The last turn failed: Retry runs it again from where it stopped.";
  }
  if (view.status === "paused") return "Paused: Resume runs what waits in the inbox.";
  const kinds = new Set((view.waiting || []).map((w) => w.kind));
  if (kinds.has("yield") || kinds.has("approval") || kinds.has("input")) return "Waiting for you: answer in the conversation.";
  if (kinds.has("deferred")) return "Waiting for a tool's result, which the server supplies.";
  if (kinds.has("message")) return "Waiting for your next message.";
  if (view.running && view.running.stranded) return "A turn's request died mid-way: the server takes it over.";
  return "Idle: the last turn ended. A message starts the next.";
}

/** Every event as stored, for whoever needs what the conversation leaves out. Rendered only
 * when opened: a long session's JSON is large. */
function RawLedger({ events }) {
  const [open, setOpen] = useState(false);
  return (
    <details class="raw" onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>Raw ledger ({events.length} events)</summary>
      {open && <pre class="json" tabIndex={0} aria-label="The raw ledger as JSON">{JSON.stringify(events, null, 2)}</pre>}
    </details>
  );
}

function MessageBox({ busy, status, running, onSend }) {
  const [text, setText] = useState("");
  const send = (event) => {
    event.preventDefault();
    const message = text.trim();
    if (!message || busy) return;
    setText("");
    onSend(message);
  };
  const queues = status === "awaiting_input" || status === "failed" || status === "paused";
  return (
    <form class="message-box" onSubmit={send}>
      <label for="message">Message</label>
      <div class="composer">
        <textarea id="message" rows={2} value={text} aria-describedby="message-hint"
          onInput={(e) => setText(e.currentTarget.value)}
          onKeyDown={(e) => { if (e.key === "Enter" && !e.shiftKey) send(e); }} />
        <button type="submit" disabled={busy || !text.trim()}>{running ? "Steer" : "Send"}</button>
      </div>
      <small id="message-hint" class="hint">
        Enter sends, Shift+Enter starts a new line.
        {running ? " While the reply streams, a message steers it: the run takes it at its next step." : ""}
        {!running && queues ? " The session can't take a message now: it will wait in the inbox." : ""}
      </small>
    </form>
  );
}
