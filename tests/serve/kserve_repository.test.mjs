// KServe v2 / Triton generate over a Triton-style model repository holding
// two models (the embedded pkgchat-5m and a generated qwen3 model) served at
// once, driven with curl; plus a model whose KV budget does not fit (refused
// with its numbers while the others serve) and one with an unknown key
// (refused naming the file, line and key).
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { curl, curlJson, makeTinyModel, PKGCHAT, sseData, tempDir, writeRepository } from './frontends_lib.mjs';
import { startServer } from './lib.mjs';

let tmp;
let server;
let url;

before(async () => {
  tmp = tempDir('halo-kserve-');
  mkdirSync(path.join(tmp.dir, 'models'));
  await makeTinyModel(path.join(tmp.dir, 'models', 'tiny'));
  const repo = path.join(tmp.dir, 'repo');
  writeRepository(repo, {
    pkgchat: {
      json: { model: PKGCHAT, max_num_seqs: 8, max_model_len: 512, kv_cache_memory: '32MiB', disable_log_requests: true },
      pbtxt: 'name: "pkgchat"\nbackend: "vllm"\nmax_batch_size: 0\nmodel_transaction_policy {\n  decoupled: true\n}\n',
    },
    // Relative to the directory holding model.json: repo/tiny/1 -> tmp/models/tiny.
    tiny: { json: { model: '../../../models/tiny', max_num_seqs: 4, block_size: 16, max_kv_tokens: 4096 } },
    xl: { json: { model: '../../../models/tiny', kv_cache_memory: '1024TiB' } },
    broken: { json: '{\n  "model": "../../../models/tiny",\n  "max_num_seqs": 4,\n  "speculative_model": "x"\n}\n' },
  });
  server = await startServer(['--model-repository', repo]);
  url = server.url;
});

after(async () => {
  if (server) {
    const { code } = await server.stop();
    assert.equal(code, 0, server.stderr);
  }
  tmp?.cleanup();
});

