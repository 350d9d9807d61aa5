// halo serve driven by the official OpenAI Node SDK (and curl for the raw SSE
// framing): the real binary, the embedded demo model, loopback only.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, before, describe, test } from 'node:test';

import { client, metric, metrics, postJson, sleep, startServer } from './lib.mjs';

let server;
let openai;
const MODEL = 'pkgchat-5m';

before(async () => {
  server = await startServer(['--served-model-name', MODEL, '--max-num-seqs', '16']);
  openai = client(server);
});

after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, `halo serve exited ${code}:\n${server.stderr}`);
});

async function collectChatStream(params) {
  const stream = await openai.chat.completions.create({ ...params, stream: true });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

describe('models and start-up', () => {
  test('prints the URL and a curl example on start', async () => {
    // Printed just after /health turns 200: the line may still be on its way.
    for (let t = 0; t < 10000 && !/curl .*\/v1\/chat\/completions/.test(server.stdout); t += 50) await sleep(50);
    assert.match(server.stdout, new RegExp(`http://127\\.0\\.0\\.1:${server.port}/v1`));
    assert.match(server.stdout, /curl .*\/v1\/chat\/completions/);
  });

  test('models list names the served model with max_model_len', async () => {
    const list = await openai.models.list();
    const ids = list.data.map((m) => m.id);
    assert.deepEqual(ids, [MODEL]);
    assert.equal(list.data[0].object, 'model');
    assert.equal(list.data[0].max_model_len, 512);
    assert.equal(list.data[0].owned_by, 'halo');
  });
});

describe('chat', () => {
  test('a greedy chat answer ends at the model end token with usage', async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'What is curl?' }], temperature: 0, max_tokens: 200,
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.model, MODEL);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.ok(r.choices[0].message.content.trim().split(/\s+/).length > 3, r.choices[0].message.content);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.ok(r.usage.prompt_tokens > 5);
    assert.ok(r.usage.completion_tokens > 3);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  });

  test('max_completion_tokens caps the answer with finish_reason length', async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'What is vim?' }], max_completion_tokens: 5,
      temperature: 0, ignore_eos: true,
    });
    assert.equal(r.usage.completion_tokens, 5);
    assert.equal(r.choices[0].finish_reason, 'length');
  });

  test('streaming: role first, content deltas, finish, usage chunk; text equals the non-streamed one', async () => {
    const params = {
      model: MODEL, messages: [{ role: 'user', content: 'What is a compiler?' }], temperature: 0.8, seed: 1234,
      max_tokens: 40,
    };
    const full = await openai.chat.completions.create(params);
    const chunks = await collectChatStream({ ...params, stream_options: { include_usage: true } });
    assert.equal(chunks[0].object, 'chat.completion.chunk');
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
    assert.equal(text, full.choices[0].message.content);
    const finishes = chunks.flatMap((c) => c.choices.filter((ch) => ch.finish_reason));
    assert.equal(finishes.length, 1);
    assert.equal(finishes[0].finish_reason, full.choices[0].finish_reason);
    const last = chunks[chunks.length - 1];
    assert.deepEqual(last.choices, []);
    assert.deepEqual(last.usage, full.usage);
  });

  test('n > 1 gives distinct seeded choices, each reproducible', async () => {
    const params = {
      model: MODEL, messages: [{ role: 'user', content: 'What is tar?' }], n: 3, temperature: 1.0, seed: 7,
      max_tokens: 16, ignore_eos: true,
    };
    const a = await openai.chat.completions.create(params);
    const b = await openai.chat.completions.create(params);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
    assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
    assert.ok(new Set(a.choices.map((c) => c.message.content)).size > 1, 'choices should differ');
    assert.equal(a.usage.completion_tokens, 48);
  });

  test('logprobs with top_logprobs in the chat shape', async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, messages: [{ role: 'user', content: 'What is git?' }], logprobs: true, top_logprobs: 3,
      max_tokens: 6, temperature: 0, ignore_eos: true,
    });
    const content = r.choices[0].logprobs.content;
    assert.equal(content.length, 6);
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0);
      assert.deepEqual(t.bytes, [...Buffer.from(t.token, 'utf8')]);
      assert.equal(t.top_logprobs.length, 3);
      // Greedy: the chosen token is the most likely one.
      assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-5, JSON.stringify(t));
    }
  });

  test('stop strings cut the text and report stop_reason', async () => {
    const base = { model: MODEL, messages: [{ role: 'user', content: 'What is curl?' }], temperature: 0, max_tokens: 60 };
    const free = await openai.chat.completions.create(base);
    const text = free.choices[0].message.content;
    const words = text.trim().split(/\s+/);
    assert.ok(words.length > 4, text);
    const stop = words[3];
    const r = await openai.chat.completions.create({ ...base, stop: [stop] });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].stop_reason, stop);
    assert.equal(r.choices[0].message.content, text.slice(0, text.indexOf(stop)));
    const inc = await openai.chat.completions.create({ ...base, stop, include_stop_str_in_output: true });
    assert.equal(inc.choices[0].message.content, text.slice(0, text.indexOf(stop) + stop.length));
  });

  test('continue_final_message continues the assistant message', async () => {
    const r = await openai.chat.completions.create({
      model: MODEL, temperature: 0, max_tokens: 8, ignore_eos: true, add_generation_prompt: false,
      continue_final_message: true,
      messages: [{ role: 'user', content: 'What is curl?' }, { role: 'assistant', content: 'curl is' }],
    });
    assert.equal(r.usage.completion_tokens, 8);
    const render = await postJson(`${server.url}/v1/chat/completions/render`, {
      model: MODEL, add_generation_prompt: false, continue_final_message: true,
      messages: [{ role: 'user', content: 'What is curl?' }, { role: 'assistant', content: 'curl is' }],
    });
    assert.equal(render.status, 200);
    assert.ok(render.json.prompt.endsWith('curl is'), render.json.prompt);
  });
});

