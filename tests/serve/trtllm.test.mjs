// TensorRT-LLM compatibility of the KServe v2 / Triton frontend:
//  - TensorRT-LLM's quick-start requests, sent verbatim with curl to a model
//    served as `ensemble` (generate and generate_stream), and the ensemble's
//    other inputs (end_id, beam_width, return_log_probs, ...);
//  - a model repository laid out as TensorRT-LLM's inflight_batcher_llm
//    templates after fill_template.py (ensemble, preprocessing, tensorrt_llm,
//    postprocessing, tensorrt_llm_bls): --check-config shows the mapped
//    settings with their sources, it serves, and an unfilled ${...} or an
//    unknown parameter refuses the pipeline naming file, line and key while
//    the repository's other model serves.
import assert from 'node:assert/strict';
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { curl, curlJson, halo, PKGCHAT, sseData, tempDir, writeRepository } from './frontends_lib.mjs';
import { startServer } from './lib.mjs';

const QUICK_START = '{"text_input": "What is machine learning?", "max_tokens": 20, "bad_words": "", "stop_words": ""}';
const QUICK_START_PARAMS =
  '{"text_input": "What is machine learning?", "parameters": {"max_tokens": 100, "bad_words": [""], "stop_words": [""]}}';
const QUICK_START_STREAM = '{"text_input": "What is machine learning?", "max_tokens": 20, "bad_words": "", ' +
  '"stop_words": "", "pad_id": 2, "end_id": 2, "stream": true}';

const post = (url, body) => curl(['-X', 'POST', url, '-d', body]);

