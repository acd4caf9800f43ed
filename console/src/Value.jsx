// Any JSON value as a person reads it: an object as key / value pairs (nested ones indented
// under their key), a list as numbered items, a string as itself. No braces, no quotes: the
// raw JSON stays in the tool cards and the raw ledger.

const SCALAR = new Set(["string", "number", "boolean"]);

/** A string that holds JSON (a tool's text result) as the value it holds, else itself. */
export function parsed(value) {
  if (typeof value !== "string") return value;
  const text = value.trim();
  if (!text.startsWith("{") && !text.startsWith("[")) return value;
  try {
    return JSON.parse(text);
  } catch {
    return value;
  }
}

function Scalar({ value }) {
  if (value === null || value === undefined) return <span class="kv-none">none</span>;
  if (typeof value === "boolean") return <span class="kv-bool">{String(value)}</span>;
  if (value === "") return <span class="kv-none">(empty)</span>;
  return <span class="kv-text">{String(value)}</span>;
}

/** `value` as key / value pairs; `label` names the whole for screen readers. */
export function KeyValue({ value, label }) {
  const shown = parsed(value);
  if (Array.isArray(shown)) {
    if (!shown.length) return <span class="kv-none">(no items)</span>;
    return (
      <ol class="kv-list" aria-label={label}>
        {shown.map((item, index) => <li key={index}><KeyValue value={item} /></li>)}
      </ol>
    );
  }
  if (shown && typeof shown === "object") {
    const entries = Object.entries(shown);
    if (!entries.length) return <span class="kv-none">(no fields)</span>;
    return (
      <dl class="kv" aria-label={label}>
        {entries.map(([key, item]) => (
          <div key={key} class={SCALAR.has(typeof item) || item === null ? "kv-row" : "kv-row kv-nested"}>
            <dt>{key}</dt>
            <dd><KeyValue value={item} /></dd>
          </div>
        ))}
      </dl>
    );
  }
  return <Scalar value={shown} />;
}
