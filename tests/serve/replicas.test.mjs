// scripts/replicas.sh end to end: three halo replicas behind HAProxy (least
// connections, /health checks, retries only of what no replica took), with
// Prometheus scraping them, on loopback ports. The load goes through HAProxy;
// one replica is stopped with SIGTERM mid-load (nothing may fail), another is
// killed with SIGKILL mid-load (only what it was running may fail, at once and
// cleanly, and what comes after goes to the last replica); Prometheus sees the
// live replicas; `replicas.sh stop` leaves no process behind.
// Needs Debian's haproxy and prometheus packages (scripts/install-deps.sh --test);
// without them the test is skipped, saying so.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { HALO, metric, metrics, sleep } from './lib.mjs';
import {
  alive, freePortRun, haproxyView, listening, missingTools, pool, post, processesMentioning, readIfExists, runScript,
  stream, streamUsage,
} from './replicas_lib.mjs';
import { scaled, SLOWDOWN } from './util.mjs';

const SKIP = missingTools();
if (SKIP) console.log(`# replicas test skipped: ${SKIP}`);

const N = 3;
const SHUTDOWN_DELAY = 2 * SLOWDOWN;
const names = [...Array.from({ length: N }, (_, i) => `replica-${i + 1}`), 'haproxy', 'prometheus'];

