// OpenAI's Responses API (POST /v1/responses, GET and DELETE
// /v1/responses/{id}) through the official openai SDK (responses.create,
// responses.stream, retrieve, delete) and the Agents SDK's default
// OpenAIResponsesModel. Each answer is checked against the chat completions
// answer for the same conversation (same prompt tokens, same greedy text):
// plain input with instructions, previous_response_id chains, function calls
// given back as function_call / function_call_output items, forced tool
// choices (guided decoding: arguments fit the schema), text.format
// json_schema, streaming (the SDK's accumulated finalResponse() equals the
// whole response), the stored responses and the refusals. The demo model
// under Qwen3's chat template; for tools a small random qwen3-family model.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { makeTinyModel, PKGCHAT, REPO, tempDir } from './frontends_lib.mjs';
import { AGENTS_SDK_SKIP, client, JS_DIR, postJson, startServer } from './lib.mjs';

const require = createRequire(path.join(JS_DIR, 'package.json'));
const QWEN3 = path.join(REPO, 'tests', 'data', 'tokenizers', 'qwen3', 'tokenizer_config.json');
const MODEL = 'pkgchat';
const INSTRUCTIONS = 'Be brief.';
const ASK = 'What is curl?';

const WEATHER = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather in a city.',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string', maxLength: 12 } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
};
const asChatTool = (t) => ({ type: 'function', function: { name: t.name, description: t.description,
  parameters: t.parameters, strict: t.strict } });

let server;
let tiny;
let tmp;
before(async () => {
  tmp = tempDir('halo-responses-');
  const template = path.join(tmp.dir, 'qwen3.jinja');
  writeFileSync(template, JSON.parse(readFileSync(QWEN3, 'utf8')).chat_template);
  server = await startServer([PKGCHAT, '--served-model-name', MODEL, '--chat-template', template]);
  const model = await makeTinyModel(path.join(tmp.dir, 'tiny'));
  tiny = await startServer([model, '--served-model-name', MODEL, '--chat-template', template]);
});
after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  if (tiny) assert.equal((await tiny.stop()).code, 0, tiny.stderr);
  tmp?.cleanup();
});

// The chat completion of the same conversation (greedy).
async function chatOf(srv, messages, extra = {}) {
  return client(srv).chat.completions.create({ model: MODEL, temperature: 0, messages, ...extra });
}

function checkUsage(r, chat) {
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
  assert.equal(r.usage.total_tokens, chat.usage.total_tokens);
}

test('a plain answer: one message item, the chat path\'s text and usage', async () => {
  const params = { model: MODEL, instructions: INSTRUCTIONS, input: ASK, max_output_tokens: 40, temperature: 0 };
  const r = await client(server).responses.create(params);
  assert.match(r.id, /^resp_[0-9a-f]{32}$/);
  assert.equal(r.object, 'response');
  assert.equal(r.model, MODEL);
  assert.equal(r.instructions, INSTRUCTIONS);
  assert.equal(r.max_output_tokens, 40);
  assert.equal(r.previous_response_id, null);
  assert.equal(r.error, null);
  const chat = await chatOf(server, [{ role: 'system', content: INSTRUCTIONS }, { role: 'user', content: ASK }],
    { max_tokens: 40 });
  checkUsage(r, chat);
  const text = chat.choices[0].message.content;
  assert.equal(r.output_text, text);  // the SDK's join of the output_text parts
  assert.equal(r.output.length, 1);
  const [item] = r.output;
  assert.equal(item.type, 'message');
  assert.equal(item.role, 'assistant');
  assert.match(item.id, /^msg_/);
  assert.deepEqual(item.content.map((c) => c.type), ['output_text']);
  const cut = chat.choices[0].finish_reason === 'length';
  assert.equal(r.status, cut ? 'incomplete' : 'completed');
  assert.equal(item.status, r.status);
  assert.deepEqual(r.incomplete_details, cut ? { reason: 'max_output_tokens' } : null);

  const short = await client(server).responses.create({ ...params, max_output_tokens: 4 });
  assert.equal(short.status, 'incomplete');
  assert.deepEqual(short.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(short.usage.output_tokens, 4);
});

test('input items: developer and user messages with text parts, as chat messages', async () => {
  const input = [
    { role: 'developer', content: INSTRUCTIONS },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What is' }, { type: 'input_text',
      text: 'wget?' }] },
  ];
  const r = await client(server).responses.create({ model: MODEL, input, max_output_tokens: 12, temperature: 0 });
  const chat = await chatOf(server, [{ role: 'system', content: INSTRUCTIONS },
    { role: 'user', content: 'What is\nwget?' }], { max_tokens: 12 });
  checkUsage(r, chat);
  assert.equal(r.output_text, chat.choices[0].message.content);
});

