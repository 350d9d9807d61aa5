// Small helpers for hostile.test.mjs: start `halo serve --port 0` (the port is
// read from the "ready at" line), raw-socket exchanges for HTTP framing
// attacks, and the two "still serving?" checks every hostile case ends with.
import { spawn, spawnSync } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { performance } from 'node:perf_hooks';

import { HALO } from './lib.mjs';
import { scaled } from './util.mjs';

export const MODEL = 'pkgchat-5m';
export { scaled } from './util.mjs';
// /health latency bounds, in ms beyond a control: each probe of halo is paired
// with one of a trivial HTTP server in this process (controlUrl), so what the
// machine's load adds to both is taken out and what is left is halo's own wait.
export const HEALTH_MEDIAN_MS = scaled(100);  // median of the probes' excess
export const HEALTH_MAX_MS = scaled(1000);    // hard ceiling on any one probe

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

// Does `halo serve --help` list this flag?
export function serveHasFlag(flag) {
  const r = spawnSync(HALO, ['serve', '--help'], { encoding: 'utf8', timeout: 10000 });
  return `${r.stdout}${r.stderr}`.includes(flag);
}

// `halo serve --port 0 ARGS`; resolves once it printed "ready at URL/v1".
export async function startHalo(args = [], timeoutMs = 30000) {
  const proc = spawn(HALO, ['serve', '--host', '127.0.0.1', '--port', '0', '--log-level', 'warn',
    '--served-model-name', MODEL, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr = (stderr + d).slice(-20000); });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`halo serve not ready in ${scaled(timeoutMs)} ms:\n${stderr}`)),
      scaled(timeoutMs));
    proc.stdout.on('data', (d) => {
      stdout += d;
      const m = stdout.match(/ready at (http:\/\/127\.0\.0\.1:\d+)\/v1/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
    proc.on('exit', (code, signal) => {
      clearTimeout(t);
      reject(new Error(`halo serve exited (${code ?? signal}) before it was ready:\n${stderr}`));
    });
  });
  return {
    url,
    port: Number(new URL(url).port),
    proc,
    args,
    get stderr() { return stderr; },
    alive: () => proc.exitCode === null && proc.signalCode === null,
    exitInfo: () => `exit code ${proc.exitCode}, signal ${proc.signalCode}`,
    async stop(timeout = 10000) {
      if (proc.exitCode !== null || proc.signalCode !== null) return { code: proc.exitCode, signal: proc.signalCode };
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), scaled(timeout));
      const res = await exited;
      clearTimeout(t);
      return res;
    },
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
}

// POST a body (object, string or Buffer) with a timeout; never throws:
// status is a number, or 'timeout' / 'error: ...'.
export async function post(url, body, { headers = {}, timeoutMs = 5000 } = {}) {
  const payload = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const t0 = performance.now();
  try {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...headers },
      body: payload,
      signal: AbortSignal.timeout(scaled(timeoutMs)),
    });
    const text = await r.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: r.status, text, json, ms: performance.now() - t0 };
  } catch (e) {
    const status = e.name === 'TimeoutError' ? 'timeout' : `error: ${e.cause?.code ?? e.message}`;
    return { status, text: '', json: null, ms: performance.now() - t0 };
  }
}

// The control: an HTTP server in this process that answers /health at once.
// Started on first use; unref'd so it never keeps the test process alive.
let control = null;
function controlUrl() {
  control ??= new Promise((resolve) => {
    const srv = http.createServer((_, res) => res.end('{}'));
    srv.listen(0, '127.0.0.1', () => { srv.unref(); resolve(`http://127.0.0.1:${srv.address().port}`); });
  });
  return control;
}

async function getTimed(url) {
  const t0 = performance.now();
  try {
    const r = await fetch(`${url}/health`, { signal: AbortSignal.timeout(HEALTH_MAX_MS) });
    await r.arrayBuffer();
    return { status: r.status, ms: performance.now() - t0 };
  } catch (e) {
    return { status: e.name === 'TimeoutError' ? 'timeout' : 'error', ms: performance.now() - t0 };
  }
}

// One GET /health of halo and one of the control right after:
// {status, ms, excess} where excess is halo's time beyond the control's.
async function healthOnce(url) {
  const r = await getTimed(url);
  const c = await getTimed(await controlUrl());
  return { ...r, excess: r.ms - c.ms };
}

