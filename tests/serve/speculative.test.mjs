// Speculative decoding through every surface a user sets it on: `halo
// generate --speculative-config`, `halo serve --speculative-config`, vLLM's
// `speculative_config` object in a model repository's model.json, and
// --check-config; served with the official OpenAI SDK, whose greedy output
// must be plain decoding's, and vLLM's spec_decode counters on /metrics.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { curlJson, halo, PKGCHAT, tempDir, writeRepository } from './frontends_lib.mjs';
import { client, metric, metrics, startServer } from './lib.mjs';

const NGRAM = JSON.stringify({ method: 'ngram', num_speculative_tokens: 4, prompt_lookup_max: 3, prompt_lookup_min: 1 });
// The demo model repeats itself on this prompt, so prompt lookup has matches.
const PROMPT = 'apt install apt install apt install';
const N = 64;
let plainText;  // halo generate without speculation
let server;

before(async () => {
  const r = await halo(['generate', PKGCHAT, '--prompt', PROMPT, '--max-tokens', String(N), '--temperature', '0',
    '--ignore-eos', '--output', 'json']);
  assert.equal(r.code, 0, r.stderr);
  plainText = JSON.parse(r.stdout.trim().split('\n')[0]).text;
  server = await startServer(['--speculative-config', NGRAM]);
});
after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

test('halo generate --speculative-config gives plain greedy decoding\'s text', async () => {
  const r = await halo(['generate', PKGCHAT, '--prompt', PROMPT, '--max-tokens', String(N), '--temperature', '0',
    '--ignore-eos', '--output', 'json', '--speculative-config', NGRAM]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout.trim().split('\n')[0]).text, plainText);
});

test('served with the OpenAI SDK: same text streamed and not, and the spec_decode counters add up', async () => {
  const before = await metrics(server);
  assert.equal(metric(before, 'vllm:spec_decode_num_drafts_total'), 0);
  const openai = client(server);
  const c = await openai.completions.create({ model: 'pkgchat-5m', prompt: PROMPT, max_tokens: N, temperature: 0,
    ignore_eos: true });
  assert.equal(c.choices[0].text, plainText);
  const stream = await openai.completions.create({ model: 'pkgchat-5m', prompt: PROMPT, max_tokens: N, temperature: 0,
    ignore_eos: true, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, plainText);

  const m = await metrics(server);
  const drafts = metric(m, 'vllm:spec_decode_num_drafts_total');
  const proposed = metric(m, 'vllm:spec_decode_num_draft_tokens_total');
  const accepted = metric(m, 'vllm:spec_decode_num_accepted_tokens_total');
  assert.ok(drafts > 0 && proposed >= drafts, `drafts ${drafts}, proposed ${proposed}`);
  assert.ok(accepted > 0 && accepted < proposed, `accepted ${accepted} of ${proposed}`);
  let perPos = 0;
  for (let i = 0; i < 4; i++) perPos += metric(m, 'vllm:spec_decode_num_accepted_tokens_per_pos_total', `position="${i}"`);
  assert.equal(perPos, accepted);
  assert.equal(metric(m, 'vllm:spec_decode_num_accepted_tokens_per_pos_total', 'position="4"'), undefined);
  const generated = metric(m, 'vllm:generation_tokens_total') - metric(before, 'vllm:generation_tokens_total');
  assert.equal(generated, c.usage.completion_tokens * 2);
  // Fewer steps than tokens: several tokens came out of one verify.
  const steps = metric(m, 'vllm:iteration_tokens_total_count') - metric(before, 'vllm:iteration_tokens_total_count');
  assert.ok(steps < 2 * (N + 1), `steps ${steps}`);
});

test('beam search with speculation is refused with 400 naming speculative decoding', async () => {
  const r = await curlJson(`${server.url}/generate`,
    { prompt: PROMPT, use_beam_search: true, n: 2, temperature: 0, max_tokens: 4 });
  assert.equal(r.status, 400, r.body);
  assert.match(r.body, /speculative/);
});

test('a server without speculation has no spec_decode metrics', async () => {
  const plain = await startServer([]);
  try {
    const m = await metrics(plain);
    assert.equal(metric(m, 'vllm:spec_decode_num_drafts_total'), undefined);
  } finally {
    await plain.stop();
  }
});

test("model.json's speculative_config object (vLLM's engine argument) and --check-config", async () => {
  const t = tempDir('halo-spec-');
  try {
    writeRepository(t.dir, { demo: { json: { model: PKGCHAT, speculative_config: JSON.parse(NGRAM) } } });
    const r = await halo(['serve', '--model-repository', t.dir, '--check-config']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /speculative-config = \{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":3,"prompt_lookup_min":1\}\s+\(.*model\.json/);
    writeRepository(t.dir, { demo: { json: { model: PKGCHAT, speculative_config: { method: 'eagle', num_speculative_tokens: 2 } } } });
    const bad = await halo(['serve', '--model-repository', t.dir, '--check-config']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr + bad.stdout, /model\.json.*speculative_config.*eagle/s);
  } finally {
    t.cleanup();
  }
});

test('a bad --speculative-config is refused before anything loads, naming the problem', async () => {
  const r = await halo(['serve', '--check-config', '--speculative-config', '{"method": "ngram"}']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /num_speculative_tokens/);
  const g = await halo(['generate', PKGCHAT, '--prompt', 'x', '--speculative-config', '{"num_speculative_tokens": 2, "colour": 1}']);
  assert.notEqual(g.code, 0);
  assert.match(g.stderr, /colour/);
});

test('halo bench throughput --spec-replay: every proposal accepted at 0, none at 1, outputs unchanged', async () => {
  const t = tempDir('halo-spec-bench-');
  try {
    for (const [corrupt, rate] of [['0', 1], ['1', 0]]) {
      const file = path.join(t.dir, `b${corrupt}.json`);
      const r = await halo(['bench', 'throughput', '--num-prompts', '4', '--input-len', '16', '--output-len', '24',
        '--max-num-seqs', '2', '--spec-replay', corrupt, '--num-speculative-tokens', '3', '--output-json', file]);
      assert.equal(r.code, 0, r.stderr);
      const j = JSON.parse(readFileSync(file, 'utf8'));
      assert.equal(j.speculative.spec_acceptance_rate ?? 0, rate);
      assert.equal(j.speculative.outputs_equal_to_plain, 4);
      assert.equal(j.speculative.output_tokens, j.batched.output_tokens);
      assert.ok(j.speculative_speedup_output_tokens_per_s > 0);
    }
  } finally {
    t.cleanup();
  }
});

test('the shipped draft model as proposer: halo generate gives plain greedy decoding\'s text', async () => {
  const cfg = JSON.stringify({ model: path.join(PKGCHAT, '..', 'pkgchat-5m-draft'), num_speculative_tokens: 3 });
  const r = await halo(['generate', PKGCHAT, '--prompt', PROMPT, '--max-tokens', String(N), '--temperature', '0',
    '--ignore-eos', '--output', 'json', '--speculative-config', cfg]);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout.trim().split('\n')[0]).text, plainText);
});
