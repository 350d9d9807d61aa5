// The SageMaker / DJL LMI contract with curl: `halo serve --sagemaker`
// configured by the environment (HF_MODEL_ID, TENSOR_PARALLEL_DEGREE,
// OPTION_*), GET /ping, POST /invocations (plain, details, return_full_text,
// stop sequences), streaming JSON lines parsed line by line, and a failure
// mid-stream (a shutdown deadline) as a token with id -1 and
// details.finish_reason "error".
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { curl, curlJson, PKGCHAT } from './frontends_lib.mjs';
import { sleep, startServer } from './lib.mjs';

const ENV = {
  HF_MODEL_ID: PKGCHAT,
  TENSOR_PARALLEL_DEGREE: '1',
  OPTION_ROLLING_BATCH: 'vllm',
  OPTION_MAX_ROLLING_BATCH_SIZE: '3',
  OPTION_MAX_MODEL_LEN: '512',
  OPTION_DTYPE: 'fp32',
};
let server;
let url;

before(async () => {
  server = await startServer(['--sagemaker', '--kv-cache-memory', '33554432'], { env: ENV });
  url = server.url;
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

// Each line of a JSON-lines body, parsed on its own.
function jsonLines(body) {
  assert.ok(body.endsWith('\n'), 'every line ends with a newline');
  return body.slice(0, -1).split('\n').map((line) => JSON.parse(line));
}

describe('SageMaker LMI contract', () => {
  test('the environment configured the model', async () => {
    const cfg = JSON.parse((await curl([`${url}/v2/models/pkgchat-5m/config`])).body);
    assert.equal(cfg.parameters.max_num_seqs, 3);        // OPTION_MAX_ROLLING_BATCH_SIZE
    assert.equal(cfg.parameters.max_model_len, 512);     // OPTION_MAX_MODEL_LEN
  });

  test('GET /ping', async () => {
    const r = await curl([`${url}/ping`]);
    assert.equal(r.status, 200);
  });

  test('POST /invocations: generated_text, details, return_full_text', async () => {
    const params = { max_new_tokens: 12, do_sample: true, temperature: 0.8, top_p: 0.95, top_k: 50, seed: 3,
      repetition_penalty: 1.0 };
    const r = await curlJson(`${url}/invocations`, { inputs: 'The package', parameters: params });
    assert.equal(r.status, 200, r.body);
    assert.equal(typeof r.json.generated_text, 'string');
    assert.equal(r.json.details, undefined);
    const d = await curlJson(`${url}/invocations`, { inputs: 'The package', parameters: { ...params, details: true } });
    assert.equal(d.json.generated_text, r.json.generated_text, 'same seed, same text');
    assert.ok(['length', 'eos_token', 'stop_sequence'].includes(d.json.details.finish_reason));
    assert.equal(d.json.details.generated_tokens, d.json.details.tokens.length);
    for (const t of d.json.details.tokens) {
      assert.equal(typeof t.id, 'number');
      assert.ok(t.log_prob <= 0);
    }
    const full = await curlJson(`${url}/invocations`,
      { inputs: 'The package', parameters: { ...params, return_full_text: true } });
    assert.equal(full.json.generated_text, 'The package' + r.json.generated_text);
  });

  test('greedy without do_sample; max_new_tokens defaults to 30; stop_sequences', async () => {
    const a = await curlJson(`${url}/invocations`,
      { inputs: 'The package', parameters: { details: true, ignore_eos_token: true } });
    assert.equal(a.status, 200, a.body);
    assert.equal(a.json.details.generated_tokens, 30);
    assert.equal(a.json.details.finish_reason, 'length');
    const b = await curlJson(`${url}/invocations`, { inputs: 'The package', parameters: { ignore_eos_token: true } });
    assert.equal(b.json.generated_text, a.json.generated_text, 'greedy is deterministic');
    const word = a.json.generated_text.trim().split(/\s+/)[1];
    if (word) {
      const s = await curlJson(`${url}/invocations`,
        { inputs: 'The package', parameters: { ignore_eos_token: true, stop_sequences: [word], details: true } });
      assert.equal(s.json.details.finish_reason, 'stop_sequence', s.body);
      assert.ok(!s.json.generated_text.includes(word));
    }
  });

  test('stream: application/jsonlines, one token per line, the last with generated_text and details', async () => {
    const body = { inputs: 'The package', parameters: { max_new_tokens: 16, do_sample: true, temperature: 0.9, seed: 21,
      ignore_eos_token: true }, stream: true };
    const whole = await curlJson(`${url}/invocations`, { ...body, stream: false });
    const r = await curl(['-X', 'POST', `${url}/invocations`, '-D', '-', '-H', 'Content-Type: application/json',
      '-d', JSON.stringify(body)]);
    const i = r.body.indexOf('\r\n\r\n');
    assert.match(r.body.slice(0, i), /content-type: application\/jsonlines/i);
    const lines = jsonLines(r.body.slice(i + 4));
    assert.equal(lines.length, 16);
    for (const l of lines) {
      assert.equal(typeof l.token.id, 'number');
      assert.ok(l.token.id >= 0);
      assert.equal(typeof l.token.text, 'string');
      assert.ok(l.token.log_prob <= 0);
    }
    const last = lines.at(-1);
    assert.equal(last.generated_text, whole.json.generated_text);
    assert.equal(last.details.finish_reason, 'length');
    assert.equal(last.details.generated_tokens, 16);
    assert.equal(lines.map((l) => l.token.text).join(''), last.generated_text);
    for (const l of lines.slice(0, -1)) assert.equal(l.generated_text, undefined);
  });

  test('bad input is a 400 in DJL\'s shape; the server keeps serving', async () => {
    const cases = [
      ['{"inputs": ', /not valid JSON/],
      [{ parameters: {} }, /'inputs'/],
      [{ inputs: 'x', parameters: { temperature: 'hot' } }, /temperature/],
      [{ inputs: 'x', parameters: { max_new_tokens: 0 } }, /max_tokens/],
      [{ inputs: 'x', parameters: { num_beams: 4 } }, /beam/],
      [{ inputs: 'x', parameters: { n: 2 } }, /'n'/],
    ];
    for (const [body, re] of cases) {
      const r = await curlJson(`${url}/invocations`, body);
      assert.equal(r.status, 400, r.body);
      assert.equal(r.json.code, 400);
      assert.match(r.json.message, re);
    }
    const unknown = await curlJson(`${url}/invocations`, { inputs: 'x' }, ['X-Amzn-SageMaker-Target-Model: nope']);
    assert.equal(unknown.status, 404);
    const ok = await curlJson(`${url}/invocations`, { inputs: 'x', parameters: { max_new_tokens: 2 } });
    assert.equal(ok.status, 200, ok.body);
  });

  test('a failure mid-stream is a token with id -1 and finish_reason "error"', async () => {
    // One running slot; a short shutdown deadline aborts what is still streaming.
    const s = await startServer(['--sagemaker', '--max-num-seqs', '1', '--shutdown-timeout', '0.3'], { env: ENV });
    try {
      const body = JSON.stringify({ inputs: 'The package', stream: true,
        parameters: { max_new_tokens: 480, ignore_eos_token: true } });
      // Eight streams of 480 tokens through one slot: far more than the 0.6 s
      // before the deadline can decode on any machine (three were once done in
      // time on a quiet one, and none was cut).
      const streams = Array.from({ length: 8 }, () => curl(['-X', 'POST', `${s.url}/invocations`, '-d', body]));
      // Every stream admitted before the signal (on a loaded machine a curl may
      // start late, and a server that is shutting down refuses it).
      for (let t = 0; ; t += 50) {
        const m = await curl([`${s.url}/metrics`]);
        // Summed over label sets: running + waiting + finished requests.
        const total = (name) => [...m.body.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)`, 'gm'))]
          .reduce((a, x) => a + Number(x[1]), 0);
        if (total('vllm:num_requests_running') + total('vllm:num_requests_waiting') +
            total('vllm:request_success_total') >= 8 || t > 10000) break;
        await sleep(50);
      }
      s.proc.kill('SIGTERM');
      const results = await Promise.all(streams);
      const { code } = await s.exited;
      assert.equal(code, 0);
      let failed = 0;
      for (const r of results) {
        assert.equal(r.status, 200);
        const lines = jsonLines(r.body);
        const last = lines.at(-1);
        if (last.token.id === -1) {
          failed++;
          assert.equal(last.details.finish_reason, 'error');
          assert.match(last.error, /shutting down/);
          for (const l of lines.slice(0, -1)) assert.ok(l.token.id >= 0);
        } else {
          assert.equal(last.details.finish_reason, 'length');
        }
      }
      assert.ok(failed >= 1, 'at least one stream was cut by the deadline');
    } finally {
      if (s.proc.exitCode === null) s.proc.kill('SIGKILL');
    }
  });
});
