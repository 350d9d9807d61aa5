// Helpers for replicas.test.mjs: run scripts/replicas.sh (halo replicas behind
// HAProxy, Prometheus scraping them) and watch requests and processes from
// outside: which replica answered (X-Halo-Replica), when, and how it ended.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { streamRequest } from './sse_client.mjs';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SCRIPT = path.join(REPO, 'scripts', 'replicas.sh');

// Why the test cannot run here, or '' (the Debian packages it needs; as
// replicas.sh, it looks in PATH, then in /usr/sbin where Debian puts haproxy).
export function missingTools() {
  const missing = ['haproxy', 'prometheus', 'curl'].filter(
    (tool) => spawnSync('sh', ['-c', `command -v ${tool} || test -x /usr/sbin/${tool}`], { stdio: 'ignore' }).status !== 0);
  return missing.length ? `not installed: ${missing.join(', ')} (Debian packages; apt-get install ${missing.join(' ')})` : '';
}

function portFree(port) {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

// The first of `n` consecutive free loopback ports, below Linux's ephemeral
// range (32768..) so that outgoing connections do not take them meanwhile.
export async function freePortRun(n) {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20000 + Math.floor(Math.random() * (32000 - 20000 - n));
    let ok = true;
    for (let p = base; p < base + n && ok; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports`);
}

// Runs `scripts/replicas.sh ARGS`; resolves {code, stdout, stderr, seconds}.
export function runScript(args, { timeoutMs }) {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const proc = spawn('bash', [SCRIPT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    // Too long: SIGTERM (it then stops what it started), SIGKILL if that hangs too.
    let kill;
    const timer = setTimeout(() => {
      stderr += `\n(test: replicas.sh stopped after ${timeoutMs} ms)`;
      proc.kill('SIGTERM');
      kill = setTimeout(() => proc.kill('SIGKILL'), 60000);
    }, timeoutMs);
    // 'close': the output is complete (the processes it starts do not hold it).
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      clearTimeout(kill);
      resolve({ code, signal, stdout, stderr, seconds: (performance.now() - t0) / 1000 });
    });
  });
}

// A process's (or `PID/task/TID`'s) state letter (R, S, Z, ...), or null once it is gone.
export function procState(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  } catch {
    return null;
  }
}

// Whether any thread of process `pid` still runs. (After SIGKILL the main
// thread is a zombie before the others are gone, and the process's sockets
// close only with the last one.)
export function alive(pid) {
  let tids;
  try { tids = readdirSync(`/proc/${pid}/task`); } catch { return false; }
  return tids.some((tid) => {
    const s = procState(`${pid}/task/${tid}`);
    return s !== null && s !== 'Z';
  });
}

// Whether something accepts connections on a loopback port.
export function listening(port) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
    s.on('error', () => resolve(false));
  });
}

// Processes whose command line mentions `text` (e.g. the state directory:
// the supervisors, HAProxy and Prometheus name files in it).
export function processesMentioning(text) {
  const found = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    let cmd;
    try { cmd = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' '); } catch { continue; }
    if (cmd.includes(text) && alive(Number(entry))) found.push(`${entry}: ${cmd}`);
  }
  return found;
}

export function readIfExists(file) {
  return existsSync(file) ? readFileSync(file, 'utf8') : null;
}

// HAProxy's view of its servers: {"replica-1": "UP", ...}.
export async function haproxyView(statsPort) {
  const r = await fetch(`http://127.0.0.1:${statsPort}/stats;csv`);
  const view = {};
  for (const line of (await r.text()).split('\n')) {
    const f = line.split(',');
    if (f[0] === 'replicas' && f[1].startsWith('replica-')) view[f[1]] = f[17];
  }
  return view;
}

// Runs `count` jobs `concurrency` at a time; job(i) returns its result.
export async function pool(count, concurrency, job) {
  const results = new Array(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const i = next++;
      results[i] = await job(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(count, concurrency) }, worker));
  return results;
}

// A non-streaming POST: {kind: 'plain', status, replica, json, text, t0, t1,
// error}. `track` ({live: Set, all: Array}) holds it in `live` while it runs
// and in `all` from the start.
export async function post(url, body, { track, timeoutMs = 120000 } = {}) {
  const out = { kind: 'plain', status: 0, replica: null, json: null, text: '', t0: performance.now(), t1: 0, error: null };
  track?.live.add(out);
  track?.all.push(out);
  try {
    const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs) });
    out.status = r.status;
    out.replica = r.headers.get('x-halo-replica');
    out.text = await r.text();
    try { out.json = JSON.parse(out.text); } catch { /* not JSON */ }
  } catch (e) {
    out.error = String(e.cause ?? e);
  }
  out.t1 = performance.now();
  track?.live.delete(out);
  return out;
}

// A streaming POST on a connection of its own (sse_client.mjs), filled in
// place while it runs: {kind: 'stream', replica (from the first response
// header), status, headers, events: [{t, data}], done, error, t0, tHeaders,
// t1, text}; a stream that ends or is cut before [DONE] has an error.
// `track` as for post().
export async function stream(url, body, { timeoutMs, track } = {}) {
  const out = { kind: 'stream' };
  Object.defineProperty(out, 'replica', { enumerable: true, get() { return this.headers?.['x-halo-replica'] ?? null; } });
  track?.live.add(out);
  track?.all.push(out);
  await streamRequest(url, body, { timeoutMs, into: out });
  if (!out.error && out.status === 200 && !out.done) out.error = 'the stream ended without [DONE]';
  track?.live.delete(out);
  return out;
}

// A stream's usage (include_usage), or null.
export function streamUsage(r) {
  try { return JSON.parse(r.events.at(-1).data).usage ?? null; } catch { return null; }
}