describe('model repository', () => {
  test('both models are served; the misfit and the broken one are refused with reasons', async () => {
    const r = await curlJson(`${url}/v2/repository/index`, {});
    assert.equal(r.status, 200, r.body);
    const byName = Object.fromEntries(r.json.map((m) => [m.name, m]));
    assert.equal(byName.pkgchat.state, 'READY');
    assert.equal(byName.tiny.state, 'READY');
    assert.equal(byName.xl.state, 'UNAVAILABLE');
    assert.match(byName.xl.reason,
      /model 'xl' does not fit on cpu:0: weights [\d.]+ \w+ \+ KV cache 1\.0 PiB \(kv-cache-memory from .*xl\/1\/model\.json:3 key 'kv_cache_memory'\) = 1\.0 PiB needed, but only [\d.]+ \wiB of the device's [\d.]+ \wiB free is left \(models loaded before it: pkgchat, tiny claim [\d.]+ MiB\)/);
    assert.equal(byName.broken.state, 'UNAVAILABLE');
    assert.match(byName.broken.reason, /broken\/1\/model\.json:4 key 'speculative_model': speculative_model=.*not supported: use speculative_config/);
    assert.match(server.stderr, /model 'xl' refused: model 'xl' does not fit/);

    const models = JSON.parse((await curl([`${url}/v1/models`])).body);
    assert.deepEqual(models.data.map((m) => m.id).sort(), ['pkgchat', 'tiny']);
    const refused = await curlJson(`${url}/v1/completions`, { model: 'xl', prompt: 'x', max_tokens: 1 });
    assert.equal(refused.status, 404);
    assert.match(refused.json.error.message, /does not fit/);
  });

  test('health, server and model metadata, config', async () => {
    assert.equal((await curl([`${url}/v2/health/live`])).status, 200);
    assert.equal((await curl([`${url}/v2/health/ready`])).status, 200);
    assert.equal((await curl([`${url}/v2/models/tiny/ready`])).status, 200);
    assert.equal((await curl([`${url}/v2/models/tiny/versions/1/ready`])).status, 200);
    const meta = await curl([`${url}/v2/models/pkgchat`]);
    const j = JSON.parse(meta.body);
    assert.equal(j.name, 'pkgchat');
    assert.deepEqual(j.versions, ['1']);
    assert.ok(j.inputs.some((t) => t.name === 'text_input' && t.datatype === 'BYTES'));
    assert.ok(j.outputs.some((t) => t.name === 'text_output'));
    const cfg = JSON.parse((await curl([`${url}/v2/models/tiny/config`])).body);
    assert.equal(cfg.parameters.max_num_seqs, 4);
    assert.equal(cfg.parameters.block_size, 16);
    assert.equal(cfg.parameters.num_kv_blocks, 256);  // max_kv_tokens 4096 / 16
    const srv = JSON.parse((await curl([`${url}/v2`])).body);
    assert.equal(srv.name, 'halo');
  });

  test('generate on each model, with and without the prompt', async () => {
    for (const model of ['pkgchat', 'tiny']) {
      const body = { text_input: 'The package', parameters: { max_tokens: 8, temperature: 0 } };
      const r = await curlJson(`${url}/v2/models/${model}/generate`, body);
      assert.equal(r.status, 200, r.body);
      assert.equal(r.json.model_name, model);
      assert.equal(r.json.model_version, '1');
      assert.ok(r.json.text_output.startsWith('The package'), r.body);
      const ex = await curlJson(`${url}/v2/models/${model}/versions/1/generate`,
        { ...body, exclude_input_in_output: true, parameters: { ...body.parameters, return_num_output_tokens: true } });
      assert.equal(ex.status, 200, ex.body);
      assert.equal('The package' + ex.json.text_output, r.json.text_output);
      assert.ok(ex.json.num_output_tokens >= 1 && ex.json.num_output_tokens <= 8);
    }
  });

  test('vLLM backend style: sampling_parameters as a JSON string, stop words', async () => {
    const r = await curlJson(`${url}/v2/models/pkgchat/generate`, {
      text_input: 'The package',
      sampling_parameters: JSON.stringify({ max_tokens: 6, temperature: 0.7, seed: 5 }),
      exclude_input_in_output: true,
    });
    assert.equal(r.status, 200, r.body);
    const again = await curlJson(`${url}/v2/models/pkgchat/generate`, {
      text_input: 'The package', parameters: { max_tokens: 6, temperature: 0.7, random_seed: 5 },
      exclude_input_in_output: true,
    });
    assert.equal(again.json.text_output, r.json.text_output, 'random_seed and seed agree');
    const long = await curlJson(`${url}/v2/models/pkgchat/generate`,
      { text_input: 'The package', parameters: { max_tokens: 40, temperature: 0, ignore_eos: true }, exclude_input_in_output: true });
    const word = long.json.text_output.trim().split(/\s+/)[1];
    if (word) {
      const stopped = await curlJson(`${url}/v2/models/pkgchat/generate`, {
        text_input: 'The package', exclude_input_in_output: true,
        parameters: { max_tokens: 40, temperature: 0, ignore_eos: true, stop_words: [word], return_finish_reason: true },
      });
      assert.ok(!stopped.json.text_output.includes(word), stopped.body);
      assert.equal(stopped.json.finish_reason, 'stop');
    }
  });

  test('generate_stream answers SSE whose pieces add up to generate', async () => {
    for (const model of ['pkgchat', 'tiny']) {
      const params = { max_tokens: 10, temperature: 0.9, random_seed: 11, ignore_eos: true };
      const whole = await curlJson(`${url}/v2/models/${model}/generate`,
        { text_input: 'The package', parameters: params, exclude_input_in_output: true });
      const r = await curl(['-X', 'POST', `${url}/v2/models/${model}/generate_stream`, '-D', '-',
        '-d', JSON.stringify({ text_input: 'The package', parameters: { ...params, stream: true } })]);
      const [head, ...rest] = r.body.split('\r\n\r\n');
      assert.match(head, /content-type: text\/event-stream/i);
      const events = sseData(rest.join('\r\n\r\n'));
      assert.ok(events.length >= 2, r.body);
      for (const e of events) assert.equal(e.model_name, model);
      assert.equal(events.map((e) => e.text_output).join(''), whole.json.text_output);
    }
  });

  test('bad input is {"error": ...}', async () => {
    const cases = [
      ['pkgchat/generate', '{"text_input": ', 400, /not valid JSON/],
      ['pkgchat/generate', { parameters: { max_tokens: 4 } }, 400, /text_input/],
      ['pkgchat/generate', { text_input: 'x', parameters: { temperature: -1 } }, 400, /temperature/],
      ['pkgchat/generate', { text_input: 'x', parameters: { max_tokens: 100000 } }, 400, /maximum context length/],
      ['pkgchat/generate', { text_input: 'x', parameters: { bad_words: ['foo'] } }, 400, /bad_words/],
      ['pkgchat/generate', { text_input: 'x', sampling_parameters: '{oops' }, 400, /sampling_parameters/],
      ['pkgchat/generate', { text_input: 'x', stream: true }, 400, /generate_stream/],
      ['pkgchat/versions/7/generate', { text_input: 'x' }, 404, /no version 7/],
      ['nope/generate', { text_input: 'x' }, 404, /does not exist/],
      ['pkgchat/infer', { inputs: [] }, 400, /generate extension/],
    ];
    for (const [route, body, status, re] of cases) {
      const r = await curlJson(`${url}/v2/models/${route}`, body);
      assert.equal(r.status, status, `${route} ${JSON.stringify(body)}: ${r.body}`);
      assert.equal(typeof r.json.error, 'string', r.body);
      assert.match(r.json.error, re);
    }
    // Still serving.
    const ok = await curlJson(`${url}/v2/models/tiny/generate`, { text_input: 'x', parameters: { max_tokens: 2 } });
    assert.equal(ok.status, 200, ok.body);
  });

  test('the OpenAI API routes by model too', async () => {
    for (const model of ['pkgchat', 'tiny']) {
      const r = await curlJson(`${url}/v1/completions`, { model, prompt: 'The package', max_tokens: 4 });
      assert.equal(r.status, 200, r.body);
      assert.equal(r.json.model, model);
    }
    const m = await curl([`${url}/metrics`]);
    assert.match(m.body, /model_name="pkgchat"/);
    assert.match(m.body, /model_name="tiny"/);
    assert.equal((m.body.match(/^# TYPE vllm:num_requests_running /mg) || []).length, 1, 'one header per family');
  });
});
