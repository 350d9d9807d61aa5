// Load: 1,000 concurrent streaming requests (short outputs, loopback) against
// the real server on 2 cores: every one completes without error, the server's
// resident memory stays bounded, and the figures are printed.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { metric, metrics, startServer } from './lib.mjs';
import { formatReport, runLoad } from './load.mjs';

const REQUESTS = Number(process.env.HALO_LOAD_REQUESTS || 1000);
const MAX_TOKENS = Number(process.env.HALO_LOAD_MAX_TOKENS || 8);
const RSS_LIMIT_MIB = 1024;
let server;

before(async () => {
  // A modest KV budget: 256 running x (prompt + 8 tokens) fits many times over.
  server = await startServer(['--kv-cache-memory', String(256 << 20), '--max-num-seqs', '256']);
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

test(`${REQUESTS} concurrent streaming requests`, async () => {
  const idleRss = (await import('./util.mjs')).rssKiB(server.proc.pid).rss / 1024;
  const r = await runLoad({ url: server.url, requests: REQUESTS, maxTokens: MAX_TOKENS, pid: server.proc.pid });
  console.log(`# halo serve load (${REQUESTS} streams, max_tokens ${MAX_TOKENS}, idle RSS ${idleRss.toFixed(1)} MiB)`);
  for (const line of formatReport(r).split('\n')) console.log(`# ${line}`);
  assert.deepEqual(r.errors.slice(0, 5), []);
  assert.equal(r.completed, REQUESTS);
  assert.equal(r.output_tokens, REQUESTS * MAX_TOKENS);
  assert.ok(r.hwm_rss_mib < RSS_LIMIT_MIB, `server VmHWM ${r.hwm_rss_mib} MiB`);
  // The engine publishes its gauges right after the step that ended the last
  // request, which may be a moment after the client saw the end.
  let m = await metrics(server);
  for (let i = 0; i < 40 && metric(m, 'vllm:num_requests_running') !== 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    m = await metrics(server);
  }
  assert.equal(metric(m, 'vllm:num_requests_running'), 0);
  assert.ok(metric(m, 'vllm:e2e_request_latency_seconds_count') >= REQUESTS);
});