describe('completions', () => {
  test('a text prompt, with usage and id', async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: 'The package vim is', max_tokens: 8, temperature: 0,
      ignore_eos: true });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-/);
    assert.equal(r.choices.length, 1);
    assert.equal(r.usage.completion_tokens, 8);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.ok(r.choices[0].text.length > 0);
  });

  test('default max_tokens is 16', async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: 'The package', temperature: 0, ignore_eos: true });
    assert.equal(r.usage.completion_tokens, 16);
  });

  test('token-id prompts equal the same prompt as text', async () => {
    const tok = await postJson(`${server.url}/tokenize`, { model: MODEL, prompt: 'The package curl is' });
    assert.equal(tok.status, 200);
    assert.equal(tok.json.count, tok.json.tokens.length);
    const byText = await openai.completions.create({ model: MODEL, prompt: 'The package curl is', max_tokens: 10,
      temperature: 0 });
    const byIds = await openai.completions.create({ model: MODEL, prompt: tok.json.tokens, max_tokens: 10,
      temperature: 0 });
    assert.equal(byIds.choices[0].text, byText.choices[0].text);
    assert.equal(byIds.usage.prompt_tokens, tok.json.count);
    const det = await postJson(`${server.url}/detokenize`, { model: MODEL, tokens: tok.json.tokens });
    assert.ok(det.json.prompt.startsWith('<s>') && det.json.prompt.endsWith('The package curl is'), det.json.prompt);
  });

  test('a list of prompts and a list of token-id lists, n = 2', async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: ['The package', 'A library'], n: 2,
      max_tokens: 4, temperature: 0, ignore_eos: true });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    // Greedy: both choices of one prompt agree.
    assert.equal(r.choices[0].text, r.choices[1].text);
    assert.equal(r.usage.completion_tokens, 16);
    const ids = await openai.completions.create({ model: MODEL, prompt: [[1, 450, 3577], [1, 319]], max_tokens: 3,
      temperature: 0, ignore_eos: true });
    assert.equal(ids.choices.length, 2);
    assert.equal(ids.usage.prompt_tokens, 5);
  });

  test('logprobs, echo and best_of', async () => {
    const r = await openai.completions.create({ model: MODEL, prompt: 'The package vim', max_tokens: 5, logprobs: 2,
      temperature: 0, ignore_eos: true });
    const lp = r.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.token_logprobs.length, 5);
    assert.equal(lp.top_logprobs.length, 5);
    assert.equal(lp.text_offset[0], 0);
    for (let i = 0; i < 5; i++) {
      assert.ok(lp.token_logprobs[i] <= 0);
      assert.ok(Object.keys(lp.top_logprobs[i]).length >= 1 && Object.keys(lp.top_logprobs[i]).length <= 3);
      assert.equal(lp.top_logprobs[i][lp.tokens[i]], lp.token_logprobs[i]);
    }
    const echo = await openai.completions.create({ model: MODEL, prompt: 'The package vim', max_tokens: 5,
      logprobs: 1, echo: true, temperature: 0, ignore_eos: true });
    assert.ok(echo.choices[0].text.startsWith('The package vim'), echo.choices[0].text);
    assert.equal(echo.choices[0].text, 'The package vim' + r.choices[0].text);
    assert.equal(echo.choices[0].logprobs.token_logprobs[0], null);
    assert.equal(echo.choices[0].logprobs.tokens.length, echo.usage.prompt_tokens + 5);
    const best = await openai.completions.create({ model: MODEL, prompt: 'The package', max_tokens: 4, n: 1,
      best_of: 3, temperature: 1, seed: 3, ignore_eos: true });
    assert.equal(best.choices.length, 1);
  });

  test('streamed completions equal the non-streamed text for the same seed', async () => {
    const params = { model: MODEL, prompt: ['The package', 'A tool'], max_tokens: 24, temperature: 0.9, seed: 42 };
    const full = await openai.completions.create(params);
    const stream = await openai.completions.create({ ...params, stream: true });
    const texts = ['', ''];
    const finish = [];
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        texts[c.index] += c.text;
        if (c.finish_reason) finish[c.index] = c.finish_reason;
      }
    }
    assert.deepEqual(texts, full.choices.map((c) => c.text));
    assert.deepEqual(finish, full.choices.map((c) => c.finish_reason));
  });

  test('stop strings on completions', async () => {
    const base = { model: MODEL, prompt: 'The package curl is', max_tokens: 40, temperature: 0, ignore_eos: true };
    const free = await openai.completions.create(base);
    const text = free.choices[0].text;
    const words = text.trim().split(/\s+/).filter((w) => w.length >= 2);
    assert.ok(words.length > 3, text);
    const stop = words[2];
    const r = await openai.completions.create({ ...base, stop: ['@@never@@', stop] });
    assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].stop_reason, stop);
  });
});

