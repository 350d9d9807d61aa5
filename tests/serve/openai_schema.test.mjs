// Contract test: every response object of halo's OpenAI endpoints carries
// every field OpenAI's published OpenAPI document requires, with its type.
//
// The document: https://github.com/openai/openai-openapi, openapi.yaml,
// `info.version: 2.3.0` (OpenAPI 3.1.0), commit
// f85dbe223d40e1a31cba812ab2d755c7e98a92a3. The descriptions below are
// written from its schemas CreateChatCompletionResponse,
// CreateChatCompletionStreamResponse, ChatCompletionResponseMessage,
// ChatCompletionStreamResponseDelta, ChatCompletionTokenLogprob,
// ChatCompletionMessageToolCall, CreateCompletionResponse, CompletionUsage,
// Model, ListModelsResponse, ErrorResponse and Error (`nullable: true` and
// `anyOf: [X, {type: 'null'}]` both read as "X or null"). Fields the document
// does not name (vLLM's stop_reason, prompt_logprobs, ...) are allowed: the
// document does not forbid additional properties.
//
// Two places where OpenAI's API itself departs from its document, and halo
// with it (each marked DEPARTURE below):
//   - a streamed choice has `finish_reason: null` until its last chunk (the
//     document has no chunk schema for completions: a stream sends
//     CreateCompletionResponse objects);
//   - with `echo` and `logprobs` on completions the first prompt token has no
//     logprob: its token_logprobs and top_logprobs entries are null.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { client, metric, metrics, postJson, sleep, startServer } from './lib.mjs';

// ------------------------------------------------------------------ checker
//
// A schema: {type, nullable?, enum?, items?, props?, required?, values?}
//   type: 'string' | 'integer' | 'number' | 'boolean' | 'object' | 'array'
//   items: the schema of an array's elements; values: of an object's values
//   (additionalProperties); props + required: an object's named fields.

const str = { type: 'string' };
const int = { type: 'integer' };
const num = { type: 'number' };
const nullable = (s) => ({ ...s, nullable: true });
const arr = (items) => ({ type: 'array', items });
const obj = (props, required = [], extra = {}) => ({ type: 'object', props, required, ...extra });
const oneOf = (...values) => ({ type: 'string', enum: values });

function typeOk(v, type) {
  switch (type) {
    case 'string': return typeof v === 'string';
    case 'integer': return Number.isInteger(v);
    case 'number': return typeof v === 'number' && Number.isFinite(v);
    case 'boolean': return typeof v === 'boolean';
    case 'object': return v !== null && typeof v === 'object' && !Array.isArray(v);
    case 'array': return Array.isArray(v);
    default: throw new Error(`unknown type ${type}`);
  }
}

const show = (v) => (v === undefined ? 'undefined' : JSON.stringify(v)?.slice(0, 80));

// Problems of `v` against `schema`, as "path: what" strings ([] when it conforms).
function check(v, schema, path = '$', problems = []) {
  if (v === null) {
    if (!schema.nullable) problems.push(`${path}: null, want ${schema.type}`);
    return problems;
  }
  if (!typeOk(v, schema.type)) {
    problems.push(`${path}: ${show(v)} is not ${schema.nullable ? `${schema.type} or null` : schema.type}`);
    return problems;
  }
  if (schema.enum && !schema.enum.includes(v)) problems.push(`${path}: ${show(v)} is not one of ${schema.enum.join(', ')}`);
  if (schema.type === 'array' && schema.items) v.forEach((x, i) => check(x, schema.items, `${path}[${i}]`, problems));
  if (schema.type === 'object') {
    for (const name of schema.required ?? []) {
      if (!(name in v)) problems.push(`${path}.${name}: missing (required)`);
    }
    for (const [name, s] of Object.entries(schema.props ?? {})) {
      if (name in v) check(v[name], s, `${path}.${name}`, problems);
    }
    if (schema.values) for (const [k, x] of Object.entries(v)) check(x, schema.values, `${path}[${JSON.stringify(k)}]`, problems);
  }
  return problems;
}

// ------------------------------------------------------------------ schemas

// Error, ErrorResponse.
const Error_ = obj({ code: nullable(str), message: str, param: nullable(str), type: str },
  ['type', 'message', 'param', 'code']);
const ErrorResponse = obj({ error: Error_ }, ['error']);