describe('TensorRT-LLM quick start against a model served as ensemble', () => {
  let server;
  let url;
  before(async () => {
    server = await startServer(['--served-model-name', 'ensemble', '--kv-cache-memory', String(32 << 20)]);
    url = `${server.url}/v2/models/ensemble`;
  });
  after(async () => {
    if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  });

  test('the quick-start requests, verbatim', async () => {
    for (const body of [QUICK_START, QUICK_START_PARAMS]) {
      const r = await post(`${url}/generate`, body);
      assert.equal(r.status, 200, r.body);
      const j = JSON.parse(r.body);
      assert.equal(j.model_name, 'ensemble');
      assert.equal(j.model_version, '1');
      assert.equal(j.sequence_id, 0);
      assert.equal(j.sequence_start, false);
      assert.equal(j.sequence_end, false);
      assert.ok(j.text_output.startsWith('What is machine learning?'), r.body);
    }
  });

  test('the streaming quick-start request, verbatim', async () => {
    const r = await curl(['-X', 'POST', `${url}/generate_stream`, '-D', '-', '-d', QUICK_START_STREAM]);
    const [head, ...rest] = r.body.split('\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.match(head, /content-type: text\/event-stream/i);
    const events = sseData(rest.join('\r\n\r\n'));
    assert.ok(events.length >= 1, r.body);
    for (const e of events) {
      assert.equal(e.model_name, 'ensemble');
      assert.equal(typeof e.text_output, 'string');
    }
  });

  test('text_output is non-empty and the stream adds up to it', async () => {
    const params = { max_tokens: 8, top_k: 1, bad_words: [''], stop_words: [''], exclude_input_in_output: true };
    const whole = await curlJson(`${url}/generate`, { text_input: 'The package', ...params });
    assert.equal(whole.status, 200, whole.body);
    assert.ok(whole.json.text_output.length > 0, whole.body);
    const r = await post(`${url}/generate_stream`, JSON.stringify({ text_input: 'The package', ...params, stream: true }));
    assert.equal(sseData(r.body).map((e) => e.text_output).join(''), whole.json.text_output);
  });

  test('end_id ends the output at that token, without it', async () => {
    // The greedy output's tokens, with their ids (SageMaker's details show them).
    const inv = await curlJson(`${server.url}/invocations`,
      { inputs: 'The package', parameters: { max_new_tokens: 6, do_sample: false, details: true } });
    const tokens = inv.json.details.tokens;
    assert.ok(tokens.length >= 3, inv.body);
    const base = { text_input: 'The package', max_tokens: 6, top_k: 1, exclude_input_in_output: true };
    const first = await curlJson(`${url}/generate`, { ...base, end_id: tokens[0].id, return_finish_reason: true });
    assert.equal(first.status, 200, first.body);
    assert.equal(first.json.text_output, '');
    assert.equal(first.json.finish_reason, 'stop');
    const third = await curlJson(`${url}/generate`, { ...base, end_id: tokens[2].id });
    assert.equal(third.json.text_output, tokens[0].text + tokens[1].text);
    const streamed = await post(`${url}/generate_stream`, JSON.stringify({ ...base, end_id: tokens[2].id, stream: true }));
    assert.equal(sseData(streamed.body).map((e) => e.text_output).join(''), tokens[0].text + tokens[1].text);
    const out = await curlJson(`${url}/generate`, { ...base, end_id: 1 << 30 });
    assert.equal(out.status, 400);
    assert.match(out.json.error, /end_id/);
  });

  test('return_log_probs: output_log_probs and cum_log_probs', async () => {
    const r = await curlJson(`${url}/generate`,
      { text_input: 'The package', max_tokens: 5, top_k: 1, return_log_probs: true, exclude_input_in_output: true });
    assert.equal(r.status, 200, r.body);
    assert.ok(r.json.output_log_probs.length >= 1 && r.json.output_log_probs.length <= 5, r.body);
    for (const lp of r.json.output_log_probs) assert.ok(lp <= 0);
    const sum = r.json.output_log_probs.reduce((a, b) => a + b, 0);
    assert.ok(Math.abs(sum - r.json.cum_log_probs) < 1e-6, r.body);
    const plain = await curlJson(`${url}/generate`, { text_input: 'The package', max_tokens: 5 });
    assert.equal(plain.json.output_log_probs, undefined);
  });

  // Checked with JS regexes and JSON.parse, not with halo's matchers.
  test('guided_decoding_guide_type json, json_schema, regex and ebnf_grammar', async () => {
    const ask = (extra) => curlJson(`${url}/generate`, { text_input: 'The package', max_tokens: 48, temperature: 1,
      exclude_input_in_output: true,
      random_seed: 3, ...extra });
    const regex = await ask({ guided_decoding_guide_type: 'regex', guided_decoding_guide: '[a-z]{2,8}-[0-9]{1,3}' });
    assert.equal(regex.status, 200, regex.body);
    assert.match(regex.json.text_output, /^[a-z]{2,8}-[0-9]{1,3}$/);
    const grammar = await ask({ guided_decoding_guide_type: 'ebnf_grammar',
      guided_decoding_guide: 'root ::= "apt " verb " " [a-z]{1,10}\nverb ::= "install" | "remove"' });
    assert.equal(grammar.status, 200, grammar.body);
    assert.match(grammar.json.text_output, /^apt (install|remove) [a-z]{1,10}$/);
    const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['n'],
      additionalProperties: false };
    const js = await ask({ guided_decoding_guide_type: 'json_schema', guided_decoding_guide: JSON.stringify(schema) });
    assert.equal(js.status, 200, js.body);
    const v = JSON.parse(js.json.text_output);
    assert.deepEqual(Object.keys(v), ['n']);
    assert.ok(Number.isInteger(v.n) && v.n >= 0 && v.n <= 9, js.body);
    const obj = await ask({ guided_decoding_guide_type: 'json', max_tokens: 200, return_finish_reason: true });
    assert.equal(obj.status, 200, obj.body);
    if (obj.json.finish_reason === 'stop') assert.equal(typeof JSON.parse(obj.json.text_output), 'object', obj.body);
    else assert.match(obj.json.text_output, /^\{/, obj.body);
    for (const [extra, re] of [
      [{ guided_decoding_guide_type: 'structural_tag', guided_decoding_guide: '{}' }, /guided_decoding_guide_type/],
      [{ guided_decoding_guide_type: 'regex' }, /guided_decoding_guide/],
      [{ guided_decoding_guide: 'a+' }, /needs 'guided_decoding_guide_type'/],
      [{ guided_decoding_guide_type: 'ebnf_grammar', guided_decoding_guide: 'root ::= x' }, /never defined/],
    ]) {
      const r = await ask(extra);
      assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.body}`);
      assert.match(r.json.error, re);
    }
  });

  test('the ensemble\'s other inputs: accepted, or refused naming them', async () => {
    const ok = await curlJson(`${url}/generate`, {
      text_input: 'The package', max_tokens: 4, end_id: 2, pad_id: 2, beam_width: 1, length_penalty: 1.0,
      repetition_penalty: 1.1, presence_penalty: 0.1, frequency_penalty: 0.1, min_length: 1, temperature: 0.8,
      top_k: 5, top_p: 0.9, random_seed: 7, return_log_probs: false, return_context_logits: false,
      return_generation_logits: false, embedding_bias_words: [''], embedding_bias_weights: [], num_draft_tokens: 0,
      stream: false,
    });
    assert.equal(ok.status, 200, ok.body);
    const seeded = await curlJson(`${url}/generate`, { text_input: 'The package', max_tokens: 4, temperature: 0.8,
      top_k: 5, top_p: 0.9, random_seed: 7, repetition_penalty: 1.1, presence_penalty: 0.1, frequency_penalty: 0.1,
      min_length: 1 });
    assert.equal(seeded.json.text_output, ok.json.text_output, 'the ignored inputs change nothing');
    const beams = await curlJson(`${url}/generate`, { text_input: 'The package', max_tokens: 4, beam_width: 2 });
    assert.equal(beams.status, 200, beams.body);  // beam search (tests/serve/beam_search.test.mjs)
    const cases = [
      [{ return_context_logits: true }, /return_context_logits/],
      [{ return_generation_logits: true }, /return_generation_logits/],
      [{ bad_words: ['package'] }, /bad_words.*cannot ban words/],
      [{ embedding_bias_words: ['x'], embedding_bias_weights: [1.0] }, /embedding_bias_words/],
      [{ length_penalty: 0.5 }, /length_penalty/],
      [{ min_length: 9 }, /'min_tokens' \(9\) must not exceed 'max_tokens' \(4\)/],
      [{ stream: true }, /generate_stream/],
    ];
    for (const [extra, re] of cases) {
      const r = await curlJson(`${url}/generate`, { text_input: 'The package', max_tokens: 4, ...extra });
      assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.body}`);
      assert.match(r.json.error, re);
    }
  });
});