describe('raw HTTP', () => {
  test('curl sees text/event-stream, data: framing and a final [DONE]', () => {
    const body = JSON.stringify({ model: MODEL, prompt: 'The package', max_tokens: 5, stream: true,
      temperature: 0, ignore_eos: true, stream_options: { include_usage: true } });
    const p = spawnSync('curl', ['-sS', '-N', '-i', '--max-time', '30', '-H', 'Content-Type: application/json',
      '-d', body, `${server.url}/v1/completions`], { encoding: 'utf8', timeout: 40000 });
    assert.equal(p.error, undefined, 'curl must be installed (scripts/install-deps.sh)');
    assert.equal(p.status, 0, p.stderr);
    const [head, ...rest] = p.stdout.split('\r\n\r\n');
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.match(head, /content-type: text\/event-stream/i);
    const payload = rest.join('\r\n\r\n');
    assert.ok(payload.endsWith('data: [DONE]\n\n'), JSON.stringify(payload.slice(-50)));
    const events = payload.split('\n\n').filter(Boolean);
    for (const e of events) assert.match(e, /^data: /);
    const objs = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
    assert.equal(objs.filter((o) => o.choices.length).map((o) => o.choices[0].text).length, 5);
    assert.equal(objs.at(-1).usage.completion_tokens, 5);
    assert.deepEqual(objs.at(-1).choices, []);
  });

  test('vLLM /generate, /version, /health and /metrics', async () => {
    const g = await postJson(`${server.url}/generate`, { prompt: 'The package', max_tokens: 4, temperature: 0 });
    assert.equal(g.status, 200);
    assert.equal(g.json.text.length, 1);
    assert.ok(g.json.text[0].startsWith('The package'));
    const v = await (await fetch(`${server.url}/version`)).json();
    assert.match(v.version, /^\d+\.\d+\.\d+/);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    const m = await metrics(server);
    assert.ok(metric(m, 'vllm:generation_tokens_total') > 0);
    assert.equal(metric(m, 'vllm:cache_config_info'), 1);
    assert.ok(Object.keys(m).some((k) => k.startsWith('vllm:cache_config_info{') && k.includes('block_size="16"')));
    assert.ok(Object.keys(m).every((k) => k.includes(`model_name="${MODEL}"`)));
    for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
      'vllm:time_to_first_token_seconds_count', 'vllm:e2e_request_latency_seconds_count']) {
      assert.notEqual(metric(m, name), undefined, name);
    }
  });

  test('keep-alive: many requests over one connection', async () => {
    // fetch (undici) reuses its pooled connection; 20 sequential requests must all succeed.
    for (let i = 0; i < 20; i++) {
      const r = await fetch(`${server.url}/v1/models`);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('connection'), 'keep-alive');
      await r.text();
    }
  });
});
