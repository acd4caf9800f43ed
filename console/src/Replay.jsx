// "Replay against the current agent" (dormant dev only): the session's recorded inputs sent
// again to the agent the server serves now (POST /sessions/{id}/replay), on a store of their
// own, and each input's turn shown side by side: what the recording did, what the current agent
// does. A changed turn is marked and its differing fields highlighted; an input the replay
// could not deliver (an answer to a call the new agent never made) says why.

/** The fields a turn is compared by, in the order they show. */
const FIELDS = [
  { key: "tools", label: "Tools" },
  { key: "approvals", label: "Approvals asked" },
  { key: "questions", label: "Questions asked" },
  { key: "status", label: "Status" },
  { key: "text", label: "Text" },
];

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

/** `3 of 4 turns changed · tool calls changed in 2 · new approvals: none · text score 0.72` */
export function replaySummary(answer) {
  const turns = answer.turns || [];
  const changed = turns.filter((turn) => turn.changes.length).length;
  const approvals = answer.newApprovals.length ? answer.newApprovals.join(", ") : "none";
  return `${changed} of ${turns.length} turn${turns.length === 1 ? "" : "s"} changed · tool calls changed in ${answer.toolsChanged} · new approvals: ${approvals} · text score ${answer.textScore.toFixed(2)}`;
}

/** `upgrade_room({"ref": "BK-1"})` as its name and its arguments. */
function ToolCall({ call }) {
  const open = call.indexOf("(");
  const name = open < 0 ? call : call.slice(0, open);
  const args = open < 0 ? "" : call.slice(open);
  return <li><code class="tool-name">{name}</code><code class="replay-args">{args}</code></li>;
}

function FieldValue({ field, value }) {
  if (field === "tools") return value.length ? <ul class="replay-tools">{value.map((call, i) => <ToolCall key={i} call={call} />)}</ul> : <span class="quiet">none</span>;
  if (field === "approvals" || field === "questions") return value.length ? <span>{value.join(", ")}</span> : <span class="quiet">none</span>;
  if (field === "status") return <code>{value}</code>;
  return value ? <span class="replay-text">{value}</span> : <span class="quiet">(nothing said)</span>;
}

/** One side of a turn: its fields, those that differ from the other side highlighted. */
function Outcome({ outcome, other }) {
  return (
    <dl class="replay-outcome">
      {FIELDS.map(({ key, label }) => {
        const differs = Boolean(other) && !same(outcome[key], other[key]);
        return (
          <div key={key} class={differs ? "replay-field differs" : "replay-field"}>
            <dt>{label}{differs && <span class="visually-hidden"> (differs)</span>}</dt>
            <dd><FieldValue field={key} value={outcome[key]} /></dd>
          </div>
        );
      })}
    </dl>
  );
}

function TurnRow({ turn, orphan }) {
  const changed = turn.changes.length > 0;
  return (
    <tr class={changed ? "replay-turn changed" : "replay-turn"}>
      <th scope="row" class="replay-input">
        <span class="replay-number">Turn {turn.index + 1}</span>
        <span>{turn.input}</span>
        {changed ? <span class="badge replay-changed">changed</span> : <span class="badge replay-same">same</span>}
      </th>
      <td><Outcome outcome={turn.recorded} other={changed ? turn.replayed : undefined} /></td>
      <td>
        {turn.replayed
          ? <Outcome outcome={turn.replayed} other={changed ? turn.recorded : undefined} />
          : <p class="replay-orphan">not replayed: {orphan ? orphan.reason : "the input no longer fits"}</p>}
      </td>
    </tr>
  );
}

/** The replay's answer, side by side; `onClose` returns to the session. */
export function ReplayView({ answer, onClose, headingRef }) {
  const orphans = new Map((answer.orphans || []).map((orphan) => [orphan.index, orphan]));
  return (
    <section class="replay" aria-labelledby="replay-title">
      <div class="replay-head">
        <h2 id="replay-title" tabIndex={-1} ref={headingRef}>Replay against the current agent</h2>
        <button type="button" class="secondary" onClick={onClose}>Close replay</button>
      </div>
      <p class="quiet">
        The recorded inputs, sent again to <code>{answer.agent}</code> as the server serves it now,
        {answer.tools === "real" ? " its tools run for real," : " the recorded tool results played back,"} on
        a store of its own: this session is not changed.
      </p>
      <p class="replay-summary" role="status">{replaySummary(answer)}</p>
      <div class="replay-scroll">
        <table class="replay-turns">
          <caption class="visually-hidden">Each input's turn, recorded and replayed</caption>
          <thead>
            <tr>
              <th scope="col">Input</th>
              <th scope="col">Recorded</th>
              <th scope="col">Replayed (current agent)</th>
            </tr>
          </thead>
          <tbody>
            {answer.turns.map((turn) => <TurnRow key={turn.index} turn={turn} orphan={orphans.get(turn.index)} />)}
          </tbody>
        </table>
      </div>
      {answer.notes.length > 0 && (
        <>
          <h3>Notes</h3>
          <ul class="replay-notes" aria-label="What the replay could not do as recorded">
            {answer.notes.map((note, i) => <li key={i}>{note}</li>)}
          </ul>
        </>
      )}
    </section>
  );
}
