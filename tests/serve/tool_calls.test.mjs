// tool_choice "auto": tool calls parsed out of the model's free text
// (--tool-call-parser, here the hermes format Qwen3's chat template implies)
// and reasoning split off (--reasoning-parser qwen3), through the official
// OpenAI Node SDK, streaming and not. The demo model does not write tool calls
// by itself, so a guided_grammar makes it write them in the exact hermes
// format; what is checked is what the parsers make of that text.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { curlJson, halo, PKGCHAT, REPO, tempDir } from './frontends_lib.mjs';
import { client, startServer } from './lib.mjs';

const QWEN3 = path.join(REPO, 'tests', 'data', 'tokenizers', 'qwen3', 'tokenizer_config.json');
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const messages = [{ role: 'user', content: 'Weather in Paris?' }];
// One or two hermes calls, maybe after some text.
const HERMES = [
  'root ::= prose? call ("\\n" call)?',
  'prose ::= [A-Za-z ]{1,12} "\\n"',
  'call ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"" [A-Z] [a-z]{1,8} "\\"}}\\n</tool_call>"',
].join('\n');
const THINKING = 'root ::= "<think>" [a-z ]{1,20} "</think>" [a-z ]{1,10}';

let server;
let openai;
let tmp;
before(async () => {
  tmp = tempDir('halo-tool-calls-');
  const template = path.join(tmp.dir, 'qwen3.jinja');
  writeFileSync(template, JSON.parse(readFileSync(QWEN3, 'utf8')).chat_template);
  server = await startServer([PKGCHAT, '--served-model-name', 'pkgchat', '--chat-template', template,
    '--reasoning-parser', 'qwen3']);
  openai = client(server);
});
after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  tmp?.cleanup();
});

function checkCalls(message) {
  assert.ok(message.tool_calls.length >= 1 && message.tool_calls.length <= 2, JSON.stringify(message));
  for (const t of message.tool_calls) {
    assert.match(t.id, /^chatcmpl-tool-[0-9a-f]+$/);
    assert.equal(t.type, 'function');
    assert.equal(t.function.name, 'get_weather');
    assert.match(JSON.parse(t.function.arguments).city, /^[A-Z][a-z]{1,8}$/);
  }
  assert.ok(message.content === null || /^[A-Za-z ]{1,12}\n$/.test(message.content), JSON.stringify(message));
}

test('auto: hermes calls in the text become message.tool_calls', async () => {
  const r = await openai.chat.completions.create({ model: 'pkgchat', messages, tools: TOOLS, temperature: 1,
    seed: 4, n: 6, max_tokens: 120, guided_grammar: HERMES });
  for (const c of r.choices) {
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    checkCalls(c.message);
  }
});

test('auto, streamed: the SDK accumulates the same calls; no markup in delta.content', async () => {
  const params = { model: 'pkgchat', messages, tools: TOOLS, temperature: 1, seed: 9, max_tokens: 120,
    guided_grammar: HERMES };
  const whole = await openai.chat.completions.create(params);
  const stream = openai.chat.completions.stream(params);
  let content = '';
  for await (const chunk of stream)
    for (const ch of chunk.choices) content += ch.delta.content ?? '';
  const final = await stream.finalChatCompletion();
  assert.ok(!content.includes('tool_call') && !content.includes('{'), content);
  const strip = (calls) => calls.map((t) => [t.function.name, t.function.arguments]);
  assert.deepEqual(strip(final.choices[0].message.tool_calls), strip(whole.choices[0].message.tool_calls));
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  checkCalls(final.choices[0].message);
});

test('parallel_tool_calls false: only the first of two written calls, streamed and not', async () => {
  const TWO = [
    'root ::= call "\\n" call',
    'call ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"" [A-Z] [a-z]{1,8} "\\"}}\\n</tool_call>"',
  ].join('\n');
  const params = { model: 'pkgchat', messages, tools: TOOLS, temperature: 1, seed: 3, max_tokens: 120,
    guided_grammar: TWO };
  const both = await openai.chat.completions.create(params);
  assert.equal(both.choices[0].message.tool_calls.length, 2, JSON.stringify(both.choices[0]));
  const one = await openai.chat.completions.create({ ...params, parallel_tool_calls: false });
  const [first] = both.choices[0].message.tool_calls;
  assert.deepEqual(one.choices[0].message.tool_calls.map((t) => t.function),  [first.function]);
  assert.equal(one.choices[0].finish_reason, 'tool_calls');
  assert.equal(one.choices[0].message.content, null);
  const stream = openai.chat.completions.stream({ ...params, parallel_tool_calls: false });
  const indexes = new Set();
  for await (const chunk of stream)
    for (const t of chunk.choices[0]?.delta.tool_calls ?? []) indexes.add(t.index);
  assert.deepEqual([...indexes], [0]);
  const final = await stream.finalChatCompletion();
  assert.deepEqual(final.choices[0].message.tool_calls.map((t) => t.function), [first.function]);
});

