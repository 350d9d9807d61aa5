// Helpers for the KServe / SageMaker / configuration tests: curl as a child
// process (the tests drive the server the way a shell user would), a second
// small model made by tools/make_test_model.py, and Triton-style
// repositories in a temporary directory.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const PKGCHAT = path.join(REPO, 'models', 'pkgchat-5m');

function run(cmd, args, { env = {}, timeoutMs = 60000 } = {}) {
  return new Promise((resolve) => {
    execFile(cmd, args, { env: { ...process.env, ...env }, timeout: timeoutMs, maxBuffer: 64 << 20 },
      (error, stdout, stderr) => resolve({ code: error ? (error.code ?? 1) : 0, stdout, stderr }));
  });
}

// curl -s; resolves {status, body} (the status from -w, after the body).
export async function curl(args, opts = {}) {
  const r = await run('curl', ['-sS', '-N', '--max-time', '60', '-w', '\n%{http_code}', ...args], opts);
  if (r.code !== 0) throw new Error(`curl ${args.join(' ')} failed (${r.code}): ${r.stderr}`);
  const i = r.stdout.lastIndexOf('\n');
  return { status: Number(r.stdout.slice(i + 1)), body: r.stdout.slice(0, i) };
}

export async function curlJson(url, body, headers = []) {
  const h = headers.flatMap((x) => ['-H', x]);
  const r = await curl(['-X', 'POST', url, '-H', 'Content-Type: application/json', ...h, '-d',
    typeof body === 'string' ? body : JSON.stringify(body)]);
  let json = null;
  try { json = JSON.parse(r.body); } catch { /* not JSON */ }
  return { ...r, json };
}

// `halo ARGS...`; resolves {code, stdout, stderr}.
export function halo(args, { env = {} } = {}) {
  return run(process.env.HALO_BIN, args, { env });
}

export function tempDir(prefix) {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

// A small random qwen3-family model in `dir`, with pkgchat's tokenizer or the
// one in the directory `tokenizer`.
export async function makeTinyModel(dir, { tokenizer } = {}) {
  const r = await run('/usr/bin/python3', [path.join(REPO, 'tools', 'make_test_model.py'), '--family', 'qwen3',
    '--out', dir, '--hidden', '64', '--layers', '2', '--heads', '4', '--kv-heads', '2', '--intermediate', '128',
    '--max-pos', '1024', '--seed', '3', ...(tokenizer ? ['--tokenizer', tokenizer] : [])]);
  if (r.code !== 0) throw new Error(`make_test_model.py failed: ${r.stderr}`);
  return dir;
}

// DIR/<name>/[config.pbtxt], DIR/<name>/1/model.json for each {name: {json, pbtxt}}.
export function writeRepository(dir, models) {
  for (const [name, m] of Object.entries(models)) {
    mkdirSync(path.join(dir, name, '1'), { recursive: true });
    writeFileSync(path.join(dir, name, '1', 'model.json'),
      typeof m.json === 'string' ? m.json : JSON.stringify(m.json, null, 2));
    if (m.pbtxt) writeFileSync(path.join(dir, name, 'config.pbtxt'), m.pbtxt);
  }
  return dir;
}

// Server-sent events -> the parsed `data:` objects.
export function sseData(text) {
  return text.split('\n\n').filter((e) => e.trim()).map((e) => {
    if (!e.startsWith('data: ')) throw new Error(`bad SSE framing: ${JSON.stringify(e.slice(0, 80))}`);
    return JSON.parse(e.slice(6));
  });
}
