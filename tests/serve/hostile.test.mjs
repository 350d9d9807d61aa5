// Hostile clients: inputs built to crash, stall or confuse the server (deep
// JSON, expensive chat templates, huge prompts, HTTP framing and smuggling
// tricks, absurd numbers, broken UTF-8, connection abuse). Each case sends its
// input, then checks that nothing crashed or stalled: (a) GET /health answers
// 200 (median of 3 probes <= 100 ms, none over 1 s) and (b) a normal chat
// request answers 200 with content. Expensive requests also have /health
// probed while they are in flight. A case that leaves the server dead or
// stalled gets it restarted, so the next case is judged on its own.
//
// One server trusts request chat templates (`--trust-request-chat-template`,
// when the binary has that flag) and runs the template budget cases; a second
// one without the flag must refuse every request `chat_template` with a 400
// naming the flag. All traffic is on 127.0.0.1; every loop is bounded.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  MODEL, openConnections, post, probeHealth, rawExchange, scaled, serveHasFlag, sleep, startHalo, stillServing,
  whileInFlight,
} from './hostile_lib.mjs';

const TRUST = '--trust-request-chat-template';
const HAS_TRUST = serveHasFlag(TRUST);
const MiB = 1 << 20;
const BODY_LIMIT = 20 * MiB;  // so that a 15 MiB prompt is under the limit
const S = {};                  // the servers: S.main (trusts templates), S.plain (does not)
const PLAIN = HAS_TRUST ? 'plain' : 'main';

before(async () => {
  const common = ['--max-request-body-bytes', String(BODY_LIMIT), '--max-num-seqs', '64'];
  S.main = await startHalo([...common, ...(HAS_TRUST ? [TRUST] : [])]);
  if (HAS_TRUST) S.plain = await startHalo(common);
});

after(async () => {
  for (const s of Object.values(S)) {
    const { code, signal } = await s.stop();
    assert.equal(code, 0, `clean exit after the hostile cases (signal ${signal}):\n${s.stderr.slice(-2000)}`);
  }
});

// Runs one hostile case against S[key]: the attack returns its own problems,
// then the server must still serve; a dead or stalled server is replaced.
async function hostile(key, attack) {
  const server = S[key];
  const problems = [];
  try {
    problems.push(...(await attack(server)));
  } catch (e) {
    problems.push(`attack threw: ${e.stack}`);
  }
  const after = await stillServing(server);
  problems.push(...after);
  if (after.length) {
    await server.kill();
    S[key] = await startHalo(server.args);
  }
  assert.deepEqual(problems, []);
}

const is4xx = (s) => typeof s === 'number' && s >= 400 && s < 500;
const errorMessage = (r) => String(r.json?.error?.message ?? r.json?.error ?? r.json?.message ?? r.text);
const want4xx = (r) => (is4xx(r.status) ? [] : [`status ${r.status} (want 4xx): ${r.text.slice(0, 200)}`]);
const T = { timeout: scaled(40000) };

const CHAT = '/v1/chat/completions';
const CMPL = '/v1/completions';
const KSERVE = `/v2/models/${MODEL}/generate`;
// Raw JSON bodies (some inputs cannot be written by JSON.stringify); `extra`
// is ',"field":value...' and replaces the default max_tokens when it has one.
const maxTokens = (extra) => (/"max_(completion_)?tokens"/.test(extra) ? '' : ',"max_tokens":4');
const chatRaw = (extra = '', content = '"What is curl?"') =>
  `{"model":"${MODEL}","messages":[{"role":"user","content":${content}}]${maxTokens(extra)}${extra}}`;
const cmplRaw = (extra = '', prompt = '"The package"') =>
  `{"model":"${MODEL}","prompt":${prompt}${maxTokens(extra)}${extra}}`;
const chatBody = (extra = {}) =>
  ({ model: MODEL, messages: [{ role: 'user', content: 'What is curl?' }], max_tokens: 4, ...extra });

