// The same prompt with the same seed gives the same text on every frontend:
// OpenAI completions, vLLM's /generate, KServe generate and generate_stream,
// SageMaker invocations (plain and streamed). The server serves the example
// repository configs/model-repository (so this also loads that config).
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { curl, curlJson, REPO, sseData } from './frontends_lib.mjs';
import { startServer } from './lib.mjs';

let server;
before(async () => {
  server = await startServer(['--model-repository', path.join(REPO, 'configs', 'model-repository')]);
});
after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

for (const [prompt, seed, temperature] of [['The package', 1234, 0.9], ['What is curl?', 7, 1.0], ['Install', 99, 0.0]]) {
  test(`"${prompt}" seed ${seed} temperature ${temperature}: every frontend agrees`, async () => {
    const url = server.url;
    const n = 12;
    const texts = {};
    const cmpl = await curlJson(`${url}/v1/completions`,
      { model: 'pkgchat', prompt, max_tokens: n, temperature, seed, ignore_eos: true });
    texts.completions = cmpl.json.choices[0].text;
    const gen = await curlJson(`${url}/generate`, { prompt, max_tokens: n, temperature, seed, ignore_eos: true });
    texts.generate = gen.json.text[0].slice(prompt.length);
    const ks = await curlJson(`${url}/v2/models/pkgchat/generate`,
      { text_input: prompt, parameters: { max_tokens: n, temperature, random_seed: seed, ignore_eos: true } });
    texts.kserve = ks.json.text_output.slice(prompt.length);
    const kss = await curl(['-X', 'POST', `${url}/v2/models/pkgchat/generate_stream`, '-d',
      JSON.stringify({ text_input: prompt, parameters: { max_tokens: n, temperature, random_seed: seed, ignore_eos: true } })]);
    texts.kserve_stream = sseData(kss.body).map((e) => e.text_output).join('');
    const params = { max_new_tokens: n, do_sample: temperature > 0, temperature, seed, ignore_eos_token: true };
    const sm = await curlJson(`${url}/invocations`, { inputs: prompt, parameters: params });
    texts.sagemaker = sm.json.generated_text;
    const sms = await curl(['-X', 'POST', `${url}/invocations`, '-d', JSON.stringify({ inputs: prompt, parameters: params, stream: true })]);
    texts.sagemaker_stream = JSON.parse(sms.body.trim().split('\n').at(-1)).generated_text;
    assert.ok(texts.completions.length > 0);
    for (const [k, v] of Object.entries(texts)) assert.equal(v, texts.completions, `${k}: ${JSON.stringify(texts)}`);
  });
}
