// 100 streaming clients, half of them drop mid-stream: the dropped requests
// are aborted (their tokens stop, their KV blocks are freed) and /metrics
// shows nothing running and no KV in use afterwards.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { metric, metrics, sleep, startServer } from './lib.mjs';
import { streamRequest } from './sse_client.mjs';

let server;

before(async () => {
  server = await startServer(['--max-num-seqs', '128']);
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

test('100 streaming clients, 50 drop mid-stream', async () => {
  const before = await metrics(server);
  const abortsBefore = metric(before, 'vllm:request_success_total', 'finished_reason="abort"') ?? 0;
  const genBefore = metric(before, 'vllm:generation_tokens_total');
  const url = `${server.url}/v1/completions`;
  const LONG = 400;
  const SHORT = 12;
  const jobs = [];
  for (let i = 0; i < 100; i++) {
    const drop = i % 2 === 0;
    const body = { prompt: `The package number ${i} is`, stream: true, ignore_eos: true, temperature: 0,
      max_tokens: drop ? LONG : SHORT, stream_options: { include_usage: true } };
    jobs.push(streamRequest(url, body, { dropAfter: drop ? 3 : 0, timeoutMs: 120000 }));
  }
  const results = await Promise.all(jobs);
  for (const [i, r] of results.entries()) {
    assert.equal(r.status, 200, `client ${i}: ${r.error}`);
    assert.equal(r.error, null, `client ${i}`);
    if (i % 2 === 0) assert.ok(r.dropped, `client ${i} should have dropped`);
    else {
      assert.ok(r.done, `client ${i} should have seen [DONE]`);
      const usage = JSON.parse(r.events.at(-1).data).usage;
      assert.equal(usage.completion_tokens, SHORT, `client ${i}: all tokens arrived`);
    }
  }
  // Bounded wait for the engine to settle.
  let m;
  for (let k = 0; k < 100; k++) {
    m = await metrics(server);
    if (metric(m, 'vllm:num_requests_running') === 0 && metric(m, 'vllm:kv_cache_usage_perc') === 0) break;
    await sleep(50);
  }
  assert.equal(metric(m, 'vllm:num_requests_running'), 0);
  assert.equal(metric(m, 'vllm:num_requests_waiting'), 0);
  assert.equal(metric(m, 'vllm:kv_cache_usage_perc'), 0);
  const aborts = metric(m, 'vllm:request_success_total', 'finished_reason="abort"') - abortsBefore;
  assert.equal(aborts, 50, 'every dropped request was aborted');
  // The dropped requests stopped long before their 400 tokens.
  const generated = metric(m, 'vllm:generation_tokens_total') - genBefore;
  assert.ok(generated < 50 * SHORT + 50 * LONG / 4, `generated ${generated} tokens`);
  // And the server still serves.
  const r = await streamRequest(url, { prompt: 'The package', stream: true, max_tokens: 4, ignore_eos: true,
    stream_options: { include_usage: true } });
  assert.ok(r.done);
  assert.equal(JSON.parse(r.events.at(-1).data).usage.completion_tokens, 4);
});
