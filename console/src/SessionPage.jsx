// One session: its timeline (the ledger, then what streams now), what it waits for (answers as
// forms, approvals, input requests), turn control (Stop, Pause, Resume, Retry), the inbox and a
// message box. Turns started here stream through POST /agui; turns that begin elsewhere (a
// webhook, a timer, another tab) arrive through the session's event feed.
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { follow, getSession, getSessionHead, newId, postTurn, runAgui } from "./api.js";
import { Inbox } from "./Inbox.jsx";
import { SchemaForm } from "./SchemaForm.jsx";
import { Timeline } from "./Timeline.jsx";
import { VoiceButton } from "./Voice.jsx";
import { StatusBadge, waitingSummary } from "./status.jsx";

/** `incoming` appended to `events` once each (the feed and a reload may both bring one). */
function merge(events, incoming) {
  const seen = new Set(events.map((e) => e.id));
  const added = incoming.filter((e) => !seen.has(e.id));
  return added.length ? [...events, ...added] : events;
}

const pretty = (value) => (value === undefined ? "" : JSON.stringify(value));

export function SessionPage({ sessionId }) {
  const [view, setView] = useState(undefined); // undefined: loading; null: not started yet
  const [events, setEvents] = useState([]);
  const [live, setLive] = useState(null);
  const [notice, setNotice] = useState(null);
  const [busy, setBusy] = useState(false);
  const [outcomes, setOutcomes] = useState({});
  const heading = useRef(null);

  const reload = useCallback(async () => {
    const fresh = await getSession(sessionId);
    setView(fresh);
    setEvents(fresh ? fresh.events || [] : []);
    return fresh;
  }, [sessionId]);

  useEffect(() => {
    heading.current?.focus();
    const stop = new AbortController();
    setView(undefined);
    setEvents([]);
    setLive(null);
    setNotice(null);
    reload()
      .then((fresh) => follow(sessionId, fresh ? fresh.version : 0, async (feed) => {
        setEvents((held) => (feed.resync ? feed.events : merge(held, feed.events)));
        const head = await getSessionHead(sessionId).catch(() => null);
        if (head && !stop.signal.aborted) setView((held) => ({ ...held, ...head }));
      }, stop.signal))
      .catch((error) => setNotice({ kind: "error", text: `Could not load the session: ${error.message}` }));
    return () => stop.abort();
  }, [sessionId]);

  /** One turn through POST /agui, shown as it streams; then the committed ledger replaces it. */
  const stream = async (input, userText) => {
    setBusy(true);
    setNotice(null);
    let state = { runId: null, seen: undefined, done: false, outcome: null, items: userText ? [{ id: "you", kind: "user", label: "user", text: userText }] : [] };
    const update = (change) => { state = change(state); setLive(state); };
    const edit = (id, change) => update((s) => ({ ...s, items: s.items.map((item) => (item.id === id ? change(item) : item)) }));
    const push = (item) => update((s) => ({ ...s, items: [...s.items, item] }));
    update((s) => s);
    try {
      await runAgui(sessionId, input, {
        // What a Stop's `seen` says: the last stream position this page received (and showed).
        onEvent: ({ event }) => {
          const seq = event.rawEvent?.seq;
          if (typeof seq === "number" && !(state.seen >= seq)) state = { ...state, seen: seq };
        },
        onRunStartedEvent: ({ event }) => update((s) => ({ ...s, runId: event.metadata?.invocationId || event.runId })),
        onTextMessageStartEvent: ({ event }) => push({ id: event.messageId, kind: event.role === "user" ? "user" : "assistant", label: event.role || "assistant", text: "" }),
        onTextMessageContentEvent: ({ event }) => edit(event.messageId, (item) => ({ ...item, text: item.text + event.delta })),
        onToolCallStartEvent: ({ event }) => push({ id: event.toolCallId, kind: "tool", label: "tool call", name: event.toolCallName, args: "", text: `${event.toolCallName}(…)` }),
        onToolCallArgsEvent: ({ event }) => edit(event.toolCallId, (item) => ({ ...item, args: item.args + event.delta, text: `${item.name}(${item.args + event.delta})` })),
        onToolCallResultEvent: ({ event }) => push({ id: event.messageId, kind: "result", label: "result", text: event.content }),
        onCustomEvent: ({ event }) => {
          if (event.name === "QUEUED") {
            setNotice({ kind: "info", text: `The session can't take a message now: yours waits in the inbox at position ${event.value.position + 1}.` });
          }
        },
        onRunFinishedEvent: ({ event, outcome }) => {
          const result = event.result || {};
          const what = outcome === "interrupt" ? "waiting for input" : result.status || "finished";
          update((s) => ({ ...s, done: true, outcome: `${what}${result.commitStatus ? ` · commit: ${result.commitStatus}` : ""}` }));
          if (state.runId && result.commitStatus) setOutcomes((held) => ({ ...held, [state.runId]: result.commitStatus }));
        },
        onRunErrorEvent: ({ event }) => {
          update((s) => ({ ...s, done: true }));
          setNotice({ kind: "error", text: event.message });
        },
      });
    } catch (error) {
      setNotice({ kind: "error", text: error.message || String(error) });
    } finally {
      await reload().catch(() => {});
      setLive(null);
      setBusy(false);
    }
  };

  /** One POST /turns (a control, an input response, an inbox change): the answer's refusal is shown as the server gave it. */
  const control = async (body, done) => {
    setBusy(true);
    setNotice(null);
    try {
      const reply = await postTurn(sessionId, body);
      if (done) setNotice({ kind: "info", text: done(reply) });
    } catch (error) {
      setNotice({ kind: "error", text: error.message });
    } finally {
      await reload().catch(() => {});
      setBusy(false);
    }
  };

  /** Stop and pause act on a turn streaming now: they must not wait for it. */
  const signalRun = async (body, what) => {
    try {
      await postTurn(sessionId, body);
      setNotice({ kind: "info", text: what });
    } catch (error) {
      setNotice({ kind: "error", text: error.message });
    }
  };

  const running = live && !live.done && live.runId;
  const status = view ? view.status : "new";
  return (
    <section class="session" aria-labelledby="session-title">
      <p><a href="#/">← All sessions</a></p>
      <h1 id="session-title" tabIndex={-1} ref={heading}>{sessionId}</h1>
      <p class="meta">
        <StatusBadge status={running ? "running" : status} />
        {view && <> · version {view.version}</>}
        {view?.forkOf && <> · fork of <a href={`#/sessions/${encodeURIComponent(view.forkOf.session)}`}>{view.forkOf.session}</a> at version {view.forkOf.version}</>}
        {view?.compactions ? <> · compacted {view.compactions}×</> : null}
        {view && <> · {waitingSummary(view)}</>}
      </p>
      <div class="notices" aria-live="polite">
        {notice && <p class={`notice ${notice.kind}`} role={notice.kind === "error" ? "alert" : "status"}>{notice.text}</p>}
      </div>
      <div class="columns">
        <div class="main-column">
          <h2>Timeline</h2>
          <Timeline events={events} live={live} outcomes={outcomes} forkOf={view?.forkOf} />
          <MessageBox busy={busy && !running} status={status} running={Boolean(running)}
            onSend={(text) => (running
              ? signalRun({ steer: { text, invocationId: live.runId, id: newId("steer") } }, "Steer sent: the run takes it at its next step.")
              : stream({ message: text, messageId: newId("msg") }, text))} />
          <VoiceButton sessionId={sessionId} disabled={busy || Boolean(running)} onNotice={setNotice}
            onDone={() => reload().catch(() => {})} />
        </div>
        <aside class="side-column" aria-label="What the session waits for">
          <h2>Turn</h2>
          <div class="buttons">
            <button type="button" disabled={!running} onClick={() => signalRun({ stop: { invocationId: live.runId, ...(live.seen ? { seen: live.seen } : {}) } }, "Stop sent: the run ends within a second, keeping what you saw.")}>Stop</button>
            <button type="button" disabled={!running} onClick={() => signalRun({ pause: true }, "Pause sent: the run pauses at its next step.")}>Pause</button>
            <button type="button" disabled={busy || status !== "paused"} onClick={() => control({ resume: true })}>Resume</button>
            <button type="button" disabled={busy || status !== "failed"} onClick={() => control({ retry: { retryId: newId("retry") } })}>Retry</button>
          </div>
          {view?.openInvocation && status === "awaiting_input" && (
            <p><button type="button" class="secondary" disabled={busy} onClick={() => control({ stop: { invocationId: view.openInvocation } })}>Stop waiting</button></p>
          )}
          <Pending view={view} busy={busy} stream={stream} control={control} />
          <Inbox items={view?.inbox || []} busy={busy} onOp={(op) => control({ queue: [op] })} />
        </aside>
      </div>
    </section>
  );
}

