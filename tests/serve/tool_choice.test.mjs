// tool_choice "required" and a named function on /v1/chat/completions, driven
// by the official OpenAI Node SDK: the output is forced into tool calls by
// guided decoding, so every call names a real tool and its arguments conform
// to the tool's schema (checked here by hand, not by halo), whole or streamed;
// mistakes are a 400 naming the field and the server keeps serving.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { curlJson, PKGCHAT } from './frontends_lib.mjs';
import { client, startServer } from './lib.mjs';

const MODEL = 'pkgchat';
let server;
let openai;
before(async () => {
  server = await startServer([PKGCHAT, '--served-model-name', MODEL]);
  openai = client(server);
});
after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

const weather = { type: 'function', function: { name: 'get_weather', description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 }, unit: { enum: ['c', 'f'] } },
    required: ['city', 'unit'], additionalProperties: false } } };
const lookup = { type: 'function', function: { name: 'lookup_package', description: 'A Debian package',
  parameters: { type: 'object', properties: { name: { type: 'string', maxLength: 16 },
    version: { type: 'integer', minimum: 0, maximum: 99 } }, required: ['name'] } } };
const TOOLS = [weather, lookup];
const messages = [{ role: 'user', content: 'What is curl?' }];

// The arguments of a call, parsed and checked against its tool's schema.
function checkCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^chatcmpl-tool-[0-9a-f]+$/);
  const args = JSON.parse(call.function.arguments);
  const keys = Object.keys(args);
  const chars = (s) => [...s].length;
  if (call.function.name === 'get_weather') {
    // Properties come in name order: request JSON objects are parsed without their order.
    assert.deepEqual(keys, ['city', 'unit'], call.function.arguments);
    assert.equal(typeof args.city, 'string');
    assert.ok(chars(args.city) <= 12, args.city);
    assert.ok(['c', 'f'].includes(args.unit), args.unit);
  } else {
    assert.equal(call.function.name, 'lookup_package');
    assert.ok(keys[0] === 'name' && keys.every((k) => ['name', 'version'].includes(k)), call.function.arguments);
    assert.equal(typeof args.name, 'string');
    assert.ok(chars(args.name) <= 16, args.name);
    if ('version' in args) assert.ok(Number.isInteger(args.version) && args.version >= 0 && args.version <= 99);
  }
  return args;
}

// A "required" answer's calls: finish_reason tool_calls when the model closed
// the array, length when max_tokens cut it (the demo model seldom closes it at
// temperature 1), so the last call of a cut answer may hold unfinished JSON;
// every other call must be whole and valid.
function checkRequired(choice) {
  assert.equal(choice.message.content, null);
  assert.ok(['tool_calls', 'length'].includes(choice.finish_reason), choice.finish_reason);
  const tc = choice.message.tool_calls;
  assert.ok(tc.length >= 1, JSON.stringify(choice.message));
  tc.forEach((call, i) => {
    if (choice.finish_reason === 'length' && i === tc.length - 1) {
      assert.ok(['get_weather', 'lookup_package'].includes(call.function.name), call.function.name);
      try { JSON.parse(call.function.arguments); } catch { return; }  // cut inside its arguments
    }
    checkCall(call);
  });
  assert.equal(new Set(tc.map((t) => t.id)).size, tc.length);
}

const calls = (choice) => choice.message.tool_calls.map((c) => [c.function.name, c.function.arguments]);

test('a named function: one call of it, arguments of its schema, content null, finish_reason stop', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages, tools: TOOLS, temperature: 1, seed: 7,
    n: 4, max_tokens: 60, tool_choice: { type: 'function', function: { name: 'get_weather' } } });
  assert.equal(r.choices.length, 4);
  for (const c of r.choices) {
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
    checkCall(c.message.tool_calls[0]);
    assert.equal(c.finish_reason, 'stop'); // OpenAI's for a forced function
  }
});

test('"required" with two tools and n=4: every call names a real tool with valid arguments', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: 'required',
    temperature: 1, seed: 5, n: 4, max_tokens: 300 });
  assert.equal(r.choices.length, 4);
  for (const c of r.choices) checkRequired(c);
});

test('parallel_tool_calls false: exactly one call', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: 'required',
    parallel_tool_calls: false, temperature: 1, seed: 3, n: 4, max_tokens: 100 });
  for (const c of r.choices) {
    assert.equal(c.message.tool_calls.length, 1, JSON.stringify(c.message));
    checkCall(c.message.tool_calls[0]);
    assert.equal(c.finish_reason, 'tool_calls');
  }
});

// The SDK's stream helper accumulating the deltas, and the raw chunks it saw.
async function streamed(params) {
  const stream = openai.chat.completions.stream(params);
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return { chunks, final: await stream.finalChatCompletion() };
}

