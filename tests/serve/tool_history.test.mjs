// A conversation with tools as the OpenAI SDKs and the Agents SDK send it
// (an assistant message with content null and tool_calls whose arguments are
// JSON text, then tool messages with tool_call_id), rendered by Qwen3's own
// chat template: halo's render equals Python's jinja2 rendering of the
// conversation as vLLM prepares it (arguments as objects, content ""), and
// jinja2 given the null as it is fails, as the issue reported. Malformed
// tool history is a 400 naming the message.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { curlJson, PKGCHAT, REPO, tempDir } from './frontends_lib.mjs';
import { startServer } from './lib.mjs';

const QWEN3 = path.join(REPO, 'tests', 'data', 'tokenizers', 'qwen3', 'tokenizer_config.json');
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const SDK_MESSAGES = [
  { role: 'user', content: 'Weather in Paris and Zürich?' },
  { role: 'assistant', content: null, tool_calls: [
    { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
    { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Zürich"}' } }] },
  { role: 'tool', tool_call_id: 'call_1', content: '{"temp": 21}' },
  { role: 'tool', tool_call_id: 'call_2', content: '{"temp": 17}' },
];
// What vLLM hands the template.
const PREPARED = structuredClone(SDK_MESSAGES);
PREPARED[1].content = '';
for (const c of PREPARED[1].tool_calls) c.function.arguments = JSON.parse(c.function.arguments);

let server;
let tmp;
before(async () => {
  tmp = tempDir('halo-tool-history-').dir;
  const template = path.join(tmp, 'qwen3.jinja');
  writeFileSync(template, JSON.parse(readFileSync(QWEN3, 'utf8')).chat_template);
  server = await startServer([PKGCHAT, '--served-model-name', 'pkgchat', '--chat-template', template]);
});
after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
});

function jinja2(messages) {
  const cases = path.join(tmp, 'cases.json');
  const out = path.join(tmp, 'out.json');
  writeFileSync(cases, JSON.stringify({ template_cases: [], chat_cases: [
    { name: 'c', config: path.relative(REPO, QWEN3), messages, tools: TOOLS }] }));
  execFileSync('/usr/bin/python3', [path.join(REPO, 'tests', 'jinja', 'render_reference.py'), cases, out, REPO]);
  return JSON.parse(readFileSync(out, 'utf8')).chat_cases.c;
}

test('the SDK-shaped tool conversation renders as jinja2 renders the vLLM-prepared one', async () => {
  const r = await curlJson(`${server.url}/v1/chat/completions/render`,
    { model: 'pkgchat', messages: SDK_MESSAGES, tools: TOOLS });
  assert.equal(r.status, 200, r.body);
  const want = jinja2(PREPARED);
  assert.equal(want.error, undefined, want.error);
  assert.equal(r.json.prompt, want.text);
  assert.ok(r.json.prompt.includes('<tool_response>\n{"temp": 17}\n</tool_response>'), r.json.prompt);
  // The null left in breaks the template in jinja2 too.
  assert.match(jinja2(SDK_MESSAGES).error, /NoneType/);
  // Arguments that are no JSON object (a call cut off by max_tokens) stay text.
  const cut = structuredClone(SDK_MESSAGES);
  cut[1].tool_calls[1].function.arguments = '{"city": "Zü';
  const rc = await curlJson(`${server.url}/v1/chat/completions/render`, { model: 'pkgchat', messages: cut, tools: TOOLS });
  assert.equal(rc.status, 200, rc.body);
  assert.ok(rc.json.prompt.includes('"arguments": {"city": "Zü}\n'), rc.json.prompt);
  // And the chat itself is served.
  const chat = await curlJson(`${server.url}/v1/chat/completions`,
    { model: 'pkgchat', messages: SDK_MESSAGES, tools: TOOLS, max_tokens: 4 });
  assert.equal(chat.status, 200, chat.body);
});

test('malformed tool history is a 400 naming the message; the server keeps serving', async () => {
  const cases = [
    [[SDK_MESSAGES[0], SDK_MESSAGES[1], { role: 'tool', content: 'x' }], /messages\[2\].*tool_call_id/],
    [[SDK_MESSAGES[0], { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function',
      function: { arguments: '{}' } }] }], /messages\[1\]\.tool_calls\[0\]\.function\.name/],
    [[SDK_MESSAGES[0], { role: 'assistant', content: null, tool_calls: 'x' }], /messages\[1\]\.tool_calls must be a list/],
  ];
  for (const [messages, why] of cases) {
    const r = await curlJson(`${server.url}/v1/chat/completions`, { model: 'pkgchat', messages, tools: TOOLS, max_tokens: 2 });
    assert.equal(r.status, 400, r.body);
    assert.equal(r.json.error.param, 'messages');
    assert.match(r.json.error.message, why);
  }
  const ok = await curlJson(`${server.url}/v1/chat/completions`,
    { model: 'pkgchat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  assert.equal(ok.status, 200, ok.body);
});