// TensorRT-LLM's tensorrt_llm/config.pbtxt after fill_template.py: the
// template's shape, `params` filled (a value of null keeps the placeholder).
function tensorrtLlmConfig(params, { maxBatch = '64' } = {}) {
  const p = Object.entries(params).map(([k, v]) =>
    `parameters: {\n  key: "${k}"\n  value: {\n    string_value: "${v ?? `\${${k}}`}"\n  }\n}\n`).join('');
  return `# Copyright 2024, NVIDIA CORPORATION & AFFILIATES. All rights reserved.

name: "tensorrt_llm"
backend: "tensorrtllm"
max_batch_size: ${maxBatch}

model_transaction_policy {
  decoupled: True
}

dynamic_batching {
    preferred_batch_size: [ ${maxBatch} ]
    max_queue_delay_microseconds: 0
    default_queue_policy: { max_queue_size: 0 }
}

input [
  {
    name: "input_ids"
    data_type: TYPE_INT32
    dims: [ -1 ]
    allow_ragged_batch: true
    optional: true
  },
  {
    name: "end_id"
    data_type: TYPE_INT32
    dims: [ 1 ]
    reshape: { shape: [ ] }
    optional: true
  }
]
output [
  {
    name: "output_ids"
    data_type: TYPE_INT32
    dims: [ -1, -1 ]
  }
]
instance_group [
  {
    count: 1
    kind : KIND_CPU
  }
]
${p}`;
}

