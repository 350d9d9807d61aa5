// POST /v1/embeddings on `halo serve --task embed`, called with the official
// OpenAI SDK (embeddings.create, which asks for base64) and plain JSON: the
// vectors equal the independent numpy forward pass's pooling
// (tests/reference/forward.py --pool) of the same token ids, float and base64
// give the same bits, batching beside generation changes nothing, a
// sentence-transformers model directory chooses its own pooling, and bad
// requests get a 400 naming the problem while the server keeps serving.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { halo, PKGCHAT, REPO, tempDir } from './frontends_lib.mjs';
import { client, postJson, startServer } from './lib.mjs';

const PYTHON = process.env.HALO_PYTHON ?? '/usr/bin/python3';
let embed;   // --task embed, the demo model's default pooling (LAST, normalised)
let plain;   // no --task: generation only
let st;      // a copy of the demo model with sentence-transformers files (MEAN, no Normalize)
let stDir;

function reference(ids, pool, { normalize = true, model = PKGCHAT } = {}) {
  const args = [path.join(REPO, 'tests', 'reference', 'forward.py'), model, '--prompt-ids', ids.join(','),
    '--pool', pool, ...(normalize ? [] : ['--no-normalize'])];
  return new Promise((resolve, reject) => {
    execFile(PYTHON, args, { maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`forward.py failed (python3-numpy?): ${stderr}`));
      else resolve(JSON.parse(stdout).embedding);
    });
  });
}

async function tokenize(server, text, model = 'pkgchat-5m') {
  const r = await postJson(`${server.url}/tokenize`, { model, prompt: text });
  assert.equal(r.status, 200, r.text);
  return r.json.tokens;
}

function assertClose(got, ref, what) {
  assert.equal(got.length, ref.length, `${what}: length`);
  let dot = 0, worst = 0, peak = 0, ng = 0, nr = 0;
  for (let i = 0; i < ref.length; ++i) {
    dot += got[i] * ref[i];
    ng += got[i] * got[i];
    nr += ref[i] * ref[i];
    worst = Math.max(worst, Math.abs(got[i] - ref[i]));
    peak = Math.max(peak, Math.abs(ref[i]));
  }
  const cosine = dot / Math.sqrt(ng * nr);
  assert.ok(cosine > 0.9999, `${what}: cosine ${cosine}`);
  assert.ok(worst < 0.01 * peak, `${what}: max |diff| ${worst} of peak ${peak}`);
}

before(async () => {
  const t = tempDir('halo-st-');
  stDir = t;
  const model = path.join(t.dir, 'pkgchat-st');
  cpSync(PKGCHAT, model, { recursive: true });
  writeFileSync(path.join(model, 'modules.json'), JSON.stringify([
    { idx: 0, name: '0', path: '', type: 'sentence_transformers.models.Transformer' },
    { idx: 1, name: '1', path: '1_Pooling', type: 'sentence_transformers.models.Pooling' }]));
  mkdirSync(path.join(model, '1_Pooling'));
  writeFileSync(path.join(model, '1_Pooling', 'config.json'), JSON.stringify({
    word_embedding_dimension: 256, pooling_mode_cls_token: false, pooling_mode_mean_tokens: true,
    pooling_mode_max_tokens: false, pooling_mode_lasttoken: false }));
  [embed, plain, st] = await Promise.all([
    startServer(['--task', 'embed']),
    startServer([]),
    startServer([model, '--task', 'embed', '--served-model-name', 'pkgchat-st']),
  ]);
});

after(async () => {
  for (const s of [embed, plain, st]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, s.stderr);
  }
  stDir?.cleanup();
});

test('the OpenAI SDK (base64) and float JSON give the numpy reference\'s LAST pooling, same bits', async () => {
  const text = 'apt install nginx and then restart the service';
  const ids = await tokenize(embed, text);
  const ref = await reference(ids, 'LAST');
  const sdk = await client(embed).embeddings.create({ model: 'pkgchat-5m', input: text });
  assert.equal(sdk.object, 'list');
  assert.equal(sdk.model, 'pkgchat-5m');
  assert.equal(sdk.data.length, 1);
  assert.equal(sdk.data[0].object, 'embedding');
  assert.equal(sdk.usage.prompt_tokens, ids.length);
  assert.equal(sdk.usage.total_tokens, ids.length);
  assertClose(sdk.data[0].embedding, ref, 'sdk');
  const f = await postJson(`${embed.url}/v1/embeddings`, { model: 'pkgchat-5m', input: text, encoding_format: 'float' });
  assert.equal(f.status, 200, f.text);
  assert.deepEqual(Float32Array.from(f.json.data[0].embedding), Float32Array.from(sdk.data[0].embedding));
  const b = await postJson(`${embed.url}/v1/embeddings`, { input: ids, encoding_format: 'base64' });
  assert.equal(b.status, 200, b.text);
  const raw = Buffer.from(b.json.data[0].embedding, 'base64');
  const fromIds = new Float32Array(raw.buffer, raw.byteOffset, raw.length / 4);
  assert.deepEqual(Array.from(fromIds), Array.from(Float32Array.from(sdk.data[0].embedding)),
    'token ids give what the text gave');
});