// ---------------------------------------------------------------------------
// 1. Deeply nested JSON: 4xx, no crash.
const N = 12000;
const deepArr = (n = N) => '['.repeat(n) + ']'.repeat(n);
const deepObj = (n = N) => '{"a":'.repeat(n) + '1' + '}'.repeat(n);
const DEEP = [
  ['messages[0].content: deep array', CHAT, chatRaw('', deepArr())],
  ['messages[0].content: deep object', CHAT, chatRaw('', deepObj())],
  ['messages[0].content: deep list of parts', CHAT, chatRaw('', `[{"type":"text","text":${deepArr()}}]`)],
  ['messages[0]: deep extra field', CHAT,
    `{"model":"${MODEL}","messages":[{"role":"user","content":"x","name":${deepObj()}}]}`],
  ['tools: deep array', CHAT, chatRaw(`,"tools":${deepArr()}`)],
  ['tools[0].function.parameters: deep object', CHAT,
    chatRaw(`,"tools":[{"type":"function","function":{"name":"f","parameters":${deepObj()}}}]`)],
  ['chat_template_kwargs: deep array', CHAT, chatRaw(`,"chat_template_kwargs":{"x":${deepArr()}}`)],
  ['chat_template_kwargs: deep object', CHAT, chatRaw(`,"chat_template_kwargs":${deepObj()}`)],
  ['stop: deep array', CHAT, chatRaw(`,"stop":${deepArr()}`)],
  ['logit_bias: deep', CHAT, chatRaw(`,"logit_bias":{"1":${deepArr()}}`)],
  ['response_format: deep', CHAT, chatRaw(`,"response_format":{"type":"json_schema","json_schema":${deepObj()}}`)],
  ['stream_options: deep', CHAT, chatRaw(`,"stream":true,"stream_options":${deepObj()}`)],
  ['unknown field: deep', CHAT, chatRaw(`,"some_future_field":${deepArr()}`)],
  ['the body itself: deep array', CHAT, deepArr()],
  ['the body itself: 200,000 levels', CHAT, deepArr(200000)],
  ['completions prompt: deep', CMPL, cmplRaw('', deepArr())],
  ['completions stop: deep', CMPL, cmplRaw(`,"stop":${deepArr()}`)],
  ['chat render: deep messages', `${CHAT}/render`, chatRaw('', deepArr())],
  ['/tokenize: deep prompt', '/tokenize', `{"prompt":${deepArr()}}`],
  ['/detokenize: deep tokens', '/detokenize', `{"tokens":${deepArr()}}`],
  ['/generate: deep prompt', '/generate', `{"prompt":${deepArr()}}`],
  ['KServe v2 generate: deep parameters', KSERVE, `{"text_input":"x","parameters":${deepObj()}}`],
  ['KServe v2 generate: deep text_input', KSERVE, `{"text_input":${deepArr()}}`],
  ['KServe v2 generate: deep sampling_parameters string', KSERVE,
    `{"text_input":"x","sampling_parameters":${JSON.stringify(deepObj())}}`],
  ['KServe v2 generate_stream: deep parameters', `${KSERVE}_stream`, `{"text_input":"x","parameters":${deepArr()}}`],
  ['SageMaker /invocations: deep parameters', '/invocations', `{"inputs":"x","parameters":{"a":${deepArr()}}}`],
  ['SageMaker /invocations: deep inputs', '/invocations', `{"inputs":${deepObj()}}`],
];

// JSON text inside string fields, and schemas and regexes that nest: one
// depth rule for all of them (issue 42: each of these crashed the server).
const DEEP_TEXT = 20000;
const deepText = JSON.stringify(`{"a":${deepArr(DEEP_TEXT)}}`);
const toolCallTurn = `[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1",` +
  `"type":"function","function":{"name":"f","arguments":${deepText}}}]},{"role":"tool","tool_call_id":"c1","content":"y"}]`;
const refChain = () => {
  const defs = {};
  for (let i = 0; i < 10000; i++) defs[`d${i}`] = { $ref: `#/$defs/d${i + 1}` };
  defs.d10000 = { type: 'string' };
  return JSON.stringify({ $defs: defs, $ref: '#/$defs/d0' });
};
DEEP.push(
  ['tool_calls[0].function.arguments: JSON text 20,000 deep', CHAT, chatRaw('', '"x"').replace(
    /"messages":\[[^\]]*\]/, `"messages":${toolCallTurn}`)],
  ['chat render: tool-call arguments 20,000 deep', `${CHAT}/render`,
    `{"model":"${MODEL}","messages":${toolCallTurn}}`],
  ['/tokenize: tool-call arguments 20,000 deep', '/tokenize', `{"model":"${MODEL}","messages":${toolCallTurn}}`],
  ['Responses function_call.arguments 20,000 deep', '/v1/responses', `{"model":"${MODEL}","max_output_tokens":4,` +
    `"input":[{"type":"function_call","call_id":"c1","name":"f","arguments":${deepText}},` +
    '{"type":"function_call_output","call_id":"c1","output":"y"}]}'],
  ['guided_json as JSON text 10,000 deep', CHAT, chatRaw(`,"guided_json":${JSON.stringify(deepObj(10000))}`)],
  ['structured_outputs.json as JSON text 2,000 deep', CHAT,
    chatRaw(`,"structured_outputs":{"json":${JSON.stringify(deepObj(2000))}}`)],
  ['response_format schema as JSON text 10,000 deep', CHAT, chatRaw(
    `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":${JSON.stringify(deepObj(10000))}}}`)],
  ['guided_regex of 20,000 nested groups', CHAT,
    chatRaw(`,"guided_regex":"${'('.repeat(20000)}a${')'.repeat(20000)}"`)],
  ['guided_json: a $ref chain of 10,000 $defs', CHAT, chatRaw(`,"guided_json":${refChain()}`)],
  ['guided_json: $ref to an index past any integer', CHAT, chatRaw(
    ',"guided_json":{"$defs":{"a":[{"type":"string"}]},"$ref":"#/$defs/a/99999999999999999999"}')],
);

