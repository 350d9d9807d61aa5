// Anthropic's Messages API (POST /v1/messages) through the official
// Anthropic Node SDK (@anthropic-ai/sdk): a plain answer with usage as the
// chat completions path counts it, forced tool choices giving tool_use blocks
// whose input fits the tool's input_schema, a tool_use/tool_result round
// trip, streaming (the SDK's finalMessage() equals the whole answer), the
// x-api-key flow and errors in Anthropic's shape. The demo model under
// Qwen3's chat template, and for two tools (whose Qwen3 prompt outgrows the
// demo model's 512-token context) a small random qwen3-family model;
// forced tool choices hold by guided decoding.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { makeTinyModel, PKGCHAT, REPO, tempDir } from './frontends_lib.mjs';
import { client, JS_DIR, postJson, startServer } from './lib.mjs';

const require = createRequire(path.join(JS_DIR, 'package.json'));
const sdk = require('@anthropic-ai/sdk');
const Anthropic = sdk.Anthropic ?? sdk.default ?? sdk;
const QWEN3 = path.join(REPO, 'tests', 'data', 'tokenizers', 'qwen3', 'tokenizer_config.json');
const MODEL = 'pkgchat';
const KEY = 'sk-messages-test';

const WEATHER = {
  name: 'get_weather',
  description: 'Weather in a city.',
  input_schema: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
    required: ['city', 'unit'],
    additionalProperties: false,
  },
};
const TIME = {
  name: 'get_time',
  description: 'Time in a city.',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'],
    additionalProperties: false },
};
const ASK = [{ role: 'user', content: 'Weather in Paris?' }];

// The part of JSON Schema the tools above use.
function validate(value, schema, at = 'input') {
  if (schema.type === 'object') {
    assert.ok(value && typeof value === 'object' && !Array.isArray(value), `${at} is not an object`);
    for (const r of schema.required ?? []) assert.ok(r in value, `${at}.${r} is missing`);
    for (const [k, v] of Object.entries(value)) {
      if (schema.additionalProperties === false) assert.ok(k in schema.properties, `${at}.${k} is not allowed`);
      if (schema.properties?.[k]) validate(v, schema.properties[k], `${at}.${k}`);
    }
  } else if (schema.type === 'string') {
    assert.equal(typeof value, 'string', `${at} is not a string`);
    if (schema.maxLength !== undefined) assert.ok(value.length <= schema.maxLength, `${at} is too long`);
  }
  if (schema.enum) assert.ok(schema.enum.includes(value), `${at} is not one of ${schema.enum}`);
}

function checkToolUse(msg, tools) {
  const uses = msg.content.filter((b) => b.type === 'tool_use');
  assert.ok(uses.length >= 1, JSON.stringify(msg));
  for (const u of uses) {
    assert.match(u.id, /^toolu_[0-9a-f]+$/);
    const tool = tools.find((t) => t.name === u.name);
    assert.ok(tool, `an unknown tool ${u.name}`);
    validate(u.input, tool.input_schema);
  }
  assert.equal(msg.stop_reason, 'tool_use', JSON.stringify(msg));
  assert.equal(msg.stop_sequence, null);
  return uses;
}

// A message's wire fields without its ids (random per response); the SDK's
// finalMessage() adds fields of its own.
const strip = (m) => ({ type: m.type, role: m.role, model: m.model, stop_reason: m.stop_reason,
  stop_sequence: m.stop_sequence, usage: m.usage, content: m.content.map((b) => ({ ...b, id: undefined })) });

let server;
let anthropic;
let tiny;  // the qwen3-family model: room for two tools
let tmp;
let template;
before(async () => {
  tmp = tempDir('halo-messages-');
  template = path.join(tmp.dir, 'qwen3.jinja');
  writeFileSync(template, JSON.parse(readFileSync(QWEN3, 'utf8')).chat_template);
  server = await startServer([PKGCHAT, '--served-model-name', MODEL, '--chat-template', template]);
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'none', maxRetries: 0, timeout: 60000 });
  const model = await makeTinyModel(path.join(tmp.dir, 'tiny'));
  tiny = await startServer([model, '--served-model-name', MODEL, '--chat-template', template]);
});
after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  if (tiny) assert.equal((await tiny.stop()).code, 0, tiny.stderr);
  tmp?.cleanup();
});
const onTiny = () => new Anthropic({ baseURL: tiny.url, apiKey: 'none', maxRetries: 0, timeout: 60000 });

