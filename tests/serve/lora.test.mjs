// LoRA adapters on `halo serve --enable-lora`, through the official OpenAI SDK
// (an adapter is chosen by `model`) and plain HTTP:
//  - each adapter's next-token logprobs equal the independent numpy forward
//    pass with the adapter merged into the weights (tests/reference/forward.py
//    --lora: W + scale * B A), and differ from the base's;
//  - a batch mixing the base and three adapters (more than --max-loras slots)
//    gives every request exactly the tokens it gets alone;
//  - /v1/models lists adapters with their parent;
//  - adapters loaded and unloaded at run time (vLLM's routes, behind the API
//    key) while 32 streams run: no stream is lost, one running on an unloaded
//    adapter finishes on it;
//  - KServe v2 (the route or lora_task_id) and SageMaker (the adapter header
//    or LMI's adapters field) select the same adapter as OpenAI's model;
//  - bad adapters get a 400 naming the problem and the server keeps serving.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { PKGCHAT, REPO, tempDir } from './frontends_lib.mjs';
import { client, postJson, startServer } from './lib.mjs';

const PYTHON = process.env.HALO_PYTHON ?? '/usr/bin/python3';
const KEY = 'lora-test-key';
const AUTH = { Authorization: `Bearer ${KEY}` };
let tmp;
let server;  // --enable-lora, three adapters at start, runtime updates on, API key
let plain;   // no LoRA at all
let cached;  // --enable-prefix-caching with two adapters
const dirs = {};