const pythonConfig = (name, params) => `name: "${name}"
backend: "python"
max_batch_size: 64
${name === 'tensorrt_llm_bls' ? 'model_transaction_policy {\n  decoupled: True\n}\n' : ''}
input [
  {
    name: "${name === 'postprocessing' ? 'TOKENS_BATCH' : 'QUERY'}"
    data_type: TYPE_STRING
    dims: [ 1 ]
  }
]
${Object.entries(params).map(([k, v]) => `parameters {\n  key: "${k}"\n  value: {\n    string_value: "${v}"\n  }\n}\n`).join('')}
instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
`;

const ENSEMBLE = `name: "ensemble"
platform: "ensemble"
max_batch_size: 64
input [
  {
    name: "text_input"
    data_type: TYPE_STRING
    dims: [ 1 ]
  },
  {
    name: "max_tokens"
    data_type: TYPE_INT32
    dims: [ 1 ]
  }
]
output [
  {
    name: "text_output"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }
]
ensemble_scheduling {
  step [
    {
      model_name: "preprocessing"
      model_version: -1
      input_map {
        key: "QUERY"
        value: "text_input"
      }
      output_map {
        key: "INPUT_ID"
        value: "_INPUT_ID"
      }
    },
    {
      model_name: "tensorrt_llm"
      model_version: -1
      input_map {
        key: "input_ids"
        value: "_INPUT_ID"
      }
      output_map {
        key: "output_ids"
        value: "_TOKENS_BATCH"
      }
    },
    {
      model_name: "postprocessing"
      model_version: -1
      input_map {
        key: "TOKENS_BATCH"
        value: "_TOKENS_BATCH"
      }
      output_map {
        key: "OUTPUT"
        value: "text_output"
      }
    }
  ]
}
`;

// The parameters the published fill_template.py commands set, plus optional
// ones left unfilled (TensorRT-LLM reads those as "not set").
const TRT_PARAMS = {
  max_beam_width: '1',
  FORCE_CPU_ONLY_INPUT_TENSORS: 'no',
  gpt_model_type: 'inflight_fused_batching',
  gpt_model_path: '/engines/llama/fp16/1-gpu',
  max_tokens_in_paged_kv_cache: '8192',
  max_attention_window_size: '2560',
  batch_scheduler_policy: 'guaranteed_no_evict',
  kv_cache_free_gpu_mem_fraction: '0.5',
  kv_cache_host_memory_bytes: null,
  exclude_input_in_output: 'True',
  cancellation_check_period_ms: null,
  enable_kv_cache_reuse: 'True',
  normalize_log_probs: 'true',
  enable_chunked_context: 'False',
  gpu_device_ids: '0',
  lora_cache_optimal_adapter_size: null,
  decoding_mode: 'top_k_top_p',
  executor_worker_path: '/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker',
  medusa_choices: null,
};

// The five directories of inflight_batcher_llm, filled for `checkpoint`.
function writeTrtllmRepository(dir, { checkpoint = PKGCHAT, trtParams = TRT_PARAMS, maxBatch } = {}) {
  const write = (name, text, versionFile) => {
    mkdirSync(path.join(dir, name, '1'), { recursive: true });
    writeFileSync(path.join(dir, name, 'config.pbtxt'), text);
    if (versionFile) writeFileSync(path.join(dir, name, '1', versionFile), '# the python backend model\n');
  };
  write('ensemble', ENSEMBLE);
  write('preprocessing', pythonConfig('preprocessing',
    { tokenizer_dir: checkpoint, add_special_tokens: 'True', max_num_images: '${max_num_images}' }), 'model.py');
  write('postprocessing', pythonConfig('postprocessing', { tokenizer_dir: checkpoint, skip_special_tokens: 'True' }),
    'model.py');
  write('tensorrt_llm', tensorrtLlmConfig(trtParams, { maxBatch }));
  write('tensorrt_llm_bls', pythonConfig('tensorrt_llm_bls',
    { accumulate_tokens: 'False', tensorrt_llm_model_name: 'tensorrt_llm', tensorrt_llm_draft_model_name: '' }),
  'model.py');
  return dir;
}

const lineOf = (text, needle) => text.split('\n').findIndex((l) => l.includes(needle)) + 1;