function Pending({ view, busy, stream, control }) {
  if (!view) return null;
  const calls = view.yieldedTools || [];
  const approvals = view.pendingApprovals || [];
  const inputs = view.pendingInputs || [];
  if (!calls.length && !approvals.length && !inputs.length) return <p class="quiet">Waiting for nothing.</p>;
  return (
    <>
      <h2>Waiting for</h2>
      {calls.map((call) => (
        <article key={call.callId} class="card" aria-labelledby={`card-${call.callId}`}>
          <h3 id={`card-${call.callId}`}>{call.name} asks</h3>
          <Args args={call.args} />
          <SchemaForm schema={call.inputSchema || {}} idPrefix={`answer-${call.callId}`} submitLabel="Send answer" disabled={busy}
            onSubmit={(value) => stream({ resume: [{ interruptId: call.callId, status: "resolved", payload: value }] })} />
        </article>
      ))}
      {approvals.map((approval) => <ApprovalCard key={approval.approvalId} approval={approval} busy={busy} stream={stream} />)}
      {inputs.map((request) => (
        <article key={request.inputId} class="card" aria-labelledby={`card-${request.inputId}`}>
          <h3 id={`card-${request.inputId}`}>{request.prompt || `Input ${request.inputId}`}</h3>
          <SchemaForm schema={request.schema || {}} idPrefix={`input-${request.inputId}`} submitLabel="Send response" disabled={busy}
            onSubmit={(value) => control({ inputs: [{ inputId: request.inputId, value }] })} />
        </article>
      ))}
    </>
  );
}