describe('1. deeply nested JSON (12,000 levels): 4xx, no crash', () => {
  for (const [name, path, body] of DEEP) {
    test(name, T, () => hostile('main', async (s) => want4xx(await post(`${s.url}${path}`, body))));
  }
});

// ---------------------------------------------------------------------------
// 2. Request chat templates. `bounded`: the template can only be stopped by a
// budget, so 4xx; otherwise (only deep syntax) 200 is fine too if the engine
// evaluates it without recursion.
const OPS = 10000;
const TEMPLATES = [
  ['benign template (control)', '{% for m in messages %}{{ m.content }}{% endfor %}', 'ok'],
  [`chain of ${OPS} binary operators`, `{{ 1${' + 1'.repeat(OPS)} }}`, 'deep'],
  [`chain of ${OPS} string concatenations`, `{{ 'a'${" ~ 'a'".repeat(OPS)} }}`, 'deep'],
  [`${OPS} nested parentheses`, `{{ ${'('.repeat(OPS)}1${')'.repeat(OPS)} }}`, 'deep'],
  [`${OPS} nested list literals`, `{{ ${'['.repeat(OPS)}${']'.repeat(OPS)} }}`, 'deep'],
  [`${OPS} nested ifs`, `${'{% if true %}'.repeat(OPS)}x${'{% endif %}'.repeat(OPS)}`, 'deep'],
  [`${OPS} chained filters`, `{{ 'x'${' | upper'.repeat(OPS)} }}`, 'deep'],
  ['unary not chain', `{{ ${'not '.repeat(OPS)}true }}`, 'deep'],
  ['for i in range(10^9): x', '{% for i in range(1000000000) %}x{% endfor %}', 'bounded'],
  ['for i in range(10^9), no output', '{% for i in range(1000000000) %}{% endfor %}', 'bounded'],
  ['nested loops 10^5 x 10^5', '{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}',
    'bounded'],
  ['range(10^9) | list', '{{ range(1000000000) | list | length }}', 'bounded'],
  ["'x' * 10^9", "{{ 'x' * 1000000000 }}", 'bounded'],
  ['doubling a string 40 times', "{% set ns = namespace(s='xx') %}{% for i in range(40) %}" +
    '{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}', 'bounded'],
  ['recursive macro', '{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}', 'bounded'],
  ['recursive macro, doubling output', '{% macro f(n) %}{{ f(n + 1) }}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}',
    'bounded'],
  ['indent by 10^9', "{{ 'a\nb' | indent(1000000000) }}", 'bounded'],
];

describe(`2. request chat templates (server ${HAS_TRUST ? 'with' : 'WITHOUT (flag missing)'} ${TRUST}): ` +
  'budgets hold, no crash', () => {
  for (const [name, tpl, kind] of TEMPLATES) {
    test(name, T, () => hostile('main', async (s) => {
      const r = await post(`${s.url}${CHAT}`, chatBody({ chat_template: tpl }), { timeoutMs: 5000 });
      if (kind === 'ok') return r.status === 200 ? [] : [`status ${r.status}: ${r.text.slice(0, 200)}`];
      if (kind === 'deep' && (r.status === 200 || is4xx(r.status))) return [];
      return want4xx(r);
    }));
  }
});

describe(`2b. without ${TRUST}: a request chat_template is a 400 naming the flag`, () => {
  for (const [name, tpl] of TEMPLATES) {
    test(name, T, () => hostile(PLAIN, async (s) => {
      const r = await post(`${s.url}${CHAT}`, chatBody({ chat_template: tpl }), { timeoutMs: 5000 });
      const ok = r.status === 400 && errorMessage(r).includes(TRUST);
      return ok ? [] : [`status ${r.status} (want 400 naming ${TRUST}): ${r.text.slice(0, 200)}`];
    }));
  }
});

