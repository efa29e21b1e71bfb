// The official `openai` npm client's Responses API (client.responses) and the OpenAI Agents SDK
// (@openai/agents) against `infer serve` (issue 27): a response whose greedy text equals
// `infer generate --chat`, a streamed response the SDK's stream helper assembles equal to the
// non-streamed one, a function-tool round trip continued with previous_response_id and again
// with the items passed back by hand (the same prompt, so the same greedy reply), structured
// output (text.format json_schema) validated with zod, a stored response's GET and DELETE and the
// 404s after, refusals in OpenAI's error shape, the route counter, and an agent with one function
// tool run to completion. The model: the Llama fixture's tiny shapes with the real Llama 3
// vocabulary, tokenizer and chat template (--load-format dummy: seeded random weights).
//
// Usage: node --test tests/integration/responses_client_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import {
  generate, makeLlama3VocabModel, requireCached, startServer, weatherDescription, weatherParameters,
} from './serve_process.mjs';

const { default: OpenAI } = requireCached('openai');
const { zodTextFormat } = requireCached('openai/helpers/zod');
const { z } = requireCached('zod');
const key = 'sk-test-key';

const weather = {
  type: 'function',
  name: 'get_weather',
  description: weatherDescription,
  parameters: weatherParameters,
  strict: true,
};
// The same schema, checked by zod (independent of the server's grammar).
const WeatherArguments = z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) }).strict();

// A response's output without the ids each response mints anew (and without the `parsed` the
// SDK's stream helper adds to each text part).
const withoutIds = (output) => output.map(({ id, ...item }) => (item.content
  ? { ...item, content: item.content.map(({ parsed, ...part }) => part) } : item));