describe('scripts/replicas.sh: 3 halo replicas behind HAProxy, Prometheus', { skip: SKIP || false }, () => {
  let dir;
  let ports;
  let api;
  let hasShutdownDelay;
  let stopped = false;
  let failed = false;
  const pidOf = (name) => Number(readFileSync(path.join(dir, `${name}.pid`), 'utf8'));
  const exitOf = (name) => readIfExists(path.join(dir, `${name}.exit`))?.trim() ?? null;
  const replicaUrl = (i) => `http://127.0.0.1:${ports.replicas[i]}`;
  const instance = (i) => `127.0.0.1:${ports.replicas[i]}`;
  // Runs a test body, remembering a failure (the logs are printed at the end).
  const step = (name, fn) => test(name, async () => {
    try { await fn(); } catch (e) { failed = true; throw e; }
  });

  // Every finished request of one replica, whatever its finish reason.
  const successTotal = async (i) => {
    const m = await metrics({ url: replicaUrl(i) });
    return Object.entries(m).filter(([k]) => k.startsWith('vllm:request_success_total{'))
      .reduce((sum, [, v]) => sum + v, 0);
  };
  const promQuery = async (query) => {
    const r = await fetch(`http://127.0.0.1:${ports.prometheus}/api/v1/query?query=${encodeURIComponent(query)}`);
    const body = await r.json();
    assert.equal(body.status, 'success', JSON.stringify(body));
    return body.data.result;
  };

  before(async () => {
    const base = await freePortRun(N + 3);
    ports = { replicas: [base, base + 1, base + 2], haproxy: base + 3, stats: base + 4, prometheus: base + 5 };
    api = `http://127.0.0.1:${ports.haproxy}/v1/completions`;
    dir = mkdtempSync(path.join(os.tmpdir(), 'halo-replicas-test-'));
    hasShutdownDelay = spawnSync(HALO, ['serve', '--help'], { encoding: 'utf8' }).stdout.includes('--shutdown-delay');
    if (!hasShutdownDelay) console.log('# this halo has no --shutdown-delay: HAProxy\'s retries cover the stopping replica');
    const r = await runScript([String(N), '--detach', '--dir', dir, '--halo', HALO, '--base-port', String(base),
      '--port', String(ports.haproxy), '--stats-port', String(ports.stats), '--prometheus-port', String(ports.prometheus),
      '--shutdown-delay', String(SHUTDOWN_DELAY), '--start-timeout', String(Math.ceil(60 * SLOWDOWN))],
    { timeoutMs: scaled(90000) });
    if (r.code !== 0) failed = true;
    assert.equal(r.code, 0, `replicas.sh failed:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, new RegExp(`API: +http://127.0.0.1:${ports.haproxy}/v1`));
    console.log(`# replicas.sh started ${N} replicas, HAProxy and Prometheus in ${r.seconds.toFixed(1)} s (${dir})`);
  });

  after(async () => {
    if (!dir) return;
    if (!stopped) await runScript(['stop', '--dir', dir], { timeoutMs: scaled(60000) });
    for (const name of names) {
      try { if (alive(pidOf(name))) process.kill(pidOf(name), 'SIGKILL'); } catch { /* no pid file */ }
    }
    if (failed) {
      for (const name of names) {
        const log = readIfExists(path.join(dir, `${name}.log`));
        if (log) console.log(`# --- ${name}.log (end)\n${log.split('\n').slice(-15).map((l) => `# ${l}`).join('\n')}`);
      }
    }
    if (failed) console.log(`# kept ${dir} (configs, logs)`);
    else rmSync(dir, { recursive: true, force: true });
  });

  step('a. 300 requests through HAProxy all succeed; every replica serves a share', async () => {
    const t0 = performance.now();
    const results = await pool(300, 12, (i) => post(api, { prompt: `Package number ${i}`, max_tokens: 8 }));
    const seconds = (performance.now() - t0) / 1000;
    const bad = results.filter((r) => r.status !== 200 || !r.json?.choices?.[0]?.finish_reason);
    assert.deepEqual(bad.slice(0, 3).map((r) => `${r.status} ${r.error ?? r.text.slice(0, 200)}`), []);
    const byHeader = {};
    for (const r of results) byHeader[r.replica] = (byHeader[r.replica] ?? 0) + 1;
    // The engines count a request a moment after its response has gone.
    let counts = [];
    for (let k = 0; k < 100; k++) {
      counts = await Promise.all(ports.replicas.map((_, i) => successTotal(i)));
      if (counts.reduce((a, b) => a + b, 0) >= 300) break;
      await sleep(50);
    }
    console.log(`# a. 300 requests in ${seconds.toFixed(1)} s; per replica (its /metrics): ${counts.join(', ')}`);
    assert.equal(counts.reduce((a, b) => a + b, 0), 300, `per-replica counts ${counts}`);
    for (let i = 0; i < N; i++) {
      assert.ok(counts[i] >= 30, `replica-${i + 1} served ${counts[i]} of 300 (${counts})`);
      assert.equal(byHeader[`replica-${i + 1}`], counts[i], `X-Halo-Replica counts ${JSON.stringify(byHeader)}`);
    }
  });

  step('d1. Prometheus has a vllm:num_requests_running series per replica', async () => {
    const want = ports.replicas.map((_, i) => instance(i)).sort();
    let got = [];
    let result = [];
    for (const deadline = performance.now() + scaled(15000); performance.now() < deadline; await sleep(200)) {
      result = await promQuery('vllm:num_requests_running');
      got = result.map((s) => s.metric.instance).sort();
      if (JSON.stringify(got) === JSON.stringify(want)) break;
    }
    assert.deepEqual(got, want);
    for (const s of result) {
      const i = ports.replicas.findIndex((_, k) => instance(k) === s.metric.instance);
      assert.equal(s.metric.job, 'halo');
      assert.equal(s.metric.replica, `replica-${i + 1}`);
      assert.ok(Number.isFinite(Number(s.value[1])), JSON.stringify(s));
    }
  });

  step('b. SIGTERM to replica-1 mid-load: every request succeeds, it drains and exits 0', async () => {
    const MAX_TOKENS = 64;
    const load = pool(120, 12, (i) => post(api, { prompt: `Package ${i}`, max_tokens: MAX_TOKENS, ignore_eos: true }));
    let running = 0;
    for (const deadline = performance.now() + scaled(10000); performance.now() < deadline && running < 1;) {
      running = metric(await metrics({ url: replicaUrl(0) }), 'vllm:num_requests_running') ?? 0;
      if (running < 1) await sleep(10);
    }
    assert.ok(running >= 1, 'replica-1 never had a request running');
    const pid = pidOf('replica-1');
    const tTerm = performance.now();
    process.kill(pid, 'SIGTERM');
    // HAProxy takes it out on its next health check (503).
    let tDown = null;
    let aliveAtDown = null;
    while (tDown === null && performance.now() - tTerm < scaled(10000)) {
      const view = await haproxyView(ports.stats);
      if (view['replica-1']?.startsWith('DOWN')) {
        tDown = performance.now();
        aliveAtDown = alive(pid);
      } else {
        await sleep(20);
      }
    }
    const results = await load;
    assert.ok(tDown !== null, 'HAProxy never marked replica-1 down');
    const bad = results.filter((r) => r.status !== 200 || r.json?.usage?.completion_tokens !== MAX_TOKENS ||
      r.json?.choices?.[0]?.finish_reason !== 'length');
    assert.deepEqual(bad.map((r) => `${r.replica}: ${r.status} ${r.error ?? r.text.slice(0, 200)}`), []);
    const drained = results.filter((r) => r.replica === 'replica-1' && r.t0 < tTerm && r.t1 > tTerm);
    assert.ok(drained.length >= 1, 'no request was in flight on replica-1 at the signal');
    const late = results.filter((r) => r.replica === 'replica-1' && r.t0 > tDown);
    assert.equal(late.length, 0, 'HAProxy sent requests to replica-1 after taking it out');
    if (hasShutdownDelay) {
      assert.ok(aliveAtDown, `HAProxy took replica-1 out only after it exited (--shutdown-delay ${SHUTDOWN_DELAY})`);
      assert.ok(tDown - tTerm < SHUTDOWN_DELAY * 1000,
        `HAProxy took replica-1 out ${(tDown - tTerm).toFixed(0)} ms after SIGTERM`);
    }
    let code = null;
    for (const deadline = performance.now() + scaled((SHUTDOWN_DELAY + 15) * 1000); code === null && performance.now() < deadline;) {
      code = exitOf('replica-1');
      if (code === null) await sleep(50);
    }
    assert.equal(code, '0', 'replica-1 exit status');
    assert.equal(alive(pid), false);
    console.log(`# b. ${results.length} requests ok; ${drained.length} in flight on replica-1 at SIGTERM finished; ` +
      `HAProxy took it out after ${(tDown - tTerm).toFixed(0)} ms; it exited 0`);
  });

  step('c. SIGKILL to replica-2 mid-load: only what it ran fails, at once and cleanly; later requests go to replica-3',
    async () => {
      const MAX_TOKENS = 200;
      const track = { live: new Set(), all: [] };
      const streamBody = (i) => ({ prompt: `Package ${i}`, max_tokens: MAX_TOKENS, ignore_eos: true, stream: true,
        stream_options: { include_usage: true } });
      const plainBody = (i) => ({ prompt: `Parcel ${i}`, max_tokens: MAX_TOKENS, ignore_eos: true });
      const opts = { timeoutMs: scaled(60000), track };
      const load = Promise.all([
        pool(24, 8, (i) => stream(api, streamBody(i), opts)),
        pool(12, 4, (i) => post(api, plainBody(i), opts)),
      ]).then(([streams, plain]) => [...streams, ...plain]);
      // Kill when replica-2 runs at least two streams (seen by their
      // clients) and a non-streaming request: more requests running than
      // the streams that may be there (answered by replica-2, or not answered
      // yet, or ended just now, as the engine's gauge may lag).
      const streamsMaybeOn2 = (since) => track.all.filter((r) => r.kind === 'stream' &&
        (r.replica === 'replica-2' || r.status === 0) && (r.t1 === 0 || r.t1 > since));
      const streamingOn2 = () => [...track.live].filter((r) => r.replica === 'replica-2' && r.events?.length > 0);
      let plainOn2 = 0;
      for (const deadline = performance.now() + scaled(15000); performance.now() < deadline;) {
        const t = performance.now();
        const before = streamsMaybeOn2(t - 100);
        const running = metric(await metrics({ url: replicaUrl(1) }), 'vllm:num_requests_running') ?? 0;
        plainOn2 = running - new Set([...before, ...streamsMaybeOn2(t - 100)]).size;
        if (streamingOn2().length >= 2 && plainOn2 >= 1) break;
        await sleep(5);
      }
      assert.ok(streamingOn2().length >= 2 && plainOn2 >= 1,
        'replica-2 never ran two streams and a non-streaming request at once');
      // What may be on replica-2 when it dies: what it answered, the requests
      // not answered yet, and whatever is sent until the process is gone (its
      // kernel still completes connections while the process is torn down).
      const couldBeOn2 = new Set([...track.live].filter((r) => r.replica === 'replica-2' || r.status === 0));
      const pid = pidOf('replica-2');
      const tKill = performance.now();
      process.kill(pid, 'SIGKILL');
      // Gone once its port refuses connections: a killed process's sockets
      // close last, after its memory is freed (tens of ms, sometimes more).
      while (await listening(ports.replicas[1]) && performance.now() - tKill < scaled(5000));
      const tGone = performance.now();
      assert.equal(await listening(ports.replicas[1]), false, 'replica-2\'s port still accepts connections');
      let code = null;
      while (code === null && performance.now() - tKill < scaled(5000)) {
        code = exitOf('replica-2');
        if (code === null) await sleep(5);
      }
      assert.equal(code, '137', 'replica-2 exit status (128 + SIGKILL)');
      assert.equal(alive(pid), false, 'replica-2 still alive after SIGKILL');
      let tDown = null;
      while (tDown === null && performance.now() - tKill < scaled(5000)) {
        if ((await haproxyView(ports.stats))['replica-2']?.startsWith('DOWN')) tDown = performance.now();
        else await sleep(20);
      }
      const results = await load;
      for (const r of results) if (r.t0 >= tKill && r.t0 <= tGone) couldBeOn2.add(r);
      const ok = (r) => (r.kind === 'stream'
        ? r.status === 200 && !r.error && r.done && streamUsage(r)?.completion_tokens === MAX_TOKENS
        : r.status === 200 && r.json?.usage?.completion_tokens === MAX_TOKENS);
      const failures = results.filter((r) => !ok(r));
      const show = (r) => `${r.kind} on ${r.replica}: status ${r.status} ${r.error ?? ''} ` +
        `${r.text.slice(0, 60).replaceAll('\n', ' ')} sent ${(r.t0 - tKill).toFixed(0)} ms, ` +
        `ended ${(r.t1 - tKill).toFixed(0)} ms after the kill`;
      console.log(`# c. ${failures.length} of ${results.length} requests failed (at most ${couldBeOn2.size} could be ` +
        `on replica-2); it was gone ${(tGone - tKill).toFixed(0)} ms after SIGKILL, HAProxy marked it down ` +
        `${tDown === null ? 'never' : `after ${(tDown - tKill).toFixed(0)} ms`}`);
      for (const f of failures) console.log(`#    ${show(f)}`);
      assert.ok(failures.some((f) => f.kind === 'stream'), 'the streams under way on replica-2 cannot have finished');
      // Not sent again to replica-3 (HAProxy retries only what was not taken).
      assert.ok(failures.some((f) => f.kind === 'plain'),
        'a non-streaming request running on replica-2 when it died succeeded: it was sent again');
      assert.ok(failures.length <= couldBeOn2.size, `${failures.length} failures, at most ${couldBeOn2.size} on replica-2`);
      for (const f of failures) {
        assert.equal(f.replica, 'replica-2', `a failure elsewhere: ${show(f)}`);
        assert.ok(couldBeOn2.has(f), `a failure that was not on replica-2 when it died: ${show(f)}`);
        // A clean failure: HAProxy's 502, or the stream cut; and at once, not a hang.
        assert.ok(f.status === 502 || (f.kind === 'stream' && f.status === 200 && f.error),
          `not a clean failure: ${show(f)}`);
        assert.ok(f.t1 - tKill < scaled(5000), `a failure that took long: ${show(f)}`);
      }
      const later = results.filter((r) => r.t0 > tGone);
      assert.ok(later.length >= 6, `only ${later.length} requests were sent after the kill`);
      for (const r of later) {
        assert.ok(ok(r), `a request sent after the kill failed: ${show(r)}`);
        assert.equal(r.replica, 'replica-3');
      }
      assert.ok(tDown !== null, 'HAProxy never marked replica-2 down');
    });

  step('d2. Prometheus: only the live replica reports; the others are down', async () => {
    let got = [];
    let up = {};
    const want = { [instance(0)]: '0', [instance(1)]: '0', [instance(2)]: '1' };
    for (const deadline = performance.now() + scaled(15000); performance.now() < deadline; await sleep(200)) {
      got = (await promQuery('vllm:num_requests_running')).map((s) => s.metric.instance).sort();
      up = Object.fromEntries((await promQuery('up{job="halo"}')).map((s) => [s.metric.instance, s.value[1]]));
      if (JSON.stringify(got) === JSON.stringify([instance(2)]) && JSON.stringify(up) === JSON.stringify(want)) break;
    }
    assert.deepEqual(got, [instance(2)]);
    assert.deepEqual(up, want);
  });

  step('e. replicas.sh stop stops everything, leaving no process behind', async () => {
    const pids = Object.fromEntries(names.map((n) => [n, pidOf(n)]));
    assert.ok(alive(pids['replica-3']) && alive(pids.haproxy) && alive(pids.prometheus), 'running before the stop');
    const r = await runScript(['stop', '--dir', dir], { timeoutMs: scaled(60000) });
    stopped = true;
    assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
    console.log(`# e. replicas.sh stop took ${r.seconds.toFixed(1)} s`);
    assert.ok(r.seconds < scaled(SHUTDOWN_DELAY + 10), `the stop took ${r.seconds} s`);
    for (const [name, pid] of Object.entries(pids)) assert.equal(alive(pid), false, `${name} (pid ${pid}) still runs`);
    assert.deepEqual(processesMentioning(dir), []);
    assert.deepEqual(Object.fromEntries(names.map((n) => [n, exitOf(n)])),
      { 'replica-1': '0', 'replica-2': '137', 'replica-3': '0', haproxy: '0', prometheus: '0' });
    for (const port of [...ports.replicas, ports.haproxy, ports.stats, ports.prometheus]) {
      assert.equal(await listening(port), false, `port ${port} still accepts connections`);
    }
  });
});