// ---------------------------------------------------------------------------
// 3. Stalls: expensive requests in flight must not delay /health.
const template = (name) => TEMPLATES.find(([n]) => n === name)[1];
const parallel = (n, fn) => Promise.all(Array.from({ length: n }, (_, i) => fn(i)));
const bigText = (bytes, unit) => unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes);
const STALLS = [
  ['8 parallel range(10^9) templates', 'main', (s) => parallel(8, () =>
    post(`${s.url}${CHAT}`, chatBody({ chat_template: template('for i in range(10^9): x') }), { timeoutMs: 15000 }))],
  [`8 parallel ${OPS}-operator templates`, 'main', (s) => parallel(8, () =>
    post(`${s.url}${CHAT}`, chatBody({ chat_template: template(`chain of ${OPS} binary operators`) }),
      { timeoutMs: 15000 }))],
  ['8 parallel range(10^9) templates, server without the flag', PLAIN, (s) => parallel(8, () =>
    post(`${s.url}${CHAT}`, chatBody({ chat_template: template('for i in range(10^9): x') }), { timeoutMs: 15000 }))],
  ['15 MiB completions prompt (words)', 'main', (s) =>
    post(`${s.url}${CMPL}`, { model: MODEL, prompt: bigText(15 * MiB, 'word '), max_tokens: 4 }, { timeoutMs: 12000 })],
  ['2 parallel 15 MiB completions prompts (one word each)', 'main', (s) => parallel(2, () =>
    post(`${s.url}${CMPL}`, { model: MODEL, prompt: bigText(15 * MiB, 'x'), max_tokens: 4 }, { timeoutMs: 12000 }))],
  ['15 MiB chat message', 'main', (s) => post(`${s.url}${CHAT}`,
    chatBody({ messages: [{ role: 'user', content: bigText(15 * MiB, 'What is curl? ') }] }), { timeoutMs: 12000 })],
  ['15 MiB /tokenize (200 allowed: no context limit there)', 'main', (s) =>
    post(`${s.url}/tokenize`, { model: MODEL, prompt: bigText(15 * MiB, 'word ') }, { timeoutMs: 12000 })],
  // Raw: the server answers 413 from the Content-Length and closes without taking the body, so a
  // client still writing 25 MiB may see EPIPE instead of the answer; here the answer is always read.
  ['25 MiB body, over the 20 MiB limit: 413', 'main', async (s) => {
    const head = `POST ${CMPL} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${25 * MiB}\r\n\r\n{"model": "${MODEL}", "prompt": "word word`;
    const r = await rawExchange(s.port, head, { timeoutMs: 5000 });
    return { status: r.statuses[0] ?? `error: ${r.error ?? 'no answer'}`, text: r.data, json: null };
  }],
  // An order-keeping parse of one 200,000-key object took 32 s (issue 42).
  ['chat, Responses and Messages bodies with one object of 200,000 keys', 'main', async (s) => {
    const wide = Object.fromEntries(Array.from({ length: 200000 }, (_, i) => [`k${i}`, i]));
    const opts = { timeoutMs: scaled(12000) };
    return [
      await post(`${s.url}${CHAT}`, chatBody({ messages: [{ role: 'user', content: 'x', metadata: wide }] }), opts),
      await post(`${s.url}/v1/responses`, { model: MODEL, input: 'x', metadata: wide }, opts),
      await post(`${s.url}/v1/messages`,
        { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'x' }], metadata: wide }, opts),
    ];
  }],
  // Regexes whose automata took minutes and gigabytes (issue 42): refused by the
  // compile's work budget.
  ...[['".?" x 10,000 (145 s before)', '.?'.repeat(10000)], ['.{0,1000} x 3 (30 s)', '.{0,1000}'.repeat(3)],
    ['"a?" x 20,000 (14 s)', 'a?'.repeat(20000)]].map(([what, re]) => [`guided_regex ${what}`, 'main', (s) =>
    post(`${s.url}${CHAT}`, chatBody({ guided_regex: re }), { timeoutMs: scaled(12000) })]),
  // $defs fanning out, d_i = anyOf[d_i+1, d_i+1]: the regex doubles per level (issue 42:
  // 40 levels grew the server to 5-9 GB; 30 stay within the depth rule).
  ['guided_json: $defs fanning out 30 levels', 'main', (s) => {
    const defs = {};
    for (let i = 0; i < 30; i++) defs[`d${i}`] = { anyOf: [{ $ref: `#/$defs/d${i + 1}` }, { $ref: `#/$defs/d${i + 1}` }] };
    defs.d30 = { type: 'string', maxLength: 3 };
    return post(`${s.url}${CHAT}`, chatBody({ guided_json: { $defs: defs, $ref: '#/$defs/d0' } }),
      { timeoutMs: scaled(12000) });
  }],
  ['1 MB of combining characters as one prompt', 'main', (s) =>
    post(`${s.url}${CMPL}`, { model: MODEL, prompt: `a${'\u0301'.repeat(MiB / 2)}`, max_tokens: 4 }, { timeoutMs: 12000 })],
  ['4 parallel 1 MB combining-character chats', 'main', (s) => parallel(4, () => post(`${s.url}${CHAT}`,
    chatBody({ messages: [{ role: 'user', content: `a${'\u0308'.repeat(MiB / 2)}` }] }), { timeoutMs: 12000 }))],
];

describe('3. expensive requests: a 4xx, and /health stays fast while they run', () => {
  for (const [name, key, work] of STALLS) {
    test(name, T, () => hostile(key, async (s) => {
      const { result, problems } = await whileInFlight(s.url, () => work(s));
      for (const r of [].concat(result)) {
        if (!(name.includes('200 allowed') && r.status === 200)) problems.push(...want4xx(r));
      }
      if (name.includes('413') && result.status !== 413) problems.push(`status ${result.status}, want 413`);
      return problems;
    }));
  }
});

// ---------------------------------------------------------------------------
// 4. HTTP framing. Every payload is sent on a fresh raw connection; `close`:
// the server must answer once and close the connection; the bytes after the
// headers (a smuggled GET /v1/models) must never be answered.
const H = 'Host: 127.0.0.1\r\n';
const SMUGGLED = `GET /v1/models HTTP/1.1\r\n${H}\r\n`;
const CLOSE = 'Connection: close\r\n';  // where either answer is fine, so the case need not wait for a timeout
const postWith = (headers, body = '') =>
  `POST ${CMPL} HTTP/1.1\r\n${H}Content-Type: application/json\r\n${headers}\r\n${body}`;
