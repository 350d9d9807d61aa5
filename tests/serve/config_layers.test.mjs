// Serving configuration without a device: `halo serve --check-config` prints
// every model's resolved settings with the source of each value and exits.
// Loads each example config (configs/*.yaml, configs/serving.properties,
// configs/model-repository), checks the precedence
//   CLI > --config YAML > serving.properties > environment > model defaults
// layer by layer, and that each invalid key or value is an error naming its
// source (file:line, or the environment variable).
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { halo, PKGCHAT, REPO, tempDir, writeRepository } from './frontends_lib.mjs';

const CONFIGS = path.join(REPO, 'configs');
// No SAGEMAKER_* or OPTION_* from the caller's environment.
const CLEAN = Object.fromEntries(Object.keys(process.env)
  .filter((k) => k.startsWith('SAGEMAKER_') || k.startsWith('OPTION_') || k === 'HF_MODEL_ID' || k === 'TENSOR_PARALLEL_DEGREE')
  .map((k) => [k, '']));

let tmp;
before(() => { tmp = tempDir('halo-config-'); });
after(() => tmp?.cleanup());

// A model directory: pkgchat-5m's files linked, plus `files`.
function modelDir(name, files = {}) {
  const dir = path.join(tmp.dir, name);
  mkdirSync(dir, { recursive: true });
  for (const f of readdirSync(PKGCHAT)) symlinkSync(path.join(PKGCHAT, f), path.join(dir, f));
  for (const [f, text] of Object.entries(files)) writeFileSync(path.join(dir, f), text);
  return dir;
}

async function check(args, env = {}) {
  const r = await halo(['serve', ...args, '--check-config'], { env: { ...CLEAN, ...env } });
  return r;
}

// "  key = value  (source)" of the first model.
function setting(stdout, key) {
  const m = stdout.match(new RegExp(`^  ${key} = (.*?)  \\((.*)\\)$`, 'm'));
  assert.ok(m, `no ${key} in:\n${stdout}`);
  return { value: m[1], source: m[2] };
}

async function ok(args, env) {
  const r = await check(args, env);
  assert.equal(r.code, 0, r.stderr + r.stdout);
  return r.stdout;
}

async function fails(args, env, re) {
  const r = await check(args, env);
  assert.notEqual(r.code, 0, `expected a failure:\n${r.stdout}`);
  assert.match(r.stderr, re);
  return r.stderr;
}

describe('example configs load', () => {
  for (const [file, device] of [['cpu.yaml', 'cpu'], ['rbln.yaml', 'rbln'], ['cuda.yaml', 'cuda']]) {
    test(`configs/${file}`, async () => {
      const out = await ok(['--config', path.join(CONFIGS, file)]);
      const d = setting(out, 'device');
      assert.equal(d.value, device);
      assert.match(d.source, new RegExp(`--config .*configs/${file.replace('.', '\\.')}:\\d+ key 'device'`));
    });
  }

  test('configs/rbln.yaml sets tensor parallelism, configs/cuda.yaml the GPU memory fraction', async () => {
    assert.equal(setting(await ok(['--config', path.join(CONFIGS, 'rbln.yaml')]), 'tensor-parallel-size').value, '4');
    assert.equal(setting(await ok(['--config', path.join(CONFIGS, 'cuda.yaml')]), 'device-memory-utilization').value,
      '0.9');
  });

  test('configs/serving.properties', async () => {
    const dir = modelDir('props-example');
    copyFileSync(path.join(CONFIGS, 'serving.properties'), path.join(dir, 'serving.properties'));
    const out = await ok([dir]);
    const seqs = setting(out, 'max-num-seqs');
    assert.equal(seqs.value, '16');
    assert.match(seqs.source, /serving\.properties:\d+$/);
    assert.equal(setting(out, 'kv-cache-memory').value, String(64 * 1024 * 1024));
    assert.equal(setting(out, 'rolling-batch').value, 'vllm');
  });

  test('configs/model-repository', async () => {
    const out = await ok(['--model-repository', path.join(CONFIGS, 'model-repository')]);
    assert.match(out, /^model 'pkgchat' \(version 1\):$/m);
    const model = setting(out, 'model');
    assert.equal(model.value, PKGCHAT, 'relative to the model.json directory');
    assert.match(model.source, /model-repository\/pkgchat\/1\/model\.json:2 key 'model'/);
    assert.equal(setting(out, 'enable-prefix-caching').value, 'true');
  });
});