function checkChunks(chunks) {
  const started = new Map();
  for (const chunk of chunks) {
    for (const ch of chunk.choices) {
      assert.ok(!ch.delta.content, `tool-call text in delta.content: ${JSON.stringify(ch.delta)}`);
      for (const t of ch.delta.tool_calls ?? []) {
        const key = `${ch.index}/${t.index}`;
        if (t.id !== undefined) {  // a call's first delta: id, type, the whole name, no arguments yet
          assert.ok(!started.has(key), `call ${key} started twice`);
          started.set(key, true);
          assert.match(t.id, /^chatcmpl-tool-[0-9a-f]+$/);
          assert.equal(t.type, 'function');
          assert.ok(t.function.name.length > 0);
          assert.equal(t.function.arguments, '');
        } else {
          assert.ok(started.has(key), `arguments of call ${key} before its name`);
          assert.equal(t.function.name, undefined);
        }
      }
    }
  }
}

test('streaming a named function: deltas accumulate into the non-streamed call', async () => {
  const params = { model: MODEL, messages, tools: TOOLS, temperature: 1, seed: 21, max_tokens: 60,
    tool_choice: { type: 'function', function: { name: 'lookup_package' } } };
  const whole = await openai.chat.completions.create(params);
  const { chunks, final } = await streamed(params);
  checkChunks(chunks);
  const c = final.choices[0];
  assert.equal(c.finish_reason, 'stop');
  assert.equal(c.message.content, null);
  assert.deepEqual(calls(c), calls(whole.choices[0]));
  checkCall(c.message.tool_calls[0]);
});

test('streaming "required", n=2, with usage: each choice equals its non-streamed answer', async () => {
  const params = { model: MODEL, messages, tools: TOOLS, tool_choice: 'required', temperature: 1, seed: 5, n: 2,
    max_tokens: 200 };
  const whole = await openai.chat.completions.create(params);
  const { chunks, final } = await streamed({ ...params, stream_options: { include_usage: true } });
  checkChunks(chunks);
  assert.equal(final.choices.length, 2);
  for (const c of final.choices) {
    const w = whole.choices[c.index];
    assert.equal(c.finish_reason, w.finish_reason);
    assert.deepEqual(calls(c), calls(w));
    checkRequired(c);
  }
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, whole.usage.completion_tokens);
});

test('mistakes are a 400 naming the field; the server keeps serving', async () => {
  const named = (name) => ({ type: 'function', function: { name } });
  const badSchema = { type: 'function', function: { name: 'f', parameters: { type: 'object', not: {} } } };
  const cases = [
    [{ tool_choice: 'required' }, /needs 'tools'/, 'tools'],
    [{ tool_choice: named('get_weather') }, /needs 'tools'/, 'tools'],
    [{ tools: TOOLS, tool_choice: named('nope') }, /'nope'.*not among 'tools'/, 'tool_choice'],
    [{ tools: TOOLS, tool_choice: { type: 'function' } }, /'tool_choice' must be/, 'tool_choice'],
    [{ tools: TOOLS, tool_choice: { type: 'function', function: { name: 5 } } }, /'tool_choice' must be/, 'tool_choice'],
    [{ tools: TOOLS, tool_choice: 'always' }, /'tool_choice' must be/, 'tool_choice'],
    [{ tools: [weather, badSchema], tool_choice: 'required' }, /tools\[1\]\.function\.parameters.*'not'/,
      'tools[1].function.parameters'],
    [{ tools: [badSchema], tool_choice: named('f') }, /tools\[0\]\.function\.parameters/, 'tools[0].function.parameters'],
    [{ tools: TOOLS, tool_choice: 'required', response_format: { type: 'json_object' } }, /cannot both/, 'tool_choice'],
    [{ tools: TOOLS, tool_choice: named('get_weather'), guided_regex: 'a' }, /cannot both/, 'tool_choice'],
  ];
  for (const [extra, why, param] of cases) {
    for (const stream of [false, true]) {
      const r = await curlJson(`${server.url}/v1/chat/completions`, { model: MODEL, messages, max_tokens: 4, stream,
        ...extra });
      assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.body}`);
      assert.match(r.json.error.message, why, JSON.stringify(extra));
      assert.equal(r.json.error.param, param, JSON.stringify(extra));
    }
  }
  for (const tool_choice of ['none', 'auto']) {  // free text, as before
    const r = await openai.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice,
      max_tokens: 8, temperature: 0 });
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.deepEqual(r.choices[0].message.tool_calls, []);
  }
  const ok = await openai.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: 'required',
    max_tokens: 200, temperature: 0 });
  checkRequired(ok.choices[0]);
});
