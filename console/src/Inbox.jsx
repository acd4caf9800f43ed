// The inbox: messages queued while the session could not take them, in the order they will
// run. Edit, reorder, remove, or send one now (which ends what the session waits for).
import { useState } from "preact/hooks";

export function Inbox({ items, busy, onOp }) {
  if (!items.length) return null;
  return (
    <section aria-labelledby="inbox-title">
      <h2 id="inbox-title">Inbox ({items.length})</h2>
      <ol class="inbox">
        {items.map((item, index) => (
          <QueuedItem key={item.id} item={item} index={index} last={index === items.length - 1} busy={busy} onOp={onOp} />
        ))}
      </ol>
    </section>
  );
}

function QueuedItem({ item, index, last, busy, onOp }) {
  const [text, setText] = useState(item.text);
  const id = `queued-${item.id}`;
  const changed = text.trim() && text !== item.text;
  return (
    <li class="card queued">
      <label for={id}>Queued message {index + 1}</label>
      <input id={id} type="text" value={text} onInput={(e) => setText(e.currentTarget.value)} />
      <div class="buttons">
        <button type="button" disabled={busy || !changed} onClick={() => onOp({ op: "edit", id: item.id, text })}>Save</button>
        <button type="button" disabled={busy || index === 0} aria-label={`Move queued message ${index + 1} up`}
          onClick={() => onOp({ op: "move", id: item.id, position: index - 1 })}>↑</button>
        <button type="button" disabled={busy || last} aria-label={`Move queued message ${index + 1} down`}
          onClick={() => onOp({ op: "move", id: item.id, position: index + 1 })}>↓</button>
        <button type="button" disabled={busy} onClick={() => onOp({ op: "remove", id: item.id })}>Remove</button>
        <button type="button" disabled={busy} onClick={() => onOp({ op: "send_now", id: item.id })}>Send now</button>
      </div>
    </li>
  );
}