// Problems in a list of /health probes: a non-200, the median excess over
// HEALTH_MEDIAN_MS, any one probe over HEALTH_MAX_MS.
function judge(res, label) {
  const ms = res.map((r) => r.ms);
  const excess = median(res.map((r) => r.excess));
  const problems = [];
  const bad = res.filter((r) => r.status !== 200).map((r) => r.status);
  if (bad.length) problems.push(`${label}: /health answered ${bad.join(', ')}`);
  if (excess > HEALTH_MEDIAN_MS) {
    problems.push(`${label}: /health median ${excess.toFixed(0)} ms slower than the control > ` +
                  `${HEALTH_MEDIAN_MS} (${res.length} probes)`);
  }
  if (Math.max(...ms) > HEALTH_MAX_MS) problems.push(`${label}: /health max ${Math.max(...ms).toFixed(0)} ms`);
  return problems;
}

// `n` sequential /health probes, `gapMs` apart. Returns the problems found.
export async function probeHealth(url, { n = 3, gapMs = 0, label = 'health' } = {}) {
  const res = [];
  for (let i = 0; i < n; i++) {
    if (i && gapMs) await sleep(gapMs);
    res.push(await healthOnce(url));
  }
  return judge(res, label);
}

// A normal chat request must answer 200 with non-empty content.
export async function chatWorks(url) {
  const r = await post(`${url}/v1/chat/completions`, {
    model: MODEL, messages: [{ role: 'user', content: 'What is curl?' }], max_tokens: 8, temperature: 0,
  }, { timeoutMs: 15000 });
  const content = r.json?.choices?.[0]?.message?.content;
  if (r.status === 200 && typeof content === 'string' && content.length > 0) return [];
  return [`normal chat: status ${r.status}, body ${r.text.slice(0, 200)}`];
}

// (a) /health fast and (b) a normal chat works; or the server died.
export async function stillServing(server) {
  if (!server.alive()) return [`server died (${server.exitInfo()}); stderr tail:\n${server.stderr.slice(-1500)}`];
  const problems = [...await probeHealth(server.url), ...await chatWorks(server.url)];
  if (problems.length) await sleep(200);  // a crash may not have been reaped yet
  if (!server.alive()) problems.unshift(`server died (${server.exitInfo()}); stderr tail:\n${server.stderr.slice(-1500)}`);
  return problems;
}

// Runs `work()` (a promise-returning request) and probes /health while it is
// in flight: after `delayMs`, a probe every `gapMs` until the request settles
// (at least `min`, at most `max` probes). Returns {result, problems}.
export async function whileInFlight(url, work, { delayMs = 100, gapMs = 100, min = 3, max = 40 } = {}) {
  let settled = false;
  const pending = work().finally(() => { settled = true; });
  await sleep(delayMs);
  const res = [];
  for (let i = 0; i < max && (i < min || !settled); i++) {
    if (i) await sleep(gapMs);
    res.push(await healthOnce(url));
  }
  return { result: await pending, problems: judge(res, 'during the request') };
}

// Writes `payload` (string as latin1, or Buffer, or an array of them) on a
// fresh connection and collects the answer until the server closes or
// `timeoutMs` passes. {data: string (latin1), closed, statuses, error}.
export function rawExchange(port, payload, { timeoutMs = 2000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    const chunks = [];
    let closed = false;
    let error = null;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const data = Buffer.concat(chunks).toString('latin1');
      resolve({ data, closed, error, statuses: responseStatuses(data) });
    };
    const timer = setTimeout(finish, scaled(timeoutMs));
    sock.on('data', (d) => chunks.push(d));
    sock.on('end', () => { closed = true; finish(); });
    sock.on('close', () => { closed = true; finish(); });
    sock.on('error', (e) => { error = e.code ?? e.message; });
    sock.on('connect', () => {
      for (const p of [].concat(payload)) sock.write(typeof p === 'string' ? Buffer.from(p, 'latin1') : p);
    });
  });
}

// Status codes of the HTTP responses in a byte stream (100 Continue excluded).
export function responseStatuses(data) {
  return [...data.matchAll(/(?:^|\r\n)HTTP\/\d(?:\.\d)? (\d{3})/g)].map((m) => Number(m[1])).filter((s) => s !== 100);
}

// Opens `n` connections (bounded), resolves with them once all are connected.
export async function openConnections(port, n) {
  const socks = [];
  await Promise.all(Array.from({ length: n }, () => new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port }, resolve);
    s.on('error', () => resolve());
    socks.push(s);
  })));
  return socks;
}
