// The official `openai` npm client against `infer serve` over loopback (issue 14): chat and
// completions, streaming and not, n, logprobs, stream_options.include_usage, a bad key, error
// cases. Token ids and text are compared with what `infer generate` gives for the same
// settings. The model: the Llama fixture's tiny shapes with the real Llama 3 vocabulary,
// tokenizer and chat template (--load-format dummy: seeded random weights).
//
// Usage: node --test tests/integration/openai_client_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { generate, makeLlama3VocabModel, requireCached, startServer } from './serve_process.mjs';

const { default: OpenAI } = requireCached('openai');
const key = 'sk-test-key';

describe('openai npm client against infer serve', () => {
  async function prefixCacheHits() {
    const text = await (await fetch(`${server.url}/metrics`,
      { headers: { Authorization: `Bearer ${key}` } })).text();
    const line = text.split('\n').find((l) => l.startsWith('vllm:prefix_cache_hits_total{'));
    return Number(line.split(' ').pop());
  }

  let model;
  let server;
  let client;
  const messages = [
    { role: 'system', content: 'You are terse.' },
    { role: 'user', content: 'Name three colours.' },
  ];
  const chatPrompt = 'Name three colours.';  // `infer generate --chat` sends one user message

  before(async () => {
    model = makeLlama3VocabModel({ generationConfig: true });
    server = await startServer(model, ['--max-model-len', '256', '--api-key', key,
      '--completions-format', 'openai']);
    client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  test('chat, not streaming: greedy tokens and text equal infer generate --chat', async () => {
    const expected = await generate(model, ['--chat', '--prompt', chatPrompt, '--temperature', '0',
      '--max-new-tokens', '12']);
    const reply = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: chatPrompt }], max_tokens: 12,
      temperature: 0, return_token_ids: true,
    });
    assert.equal(reply.object, 'chat.completion');
    assert.equal(reply.choices.length, 1);
    const choice = reply.choices[0];
    assert.deepEqual(choice.token_ids, expected.token_ids);
    assert.equal(choice.message.role, 'assistant');
    assert.equal(choice.message.content, expected.text);
    assert.equal(choice.finish_reason, expected.finish_reason === 'length' ? 'length' : 'stop');
    assert.equal(reply.usage.prompt_tokens, expected.prompt_tokens);
    assert.equal(reply.usage.completion_tokens, expected.generated_tokens);
    assert.equal(reply.usage.total_tokens, expected.prompt_tokens + expected.generated_tokens);
  });

  test('chat, streaming with include_usage: the deltas add up to the whole reply', async () => {
    const whole = await client.chat.completions.create({
      model: 'tiny', messages, max_completion_tokens: 10, temperature: 0,
    });
    const stream = await client.chat.completions.create({
      model: 'tiny', messages, max_completion_tokens: 10, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let role;
    let finish;
    let usage;
    let chunks = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      ++chunks;
      if (chunk.usage) usage = chunk.usage;
      for (const choice of chunk.choices) {
        assert.equal(choice.index, 0);
        role ??= choice.delta.role;
        text += choice.delta.content ?? '';
        if (choice.finish_reason) finish = choice.finish_reason;
      }
    }
    assert.ok(chunks >= 3, `only ${chunks} chunks`);
    assert.equal(role, 'assistant');
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(finish, whole.choices[0].finish_reason);
    for (const key of ['prompt_tokens', 'completion_tokens', 'total_tokens']) {
      assert.equal(usage[key], whole.usage[key], key);
    }
    // The same prompt again: every whole 16-token block before its last token comes from the
    // prefix cache, which prompt_tokens_details reports.
    const blocks = Math.floor((usage.prompt_tokens - 1) / 16) * 16;
    assert.ok(blocks >= 16, `prompt of ${usage.prompt_tokens} tokens`);
    assert.equal(usage.prompt_tokens_details.cached_tokens, blocks);
    assert.ok(whole.usage.prompt_tokens_details.cached_tokens <= blocks);
  });

  test('completions, not streaming and streaming: equal infer generate --prompt', async () => {
    const prompt = 'The capital of France is';
    const expected = await generate(model, ['--prompt', prompt, '--temperature', '0',
      '--max-new-tokens', '8']);
    const reply = await client.completions.create({
      model: 'tiny', prompt, max_tokens: 8, temperature: 0, return_token_ids: true,
    });
    assert.equal(reply.object, 'text_completion');
    assert.deepEqual(reply.choices[0].token_ids, expected.token_ids);
    assert.equal(reply.choices[0].text, expected.text);
    assert.equal(reply.usage.prompt_tokens, expected.prompt_tokens);
    const stream = await client.completions.create({
      model: 'tiny', prompt, max_tokens: 8, temperature: 0, stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, expected.text);
    const echoed = await client.completions.create({
      model: 'tiny', prompt, max_tokens: 8, temperature: 0, echo: true,
    });
    assert.equal(echoed.choices[0].text, prompt + expected.text);
  });

  test('n: 2 with a seed: choice i equals infer generate --seed seed+i', async () => {
    const settings = ['--temperature', '1.0', '--top-p', '1', '--max-new-tokens', '10'];
    const first = await generate(model, ['--chat', '--prompt', chatPrompt, '--seed', '11', ...settings]);
    const second = await generate(model, ['--chat', '--prompt', chatPrompt, '--seed', '12', ...settings]);
    const hitsBefore = await prefixCacheHits();
    const reply = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: chatPrompt }], n: 2, seed: 11,
      temperature: 1.0, top_p: 1, max_tokens: 10, return_token_ids: true,
    });
    assert.equal(reply.choices.length, 2);
    const byIndex = [...reply.choices].sort((a, b) => a.index - b.index);
    assert.deepEqual(byIndex[0].token_ids, first.token_ids);
    assert.deepEqual(byIndex[1].token_ids, second.token_ids);
    assert.notDeepEqual(first.token_ids, second.token_ids);
    assert.equal(reply.usage.completion_tokens,
      first.generated_tokens + second.generated_tokens);
    // The second choice reads the prompt's full KV blocks from the first (16 tokens each).
    const fullBlocks = Math.floor((reply.usage.prompt_tokens - 1) / 16) * 16;
    assert.ok(fullBlocks > 0);
    assert.ok(await prefixCacheHits() - hitsBefore >= fullBlocks);
    // Streaming n: 2 delivers both indices.
    const stream = await client.chat.completions.create({
      model: 'tiny', messages: [{ role: 'user', content: chatPrompt }], n: 2, seed: 11,
      temperature: 1.0, top_p: 1, max_tokens: 10, stream: true,
    });
    const texts = ['', ''];
    for await (const chunk of stream) {
      for (const choice of chunk.choices) texts[choice.index] += choice.delta.content ?? '';
    }
    assert.deepEqual(texts, [first.text, second.text]);
  });

  test('logprobs: the greedy token is the most likely one, alternatives sorted', async () => {
    const reply = await client.chat.completions.create({
      model: 'tiny', messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
    });
    const content = reply.choices[0].logprobs.content;
    assert.equal(content.length, reply.usage.completion_tokens);
    let text = '';
    for (const entry of content) {
      assert.equal(entry.top_logprobs.length, 3);
      assert.ok(entry.logprob <= 0);
      assert.equal(entry.token, entry.top_logprobs[0].token);
      assert.equal(entry.logprob, entry.top_logprobs[0].logprob);
      assert.deepEqual(entry.bytes, [...Buffer.from(entry.token, 'utf8')]);
      for (let i = 1; i < 3; ++i) {
        assert.ok(entry.top_logprobs[i].logprob <= entry.top_logprobs[i - 1].logprob);
      }
      const mass = entry.top_logprobs.reduce((sum, alt) => sum + Math.exp(alt.logprob), 0);
      assert.ok(mass <= 1 + 1e-6);
      text += entry.token;
    }
    assert.equal(text, reply.choices[0].message.content);
    const completion = await client.completions.create({
      model: 'tiny', prompt: 'Hello', max_tokens: 4, temperature: 0, logprobs: 2,
    });
    const logprobs = completion.choices[0].logprobs;
    assert.equal(logprobs.tokens.join(''), completion.choices[0].text);
    assert.equal(logprobs.token_logprobs.length, 4);
    assert.equal(Object.keys(logprobs.top_logprobs[0]).length, 2);
  });

  test('a bad API key gets 401 in OpenAI\'s error shape', async () => {
    const stranger = new OpenAI({ apiKey: 'wrong', baseURL: `${server.url}/v1`, maxRetries: 0 });
    await assert.rejects(
      stranger.chat.completions.create({ model: 'tiny', messages, max_tokens: 2 }),
      (error) => error instanceof OpenAI.AuthenticationError && error.status === 401);
  });

  test('errors: an unknown model (404), an unsupported feature and bad values (400)', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: 'gpt-4', messages, max_tokens: 2 }),
      (error) => error instanceof OpenAI.NotFoundError && /gpt-4/.test(error.message));
    await assert.rejects(
      client.chat.completions.create({
        model: 'tiny', messages, tools: [{ type: 'function', function: { name: 'no spaces' } }],
      }),
      (error) => error instanceof OpenAI.BadRequestError && error.param === 'tools');
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages, max_tokens: 100000 }),
      (error) => error instanceof OpenAI.BadRequestError && /max_model_len/.test(error.message));
    await assert.rejects(
      client.chat.completions.create({ model: 'tiny', messages, temperature: -1 }),
      (error) => error instanceof OpenAI.BadRequestError && /temperature/.test(error.message));
    // Unknown fields are ignored, as OpenAI-compatible servers do.
    const reply = await client.chat.completions.create({
      model: 'tiny', messages, max_tokens: 2, some_future_field: { x: 1 },
    });
    assert.equal(reply.choices.length, 1);
  });

  test('models lists the served model', async () => {
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['tiny']);
  });
});