function ApprovalCard({ approval, busy, stream }) {
  const [reason, setReason] = useState("");
  const id = `reason-${approval.approvalId}`;
  const decide = (approved) => stream({ resume: [{ interruptId: approval.approvalId, status: "resolved", payload: { approved, ...(reason.trim() ? { reason: reason.trim() } : {}) } }] });
  return (
    <article class="card approval" aria-labelledby={`card-${approval.approvalId}`}>
      <h3 id={`card-${approval.approvalId}`}>Approve {approval.tool}?</h3>
      <Args args={approval.args} />
      <label for={id}>Reason (optional)</label>
      <input id={id} type="text" value={reason} onInput={(e) => setReason(e.currentTarget.value)} />
      <div class="buttons">
        <button type="button" disabled={busy} onClick={() => decide(true)}>Approve</button>
        <button type="button" class="danger" disabled={busy} onClick={() => decide(false)}>Deny</button>
      </div>
    </article>
  );
}

function Args({ args }) {
  if (args && typeof args === "object" && !Array.isArray(args)) {
    return (
      <dl class="args">
        {Object.entries(args).map(([key, value]) => (
          <div key={key}><dt>{key}</dt><dd>{typeof value === "string" ? value : pretty(value)}</dd></div>
        ))}
      </dl>
    );
  }
  return args === undefined || args === null ? null : <pre class="args">{pretty(args)}</pre>;
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
      <textarea id="message" rows={2} value={text} aria-describedby="message-hint"
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => { if (e.key === "Enter" && !e.shiftKey) send(e); }} />
      <small id="message-hint" class="hint">
        Enter sends, Shift+Enter starts a new line.
        {running ? " While the reply streams, a message steers it: the run takes it at its next step." : ""}
        {!running && queues ? " The session can't take a message now: it will wait in the inbox." : ""}
      </small>
      <button type="submit" disabled={busy || !text.trim()}>{running ? "Steer" : "Send"}</button>
    </form>
  );
}