const manyHeaders = Array.from({ length: 10000 }, (_, i) => `X-H${i}: v\r\n`).join('');
// [name, payload, statuses allowed ('none': closed without an answer), close]
const FRAMING = [
  ['Transfer-Encoding: gzip (chunked not last) + smuggled GET', postWith('Transfer-Encoding: gzip\r\n', SMUGGLED),
    [400], true],
  ['Transfer-Encoding: chunked, gzip + smuggled GET', postWith('Transfer-Encoding: chunked, gzip\r\n', SMUGGLED),
    [400], true],
  ['Transfer-Encoding: gzip, chunked', postWith('Transfer-Encoding: gzip, chunked\r\n', `0\r\n\r\n${SMUGGLED}`),
    [400, 501], true],
  ['Transfer-Encoding: identity + smuggled GET', postWith('Transfer-Encoding: identity\r\n', SMUGGLED), [400, 501], true],
  ['two Transfer-Encoding headers (chunked, gzip)',
    postWith('Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n', `0\r\n\r\n${SMUGGLED}`), [400, 501], true],
  ['Content-Length + Transfer-Encoding: chunked (CL.TE)',
    postWith('Content-Length: 6\r\nTransfer-Encoding: chunked\r\n', `0\r\n\r\n${SMUGGLED}`), [400], true],
  ['Transfer-Encoding: chunked + Content-Length (TE.CL)',
    postWith('Transfer-Encoding: chunked\r\nContent-Length: 3\r\n', `2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`), [400], true],
  ['Transfer-Encoding with a space before the colon',
    postWith('Content-Length: 2\r\nTransfer-Encoding : chunked\r\n', `{}${SMUGGLED}`), [400], true],
  ['obs-fold Transfer-Encoding + Content-Length',
    postWith('Content-Length: 2\r\nTransfer-Encoding:\r\n chunked\r\n', `{}${SMUGGLED}`), [400], true],
  ['obs-fold in an ordinary header', `GET /health HTTP/1.1\r\n${H}${CLOSE}X-Folded: a\r\n b\r\n\r\n`, [200, 400], false],
  ['duplicate Content-Length, different values',
    postWith('Content-Length: 2\r\nContent-Length: 40\r\n', `{}${SMUGGLED}`), [400], true],
  ['Content-Length list "2, 40"', postWith('Content-Length: 2, 40\r\n', `{}${SMUGGLED}`), [400], true],
  ['Content-Length -1', postWith('Content-Length: -1\r\n', `{}${SMUGGLED}`), [400], true],
  ['Content-Length +2', postWith('Content-Length: +2\r\n', `{}${SMUGGLED}`), [400], true],
  ['Content-Length 2^64 + 1', postWith('Content-Length: 18446744073709551617\r\n', `{}${SMUGGLED}`), [400, 413], true],
  ['chunk size zz', postWith('Transfer-Encoding: chunked\r\n', `zz\r\n{}\r\n0\r\n\r\n${SMUGGLED}`), [400], true],
  ['chunk size -1', postWith('Transfer-Encoding: chunked\r\n', `-1\r\n{}\r\n0\r\n\r\n${SMUGGLED}`), [400], true],
  ['chunk size over 2^64', postWith('Transfer-Encoding: chunked\r\n', `1ffffffffffffffff\r\n{}\r\n0\r\n\r\n${SMUGGLED}`),
    [400, 413], true],
  ['chunk size 2^64 - 1', postWith('Transfer-Encoding: chunked\r\n', `ffffffffffffffff\r\n{}\r\n0\r\n\r\n${SMUGGLED}`),
    [400, 413], true],
  ['chunk size 0x2', postWith('Transfer-Encoding: chunked\r\n', `0x2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`), [400], true],
  ['chunk extension of 1 MB',
    postWith(`${CLOSE}Transfer-Encoding: chunked\r\n`, `2;ext=${'x'.repeat(MiB)}\r\n{}\r\n0\r\n\r\n`), [400, 413, 431], false],
  ['header of 1 MB', `GET /health HTTP/1.1\r\n${H}X-Big: ${'a'.repeat(MiB)}\r\n\r\n`, [400, 413, 431], true],
  ['10,000 headers', `GET /health HTTP/1.1\r\n${H}${manyHeaders}\r\n`, [400, 413, 431], true],
  ['request line of 100 KB', `GET /health?${'a'.repeat(100 * 1024)} HTTP/1.1\r\n${H}\r\n`, [400, 414, 431], true],
  ['bare LF line endings', 'GET /health HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n\n', [200, 400], false],
  ['bare CR inside a header', `GET /health HTTP/1.1\r\n${H}X-A: a\rb\r\n\r\n`, [400], true],
  ['NUL in a header value', `GET /health HTTP/1.1\r\n${H}X-A: a\0b\r\n\r\n`, [400], true],
  ['NUL in a header name', `GET /health HTTP/1.1\r\n${H}X-\0A: b\r\n\r\n`, [400], true],
  ['NUL in the request target', `GET /hea\0lth HTTP/1.1\r\n${H}\r\n`, [400], true],
  ['HTTP/0.9 request', 'GET /health\r\n\r\n', [400, 505, 'none'], true],
  ['HTTP/2 connection preface', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00',
    [400, 505, 'none'], true],
  ['HTTP/1.0 keep-alive with Transfer-Encoding: chunked + smuggled GET (RFC 9112 6.1: faulty framing, close)',
    `POST ${CMPL} HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n${SMUGGLED}`,
    [400], true],
  ['HTTP/1.1 POST, body longer than Content-Length is not a second request',
    postWith('Content-Length: 2\r\nConnection: close\r\n', `{}${SMUGGLED}`), [400], true],
];

