// Beam search on every frontend gives what `halo generate --beam-width` gives:
// vLLM's documented /generate request (use_beam_search, n = 4), OpenAI
// completions with vLLM's extra parameters, KServe / TensorRT-LLM beam_width
// and SageMaker num_beams (their best beam); and the requests beam search
// cannot serve are refused with 400 naming the field.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { curl, curlJson, halo, PKGCHAT, REPO } from './frontends_lib.mjs';
import { startServer } from './lib.mjs';

const PROMPT = 'San Francisco is a';
const N = 16;  // max_tokens
let server;
let cli;  // the command line's four beams: {text, cumulative_logprob}

before(async () => {
  const r = await halo(['generate', PKGCHAT, '--prompt', PROMPT, '--beam-width', '4', '--max-tokens', String(N),
    '--output', 'json']);
  assert.equal(r.code, 0, r.stderr);
  cli = JSON.parse(r.stdout.trim().split('\n')[0]).outputs;
  assert.equal(cli.length, 4);
  server = await startServer(['--model-repository', path.join(REPO, 'configs', 'model-repository')]);
});
after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

test("vLLM's /generate example: use_beam_search with n = 4 returns the four beams, best first", async () => {
  const r = await curlJson(`${server.url}/generate`,
    { prompt: PROMPT, use_beam_search: true, n: 4, temperature: 0, max_tokens: N });
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(r.json.text, cli.map((c) => PROMPT + c.text));
  assert.ok(cli[0].beam_score >= cli[3].beam_score);
});

test('/v1/completions: use_beam_search, n = 2, best_of = 4, length_penalty 1', async () => {
  const r = await curlJson(`${server.url}/v1/completions`,
    { model: 'pkgchat', prompt: PROMPT, use_beam_search: true, n: 2, best_of: 4, max_tokens: N, length_penalty: 1.0 });
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(r.json.choices.map((c) => c.text), cli.slice(0, 2).map((c) => c.text));
});

test('KServe generate with beam_width 4 and SageMaker num_beams 4 answer with the best beam', async () => {
  const ks = await curlJson(`${server.url}/v2/models/pkgchat/generate`,
    { text_input: PROMPT, parameters: { max_tokens: N, beam_width: 4 } });
  assert.equal(ks.status, 200, ks.body);
  assert.equal(ks.json.text_output, PROMPT + cli[0].text);
  const sm = await curlJson(`${server.url}/invocations`,
    { inputs: PROMPT, parameters: { max_new_tokens: N, num_beams: 4 } });
  assert.equal(sm.status, 200, sm.body);
  assert.equal(sm.json.generated_text, cli[0].text);
});

test('what beam search cannot serve is a 400 naming the field', async () => {
  const cases = [
    [{ use_beam_search: true, n: 2, stream: true }, /stream/],
    [{ use_beam_search: true, n: 2, temperature: 0.8 }, /temperature/],
    [{ use_beam_search: true, n: 2, logprobs: 2 }, /logprobs/],
    [{ use_beam_search: true, n: 2, stop: ['x'] }, /stop strings/],
    [{ use_beam_search: true, n: 2, early_stopping: 'sometimes' }, /early_stopping/],
    [{ length_penalty: 0.5 }, /length_penalty/],
  ];
  for (const [extra, why] of cases) {
    const r = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: PROMPT, max_tokens: 4, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.body}`);
    assert.match(r.json.error.message, why, JSON.stringify(extra));
  }
  const alive = await curl([`${server.url}/health`]);
  assert.equal(alive.status, 200);
});
