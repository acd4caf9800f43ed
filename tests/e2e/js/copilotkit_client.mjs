// CopilotKit in front of `dormant dev` (tests/e2e/frontend_app.py): its runtime
// (@copilotkit/runtime's Node HTTP endpoint, serving one agent, an @ag-ui/client HttpAgent
// pointed at dormant's POST /agui) on 127.0.0.1, driven by CopilotKit's own front-end core
// (@copilotkit/core's CopilotKitCore, what its React provider wraps) as a page would drive it.
//
//   node copilotkit_client.mjs tools   a frontend action: the model calls it, CopilotKitCore
//                                      runs its handler and sends the result back (its
//                                      follow-up run); the answer shows the result and context
//   node copilotkit_client.mjs stop    a slow answer stopped, as the Stop button does
//                                      (CopilotKitCore.stopAgent), after its first delta
//
// Env: DORMANT_URL (server base URL). Prints one JSON line with what it saw; exits non-zero on
// any failed expectation. What dormant kept is checked by the Python test, through its API.
import { HttpAgent } from "@ag-ui/client";
import { CopilotKitCore } from "@copilotkit/core";
import {
  CopilotRuntime,
  ExperimentalEmptyAdapter,
  copilotRuntimeNodeHttpEndpoint,
} from "@copilotkit/runtime";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { z } from "zod";

const mode = process.argv[2];
const url = process.env.DORMANT_URL;
assert.ok(url, "DORMANT_URL must be set");
assert.ok(mode === "tools" || mode === "stop", "usage: copilotkit_client.mjs tools|stop");

// --- the runtime: CopilotKit's server, its one agent dormant's AG-UI endpoint --------------
const ENDPOINT = "/copilotkit";
// The runtime clones this agent for each request; the subclass only counts the aborts of its
// request to dormant (how a Stop reaches dormant: the runtime aborts that fetch).
let runtimeAborts = 0;
class CountingHttpAgent extends HttpAgent {
  abortRun() {
    runtimeAborts += 1;
    super.abortRun();
  }
}
const runtime = new CopilotRuntime({
  agents: { default: new CountingHttpAgent({ url: `${url}/agui` }) },
});
const handler = copilotRuntimeNodeHttpEndpoint({
  endpoint: ENDPOINT,
  runtime,
  serviceAdapter: new ExperimentalEmptyAdapter(),
});
const server = createServer((req, res) => handler(req, res));
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const runtimeUrl = `http://127.0.0.1:${server.address().port}${ENDPOINT}`;

// --- the page: CopilotKit's front-end core, with one frontend action and some context ------
// The core talks to its runtime only in a browser (it checks for `window`): give it a page.
globalThis.window ??= { location: new URL("http://127.0.0.1/app") };
const executed = [];
const core = new CopilotKitCore({
  runtimeUrl,
  runtimeTransport: "single", // what copilotRuntimeNodeHttpEndpoint serves: one route
  tools: [{
    name: "confirm_in_page",
    description: "Ask the user, in the page, to confirm a booking",
    parameters: z.object({ room: z.string() }),
    handler: async (args) => {
      executed.push(args);
      return "confirmed";
    },
  }],
});
core.addContext({ description: "page", value: "checkout" });
const errors = [];
core.subscribe({ onError: ({ error, code }) => { errors.push(`${code}: ${error?.message}`); } });

const agent = await waitForAgent("default");
const seen = { types: [], sent: [], runs: [], text: "", finished: [], failed: [] };
agent.subscribe({
  onRunInitialized: ({ input }) => { seen.sent.push(input.runId); },
  onEvent: ({ event }) => { seen.types.push(event.type); },
  onRunStartedEvent: ({ event }) => {
    seen.runs.push({ threadId: event.threadId, runId: event.runId,
                     sessionId: event.metadata?.sessionId });
  },
  onTextMessageContentEvent: ({ event }) => { seen.text += event.delta; },
  onRunFinishedEvent: ({ event }) => { seen.finished.push(event.runId); },
  onRunFailed: ({ error }) => { seen.failed.push(String(error)); },
  onRunErrorEvent: ({ event }) => { seen.runError = { message: event.message, code: event.code }; },
});

try {
  if (mode === "tools") await frontendAction();
  else await stop();
} finally {
  server.closeAllConnections?.();
  server.close();
}

async function frontendAction() {
  agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: "book room 12" });
  await core.runAgent({ agent });
  assert.deepEqual(errors, [], "CopilotKit reported errors");
  assert.deepEqual(executed, [{ room: "12" }], "the action ran once, with the model's args");
  // the model's call, the page's result, the answer: two runs (CopilotKit's follow-up), each
  // started and finished under the runId the page sent
  assert.equal(seen.runs.length, 2, `runs: ${JSON.stringify(seen.runs)}`);
  assert.deepEqual(seen.runs.map((r) => r.runId), seen.sent, "RUN_STARTED echoes the runIds");
  assert.deepEqual(seen.finished, seen.sent, "each run's RUN_FINISHED reached the page");
  assert.deepEqual(seen.failed, [], "a run failed in the page");
  assert.ok(seen.runs.every((r) => r.threadId === agent.threadId), "the page's threadId is echoed");
  const roles = agent.messages.map((m) => m.role);
  assert.deepEqual(roles, ["user", "assistant", "tool", "assistant"], `messages: ${roles}`);
  const answer = agent.messages.at(-1).content;
  console.log(JSON.stringify({
    threadId: agent.threadId, runs: seen.runs, executed, answer, types: seen.types,
    tool: agent.messages[2],
  }));
}

async function stop() {
  agent.addMessage({ id: `u-${Date.now()}`, role: "user", content: "tell me slowly" });
  let stopped = false;
  const unsubscribe = agent.subscribe({
    onTextMessageContentEvent: () => {
      if (!stopped) {
        stopped = true;
        core.stopAgent({ agent }); // what the chat's Stop button calls
      }
    },
  });
  const started = Date.now();
  await core.runAgent({ agent });
  unsubscribe.unsubscribe();
  assert.ok(stopped, `no text arrived to stop: ${seen.types}`);
  assert.equal(agent.isRunning, false);
  assert.equal(runtimeAborts, 1, "the runtime aborted its request to dormant once");
  assert.ok(!seen.types.includes("RUN_FINISHED"), `the stopped run finished: ${seen.types}`);
  console.log(JSON.stringify({
    threadId: agent.threadId, runs: seen.runs, sent: seen.sent, text: seen.text,
    types: seen.types, runError: seen.runError, failed: seen.failed, errors,
    seconds: (Date.now() - started) / 1000, runtimeAborts,
  }));
}

async function waitForAgent(id) {
  for (let i = 0; i < 200; i++) {
    const found = core.getAgent(id);
    if (found) return found;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`CopilotKit never listed agent ${id} (runtime ${runtimeUrl}: ${core.runtimeConnectionStatus}; errors: ${errors})`);
}