// CompletionUsage.
const CompletionUsage = obj({
  completion_tokens: int, prompt_tokens: int, total_tokens: int,
  completion_tokens_details: obj({ accepted_prediction_tokens: int, audio_tokens: int, reasoning_tokens: int,
    text_tokens: int, rejected_prediction_tokens: int }),
  prompt_tokens_details: obj({ audio_tokens: int, cached_tokens: int, text_tokens: int, image_tokens: int,
    cache_write_tokens: int }),
}, ['prompt_tokens', 'completion_tokens', 'total_tokens']);

// ChatCompletionTokenLogprob.
const bytes = nullable(arr(int));
const ChatCompletionTokenLogprob = obj({
  token: str, logprob: num, bytes,
  top_logprobs: arr(obj({ token: str, logprob: num, bytes }, ['token', 'logprob', 'bytes'])),
}, ['token', 'logprob', 'bytes', 'top_logprobs']);
// The choice's logprobs (the same in the response and the chunks).
const ChatChoiceLogprobs = nullable(obj({
  content: nullable(arr(ChatCompletionTokenLogprob)),
  refusal: nullable(arr(ChatCompletionTokenLogprob)),
}, ['content', 'refusal']));

// ChatCompletionMessageToolCall (ChatCompletionMessageToolCalls' function variant).
const ChatCompletionMessageToolCall = obj({
  id: str, type: oneOf('function'), function: obj({ name: str, arguments: str }, ['name', 'arguments']),
}, ['id', 'type', 'function']);

// ChatCompletionResponseMessage.
const ChatCompletionResponseMessage = obj({
  content: nullable(str),
  refusal: nullable(str),
  tool_calls: arr(ChatCompletionMessageToolCall),
  annotations: arr(obj({ type: oneOf('url_citation'), url_citation: obj({}, ['end_index', 'start_index', 'url', 'title']) },
    ['type', 'url_citation'])),
  role: oneOf('assistant'),
  function_call: obj({ arguments: str, name: str }, ['name', 'arguments']),
  audio: nullable(obj({ id: str, expires_at: int, data: str, transcript: str }, ['id', 'expires_at', 'data', 'transcript'])),
}, ['role', 'content', 'refusal']);

const CHAT_FINISH = ['stop', 'length', 'tool_calls', 'content_filter', 'function_call'];

// CreateChatCompletionResponse.
const CreateChatCompletionResponse = obj({
  id: str,
  choices: arr(obj({
    finish_reason: oneOf(...CHAT_FINISH), index: int, message: ChatCompletionResponseMessage, logprobs: ChatChoiceLogprobs,
  }, ['finish_reason', 'index', 'message', 'logprobs'])),
  created: int, model: str, system_fingerprint: str, object: oneOf('chat.completion'), usage: CompletionUsage,
}, ['choices', 'created', 'id', 'model', 'object']);

// ChatCompletionStreamResponseDelta.
const ChatCompletionStreamResponseDelta = obj({
  content: nullable(str),
  function_call: obj({ arguments: str, name: str }),
  tool_calls: arr(obj({ index: int }, ['index'])),
  role: oneOf('developer', 'system', 'user', 'assistant', 'tool'),
  refusal: nullable(str),
});

// CreateChatCompletionStreamResponse (finish_reason nullable in the document).
const CreateChatCompletionStreamResponse = obj({
  id: str,
  choices: arr(obj({
    delta: ChatCompletionStreamResponseDelta, logprobs: ChatChoiceLogprobs,
    finish_reason: nullable(oneOf(...CHAT_FINISH)), index: int,
  }, ['delta', 'finish_reason', 'index'])),
  created: int, model: str, system_fingerprint: str, object: oneOf('chat.completion.chunk'),
  usage: nullable(CompletionUsage),
}, ['choices', 'created', 'id', 'model', 'object']);

// CreateCompletionResponse; `streamed`: a chunk (DEPARTURE: finish_reason null
// until the last chunk); `echo`: DEPARTURE: the first prompt token's logprob is null.
function completionSchema({ streamed = false, echo = false } = {}) {
  const maybe = (s) => (echo ? nullable(s) : s);
  const finish = oneOf('stop', 'length', 'content_filter');
  return obj({
    id: str,
    choices: arr(obj({
      finish_reason: streamed ? nullable(finish) : finish,
      index: int,
      logprobs: nullable(obj({
        text_offset: arr(int), token_logprobs: arr(maybe(num)), tokens: arr(str),
        top_logprobs: arr(maybe(obj({}, [], { values: num }))),
      })),
      text: str,
    }, ['finish_reason', 'index', 'logprobs', 'text'])),
    created: int, model: str, system_fingerprint: str, object: oneOf('text_completion'), usage: CompletionUsage,
  }, ['id', 'object', 'created', 'model', 'choices']);
}
const CreateCompletionResponse = completionSchema();