test('a plain answer: text content, end_turn, usage as the chat path counts it', async () => {
  const params = { model: MODEL, max_tokens: 40, temperature: 0, system: 'Be brief.', messages: ASK };
  const msg = await anthropic.messages.create(params);
  assert.match(msg.id, /^msg_[0-9a-f]+$/);
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, MODEL);
  assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), msg.stop_reason);
  assert.equal(msg.stop_sequence, null);
  assert.ok(msg.usage.input_tokens > 0);
  // The same conversation as a chat completion: the same prompt, tokens and text.
  const chat = await client(server).chat.completions.create({ model: MODEL, max_tokens: 40, temperature: 0,
    messages: [{ role: 'system', content: 'Be brief.' }, ...ASK] });
  assert.equal(msg.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(msg.usage.output_tokens, chat.usage.completion_tokens);
  const text = chat.choices[0].message.content;
  assert.deepEqual(msg.content, text ? [{ type: 'text', text }] : []);
  assert.equal(msg.stop_reason, chat.choices[0].finish_reason === 'length' ? 'max_tokens' : 'end_turn');

  const short = await anthropic.messages.create({ ...params, max_tokens: 5 });
  assert.equal(short.stop_reason, 'max_tokens');
  assert.equal(short.usage.output_tokens, 5);

  if (text.length >= 8) {
    const seq = text.slice(3, 6);
    const stopped = await anthropic.messages.create({ ...params, stop_sequences: ['\u0001never', seq] });
    assert.equal(stopped.stop_reason, 'stop_sequence', JSON.stringify(stopped));
    assert.equal(stopped.stop_sequence, seq);
  }
});

test('tool_choice tool: one tool_use block whose input fits input_schema', async () => {
  const msg = await onTiny().messages.create({ model: MODEL, max_tokens: 200, temperature: 0, messages: ASK,
    tools: [WEATHER, TIME], tool_choice: { type: 'tool', name: 'get_weather' } });
  const uses = checkToolUse(msg, [WEATHER, TIME]);
  assert.equal(uses.length, 1);
  assert.equal(uses[0].name, 'get_weather');
  assert.deepEqual(msg.content, uses, 'a forced call has no text');
});

test('tool_choice any: tool_use blocks of the listed tools', async () => {
  for (const user of ['a', 'b', 'c']) {
    const msg = await onTiny().messages.create({ model: MODEL, max_tokens: 200, temperature: 1, top_k: 20,
      messages: ASK, tools: [WEATHER, TIME], tool_choice: { type: 'any', disable_parallel_tool_use: true },
      metadata: { user_id: user } });
    assert.equal(checkToolUse(msg, [WEATHER, TIME]).length, 1);
  }
  // Parallel calls: the random model goes on calling until max_tokens; every
  // call but a cut-off last one fits its schema.
  const many = await onTiny().messages.create({ model: MODEL, max_tokens: 200, temperature: 0, messages: ASK,
    tools: [WEATHER, TIME], tool_choice: { type: 'any' } });
  assert.ok(many.content.every((b) => b.type === 'tool_use'), JSON.stringify(many));
  if (many.stop_reason === 'max_tokens') many.content.pop();
  else assert.equal(many.stop_reason, 'tool_use');
  checkToolUse({ ...many, stop_reason: 'tool_use' }, [WEATHER, TIME]);
});

test('a tool_use and its tool_result sent back are answered', async () => {
  const first = await anthropic.messages.create({ model: MODEL, max_tokens: 80, temperature: 0, messages: ASK,
    tools: [WEATHER], tool_choice: { type: 'tool', name: 'get_weather' } });
  const [use] = checkToolUse(first, [WEATHER]);
  const messages = [
    ...ASK,
    { role: 'assistant', content: first.content },
    { role: 'user', content: [
      { type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: '21 degrees' }] },
      { type: 'text', text: 'And so?' },
    ] },
  ];
  for (const tool_choice of [{ type: 'auto' }, { type: 'none' }]) {
    const msg = await anthropic.messages.create({ model: MODEL, max_tokens: 20, temperature: 0, messages,
      tools: [WEATHER], tool_choice });
    assert.equal(msg.type, 'message');
    assert.ok(['end_turn', 'max_tokens'].includes(msg.stop_reason), msg.stop_reason);
    assert.ok(msg.usage.input_tokens > first.usage.input_tokens);
  }
  // A string tool_result and an error.
  const msg = await anthropic.messages.create({ model: MODEL, max_tokens: 10, messages: [...ASK,
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'no such city', is_error: true }] }],
  tools: [WEATHER] });
  assert.equal(msg.type, 'message');
});

