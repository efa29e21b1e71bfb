// The official Anthropic npm client (@anthropic-ai/sdk) against `infer serve`'s Messages API
// (issue 27): a message whose greedy text equals `infer generate --chat`, a streamed message the
// SDK's stream helper assembles (finalMessage), stop_sequences, a tool-use round trip with
// tool_choice "any" (the input validates against the tool's schema, then a tool_result turn gets
// a reply), a streamed tool_use, count_tokens equal to the prompt the server's usage reports
// (input_tokens plus the prefix cache's reads, Anthropic's split),
// thinking's budget_tokens accepted, and errors in Anthropic's shape. The key goes as x-api-key,
// as the SDK sends it. The model: the Llama fixture's tiny shapes with the real Llama 3
// vocabulary, tokenizer and chat template.
//
// Usage: node --test tests/integration/anthropic_client_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import {
  generate, makeLlama3VocabModel, requireCached, startServer, weatherDescription, weatherParameters,
} from './serve_process.mjs';

const { default: Anthropic } = requireCached('@anthropic-ai/sdk');
const { z } = requireCached('zod');
const key = 'sk-ant-test';

const weather = {
  name: 'get_weather',
  description: weatherDescription,
  input_schema: weatherParameters,
};
// The same schema, checked by zod (independent of the server's grammar).
const WeatherInput = z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) }).strict();

// The prompt's tokens as Anthropic's usage splits them.
const promptTokens = (usage) =>
  usage.input_tokens + usage.cache_creation_input_tokens + usage.cache_read_input_tokens;
const textOf = (message) =>
  message.content.filter((block) => block.type === 'text').map((block) => block.text).join('');