describe('4. HTTP framing: 400/413/431, connection closed, smuggled bytes never answered', () => {
  for (const [name, payload, allowed, mustClose] of FRAMING) {
    test(name, T, () => hostile('main', async (s) => {
      const r = await rawExchange(s.port, payload, { timeoutMs: 2000 });
      const problems = [];
      const first = r.statuses.length ? r.statuses[0] : 'none';
      if (!allowed.includes(first)) problems.push(`status ${first} (want ${allowed.join(' or ')}): ${r.data.slice(0, 200)}`);
      if (r.statuses.length > 1) problems.push(`${r.statuses.length} responses (${r.statuses}): bytes after the first request were answered`);
      if (/"object"\s*:\s*"list"/.test(r.data)) problems.push('the smuggled GET /v1/models was answered');
      if (mustClose && !r.closed) problems.push('the connection was left open');
      return problems;
    }));
  }
});

// ---------------------------------------------------------------------------
// 5. Numbers: a 400 naming the field (never 500 or a hang). [name, path, raw
// body, field (null: invalid JSON, any 400), also allowed (regex on the
// message, or 200)]
const NUMBERS = [
  ['max_tokens 1e400', CHAT, chatRaw(',"max_tokens":1e400'), 'max_tokens'],
  ['max_tokens 3e9', CHAT, chatRaw(',"max_tokens":3e9'), 'max_tokens', /3000000000 in the completion/],
  ['max_tokens 3000000000', CHAT, chatRaw(',"max_tokens":3000000000'), 'max_tokens', /3000000000 in the completion/],
  ['max_tokens -1', CHAT, chatRaw(',"max_tokens":-1'), 'max_tokens'],
  ['max_tokens 1.5', CHAT, chatRaw(',"max_tokens":1.5'), 'max_tokens'],
  ['max_tokens "10"', CHAT, chatRaw(',"max_tokens":"10"'), 'max_tokens'],
  ['max_tokens 2^63', CHAT, chatRaw(',"max_tokens":9223372036854775808'), 'max_tokens'],
  ['max_tokens 2^64', CHAT, chatRaw(',"max_tokens":18446744073709551616'), 'max_tokens'],
  ['max_tokens -2^63 - 1', CHAT, chatRaw(',"max_tokens":-9223372036854775809'), 'max_tokens'],
  ['max_completion_tokens 1e400', CHAT, chatRaw(',"max_completion_tokens":1e400'), 'max_completion_tokens'],
  ['completions max_tokens 2^63', CMPL, cmplRaw(',"max_tokens":9223372036854775808'), 'max_tokens'],
  ['temperature "NaN"', CHAT, chatRaw(',"temperature":"NaN"'), 'temperature'],
  ['temperature "Infinity"', CHAT, chatRaw(',"temperature":"Infinity"'), 'temperature'],
  ['temperature NaN (bare, invalid JSON)', CHAT, chatRaw(',"temperature":NaN'), null],
  ['temperature Infinity (bare, invalid JSON)', CHAT, chatRaw(',"temperature":Infinity'), null],
  ['temperature 1e400', CHAT, chatRaw(',"temperature":1e400'), 'temperature'],
  ['temperature 1e308', CHAT, chatRaw(',"temperature":1e308'), 'temperature', 200],
  ['temperature -1e308', CHAT, chatRaw(',"temperature":-1e308'), 'temperature'],
  ['top_p "NaN"', CHAT, chatRaw(',"top_p":"NaN"'), 'top_p'],
  ['top_p 1e-400 (underflows to 0)', CHAT, chatRaw(',"top_p":1e-400'), 'top_p'],
  ['frequency_penalty 1e400', CHAT, chatRaw(',"frequency_penalty":1e400'), 'frequency_penalty'],
  ['n 10^9', CHAT, chatRaw(',"n":1000000000'), 'n'],
  ['n 2^63', CHAT, chatRaw(',"n":9223372036854775808'), 'n'],
  ['n -1', CHAT, chatRaw(',"n":-1'), 'n'],
  ['top_logprobs 10^6', CHAT, chatRaw(',"logprobs":true,"top_logprobs":1000000'), 'top_logprobs'],
  ['completions logprobs 10^6', CMPL, cmplRaw(',"logprobs":1000000'), 'logprobs'],
  ['completions logprobs 2^63', CMPL, cmplRaw(',"logprobs":9223372036854775808'), 'logprobs'],
  ['completions best_of 10^9', CMPL, cmplRaw(',"best_of":1000000000'), 'best_of'],
  ['completions min_tokens 1e400', CMPL, cmplRaw(',"min_tokens":1e400'), 'min_tokens'],
  ['seed 2^64', CHAT, chatRaw(',"seed":18446744073709551616'), 'seed', 200],
  ['seed 1e400', CHAT, chatRaw(',"seed":1e400'), 'seed'],
  ['top_k 10^10', CHAT, chatRaw(',"top_k":10000000000'), 'top_k', 200],
  ['top_k -2', CHAT, chatRaw(',"top_k":-2'), 'top_k'],
  ['stop_token_ids [2^63]', CHAT, chatRaw(',"stop_token_ids":[9223372036854775808]'), 'stop_token_ids'],
  ['prompt token id 2^63', CMPL, cmplRaw('', '[9223372036854775808]'), 'prompt'],
  ['prompt token id 4294967297', CMPL, cmplRaw('', '[4294967297]'), 'prompt'],
  ['prompt token id 1e400', CMPL, cmplRaw('', '[1e400]'), 'prompt'],
  ['truncate_prompt_tokens 2^63', CMPL, cmplRaw(',"truncate_prompt_tokens":9223372036854775808'),
    'truncate_prompt_tokens'],
  ['KServe max_tokens 1e400', KSERVE, '{"text_input":"x","max_tokens":1e400}', 'max_tokens'],
  ['KServe max_tokens 3e9', KSERVE, '{"text_input":"x","parameters":{"max_tokens":3e9}}', 'max_tokens',
    /3000000000 in the completion/],
  ['KServe temperature "NaN" in sampling_parameters', KSERVE,
    '{"text_input":"x","sampling_parameters":"{\\"temperature\\":\\"NaN\\"}"}', 'temperature'],
  ['SageMaker max_new_tokens 3e9', '/invocations', '{"inputs":"x","parameters":{"max_new_tokens":3e9}}',
    'max_new_tokens', /3000000000 in the completion/],
  ['SageMaker max_new_tokens 2^63', '/invocations',
    '{"inputs":"x","parameters":{"max_new_tokens":9223372036854775808}}', 'max_new_tokens'],
];

