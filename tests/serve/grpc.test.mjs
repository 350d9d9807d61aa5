// The KServe v2 / Triton gRPC frontend (`halo serve --grpc-port`, service
// inference.GRPCInferenceService from proto/grpc_service.proto) driven by the
// official gRPC Node client (@grpc/grpc-js with @grpc/proto-loader reading
// the repository's .proto files):
//  - the metadata RPCs (live, ready, server and model metadata, model
//    config, repository index) and the model statistics;
//  - ModelInfer with the vLLM backend's tensors, in typed contents and in
//    raw_input_contents (answered in the same form), whose text equals the
//    HTTP frontend's POST /v2/models/pkgchat/generate for the same greedy
//    request (the reference: an independent frontend path);
//  - ModelStreamInfer: the pieces of a streamed request add up to the HTTP
//    greedy text, only the last is flagged triton_final_response, several
//    requests in flight on one stream keep their ids apart, and a failed
//    request answers with error_message while the stream goes on;
//  - TensorRT-LLM's ensemble tensors (max_tokens INT32, temperature FP32,
//    top_k INT32, random_seed UINT64/INT64, stop_words, end_id) give the
//    text HTTP generate gives for {max_tokens, temperature, top_k, seed, stop};
//  - return_finish_reason / return_num_output_tokens / return_num_input_tokens;
//  - a cancelled stream frees its generation (/metrics: nothing running, no
//    KV in use);
//  - bad tensors and unknown models with their gRPC status codes, the API
//    key as `authorization: Bearer` metadata, and the server serving on.
//  - a burst past --max-queued-requests: RESOURCE_EXHAUSTED for the refused;
//    SIGTERM with a stream in flight: its final piece, then exit 0.
// The demo model (512-token context) served as pkgchat.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { PKGCHAT, REPO } from './frontends_lib.mjs';
import { freePort, JS_DIR, metric, metrics, postJson, sleep, startServer } from './lib.mjs';
import { scaled } from './util.mjs';

