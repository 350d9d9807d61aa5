// The OpenAI Agents SDK (@openai/agents, over chat completions) running an
// agent with one function tool against halo until it gives a final answer.
// The model is a small random qwen3-family model (the demo model's 512-token
// context is too short for Qwen3's tool prompt) under Qwen3's chat template
// (hermes tool calls). The first turn is tool_choice "required", so guided decoding makes
// the model call the tool. The SDK then runs the tool, resets tool_choice and
// sends the conversation back: the assistant's tool_calls with content null and
// the tool's result with its tool_call_id. halo prepares that history for the
// template, and the model answers in text.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { makeTinyModel, REPO, tempDir } from './frontends_lib.mjs';
import { AGENTS_SDK_SKIP, client, JS_DIR, startServer } from './lib.mjs';

const require = createRequire(path.join(JS_DIR, 'package.json'));
const QWEN3 = path.join(REPO, 'tests', 'data', 'tokenizers', 'qwen3', 'tokenizer_config.json');

let server;
let tmp;
before(async () => {
  tmp = tempDir('halo-agents-');
  const template = path.join(tmp.dir, 'qwen3.jinja');
  writeFileSync(template, JSON.parse(readFileSync(QWEN3, 'utf8')).chat_template);
  const model = await makeTinyModel(path.join(tmp.dir, 'tiny'));
  server = await startServer([model, '--served-model-name', 'pkgchat', '--chat-template', template]);
});
after(async () => {
  if (server) assert.equal((await server.stop()).code, 0, server.stderr);
  tmp?.cleanup();
});

test('an agent with a function tool calls it and gives a final answer', { skip: AGENTS_SDK_SKIP }, async () => {
  const { Agent, OpenAIChatCompletionsModel, run, setTracingDisabled, tool } = await import(
    require.resolve('@openai/agents'));
  const { z } = await import(require.resolve('zod'));
  setTracingDisabled(true);  // no trace export: this machine has no network
  const calls = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: z.object({ city: z.string().max(20) }),
    execute: async ({ city }) => {
      calls.push(city);
      return `It is 21 degrees in ${city}.`;
    },
  });
  const agent = new Agent({
    name: 'Weather',
    instructions: 'Answer with the weather tool.',
    tools: [getWeather],
    model: new OpenAIChatCompletionsModel(client(server), 'pkgchat'),
    modelSettings: { toolChoice: 'required', parallelToolCalls: false, temperature: 0, maxTokens: 120 },
  });
  const result = await run(agent, 'What is the weather in Paris?', { maxTurns: 4 });
  assert.equal(calls.length, 1, `the tool ran ${calls.length} times`);
  assert.equal(typeof calls[0], 'string');
  assert.ok(calls[0].length <= 20);
  assert.equal(typeof result.finalOutput, 'string');
  assert.ok(result.finalOutput.length > 0, 'an empty final answer');
  // The SDK's record: a tool call, its output, then the answer.
  const types = result.newItems.map((i) => i.type);
  assert.deepEqual(types.slice(0, 2), ['tool_call_item', 'tool_call_output_item'], types.join(', '));
  assert.equal(types.at(-1), 'message_output_item', types.join(', '));
});