describe('@anthropic-ai/sdk against infer serve', () => {
  let model;
  let server;
  let client;
  const prompt = 'Name three colours.';  // `infer generate --chat` sends one user message

  before(async () => {
    model = makeLlama3VocabModel({ generationConfig: true });
    server = await startServer(model, ['--max-model-len', '512', '--api-key', key]);
    client = new Anthropic({ apiKey: key, baseURL: server.url, maxRetries: 0 });
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  test('messages.create: greedy text and usage equal infer generate --chat', async () => {
    const expected = await generate(model, ['--chat', '--prompt', prompt, '--temperature', '0',
      '--max-new-tokens', '12']);
    const message = await client.messages.create({
      model: 'tiny', max_tokens: 12, temperature: 0, metadata: { user_id: 'u1' },
      messages: [{ role: 'user', content: prompt }],
    });
    assert.match(message.id, /^msg_/);
    assert.equal(message.type, 'message');
    assert.equal(message.role, 'assistant');
    assert.equal(message.model, 'tiny');
    assert.equal(textOf(message), expected.text);
    assert.equal(message.stop_reason, expected.finish_reason === 'length' ? 'max_tokens' : 'end_turn');
    assert.equal(message.stop_sequence, null);
    // Anthropic's split of the prompt: input_tokens + cache reads + cache writes.
    assert.equal(promptTokens(message.usage), expected.prompt_tokens);
    assert.equal(message.usage.cache_creation_input_tokens, 0);
    assert.equal(message.usage.output_tokens, expected.generated_tokens);
  });

  test('thinking with budget_tokens: accepted, and a model without reasoning tags is unchanged',
    async () => {
      // Llama's template ignores enable_thinking and its vocabulary has no <think>: the budget
      // has nothing to bound (Qwen3's forced end is tested in serve_api_test.cc).
      const request = {
        model: 'tiny', max_tokens: 12, temperature: 0, messages: [{ role: 'user', content: prompt }],
      };
      const plain = await client.messages.create(request);
      const thinking = await client.messages.create(
        { ...request, thinking: { type: 'enabled', budget_tokens: 1024 } });
      assert.deepEqual(thinking.content, plain.content);
      assert.equal(thinking.stop_reason, plain.stop_reason);
      await assert.rejects(client.messages.create(
        { ...request, thinking: { type: 'enabled', budget_tokens: -1 } }),
      (error) => error.status === 400 && /budget_tokens/.test(error.message));
    });

  test('messages.stream: the SDK assembles the same message as create', async () => {
    const request = {
      model: 'tiny', max_tokens: 16, temperature: 0, system: 'You are terse.',
      messages: [{ role: 'user', content: [{ type: 'text', text: prompt }] }],
    };
    const whole = await client.messages.create(request);
    const stream = client.messages.stream(request);
    const events = [];
    let streamedText = '';
    stream.on('streamEvent', (event) => events.push(event.type));
    stream.on('text', (delta) => { streamedText += delta; });
    const final = await stream.finalMessage();
    assert.deepEqual(final.content, whole.content);
    assert.equal(streamedText, textOf(whole));
    assert.equal(final.stop_reason, whole.stop_reason);
    assert.equal(promptTokens(final.usage), promptTokens(whole.usage));
    assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
    // The same prompt again: every whole 16-token block before its last token is a cache read,
    // which the SDK takes from message_delta's usage.
    assert.equal(final.usage.cache_read_input_tokens,
      Math.floor((promptTokens(final.usage) - 1) / 16) * 16);
    assert.equal(final.usage.input_tokens,
      promptTokens(final.usage) - final.usage.cache_read_input_tokens);
    assert.equal(events[0], 'message_start');
    assert.equal(events.at(-1), 'message_stop');
    assert.equal(events.at(-2), 'message_delta');
    if (whole.content.length > 0) {
      for (const name of ['content_block_start', 'content_block_delta', 'content_block_stop']) {
        assert.ok(events.includes(name), `${name} in ${events}`);
      }
    }
  });

  test('stop_sequences: the reply stops before the first one, stop_reason stop_sequence', async () => {
    const expected = await generate(model, ['--chat', '--prompt', prompt, '--temperature', '0',
      '--max-new-tokens', '24']);
    assert.ok(expected.text.length >= 8, `greedy text too short to pick from: ${expected.text}`);
    const stop = expected.text.slice(5, 7);
    const message = await client.messages.create({
      model: 'tiny', max_tokens: 24, temperature: 0, stop_sequences: ['never-in-noise', stop],
      messages: [{ role: 'user', content: prompt }],
    });
    assert.equal(textOf(message), expected.text.slice(0, expected.text.indexOf(stop)));
    assert.equal(message.stop_reason, 'stop_sequence');
    assert.equal(message.stop_sequence, stop);
  });

  test('tool use with tool_choice any: the input validates, then a tool_result gets a reply',
    async () => {
      const question = { role: 'user', content: 'Weather in Paris?' };
      const call = await client.messages.create({
        model: 'tiny', max_tokens: 100, temperature: 1, tools: [weather],
        tool_choice: { type: 'any' }, messages: [question],
      });
      assert.equal(call.stop_reason, 'tool_use', JSON.stringify(call.content));
      const uses = call.content.filter((block) => block.type === 'tool_use');
      assert.ok(uses.length >= 1);
      for (const use of uses) {
        assert.match(use.id, /^toolu_/);
        assert.equal(use.name, 'get_weather');
        WeatherInput.parse(use.input);
      }
      const reply = await client.messages.create({
        model: 'tiny', max_tokens: 8, temperature: 0, tools: [weather],
        messages: [question, { role: 'assistant', content: call.content }, {
          role: 'user',
          content: uses.map((use) => ({
            type: 'tool_result', tool_use_id: use.id, content: '18 C and sunny',
          })),
        }],
      });
      assert.equal(reply.type, 'message');
      assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(reply.stop_reason));
      assert.ok(promptTokens(reply.usage) > promptTokens(call.usage));
    });

  test('a named tool, streamed: the SDK assembles the tool_use input from input_json_delta',
    async () => {
      const stream = client.messages.stream({
        model: 'tiny', max_tokens: 100, temperature: 1, tools: [weather],
        tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
        messages: [{ role: 'user', content: 'Weather?' }],
      });
      const final = await stream.finalMessage();
      assert.equal(final.stop_reason, 'tool_use');
      const uses = final.content.filter((block) => block.type === 'tool_use');
      assert.equal(uses.length, 1);
      assert.equal(uses[0].name, 'get_weather');
      WeatherInput.parse(uses[0].input);
    });

  test('count_tokens equals the input_tokens of the same request', async () => {
    for (const request of [
      { messages: [{ role: 'user', content: prompt }] },
      { system: [{ type: 'text', text: 'Be brief.' }], tools: [weather],
        messages: [{ role: 'user', content: 'Weather in Rome?' }] },
    ]) {
      const counted = await client.messages.countTokens({ model: 'tiny', ...request });
      const message = await client.messages.create({ model: 'tiny', max_tokens: 1, ...request });
      assert.equal(counted.input_tokens, promptTokens(message.usage));
      assert.ok(counted.input_tokens > 0);
    }
  });

  test('errors in Anthropic\'s shape: missing max_tokens, bad types, another model, bad key',
    async () => {
      const expectError = async (promise, Type, status, type) => {
        await assert.rejects(promise, (error) => {
          assert.ok(error instanceof Type, `${error}`);
          assert.equal(error.status, status);
          assert.equal(error.error.type, 'error');
          assert.equal(error.error.error.type, type);
          assert.equal(typeof error.error.error.message, 'string');
          return true;
        });
      };
      const messages = [{ role: 'user', content: prompt }];
      await expectError(client.messages.create({ model: 'tiny', messages }),
        Anthropic.BadRequestError, 400, 'invalid_request_error');
      await expectError(client.messages.create({ model: 'tiny', max_tokens: 'x', messages }),
        Anthropic.BadRequestError, 400, 'invalid_request_error');
      await expectError(client.messages.create({ model: 'tiny', max_tokens: 4, messages: [] }),
        Anthropic.BadRequestError, 400, 'invalid_request_error');
      await expectError(client.messages.create({ model: 'tiny', max_tokens: 4,
        messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }),
      Anthropic.BadRequestError, 400, 'invalid_request_error');
      await expectError(client.messages.create({ model: 'other', max_tokens: 4, messages }),
        Anthropic.NotFoundError, 404, 'not_found_error');
      const stranger = new Anthropic({ apiKey: 'wrong', baseURL: server.url, maxRetries: 0 });
      await expectError(stranger.messages.create({ model: 'tiny', max_tokens: 4, messages }),
        Anthropic.AuthenticationError, 401, 'authentication_error');
    });

  test('/metrics counts the new routes by handler, method and status', async () => {
    const count = (text, handler, status) => {
      const line = text.split('\n').find((l) => l.startsWith(
        `http_requests_total{handler="${handler}",method="POST",status="${status}"}`));
      return line ? Number(line.split(' ').pop()) : 0;
    };
    // Counted once each response is written, perhaps just after the client read it.
    let text = '';
    for (let i = 0; i < 50; ++i) {
      text = await (await fetch(`${server.url}/metrics`, { headers: { 'x-api-key': key } })).text();
      if (count(text, '/v1/messages', '2xx') >= 11 && count(text, '/v1/messages', '4xx') >= 7) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // messages: 11 answered (the create, thinking, stream, stop, tool and count tests), 7 refused.
    assert.equal(count(text, '/v1/messages', '2xx'), 11, text);
    assert.equal(count(text, '/v1/messages', '4xx'), 7, text);
    assert.equal(count(text, '/v1/messages/count_tokens', '2xx'), 2, text);
  });
});