test('previous_response_id continues the stored conversation; retrieve and delete', async () => {
  const sdk = client(server);
  const first = await sdk.responses.create({ model: MODEL, instructions: INSTRUCTIONS, input: ASK,
    max_output_tokens: 16, temperature: 0 });
  const second = await sdk.responses.create({ model: MODEL, previous_response_id: first.id, input: 'And wget?',
    max_output_tokens: 16, temperature: 0 });
  assert.equal(second.previous_response_id, first.id);
  // Instructions are not carried over (OpenAI's rule): the chat has no system message.
  const chat = await chatOf(server, [{ role: 'user', content: ASK }, { role: 'assistant', content: first.output_text },
    { role: 'user', content: 'And wget?' }], { max_tokens: 16 });
  checkUsage(second, chat);
  assert.equal(second.output_text, chat.choices[0].message.content);
  // A chain of three.
  const third = await sdk.responses.create({ model: MODEL, previous_response_id: second.id, input: 'Thanks.',
    max_output_tokens: 4, temperature: 0 });
  assert.ok(third.usage.input_tokens > second.usage.input_tokens + second.usage.output_tokens);

  const got = await sdk.responses.retrieve(first.id);
  assert.equal(got.id, first.id);
  assert.deepEqual(got.output, first.output);
  assert.deepEqual(got.usage, first.usage);
  const deleted = await sdk.responses.delete(first.id);
  assert.equal(deleted?.deleted ?? true, true);
  await assert.rejects(sdk.responses.retrieve(first.id), (e) => e.status === 404);
  await assert.rejects(sdk.responses.create({ model: MODEL, previous_response_id: first.id, input: 'x' }),
    (e) => e.status === 400 && e.code === 'previous_response_not_found' && e.param === 'previous_response_id');
  // store: false keeps nothing.
  const unstored = await sdk.responses.create({ model: MODEL, input: ASK, max_output_tokens: 2, store: false });
  assert.equal(unstored.store, false);
  await assert.rejects(sdk.responses.retrieve(unstored.id), (e) => e.status === 404);
});

describe('function tools', () => {
  const ask = [{ role: 'user', content: 'Weather in Paris?' }];

  function checkCall(item) {
    assert.equal(item.type, 'function_call');
    assert.match(item.id, /^fc_/);
    assert.match(item.call_id, /^call_/);
    assert.equal(item.name, 'get_weather');
    const args = JSON.parse(item.arguments);
    assert.deepEqual(Object.keys(args), ['city']);
    assert.equal(typeof args.city, 'string');
    assert.ok(args.city.length <= 12);
    return args;
  }

  test('a named tool_choice is one function_call item whose arguments fit the schema', async () => {
    const r = await client(tiny).responses.create({ model: MODEL, input: ask, tools: [WEATHER],
      tool_choice: { type: 'function', name: 'get_weather' }, max_output_tokens: 120, temperature: 0 });
    assert.equal(r.status, 'completed', JSON.stringify(r));
    assert.equal(r.output.length, 1, JSON.stringify(r.output));
    checkCall(r.output[0]);
    assert.equal(r.output_text, '');
    assert.deepEqual(r.tools, [WEATHER]);
    assert.deepEqual(r.tool_choice, { type: 'function', name: 'get_weather' });
    // The same call as the chat path makes it.
    const chat = await chatOf(tiny, ask, { tools: [asChatTool(WEATHER)], max_tokens: 120,
      tool_choice: { type: 'function', function: { name: 'get_weather' } } });
    assert.equal(r.output[0].arguments, chat.choices[0].message.tool_calls[0].function.arguments);
  });

  test('the call and its output sent back: as items, and after previous_response_id', async () => {
    const sdk = client(tiny);
    const first = await sdk.responses.create({ model: MODEL, input: ask, tools: [WEATHER],
      tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 120, temperature: 0 });
    const [call] = first.output.filter((i) => i.type === 'function_call');
    checkCall(call);
    const output = { type: 'function_call_output', call_id: call.call_id, output: '21 degrees' };
    // The whole history as items, the reasoning and ids as the SDKs send them back.
    const items = await sdk.responses.create({ model: MODEL, tools: [WEATHER], max_output_tokens: 12,
      temperature: 0, input: [...ask, { type: 'reasoning', id: 'rs_x', summary: [] }, call, output] });
    const chained = await sdk.responses.create({ model: MODEL, tools: [WEATHER], max_output_tokens: 12,
      temperature: 0, previous_response_id: first.id, input: [output] });
    const chat = await chatOf(tiny, [...ask,
      { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function',
        function: { name: call.name, arguments: call.arguments } }] },
      { role: 'tool', tool_call_id: call.call_id, content: '21 degrees' }],
    { tools: [asChatTool(WEATHER)], max_tokens: 12 });
    for (const r of [items, chained]) {
      checkUsage(r, chat);
      const m = chat.choices[0].message;
      assert.equal(r.output_text, m.content ?? '');
    }
  });

  test('streamed: argument deltas make the same call; events in order', async () => {
    const params = { model: MODEL, input: ask, tools: [WEATHER], tool_choice: 'required',
      parallel_tool_calls: false, max_output_tokens: 120, temperature: 0 };
    const whole = await client(tiny).responses.create(params);
    const { final, events } = await streamed(client(tiny), params);
    checkOrder(events);
    assert.deepEqual(strip(events.at(-1).response), strip(whole));
    assert.deepEqual(strip(final), strip(whole));
    const deltas = events.filter((e) => e.type === 'response.function_call_arguments.delta');
    assert.ok(deltas.length > 0);
    assert.equal(deltas.map((e) => e.delta).join(''), whole.output[0].arguments);
  });
});