describe('a TensorRT-LLM model repository', () => {
  let tmp;
  before(() => { tmp = tempDir('halo-trtllm-'); });
  after(() => tmp?.cleanup());

  test('--check-config: the pipeline is one model, its settings mapped with their sources', async () => {
    const repo = writeTrtllmRepository(path.join(tmp.dir, 'good'));
    const r = await halo(['serve', '--model-repository', repo, '--check-config']);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const cfg = tensorrtLlmConfig(TRT_PARAMS);
    const src = (key) => `${repo}/tensorrt_llm/config.pbtxt:${lineOf(cfg, `key: "${key}"`) + 2} key '${key}'`;
    assert.match(r.stdout, /halo serve: 1 model\(s\)/);
    assert.match(r.stdout, /model 'ensemble' \(version 1\):/);
    const pre = pythonConfig('preprocessing', { tokenizer_dir: PKGCHAT });
    assert.ok(r.stdout.includes(`model = ${PKGCHAT}  (${repo}/preprocessing/config.pbtxt:${lineOf(pre, PKGCHAT)} key 'tokenizer_dir')`),
      r.stdout);
    for (const [setting, key, value] of [
      ['device-memory-utilization', 'kv_cache_free_gpu_mem_fraction', '0.5'],
      ['max-kv-tokens', 'max_tokens_in_paged_kv_cache', '8192'],
      ['enable-prefix-caching', 'enable_kv_cache_reuse', 'true'],
      ['enable-chunked-prefill', 'enable_chunked_context', 'false'],
      ['device-index', 'gpu_device_ids', '0'],
    ]) {
      const line = r.stdout.split('\n').find((l) => l.trim().startsWith(`${setting} =`));
      assert.ok(line, `${setting} missing:\n${r.stdout}`);
      assert.ok(line.includes(`(${src(key)})`), `${line}\nexpected the source ${src(key)}`);
      assert.match(line, new RegExp(`= ${value}\\b`, 'i'), line);
    }
    assert.doesNotMatch(r.stdout, /preprocessing'|postprocessing'|INVALID/);
  });

  test('an unfilled ${...} and an unknown parameter each name file, line and key', async () => {
    const unfilledTop = writeTrtllmRepository(path.join(tmp.dir, 'top'), { maxBatch: '${triton_max_batch_size}' });
    let r = await halo(['serve', '--model-repository', unfilledTop, '--check-config']);
    assert.equal(r.code, 1, r.stdout);
    const cfg = tensorrtLlmConfig(TRT_PARAMS, { maxBatch: '${triton_max_batch_size}' });
    assert.match(r.stdout + r.stderr, new RegExp(`top/tensorrt_llm/config\\.pbtxt:${lineOf(cfg, 'max_batch_size:')} key ` +
      "'max_batch_size': the template placeholder \\$\\{triton_max_batch_size\\} was not filled"));

    const unfilledEngine = writeTrtllmRepository(path.join(tmp.dir, 'engine'),
      { trtParams: { ...TRT_PARAMS, gpt_model_path: '${engine_dir}' } });
    r = await halo(['serve', '--model-repository', unfilledEngine, '--check-config']);
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stdout + r.stderr, /engine\/tensorrt_llm\/config\.pbtxt:\d+ key 'gpt_model_path': the template placeholder \$\{engine_dir\} was not filled/);

    const unknown = writeTrtllmRepository(path.join(tmp.dir, 'unknown'), { trtParams: { ...TRT_PARAMS, frobnicate: '1' } });
    r = await halo(['serve', '--model-repository', unknown, '--check-config']);
    assert.equal(r.code, 1, r.stdout);
    const ucfg = tensorrtLlmConfig({ ...TRT_PARAMS, frobnicate: '1' });
    assert.match(r.stdout + r.stderr, new RegExp(`unknown/tensorrt_llm/config\\.pbtxt:${lineOf(ucfg, 'key: "frobnicate"') + 2} key 'frobnicate': unknown TensorRT-LLM parameter`));

    const beams = writeTrtllmRepository(path.join(tmp.dir, 'beams'), { trtParams: { ...TRT_PARAMS, max_beam_width: '4' } });
    r = await halo(['serve', '--model-repository', beams, '--check-config']);
    assert.equal(r.code, 0, r.stdout + r.stderr);  // beam search is served
    const badBeams = writeTrtllmRepository(path.join(tmp.dir, 'badbeams'), { trtParams: { ...TRT_PARAMS, max_beam_width: '0' } });
    r = await halo(['serve', '--model-repository', badBeams, '--check-config']);
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stdout + r.stderr, /badbeams\/tensorrt_llm\/config\.pbtxt:\d+ key 'max_beam_width': expected a positive integer, got '0'/);

    const noCheckpoint = writeTrtllmRepository(path.join(tmp.dir, 'nockpt'), { checkpoint: tmp.dir });
    r = await halo(['serve', '--model-repository', noCheckpoint, '--check-config']);
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stdout + r.stderr, /nockpt\/preprocessing\/config\.pbtxt:\d+ key 'tokenizer_dir': .* holds no Hugging Face checkpoint \(config\.json\): halo cannot run the TensorRT engine/);
  });

  test('it serves: the quick-start request to ensemble', async () => {
    const repo = writeTrtllmRepository(path.join(tmp.dir, 'serve'));
    const server = await startServer(['--model-repository', repo]);
    try {
      const r = await post(`${server.url}/v2/models/ensemble/generate`, QUICK_START);
      assert.equal(r.status, 200, r.body);
      assert.equal(JSON.parse(r.body).model_name, 'ensemble');
      const cfg = JSON.parse((await curl([`${server.url}/v2/models/ensemble/config`])).body);
      assert.equal(cfg.max_batch_size, 64);
      assert.equal(cfg.parameters.num_kv_blocks * cfg.parameters.block_size, 8192, 'max_tokens_in_paged_kv_cache');
      const s = await curl(['-X', 'POST', `${server.url}/v2/models/ensemble/generate_stream`, '-d', QUICK_START_STREAM]);
      assert.equal(s.status, 200, s.body);
      assert.ok(sseData(s.body).length >= 1);
    } finally {
      assert.equal((await server.stop()).code, 0, server.stderr);
    }
  });

  test('tensorrt_llm_bls and tensorrt_llm answer as the same model',
    async () => {
      const repo = writeTrtllmRepository(path.join(tmp.dir, 'bls'));
      const server = await startServer(['--model-repository', repo]);
      try {
        for (const name of ['tensorrt_llm_bls', 'tensorrt_llm']) {
          assert.equal((await curl([`${server.url}/v2/models/${name}/ready`])).status, 200, name);
          const r = await post(`${server.url}/v2/models/${name}/generate`, QUICK_START);
          assert.equal(r.status, 200, r.body);
        }
      } finally {
        await server.stop();
      }
    });

  test('a broken pipeline is refused while the repository\'s other model serves', async () => {
    const repo = writeTrtllmRepository(path.join(tmp.dir, 'mixed'), { maxBatch: '${triton_max_batch_size}' });
    writeRepository(repo, { pkgchat: { json: { model: PKGCHAT, kv_cache_memory: '16MiB' } } });
    const server = await startServer(['--model-repository', repo]);
    try {
      const idx = await curlJson(`${server.url}/v2/repository/index`, {});
      const byName = Object.fromEntries(idx.json.map((m) => [m.name, m]));
      assert.equal(byName.pkgchat.state, 'READY', idx.body);
      assert.equal(byName.ensemble.state, 'UNAVAILABLE', idx.body);
      assert.match(byName.ensemble.reason,
        /mixed\/tensorrt_llm\/config\.pbtxt:\d+ key 'max_batch_size': the template placeholder \$\{triton_max_batch_size\} was not filled/);
      assert.equal(byName.preprocessing, undefined, 'the python steps are not models of their own');
      const r = await curlJson(`${server.url}/v2/models/pkgchat/generate`, { text_input: 'The package', max_tokens: 3 });
      assert.equal(r.status, 200, r.body);
      const refused = await post(`${server.url}/v2/models/ensemble/generate`, QUICK_START);
      assert.equal(refused.status, 404, refused.body);
      assert.match(refused.body, /triton_max_batch_size/);
    } finally {
      assert.equal((await server.stop()).code, 0, server.stderr);
    }
  });
});
