// Bad input table: each case must get the right HTTP status and an error in
// OpenAI's shape, and the server must keep serving good requests afterwards.
// The server runs with an API key and a small body limit.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { client, postJson, startServer } from './lib.mjs';

const KEY = 'test-key-0123456789';
const MODEL = 'pkgchat-5m';
let server;

before(async () => {
  server = await startServer(['--api-key', KEY, '--max-request-body-bytes', '65536', '--served-model-name', MODEL]);
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

const auth = { Authorization: `Bearer ${KEY}` };
const chat = (extra) => ({ model: MODEL, messages: [{ role: 'user', content: 'What is curl?' }], max_tokens: 4, ...extra });
const cmpl = (extra) => ({ model: MODEL, prompt: 'The package', max_tokens: 4, ...extra });
const CONTEXT = /^This model's maximum context length is 512 tokens\. However, you requested \d+ tokens \(\d+ in the messages, \d+ in the completion\)\. Please reduce the length of the messages or completion\.$/;

// [name, path, body (object or raw string), status, param or null, message regex, headers]
const CASES = [
  ['malformed JSON', '/v1/chat/completions', '{"model": ', 400, null, /not valid JSON/],
  ['body is a list', '/v1/chat/completions', '[1, 2]', 400, null, /JSON object/],
  ['messages missing', '/v1/chat/completions', { model: MODEL }, 400, 'messages', /required/],
  ['messages is a string', '/v1/chat/completions', chat({ messages: 'hi' }), 400, 'messages', /list/],
  ['messages empty', '/v1/chat/completions', chat({ messages: [] }), 400, 'messages', /non-empty/],
  ['message without role', '/v1/chat/completions', chat({ messages: [{ content: 'x' }] }), 400, 'messages', /role/],
  ['template raise_exception', '/v1/chat/completions', chat({ messages: [{ role: 'robot', content: 'x' }] }), 400,
    'messages', /Unknown role: robot/],
  ['negative temperature', '/v1/chat/completions', chat({ temperature: -0.5 }), 400, 'temperature', />= 0/],
  ['temperature as string', '/v1/chat/completions', chat({ temperature: 'hot' }), 400, 'temperature', /number/],
  ['top_p zero', '/v1/chat/completions', chat({ top_p: 0 }), 400, 'top_p', /top_p/],
  ['top_p above one', '/v1/chat/completions', chat({ top_p: 1.5 }), 400, 'top_p', /top_p/],
  ['n zero', '/v1/chat/completions', chat({ n: 0 }), 400, 'n', /at least 1/],
  ['n too large', '/v1/chat/completions', chat({ n: 1000 }), 400, 'n', /at most 64/],
  ['n as float', '/v1/chat/completions', chat({ n: 1.5 }), 400, 'n', /integer/],
  ['max_tokens zero', '/v1/chat/completions', chat({ max_tokens: 0 }), 400, 'max_tokens', /at least 1/],
  ['completion over the context', '/v1/chat/completions', chat({ max_tokens: 10000 }), 400, 'messages', CONTEXT],
  ['negative stop token id', '/v1/chat/completions', chat({ stop_token_ids: [-1] }), 400, 'stop_token_ids',
    /vocabulary/],
  ['stop token id past the vocabulary', '/v1/chat/completions', chat({ stop_token_ids: [99999] }), 400,
    'stop_token_ids', /vocabulary/],
  ['stop_token_ids not a list', '/v1/chat/completions', chat({ stop_token_ids: 'abc' }), 400, 'stop_token_ids',
    /list/],
  ['top_logprobs without logprobs', '/v1/chat/completions', chat({ top_logprobs: 3 }), 400, 'top_logprobs',
    /logprobs/],
  ['top_logprobs too large', '/v1/chat/completions', chat({ logprobs: true, top_logprobs: 50 }), 400,
    'top_logprobs', /\[0, 20\]/],
  ['unknown model', '/v1/chat/completions', chat({ model: 'gpt-17' }), 404, 'model', /does not exist/],
  ['logit_bias', '/v1/chat/completions', chat({ logit_bias: { 17: 5 } }), 400, 'logit_bias', /not supported/],
  ['unknown response_format', '/v1/chat/completions', chat({ response_format: { type: 'yaml' } }), 400,
    'response_format', /text, json_object or json_schema/],
  ['malformed grammar', '/v1/chat/completions', chat({ guided_grammar: 'root ::= "a" | (' }), 400,
    'guided_grammar', /grammar: line 1: unbalanced '\('/],
  ['grammar not a string', '/v1/chat/completions', chat({ guided_grammar: ['root ::= "a"'] }), 400,
    'guided_grammar', /non-empty string/],
  // min_tokens beyond the longest text the constraint allows (the inputs):
  // refused naming both, instead of tokens outside the constraint.
  ['min_tokens beyond guided_json boolean', '/v1/chat/completions',
    chat({ guided_json: { type: 'boolean' }, min_tokens: 50, max_tokens: 60 }), 400, 'min_tokens',
    /min_tokens=50 is more than guided_json allows: its longest text is 5 bytes/],
  ['min_tokens beyond guided_choice', '/v1/chat/completions',
    chat({ guided_choice: ['a'], min_tokens: 50, max_tokens: 60 }), 400, 'min_tokens', /guided_choice allows: .* 1 byte,/],
  ['min_tokens beyond guided_regex', '/v1/completions',
    { model: MODEL, prompt: 'x', guided_regex: 'ab', min_tokens: 3, max_tokens: 8 }, 400, 'min_tokens',
    /guided_regex allows: its longest text is 2 bytes/],
  ['stream with an over-long prompt is a plain 400', '/v1/chat/completions',
    chat({ stream: true, messages: [{ role: 'user', content: 'word '.repeat(600) }], max_tokens: 8 }), 400,
    'messages', CONTEXT],
  ['continue_final_message with add_generation_prompt', '/v1/chat/completions',
    chat({ continue_final_message: true, add_generation_prompt: true }), 400, 'continue_final_message', /both/],
  // vLLM's rule: a request's template is code; refused unless the server trusts it.
  ['per-request chat_template without --trust-request-chat-template', '/v1/chat/completions',
    chat({ chat_template: '{{ messages[0].content }}' }), 400, 'chat_template', /--trust-request-chat-template/],
  ['tool without a function name', '/v1/chat/completions',
    chat({ tools: [{ type: 'function', function: { name: 'ok' } }, { type: 'function', function: { parameters: {} } }] }),
    400, 'tools', /^tools\[1\]\.function\.name must be a non-empty string$/],
  ['tool of another type', '/v1/chat/completions', chat({ tools: [{ type: 'code', function: { name: 'f' } }] }), 400,
    'tools', /^tools\[0\]\.type must be "function"$/],
  ['tool parameters not an object', '/v1/chat/completions',
    chat({ tools: [{ type: 'function', function: { name: 'f', parameters: 'x' } }] }), 400, 'tools',
    /tools\[0\]\.function\.parameters must be an object/],
  ['n above 2^31', '/v1/chat/completions', chat({ n: 3e9 }), 400, 'n', /^'n' must be an integer in \[1, 2147483647\], got 3000000000$/],
  ['max_tokens above 2^64', '/v1/completions', '{"prompt": "x", "max_tokens": 18446744073709551615}', 400, 'max_tokens',
    /got 18446744073709551615$/],
  ['temperature past float range', '/v1/completions', cmpl({ temperature: 1e39 }), 400, 'temperature',
    /not a finite number/],
  ['temperature 1e400', '/v1/completions', '{"prompt": "x", "temperature": 1e400}', 400, 'temperature',
    /^'temperature' is not a finite number/],
  ['prompt over the byte limit (64 per token of the context)', '/v1/completions', cmpl({ prompt: 'x'.repeat(40000) }),
    400, 'prompt', /over the limit of 32768 bytes.*--max-prompt-bytes/],
  ['chat rendered over the byte limit', '/v1/chat/completions',
    chat({ messages: [{ role: 'user', content: 'x'.repeat(40000) }] }), 400, 'messages', /--max-prompt-bytes/],
  ['stream_options without stream', '/v1/chat/completions', chat({ stream_options: { include_usage: true } }), 400,
    'stream_options', /stream/],
  ['prompt missing', '/v1/completions', { model: MODEL }, 400, 'prompt', /required/],
  ['suffix', '/v1/completions', cmpl({ suffix: 'end' }), 400, 'suffix', /suffix/],
  ['mixed prompt list', '/v1/completions', cmpl({ prompt: ['a', 1] }), 400, 'prompt', /list of strings/],
  ['empty prompt list', '/v1/completions', cmpl({ prompt: [] }), 400, 'prompt', /empty/],
  ['token id past the vocabulary', '/v1/completions', cmpl({ prompt: [1, 5000] }), 400, 'prompt', /vocabulary/],
  ['logprobs above 20', '/v1/completions', cmpl({ logprobs: 21 }), 400, 'logprobs', /\[0, 20\]/],
  ['best_of below n', '/v1/completions', cmpl({ n: 3, best_of: 2 }), 400, 'best_of', /at least/],
  ['stream with best_of > n', '/v1/completions', cmpl({ stream: true, best_of: 3 }), 400, 'best_of', /streamed/],
  ['prompt over the context', '/v1/completions', cmpl({ prompt: Array(600).fill(17) }), 400, 'prompt', CONTEXT],
  ['min_tokens above max_tokens', '/v1/completions', cmpl({ min_tokens: 10 }), 400, 'min_tokens', /max_tokens/],
  ['empty stop string', '/v1/completions', cmpl({ stop: [''] }), 400, 'stop', /empty/],
  ['seed as string', '/v1/completions', cmpl({ seed: 'abc' }), 400, 'seed', /integer/],
  ['repetition_penalty zero', '/v1/completions', cmpl({ repetition_penalty: 0 }), 400, 'repetition_penalty', /> 0/],
  ['presence_penalty out of range', '/v1/completions', cmpl({ presence_penalty: 3 }), 400, 'presence_penalty',
    /\[-2, 2\]/],
  ['allowed_token_ids', '/v1/completions', cmpl({ allowed_token_ids: [1, 2] }), 400, 'allowed_token_ids',
    /not supported/],
  ['truncate_prompt_tokens over the context', '/v1/completions', cmpl({ truncate_prompt_tokens: 100000 }), 400,
    'truncate_prompt_tokens', /maximum context/],
  ['detokenize a bad id', '/detokenize', { tokens: [1, -5] }, 400, 'tokens', /vocabulary/],
  ['tokenize without prompt', '/tokenize', { model: MODEL }, 400, 'prompt', /required/],
  ['unknown route', '/v1/audio/speech', { input: 'x' }, 404, null, /Not Found/],
  ['missing API key', '/v1/chat/completions', chat({}), 401, null, /API key/, {}],
  ['wrong API key', '/v1/chat/completions', chat({}), 401, null, /invalid API key/,
    { Authorization: 'Bearer test-key-0123456780' }],
  ['body over the limit', '/v1/completions', cmpl({ prompt: 'x'.repeat(100000) }), 413, null, /65536/],
];

// The crash: JSON ~12,000 levels deep recursed through dump() until the
// stack ended. Every frontend parses request JSON under the depth limit.
const deep = (n) => '['.repeat(n) + ']'.repeat(n);
const DEPTH = /nested deeper than 128 levels \(--max-request-json-depth\)/;
CASES.push(
  ['JSON 12000 deep in messages content', '/v1/chat/completions',
    `{"model": "${MODEL}", "messages": [{"role": "user", "content": ${deep(12000)}}]}`, 400, null, DEPTH],
  ['JSON 12000 deep in tools', '/v1/chat/completions',
    `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"a": ${deep(12000)}}}}]}`,
    400, null, DEPTH],
  ['JSON 12000 deep in chat_template_kwargs', '/v1/chat/completions',
    `{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"a": ${deep(12000)}}}`, 400, null, DEPTH],
  ['JSON 129 deep', '/v1/completions', `{"prompt": "x", "a": ${deep(128)}}`, 400, null, DEPTH],
  ['JSON deep on /generate', '/generate', `{"prompt": "x", "a": ${deep(12000)}}`, 400, null, DEPTH],
  ['JSON deep on /tokenize', '/tokenize', `{"prompt": "x", "a": ${deep(12000)}}`, 400, null, DEPTH],
  ['JSON deep on /detokenize', '/detokenize', `{"tokens": [1], "a": ${deep(12000)}}`, 400, null, DEPTH],
  ['JSON deep on /render', '/v1/chat/completions/render', `{"messages": ${deep(12000)}}`, 400, null, DEPTH],
);

test('JSON 127 levels deep is accepted', async () => {
  const r = await postJson(`${server.url}/v1/completions`, `{"prompt": "x", "max_tokens": 1, "a": ${deep(126)}}`, auth);
  assert.equal(r.status, 200, r.text);
});

test('deep JSON on the KServe v2 and SageMaker frontends: 400 in their shapes, then a good request', async () => {
  const body = `{"text_input": "x", "parameters": {"a": ${deep(12000)}}}`;
  let r = await postJson(`${server.url}/v2/models/${MODEL}/generate`, body, auth);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, DEPTH);
  const sp = JSON.stringify({ text_input: 'x', sampling_parameters: `{"a": ${deep(12000)}}` });
  r = await postJson(`${server.url}/v2/models/${MODEL}/generate`, sp, auth);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /'sampling_parameters' is nested deeper than 128 levels/);
  r = await postJson(`${server.url}/invocations`, `{"inputs": "x", "parameters": {"a": ${deep(12000)}}}`, auth);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.message, DEPTH);
  r = await postJson(`${server.url}/v2/models/${MODEL}/generate`, { text_input: 'The package', parameters: { max_tokens: 2 } }, auth);
  assert.equal(r.status, 200, r.text);
  r = await postJson(`${server.url}/invocations`, { inputs: 'The package', parameters: { max_new_tokens: 2 } }, auth);
  assert.equal(r.status, 200, r.text);
});

