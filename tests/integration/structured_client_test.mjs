// Structured output and tool calling through the official `openai` npm client against
// `infer serve` (issue 26): chat.completions.parse with zodResponseFormat, vLLM's
// structured_outputs (regex, choice) and llama.cpp's json_schema, a bad schema refused with a
// 400 that says where, and tools: a required call whose arguments validate, the whole round
// (the call, the tool's result, the reply), and a streamed call. Random weights at temperature 1
// walk the grammar at random, the hardest case for a constrained decoder; every output must
// still parse. The model: the Llama fixture's tiny shapes with the real Llama 3 vocabulary.
//
// Usage: node --test tests/integration/structured_client_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import {
  makeLlama3VocabModel, requireCached, startServer, weatherDescription, weatherParameters,
} from './serve_process.mjs';

const { default: OpenAI } = requireCached('openai');
const { zodResponseFormat } = requireCached('openai/helpers/zod');
const { z } = requireCached('zod');

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: weatherDescription,
    parameters: weatherParameters,
  },
};

describe('structured output and tools with the openai npm client', () => {
  let model;
  let server;
  let client;
  const messages = [{ role: 'user', content: 'Describe a person.' }];

  before(async () => {
    model = makeLlama3VocabModel();
    server = await startServer(model, ['--max-model-len', '512']);
    client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  test('chat.completions.parse with zodResponseFormat: every reply parses', async () => {
    const Person = z.object({
      name: z.string().max(16),
      age: z.number().int().min(0).max(120),
      role: z.enum(['admin', 'user']),
      tags: z.array(z.string().max(8)).max(3),
    });
    for (let seed = 0; seed < 5; ++seed) {
      const reply = await client.chat.completions.parse({
        model: 'tiny', messages, temperature: 1, seed, max_tokens: 300,
        response_format: zodResponseFormat(Person, 'person'),
      });
      const choice = reply.choices[0];
      assert.equal(choice.finish_reason, 'stop', `seed ${seed}: ${choice.message.content}`);
      assert.ok(choice.message.parsed, `seed ${seed}: ${choice.message.content}`);
      Person.parse(choice.message.parsed);  // zod validates what the client parsed
    }
  });

  test('vLLM structured_outputs (regex, choice) and llama.cpp json_schema', async () => {
    for (let seed = 0; seed < 4; ++seed) {
      const regex = await client.chat.completions.create({
        model: 'tiny', messages, temperature: 1, seed, max_tokens: 40,
        structured_outputs: { regex: '[A-Z][a-z]{2,6} [0-9]{1,3}' },
      });
      assert.match(regex.choices[0].message.content, /^[A-Z][a-z]{2,6} [0-9]{1,3}$/);
      const choice = await client.chat.completions.create({
        model: 'tiny', messages, temperature: 1, seed, max_tokens: 20,
        structured_outputs: { choice: ['red', 'green', 'blue jay'] },
      });
      assert.ok(['red', 'green', 'blue jay'].includes(choice.choices[0].message.content));
      const json = await client.chat.completions.create({
        model: 'tiny', messages, temperature: 1, seed, max_tokens: 100,
        json_schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
          additionalProperties: false },
      });
      assert.equal(json.choices[0].finish_reason, 'stop');
      assert.equal(typeof JSON.parse(json.choices[0].message.content).ok, 'boolean');
    }
  });

  test('a bad schema is a 400 that says where', async () => {
    await assert.rejects(
      client.chat.completions.create({
        model: 'tiny', messages, max_tokens: 5,
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema: {
          type: 'object', properties: { a: { type: 'string', patternProperties: {} } } } } },
      }),
      (error) => error instanceof OpenAI.BadRequestError &&
        /patternProperties/.test(error.message) && /properties\/a/.test(error.message));
  });

  test('tools: a required call validates, and the whole round runs', async () => {
    const call = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'Weather in Paris?' }], temperature: 1,
      seed: 3, max_tokens: 100, tools: [weather], tool_choice: 'required',
    });
    const choice = call.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice.message));
    assert.equal(choice.message.tool_calls.length, 1);
    const toolCall = choice.message.tool_calls[0];
    assert.equal(toolCall.type, 'function');
    assert.equal(toolCall.function.name, 'get_weather');
    assert.match(toolCall.id, /^call_/);
    const args = JSON.parse(toolCall.function.arguments);
    assert.equal(typeof args.city, 'string');
    assert.ok(args.city.length <= 12);
    assert.ok(['c', 'f'].includes(args.unit));
    // The client sends the call back with the tool's result; the model answers (auto).
    const reply = await client.chat.completions.create({
      model: 'tiny', temperature: 0, max_tokens: 8, tools: [weather],
      messages: [{ role: 'user', content: 'Weather in Paris?' }, choice.message,
        { role: 'tool', tool_call_id: toolCall.id, content: '18 C and sunny' }],
    });
    assert.ok(['stop', 'length', 'tool_calls'].includes(reply.choices[0].finish_reason));
  });

  test('tools: a named call, streamed as delta.tool_calls', async () => {
    const stream = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: 'Weather?' }], temperature: 1, seed: 5,
      max_tokens: 100, tools: [weather], stream: true,
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const calls = [];
    let finish;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        for (const delta of c.delta.tool_calls ?? []) {
          calls[delta.index] ??= { id: '', name: '', arguments: '' };
          calls[delta.index].id += delta.id ?? '';
          calls[delta.index].name += delta.function?.name ?? '';
          calls[delta.index].arguments += delta.function?.arguments ?? '';
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(finish, 'tool_calls');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.ok(['c', 'f'].includes(JSON.parse(calls[0].arguments).unit));
  });
});
