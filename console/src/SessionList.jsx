// The sessions of this principal: how each began (its first message), what it waits for,
// sessions waiting on a person first, filterable; refreshed every few seconds while the page
// is visible. On a narrow screen each row is a card (no column is cut off). Each row names the
// agent that ran the session; its version (commits so far) only when asked.
import { useEffect, useState } from "preact/hooks";
import { listSessions, newSessionId, shortId } from "./api.js";
import { StatusBadge, statusOf } from "./status.jsx";

const REFRESH_MS = 2000;
const ORDER = { awaiting_input: 0, failed: 1, paused: 2, active: 3 };
const VERSIONS_KEY = "dormant.console.versions";

function storedVersions() {
  try {
    return localStorage.getItem(VERSIONS_KEY) === "on";
  } catch {
    return false;
  }
}

function ago(ms) {
  const seconds = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return new Date(ms).toLocaleDateString();
}

export function SessionList() {
  const [sessions, setSessions] = useState(null);
  const [error, setError] = useState(null);
  const [query, setQuery] = useState("");
  const [status, setStatus] = useState("");
  const [versions, setVersions] = useState(storedVersions);
  const toggleVersions = (event) => {
    const on = event.currentTarget.checked;
    setVersions(on);
    try { localStorage.setItem(VERSIONS_KEY, on ? "on" : "off"); } catch { /* this page only */ }
  };

  useEffect(() => {
    let timer;
    let stopped = false;
    const load = async () => {
      try {
        const body = await listSessions();
        if (!stopped) { setSessions(body.sessions); setError(null); }
      } catch (failure) {
        if (!stopped) setError(failure.message);
      }
      if (!stopped) timer = setTimeout(load, document.hidden ? REFRESH_MS * 5 : REFRESH_MS);
    };
    load();
    return () => { stopped = true; clearTimeout(timer); };
  }, []);

  const needle = query.trim().toLowerCase();
  const shown = (sessions || [])
    .filter((s) => !status || s.status === status)
    .filter((s) => !needle || [s.sessionId, s.preview || "", s.agent || "", statusOf(s).label, statusOf(s).sentence].some((text) => text.toLowerCase().includes(needle)))
    .sort((a, b) => (ORDER[a.status] ?? 9) - (ORDER[b.status] ?? 9) || b.updatedAt - a.updatedAt);

  return (
    <section aria-labelledby="sessions-title">
      <h1 id="sessions-title">Sessions</h1>
      <div class="toolbar">
        <div class="field">
          <label for="filter">Filter</label>
          <input id="filter" type="search" value={query} placeholder="id, message, status…" onInput={(e) => setQuery(e.currentTarget.value)} />
        </div>
        <div class="field">
          <label for="status-filter">Status</label>
          <select id="status-filter" value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
            <option value="">all</option>
            <option value="awaiting_input">awaiting input</option>
            <option value="failed">failed</option>
            <option value="paused">paused</option>
            <option value="active">idle or running</option>
          </select>
        </div>
        <label class="check versions-toggle">
          <input type="checkbox" checked={versions} onChange={toggleVersions} />
          Show versions
        </label>
        <a class="button" href={`#/sessions/${newSessionId()}`}>New session</a>
      </div>
      {error && <p class="notice error" role="alert">Could not list sessions: {error}</p>}
      {sessions === null && !error && <p>Loading…</p>}
      {sessions && (
        <table class="sessions">
          <caption>{shown.length} of {sessions.length} sessions, those waiting on a person first</caption>
          <thead>
            <tr><th scope="col">Session</th><th scope="col">Agent</th><th scope="col">Status</th>{versions && <th scope="col" class="secondary-col">Version</th>}<th scope="col">Last activity</th></tr>
          </thead>
          <tbody>
            {shown.map((s) => {
              const told = statusOf(s);
              return (
              <tr key={s.sessionId} class={`row-${s.status}`}>
                <th scope="row">
                  <a class="session-link" href={`#/sessions/${encodeURIComponent(s.sessionId)}`}>{shortId(s.sessionId)}</a>
                  {s.forkOf && <span class="mark" title={`fork of ${shortId(s.forkOf.session)} at version ${s.forkOf.version}`}>fork of {shortId(s.forkOf.session)}@{s.forkOf.version}</span>}
                  {s.compactions ? <span class="mark">compacted {s.compactions}×</span> : null}
                  <span class={`preview${s.preview ? "" : " none"}`}>{s.preview || (s.preview === null ? "no message yet" : "")}</span>
                </th>
                <td class="agent">{s.agent || <span class="quiet">none yet</span>}</td>
                <td class="status-cell"><StatusBadge status={told} /> <span class="waits">{told.sentence}</span></td>
                {versions && <td class="secondary-col version">{s.version}</td>}
                <td class="when"><time dateTime={new Date(s.updatedAt).toISOString()} title={new Date(s.updatedAt).toLocaleString()}>{ago(s.updatedAt)}</time></td>
              </tr>
              );
            })}
          </tbody>
        </table>
      )}
      {sessions && sessions.length === 0 && <p class="quiet">No sessions yet for this principal: start one with New session.</p>}
    </section>
  );
}
