// Drives `dormant dev`'s POST /agui with the official AG-UI client (@ag-ui/client's HttpAgent):
// a turn that yields (ask_guest), then its resume, streamed event by event.
// Env: DORMANT_URL (server base URL), DORMANT_TEST_GATE (file the server's model waits for).
// Prints one JSON line with what it saw; exits non-zero on any failed expectation.
import { HttpAgent } from "@ag-ui/client";
import { existsSync, writeFileSync } from "node:fs";
import assert from "node:assert/strict";

const url = process.env.DORMANT_URL;
const gate = process.env.DORMANT_TEST_GATE;
assert.ok(url && gate, "DORMANT_URL and DORMANT_TEST_GATE must be set");

const agent = new HttpAgent({
  url: `${url}/agui`,
  threadId: `js-${Date.now()}`,
  headers: { "X-Principal": "js-client" },
});

// 1. "book me in": the concierge asks which night and the run ends interrupted.
agent.addMessage({ id: `m-${Date.now()}`, role: "user", content: "book me in" });
const first = [];
await agent.runAgent({}, { onEvent: ({ event }) => { first.push(event.type); } });
assert.equal(first[0], "RUN_STARTED");
assert.equal(first.at(-1), "RUN_FINISHED");
assert.ok(first.includes("TOOL_CALL_START"), `no tool call in ${first}`);
assert.equal(agent.pendingInterrupts.length, 1, "one pending interrupt");
const [interrupt] = agent.pendingInterrupts;
assert.equal(interrupt.toolCallId, interrupt.id);

// 2. Resume with the answer. The server's model stops after its first text delta until the
// gate file exists: seeing that delta before opening the gate proves the stream is not buffered.
const second = [];
let text = "";
let sawDeltaBeforeGate = false;
await agent.runAgent(
  { resume: [{ interruptId: interrupt.id, status: "resolved", payload: { answer: "Friday" } }] },
  {
    onEvent: ({ event }) => { second.push(event.type); },
    onTextMessageContentEvent: ({ event }) => {
      if (!existsSync(gate)) {
        sawDeltaBeforeGate = true;
        writeFileSync(gate, "open");
      }
      text += event.delta;
    },
  },
);
assert.ok(sawDeltaBeforeGate, "the first text delta arrived only after the gate opened");
assert.equal(text, "Booked for Friday.");
assert.equal(second[0], "RUN_STARTED");
assert.equal(second.at(-1), "RUN_FINISHED");
assert.ok(!second.includes("RUN_ERROR"), `run failed: ${second}`);
assert.equal(agent.pendingInterrupts.length, 0, "the interrupt is resolved");
const last = agent.messages.at(-1);
assert.equal(last.role, "assistant");
assert.equal(last.content, "Booked for Friday.");

console.log(JSON.stringify({ threadId: agent.threadId, first, second, text }));