test('tool_choice none, or no tools: the same text stays content', async () => {
  for (const extra of [{ tools: TOOLS, tool_choice: 'none' }, {}]) {
    const r = await curlJson(`${server.url}/v1/chat/completions`, { model: 'pkgchat', messages, temperature: 1,
      seed: 4, max_tokens: 120, guided_grammar: HERMES, ...extra });
    assert.equal(r.status, 200, r.body);
    const m = r.json.choices[0].message;
    assert.match(m.content, /<tool_call>/);
    assert.deepEqual(m.tool_calls, []);
    assert.equal(r.json.choices[0].finish_reason, 'stop');
  }
});

test('--reasoning-parser qwen3: <think> text is reasoning_content, streamed as delta.reasoning_content', async () => {
  const body = { model: 'pkgchat', messages, temperature: 1, seed: 5, max_tokens: 60, guided_grammar: THINKING };
  const r = await curlJson(`${server.url}/v1/chat/completions`, body);
  assert.equal(r.status, 200, r.body);
  const m = r.json.choices[0].message;
  assert.match(m.reasoning_content, /^[a-z ]{1,20}$/);
  assert.match(m.content, /^[a-z ]{1,10}$/);
  const stream = openai.chat.completions.stream(body);
  let reasoning = '';
  let content = '';
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      reasoning += ch.delta.reasoning_content ?? '';
      content += ch.delta.content ?? '';
    }
  }
  assert.equal(reasoning, m.reasoning_content);
  assert.equal(content, m.content);
  // Without <think>, all of it is content.
  const plain = await curlJson(`${server.url}/v1/chat/completions`, { model: 'pkgchat', messages, max_tokens: 8 });
  assert.equal(plain.json.choices[0].message.reasoning_content, null);
  assert.ok(plain.json.choices[0].message.content.length > 0);
});

test('unknown parser names refuse the server with the names there are', async () => {
  for (const [flag, want] of [['--tool-call-parser', /hermes, llama3_json, mistral, pythonic/],
    ['--reasoning-parser', /deepseek_r1 or qwen3/]]) {
    const r = await halo(['serve', PKGCHAT, '--check-config', flag, 'bogus']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr + r.stdout, want);
  }
});

// With a tokenizer that has a </think> token (a tiny random model with Qwen3's),
// structured output waits for the reasoning to end (the engine's reasoning
// gate, tested token by token in engine_behaviour_test): the random model
// reasons freely in text a JSON guide would never allow, and whatever answer
// follows a </think> fits the schema.
test('--reasoning-parser deepseek_r1 with response_format: the guide holds after the reasoning', async () => {
  const { makeTinyModel } = await import('./frontends_lib.mjs');
  const model = await makeTinyModel(path.join(tmp.dir, 'tiny'),
    { tokenizer: path.join(REPO, 'tests', 'data', 'tokenizers', 'qwen3') });
  const template = path.join(tmp.dir, 'qwen3.jinja');
  const thinker = await startServer([model, '--served-model-name', 'pkgchat', '--chat-template', template,
    '--reasoning-parser', 'deepseek_r1']);
  try {
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
      additionalProperties: false };
    const r = await client(thinker).chat.completions.create({ model: 'pkgchat', messages, temperature: 0,
      max_tokens: 40, response_format: { type: 'json_schema', json_schema: { name: 'a', schema } } });
    const m = r.choices[0].message;
    assert.equal(typeof m.reasoning_content, 'string', JSON.stringify(m));
    assert.ok(m.reasoning_content.length > 0);
    assert.ok(!/^\s*\{/.test(m.reasoning_content), `the reasoning was guided: ${m.reasoning_content}`);
    if (m.content && r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(m.content).ok, 'boolean');
  } finally {
    assert.equal((await thinker.stop()).code, 0, thinker.stderr);
  }
});
