// Load on the gRPC frontend: 200 concurrent ModelStreamInfer calls (one
// streamed greedy request each, 32 tokens with ignore_eos, distinct prompts) on the demo
// model all end with their final response and no error; then the same 200
// requests at the same concurrency over HTTP, POST
// /v2/models/pkgchat/generate_stream (server-sent events), the reference.
// Both throughputs are printed (generated tokens/s from the servers' own
// counts: num_output_tokens with return_num_output_tokens, and requests/s);
// nothing is asserted about speed.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { PKGCHAT, REPO } from './frontends_lib.mjs';
import { freePort, JS_DIR, metric, metrics, sleep, startServer } from './lib.mjs';
import { streamRequest } from './sse_client.mjs';
import { scaled } from './util.mjs';

const require = createRequire(path.join(JS_DIR, 'package.json'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_DIR = path.join(REPO, 'proto');
const inference = grpc.loadPackageDefinition(protoLoader.loadSync(path.join(PROTO_DIR, 'grpc_service.proto'), {
  keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true, includeDirs: [PROTO_DIR],
})).inference;

const MODEL = 'pkgchat';
const REQUESTS = 200;
const MAX_TOKENS = 32;
// ignore_eos: every request generates MAX_TOKENS tokens.
const SAMPLING = { temperature: 0, max_tokens: MAX_TOKENS, ignore_eos: true };
const prompt = (i) => `The package number ${i} is`;

let server;
let client;

before(async () => {
  const grpcPort = await freePort();
  server = await startServer([PKGCHAT, '--served-model-name', MODEL, '--grpc-port', String(grpcPort),
    '--kv-cache-memory', String(256 << 20), '--max-num-seqs', '256']);
  client = new inference.GRPCInferenceService(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure());
  const deadline = Date.now() + scaled(10000);
  for (;;) {
    const live = await new Promise((resolve) => {
      client.ServerLive({}, { deadline: Date.now() + 1000 }, (err, res) => resolve(!err && res.live));
    });
    if (live) break;
    if (Date.now() > deadline) throw new Error(`gRPC ServerLive on port ${grpcPort} never answered`);
    await sleep(50);
  }
});

after(async () => {
  client?.close();
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
});

const bytesT = (name, v) => ({ name, datatype: 'BYTES', shape: [1], contents: { bytes_contents: [Buffer.from(v)] } });
const boolT = (name, v) => ({ name, datatype: 'BOOL', shape: [1], contents: { bool_contents: [v] } });

// One ModelStreamInfer call carrying one streamed request; resolves
// {error, tokens, text, final} once the call has ended.
function grpcStream(i) {
  return new Promise((resolve) => {
    const out = { error: null, tokens: 0, text: '', final: false, responses: 0 };
    const id = `load-${i}`;
    const call = client.ModelStreamInfer({ deadline: Date.now() + scaled(180000) });
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      resolve(out);
    };
    call.on('data', (m) => {
      if (m.error_message) {
        out.error = `error_message: ${m.error_message}`;
        call.end();
        return;
      }
      const r = m.infer_response;
      out.responses++;
      if (r.id !== id) out.error = out.error ?? `a response for id ${JSON.stringify(r.id)}, not ${id}`;
      if (out.final) out.error = out.error ?? 'a response after the final one';
      for (const t of r.outputs) {
        if (t.name === 'text_output') out.text += Buffer.from(t.contents.bytes_contents[0]).toString('utf8');
        if (t.name === 'num_output_tokens') out.tokens += Number((t.contents.uint_contents.length
          ? t.contents.uint_contents : t.contents.int_contents)[0]);
      }
      if (r.parameters?.triton_final_response?.bool_param) {
        out.final = true;
        call.end();  // half-close: the server then ends the call with OK
      }
    });
    call.on('error', (e) => {
      out.error = out.error ?? `gRPC ${e.code}: ${e.details}`;
      finish();
    });
    call.on('status', (s) => {
      if (s.code !== grpc.status.OK) out.error = out.error ?? `gRPC ${s.code}: ${s.details}`;
    });
    call.on('end', finish);
    call.write({
      model_name: MODEL,
      id,
      inputs: [bytesT('text_input', prompt(i)), boolT('stream', true),
        bytesT('sampling_parameters', JSON.stringify(SAMPLING)), boolT('return_num_output_tokens', true)],
    });
  });
}

// The same request over HTTP generate_stream; the last event carries
// num_output_tokens.
async function httpStream(url, i) {
  const r = await streamRequest(`${url}/v2/models/${MODEL}/generate_stream`,
    { text_input: prompt(i), stream: true, exclude_input_in_output: true, return_num_output_tokens: true,
      parameters: SAMPLING },
    { timeoutMs: scaled(180000) });
  const out = { error: r.error, tokens: 0, text: '', final: false };
  if (r.status !== 200) out.error = out.error ?? `HTTP ${r.status}`;
  for (const e of r.events) {
    let j;
    try { j = JSON.parse(e.data); } catch { out.error = out.error ?? `bad event ${e.data.slice(0, 80)}`; continue; }
    if (j.error) out.error = out.error ?? `error event: ${j.error}`;
    if (typeof j.text_output === 'string') out.text += j.text_output;
    if (j.num_output_tokens !== undefined) {
      out.tokens = j.num_output_tokens;
      out.final = true;
    }
  }
  if (!out.final && !out.error) out.error = 'no event with num_output_tokens';
  return out;
}

async function measure(run) {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: REQUESTS }, (_, i) => run(i)));
  const seconds = (performance.now() - t0) / 1000;
  const errors = results.flatMap((r, i) => (r.error ? [`request ${i}: ${r.error}`] : []));
  const tokens = results.reduce((n, r) => n + r.tokens, 0);
  return { results, errors, seconds, tokens };
}

const report = (name, m) => console.log(`grpc_load: ${name} ${REQUESTS - m.errors.length}/${REQUESTS} ok in ` +
  `${m.seconds.toFixed(2)} s: ${(m.tokens / m.seconds).toFixed(1)} generated tok/s (${m.tokens} tokens), ` +
  `${((REQUESTS - m.errors.length) / m.seconds).toFixed(1)} req/s`);

test(`${REQUESTS} concurrent gRPC streams, then the same over HTTP generate_stream`, async () => {
  const g = await measure(grpcStream);
  report('grpc ModelStreamInfer', g);
  const h = await measure((i) => httpStream(server.url, i));
  report('http generate_stream ', h);
  const same = g.results.filter((r, i) => r.text === h.results[i].text).length;
  console.log(`grpc_load: ${same}/${REQUESTS} greedy texts equal between gRPC and HTTP`);

  assert.deepEqual(g.errors.slice(0, 5), []);
  assert.ok(g.results.every((r) => r.final), 'a gRPC stream ended without its final response');
  assert.ok(g.tokens > 0);
  assert.equal(g.tokens, REQUESTS * MAX_TOKENS);
  assert.deepEqual(h.errors.slice(0, 5), []);
  assert.ok(h.tokens > 0);
  assert.equal(h.tokens, REQUESTS * MAX_TOKENS);

  // Nothing left running afterwards (the gauges follow the last step).
  let m = await metrics(server);
  for (let i = 0; i < 100 && metric(m, 'vllm:num_requests_running') !== 0; i++) {
    await sleep(50);
    m = await metrics(server);
  }
  assert.equal(metric(m, 'vllm:num_requests_running'), 0);
});
