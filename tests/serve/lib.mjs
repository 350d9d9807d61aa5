// Helpers for halo serve's end-to-end tests: start the real `halo serve` on a
// free loopback port, wait for /health, stop it with a signal, and load the
// official OpenAI Node SDK from tests/js/node_modules.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';

export const HALO = process.env.HALO_BIN;
export const JS_DIR = process.env.HALO_JS_DIR;

function need(cond, message) {
  if (!cond) throw new Error(message);
}

need(HALO && existsSync(HALO), `HALO_BIN must name the halo binary (got ${HALO}); ctest sets it`);
need(JS_DIR && existsSync(path.join(JS_DIR, 'node_modules', 'openai')),
  `the OpenAI Node SDK is missing from ${JS_DIR}/node_modules: run scripts/install-deps.sh --test ` +
  '(it runs `npm ci` in tests/js)');

const require = createRequire(path.join(JS_DIR, 'package.json'));
const openaiModule = require('openai');
export const OpenAI = openaiModule.OpenAI ?? openaiModule.default ?? openaiModule;

// The OpenAI Agents SDK (0.20) loads its MCP client when it is imported; that
// client is an optional dependency for Node.js 20 and newer, which npm leaves
// out on older Node (Debian 12 ships 18). There the SDK cannot load: its
// tests skip with this reason. With Node 20+ a missing client is a failure.
function agentsSdkSkip() {
  const major = Number(process.versions.node.split('.')[0]);
  if (major >= 20) return false;
  try {
    require.resolve('@modelcontextprotocol/client');
    return false;
  } catch {
    return `the OpenAI Agents SDK needs Node.js 20 or newer (its MCP client is not installed on Node ${process.versions.node})`;
  }
}
export const AGENTS_SDK_SKIP = agentsSdkSkip();

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `halo serve` with extra flags; resolves once /health answers 200.
export async function startServer(args = [], { env = {}, timeoutMs = 60000 } = {}) {
  const port = await freePort();
  // A model repository turns gRPC on at 8001 (as Triton): any free port instead,
  // so that servers of parallel tests do not collide.
  if (args.includes('--model-repository') && !args.includes('--grpc-port') && !args.includes('--no-grpc'))
    args = [...args, '--grpc-port', '0'];
  const proc = spawn(HALO, ['serve', '--host', '127.0.0.1', '--port', String(port), '--log-level', 'warn', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => { stdout += d; });
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + timeoutMs;
  let healthy = false;
  while (Date.now() < deadline && proc.exitCode === null) {
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) { healthy = true; break; }
    } catch { /* not listening yet */ }
    await sleep(50);
  }
  if (!healthy) {
    proc.kill('SIGKILL');
    throw new Error(`halo serve did not become healthy on ${url} (exit ${proc.exitCode}):\n${stderr}`);
  }
  const server = {
    url,
    port,
    proc,
    get stdout() { return stdout; },
    get stderr() { return stderr; },
    exited,
    // SIGTERM and wait (bounded) for the exit; returns {code, signal}.
    async stop(timeout = 30000) {
      if (proc.exitCode !== null) return { code: proc.exitCode, signal: null };
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), timeout);
      const res = await exited;
      clearTimeout(t);
      return res;
    },
  };
  return server;
}

export function client(server, opts = {}) {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: opts.apiKey ?? 'none', maxRetries: 0, timeout: 60000 });
}

export async function postJson(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, json };
}

// Prometheus text -> {"name{labels}": value}
export async function metrics(server) {
  const r = await fetch(`${server.url}/metrics`);
  const text = await r.text();
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.lastIndexOf(' ');
    out[line.slice(0, i)] = Number(line.slice(i + 1));
  }
  return out;
}

export function metric(m, name, extraLabel = '') {
  for (const [k, v] of Object.entries(m)) {
    if (k.startsWith(`${name}{`) && (!extraLabel || k.includes(extraLabel))) return v;
  }
  return undefined;
}

export { percentile, rssKiB } from './util.mjs';
