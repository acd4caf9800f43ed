// The console's only door to the server: the same HTTP API any client uses (POST /turns,
// GET /sessions, the session's event feed) and POST /agui through the official AG-UI client.
import { HttpAgent } from "@ag-ui/client";

const PRINCIPAL_KEY = "dormant.console.principal";
export const DEFAULT_PRINCIPAL = "local";

/** Who the console acts as: `dormant dev` takes the principal from the X-Principal header. */
export function getPrincipal() {
  try {
    return localStorage.getItem(PRINCIPAL_KEY) || DEFAULT_PRINCIPAL;
  } catch {
    return DEFAULT_PRINCIPAL;
  }
}

export function setPrincipal(value) {
  try {
    localStorage.setItem(PRINCIPAL_KEY, value || DEFAULT_PRINCIPAL);
  } catch {
    // private mode: the choice lasts for this page only
  }
}

function headers(extra = {}) {
  return { "X-Principal": getPrincipal(), ...extra };
}

/** A refusal or failure the server answered with its JSON error body ({code, message}). */
export class ApiError extends Error {
  constructor(status, body) {
    const message = (body && body.message) || `HTTP ${status}`;
    super(message);
    this.status = status;
    this.code = (body && body.code) || "http_error";
    this.body = body;
  }
}

/** A response's JSON body (or its text as `message`); an ApiError for a status that is not ok. */
async function answer(response) {
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { message: text };
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

async function request(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  return answer(response);
}

/** Session ids are normalised by the server: `s1` is `session_s1`. */
export function canonicalId(id) {
  return id.startsWith("session_") ? id : `session_${id}`;
}

/** How a person reads an id: without the `session_` every session id starts with. */
export const shortId = (id) => (id || "").replace(/^session_/, "");

/**
 * The sentence `dormant dev` puts in `<meta name="dormant-missing">` when it cannot serve
 * POST /agui (its AG-UI support is not installed), or null. Without it the page sends
 * everything through POST /turns: nothing streams, but nothing breaks.
 */
export function missingFeature() {
  const meta = document.querySelector('meta[name="dormant-missing"]');
  return meta ? meta.getAttribute("content") || "Part of the server is not installed." : null;
}

export function newSessionId() {
  const bytes = new Uint8Array(6);
  crypto.getRandomValues(bytes);
  return `session_console-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

export function newId(prefix) {
  return `${prefix}-${crypto.randomUUID().replaceAll("-", "").slice(0, 16)}`;
}

export const listSessions = () => request("GET", "/sessions?detail=true&limit=100");

/**
 * The session with its whole ledger, or null when there is none (yet) for this principal. The
 * ledger comes in pages (`next`: where the following page starts); the head fields are the
 * last page's, which is read after every event before it.
 */
/**
 * `dormant dev` only: the session's recorded inputs sent again to the agent it serves now, on
 * a store of their own (the session is not changed), each turn beside the recorded one.
 * `tools`: "recorded" plays the recorded results back; "real" runs the tools.
 */
export function replaySession(id, tools = "recorded") {
  return request("POST", `/sessions/${encodeURIComponent(id)}/replay`, { tools });
}

export async function getSession(id) {
  const path = `/sessions/${encodeURIComponent(id)}?events=true&limit=1000`;
  try {
    let page = await request("GET", path);
    const events = [...page.events];
    while (page.next) {
      page = await request("GET", `${path}&cursor=${encodeURIComponent(page.next)}`);
      events.push(...page.events);
    }
    return { ...page, events };
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return null;
    throw error;
  }
}

/** The session's head: status, pending work, inbox (no ledger). */
export const getSessionHead = (id) => request("GET", `/sessions/${encodeURIComponent(id)}`);

/** One POST /turns: a control, an inbox change, an input response, a retry... */
export const postTurn = (sessionId, body) => request("POST", "/turns", { sessionId, ...body });

/**
 * One spoken turn: the recorded audio as the raw body of POST /voice (its media type says the
 * format), answered as JSON: {transcript, output, audio: {data, format}, audioError, ...}.
 */
export async function postVoice(sessionId, audio) {
  const type = audio.type || "audio/webm";
  const response = await fetch(`/voice?sessionId=${encodeURIComponent(sessionId)}`, {
    method: "POST",
    headers: headers({ "Content-Type": type, Accept: "application/json" }),
    body: audio,
  });
  return answer(response);
}

/**
 * Follow a session's committed events (GET /sessions/{id}/events?follow=true, server-sent
 * events). EventSource cannot send the X-Principal header, so this reads the stream with fetch.
 * Calls onFeed({version, status, events, resync}) per commit; reconnects until `signal` aborts.
 * Only for a session that exists: the caller starts following once its first turn committed.
 */
export async function follow(id, after, onFeed, signal) {
  let version = after;
  while (!signal.aborted) {
    try {
      const response = await fetch(
        `/sessions/${encodeURIComponent(id)}/events?after=${version}&follow=true`,
        { headers: headers({ Accept: "text/event-stream" }), signal },
      );
      if (response.status === 404) return; // gone (or never created): nothing to follow
      if (!response.ok || !response.body) throw new ApiError(response.status, null);
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const feed = parseBlock(block);
          if (feed && feed.event === "error") return;
          // the server ends its stream before its deadline: follow on from `version`
          if (feed && feed.event === "reconnect") continue;
          if (feed && feed.data) {
            version = feed.data.version;
            onFeed(feed.data);
          }
        }
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    await pause(1000, signal);
  }
}

function parseBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
  }
  if (!data.length) return null;
  try {
    return { event, data: JSON.parse(data.join("\n")) };
  } catch {
    return null;
  }
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

/**
 * One turn through POST /agui with @ag-ui/client's HttpAgent: a message, `resume` entries
 * answering interrupts (tool calls and approvals), or `dormant` controls (the fields of a
 * POST /turns body: retry, resume, queue, inputs, pause) that the server runs and streams
 * like a message. `subscriber` gets the AG-UI events as they stream. A request the server
 * refused before streaming rejects with an ApiError.
 */
export async function runAgui(sessionId, { message, messageId, resume, dormant }, subscriber) {
  const agent = new HttpAgent({ url: "/agui", threadId: sessionId, headers: headers() });
  if (message !== undefined) {
    agent.addMessage({ id: messageId || newId("msg"), role: "user", content: message });
  }
  try {
    // positions: each event carries its stream position (rawEvent.seq), which a stop's
    // `seen` counts, so a Stop keeps exactly what this page has shown.
    const forwardedProps = { dormant: { ...(dormant || {}), positions: true } };
    await agent.runAgent(resume ? { resume, forwardedProps } : { forwardedProps }, subscriber);
  } catch (error) {
    if (error && error.status) throw new ApiError(error.status, error.payload);
    throw error;
  }
}

/**
 * Whether this server runs controls sent over POST /agui (`forwardedProps.dormant.retry`...):
 * `dormant dev` says so in the page it serves, `<meta name="dormant-capabilities"
 * content="agui-controls">`. Told, not probed: a page served elsewhere (Vite's dev server)
 * is not told, and sends its controls through POST /turns.
 */
export function aguiRunsControls() {
  const meta = document.querySelector('meta[name="dormant-capabilities"]');
  return (meta?.getAttribute("content") || "").split(/\s+/).includes("agui-controls");
}
