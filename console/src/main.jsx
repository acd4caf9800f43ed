// The dormant console: a hash-routed single page (#/ the sessions, #/sessions/<id> one
// session), so moving around never reloads the page and the server serves one file.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { canonicalId, getPrincipal, missingFeature, setPrincipal } from "./api.js";
import { SessionList } from "./SessionList.jsx";
import { SessionPage } from "./SessionPage.jsx";
import "./style.css";

function route() {
  const match = /^#\/sessions\/(.+)$/.exec(location.hash);
  return match ? { page: "session", id: canonicalId(decodeURIComponent(match[1])) } : { page: "list" };
}

function Principal({ onChange }) {
  const [value, setValue] = useState(getPrincipal());
  const apply = (event) => {
    event.preventDefault();
    setPrincipal(value.trim());
    onChange(getPrincipal());
  };
  return (
    <form class="principal" onSubmit={apply}>
      <label for="principal">Principal</label>
      <input id="principal" value={value} size={10} onInput={(e) => setValue(e.currentTarget.value)}
        aria-describedby="principal-hint" title="Sent as X-Principal: you see this principal's sessions" />
      <button type="submit" class="secondary">Use</button>
      <small id="principal-hint" class="hint">sent as X-Principal: you see this principal's sessions</small>
    </form>
  );
}

/** What the server said it cannot do (its AG-UI support is missing): said once, on top. */
function Missing() {
  const sentence = missingFeature();
  if (!sentence) return null;
  return (
    <p class="banner" role="status">
      {/[.!?)]$/.test(sentence) ? sentence : `${sentence}.`} Until then the console sends everything through POST /turns: replies appear
      once they are committed instead of streaming.
    </p>
  );
}

function App() {
  const [where, setWhere] = useState(route());
  const [principal, setCurrent] = useState(getPrincipal());
  useEffect(() => {
    // After moving within the page (not on load), focus goes to the new content, as a page
    // load would put it: a screen reader starts there, a keyboard continues from there.
    const moved = () => {
      setWhere(route());
      requestAnimationFrame(() => document.getElementById("main")?.focus({ preventScroll: false }));
    };
    addEventListener("hashchange", moved);
    return () => removeEventListener("hashchange", moved);
  }, []);
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById("main")?.focus(); }}>Skip to content</a>
      <header class="top">
        <a class="brand" href="#/">dormant</a>
        <nav aria-label="Console"><a href="#/">Sessions</a> <a href="/docs">API</a></nav>
        <Principal onChange={setCurrent} />
      </header>
      <Missing />
      <main id="main" tabIndex={-1} key={`${principal}:${where.page}:${where.id || ""}`}>
        {where.page === "session" ? <SessionPage sessionId={where.id} /> : <SessionList />}
      </main>
    </>
  );
}

render(<App />, document.getElementById("app"));
