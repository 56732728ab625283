// Serves two real AG-UI agents from npm over AG-UI's HTTP+SSE binding, with
// only their model replaced by an OpenAI-compatible server at
// MODEL_BASE_URL (server/upstream_real_test.go runs a fake of it that
// replays recorded Chat Completions streams).
//
//   MODEL_BASE_URL=http://127.0.0.1:1234/v1 [MODEL_ID=…] [MODEL_API_KEY=…] PORT=0 node serve.js
//
// prints exactly one line, {"port":N}, on stdout once it listens (PORT=0
// picks a free port); everything the packages log goes to stderr.
//
// Routes:
//   POST /copilotkit-agent  CopilotKit's BuiltInAgent
//   POST /mastra            a Mastra Agent with one backend tool, get_weather,
//                           bridged to AG-UI by @ag-ui/mastra's MastraAgent
//   GET  /                  200 ok
//
// A POST's body is a RunAgentInput; the agent's events go out as SSE in the
// encoder's content type. An error before the headers is a 400 (bad input)
// or 500; an error after them is a RUN_ERROR event, unless the agent already
// ended its run with one.
//
// Where each API comes from (versions pinned in package.json and
// package-lock.json; .npmrc sets legacy-peer-deps because @ag-ui/mastra
// names @copilotkit/runtime and @mastra/client-js as peers that only its
// ./copilotkit entry and remote agents load, and npm ci would otherwise
// install the whole CopilotKit runtime):
//   - RunAgentInputSchema: @ag-ui/core 1.0.0, dist/schemas.js (the
//     "@ag-ui/core/schemas" export); tools and context default to [] there
//     (an absent key and an empty array mean the same in AG-UI 1.0).
//     EventType: @ag-ui/core 1.0.0, dist/index.js.
//   - EventEncoder: @ag-ui/encoder 1.0.0, dist/index.js: getContentType() is
//     text/event-stream unless Accept prefers AG-UI's protobuf type;
//     encodeBinary() writes "data: <json>\n\n" (or a framed protobuf).
//   - BuiltInAgent: @copilotkitnext/agent 1.54.1, src/index.ts. run(input)
//     is an rxjs Observable of AG-UI events: RUN_STARTED, TEXT_MESSAGE_CHUNK
//     per text delta, REASONING_* for reasoning parts, TOOL_CALL_START/ARGS/
//     END, TOOL_CALL_RESULT for tools it executes, RUN_FINISHED; on a model
//     error it emits RUN_ERROR and then errors the Observable. The model is
//     an AI SDK LanguageModel instance; input.tools become tools without
//     execute (the frontend's), config.tools (defineTool) run on the server,
//     and AGUISendStateSnapshot / AGUISendStateDelta are always offered (their
//     results become STATE_SNAPSHOT / STATE_DELTA). maxSteps sets AI SDK's
//     stopWhen: stepCountIs(maxSteps); unset, AI SDK 6 stops after one step,
//     so a backend tool's result would never reach the model again.
//   - MastraAgent: @ag-ui/mastra 1.1.2, src/mastra.ts (in
//     dist/mastra-C4pmfQrc.js.map). run(input) calls the Mastra agent's
//     stream() with input.tools as clientTools and maps its fullStream:
//     text-delta to TEXT_MESSAGE_CHUNK (text after a tool call in the same
//     turn under "<messageId>-agui-text"), reasoning-* to REASONING_*,
//     frontend tool calls streamed live (TOOL_CALL_START/ARGS per delta/END),
//     backend tool calls buffered into START + one ARGS + END, tool-result to
//     TOOL_CALL_RESULT, then RUN_FINISHED (with usage). Errors error the
//     Observable without a RUN_ERROR: this server writes one.
//   - Agent, createTool: @mastra/core 1.71.0, dist/agent and dist/tools.
//     Mastra's telemetry (dist/feature-telemetry-*.js) is turned off with
//     MASTRA_TELEMETRY_DISABLED.
//   - createOpenAICompatible: @ai-sdk/openai-compatible 2.0.92 (AI SDK 6's
//     provider spec v3), dist/index.js. chatModel(id) POSTs
//     {baseURL}/chat/completions with stream: true and maps delta.content,
//     delta.tool_calls (by index) and delta.reasoning_content. This one is
//     used rather than @ai-sdk/openai 3.0.141 (which BuiltInAgent depends on):
//     there, openai(id) calls the Responses API (/responses) and only
//     openai.chat(id) calls Chat Completions, whose stream parser has no
//     reasoning_content, so a reasoning model's thoughts would be dropped.
"use strict";

process.env.MASTRA_TELEMETRY_DISABLED = "1";
// stdout carries the port line only.
console.log = console.info = console.debug = console.error;

const http = require("node:http");
const { EventType } = require("@ag-ui/core");
const { RunAgentInputSchema } = require("@ag-ui/core/schemas");
const { EventEncoder } = require("@ag-ui/encoder");
const { BuiltInAgent, defineTool } = require("@copilotkitnext/agent");
const { MastraAgent } = require("@ag-ui/mastra");
const { Agent } = require("@mastra/core/agent");
const { createTool } = require("@mastra/core/tools");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");
const { z } = require("zod");