test('a final assistant turn is a prefill the answer continues', async () => {
  const messages = [...ASK, { role: 'assistant', content: [{ type: 'text', text: 'It is' }] }];
  const msg = await anthropic.messages.create({ model: MODEL, max_tokens: 10, temperature: 0, messages });
  const chat = await client(server).chat.completions.create({ model: MODEL, max_tokens: 10, temperature: 0,
    messages: [...ASK, { role: 'assistant', content: 'It is' }], continue_final_message: true,
    add_generation_prompt: false });
  assert.equal(msg.usage.input_tokens, chat.usage.prompt_tokens);
  assert.deepEqual(msg.content, [{ type: 'text', text: chat.choices[0].message.content }]);
});

describe('reasoning: thinking blocks', () => {
  let thinker;
  before(async () => {
    // deepseek_r1: the prompt opens the reasoning, so the demo model's text is reasoning up to any </think>.
    thinker = await startServer([PKGCHAT, '--served-model-name', MODEL, '--chat-template', template,
      '--reasoning-parser', 'deepseek_r1']);
  });
  after(async () => {
    if (thinker) assert.equal((await thinker.stop()).code, 0, thinker.stderr);
  });

  test('the chat reasoning_content is a thinking block, streamed and not', async () => {
    const sdk = new Anthropic({ baseURL: thinker.url, apiKey: 'none', maxRetries: 0 });
    const params = { model: MODEL, max_tokens: 20, temperature: 0, messages: ASK };
    const whole = await sdk.messages.create(params);
    const chat = await client(thinker).chat.completions.create(params);
    const { reasoning_content: reasoning, content } = chat.choices[0].message;
    const expected = [];
    if (reasoning) expected.push({ type: 'thinking', thinking: reasoning, signature: '' });
    if (content) expected.push({ type: 'text', text: content });
    assert.ok(expected.length > 0);
    assert.deepEqual(whole.content, expected);
    const stream = sdk.messages.stream(params);
    const deltas = [];
    stream.on('streamEvent', (e) => { if (e.type === 'content_block_delta') deltas.push(e.delta.type); });
    assert.deepEqual(strip(await stream.finalMessage()), strip(whole));
    if (reasoning) assert.ok(deltas.includes('thinking_delta'));
  });
});

describe('streaming', () => {
  async function streamed(params, sdk = anthropic) {
    const stream = sdk.messages.stream(params);
    const events = [];
    stream.on('streamEvent', (e) => events.push(e));
    const final = await stream.finalMessage();
    return { final, events };
  }

  function checkOrder(events) {
    const types = events.map((e) => e.type);
    assert.equal(types[0], 'message_start');
    assert.deepEqual(types.slice(-2), ['message_delta', 'message_stop']);
    let open = -1;
    let next = 0;
    for (const e of events.slice(1, -2)) {
      if (e.type === 'content_block_start') {
        assert.equal(open, -1, 'a block opened before the last closed');
        assert.equal(e.index, next);
        open = next++;
      } else if (e.type === 'content_block_delta') {
        assert.equal(e.index, open);
      } else {
        assert.equal(e.type, 'content_block_stop');
        assert.equal(e.index, open);
        open = -1;
      }
    }
    assert.equal(open, -1);
  }

  test('text: finalMessage() equals the non-streamed message', async () => {
    const params = { model: MODEL, max_tokens: 40, temperature: 0, messages: ASK };
    const whole = await anthropic.messages.create(params);
    const { final, events } = await streamed(params);
    checkOrder(events);
    assert.deepEqual(strip(final), strip(whole));
    assert.ok(events.some((e) => e.type === 'content_block_delta' && e.delta.type === 'text_delta'));
    assert.equal(events[0].message.usage.input_tokens, whole.usage.input_tokens);
  });

  test('tool_use: input_json_delta fragments make the same input', async () => {
    for (const tool_choice of [{ type: 'tool', name: 'get_weather' }, { type: 'any', disable_parallel_tool_use: true }]) {
      const params = { model: MODEL, max_tokens: 200, temperature: 0, messages: ASK, tools: [WEATHER, TIME],
        tool_choice };
      const whole = await onTiny().messages.create(params);
      checkToolUse(whole, [WEATHER, TIME]);
      const { final, events } = await streamed(params, onTiny());
      checkOrder(events);
      assert.deepEqual(strip(final), strip(whole));
      assert.ok(events.some((e) => e.type === 'content_block_delta' && e.delta.type === 'input_json_delta'));
    }
  });

  test('the wire: event lines name each data object', async () => {
    const r = await postJson(`${server.url}/v1/messages`, { model: MODEL, max_tokens: 5, messages: ASK, stream: true });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /^text\/event-stream/);
    const frames = r.text.split('\n\n').filter((f) => f.length);
    for (const f of frames) {
      const [ev, data] = f.split('\n');
      assert.match(ev, /^event: [a-z_]+$/);
      assert.equal(JSON.parse(data.replace(/^data: /, '')).type, ev.slice('event: '.length));
    }
    assert.ok(!r.text.includes('[DONE]'));
  });
});

