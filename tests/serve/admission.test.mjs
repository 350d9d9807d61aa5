// Admission control (429 + Retry-After instead of an unbounded queue) and
// graceful shutdown on SIGTERM (finish or abort in-flight requests, exit 0).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { metric, metrics, postJson, sleep, startServer } from './lib.mjs';
import { streamRequest } from './sse_client.mjs';

const ids = (n) => Array.from({ length: n }, (_, i) => 100 + i);

describe('admission control', () => {
  test('--max-queued-requests and --max-queued-tokens answer 429 with Retry-After', async () => {
    const server = await startServer(['--max-num-seqs', '1', '--max-queued-requests', '2',
      '--max-queued-tokens', '40']);
    try {
      const url = `${server.url}/v1/completions`;
      const controllers = [];
      const pending = [];
      const send = (prompt, n = 1) => {
        const ac = new AbortController();
        controllers.push(ac);
        const p = fetch(url, {
          method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ prompt, max_tokens: 400, ignore_eos: true, n }),
        }).catch(() => null);
        pending.push(p);
        return p;
      };
      // Engine sequences waiting, polled (bounded) until at least `k`.
      const waitForWaiting = async (k) => {
        for (let i = 0; i < 250; i++) {
          const m = await metrics(server);
          if (metric(m, 'vllm:num_requests_running') >= 1 && metric(m, 'vllm:num_requests_waiting') >= k) return;
          await sleep(20);
        }
        assert.fail(`the engine never had ${k} sequences waiting`);
      };
      // One long request (8 choices of 400 tokens, one sequence at a time)
      // holds the only running slot for seconds; its first output leaves the
      // server's queue empty.
      send(ids(4), 8);
      await waitForWaiting(7);
      send(ids(30));  // queued: 1 request, 30 tokens (admitted: within the token budget)
      await waitForWaiting(8);
      const byTokens = await postJson(url, { prompt: ids(30), max_tokens: 4 });
      assert.equal(byTokens.status, 429, byTokens.text);
      assert.equal(byTokens.json.error.type, 'RateLimitError');
      assert.equal(byTokens.json.error.code, 'rate_limit_exceeded');
      assert.match(byTokens.json.error.message, /--max-queued-tokens 40/);
      assert.ok(Number(byTokens.headers.get('retry-after')) >= 1, 'Retry-After in seconds');
      send(ids(5));  // queued: 2 requests, 35 tokens
      await waitForWaiting(9);
      const byRequests = await postJson(url, { prompt: ids(1), max_tokens: 4 });
      assert.equal(byRequests.status, 429, byRequests.text);
      assert.match(byRequests.json.error.message, /--max-queued-requests 2/);
      const retry = Number(byRequests.headers.get('retry-after'));
      assert.ok(retry >= 1 && retry <= 60, `Retry-After ${retry}`);
      // Clients give up: their requests are aborted, the queue empties, new requests get in.
      for (const ac of controllers) ac.abort();
      await Promise.all(pending);
      let ok = null;
      for (let k = 0; k < 100 && !ok; k++) {
        const r = await postJson(url, { prompt: ids(3), max_tokens: 2 });
        if (r.status === 200) ok = r;
        else await sleep(50);
      }
      assert.ok(ok, 'a request is admitted once the queue drained');
      assert.equal(ok.json.usage.completion_tokens, 2);
    } finally {
      const { code } = await server.stop();
      assert.equal(code, 0, server.stderr);
    }
  });
});

describe('graceful shutdown', () => {
  test('SIGTERM: in-flight streams end (finished or told the server is shutting down), exit 0', async () => {
    const server = await startServer(['--max-num-seqs', '2', '--shutdown-timeout', '1']);
    const url = `${server.url}/v1/completions`;
    const streams = [];
    for (let i = 0; i < 8; i++) {
      streams.push(streamRequest(url, { prompt: `Package ${i}`, stream: true, max_tokens: 480, ignore_eos: true, n: 4 },
        { timeoutMs: 30000 }));
    }
    // Wait until generation is under way.
    for (let k = 0; k < 200; k++) {
      const m = await metrics(server);
      if (metric(m, 'vllm:generation_tokens_total') > 10) break;
      await sleep(20);
    }
    const t0 = performance.now();
    server.proc.kill('SIGTERM');
    const { code, signal } = await server.exited;
    const seconds = (performance.now() - t0) / 1000;
    assert.equal(signal, null);
    assert.equal(code, 0, server.stderr);
    assert.ok(seconds < 10, `exit took ${seconds} s (shutdown timeout 1 s)`);
    const results = await Promise.all(streams);
    let aborted = 0;
    for (const r of results) {
      assert.equal(r.status, 200);
      assert.equal(r.error, null);
      assert.ok(r.done, 'every stream ends with [DONE]');
      const last = JSON.parse(r.events.at(-1).data);
      if (last.error) {
        assert.equal(last.error.code, null);  // OpenAI sends null where no code fits
        assert.match(last.error.message, /shutting down/);
        aborted++;
      } else {
        assert.ok(last.choices[0].finish_reason, JSON.stringify(last));
      }
    }
    // 8 x 4 x 480 tokens, two sequences at a time, cannot finish within the 1 s deadline.
    assert.ok(aborted > 0, 'the deadline aborted what was still running');
    assert.match(server.stderr, /SIGTERM/);
  });

  test('--shutdown-delay: readiness turns false at SIGTERM while requests are still served, then the drain', async () => {
    const server = await startServer(['--shutdown-delay', '1.5']);
    const health = async (path) => (await fetch(`${server.url}${path}`)).status;
    assert.equal(await health('/health'), 200);
    const t0 = performance.now();
    server.proc.kill('SIGTERM');
    // Readiness (what a load balancer and a Kubernetes readiness probe read) at once ...
    let ready = 200;
    for (let k = 0; k < 50 && ready === 200; k++) {
      ready = await health('/health');
      if (ready === 200) await sleep(10);
    }
    assert.equal(ready, 503, '/health turns 503 right after SIGTERM');
    const body = await (await fetch(`${server.url}/health`)).text();
    assert.match(body, /shutting down/);
    assert.equal(await health('/v2/health/ready'), 503, 'KServe readiness follows the same rule');
    // ... liveness stays, and a request sent during the delay is served.
    assert.equal(await health('/v2/health/live'), 200);
    const r = await postJson(`${server.url}/v1/completions`, { prompt: 'What is curl?', max_tokens: 4 });
    assert.equal(r.status, 200, r.text);
    assert.ok(performance.now() - t0 < 1500, 'the request above ran inside the delay');
    const { code } = await server.exited;
    assert.equal(code, 0, server.stderr);
    assert.ok(performance.now() - t0 >= 1400, 'the server waited out --shutdown-delay');
    assert.match(server.stderr, /not ready; still serving for 1.5 s/);
  });

  test('SIGINT with nothing in flight exits 0 at once', async () => {
    const server = await startServer([]);
    const t0 = performance.now();
    server.proc.kill('SIGINT');
    const { code } = await server.exited;
    assert.equal(code, 0, server.stderr);
    assert.ok(performance.now() - t0 < 5000);
  });
});