// Model, ListModelsResponse.
const Model = obj({ id: str, created: int, object: oneOf('model'), owned_by: str, shutdown_date: nullable(str) },
  ['id', 'object', 'created', 'owned_by']);
const ListModelsResponse = obj({ object: oneOf('list'), data: arr(Model) }, ['object', 'data']);

function conforms(v, schema, what) {
  assert.deepEqual(check(v, schema), [], `${what}: ${JSON.stringify(v).slice(0, 600)}`);
}

// Keys in OpenAI's order: `keys` appear in `v` in this relative order.
function inOrder(v, keys, what) {
  const seen = Object.keys(v).filter((k) => keys.includes(k));
  assert.deepEqual(seen, keys.filter((k) => k in v), `${what}: key order ${Object.keys(v).join(', ')}`);
}

// ------------------------------------------------------------------ the checker can fail

describe('the checker', () => {
  const good = {
    id: 'chatcmpl-1', object: 'chat.completion', created: 1, model: 'm',
    choices: [{ index: 0, message: { role: 'assistant', content: 'hi', refusal: null }, logprobs: null,
      finish_reason: 'stop' }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  };
  const mutate = (f) => { const c = structuredClone(good); f(c); return check(c, CreateChatCompletionResponse); };

  test('passes a conforming response', () => {
    assert.deepEqual(check(good, CreateChatCompletionResponse), []);
  });

  test('fails a missing required field, a wrong type, a null where none is allowed, a bad enum', () => {
    assert.deepEqual(mutate((c) => { delete c.choices[0].message.refusal; }),
      ['$.choices[0].message.refusal: missing (required)']);
    assert.deepEqual(mutate((c) => { delete c.created; }), ['$.created: missing (required)']);
    assert.deepEqual(mutate((c) => { c.created = 1.5; }), ['$.created: 1.5 is not integer']);
    assert.deepEqual(mutate((c) => { c.usage.total_tokens = '2'; }), ['$.usage.total_tokens: "2" is not integer']);
    assert.deepEqual(mutate((c) => { c.choices[0].finish_reason = null; }), ['$.choices[0].finish_reason: null, want string']);
    assert.deepEqual(mutate((c) => { c.choices[0].finish_reason = 'abort'; }),
      ['$.choices[0].finish_reason: "abort" is not one of stop, length, tool_calls, content_filter, function_call']);
    assert.deepEqual(mutate((c) => { c.choices[0].logprobs = { content: [] }; }),
      ['$.choices[0].logprobs.refusal: missing (required)']);
    assert.deepEqual(mutate((c) => { c.choices[0].logprobs = { content: [{ token: 'a', logprob: 0, bytes: [97] }], refusal: null }; }),
      ['$.choices[0].logprobs.content[0].top_logprobs: missing (required)']);
  });

  test('fails the error shape halo used to send (code: the HTTP status)', () => {
    const old = { error: { message: 'x', type: 'NotFoundError', param: 'model', code: 404 } };
    assert.deepEqual(check(old, ErrorResponse), ['$.error.code: 404 is not string or null']);
    assert.deepEqual(check({ error: { message: 'x', type: 't', code: null } }, ErrorResponse),
      ['$.error.param: missing (required)']);
  });

  test('completions: an object of numbers for top_logprobs; a null logprob only with echo', () => {
    const c = {
      id: 'c', object: 'text_completion', created: 1, model: 'm',
      choices: [{ index: 0, text: 'x', finish_reason: 'length',
        logprobs: { tokens: ['a'], token_logprobs: [null], text_offset: [0], top_logprobs: [{ a: 'x' }] } }],
    };
    assert.deepEqual(check(c, CreateCompletionResponse), [
      '$.choices[0].logprobs.token_logprobs[0]: null, want number',
      '$.choices[0].logprobs.top_logprobs[0]["a"]: "x" is not number',
    ]);
    assert.deepEqual(check(c, completionSchema({ echo: true })), ['$.choices[0].logprobs.top_logprobs[0]["a"]: "x" is not number']);
  });
});

// ------------------------------------------------------------------ a live server

const MODEL = 'pkgchat-5m';
let server;
let openai;

before(async () => {
  server = await startServer(['--served-model-name', MODEL, '--max-num-seqs', '8']);
  openai = client(server);
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

const MESSAGES = [{ role: 'user', content: 'What is curl?' }];

async function post(path, body, headers = {}) {
  return postJson(`${server.url}${path}`, body, headers);
}

// A streamed request: the parsed `data:` events (the last must be [DONE]).
async function stream(path, body) {
  const r = await fetch(`${server.url}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = text.split('\n\n').filter((e) => e.length > 0).map((e) => {
    assert.ok(e.startsWith('data: '), `an SSE event: ${e}`);
    return e.slice(6);
  });
  assert.equal(events.at(-1), '[DONE]');
  return events.slice(0, -1).map((e) => JSON.parse(e));
}

describe('chat completions: CreateChatCompletionResponse', () => {
  const cases = {
    plain: { max_tokens: 12 },
    'greedy to the end': { temperature: 0, max_tokens: 200 },
    'logprobs, top_logprobs 3': { max_tokens: 6, logprobs: true, top_logprobs: 3 },
    'logprobs, top_logprobs 0': { max_tokens: 4, logprobs: true },
    'n 2': { max_tokens: 6, n: 2, seed: 7 },
    'n 2 with logprobs': { max_tokens: 4, n: 2, logprobs: true, top_logprobs: 2 },
    'stop string': { max_tokens: 40, stop: [' the', '.'], temperature: 0 },
    'stop_token_ids (vLLM)': { max_tokens: 20, stop_token_ids: [13] },
    'max_completion_tokens': { max_completion_tokens: 3, ignore_eos: true },
    'prompt_logprobs (vLLM)': { max_tokens: 3, prompt_logprobs: 1 },
    'echo (vLLM)': { max_tokens: 3, echo: true,
      messages: [...MESSAGES, { role: 'assistant', content: 'curl is' }], add_generation_prompt: false,
      continue_final_message: true },
  };
  for (const [name, extra] of Object.entries(cases)) {
    test(name, async () => {
      const r = await post('/v1/chat/completions', { model: MODEL, messages: MESSAGES, ...extra });
      assert.equal(r.status, 200, r.text);
      conforms(r.json, CreateChatCompletionResponse, name);
      inOrder(r.json, ['id', 'object', 'created', 'model', 'choices', 'usage'], name);
      assert.equal(r.json.choices.length, extra.n ?? 1);
      for (const c of r.json.choices) {
        inOrder(c, ['index', 'message', 'logprobs', 'finish_reason'], name);
        inOrder(c.message, ['role', 'content', 'refusal'], name);
        assert.equal(c.message.refusal, null);
        assert.ok('stop_reason' in c, 'vLLM\'s stop_reason stays on the choice');
        if (extra.logprobs) {
          assert.ok(c.logprobs.content.length > 0);
          for (const t of c.logprobs.content) assert.equal(t.top_logprobs.length, extra.top_logprobs ?? 0);
        } else {
          assert.equal(c.logprobs, null);
        }
      }
      assert.ok('prompt_logprobs' in r.json, 'vLLM\'s prompt_logprobs stays on the response');
      if (extra.prompt_logprobs) assert.ok(Array.isArray(r.json.prompt_logprobs));
    });
  }

  test('the SDK reads refusal and the logprobs shape', async () => {
    const r = await openai.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 3, logprobs: true });
    assert.equal(r.choices[0].message.refusal, null);
    assert.equal(r.choices[0].logprobs.refusal, null);
  });
});

describe('chat completion chunks: CreateChatCompletionStreamResponse', () => {
  const cases = {
    plain: { max_tokens: 8 },
    'include_usage': { max_tokens: 8, stream_options: { include_usage: true } },
    'continuous_usage_stats (vLLM)': { max_tokens: 4, stream_options: { include_usage: true, continuous_usage_stats: true } },
    'logprobs, top_logprobs 2': { max_tokens: 6, logprobs: true, top_logprobs: 2 },
    'n 2': { max_tokens: 6, n: 2, seed: 3, stream_options: { include_usage: true } },
    'stop string': { max_tokens: 40, stop: '.', temperature: 0 },
    'greedy to the end': { temperature: 0, max_tokens: 200 },
  };
  for (const [name, extra] of Object.entries(cases)) {
    test(name, async () => {
      const chunks = await stream('/v1/chat/completions', { model: MODEL, messages: MESSAGES, ...extra });
      const n = extra.n ?? 1;
      const finished = new Set();
      for (const [i, ch] of chunks.entries()) {
        conforms(ch, CreateChatCompletionStreamResponse, `${name}: chunk ${i}`);
        inOrder(ch, ['id', 'object', 'created', 'model', 'choices'], name);
        for (const c of ch.choices) {
          inOrder(c, ['index', 'delta', 'logprobs', 'finish_reason'], name);
          assert.ok(!finished.has(c.index), `${name}: a chunk after the finish of choice ${c.index}`);
          if (c.finish_reason !== null) {
            finished.add(c.index);
            assert.ok('stop_reason' in c, 'vLLM\'s stop_reason stays on the last chunk of a choice');
          }
          if (extra.logprobs && c.logprobs) assert.equal(c.logprobs.refusal, null);
        }
      }
      assert.equal(finished.size, n, `${name}: every choice ends with a finish_reason`);
      const first = chunks.filter((ch) => ch.choices.length > 0)[0];
      assert.equal(first.choices[0].delta.role, 'assistant');
      if (extra.stream_options?.include_usage) {
        const last = chunks.at(-1);
        assert.deepEqual(last.choices, []);
        conforms(last.usage, CompletionUsage, `${name}: usage`);
      } else {
        assert.ok(chunks.every((ch) => ch.usage === undefined || ch.usage === null));
      }
    });
  }
});

describe('completions: CreateCompletionResponse', () => {
  const cases = {
    plain: { max_tokens: 8 },
    'greedy to the end': { temperature: 0, max_tokens: 200 },
    'n 2': { max_tokens: 6, n: 2, seed: 5 },
    'best_of 3, n 2': { max_tokens: 4, n: 2, best_of: 3, seed: 5 },
    'logprobs 3': { max_tokens: 6, logprobs: 3 },
    'logprobs 0': { max_tokens: 3, logprobs: 0 },
    echo: { max_tokens: 4, echo: true },
    'echo with logprobs 2': { max_tokens: 4, echo: true, logprobs: 2 },
    'stop strings': { max_tokens: 40, stop: ['\n', ' is'], temperature: 0 },
    'two prompts': { max_tokens: 4, prompt: ['The package', 'A compiler'] },
    'token ids': { max_tokens: 4, prompt: [101, 102, 103] },
    'prompt_logprobs (vLLM)': { max_tokens: 3, prompt_logprobs: 1 },
  };
  for (const [name, extra] of Object.entries(cases)) {
    test(name, async () => {
      const r = await post('/v1/completions', { model: MODEL, prompt: 'The package', ...extra });
      assert.equal(r.status, 200, r.text);
      conforms(r.json, completionSchema({ echo: !!extra.echo }), name);
      inOrder(r.json, ['id', 'object', 'created', 'model', 'choices', 'usage'], name);
      const prompts = Array.isArray(extra.prompt) && typeof extra.prompt[0] === 'string' ? extra.prompt.length : 1;
      assert.equal(r.json.choices.length, prompts * (extra.n ?? 1));
      for (const c of r.json.choices) {
        inOrder(c, ['index', 'text', 'logprobs', 'finish_reason'], name);
        assert.ok('stop_reason' in c, 'vLLM\'s stop_reason stays on the choice');
        if (extra.logprobs !== undefined) {
          const lp = c.logprobs;
          assert.equal(lp.tokens.length, lp.token_logprobs.length);
          assert.equal(lp.tokens.length, lp.text_offset.length);
          assert.equal(lp.tokens.length, lp.top_logprobs.length);
          // DEPARTURE: only the first echoed prompt token may lack a logprob.
          lp.token_logprobs.forEach((x, i) => assert.ok(x !== null || (extra.echo && i === 0), `${name}: null logprob at ${i}`));
        } else {
          assert.equal(c.logprobs, null);
        }
        if (extra.prompt_logprobs) assert.ok(Array.isArray(c.prompt_logprobs), 'vLLM\'s prompt_logprobs on the choice');
      }
    });
  }
});

describe('completion chunks: CreateCompletionResponse, streamed', () => {
  const cases = {
    plain: { max_tokens: 8 },
    'include_usage': { max_tokens: 6, stream_options: { include_usage: true } },
    'n 2': { max_tokens: 5, n: 2, seed: 9, stream_options: { include_usage: true } },
    'logprobs 2': { max_tokens: 5, logprobs: 2 },
    'echo with logprobs 1': { max_tokens: 4, echo: true, logprobs: 1 },
    'stop string': { max_tokens: 40, stop: ' is', temperature: 0 },
    'two prompts': { max_tokens: 3, prompt: ['The package', 'A compiler'] },
  };
  for (const [name, extra] of Object.entries(cases)) {
    test(name, async () => {
      const chunks = await stream('/v1/completions', { model: MODEL, prompt: 'The package', ...extra });
      const schema = completionSchema({ streamed: true, echo: !!extra.echo });
      const finished = new Set();
      for (const [i, ch] of chunks.entries()) {
        conforms(ch, schema, `${name}: chunk ${i}`);
        for (const c of ch.choices) {
          assert.ok(!finished.has(c.index), `${name}: a chunk after the finish of choice ${c.index}`);
          if (c.finish_reason !== null) finished.add(c.index);
          assert.equal(c.logprobs === null, extra.logprobs === undefined, `${name}: logprobs ${JSON.stringify(c.logprobs)}`);
        }
      }
      const prompts = Array.isArray(extra.prompt) ? extra.prompt.length : 1;
      assert.equal(finished.size, prompts * (extra.n ?? 1), `${name}: every choice ends with a finish_reason`);
      if (extra.stream_options?.include_usage) {
        assert.deepEqual(chunks.at(-1).choices, []);
        conforms(chunks.at(-1).usage, CompletionUsage, `${name}: usage`);
      }
    });
  }
});

describe('models: ListModelsResponse and Model', () => {
  test('GET /v1/models', async () => {
    const r = await fetch(`${server.url}/v1/models`);
    assert.equal(r.status, 200);
    const j = await r.json();
    conforms(j, ListModelsResponse, 'models');
    inOrder(j.data[0], ['id', 'object', 'created', 'owned_by'], 'model');
    assert.equal(j.data[0].max_model_len, 512, 'vLLM\'s max_model_len stays');
  });

  test('GET /v1/models/{id} (and through the SDK)', async () => {
    const r = await fetch(`${server.url}/v1/models/${MODEL}`);
    assert.equal(r.status, 200);
    const j = await r.json();
    conforms(j, Model, 'model');
    assert.equal(j.id, MODEL);
    const m = await openai.models.retrieve(MODEL);
    assert.equal(m.id, MODEL);
    const missing = await fetch(`${server.url}/v1/models/gpt-17`);
    assert.equal(missing.status, 404);
    const e = await missing.json();
    conforms(e, ErrorResponse, 'unknown model');
    assert.equal(e.error.code, 'model_not_found');
  });
});

// ------------------------------------------------------------------ errors

// [name, path, body, status, code]
const ERRORS = [
  ['messages not a list', '/v1/chat/completions', { model: MODEL, messages: 'hi' }, 400, 'invalid_type'],
  ['messages missing', '/v1/chat/completions', { model: MODEL }, 400, 'missing_required_parameter'],
  ['malformed JSON', '/v1/chat/completions', '{"model": ', 400, 'invalid_request_error'],
  ['temperature as a string', '/v1/completions', { prompt: 'x', temperature: 'hot' }, 400, 'invalid_type'],
  ['n zero', '/v1/completions', { prompt: 'x', n: 0 }, 400, 'invalid_value'],
  ['context overflow (chat)', '/v1/chat/completions', { messages: MESSAGES, max_tokens: 10000 }, 400,
    'context_length_exceeded'],
  ['context overflow (completions)', '/v1/completions', { prompt: Array(600).fill(17) }, 400, 'context_length_exceeded'],
  ['logit_bias', '/v1/chat/completions', { messages: MESSAGES, logit_bias: { 17: 5 } }, 400, 'unsupported_parameter'],
  ['response_format yaml', '/v1/chat/completions', { messages: MESSAGES, response_format: { type: 'yaml' } }, 400,
    'invalid_value'],
  ['malformed guided_grammar', '/v1/chat/completions', { messages: MESSAGES, guided_grammar: 'root ::= "a' }, 400,
    'invalid_value'],
  ['unknown model', '/v1/chat/completions', { model: 'gpt-17', messages: MESSAGES }, 404, 'model_not_found'],
  ['unknown model (completions)', '/v1/completions', { model: 'gpt-17', prompt: 'x' }, 404, 'model_not_found'],
  ['unknown route', '/v1/audio/speech', { input: 'x' }, 404, null],
];

describe('errors: ErrorResponse', () => {
  for (const [name, path, body, status, code] of ERRORS) {
    test(`${status} ${name}: code ${code}`, async () => {
      const r = await post(path, body);
      assert.equal(r.status, status, r.text);
      assert.match(r.headers.get('content-type'), /^application\/json/);
      conforms(r.json, ErrorResponse, name);
      inOrder(r.json.error, ['message', 'type', 'param', 'code'], name);
      assert.equal(r.json.error.code, code);
    });
  }

  test('405 wrong method: code null', async () => {
    const r = await fetch(`${server.url}/v1/chat/completions`);
    assert.equal(r.status, 405);
    const j = await r.json();
    conforms(j, ErrorResponse, '405');
    assert.equal(j.error.code, null);
  });

  test('a streamed request refused before the stream is a plain ErrorResponse', async () => {
    const r = await post('/v1/chat/completions', { messages: MESSAGES, stream: true, max_tokens: 10000 });
    assert.equal(r.status, 400);
    conforms(r.json, ErrorResponse, 'stream 400');
    assert.equal(r.json.error.code, 'context_length_exceeded');
  });

  test('the SDK surfaces the code', async () => {
    await assert.rejects(openai.chat.completions.create({ model: 'gpt-17', messages: MESSAGES }),
      (err) => err.status === 404 && err.code === 'model_not_found' && err.param === 'model');
    await assert.rejects(openai.chat.completions.create({ model: MODEL, messages: MESSAGES, max_tokens: 10000 }),
      (err) => err.status === 400 && err.code === 'context_length_exceeded');
  });
});

describe('errors on a server with --api-key and admission limits: 401 and 429', () => {
  const KEY = 'schema-key-0123';
  let locked;
  before(async () => {
    locked = await startServer(['--served-model-name', MODEL, '--api-key', KEY, '--max-num-seqs', '1',
      '--max-queued-requests', '1']);
  });
  after(async () => {
    if (!locked) return;
    const { code } = await locked.stop();
    assert.equal(code, 0, locked.stderr);
  });

  for (const [name, headers] of [['missing key', {}], ['wrong key', { Authorization: 'Bearer nope' }]]) {
    test(`401 ${name}: invalid_api_key`, async () => {
      const r = await postJson(`${locked.url}/v1/chat/completions`, { messages: MESSAGES }, headers);
      assert.equal(r.status, 401, r.text);
      conforms(r.json, ErrorResponse, name);
      assert.equal(r.json.error.code, 'invalid_api_key');
      const m = await fetch(`${locked.url}/v1/models`, { headers });
      assert.equal(m.status, 401);
      conforms(await m.json(), ErrorResponse, `${name} on /v1/models`);
    });
  }

  test('429 at capacity: rate_limit_exceeded', async () => {
    const auth = { Authorization: `Bearer ${KEY}` };
    const url = `${locked.url}/v1/completions`;
    const ac = new AbortController();
    const send = () => fetch(url, {
      method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json', ...auth },
      body: JSON.stringify({ prompt: 'The package', max_tokens: 400, ignore_eos: true }),
    }).catch(() => null);
    // One request runs (the only slot), one waits (the queue of one is full).
    const pending = [send()];
    let waiting = false;
    for (let i = 0; i < 250 && !waiting; i++) {
      const m = await metrics(locked);
      if (metric(m, 'vllm:num_requests_running') >= 1) {
        if (pending.length === 1) pending.push(send());
        waiting = metric(m, 'vllm:num_requests_waiting') >= 1;
      }
      if (!waiting) await sleep(20);
    }
    try {
      assert.ok(waiting, 'a request never waited');
      const r = await postJson(url, { prompt: 'x', max_tokens: 2 }, auth);
      assert.equal(r.status, 429, r.text);
      conforms(r.json, ErrorResponse, '429');
      assert.equal(r.json.error.code, 'rate_limit_exceeded');
      assert.ok(Number(r.headers.get('retry-after')) >= 1);
    } finally {
      ac.abort();
      await Promise.all(pending);
    }
  });
});