describe('bad requests: Anthropic error shape, then a good request', () => {
  async function expectError(body, status, type) {
    const r = await postJson(`${server.url}/v1/messages`, body, { 'anthropic-version': '2023-06-01' });
    assert.equal(r.status, status, r.text);
    assert.equal(r.json?.type, 'error', r.text);
    assert.equal(r.json.error.type, type, r.text);
    assert.equal(typeof r.json.error.message, 'string');
    return r.json.error.message;
  }

  test('each refused with its status', async () => {
    assert.match(await expectError({ model: MODEL, messages: ASK }, 400, 'invalid_request_error'), /max_tokens/);
    assert.match(await expectError({ model: MODEL, max_tokens: 5, messages: 'hi' }, 400, 'invalid_request_error'),
      /messages/);
    await expectError({ model: MODEL, max_tokens: 5, messages: [] }, 400, 'invalid_request_error');
    await expectError({ model: 'no-such-model', max_tokens: 5, messages: ASK }, 404, 'not_found_error');
    await expectError('{"model": ', 400, 'invalid_request_error');
    await expectError({ model: MODEL, max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }, 400,
      'invalid_request_error');
    await expectError({ model: MODEL, max_tokens: 5, messages: ASK, tool_choice: { type: 'tool', name: 'nope' },
      tools: [WEATHER] }, 400, 'invalid_request_error');
    await expectError({ model: MODEL, max_tokens: 5, messages: ASK, tools: [{ type: 'web_search_20250305',
      name: 'web_search' }] }, 400, 'invalid_request_error');
    await expectError({ model: MODEL, max_tokens: 100000, messages: ASK }, 400, 'invalid_request_error');
    const get = await fetch(`${server.url}/v1/messages`);
    assert.equal(get.status, 405);
    assert.equal((await get.json()).error.type, 'invalid_request_error');
    // The SDK raises its typed errors.
    await assert.rejects(anthropic.messages.create({ model: 'no-such-model', max_tokens: 5, messages: ASK }),
      (e) => e.status === 404 && e.error?.error?.type === 'not_found_error');
    const ok = await anthropic.messages.create({ model: MODEL, max_tokens: 5, messages: ASK });
    assert.equal(ok.usage.output_tokens, 5);
  });
});

describe('a server with --api-key', () => {
  let locked;
  before(async () => {
    locked = await startServer([PKGCHAT, '--served-model-name', MODEL, '--chat-template', template,
      '--api-key', KEY]);
  });
  after(async () => {
    if (locked) assert.equal((await locked.stop()).code, 0, locked.stderr);
  });

  test('x-api-key (the SDK) or a bearer token pass; a wrong or missing key is a 401', async () => {
    const good = new Anthropic({ baseURL: locked.url, apiKey: KEY, maxRetries: 0 });
    const msg = await good.messages.create({ model: MODEL, max_tokens: 3, messages: ASK });
    assert.equal(msg.usage.output_tokens, 3);
    const bearer = await postJson(`${locked.url}/v1/messages`, { model: MODEL, max_tokens: 3, messages: ASK },
      { Authorization: `Bearer ${KEY}` });
    assert.equal(bearer.status, 200, bearer.text);

    const bad = new Anthropic({ baseURL: locked.url, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create({ model: MODEL, max_tokens: 3, messages: ASK }),
      (e) => e.status === 401 && e.error?.type === 'error' && e.error?.error?.type === 'authentication_error');
    for (const headers of [{ 'x-api-key': 'wrong' }, {}]) {
      const r = await postJson(`${locked.url}/v1/messages`, { model: MODEL, max_tokens: 3, messages: ASK }, headers);
      assert.equal(r.status, 401);
      assert.deepEqual(Object.keys(r.json), ['type', 'error']);
      assert.equal(r.json.error.type, 'authentication_error');
    }
    // x-api-key is Anthropic's: the OpenAI routes still want the bearer token.
    const chat = await postJson(`${locked.url}/v1/chat/completions`,
      { model: MODEL, max_tokens: 3, messages: ASK }, { 'x-api-key': KEY });
    assert.equal(chat.status, 401);
  });
});