// Raw HTTP on one connection: what comes back, and whether the server closed it.
function rawExchange(port, bytes, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = '';
    const timer = setTimeout(() => { sock.destroy(); resolve({ data, closed: false }); }, timeoutMs);
    sock.on('connect', () => sock.write(bytes));
    sock.on('data', (d) => { data += d; });
    sock.on('end', () => { clearTimeout(timer); sock.destroy(); resolve({ data, closed: true }); });
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
  });
}

// Request smuggling (RFC 9112 section 6.1): the bytes after such headers must
// never be answered as a second request.
test('Transfer-Encoding other than chunked, or with Content-Length: 400 and the connection closes', async () => {
  const smuggled = `GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\n\r\n`;
  const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Type: application/json\r\n`;
  const body = '{"prompt": "x", "max_tokens": 1}';
  const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  const cases = {
    gzip: `${head}Transfer-Encoding: gzip\r\n\r\n${smuggled}`,
    'gzip, chunked': `${head}Transfer-Encoding: gzip, chunked\r\n\r\n${chunked}${smuggled}`,
    'chunked and Content-Length': `${head}Transfer-Encoding: chunked\r\nContent-Length: ${chunked.length}\r\n\r\n${chunked}${smuggled}`,
    'identity and Content-Length': `${head}Transfer-Encoding: identity\r\nContent-Length: ${body.length}\r\n\r\n${body}${smuggled}`,
  };
  for (const [name, bytes] of Object.entries(cases)) {
    const { data, closed } = await rawExchange(server.port, bytes);
    assert.match(data, /^HTTP\/1\.1 400 /, `${name}: ${data}`);
    assert.equal(data.indexOf('HTTP/1.1', 1), -1, `${name}: a second response: ${data}`);
    assert.ok(closed, `${name}: the connection stayed open`);
  }
  const ok = await rawExchange(server.port, `${head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunked}`);
  assert.match(ok.data, /^HTTP\/1\.1 200 /, ok.data);
});

test(`bad input table (${CASES.length} cases): status and OpenAI error shape`, async () => {
  assert.ok(CASES.length >= 25);
  const failures = [];
  for (const [name, path, body, status, param, message, headers] of CASES) {
    const r = await postJson(`${server.url}${path}`, body, headers ?? auth);
    const e = r.json?.error;
    const problems = [];
    if (r.status !== status) problems.push(`status ${r.status} (want ${status})`);
    if (!(r.headers.get('content-type') || '').startsWith('application/json')) {
      problems.push(`content-type ${r.headers.get('content-type')}`);
    }
    // OpenAI's Error: `code` is a string or null (docs/serving.md, "Errors"), never the status.
    const codeOk = e && (e.code === null || typeof e.code === 'string');
    if (!e || typeof e.message !== 'string' || typeof e.type !== 'string' || !('param' in e) || !codeOk) {
      problems.push(`error shape ${r.text.slice(0, 200)}`);
    } else {
      if (param !== null && e.param !== param) problems.push(`param ${e.param} (want ${param})`);
      if (!message.test(e.message)) problems.push(`message "${e.message}" !~ ${message}`);
    }
    if (problems.length) failures.push(`${name}: ${problems.join('; ')}`);
  }
  assert.deepEqual(failures, []);
});

test('405 on a wrong method, with Allow', async () => {
  const r = await fetch(`${server.url}/v1/completions`, { headers: auth });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  assert.equal((await r.json()).error.code, null);
});

test('401 carries WWW-Authenticate; /health and /metrics stay open without a key', async () => {
  const r = await fetch(`${server.url}/v1/models`);
  assert.equal(r.status, 401);
  assert.equal(r.headers.get('www-authenticate'), 'Bearer');
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  assert.equal((await fetch(`${server.url}/metrics`)).status, 200);
});

test('after all that, good requests still succeed (SDK with the key; unknown fields ignored)', async () => {
  const openai = client(server, { apiKey: KEY });
  const r = await openai.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'What is curl?' }], max_tokens: 8, temperature: 0,
    // Unknown fields are accepted (and logged at debug).
    some_future_field: { a: 1 },
  });
  assert.equal(r.choices.length, 1);
  assert.ok(r.usage.completion_tokens > 0);
  const bad = client(server, { apiKey: 'nope' });
  await assert.rejects(bad.models.list(), (err) => err.status === 401);
  const c = await openai.completions.create({ model: MODEL, prompt: 'The package', max_tokens: 3 });
  assert.equal(c.usage.completion_tokens, 3);
});