test('text.format json_schema: the output text parses and fits', async () => {
  const schema = { type: 'object', properties: { tool: { enum: ['curl', 'wget'] }, free: { type: 'boolean' } },
    required: ['tool', 'free'], additionalProperties: false };
  const r = await client(server).responses.create({ model: MODEL, input: ASK, max_output_tokens: 60,
    temperature: 0, text: { format: { type: 'json_schema', name: 'answer', schema, strict: true } } });
  assert.equal(r.status, 'completed', JSON.stringify(r));
  const value = JSON.parse(r.output_text);
  assert.ok(['curl', 'wget'].includes(value.tool));
  assert.equal(typeof value.free, 'boolean');
  assert.equal(r.text.format.type, 'json_schema');
});

// A response's wire fields without the ids that differ per response (and
// the parsed_arguments the SDK's stream adds).
function strip(r) {
  return { status: r.status, model: r.model, usage: r.usage, incomplete_details: r.incomplete_details,
    output: r.output.map((i) => ({ ...i, id: undefined, call_id: undefined, parsed_arguments: undefined })) };
}

async function streamed(sdk, params) {
  const stream = sdk.responses.stream(params);
  const events = [];
  for await (const e of stream) events.push(e);
  return { final: await stream.finalResponse(), events };
}

// created, in_progress; items opened and finished one at a time; a terminal event last.
function checkOrder(events) {
  events.forEach((e, i) => assert.equal(e.sequence_number, i, `event ${i}: ${e.type}`));
  const types = events.map((e) => e.type);
  assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
  let open = -1;
  let next = 0;
  for (const e of events.slice(2, -1)) {
    if (e.type === 'response.output_item.added') {
      assert.equal(open, -1, 'an item opened before the last was done');
      assert.equal(e.output_index, next);
      open = next++;
    } else if (e.type === 'response.output_item.done') {
      assert.equal(e.output_index, open);
      open = -1;
    } else {
      assert.equal(e.output_index, open, e.type);
    }
  }
  assert.equal(open, -1);
}

describe('streaming', () => {
  test('text: finalResponse() equals the whole response; deltas join to the text', async () => {
    const params = { model: MODEL, instructions: INSTRUCTIONS, input: ASK, max_output_tokens: 30, temperature: 0 };
    const whole = await client(server).responses.create(params);
    const { final, events } = await streamed(client(server), params);
    checkOrder(events);
    // The terminal event carries the whole response. (The SDK's finalResponse()
    // takes it from response.completed only: after response.incomplete it is
    // the snapshot it accumulated, whose status stays in_progress.)
    assert.deepEqual(strip(events.at(-1).response), strip(whole));
    const texts = (r) => r.output.map((i) => i.content.map((c) => [c.type, c.text]));
    assert.deepEqual(texts(final), texts(whole));
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
    assert.ok(deltas.length > 1);
    assert.equal(deltas.join(''), whole.output_text);
    assert.equal(events[0].response.status, 'in_progress');
    // The streamed response is stored too.
    const got = await client(server).responses.retrieve(final.id);
    assert.deepEqual(strip(got), strip(whole));
  });

  test('the wire: event lines name each data object; no [DONE]', async () => {
    const r = await postJson(`${server.url}/v1/responses`, { model: MODEL, input: ASK, max_output_tokens: 3,
      stream: true });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /^text\/event-stream/);
    const frames = r.text.split('\n\n').filter((f) => f.length);
    for (const f of frames) {
      const [ev, data] = f.split('\n');
      assert.match(ev, /^event: [a-z_.]+$/);
      assert.equal(JSON.parse(data.replace(/^data: /, '')).type, ev.slice('event: '.length));
    }
    assert.ok(!r.text.includes('[DONE]'));
  });
});

