// Drives `dormant dev`'s POST /agui (tests/e2e/frontend_app.py) with the official AG-UI client
// (@ag-ui/client's HttpAgent) the way an AG-UI front-end uses a front-end tool: the run offers
// the page's tool and the page's context, the model calls the tool, the page runs it, adds the
// `tool` message with its result and runs the agent again.
// Env: DORMANT_URL (server base URL).
// Prints one JSON line with what it saw; exits non-zero on any failed expectation.
import { HttpAgent } from "@ag-ui/client";
import assert from "node:assert/strict";

const url = process.env.DORMANT_URL;
assert.ok(url, "DORMANT_URL must be set");

const CONFIRM = {
  name: "confirm_in_page",
  description: "Ask the user, in the page, to confirm a booking",
  parameters: {
    type: "object",
    properties: { room: { type: "string" } },
    required: ["room"],
  },
};
const tools = [CONFIRM];
const context = [{ description: "page", value: "checkout" }];

const threadId = `js-tools-${Date.now()}`;
const agent = new HttpAgent({ url: `${url}/agui`, threadId });

function runOf(runId) {
  const seen = { runId, types: [], started: undefined, finished: undefined, calls: [], text: "" };
  const subscriber = {
    onEvent: ({ event }) => { seen.types.push(event.type); },
    onRunStartedEvent: ({ event }) => { seen.started = event; },
    onRunFinishedEvent: ({ event, outcome, pendingToolCallIds }) => {
      seen.finished = event;
      seen.outcome = outcome;
      seen.pending = pendingToolCallIds;
    },
    onToolCallEndEvent: ({ toolCallName, toolCallArgs, event }) => {
      seen.calls.push({ id: event.toolCallId, name: toolCallName, args: toolCallArgs });
    },
    onTextMessageContentEvent: ({ event }) => { seen.text += event.delta; },
  };
  return { seen, subscriber };
}

// 1. The user asks; the model calls the page's tool and the run ends waiting on it.
agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: "book room 12" });
const first = runOf(`run-1-${Date.now()}`);
await agent.runAgent({ runId: first.seen.runId, tools, context }, first.subscriber);
assert.equal(first.seen.types[0], "RUN_STARTED");
assert.equal(first.seen.types.at(-1), "RUN_FINISHED", `first run: ${first.seen.types}`);
assert.equal(first.seen.started.threadId, threadId, "RUN_STARTED carries the client's threadId");
assert.equal(first.seen.started.runId, first.seen.runId, "RUN_STARTED carries the client's runId");
assert.equal(first.seen.finished.runId, first.seen.runId, "RUN_FINISHED carries the client's runId");
assert.equal(first.seen.calls.length, 1, `one tool call: ${JSON.stringify(first.seen.calls)}`);
const [call] = first.seen.calls;
assert.equal(call.name, CONFIRM.name);
assert.deepEqual(call.args, { room: "12" });
// AG-UI counts a run that stopped on a front-end tool call as completed; the client derives
// the call left for it to answer from the stream.
assert.equal(first.seen.outcome, "success");
assert.deepEqual(first.seen.pending, [call.id]);
assert.equal(agent.pendingInterrupts.length, 0, "a front-end tool call is no interrupt");

// 2. The page runs its tool and answers with a `tool` message; the agent carries on.
agent.addMessage({ id: `t-${Date.now()}`, role: "tool", toolCallId: call.id, content: "confirmed" });
const second = runOf(`run-2-${Date.now()}`);
await agent.runAgent({ runId: second.seen.runId, tools, context }, second.subscriber);
assert.equal(second.seen.types.at(-1), "RUN_FINISHED", `second run: ${second.seen.types}`);
assert.ok(!second.seen.types.includes("RUN_ERROR"), `second run failed: ${second.seen.types}`);
assert.equal(second.seen.started.threadId, threadId);
assert.equal(second.seen.started.runId, second.seen.runId);
const deltas = second.seen.types.filter((t) => t === "TEXT_MESSAGE_CONTENT").length;
assert.ok(deltas > 1, `the answer was streamed in one delta (${deltas})`);
const last = agent.messages.at(-1);
assert.equal(last.role, "assistant");
assert.equal(last.content, second.seen.text);

console.log(JSON.stringify({
  threadId,
  sessionId: first.seen.started.metadata?.sessionId,
  call,
  first: first.seen.types,
  second: second.seen.types,
  text: second.seen.text,
  pendingInterrupts: agent.pendingInterrupts.length,
}));