// "must be at least 1, got 3000000000" means the value was range-checked
// after it wrapped around.
function contradicts(msg) {
  const least = msg.match(/at least (-?[\d.]+), got (-?[\d.e+]+)/);
  const most = msg.match(/at most (-?[\d.]+), got (-?[\d.e+]+)/);
  return (least && Number(least[2]) >= Number(least[1])) || (most && Number(most[2]) <= Number(most[1]));
}

describe('5. absurd numbers: 400 naming the field', () => {
  for (const [name, path, body, field, alsoOk] of NUMBERS) {
    test(name, T, () => hostile('main', async (s) => {
      const r = await post(`${s.url}${path}`, body);
      if (alsoOk === 200 && r.status === 200) return [];
      const msg = errorMessage(r);
      const named = field === null || r.json?.error?.param === field || msg.includes(field) ||
        (alsoOk instanceof RegExp && alsoOk.test(msg));
      const problems = r.status === 400 && named ? [] : [`status ${r.status} (want 400 naming ${field}): ${r.text.slice(0, 300)}`];
      if (contradicts(msg)) problems.push(`the message contradicts itself: ${msg}`);
      return problems;
    }));
  }
});

// ---------------------------------------------------------------------------
// 6. Unicode and encoding: refused (400) or served (200), never 500 or a crash.
const bytes = (...parts) => Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
const inPrompt = (...raw) => bytes(`{"model":"${MODEL}","prompt":"The package `, ...raw, '","max_tokens":4}');
const inChat = (...raw) => bytes(`{"model":"${MODEL}","messages":[{"role":"user","content":"What is `, ...raw,
  '"}],"max_tokens":4}');