describe('openai client.responses against infer serve', () => {
  let model;
  let server;
  let client;
  const prompt = 'Name three colours.';  // `infer generate --chat` sends one user message

  before(async () => {
    model = makeLlama3VocabModel({ generationConfig: true });
    server = await startServer(model, ['--max-model-len', '512', '--api-key', key,
      '--responses-store-entries', '64']);
    client = new OpenAI({ apiKey: key, baseURL: `${server.url}/v1`, maxRetries: 0 });
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  test('responses.create: greedy text and usage equal infer generate --chat', async () => {
    const expected = await generate(model, ['--chat', '--prompt', prompt, '--temperature', '0',
      '--max-new-tokens', '12']);
    const response = await client.responses.create({
      model: 'tiny', input: prompt, max_output_tokens: 12, temperature: 0,
      metadata: { run: 'a' }, user: 'u1',
    });
    assert.match(response.id, /^resp_/);
    assert.equal(response.object, 'response');
    assert.equal(response.model, 'tiny');
    assert.ok(Math.abs(response.created_at - Date.now() / 1000) < 600);
    // output_text is the SDK's: the text of the message items it read.
    assert.equal(response.output_text, expected.text);
    const messages = response.output.filter((item) => item.type === 'message');
    assert.equal(messages.length, expected.text ? 1 : 0);
    if (messages.length) {
      assert.equal(messages[0].role, 'assistant');
      assert.match(messages[0].id, /^msg_/);
      assert.equal(messages[0].content[0].type, 'output_text');
    }
    const cut = expected.finish_reason === 'length';
    assert.equal(response.status, cut ? 'incomplete' : 'completed');
    assert.deepEqual(response.incomplete_details, cut ? { reason: 'max_output_tokens' } : null);
    assert.equal(response.usage.input_tokens, expected.prompt_tokens);
    assert.equal(response.usage.output_tokens, expected.generated_tokens);
    assert.equal(response.usage.total_tokens, expected.prompt_tokens + expected.generated_tokens);
    assert.equal(response.temperature, 0);
    assert.equal(response.max_output_tokens, 12);
    assert.deepEqual(response.metadata, { run: 'a' });
    assert.equal(response.user, 'u1');
    assert.equal(response.store, true);
    assert.equal(response.error, null);
  });

  test('responses.stream: finalResponse equals the non-streamed response', async () => {
    const request = {
      model: 'tiny', instructions: 'You are terse.', max_output_tokens: 16, temperature: 0,
      input: [{ role: 'user', content: [{ type: 'input_text', text: prompt }] }],
    };
    const whole = await client.responses.create(request);
    const stream = client.responses.stream(request);
    const events = [];
    let streamedText = '';
    stream.on('event', (event) => events.push(event));
    stream.on('response.output_text.delta', (event) => { streamedText += event.delta; });
    const final = await stream.finalResponse();
    assert.equal(final.output_text, whole.output_text);
    assert.equal(streamedText, whole.output_text);
    assert.deepEqual(withoutIds(final.output), withoutIds(whole.output));
    const { input_tokens_details: cached, ...counts } = final.usage;
    const { input_tokens_details: wholeCached, ...wholeCounts } = whole.usage;
    assert.deepEqual(counts, wholeCounts);
    // The same input again: its whole 16-token blocks before the last token come from the
    // prefix cache.
    assert.equal(cached.cached_tokens, Math.floor((final.usage.input_tokens - 1) / 16) * 16);
    assert.ok(wholeCached.cached_tokens <= cached.cached_tokens);
    assert.equal(final.status, whole.status);
    assert.equal(final.instructions, 'You are terse.');
    assert.notEqual(final.id, whole.id);
    const types = events.map((event) => event.type);
    assert.deepEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
    assert.equal(types.at(-1), whole.status === 'completed' ? 'response.completed'
      : 'response.incomplete');
    assert.deepEqual(events.map((event) => event.sequence_number), events.map((_, i) => i));
    if (whole.output_text) {
      for (const name of ['response.output_item.added', 'response.content_part.added',
        'response.output_text.done', 'response.content_part.done', 'response.output_item.done']) {
        assert.ok(types.includes(name), `${name} in ${types}`);
      }
    }
  });

  test('function tool round trip: previous_response_id and the items passed back by hand',
    async () => {
      const question = { role: 'user', content: 'Weather in Paris?' };
      const call = await client.responses.create({
        model: 'tiny', input: [question], tools: [weather], tool_choice: 'required',
        temperature: 0, max_output_tokens: 100,
      });
      assert.equal(call.status, 'completed');
      const calls = call.output.filter((item) => item.type === 'function_call');
      assert.ok(calls.length >= 1, JSON.stringify(call.output));
      for (const item of calls) {
        assert.equal(item.name, 'get_weather');
        assert.match(item.call_id, /^call_/);
        assert.match(item.id, /^fc_/);
        assert.equal(item.status, 'completed');
        WeatherArguments.parse(JSON.parse(item.arguments));
      }
      const results = calls.map((item) => ({
        type: 'function_call_output', call_id: item.call_id, output: '18 C and sunny',
      }));
      const continued = await client.responses.create({
        model: 'tiny', previous_response_id: call.id, input: results, tools: [weather],
        temperature: 0, max_output_tokens: 8,
      });
      assert.equal(continued.previous_response_id, call.id);
      assert.ok(continued.usage.input_tokens > call.usage.input_tokens);
      // The same conversation by hand: the question, the call items as the SDK returned them,
      // the results. The same prompt, so the same greedy reply.
      const byHand = await client.responses.create({
        model: 'tiny', input: [question, ...call.output, ...results], tools: [weather],
        temperature: 0, max_output_tokens: 8, store: false,
      });
      assert.equal(byHand.usage.input_tokens, continued.usage.input_tokens);
      assert.equal(byHand.output_text, continued.output_text);
      assert.deepEqual(withoutIds(byHand.output).map(({ call_id, ...rest }) => rest),
        withoutIds(continued.output).map(({ call_id, ...rest }) => rest));
      // A streamed call: the arguments come as function_call_arguments events.
      const stream = client.responses.stream({
        model: 'tiny', input: [question], tools: [weather],
        tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false,
        temperature: 1, max_output_tokens: 100,
      });
      let argumentsDone = null;
      stream.on('response.function_call_arguments.done', (event) => { argumentsDone = event; });
      const final = await stream.finalResponse();
      const streamed = final.output.filter((item) => item.type === 'function_call');
      assert.equal(streamed.length, 1);
      assert.equal(argumentsDone.arguments, streamed[0].arguments);
      WeatherArguments.parse(JSON.parse(streamed[0].arguments));
    });

  test('structured output: text.format json_schema parses and validates with zod', async () => {
    const City = z.object({
      name: z.string().max(16),
      population: z.number().int().min(0),
      capital: z.boolean(),
    });
    const response = await client.responses.parse({
      model: 'tiny', input: 'Describe a city.', temperature: 0, max_output_tokens: 200,
      text: { format: zodTextFormat(City, 'city') },
    });
    assert.equal(response.status, 'completed', response.output_text);
    assert.equal(response.text.format.type, 'json_schema');
    assert.ok(response.output_parsed, response.output_text);
    City.parse(response.output_parsed);
    City.parse(JSON.parse(response.output_text));
    const object = await client.responses.create({
      model: 'tiny', input: 'A JSON object.', temperature: 0, max_output_tokens: 100,
      text: { format: { type: 'json_object' } },
    });
    assert.equal(object.status, 'completed', object.output_text);
    assert.equal(typeof JSON.parse(object.output_text), 'object');
  });

  test('a stored response: GET returns it, DELETE deletes it, then 404', async () => {
    const response = await client.responses.create({
      model: 'tiny', input: prompt, max_output_tokens: 4, temperature: 0,
    });
    const retrieved = await client.responses.retrieve(response.id);
    assert.deepEqual(retrieved, response);
    const headers = { Authorization: `Bearer ${key}` };
    const deleted = await fetch(`${server.url}/v1/responses/${response.id}`,
      { method: 'DELETE', headers });
    assert.equal(deleted.status, 200);
    assert.deepEqual(await deleted.json(), { id: response.id, object: 'response', deleted: true });
    const expectNotFound = async (promise) => {
      await assert.rejects(promise, (error) => {
        assert.ok(error instanceof OpenAI.NotFoundError, `${error}`);
        assert.equal(error.status, 404);
        assert.equal(typeof error.error.message, 'string');
        assert.equal(error.error.type, 'not_found_error');
        return true;
      });
    };
    await expectNotFound(client.responses.retrieve(response.id));
    await expectNotFound(client.responses.delete(response.id));
    await expectNotFound(client.responses.create({
      model: 'tiny', input: 'Hi', previous_response_id: response.id,
    }));
    // store: false keeps nothing.
    const unstored = await client.responses.create({
      model: 'tiny', input: prompt, max_output_tokens: 2, store: false,
    });
    assert.equal(unstored.store, false);
    await expectNotFound(client.responses.retrieve(unstored.id));
  });

  test('refusals in OpenAI\'s error shape: built-in tools, background, images, bad types',
    async () => {
      const expectBadRequest = async (body, param) => {
        await assert.rejects(client.responses.create({ model: 'tiny', ...body }), (error) => {
          assert.ok(error instanceof OpenAI.BadRequestError, `${error}`);
          assert.equal(error.status, 400);
          assert.equal(error.error.type, 'invalid_request_error');
          assert.equal(error.param, param);
          return true;
        });
      };
      await expectBadRequest({ input: 'Hi', tools: [{ type: 'web_search' }] }, 'tools');
      await expectBadRequest({ input: 'Hi', background: true }, 'background');
      await expectBadRequest({ input: 'Hi', truncation: 'auto' }, 'truncation');
      await expectBadRequest({ input: 'Hi', include: ['reasoning.encrypted_content'] }, 'include');
      await expectBadRequest({ input: [{ role: 'user', content: [
        { type: 'input_image', image_url: 'https://example.com/a.png', detail: 'auto' }] }] },
      'input');
      await expectBadRequest({ input: 'Hi', max_output_tokens: 'x' }, 'max_output_tokens');
      await assert.rejects(client.responses.create({ model: 'other', input: 'Hi' }),
        (error) => error instanceof OpenAI.NotFoundError);
    });

  test('/metrics counts the new routes by handler, method and status', async () => {
    const count = (text, handler, method, status) => {
      const line = text.split('\n').find((l) => l.startsWith(
        `http_requests_total{handler="${handler}",method="${method}",status="${status}"}`));
      return line ? Number(line.split(' ').pop()) : 0;
    };
    let text = '';
    for (let i = 0; i < 50; ++i) {
      text = await (await fetch(`${server.url}/metrics`,
        { headers: { Authorization: `Bearer ${key}` } })).text();
      if (count(text, '/v1/responses', 'POST', '4xx') >= 8) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // POST: 11 answered by the tests above; 8 refused (1 previous_response_id, 7 refusals).
    assert.equal(count(text, '/v1/responses', 'POST', '2xx'), 11, text);
    assert.equal(count(text, '/v1/responses', 'POST', '4xx'), 8, text);
    assert.equal(count(text, '/v1/responses/{response_id}', 'GET', '2xx'), 1, text);
    assert.equal(count(text, '/v1/responses/{response_id}', 'GET', '4xx'), 2, text);
    assert.equal(count(text, '/v1/responses/{response_id}', 'DELETE', '2xx'), 1, text);
    assert.equal(count(text, '/v1/responses/{response_id}', 'DELETE', '4xx'), 1, text);
  });

  test('a body over --max-body-size is a 413 in OpenAI\'s error shape', async () => {
    const reply = await fetch(`${server.url}/v1/responses`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'tiny', input: 'x'.repeat(5 << 20) }),
    });
    assert.equal(reply.status, 413);
    const body = await reply.json();
    assert.equal(body.error.type, 'request_too_large');
    assert.equal(typeof body.error.message, 'string');
  });

  test('@openai/agents: an agent with one function tool runs to completion', async () => {
    const {
      Agent, run, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled, tool,
    } = requireCached('@openai/agents');
    setTracingDisabled(true);  // no network here: no traces to upload
    setDefaultOpenAIClient(client);
    setOpenAIAPI('responses');
    const calls = [];
    const getWeather = tool({
      name: 'get_weather',
      description: 'The current weather in a city',
      parameters: z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) }),
      execute: async (input) => {
        calls.push(input);
        return `18 degrees ${input.unit} in ${input.city}`;
      },
    });
    // The first turn is forced to call the tool; the SDK then resets tool_choice (auto) and the
    // model answers.
    const agent = new Agent({
      name: 'Weather', instructions: 'Answer weather questions with the tool.', model: 'tiny',
      tools: [getWeather],
      modelSettings: { toolChoice: 'get_weather', temperature: 0, maxTokens: 64 },
    });
    const result = await run(agent, 'Weather in Paris?', { maxTurns: 4 });
    assert.ok(calls.length >= 1, 'the tool ran');
    for (const input of calls) WeatherArguments.parse(input);
    assert.equal(typeof result.finalOutput, 'string');
    const outputs = result.newItems.filter((item) => item.type === 'tool_call_output_item');
    assert.equal(outputs.length, calls.length);
  });
});