describe('precedence: CLI > YAML > serving.properties > environment > defaults', () => {
  let dir;
  let yaml;
  const env = { OPTION_MAX_ROLLING_BATCH_SIZE: '4', OPTION_BLOCK_SIZE: '32', OPTION_MAX_MODEL_LEN: '200' };
  before(() => {
    dir = modelDir('layers', { 'serving.properties': '# test\noption.max_rolling_batch_size=6\noption.max_model_len=300\n' });
    yaml = path.join(tmp.dir, 'layers.yaml');
    writeFileSync(yaml, '# test\ndevice: cpu\nmax-num-seqs: 8\n');
  });

  test('every layer present: each key from the highest layer that sets it', async () => {
    const out = await ok(['--sagemaker', dir, '--config', yaml, '--max-num-seqs', '10'], env);
    assert.deepEqual(setting(out, 'max-num-seqs'), { value: '10', source: 'command line --max-num-seqs' });
    assert.match(setting(out, 'max-model-len').source, /layers\/serving\.properties:3$/);
    assert.equal(setting(out, 'max-model-len').value, '300');
    assert.deepEqual(setting(out, 'block-size'), { value: '32', source: 'environment OPTION_BLOCK_SIZE' });
    assert.match(setting(out, 'device').source, /--config .*layers\.yaml:2 key 'device'/);
    assert.deepEqual(setting(out, 'seed'), { value: '0', source: 'default' });
  });

  test('remove the command line: YAML wins', async () => {
    const s = setting(await ok(['--sagemaker', dir, '--config', yaml], env), 'max-num-seqs');
    assert.equal(s.value, '8');
    assert.match(s.source, /layers\.yaml:3 key 'max-num-seqs'/);
  });

  test('remove YAML: serving.properties wins over the environment', async () => {
    const s = setting(await ok(['--sagemaker', dir], env), 'max-num-seqs');
    assert.equal(s.value, '6');
    assert.match(s.source, /serving\.properties:2$/);
  });

  test('remove serving.properties: the environment', async () => {
    const bare = modelDir('bare');
    const out = await ok(['--sagemaker', bare], env);
    assert.deepEqual(setting(out, 'max-num-seqs'), { value: '4', source: 'environment OPTION_MAX_ROLLING_BATCH_SIZE' });
    assert.deepEqual(setting(out, 'max-model-len'), { value: '200', source: 'environment OPTION_MAX_MODEL_LEN' });
  });

  test('remove the environment: the defaults; outside SageMaker mode OPTION_* is not read', async () => {
    const bare = modelDir('bare2');
    assert.deepEqual(setting(await ok(['--sagemaker', bare]), 'max-num-seqs'), { value: "device's choice", source: 'default' });
    assert.deepEqual(setting(await ok([bare], env), 'max-num-seqs'), { value: "device's choice", source: 'default' });
  });

  test('HF_MODEL_ID names the model directory; SAGEMAKER_* turns SageMaker mode on', async () => {
    const out = await ok([], { ...env, HF_MODEL_ID: dir, SAGEMAKER_PROGRAM: 'x' });
    assert.match(out, /SageMaker mode/);
    assert.deepEqual(setting(out, 'model'), { value: dir, source: 'environment HF_MODEL_ID' });
    assert.equal(setting(out, 'max-num-seqs').value, '6', 'its serving.properties wins over the environment');
  });

  test('a repository model.json sits between the environment and YAML', async () => {
    const repo = writeRepository(path.join(tmp.dir, 'repo-layers'), {
      m: { json: { model: PKGCHAT, max_num_seqs: 5, block_size: 64 } },
    });
    const out = await ok(['--sagemaker', '--model-repository', repo, '--config', yaml], env);
    assert.equal(setting(out, 'max-num-seqs').value, '8');
    assert.equal(setting(out, 'block-size').value, '64');
    assert.equal(setting(out, 'max-model-len').value, '200');
  });

  test('--model NAME=DIR, repeated', async () => {
    const out = await ok(['--model', `a=${dir}`, '--model', `b=${PKGCHAT}`, '--max-num-seqs', '2']);
    assert.match(out, /^halo serve: 2 model\(s\)$/m);
    assert.match(out, /^model 'a' \(version 1\):$/m);
    assert.match(out, /^model 'b' \(version 1\):$/m);
  });
});

