// Fake OpenAI-compatible Chat Completions server for recording n8n's wire formats.
// Usage: node fake-openai.js   (PORT=11435, LOG=./fake-openai-requests.ndjson)
// The behaviour is chosen per request from the LAST user message text:
//   contains "[mode:500]"   -> HTTP 500 JSON error
//   contains "[mode:401]"   -> HTTP 401 JSON error (invalid_api_key)
//   contains "[mode:stall]" -> wait STALL_MS (default 35000) before answering
//   contains "[mode:tool]"  -> first answer is a tool call (finish_reason tool_calls)
//                              to the first tool offered; once a tool message is
//                              present, answer with the normal text.
// Otherwise (and after a tool result) the normal answer text below is streamed in
// small pieces (some splitting the JSON objects), or returned whole for stream:false.
'use strict';
const http = require('http');
const fs = require('fs');

const PORT = +(process.env.PORT || 11435);
const LOG = process.env.LOG || __dirname + '/fake-openai-requests.ndjson';
const STALL_MS = +(process.env.STALL_MS || 35000);

const ANSWER =
  'Checking… {"type":"tool_call","name":"show_diff","args":{"path":"src/a.go"}} done. ' +
  'Ünïcode ✓ {"messageType":"regular_message","content":"héllo"}';

// Split into small pieces of varying length (by code point, so each piece is valid UTF-8).
function pieces(text) {
  const cps = Array.from(text);
  const sizes = [3, 5, 2, 7, 4, 1, 6, 3, 8, 2];
  const out = [];
  let i = 0, k = 0;
  while (i < cps.length) {
    const n = sizes[k++ % sizes.length];
    out.push(cps.slice(i, i + n).join(''));
    i += n;
  }
  return out;
}

let seq = 0;
function log(entry) {
  fs.appendFileSync(LOG, JSON.stringify(entry) + '\n');
}

function lastUserText(body) {
  const msgs = (body && body.messages) || [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    if (msgs[i].role === 'user') {
      const c = msgs[i].content;
      return typeof c === 'string' ? c : JSON.stringify(c);
    }
  }
  return '';
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function handleChat(req, res, body) {
  const text = lastUserText(body);
  const msgs = body.messages || [];
  const hasToolResult = msgs.some((m) => m.role === 'tool');
  const id = 'chatcmpl-fake' + ++seq;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model || 'gpt-fake';

  if (text.includes('[mode:500]')) {
    res.writeHead(500, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({ error: { message: 'The fake server had an error processing your request.', type: 'server_error', param: null, code: null } }));
  }
  if (text.includes('[mode:401]')) {
    res.writeHead(401, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({ error: { message: 'Incorrect API key provided: sk-fake***. (fake server)', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } }));
  }
  if (text.includes('[mode:stall]')) await sleep(STALL_MS);

  const wantTool = text.includes('[mode:tool]') && !hasToolResult && Array.isArray(body.tools) && body.tools.length > 0;
  const chunk = (delta, finish) => ({
    id, object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_fake',
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finish || null }],
  });

  if (wantTool) {
    const tool = body.tools[0].function;
    const params = (tool.parameters && tool.parameters.properties) || {};
    const args = {};
    for (const k of Object.keys(params)) args[k] = k === 'input' || k === 'query' ? '6*7' : 'x';
    if (Object.keys(args).length === 0) args.input = '6*7';
    const argStr = JSON.stringify(args);
    const callId = 'call_fake' + seq;
    if (!body.stream) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      return res.end(JSON.stringify({
        id, object: 'chat.completion', created, model,
        choices: [{ index: 0, message: { role: 'assistant', content: null, tool_calls: [{ id: callId, type: 'function', function: { name: tool.name, arguments: argStr } }] }, finish_reason: 'tool_calls', logprobs: null }],
        usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
      }));
    }
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
    const w = (o) => res.write('data: ' + JSON.stringify(o) + '\n\n');
    w(chunk({ role: 'assistant', content: null, tool_calls: [{ index: 0, id: callId, type: 'function', function: { name: tool.name, arguments: '' } }] }));
    const half = Math.floor(argStr.length / 2);
    for (const part of [argStr.slice(0, half), argStr.slice(half)]) {
      await sleep(20);
      w(chunk({ tool_calls: [{ index: 0, function: { arguments: part } }] }));
    }
    w(chunk({}, 'tool_calls'));
    if (body.stream_options && body.stream_options.include_usage) {
      w({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 } });
    }
    res.write('data: [DONE]\n\n');
    return res.end();
  }

  const answer = hasToolResult ? 'Tool said: ' + String(msgs.filter((m) => m.role === 'tool').pop().content).slice(0, 40) + '. ' + ANSWER : ANSWER;

  if (!body.stream) {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    return res.end(JSON.stringify({
      id, object: 'chat.completion', created, model, system_fingerprint: 'fp_fake',
      choices: [{ index: 0, message: { role: 'assistant', content: answer, refusal: null }, logprobs: null, finish_reason: 'stop' }],
      usage: { prompt_tokens: 10, completion_tokens: 20, total_tokens: 30 },
    }));
  }
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', Connection: 'keep-alive' });
  const w = (o) => res.write('data: ' + JSON.stringify(o) + '\n\n');
  w(chunk({ role: 'assistant', content: '', refusal: null }));
  for (const p of pieces(answer)) {
    await sleep(15);
    w(chunk({ content: p }));
  }
  w(chunk({}, 'stop'));
  if (body.stream_options && body.stream_options.include_usage) {
    w({ id, object: 'chat.completion.chunk', created, model, system_fingerprint: 'fp_fake', choices: [], usage: { prompt_tokens: 10, completion_tokens: 20, total_tokens: 30 } });
  }
  res.write('data: [DONE]\n\n');
  res.end();
}

http.createServer((req, res) => {
  let raw = '';
  req.setEncoding('utf8');
  req.on('data', (d) => (raw += d));
  req.on('end', async () => {
    let body = null;
    try { body = raw ? JSON.parse(raw) : null; } catch { body = raw; }
    const headers = { ...req.headers };
    if (headers.authorization) headers.authorization = headers.authorization.replace(/Bearer\s+\S+/, 'Bearer <redacted>');
    log({ t: new Date().toISOString(), method: req.method, url: req.url, headers, body });
    try {
      if (req.method === 'GET' && req.url.replace(/\?.*/, '').endsWith('/models')) {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        return res.end(JSON.stringify({ object: 'list', data: [
          { id: 'gpt-fake', object: 'model', created: 1700000000, owned_by: 'fake' },
          { id: 'gpt-4o-mini', object: 'model', created: 1700000000, owned_by: 'fake' },
        ] }));
      }
      if (req.method === 'POST' && req.url.replace(/\?.*/, '').endsWith('/chat/completions')) {
        return await handleChat(req, res, body || {});
      }
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: { message: 'not found: ' + req.url } }));
    } catch (e) {
      console.error(e);
      try { res.end(); } catch {}
    }
  });
}).listen(PORT, '127.0.0.1', () => console.log('fake-openai listening on ' + PORT));