test('refusals name the field, in OpenAI\'s error shape; the server goes on', async () => {
  const cases = [
    [{ model: MODEL }, 'input'],
    [{ model: MODEL, input: 7 }, 'input'],
    [{ model: MODEL, input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }] },
      'input'],
    [{ model: MODEL, input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input'],
    [{ model: MODEL, input: [{ role: 'tool', content: 'x' }] }, 'input'],
    [{ model: MODEL, input: ASK, tools: [{ type: 'web_search' }] }, 'tools'],
    [{ model: MODEL, input: ASK, tool_choice: { type: 'web_search' } }, 'tool_choice'],
    [{ model: MODEL, input: ASK, background: true }, 'background'],
    [{ model: MODEL, input: ASK, max_output_tokens: 0 }, 'max_output_tokens'],
    [{ model: MODEL, input: ASK, text: { format: { type: 'xml' } } }, 'text'],
    [{ model: MODEL, input: ASK, previous_response_id: 'resp_nope' }, 'previous_response_id'],
    [{ model: MODEL, input: ASK, store: 'yes' }, 'store'],
  ];
  for (const [body, param] of cases) {
    const r = await postJson(`${server.url}/v1/responses`, body);
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.equal(r.json.error.param, param, r.text);
    assert.equal(typeof r.json.error.message, 'string');
  }
  const unknown = await postJson(`${server.url}/v1/responses`, { model: 'no-such-model', input: ASK });
  assert.equal(unknown.status, 404);
  const missing = await fetch(`${server.url}/v1/responses/resp_nope`);
  assert.equal(missing.status, 404);
  const wrongMethod = await fetch(`${server.url}/v1/responses/resp_nope`, { method: 'PUT' });
  assert.equal(wrongMethod.status, 405);
  const ok = await client(server).responses.create({ model: MODEL, input: ASK, max_output_tokens: 2 });
  assert.equal(ok.usage.output_tokens, 2);
});

// The random model seldom ends its text before max_output_tokens, and the
// Agents SDK takes a response.incomplete as a failure (as it should): the
// agent stops at its tool's output, which is then the final output. The
// round trip of a function_call_output is tested above.
test('the Agents SDK\'s default Responses model: a forced tool call runs the tool', { skip: AGENTS_SDK_SKIP },
  async () => {
  const { Agent, OpenAIResponsesModel, run, setTracingDisabled, tool } = await import(
    require.resolve('@openai/agents'));
  const { z } = await import(require.resolve('zod'));
  setTracingDisabled(true);  // no trace export: this machine has no network
  const calls = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: z.object({ city: z.string().max(20) }),
    execute: async ({ city }) => {
      calls.push(city);
      return `It is 21 degrees in ${city}.`;
    },
  });
  for (const stream of [false, true]) {
    calls.length = 0;
    const agent = new Agent({
      name: 'Weather',
      instructions: 'Answer with the weather tool.',
      tools: [getWeather],
      model: new OpenAIResponsesModel(client(tiny), MODEL),
      modelSettings: { toolChoice: 'required', parallelToolCalls: false, temperature: 0, maxTokens: 120 },
      toolUseBehavior: 'stop_on_first_tool',
    });
    const result = await run(agent, 'What is the weather in Paris?', { maxTurns: 2, stream });
    if (stream) {
      for await (const e of result.toStream()) assert.ok(e.type);
      await result.completed;
    }
    assert.equal(calls.length, 1, `stream ${stream}: the tool ran ${calls.length} times`);
    assert.ok(calls[0].length <= 20);
    assert.equal(result.finalOutput, `It is 21 degrees in ${calls[0]}.`);
    const types = result.newItems.map((i) => i.type);
    assert.deepEqual(types, ['tool_call_item', 'tool_call_output_item'], types.join(', '));
  }
});
