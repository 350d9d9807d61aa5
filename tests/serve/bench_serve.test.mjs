// `halo bench serve` against a real `halo serve`: the counts add up, the
// arrival process keeps its rate and its schedule, --max-concurrency holds,
// the saved JSON matches docs/bench-serve.schema.json (checked with ajv), a
// sweep writes its chart, and the figures agree with the server's own
// /metrics (requests and tokens exactly, mean end-to-end latency within 5%).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { HALO, JS_DIR, metrics, startServer } from './lib.mjs';
import { scaled } from './util.mjs';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(JS_DIR, 'package.json'));
const Ajv = require('ajv');
const validate = new Ajv({ allErrors: true, strict: false })
  .compile(JSON.parse(readFileSync(path.join(REPO, 'docs/bench-serve.schema.json'), 'utf8')));

function bench(args, { env = {} } = {}) {
  return new Promise((resolve) => {
    const proc = spawn(HALO, ['bench', 'serve', '--no-progress', ...args], { env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    proc.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

// Runs the benchmark and returns the saved JSON, checked against the schema.
async function benchJson(server, tmp, name, args) {
  const file = path.join(tmp, `${name}.json`);
  const r = await bench(['--base-url', server.url, '--save-result', file, ...args]);
  assert.equal(r.code, 0, `bench serve failed:\n${r.stdout}\n${r.stderr}`);
  const result = JSON.parse(readFileSync(file, 'utf8'));
  assert.ok(validate(result), `schema: ${JSON.stringify(validate.errors, null, 1)}`);
  return { result, stdout: r.stdout };
}

const sum = (xs) => xs.reduce((a, b) => a + b, 0);
const model = 'pkgchat-5m';

describe('halo bench serve', () => {
  let server;
  let tmp;
  before(async () => {
    tmp = mkdtempSync(path.join(os.tmpdir(), 'halo-bench-serve-'));
    server = await startServer([]);
  });
  after(async () => {
    await server?.stop();
    rmSync(tmp, { recursive: true, force: true });
  });

  test('counts add up and agree with the server /metrics', async () => {
    const m0 = await metrics(server);
    const { result } = await benchJson(server, tmp, 'poisson', [
      '--num-prompts', '30', '--random-input-len', '40', '--random-output-len', '160', '--request-rate', '10',
      '--ignore-eos', '--seed', '7', '--save-detailed']);
    const m1 = await metrics(server);
    const d = (name, label = '') => {
      const pick = (m) => sum(Object.entries(m).filter(([k]) => k.startsWith(`${name}{`) && k.includes(label))
        .map(([, v]) => v));
      return pick(m1) - pick(m0);
    };
    const run = result.runs[0];
    assert.equal(result.model, model);
    assert.equal(run.completed, 30);
    assert.equal(run.failed, 0);
    assert.equal(run.requests.length, 30);
    // --ignore-eos: every request generates its whole length.
    for (const r of run.requests) assert.equal(r.output_tokens, 160);
    assert.equal(run.total_output_tokens, 30 * 160);
    assert.equal(run.total_input_tokens, sum(run.requests.map((r) => r.prompt_len)));
    // The server's own counters: requests, generated tokens, and prompt
    // tokens (which the bench counted with its own copy of the tokenizer).
    assert.equal(d('vllm:request_success_total'), 30);
    assert.equal(d('vllm:generation_tokens_total'), run.total_output_tokens);
    assert.equal(d('vllm:prompt_tokens_total'), run.total_input_tokens);
    // Mean end-to-end latency: the server's histogram vs the client's clock.
    // The client's interval holds the server's, so it is never shorter; it is
    // longer by the transport and by how late the client's threads are woken,
    // which a loaded machine stretches: 5% plus one scheduler period (24 ms).
    const serverE2e = 1000 * d('vllm:e2e_request_latency_seconds_sum') / d('vllm:e2e_request_latency_seconds_count');
    const e2eMsg = `mean E2E: bench ${run.e2el_ms.mean.toFixed(2)} ms, server ${serverE2e.toFixed(2)} ms`;
    assert.ok(run.e2el_ms.mean >= serverE2e - 0.5, e2eMsg);
    assert.ok(run.e2el_ms.mean - serverE2e < 0.05 * serverE2e + scaled(24), e2eMsg);
    // The client sees the first token after the server produced it.
    const serverTtft = 1000 * d('vllm:time_to_first_token_seconds_sum') / d('vllm:time_to_first_token_seconds_count');
    assert.ok(run.ttft_ms.mean >= serverTtft, `TTFT bench ${run.ttft_ms.mean} < server ${serverTtft}`);
    // Figures that follow from the records.
    assert.ok(Math.abs(run.output_throughput - run.total_output_tokens / run.duration_s) < 1e-6 * run.output_throughput);
    for (const r of run.requests) {
      assert.ok(r.ttft_ms > 0 && r.ttft_ms <= r.e2el_ms);
      assert.ok(r.itl_ms.length >= 1 && r.itl_ms.length <= 159, `${r.itl_ms.length} text events after the first`);
      assert.ok(sum(r.itl_ms) <= r.e2el_ms - r.ttft_ms + 0.01);
      assert.ok(r.generated_text.length > 0);
    }
    assert.equal(run.itl_ms.count, sum(run.requests.map((r) => r.itl_ms.length)));
    // Each request left when the arrival process said (no concurrency limit):
    // a sender that waited for responses would fall behind by a request's
    // whole latency and more with every request (30 of them at 15/s). A
    // quarter of the shortest latency measured the machine's load instead: a
    // fresh Debian root with the whole suite starting beside it sent one 58 ms
    // late, the shortest request taking 82 ms.
    const shortest = Math.min(...run.requests.map((r) => r.e2el_ms)) / 1000;
    const late = shortest + scaled(200) / 1000;
    for (const r of run.requests) assert.ok(r.sent_s - r.scheduled_s < late, JSON.stringify(r));
  });

  test('the arrival rate is the one asked for', async () => {
    // Gamma with shape 100: nearly even gaps, so the rate over 30 requests is
    // tight (coefficient of variation ~2%) and a wrong scale would show. The
    // schedule, seeded, is what the bench decided; that requests leave on it
    // is the first test's check.
    const { result } = await benchJson(server, tmp, 'steady', [
      '--num-prompts', '30', '--random-input-len', '16', '--random-output-len', '4', '--request-rate', '15',
      '--burstiness', '100', '--seed', '11']);
    const sched = result.runs[0].requests.map((r) => r.scheduled_s).sort((a, b) => a - b);
    const rate = (sched.length - 1) / (sched.at(-1) - sched[0]);
    assert.ok(Math.abs(rate - 15) / 15 < 0.1, `scheduled ${rate.toFixed(2)} req/s for 15`);
    // Poisson (shape 1): the schedule's gaps vary (coefficient of variation ~1).
    const { result: p } = await benchJson(server, tmp, 'poisson2', [
      '--num-prompts', '40', '--random-input-len', '16', '--random-output-len', '4', '--request-rate', '40',
      '--seed', '12']);
    const s = p.runs[0].requests.map((r) => r.scheduled_s);
    const gaps = s.slice(1).map((x, i) => x - s[i]);
    const mean = sum(gaps) / gaps.length;
    const cv = Math.sqrt(sum(gaps.map((g) => (g - mean) ** 2)) / gaps.length) / mean;
    assert.ok(cv > 0.5, `Poisson gaps should vary: cv ${cv.toFixed(2)}`);
  });

  test('--max-concurrency bounds the requests in flight', async () => {
    const { result } = await benchJson(server, tmp, 'conc', [
      '--num-prompts', '12', '--random-input-len', '16', '--random-output-len', '48', '--ignore-eos',
      '--max-concurrency', '2']);
    const reqs = result.runs[0].requests;
    assert.equal(result.max_concurrency, 2);
    for (const r of reqs) {
      const t = r.sent_s + 1e-4;
      const inFlight = reqs.filter((q) => q.sent_s <= t && t < q.sent_s + q.e2el_ms / 1000).length;
      assert.ok(inFlight <= 2, `${inFlight} requests in flight at ${t}`);
    }
    // With the limit, later requests wait past their (immediate) schedule.
    assert.ok(reqs.some((r) => r.sent_s > 0.005));
  });

  test('a sweep over rates writes every run and a chart', async () => {
    const { result, stdout } = await benchJson(server, tmp, 'sweep', [
      '--num-prompts', '10', '--random-input-len', '16', '--random-output-len', '16', '--request-rate', '20,inf',
      '--endpoint', '/v1/chat/completions', '--goodput', 'e2el:100000', '--goodput', 'ttft:0.001']);
    assert.deepEqual(result.runs.map((r) => r.request_rate), [20, 'inf']);
    for (const run of result.runs) {
      assert.equal(run.completed, 10);
      assert.deepEqual(run.goodput.slos, { e2el_ms: 100000, ttft_ms: 0.001 });
      assert.equal(run.goodput.good_requests, 0, 'no request has a TTFT under 1 microsecond');
    }
    // inf: every request scheduled at once.
    assert.ok(result.runs[1].requests.every((r) => r.scheduled_s === 0));
    assert.equal(result.chart, path.join(tmp, 'sweep.svg'));
    const svg = readFileSync(result.chart, 'utf8');
    assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.equal((svg.match(/<polyline /g) ?? []).length, 6, 'median and p99 of TTFT, TPOT and E2E');
    assert.match(stdout, /out tok\/s/);
  });

  test('ShareGPT and prompts files', async () => {
    const share = path.join(tmp, 'share.json');
    writeFileSync(share, JSON.stringify([
      { conversations: [{ from: 'human', value: 'What is curl and how do I install it on Debian?' },
        { from: 'gpt', value: 'curl is a command line tool for transferring data with URLs. Install it with apt.' }] },
      { conversations: [{ from: 'human', value: 'hi' }, { from: 'gpt', value: 'too short a prompt to keep' }] },
      { conversations: [{ from: 'human', value: 'Explain what a package manager does for a Linux system.' },
        { from: 'gpt', value: 'A package manager installs, upgrades and removes software and its dependencies.' }] },
    ]));
    const { result } = await benchJson(server, tmp, 'share', ['--dataset-name', 'sharegpt', '--dataset-path', share,
      '--num-prompts', '4']);
    const run = result.runs[0];
    assert.equal(run.completed, 4, 'two usable conversations, repeated to make 4');
    assert.ok(run.requests.every((r) => r.prompt_len > 4));
    const prompts = path.join(tmp, 'prompts.txt');
    writeFileSync(prompts, 'What is curl?\n\n{"prompt": "What is wget?", "output_len": 5}\n');
    const { result: p } = await benchJson(server, tmp, 'prompts', ['--dataset-name', 'prompts', '--dataset-path',
      prompts, '--num-prompts', '2', '--ignore-eos']);
    assert.deepEqual(p.runs[0].requests.map((r) => r.output_tokens), [128, 5]);
  });

  test('bad options and an unreachable server get a clear error', async () => {
    const cases = [
      [['--base-url', server.url, '--request-rate', 'fast'], /--request-rate fast: 'fast' is neither/],
      [['--base-url', server.url, '--dataset-name', 'mystery'], /--dataset-name mystery: unknown/],
      [['--base-url', server.url, '--dataset-name', 'sharegpt'], /needs --dataset-path/],
      [['--base-url', server.url, '--goodput', 'latency:5'], /--goodput latency:5/],
      [['--base-url', server.url, '--endpoint', '/v1/embeddings'], /--endpoint \/v1\/embeddings/],
      [['--base-url', 'http://127.0.0.1:1'], /GET http:\/\/127.0.0.1:1\/v1\/models/],
    ];
    for (const [args, re] of cases) {
      const r = await bench(args);
      assert.equal(r.code, 1, `${args.join(' ')}: exit ${r.code}`);
      assert.match(r.stderr, re);
    }
  });
});

describe('halo bench serve with an API key', () => {
  test('sends the key; without it the 401 is named', async () => {
    const server = await startServer(['--api-key', 'sekrit']);
    try {
      const bad = await bench(['--base-url', server.url, '--num-prompts', '2']);
      assert.equal(bad.code, 1);
      assert.match(bad.stderr, /HTTP 401/);
      const tmp = mkdtempSync(path.join(os.tmpdir(), 'halo-bench-key-'));
      const file = path.join(tmp, 'r.json');
      const ok = await bench(['--base-url', server.url, '--num-prompts', '3', '--random-input-len', '8',
        '--random-output-len', '4', '--save-result', file], { env: { OPENAI_API_KEY: 'sekrit' } });
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal(JSON.parse(readFileSync(file, 'utf8')).runs[0].completed, 3);
      assert.ok(existsSync(file));
      rmSync(tmp, { recursive: true, force: true });
    } finally {
      await server.stop();
    }
  });
});