const require = createRequire(path.join(JS_DIR, 'package.json'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.join(REPO, 'proto');
const inference = grpc.loadPackageDefinition(protoLoader.loadSync(path.join(PROTO_DIR, 'grpc_service.proto'), {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true, includeDirs: [PROTO_DIR],
})).inference;

const MODEL = 'pkgchat';
const KEY = 'sk-grpc-test';
const Status = grpc.status;

// ---- the client side of the protocol ----------------------------------------

// A gRPC client for `halo serve ... --grpc-port port`, once ServerLive answers.
async function connect(port) {
  const c = new inference.GRPCInferenceService(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const deadline = Date.now() + scaled(10000);
  for (;;) {
    try {
      const r = await call(c, 'ServerLive', {}, { timeoutMs: 1000 });
      if (r.live) return c;
    } catch (e) {
      if (Date.now() > deadline) throw new Error(`gRPC ServerLive on port ${port} never answered: ${e.message}`);
    }
    await sleep(50);
  }
}

// A unary call; rejects with the ServiceError (its .code is the gRPC status).
function call(client, method, request, { metadata = new grpc.Metadata(), timeoutMs = scaled(60000) } = {}) {
  return new Promise((resolve, reject) => {
    client[method](request, metadata, { deadline: Date.now() + timeoutMs }, (err, res) => {
      if (err) reject(err);
      else resolve(res);
    });
  });
}

const bearer = (key) => {
  const m = new grpc.Metadata();
  m.set('authorization', `Bearer ${key}`);
  return m;
};

// Input tensors with typed contents.
const bytesT = (name, ...values) => ({ name, datatype: 'BYTES', shape: [values.length],
  contents: { bytes_contents: values.map((v) => Buffer.from(v)) } });
const boolT = (name, v) => ({ name, datatype: 'BOOL', shape: [1], contents: { bool_contents: [v] } });
const int32T = (name, v) => ({ name, datatype: 'INT32', shape: [1], contents: { int_contents: [v] } });
const fp32T = (name, v) => ({ name, datatype: 'FP32', shape: [1], contents: { fp32_contents: [v] } });
const uint64T = (name, v) => ({ name, datatype: 'UINT64', shape: [1], contents: { uint64_contents: [v] } });
const int64T = (name, v) => ({ name, datatype: 'INT64', shape: [1], contents: { int64_contents: [v] } });

// The vLLM backend's request: text_input, stream, sampling_parameters (JSON)
// and the optional BOOL switches in `flags`.
function vllmRequest(prompt, sampling, { stream = false, id = '', flags = {} } = {}) {
  const inputs = [bytesT('text_input', prompt), boolT('stream', stream),
    bytesT('sampling_parameters', JSON.stringify(sampling))];
  for (const [k, v] of Object.entries(flags)) inputs.push(boolT(k, v));
  return { model_name: MODEL, id, inputs };
}

// Little-endian fixed-size elements.
const le = (values, size, write) => Buffer.concat(values.map((v) => {
  const b = Buffer.alloc(size);
  write(b, v);
  return b;
}));

// The same request with its data moved to raw_input_contents.
function toRaw(req) {
  const raw = req.inputs.map((t) => {
    const c = t.contents;
    switch (t.datatype) {
      case 'BYTES':
        return Buffer.concat(c.bytes_contents.flatMap((b) => {
          const n = Buffer.alloc(4);
          n.writeUInt32LE(b.length);
          return [n, b];
        }));
      case 'BOOL': return Buffer.from(c.bool_contents.map((b) => (b ? 1 : 0)));
      case 'INT32': return le(c.int_contents, 4, (b, v) => b.writeInt32LE(v));
      case 'FP32': return le(c.fp32_contents, 4, (b, v) => b.writeFloatLE(v));
      case 'UINT64': return le(c.uint64_contents, 8, (b, v) => b.writeBigUInt64LE(BigInt(v)));
      case 'INT64': return le(c.int64_contents, 8, (b, v) => b.writeBigInt64LE(BigInt(v)));
      default: throw new Error(`toRaw: ${t.datatype}`);
    }
  });
  return { ...req, inputs: req.inputs.map(({ contents, ...t }) => t), raw_input_contents: raw };
}

// BYTES elements from a raw buffer (4-byte little-endian length + bytes).
function rawBytes(buf) {
  const out = [];
  for (let i = 0; i < buf.length;) {
    assert.ok(i + 4 <= buf.length, `a truncated BYTES length at ${i} of ${buf.length}`);
    const n = buf.readUInt32LE(i);
    assert.ok(i + 4 + n <= buf.length, `a BYTES element of ${n} bytes overruns ${buf.length}`);
    out.push(buf.subarray(i + 4, i + 4 + n).toString('utf8'));
    i += 4 + n;
  }
  return out;
}

// A response's outputs as {name: {datatype, shape, values}}, from typed
// contents or (when the response has raw_output_contents) from the raw bytes.
function outputs(res) {
  const raw = res.raw_output_contents ?? [];
  const out = {};
  res.outputs.forEach((t, i) => {
    let values;
    if (raw.length) {
      const b = raw[i];
      assert.ok(b, `output ${t.name} has no raw_output_contents entry`);
      const c = t.contents;
      assert.ok(!c || Object.values(c).every((v) => !v?.length),
        `output ${t.name} carries contents next to raw: ${JSON.stringify(c)}`);
      if (t.datatype === 'BYTES') values = rawBytes(b);
      else if (t.datatype === 'INT32') values = Array.from({ length: b.length / 4 }, (_, k) => b.readInt32LE(4 * k));
      else if (t.datatype === 'UINT32') values = Array.from({ length: b.length / 4 }, (_, k) => b.readUInt32LE(4 * k));
      else if (t.datatype === 'BOOL') values = [...b].map((x) => x !== 0);
      else if (t.datatype === 'FP32') values = Array.from({ length: b.length / 4 }, (_, k) => b.readFloatLE(4 * k));
      else throw new Error(`raw output ${t.name}: ${t.datatype}`);
    } else {
      const c = t.contents ?? {};
      if (t.datatype === 'BYTES') values = (c.bytes_contents ?? []).map((x) => Buffer.from(x).toString('utf8'));
      else if (t.datatype === 'INT32') values = c.int_contents;
      else if (t.datatype === 'UINT32') values = c.uint_contents;
      else if (t.datatype === 'BOOL') values = c.bool_contents;
      else if (t.datatype === 'FP32') values = c.fp32_contents;
      else values = c;
    }
    out[t.name] = { datatype: t.datatype, shape: t.shape.map(Number), values };
  });
  return out;
}

const textOf = (res) => {
  const o = outputs(res).text_output;
  assert.ok(o, `no text_output in ${JSON.stringify(res)}`);
  assert.equal(o.datatype, 'BYTES');
  assert.deepEqual(o.shape, [1]);
  assert.equal(o.values.length, 1);
  return o.values[0];
};

const isFinal = (res) => {
  const p = res.parameters?.triton_final_response;
  assert.ok(p, `no triton_final_response parameter: ${JSON.stringify(res.parameters)}`);
  assert.equal(p.parameter_choice, 'bool_param', JSON.stringify(p));
  return p.bool_param;
};

// A ModelStreamInfer call: send() requests, wait(id) for the responses of a
// request up to its final one (or its error_message).
function openStream(client, metadata = new grpc.Metadata()) {
  const s = client.ModelStreamInfer(metadata);
  const byId = new Map();
  const all = [];
  let ended = null;
  const entry = (id) => {
    if (!byId.has(id)) {
      let resolve;
      const done = new Promise((r) => { resolve = r; });
      byId.set(id, { responses: [], errors: [], done, resolve });
    }
    return byId.get(id);
  };
  const finishAll = () => { for (const e of byId.values()) e.resolve(); };
  s.on('data', (m) => {
    all.push(m);
    const r = m.infer_response;
    const e = entry(r?.id ?? '');
    if (m.error_message) {
      e.errors.push(m.error_message);
      e.resolve();
      return;
    }
    e.responses.push(r);
    if (r.parameters?.triton_final_response?.bool_param) e.resolve();
  });
  s.on('error', (err) => { ended = err; finishAll(); });
  s.on('end', () => { ended = ended ?? 'end'; finishAll(); });
  return {
    call: s,
    all,
    send(req) { entry(req.id ?? ''); s.write(req); },
    async wait(id, timeoutMs = scaled(60000)) {
      const e = entry(id);
      let t;
      const timeout = new Promise((_, rej) => {
        t = setTimeout(() => rej(new Error(`stream request ${id}: no final response in ${timeoutMs} ms`)), timeoutMs);
      });
      try { await Promise.race([e.done, timeout]); } finally { clearTimeout(t); }
      return { responses: e.responses, errors: e.errors, ended };
    },
    get ended() { return ended; },
    end() { s.end(); },
  };
}

// The HTTP frontend's answer to the same request (the reference).
async function httpGenerate(server, prompt, parameters, extra = {}) {
  const r = await postJson(`${server.url}/v2/models/${MODEL}/generate`,
    { text_input: prompt, exclude_input_in_output: true, parameters, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

async function rejectsWith(promise, code, pattern) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.code, code, `expected gRPC status ${code}, got ${e.code}: ${e.details}`);
    if (pattern) assert.match(e.details, pattern);
    return true;
  });
}

// Waits until the engine runs nothing and holds no KV; returns the last gauges.
async function waitIdle(server, timeoutMs = scaled(10000)) {
  const deadline = Date.now() + timeoutMs;
  let running;
  let kv;
  while (Date.now() < deadline) {
    const m = await metrics(server);
    running = metric(m, 'vllm:num_requests_running');
    kv = metric(m, 'vllm:kv_cache_usage_perc');
    if (running === 0 && kv === 0) break;
    await sleep(100);
  }
  return { running, kv };
}

// ---- the tests ---------------------------------------------------------------

describe('gRPC frontend on the demo model', () => {
  let server;
  let client;
  const GREEDY = { temperature: 0, max_tokens: 12 };
  const PROMPT = 'The package';

  before(async () => {
    const grpcPort = await freePort();
    server = await startServer([PKGCHAT, '--served-model-name', MODEL, '--grpc-port', String(grpcPort),
      '--kv-cache-memory', String(64 << 20)]);
    client = await connect(grpcPort);
  });
  after(async () => {
    client?.close();
    if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  });

  test('server and model metadata', async () => {
    assert.deepEqual(await call(client, 'ServerLive', {}), { live: true });
    assert.deepEqual(await call(client, 'ServerReady', {}), { ready: true });
    const sm = await call(client, 'ServerMetadata', {});
    assert.equal(sm.name, 'halo');
    assert.ok(sm.version.length > 0, JSON.stringify(sm));
    assert.ok(Array.isArray(sm.extensions), JSON.stringify(sm));
    assert.deepEqual(await call(client, 'ModelReady', { name: MODEL }), { ready: true });
    assert.deepEqual(await call(client, 'ModelReady', { name: MODEL, version: '1' }), { ready: true });

    const md = await call(client, 'ModelMetadata', { name: MODEL });
    assert.equal(md.name, MODEL);
    assert.ok(md.versions.includes('1'), JSON.stringify(md));
    const ins = Object.fromEntries(md.inputs.map((t) => [t.name, t.datatype]));
    assert.equal(ins.text_input, 'BYTES', JSON.stringify(md.inputs));
    assert.equal(ins.stream, 'BOOL');
    assert.equal(ins.sampling_parameters, 'BYTES');
    assert.equal(ins.exclude_input_in_output, 'BOOL');
    const outs = Object.fromEntries(md.outputs.map((t) => [t.name, t.datatype]));
    assert.equal(outs.text_output, 'BYTES', JSON.stringify(md.outputs));

    const { config } = await call(client, 'ModelConfig', { name: MODEL });
    assert.equal(config.name, MODEL);
    assert.equal(config.backend, 'halo');
    assert.equal(typeof config.max_batch_size, 'number');
    assert.ok(config.input.some((t) => t.name === 'text_input' && t.data_type === 'TYPE_STRING'),
      JSON.stringify(config.input));
    assert.ok(config.output.some((t) => t.name === 'text_output' && t.data_type === 'TYPE_STRING'),
      JSON.stringify(config.output));
    assert.equal(config.model_transaction_policy?.decoupled, true, JSON.stringify(config));

    const idx = await call(client, 'RepositoryIndex', {});
    assert.deepEqual(idx.models.map((m) => ({ name: m.name, version: m.version, state: m.state })),
      [{ name: MODEL, version: '1', state: 'READY' }]);

    await rejectsWith(call(client, 'ModelMetadata', { name: 'no-such-model' }), Status.NOT_FOUND);
    await rejectsWith(call(client, 'ModelConfig', { name: 'no-such-model' }), Status.NOT_FOUND);
    // A 100 KB model name: the status message (a trailer, within the client's
    // 8 KiB metadata limit) names it by its start, and the call is answered
    // (issue 42: it was never answered and the channel hung).
    const long = 'm'.repeat(100000);
    await rejectsWith(call(client, 'ModelMetadata', { name: long }, { timeoutMs: scaled(10000) }), Status.NOT_FOUND,
      /^[^]{0,300}m{100}[^]{0,1100}$/);
    await rejectsWith(call(client, 'ModelConfig', { name: long }, { timeoutMs: scaled(10000) }), Status.NOT_FOUND);
    assert.equal((await call(client, 'ServerLive', {})).live, true);
  });

  test('ModelInfer with typed contents: the HTTP generate text', async () => {
    const ref = (await httpGenerate(server, PROMPT, GREEDY)).text_output;
    assert.ok(ref.length > 0);
    const res = await call(client, 'ModelInfer', vllmRequest(PROMPT, GREEDY, { id: 'unary-1' }));
    assert.equal(res.model_name, MODEL);
    assert.equal(res.model_version, '1');
    assert.equal(res.id, 'unary-1');
    assert.deepEqual(res.raw_output_contents, []);
    assert.equal(textOf(res), PROMPT + ref);
    const ex = await call(client, 'ModelInfer',
      vllmRequest(PROMPT, GREEDY, { flags: { exclude_input_in_output: true } }));
    assert.equal(textOf(ex), ref);
    // An explicit model version.
    const v1 = await call(client, 'ModelInfer', { ...vllmRequest(PROMPT, GREEDY), model_version: '1' });
    assert.equal(textOf(v1), PROMPT + ref);
    // No request id, no response id (Triton echoes the id, empty or not).
    assert.equal(ex.id, '');
  });

  test('ModelInfer with raw_input_contents answers in raw_output_contents', async () => {
    const ref = (await httpGenerate(server, PROMPT, GREEDY)).text_output;
    const req = toRaw(vllmRequest(PROMPT, GREEDY, { id: 'raw-1', flags: { exclude_input_in_output: true } }));
    const res = await call(client, 'ModelInfer', req);
    assert.equal(res.id, 'raw-1');
    assert.equal(res.raw_output_contents.length, res.outputs.length, JSON.stringify(res));
    const t = res.outputs.find((o) => o.name === 'text_output');
    assert.equal(t.datatype, 'BYTES');
    assert.deepEqual(t.shape.map(Number), [1]);
    assert.equal(textOf(res), ref);
    const whole = await call(client, 'ModelInfer', toRaw(vllmRequest(PROMPT, GREEDY)));
    assert.equal(textOf(whole), PROMPT + ref);
  });

  test('ModelStreamInfer: the pieces add up to the HTTP greedy text, the last is final', async () => {
    const ref = (await httpGenerate(server, PROMPT, GREEDY)).text_output;
    const s = openStream(client);
    s.send(vllmRequest(PROMPT, GREEDY, { stream: true, id: 's-1' }));
    const r = await s.wait('s-1');
    assert.deepEqual(r.errors, []);
    assert.ok(r.responses.length >= 2, `${r.responses.length} responses`);
    const finals = r.responses.map(isFinal);
    assert.deepEqual(finals, [...finals.slice(0, -1).map(() => false), true]);
    for (const res of r.responses) {
      assert.equal(res.model_name, MODEL);
      assert.equal(res.id, 's-1');
    }
    // The final response may carry the last piece or an empty text_output.
    const pieces = r.responses.map((res) => (res.outputs.length ? textOf(res) : ''));
    assert.equal(pieces.join(''), ref);
    assert.ok(pieces.slice(0, -1).every((p) => p.length > 0), JSON.stringify(pieces));

    // stream=false on the stream: one whole answer, final.
    s.send(vllmRequest(PROMPT, GREEDY, { id: 's-2' }));
    const whole = await s.wait('s-2');
    assert.deepEqual(whole.errors, []);
    assert.equal(whole.responses.length, 1);
    assert.equal(isFinal(whole.responses[0]), true);
    assert.equal(textOf(whole.responses[0]), PROMPT + ref);

    // Raw input on the stream: raw pieces.
    s.send(toRaw(vllmRequest(PROMPT, GREEDY, { stream: true, id: 's-3' })));
    const raw = await s.wait('s-3');
    assert.deepEqual(raw.errors, []);
    assert.equal(raw.responses.map((res) => (res.outputs.length ? textOf(res) : '')).join(''), ref);
    s.end();
  });

  test('ModelStreamInfer: several requests in flight on one stream keep their ids apart', async () => {
    const prompts = ['The package', 'A dependency of', 'To install the', 'Version 2 of the', 'The mirror'];
    const refs = await Promise.all(prompts.map(async (p) => (await httpGenerate(server, p, GREEDY)).text_output));
    const s = openStream(client);
    prompts.forEach((p, i) => s.send(vllmRequest(p, GREEDY, { stream: true, id: `multi-${i}` })));
    // One whole (stream=false) request among them.
    s.send(vllmRequest(prompts[0], GREEDY, { id: 'multi-whole', flags: { exclude_input_in_output: true } }));
    const got = await Promise.all(prompts.map((_, i) => s.wait(`multi-${i}`)));
    const whole = await s.wait('multi-whole');
    got.forEach((r, i) => {
      assert.deepEqual(r.errors, [], `multi-${i}`);
      const finals = r.responses.map(isFinal);
      assert.equal(finals.filter(Boolean).length, 1, `multi-${i}: ${JSON.stringify(finals)}`);
      assert.equal(finals.at(-1), true);
      assert.equal(r.responses.map((res) => (res.outputs.length ? textOf(res) : '')).join(''), refs[i], `multi-${i}`);
    });
    assert.equal(whole.responses.length, 1);
    assert.equal(textOf(whole.responses[0]), refs[0]);
    // Every response on the stream belonged to one of the requests.
    const ids = new Set([...prompts.map((_, i) => `multi-${i}`), 'multi-whole']);
    for (const m of s.all) assert.ok(ids.has(m.infer_response?.id), JSON.stringify(m));
    s.end();
  });

  test('ModelStreamInfer: a half-closed stream still answers the requests in flight', async () => {
    const ref = (await httpGenerate(server, PROMPT, GREEDY)).text_output;
    const s = openStream(client);
    s.send(vllmRequest(PROMPT, GREEDY, { stream: true, id: 'hc-1' }));
    s.send(vllmRequest(PROMPT, GREEDY, { id: 'hc-2', flags: { exclude_input_in_output: true } }));
    s.end();  // as tritonclient's stop_stream(): no more requests, the answers still come
    const [a, b] = [await s.wait('hc-1'), await s.wait('hc-2')];
    assert.deepEqual([a.errors, b.errors], [[], []]);
    assert.equal(a.responses.map((res) => (res.outputs.length ? textOf(res) : '')).join(''), ref);
    assert.equal(isFinal(a.responses.at(-1)), true);
    assert.equal(b.responses.length, 1);
    assert.equal(textOf(b.responses[0]), ref);
    const deadline = Date.now() + scaled(5000);
    while (!s.ended && Date.now() < deadline) await sleep(20);
    assert.equal(s.ended, 'end', 'the call did not end with OK after the last answer');
  });

  test("TensorRT-LLM's tensors: the HTTP generate text for the same parameters", async () => {
    const prompt = 'The package';
    const http = { max_tokens: 24, temperature: 0.9, top_k: 20, seed: 11 };
    const base = (await httpGenerate(server, prompt, http)).text_output;
    assert.ok(base.length >= 6, base);
    // A stop string from the middle of the sampled text, so that it ends it.
    const at = Math.floor(base.length / 2);
    const stop = base.slice(at, at + 2);
    const ref = (await httpGenerate(server, prompt, { ...http, stop: [stop] })).text_output;
    assert.ok(ref.length < base.length, `stop ${JSON.stringify(stop)} did not end ${JSON.stringify(base)}`);

    const trt = (seedT, extra = []) => ({
      model_name: MODEL,
      id: 'trt',
      inputs: [bytesT('text_input', prompt), int32T('max_tokens', 24), bytesT('bad_words', ''),
        bytesT('stop_words', stop), int32T('end_id', 2), int32T('pad_id', 2), fp32T('temperature', 0.9),
        int32T('top_k', 20), seedT, int32T('beam_width', 1), ...extra],
    });
    const withSeed = (seedT) => trt(seedT, [boolT('exclude_input_in_output', true)]);
    const u = await call(client, 'ModelInfer', withSeed(uint64T('random_seed', 11)));
    assert.equal(textOf(u), ref);
    const i64 = await call(client, 'ModelInfer', withSeed(int64T('random_seed', 11)));
    assert.equal(textOf(i64), ref);
    // Without exclude_input_in_output: the prompt and the text, as HTTP.
    const full = await call(client, 'ModelInfer', trt(uint64T('random_seed', 11)));
    assert.equal(textOf(full), prompt + ref);
    // TensorRT-LLM's clients (end_to_end_grpc_client.py) send batch-shaped
    // tensors, [1, 1].
    const batched = withSeed(uint64T('random_seed', 11));
    batched.inputs = batched.inputs.map((t) => ({ ...t, shape: [1, ...t.shape] }));
    assert.equal(textOf(await call(client, 'ModelInfer', batched)), ref);
    // Raw, and streamed.
    const raw = await call(client, 'ModelInfer', toRaw(withSeed(uint64T('random_seed', 11))));
    assert.equal(textOf(raw), ref);
    const s = openStream(client);
    s.send(trt(uint64T('random_seed', 11), [boolT('stream', true)]));
    const r = await s.wait('trt');
    assert.deepEqual(r.errors, []);
    assert.equal(r.responses.map((res) => (res.outputs.length ? textOf(res) : '')).join(''), ref);
    assert.equal(isFinal(r.responses.at(-1)), true);
    s.end();
  });

  test('return_finish_reason, return_num_output_tokens, return_num_input_tokens', async () => {
    const sp = { temperature: 0, max_tokens: 5, ignore_eos: true };
    const flags = { exclude_input_in_output: true, return_finish_reason: true, return_num_output_tokens: true,
      return_num_input_tokens: true };
    const ref = await httpGenerate(server, PROMPT, sp,
      { return_num_input_tokens: true, return_num_output_tokens: true, return_finish_reason: true });
    assert.equal(ref.num_output_tokens, 5, JSON.stringify(ref));
    for (const raw of [false, true]) {
      const req = vllmRequest(PROMPT, sp, { flags });
      const res = await call(client, 'ModelInfer', raw ? toRaw(req) : req);
      const o = outputs(res);
      const form = raw ? 'raw' : 'typed';
      assert.equal(o.text_output.values[0], ref.text_output, form);
      assert.equal(o.finish_reason?.datatype, 'BYTES', `${form}: ${JSON.stringify(res.outputs)}`);
      assert.deepEqual(o.finish_reason.values, ['length'], form);
      assert.equal(o.num_output_tokens?.datatype, 'UINT32', `${form}: ${JSON.stringify(res.outputs)}`);
      assert.deepEqual(o.num_output_tokens.values, [5], form);
      assert.equal(o.num_input_tokens?.datatype, 'UINT32', `${form}: ${JSON.stringify(res.outputs)}`);
      assert.deepEqual(o.num_input_tokens.values, [ref.num_input_tokens], form);
    }
    // Without the switches: text_output alone.
    const plain = await call(client, 'ModelInfer', vllmRequest(PROMPT, sp));
    assert.deepEqual(plain.outputs.map((t) => t.name), ['text_output']);
    // A streamed request, as the vLLM backend answers it: every response
    // carries the asked outputs, num_output_tokens counts the tokens of that
    // response (they add up to the whole, also where a piece holds several
    // tokens, as "\n\nM" here), finish_reason is set on the last.
    const long = { temperature: 0, max_tokens: 32, ignore_eos: true };
    const prompt = 'The package number 0 is';
    const longRef = await httpGenerate(server, prompt, long, { return_num_output_tokens: true });
    assert.equal(longRef.num_output_tokens, 32, JSON.stringify(longRef));
    const s = openStream(client);
    s.send(vllmRequest(prompt, long, { stream: true, id: 'fr', flags }));
    const r = await s.wait('fr');
    assert.deepEqual(r.errors, []);
    const outs = r.responses.map(outputs);
    const dump = JSON.stringify(outs.map((o) => [o.text_output?.values[0], o.num_output_tokens?.values[0],
      o.finish_reason?.values[0]]));
    for (const o of outs) {
      assert.equal(o.num_output_tokens?.datatype, 'UINT32', dump);
      assert.equal(o.num_input_tokens?.datatype, 'UINT32', dump);
      assert.equal(o.finish_reason?.datatype, 'BYTES', dump);
    }
    assert.deepEqual(outs.at(-1).finish_reason.values, ['length'], dump);
    assert.equal(outs.map((o) => o.text_output.values[0]).join(''), longRef.text_output);
    assert.equal(outs.reduce((n, o) => n + o.num_output_tokens.values[0], 0), 32, dump);
    s.end();
  });

  test('ModelStatistics counts finished requests', async () => {
    const stats0 = (await call(client, 'ModelStatistics', { name: MODEL })).model_stats;
    assert.equal(stats0.length, 1, JSON.stringify(stats0));
    assert.equal(stats0[0].name, MODEL);
    assert.equal(stats0[0].version, '1');
    const n0 = Number(stats0[0].inference_count);
    assert.ok(n0 > 0, JSON.stringify(stats0));  // the earlier tests' requests
    await call(client, 'ModelInfer', vllmRequest(PROMPT, GREEDY));
    const s = openStream(client);
    s.send(vllmRequest(PROMPT, GREEDY, { stream: true, id: 'stat' }));
    await s.wait('stat');
    s.end();
    let n1 = n0;
    for (let i = 0; i < 40 && n1 < n0 + 2; i++) {
      n1 = Number((await call(client, 'ModelStatistics', { name: MODEL })).model_stats[0].inference_count);
      if (n1 < n0 + 2) await sleep(50);
    }
    assert.equal(n1, n0 + 2);
    const all = (await call(client, 'ModelStatistics', {})).model_stats;
    assert.deepEqual(all.map((m) => m.name), [MODEL]);
    await rejectsWith(call(client, 'ModelStatistics', { name: 'no-such-model' }), Status.NOT_FOUND);
  });

  test('cancelling a stream frees its generation', async () => {
    const s = openStream(client);
    s.send(vllmRequest(PROMPT, { temperature: 0, max_tokens: 400, ignore_eos: true }, { stream: true, id: 'long' }));
    // Wait until it is generating.
    const deadline = Date.now() + scaled(10000);
    while (s.all.length < 3 && !s.ended && Date.now() < deadline) await sleep(20);
    assert.ok(s.all.length >= 3, `${s.all.length} responses, ended: ${s.ended}`);
    assert.ok(!s.all.some((m) => m.infer_response?.parameters?.triton_final_response?.bool_param),
      'the 400-token generation ended before the cancel');
    const m = await metrics(server);
    assert.equal(metric(m, 'vllm:num_requests_running'), 1);
    s.call.cancel();
    const idle = await waitIdle(server);
    assert.deepEqual(idle, { running: 0, kv: 0 });

    // A cancelled unary call too.
    const unary = client.ModelInfer(vllmRequest(PROMPT, { temperature: 0, max_tokens: 400, ignore_eos: true }),
      () => {});
    let running = 0;
    for (let i = 0; i < 100 && running !== 1; i++) {
      await sleep(20);
      running = metric(await metrics(server), 'vllm:num_requests_running');
    }
    assert.equal(running, 1, 'the unary generation did not start');
    await sleep(100);
    unary.cancel();
    assert.deepEqual(await waitIdle(server), { running: 0, kv: 0 });
    // It serves on.
    const ref = (await httpGenerate(server, PROMPT, GREEDY)).text_output;
    assert.equal(textOf(await call(client, 'ModelInfer', vllmRequest(PROMPT, GREEDY))), PROMPT + ref);
  });

  test('bad tensors and unknown models: their status codes, and the server serves on', async () => {
    const good = vllmRequest(PROMPT, GREEDY);
    await rejectsWith(call(client, 'ModelInfer', { ...good, model_name: 'no-such-model' }), Status.NOT_FOUND);
    await rejectsWith(call(client, 'ModelInfer', { ...good, model_version: '7' }), Status.NOT_FOUND);
    const without = (name) => ({ ...good, inputs: good.inputs.filter((t) => t.name !== name) });
    await rejectsWith(call(client, 'ModelInfer', without('text_input')), Status.INVALID_ARGUMENT, /text_input/);
    const retyped = { ...good, inputs: [int32T('text_input', 7), ...good.inputs.slice(1)] };
    await rejectsWith(call(client, 'ModelInfer', retyped), Status.INVALID_ARGUMENT, /text_input/);
    const badJson = { ...good, inputs: [good.inputs[0], bytesT('sampling_parameters', '{"temperature": 0,')] };
    await rejectsWith(call(client, 'ModelInfer', badJson), Status.INVALID_ARGUMENT, /sampling_parameters/);
    await rejectsWith(call(client, 'ModelInfer', vllmRequest(PROMPT, { temperature: 0, max_tokens: 1000 })),
      Status.INVALID_ARGUMENT, /max_tokens|context/);
    await rejectsWith(call(client, 'ModelInfer',
      { model_name: MODEL, inputs: [bytesT('text_input', PROMPT), int32T('max_tokens', 1000)] }),
    Status.INVALID_ARGUMENT);
    // Contents that do not match the shape.
    const twoTexts = { ...good,
      inputs: [{ ...bytesT('text_input', PROMPT, PROMPT), shape: [1] }, ...good.inputs.slice(1)] };
    await rejectsWith(call(client, 'ModelInfer', twoTexts), Status.INVALID_ARGUMENT, /text_input/);
    // raw_input_contents that do not match the inputs.
    const raw = toRaw(good);
    await rejectsWith(call(client, 'ModelInfer', { ...raw, raw_input_contents: raw.raw_input_contents.slice(1) }),
      Status.INVALID_ARGUMENT);
    const truncated = [Buffer.from([200, 0, 0, 0, 65]), ...raw.raw_input_contents.slice(1)];
    await rejectsWith(call(client, 'ModelInfer', { ...raw, raw_input_contents: truncated }), Status.INVALID_ARGUMENT);

    // On a stream: error_message for the bad request, the good one after it answers.
    const s = openStream(client);
    s.send({ ...without('text_input'), id: 'bad' });
    s.send({ ...good, id: 'unknown', model_name: 'no-such-model' });
    const bad = await s.wait('bad');
    assert.equal(bad.errors.length, 1, JSON.stringify(bad));
    assert.match(bad.errors[0], /text_input/);
    const unknown = await s.wait('unknown');
    assert.equal(unknown.errors.length, 1, JSON.stringify(unknown));
    s.send({ ...vllmRequest(PROMPT, GREEDY, { stream: true }), id: 'good' });
    const ok = await s.wait('good');
    assert.deepEqual(ok.errors, []);
    assert.equal(isFinal(ok.responses.at(-1)), true);
    assert.equal(s.ended, null);
    s.end();

    const ref = (await httpGenerate(server, PROMPT, GREEDY)).text_output;
    assert.equal(textOf(await call(client, 'ModelInfer', good)), PROMPT + ref);
  });
});

describe('gRPC frontend with --api-key', () => {
  let server;
  let client;
  before(async () => {
    const grpcPort = await freePort();
    server = await startServer([PKGCHAT, '--served-model-name', MODEL, '--grpc-port', String(grpcPort),
      '--api-key', KEY, '--kv-cache-memory', String(32 << 20)]);
    client = await connect(grpcPort);
  });
  after(async () => {
    client?.close();
    if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  });

  test('authorization: Bearer KEY, else UNAUTHENTICATED', async () => {
    const req = vllmRequest('The package', { temperature: 0, max_tokens: 4 });
    await rejectsWith(call(client, 'ModelInfer', req), Status.UNAUTHENTICATED);
    await rejectsWith(call(client, 'ModelInfer', req, { metadata: bearer('sk-wrong') }), Status.UNAUTHENTICATED);
    await rejectsWith(call(client, 'ModelMetadata', { name: MODEL }), Status.UNAUTHENTICATED);
    const res = await call(client, 'ModelInfer', req, { metadata: bearer(KEY) });
    assert.ok(textOf(res).startsWith('The package'));
    // A stream without the key fails as a whole; with it, it answers.
    const bad = openStream(client);
    bad.send({ ...req, id: 'x' });
    await bad.wait('x');
    assert.equal(bad.ended?.code, Status.UNAUTHENTICATED, String(bad.ended));
    const s = openStream(client, bearer(KEY));
    s.send({ ...vllmRequest('The package', { temperature: 0, max_tokens: 4 }, { stream: true }), id: 'k' });
    const r = await s.wait('k');
    assert.deepEqual(r.errors, []);
    assert.equal(isFinal(r.responses.at(-1)), true);
    s.end();
    // The server serves on.
    assert.equal(textOf(await call(client, 'ModelInfer', req, { metadata: bearer(KEY) })), textOf(res));
  });
});

describe('gRPC frontend under overload and at shutdown', () => {
  let server;
  let client;
  before(async () => {
    const grpcPort = await freePort();
    // One request may wait: the rest of a burst is refused at admission.
    server = await startServer([PKGCHAT, '--served-model-name', MODEL, '--grpc-port', String(grpcPort),
      '--max-queued-requests', '1', '--max-num-seqs', '1']);
    client = await connect(grpcPort);
  });
  after(async () => {
    client?.close();
    if (server) await server.stop();
  });

  test('a burst past --max-queued-requests: RESOURCE_EXHAUSTED for some, answers for the rest', async () => {
    const req = vllmRequest('The package', { temperature: 0, max_tokens: 64, ignore_eos: true });
    const results = await Promise.allSettled(Array.from({ length: 12 }, () => call(client, 'ModelInfer', req)));
    const refused = results.filter((r) => r.status === 'rejected');
    const answered = results.filter((r) => r.status === 'fulfilled');
    assert.ok(refused.length > 0, 'nothing was refused');
    assert.ok(answered.length > 0, 'nothing was answered');
    for (const r of refused) assert.equal(r.reason.code, Status.RESOURCE_EXHAUSTED, r.reason.details);
    assert.equal(textOf(answered[0].value), textOf(answered.at(-1).value));
  });

  test('SIGTERM drains: a stream in flight gets its final piece, then the server exits 0', async () => {
    const s = openStream(client);
    s.send(vllmRequest('The package', { temperature: 0, max_tokens: 48, ignore_eos: true },
      { stream: true, id: 'drain' }));
    // Wait for the first piece, then ask the server to stop.
    const deadline = Date.now() + scaled(10000);
    while (!s.all.length && Date.now() < deadline) await sleep(10);
    assert.ok(s.all.length > 0, 'no piece arrived');
    const stopped = server.stop();
    const r = await s.wait('drain');
    assert.deepEqual(r.errors, []);
    assert.equal(isFinal(r.responses.at(-1)), true);
    assert.equal((await stopped).code, 0, server.stderr);
    server = null;
  });
});
