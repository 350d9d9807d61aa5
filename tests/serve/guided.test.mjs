// Guided decoding over HTTP: OpenAI's response_format json_schema on chat,
// vLLM's guided_choice / guided_regex / guided_json / guided_grammar and
// structured_outputs on completions and chat; every
// answer conforms (checked here by parsing, not by halo), and constraints that
// cannot be compiled are a 400 naming the field.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { curlJson, PKGCHAT } from './frontends_lib.mjs';
import { startServer } from './lib.mjs';

let server;
before(async () => { server = await startServer([PKGCHAT, '--served-model-name', 'pkgchat']); });
after(async () => {
  if (!server) return;
  const { code } = await server.stop();
  assert.equal(code, 0, server.stderr);
});

test('chat with response_format json_schema answers JSON of that shape', async () => {
  const schema = { type: 'object', properties: { package: { type: 'string', maxLength: 20 },
    essential: { type: 'boolean' } }, required: ['package', 'essential'], additionalProperties: false };
  const r = await curlJson(`${server.url}/v1/chat/completions`, {
    model: 'pkgchat', messages: [{ role: 'user', content: 'What is curl?' }], temperature: 1, n: 8, seed: 1,
    max_tokens: 80, response_format: { type: 'json_schema', json_schema: { name: 'pkg', schema } } });
  assert.equal(r.status, 200, r.body);
  for (const c of r.json.choices) {
    const v = JSON.parse(c.message.content);
    // Properties come in name order: request JSON objects are parsed without their order.
    assert.deepEqual(Object.keys(v).sort(), ['essential', 'package'], c.message.content);
    assert.equal(typeof v.package, 'string');
    assert.ok(v.package.length <= 20);
    assert.equal(typeof v.essential, 'boolean');
  }
});

test('completions with guided_choice, guided_regex and guided_json', async () => {
  const choice = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'Is curl useful?',
    temperature: 1, n: 8, seed: 2, max_tokens: 10, guided_choice: ['yes', 'no', 'maybe'] });
  assert.equal(choice.status, 200, choice.body);
  for (const c of choice.json.choices) assert.ok(['yes', 'no', 'maybe'].includes(c.text), c.text);
  const regex = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'Version:',
    temperature: 1, n: 8, seed: 3, max_tokens: 12, guided_regex: '[0-9]\\.[0-9]{1,2}\\.[0-9]' });
  assert.equal(regex.status, 200, regex.body);
  for (const c of regex.json.choices) assert.match(c.text, /^[0-9]\.[0-9]{1,2}\.[0-9]$/);
  const js = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'List:',
    temperature: 1, n: 8, seed: 4, max_tokens: 40,
    guided_json: { type: 'array', items: { enum: ['apt', 'dpkg', 'curl'] }, minItems: 1, maxItems: 3 } });
  assert.equal(js.status, 200, js.body);
  for (const c of js.json.choices) {
    const v = JSON.parse(c.text);
    assert.ok(Array.isArray(v) && v.length >= 1 && v.length <= 3, c.text);
    for (const x of v) assert.ok(['apt', 'dpkg', 'curl'].includes(x), c.text);
  }
});

// Checked here without halo's grammar code: a JS regex of the same language,
// and a bracket-matching stack for the recursive one.
test('guided_grammar (GBNF) on chat and completions; structured_outputs', async () => {
  const grammar = 'root ::= "Package: " name "\\nVersion: " [0-9]{1,3} ( "." [0-9]{1,3} ){0,2}\n' +
    'name ::= [a-z0-9] [a-z0-9.+-]{0,15}';
  const chat = await curlJson(`${server.url}/v1/chat/completions`, {
    model: 'pkgchat', messages: [{ role: 'user', content: 'What is curl?' }], temperature: 1, n: 8, seed: 5,
    max_tokens: 80, guided_grammar: grammar });
  assert.equal(chat.status, 200, chat.body);
  // The language is finite (at most 55 characters): every answer completes.
  for (const c of chat.json.choices) {
    assert.equal(c.finish_reason, 'stop', chat.body);
    assert.match(c.message.content, /^Package: [a-z0-9][a-z0-9.+-]{0,15}\nVersion: [0-9]{1,3}(\.[0-9]{1,3}){0,2}$/);
  }

  const balanced = 'root ::= item+\nitem ::= "(" item* ")" | "[" item* "]"';
  const r = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'Brackets:',
    temperature: 1, n: 8, seed: 6, max_tokens: 30, structured_outputs: { grammar: balanced } });
  assert.equal(r.status, 200, r.body);
  for (const c of r.json.choices) {
    const stack = [];
    for (const ch of c.text) {
      if (ch === '(' || ch === '[') stack.push(ch);
      else assert.equal(stack.pop(), ch === ')' ? '(' : '[', c.text);
    }
    assert.ok(c.text.length > 0);
    if (c.finish_reason === 'stop') assert.equal(stack.length, 0, c.text);
  }
  const choice = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'x',
    temperature: 1, n: 4, seed: 7, max_tokens: 8, structured_outputs: { choice: ['on', 'off'] } });
  assert.equal(choice.status, 200, choice.body);
  for (const c of choice.json.choices) assert.ok(['on', 'off'].includes(c.text), c.text);
});

test('bad constraints are a 400 naming the field; the server keeps serving', async () => {
  const cases = [
    [{ guided_regex: '(a' }, /guided_regex/],
    [{ guided_json: { type: 'object', not: {} } }, /guided_json.*'not'/],
    [{ guided_choice: 'yes' }, /guided_choice/],
    [{ guided_grammar: 'root ::= item+\nitem ::= "a" | missing' }, /guided_grammar: grammar: line 2: rule 'missing' is used but never defined/],
    [{ guided_grammar: 'root ::= root "a" | "b"' }, /left-recursive/],
    [{ structured_outputs: { grammar: 'root ::= [z-a]' } }, /structured_outputs.grammar: .*out of order/],
    [{ guided_grammar: 'root ::= "a"', guided_regex: 'a' }, /cannot both/],
    [{ response_format: { type: 'json_schema' } }, /response_format/],
    [{ guided_regex: 'a', guided_choice: ['b'] }, /cannot both/],
  ];
  for (const [extra, why] of cases) {
    const r = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'x', max_tokens: 4, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.body}`);
    assert.match(r.json.error.message, why, JSON.stringify(extra));
  }
  const ok = await curlJson(`${server.url}/v1/completions`, { model: 'pkgchat', prompt: 'x', max_tokens: 2 });
  assert.equal(ok.status, 200);
});