const baseURL = process.env.MODEL_BASE_URL;
if (!baseURL) {
  process.stderr.write("serve.js: MODEL_BASE_URL is required (an OpenAI-compatible base URL such as http://127.0.0.1:1234/v1)\n");
  process.exit(2);
}
// MODEL_ID and MODEL_API_KEY point the agents at a real model server
// (the README's example); the tests' fake takes any.
const MODEL_ID = process.env.MODEL_ID || "gpt-4o-mini";
const API_KEY = process.env.MODEL_API_KEY || "test";

function chatModel() {
  // includeUsage asks for stream_options.include_usage: the last chunk then
  // carries the token usage, which the agents report on RUN_FINISHED.
  return createOpenAICompatible({ name: "openai", baseURL, apiKey: API_KEY, includeUsage: true }).chatModel(MODEL_ID);
}

// The backend tool both agents run on the server: a fixed answer per city.
const WEATHER = {
  Paris: { city: "Paris", temperature: 18, conditions: "sunny" },
  Berlin: { city: "Berlin", temperature: 12, conditions: "cloudy" },
  Lisbon: { city: "Lisbon", temperature: 22, conditions: "clear" },
};
function weather({ city }) {
  return WEATHER[city] || { city, temperature: 15, conditions: "unknown" };
}
const cityInput = z.object({ city: z.string().describe("The city's name") });

const copilotTools = [
  defineTool({
    name: "get_weather",
    description: "Gets the current weather of a city",
    parameters: cityInput,
    execute: async (args) => weather(args),
  }),
];

const mastraAgent = new Agent({
  id: "weather-agent",
  name: "Weather agent",
  instructions: "You answer questions, and look up the weather with get_weather.",
  model: chatModel(),
  tools: {
    get_weather: createTool({
      id: "get_weather",
      description: "Gets the current weather of a city",
      inputSchema: cityInput,
      execute: async (input) => weather(input),
    }),
  },
});

const routes = {
  "/copilotkit-agent": () =>
    new BuiltInAgent({ model: chatModel(), tools: copilotTools, maxSteps: 5 }),
  "/mastra": () => new MastraAgent({ agentId: "weather-agent", agent: mastraAgent, resourceId: "threadline-test" }),
};

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks).toString("utf8")));
    req.on("error", reject);
  });
}

function message(err) {
  return err && err.message ? err.message : String(err);
}

async function runAgent(req, res, makeAgent) {
  let input;
  try {
    input = RunAgentInputSchema.parse(JSON.parse(await readBody(req)));
  } catch (err) {
    res.writeHead(400, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: `invalid RunAgentInput: ${message(err)}` }));
    return;
  }
  let agent;
  try {
    agent = makeAgent();
  } catch (err) {
    res.writeHead(500, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ error: message(err) }));
    return;
  }
  const encoder = new EventEncoder({ accept: req.headers.accept });
  res.writeHead(200, { "Content-Type": encoder.getContentType(), "Cache-Control": "no-cache" });
  let ended = false; // a RUN_FINISHED or RUN_ERROR went out
  const write = (event) => {
    if (event.type === EventType.RUN_FINISHED || event.type === EventType.RUN_ERROR) ended = true;
    res.write(encoder.encodeBinary(event));
  };
  const subscription = agent.run(input).subscribe({
    next: write,
    error: (err) => {
      process.stderr.write(`serve.js: ${req.url}: ${err && err.stack ? err.stack : message(err)}\n`);
      if (!ended) write({ type: EventType.RUN_ERROR, message: message(err) });
      res.end();
    },
    complete: () => res.end(),
  });
  res.on("close", () => {
    if (res.writableFinished) return;
    // The client went away before the run's end: stop the agent.
    subscription.unsubscribe();
    if (typeof agent.abortRun === "function") agent.abortRun();
  });
}

const server = http.createServer((req, res) => {
  const path = new URL(req.url, "http://localhost").pathname;
  if (req.method === "GET" && path === "/") {
    res.writeHead(200, { "Content-Type": "text/plain" });
    res.end("ok\n");
    return;
  }
  const makeAgent = routes[path];
  if (!makeAgent) {
    res.writeHead(404, { "Content-Type": "text/plain" });
    res.end("not found\n");
    return;
  }
  if (req.method !== "POST") {
    res.writeHead(405, { Allow: "POST", "Content-Type": "text/plain" });
    res.end("method not allowed\n");
    return;
  }
  runAgent(req, res, makeAgent).catch((err) => {
    process.stderr.write(`serve.js: ${req.url}: ${message(err)}\n`);
    if (!res.headersSent) res.writeHead(500, { "Content-Type": "application/json" });
    res.end();
  });
});

server.listen(Number(process.env.PORT || 0), "127.0.0.1", () => {
  process.stdout.write(JSON.stringify({ port: server.address().port }) + "\n");
});