const UNICODE = [
  ['invalid UTF-8 (FF FE) in the prompt', CMPL, inPrompt([0xff, 0xfe])],
  ['invalid UTF-8 (FF) in chat content', CHAT, inChat([0xff])],
  ['truncated UTF-8 sequence at the end of a string', CHAT, inChat([0xe2, 0x82])],
  ['invalid UTF-8 in the model name', CHAT, bytes('{"model":"pkg', [0xc3, 0x28], '","messages":[{"role":"user","content":"x"}]}')],
  ['invalid UTF-8 in a key', CHAT, bytes(`{"model":"${MODEL}","`, [0xfe], '":1,"messages":[{"role":"user","content":"x"}]}')],
  ['lone high surrogate \\ud800 in the prompt', CMPL, inPrompt('\\ud800')],
  ['lone low surrogate \\udc00 in chat content', CHAT, inChat('\\udc00')],
  ['reversed surrogate pair', CHAT, inChat('\\udc00\\ud800')],
  ['high surrogate then a letter', CMPL, inPrompt('\\ud800\\u0041')],
  ['lone surrogate in the role', CHAT, bytes(`{"model":"${MODEL}","messages":[{"role":"us\\ud800er","content":"x"}]}`)],
  ['overlong "/" (C0 AF)', CMPL, inPrompt([0xc0, 0xaf])],
  ['overlong "/" (E0 80 AF)', CHAT, inChat([0xe0, 0x80, 0xaf])],
  ['overlong "/" (F0 80 80 AF)', CMPL, inPrompt([0xf0, 0x80, 0x80, 0xaf])],
  ['5-byte sequence (F8 88 80 80 80)', CMPL, inPrompt([0xf8, 0x88, 0x80, 0x80, 0x80])],
  ['UTF-8-encoded surrogate (ED A0 80)', CHAT, inChat([0xed, 0xa0, 0x80])],
  ['code point over U+10FFFF (F4 90 80 80)', CMPL, inPrompt([0xf4, 0x90, 0x80, 0x80])],
  ['NUL (\\u0000) in chat content', CHAT, inChat('\\u0000curl?')],
  ['NUL (\\u0000) in the prompt, echoed', CMPL,
    bytes(`{"model":"${MODEL}","prompt":"a\\u0000b","max_tokens":4,"echo":true}`)],
  ['raw NUL byte in a JSON string', CHAT, inChat([0x00])],
  ['UTF-8 BOM before the body', CHAT, bytes([0xef, 0xbb, 0xbf], JSON.stringify(chatBody()))],
  ['UTF-16LE body', CHAT, Buffer.from(JSON.stringify(chatBody()), 'utf16le')],
  ['stop string of invalid UTF-8', CMPL, bytes(`{"model":"${MODEL}","prompt":"x","max_tokens":4,"stop":["`, [0xff], '"]}')],
  ['/tokenize invalid UTF-8', '/tokenize', bytes('{"prompt":"a', [0xff, 0xc0], '"}')],
  ['/detokenize then byte-fallback tokens', '/detokenize', bytes('{"tokens":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}')],
];

describe('6. Unicode and encoding: 200 or 400, never 500 or a crash', () => {
  for (const [name, path, body] of UNICODE) {
    test(name, T, () => hostile('main', async (s) => {
      const r = await post(`${s.url}${path}`, body);
      return [200, 400].includes(r.status) ? [] : [`status ${r.status} (want 200 or 400): ${r.text.slice(0, 200)}`];
    }));
  }
});

// ---------------------------------------------------------------------------
// 7. Connection abuse, bounded in count and time.
describe('7. connection abuse', () => {
  test('200 connections left idle (100 silent, 100 with half a request)', T, () => hostile('main', async (s) => {
    const socks = await openConnections(s.port, 200);
    socks.slice(100).forEach((c) => c.write(`GET /health HTTP/1.1\r\n${H}`));
    await sleep(200);
    const problems = [...await probeHealth(s.url, { label: 'with 200 idle connections' }),
      ...await stillServing(s)];
    socks.forEach((c) => c.destroy());
    return problems;
  }));

  test('slowloris: 20 connections sending a header byte every 250 ms for 3 s', T, () => hostile('main', async (s) => {
    const socks = await openConnections(s.port, 20);
    const line = `GET /health HTTP/1.1\r\n${H}X-Slow: ${'s'.repeat(100)}`;
    let i = 0;
    const timer = setInterval(() => {
      if (i < line.length) socks.forEach((c) => c.writable && c.write(line[i]));
      i++;
    }, 250);
    const problems = await probeHealth(s.url, { n: 6, gapMs: 450, label: 'during slowloris' });
    clearInterval(timer);
    socks.forEach((c) => c.destroy());
    return problems;
  }));

  test('clients that never read their streamed responses', T, () => hostile('main', async (s) => {
    // ~1.5 KB per token with 20 logprobs: ~10 MB per client, more than the socket buffers hold.
    const body = JSON.stringify({ model: MODEL, prompt: 'The package', max_tokens: 400, n: 16, logprobs: 20,
      stream: true, ignore_eos: true });
    const req = `POST ${CMPL} HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
    const socks = await openConnections(s.port, 2);
    socks.forEach((c) => { c.write(req); c.pause(); });
    await sleep(1500);
    const problems = [...await probeHealth(s.url, { label: 'with non-reading stream clients' }),
      ...await stillServing(s)];
    // A streamed request still completes while they hang.
    const r = await post(`${s.url}${CMPL}`, { model: MODEL, prompt: 'The package', max_tokens: 8, stream: true },
      { timeoutMs: 15000 });
    if (r.status !== 200 || !r.text.includes('data: [DONE]')) problems.push(`stream: ${r.status} ${r.text.slice(-200)}`);
    socks.forEach((c) => c.destroy());
    return problems;
  }));
});