test('several inputs: one vector each, in order, usage summed; token-id lists too', async () => {
  const inputs = ['apt update', 'dpkg -i package.deb', 'how do I remove a package'];
  const r = await client(embed).embeddings.create({ model: 'pkgchat-5m', input: inputs, encoding_format: 'float' });
  assert.deepEqual(r.data.map((d) => d.index), [0, 1, 2]);
  let total = 0;
  for (let i = 0; i < inputs.length; ++i) {
    const ids = await tokenize(embed, inputs[i]);
    total += ids.length;
    assertClose(r.data[i].embedding, await reference(ids, 'LAST'), inputs[i]);
  }
  assert.equal(r.usage.prompt_tokens, total);
  const lists = await client(embed).embeddings.create({ model: 'pkgchat-5m', input: [[1, 20, 30], [1, 40]] });
  assertClose(lists.data[1].embedding, await reference([1, 40], 'LAST'), '[1, 40]');
});

test('batched beside streaming generation, an embedding keeps its bits', async () => {
  const input = 'sudo apt-get install -y curl';
  const alone = await client(embed).embeddings.create({ model: 'pkgchat-5m', input });
  const gens = Array.from({ length: 4 }, (_, i) => client(embed).completions.create({
    model: 'pkgchat-5m', prompt: `apt install package${i}`, max_tokens: 48, temperature: 0, ignore_eos: true }));
  const embs = Array.from({ length: 6 }, () => client(embed).embeddings.create({ model: 'pkgchat-5m', input }));
  const [g, e] = await Promise.all([Promise.all(gens), Promise.all(embs)]);
  for (const c of g) assert.equal(c.usage.completion_tokens, 48);
  for (const x of e) assert.deepEqual(x.data[0].embedding, alone.data[0].embedding);
});

test('dimensions keeps the first values, renormalised', async () => {
  const r = await client(embed).embeddings.create({ model: 'pkgchat-5m', input: 'apt', dimensions: 8,
    encoding_format: 'float' });
  const v = r.data[0].embedding;
  assert.equal(v.length, 8);
  assert.ok(Math.abs(v.reduce((s, x) => s + x * x, 0) - 1) < 1e-5);
});

test('a sentence-transformers model directory pools as its Pooling module says (MEAN, no Normalize)', async () => {
  const text = 'apt-cache search editor';
  const ids = await tokenize(st, text, 'pkgchat-st');
  const r = await client(st).embeddings.create({ model: 'pkgchat-st', input: text });
  assertClose(r.data[0].embedding, await reference(ids, 'MEAN', { normalize: false }), 'st mean');
  const norm = Math.sqrt(r.data[0].embedding.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) > 1e-3, `not normalised (norm ${norm})`);
});

test('bad requests get a 400 naming the problem, and the server keeps serving', async () => {
  const bad = async (server, body, needle) => {
    const r = await postJson(`${server.url}/v1/embeddings`, body);
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error.message, needle);
  };
  await bad(embed, { model: 'pkgchat-5m' }, /'input' is required/);
  await bad(embed, { input: 'x', encoding_format: 'int8' }, /encoding_format/);
  await bad(embed, { input: [] }, /empty list/);
  await bad(embed, { input: [1, 99999999] }, /outside the vocabulary/);
  await bad(embed, { input: [[1, 2], 'x'] }, /token-id lists/);
  await bad(embed, { input: 'x', dimensions: 0 }, /dimensions/);
  await bad(embed, { input: Array(5000).fill(5) }, /maximum context length/);
  await bad(plain, { input: 'x' }, /--task embed/);
  const ok = await client(embed).embeddings.create({ model: 'pkgchat-5m', input: 'still here' });
  assert.equal(ok.data.length, 1);
});

test('--pooler-config is checked at start and names what it refuses', async () => {
  const r = await halo(['serve', PKGCHAT, '--task', 'embed', '--pooler-config', '{"pooling_type": "MAX"}',
    '--check-config']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr + r.stdout, /MAX/);
  const ok = await halo(['serve', PKGCHAT, '--task', 'embed', '--pooler-config', '{"pooling_type": "MEAN"}',
    '--check-config']);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout + ok.stderr, /pooler-config/);
});