function python(args) {
  return new Promise((resolve, reject) => {
    execFile(PYTHON, args, { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${args[0]} failed (python3-numpy?): ${stderr}`));
      else resolve(stdout);
    });
  });
}

async function makeLora(name, args, base = PKGCHAT) {
  const out = path.join(tmp.dir, name);
  await python([path.join(REPO, 'tools', 'make_test_lora.py'), '--base', base, '--out', out, ...args]);
  dirs[name] = out;
  return out;
}

// log-softmax of the reference's logits at the last prompt position.
async function referenceLogprobs(ids, lora) {
  const args = [path.join(REPO, 'tests', 'reference', 'forward.py'), PKGCHAT, '--prompt-ids', ids.join(','),
    '--steps', '1', ...(lora ? ['--lora', lora] : [])];
  const logits = JSON.parse(await python(args)).last_logits;
  const max = Math.max(...logits);
  const lse = max + Math.log(logits.reduce((s, v) => s + Math.exp(v - max), 0));
  return logits.map((v) => v - lse);
}

before(async () => {
  tmp = tempDir('halo-lora-');
  mkdirSync(tmp.dir, { recursive: true });
  await Promise.all([
    makeLora('sql', ['--rank', '8', '--alpha', '16', '--seed', '1', '--scale', '0.5']),
    makeLora('chat', ['--rank', '4', '--targets', 'all-linear', '--rslora', '--seed', '2', '--scale', '0.5']),
    makeLora('mixed', ['--rank', '8', '--targets', 'q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj',
      '--rank-pattern', 'down_proj=2', '--rank-pattern', 'k_proj=5', '--seed', '3', '--scale', '0.5']),
    makeLora('late', ['--rank', '6', '--targets', 'o_proj,up_proj', '--seed', '4', '--scale', '0.5']),
    makeLora('too_big', ['--rank', '32', '--seed', '5']),
    makeLora('wrong_shape', ['--break', 'wrong_shape', '--seed', '6']),
    makeLora('unknown_module', ['--break', 'unknown_module', '--seed', '7']),
    makeLora('pickle', ['--break', 'bin', '--seed', '8']),
    makeLora('dora', ['--break', 'dora', '--seed', '9']),
    makeLora('other_base', ['--rank', '4', '--seed', '10'], path.join(REPO, 'models', 'pkgchat-5m-draft')),
  ]);
  const started = await Promise.all([
    startServer(['--enable-lora', '--max-loras', '2', '--max-lora-rank', '16', '--lora-modules',
      `sql=${dirs.sql}`, `chat=${dirs.chat}`, `mixed=${dirs.mixed}`, '--allow-runtime-lora-updating',
      '--api-key', KEY]),
    startServer([]),
    startServer(['--enable-lora', '--max-loras', '2', '--lora-modules', `sql=${dirs.sql}`, `chat=${dirs.chat}`,
      '--enable-prefix-caching', '--block-size', '4']),
  ]).then((s) => s);
  [server, plain, cached] = started;
});

after(async () => {
  for (const s of [server, plain, cached]) {
    if (!s) continue;
    const { code } = await s.stop();
    assert.equal(code, 0, s.stderr);
  }
  tmp?.cleanup();
});

const PROMPT_IDS = [1, 306, 763, 278, 1139, 310, 3186, 2889];

test('each adapter equals the numpy reference with the adapter merged, and differs from the base', async () => {
  const c = client(server, { apiKey: KEY });
  const tok = (await postJson(`${server.url}/tokenize`, { prompt: 'x' }, AUTH)).json;
  assert.ok(tok.tokens, 'tokenize works');
  const base = await referenceLogprobs(PROMPT_IDS, null);
  for (const name of ['sql', 'chat', 'mixed']) {
    const ref = await referenceLogprobs(PROMPT_IDS, dirs[name]);
    const r = await c.completions.create({ model: name, prompt: PROMPT_IDS, max_tokens: 1, temperature: 0,
      logprobs: 5, return_tokens_as_token_ids: true });  // vLLM's field, sent as is
    assert.equal(r.model, name);
    const top = r.choices[0].logprobs.top_logprobs[0];
    let maxShift = 0;
    for (const [key, lp] of Object.entries(top)) {
      const id = Number(key.replace('token_id:', ''));
      assert.ok(Number.isInteger(id), `token ids returned: ${key}`);
      assert.ok(Math.abs(lp - ref[id]) < 0.05, `${name}: token ${id} logprob ${lp}, reference ${ref[id]}`);
      maxShift = Math.max(maxShift, Math.abs(ref[id] - base[id]));
    }
    assert.ok(maxShift > 0.2, `${name}: the adapter moves the logprobs (by ${maxShift})`);
  }
});

test('a batch of the base and three adapters gives each request what it gets alone', async () => {
  const c = client(server, { apiKey: KEY });
  const models = ['pkgchat-5m', 'sql', 'chat', 'mixed'];
  const ask = (model) => c.completions.create({ model, prompt: 'The weather today is', max_tokens: 12, temperature: 0 })
    .then((r) => r.choices[0].text);
  const alone = [];
  for (const m of models) alone.push(await ask(m));
  assert.equal(new Set(alone).size, models.length, `adapters change the output: ${JSON.stringify(alone)}`);
  for (let round = 0; round < 2; ++round) {
    const together = await Promise.all([...models, ...models].map(ask));
    assert.deepEqual(together, [...alone, ...alone]);
  }
});

test('the prefix cache keeps each adapter\'s KV apart from the base\'s and the others\'', async () => {
  const prompt = 'A long shared prefix that fills several KV blocks of four tokens each, then';
  const ask = (srv, model, key) => client(srv, { apiKey: key }).completions
    .create({ model, prompt, max_tokens: 8, temperature: 0 }).then((r) => r.choices[0].text);
  const alone = {};
  for (const m of ['pkgchat-5m', 'sql', 'chat']) alone[m] = await ask(server, m, KEY);
  // Base first, so its blocks are cached; then each adapter on the same prompt, twice.
  for (const m of ['pkgchat-5m', 'sql', 'chat', 'sql', 'pkgchat-5m', 'chat'])
    assert.equal(await ask(cached, m, 'none'), alone[m], m);
});

test('/v1/models lists the adapters with their parent', async () => {
  const c = client(server, { apiKey: KEY });
  const list = await c.models.list();
  const byId = Object.fromEntries(list.data.map((m) => [m.id, m]));
  assert.equal(byId['pkgchat-5m'].parent, null);
  for (const name of ['sql', 'chat', 'mixed']) {
    assert.equal(byId[name].parent, 'pkgchat-5m');
    assert.equal(byId[name].root, dirs[name]);
  }
  const one = await c.models.retrieve('sql');
  assert.equal(one.parent, 'pkgchat-5m');
  await assert.rejects(c.completions.create({ model: 'nope', prompt: 'x', max_tokens: 1 }), (e) => e.status === 404);
});

test('load and unload at run time under 32 streams lose no request', async () => {
  const c = client(server, { apiKey: KEY });
  const models = ['pkgchat-5m', 'sql', 'chat', 'mixed'];
  const streams = [];
  for (let i = 0; i < 32; ++i) {
    const model = models[i % 4];
    streams.push((async () => {
      const s = await c.completions.create({ model, prompt: `Story ${i}:`, max_tokens: 24, temperature: 0,
        stream: true, ignore_eos: true });
      let n = 0;
      let finish = null;
      for await (const chunk of s) {
        for (const ch of chunk.choices) {
          if (ch.text) n += 1;
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
      return { model, n, finish };
    })());
  }
  // Meanwhile: a new adapter comes and serves, and one in use goes.
  let r = await postJson(`${server.url}/v1/load_lora_adapter`, { lora_name: 'late', lora_path: dirs.late }, AUTH);
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /Success/);
  const late = await c.completions.create({ model: 'late', prompt: 'Hello', max_tokens: 4, temperature: 0 });
  assert.equal(late.choices[0].finish_reason, 'length');
  r = await postJson(`${server.url}/v1/unload_lora_adapter`, { lora_name: 'chat' }, AUTH);
  assert.equal(r.status, 200, r.text);
  const done = await Promise.all(streams);
  for (const s of done) {
    assert.equal(s.finish, 'length', JSON.stringify(s));
    assert.ok(s.n >= 1, JSON.stringify(s));
  }
  // Gone for new requests; and back again under the same name.
  await assert.rejects(c.completions.create({ model: 'chat', prompt: 'x', max_tokens: 1 }), (e) => e.status === 404);
  r = await postJson(`${server.url}/v1/unload_lora_adapter`, { lora_name: 'chat' }, AUTH);
  assert.equal(r.status, 404, r.text);
  r = await postJson(`${server.url}/v1/load_lora_adapter`, { lora_name: 'chat', lora_path: dirs.chat }, AUTH);
  assert.equal(r.status, 200, r.text);
  const again = await c.completions.create({ model: 'chat', prompt: 'x', max_tokens: 2, temperature: 0 });
  assert.equal(again.model, 'chat');
});

// Adapter files are client input: a FIFO or a device (here /dev/zero) as
// adapter_config.json or as the weights is refused at once ("not a regular
// file": the FIFO hung a preprocessing thread for ever, /dev/zero was read
// without end), and loads run on their own thread, so a completion started
// meanwhile is answered.
test('adapter files that are FIFOs or devices: 400 at once, completions unaffected', async () => {
  const bad = {};
  const make = (name, cfg, weights) => {
    const dir = path.join(tmp.dir, name);
    mkdirSync(dir, { recursive: true });
    cfg(path.join(dir, 'adapter_config.json'));
    weights(path.join(dir, 'adapter_model.safetensors'));
    bad[name] = dir;
  };
  const mkfifo = (p) => new Promise((resolve, reject) =>
    execFile('mkfifo', [p], (err) => (err ? reject(err) : resolve())));
  const copyCfg = (p) => copyFileSync(path.join(dirs.sql, 'adapter_config.json'), p);
  const copyWeights = (p) => copyFileSync(path.join(dirs.sql, 'adapter_model.safetensors'), p);
  make('zero_cfg', (p) => symlinkSync('/dev/zero', p), copyWeights);
  make('zero_weights', copyCfg, (p) => symlinkSync('/dev/zero', p));
  make('fifo_cfg', () => {}, copyWeights);
  await mkfifo(path.join(bad.fifo_cfg, 'adapter_config.json'));
  make('fifo_weights', copyCfg, () => {});
  await mkfifo(path.join(bad.fifo_weights, 'adapter_model.safetensors'));
  const c = client(server, { apiKey: KEY });
  for (const [name, dir] of Object.entries(bad)) {
    const t0 = Date.now();
    const [r, done] = await Promise.all([
      postJson(`${server.url}/v1/load_lora_adapter`, { lora_name: name, lora_path: dir }, AUTH),
      c.completions.create({ model: 'sql', prompt: 'Hello', max_tokens: 2, temperature: 0 }),
    ]);
    assert.equal(r.status, 400, `${name}: ${r.text}`);
    assert.match(r.text, /not a regular file/, name);
    assert.ok(Date.now() - t0 < 20000, `${name}: ${Date.now() - t0} ms`);
    assert.equal(done.choices[0].finish_reason, 'length');
  }
});

test('KServe v2 (route, lora_task_id) and SageMaker (header, adapters field) pick the same adapter', async () => {
  const prompt = 'Deploy the package with';
  const c = client(server, { apiKey: KEY });
  const openai = (await c.completions.create({ model: 'sql', prompt, max_tokens: 8, temperature: 0 })).choices[0].text;
  const base = (await c.completions.create({ model: 'pkgchat-5m', prompt, max_tokens: 8, temperature: 0 })).choices[0].text;
  assert.notEqual(openai, base);
  const params = { max_tokens: 8, temperature: 0, exclude_input_in_output: true };
  let r = await postJson(`${server.url}/v2/models/sql/generate`, { text_input: prompt, parameters: params }, AUTH);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.text_output, openai);
  const id = (await c.models.retrieve('sql')).lora_int_id;
  assert.ok(Number.isInteger(id) && id > 0, `lora_int_id ${id}`);
  r = await postJson(`${server.url}/v2/models/pkgchat-5m/generate`,
    { text_input: prompt, parameters: { ...params, lora_task_id: id } }, AUTH);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.text_output, openai);
  r = await postJson(`${server.url}/v2/models/pkgchat-5m/generate`,
    { text_input: prompt, parameters: { ...params, lora_task_id: 999 } }, AUTH);
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /lora_task_id/);
  r = await postJson(`${server.url}/v2/models/pkgchat-5m/generate`,
    { text_input: prompt, parameters: { ...params, lora_weights: [[1, 2]] } }, AUTH);
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /load_lora_adapter/);

  const lmi = { inputs: prompt, parameters: { max_new_tokens: 8 } };
  r = await postJson(`${server.url}/invocations`, { ...lmi, adapters: 'sql' }, AUTH);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.generated_text, openai);
  r = await postJson(`${server.url}/invocations`, lmi, { ...AUTH, 'X-Amzn-SageMaker-Adapter-Identifier': 'sql' });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.generated_text, openai);
  r = await postJson(`${server.url}/invocations`, lmi, AUTH);
  assert.equal(r.json.generated_text, base);
  r = await postJson(`${server.url}/invocations`, { ...lmi, adapters: 'nope' }, AUTH);
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /nope/);
});

test('bad adapters get a 400 naming the problem, and the server keeps serving', async () => {
  const cases = [
    ['too_big', /rank 32, above --max-lora-rank 16/],
    ['wrong_shape', /shape/],
    ['unknown_module', /not a projection of the base model/],
    ['pickle', /adapter_model\.bin/],
    ['dora', /DoRA|use_dora/],
    ['other_base', /do not fit the base/],
  ];
  for (const [name, re] of cases) {
    const r = await postJson(`${server.url}/v1/load_lora_adapter`, { lora_name: `bad_${name}`, lora_path: dirs[name] }, AUTH);
    assert.equal(r.status, 400, `${name}: ${r.text}`);
    assert.match(r.json.error.message, re, name);
  }
  let r = await postJson(`${server.url}/v1/load_lora_adapter`,
    { lora_name: 'missing', lora_path: path.join(tmp.dir, 'no-such-adapter') }, AUTH);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /no-such-adapter/);
  r = await postJson(`${server.url}/v1/load_lora_adapter`, { lora_name: 'sql', lora_path: dirs.sql }, AUTH);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /already/);
  r = await postJson(`${server.url}/v1/load_lora_adapter`, { lora_path: dirs.sql }, AUTH);
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error.message, /lora_name/);
  // Behind the API key.
  r = await postJson(`${server.url}/v1/load_lora_adapter`, { lora_name: 'k', lora_path: dirs.late });
  assert.equal(r.status, 401, r.text);
  const c = client(server, { apiKey: KEY });
  const ok = await c.completions.create({ model: 'sql', prompt: 'still here', max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('without --enable-lora an adapter cannot be named or loaded', async () => {
  let r = await postJson(`${plain.url}/v1/load_lora_adapter`, { lora_name: 'sql', lora_path: dirs.sql });
  assert.equal(r.status, 404, r.text);
  assert.match(r.json.error.message, /--allow-runtime-lora-updating/);
  r = await postJson(`${plain.url}/v1/completions`, { model: 'sql', prompt: 'x', max_tokens: 1 });
  assert.equal(r.status, 404, r.text);
});