describe('invalid keys and values name their source', () => {
  const props = (text) => modelDir(`bad-${Math.random().toString(36).slice(2)}`, { 'serving.properties': text });

  test('serving.properties: unknown option, bad value, unknown key', async () => {
    await fails([props('option.dtype=auto\noption.frobnicate=1\n')], {},
      /serving\.properties:2: unknown option 'frobnicate'/);
    await fails([props('option.max_rolling_batch_size=lots\n')], {},
      /serving\.properties:1: max-num-seqs=lots: expected an integer/);
    await fails([props('engine=Python\nfoo=bar\n')], {}, /serving\.properties:2: unknown key 'foo'/);
    await fails([props('option.rolling_batch=disable\n')], {}, /serving\.properties:1: rolling-batch=disable: halo always batches continuously/);
    await fails([props('option.gpu_memory_utilization=1.5\n')], {}, /serving\.properties:1: device-memory-utilization=1\.5: expected a fraction/);
  });

  test('environment: bad values and unknown options', async () => {
    await fails(['--sagemaker'], { HF_MODEL_ID: PKGCHAT, OPTION_DTYPE: 'int3' },
      /environment OPTION_DTYPE: dtype=int3: expected auto/);
    await fails(['--sagemaker'], { HF_MODEL_ID: PKGCHAT, OPTION_FROBNICATE: '1' },
      /environment OPTION_FROBNICATE: unknown option 'frobnicate'/);
    await fails(['--sagemaker'], { HF_MODEL_ID: PKGCHAT, TENSOR_PARALLEL_DEGREE: 'two' },
      /environment TENSOR_PARALLEL_DEGREE: tensor-parallel-size=two: expected an integer/);
    await fails(['--sagemaker'], { HF_MODEL_ID: '/nonexistent/model' },
      /\/nonexistent\/model.*not a Hugging Face model id.*model from environment HF_MODEL_ID/);
    // An id is looked up in the Hugging Face cache; offline, a missing one names the cache.
    await fails(['--sagemaker'], { HF_MODEL_ID: 'nobody/nothing', HF_HUB_OFFLINE: '1', HF_HUB_CACHE: tmp.dir },
      /nobody\/nothing.*Hugging Face cache.*HF_HUB_OFFLINE is set.*environment HF_MODEL_ID/);
  });

  test('model.json: unknown key, bad value, wrong type, missing model, config.pbtxt name', async () => {
    const repo = (name, json, pbtxt) => writeRepository(path.join(tmp.dir, `repo-${name}`), { [name]: { json, pbtxt } });
    await fails(['--model-repository', repo('u', '{\n  "model": "x",\n  "frobnicate": 1\n}')], {},
      /u\/1\/model\.json:3 key 'frobnicate': unknown engine argument/);
    await fails(['--model-repository', repo('v', `{\n  "model": "${PKGCHAT}",\n  "max_num_seqs": "many"\n}`)], {},
      /v\/1\/model\.json:3 key 'max_num_seqs': max-num-seqs=many: expected an integer/);
    await fails(['--model-repository', repo('w', `{"model": "${PKGCHAT}", "block_size": [16]}`)], {},
      /w\/1\/model\.json:1 key 'block_size': expected a string, number or boolean/);
    await fails(['--model-repository', repo('x', '{"max_num_seqs": 2}')], {}, /x\/1\/model\.json: "model" .* is required/);
    await fails(['--model-repository', repo('y', `{"model": "${PKGCHAT}"}`, 'name: "other"\n')], {},
      /y\/config\.pbtxt: name "other" does not match the directory name "y"/);
    await fails(['--model-repository', repo('z', '{"model": "../../nowhere"}')], {},
      /nowhere.*not a Hugging Face model id.*z\/1\/model\.json:1 key 'model'/);
  });

  test('--config YAML: bad values and unknown keys name the file and line', async () => {
    const y = (name, text) => {
      const f = path.join(tmp.dir, name);
      writeFileSync(f, text);
      return f;
    };
    let err = await fails(['--config', y('a.yaml', 'device: cpu\nmax-num-seqs: lots\n')], {}, /max-num-seqs/);
    assert.match(err, /note: --max-num-seqs is set by --config .*a\.yaml:2/);
    err = await fails(['--config', y('b.yaml', 'frobnicate: 1\n')], {}, /frobnicate/);
    assert.match(err, /note: --frobnicate is set by --config .*b\.yaml:1/);
    await fails(['--config', y('c.yaml', 'seed: 1\ndtype: int3\n')], {}, /--config .*c\.yaml:2 key 'dtype': dtype=int3: expected auto/);
  });
});
