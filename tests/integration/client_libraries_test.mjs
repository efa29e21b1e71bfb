// Structured output and tools through the client libraries applications use (issue 26):
// LangChain's ChatOpenAI.withStructuredOutput and the Vercel AI SDK's generateObject and
// streamText with tools, against `infer serve` (the Llama fixture's tiny shapes with the real
// Llama 3 vocabulary and chat template, random weights at temperature 1: only the grammar keeps
// the replies valid).
//
// Usage: node --test tests/integration/client_libraries_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, test } from 'node:test';

import { makeLlama3VocabModel, requireCached, startServer } from './serve_process.mjs';

const { z } = requireCached('zod');
const { ChatOpenAI } = requireCached('@langchain/openai');
const { generateObject, streamText, tool, stepCountIs } = requireCached('ai');
const { createOpenAI } = requireCached('@ai-sdk/openai');

const Person = z.object({
  name: z.string().max(16),
  age: z.number().int().min(0).max(120),
  email: z.string().email().max(40).optional(),
});

describe('client libraries against infer serve', () => {
  let model;
  let server;

  before(async () => {
    model = makeLlama3VocabModel();
    server = await startServer(model, ['--max-model-len', '1024']);
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  for (const method of ['jsonSchema', 'functionCalling']) {
    test(`LangChain withStructuredOutput (${method})`, async () => {
      const chat = new ChatOpenAI({
        model: 'tiny', apiKey: 'none', temperature: 1, maxTokens: 200, maxRetries: 0,
        configuration: { baseURL: `${server.url}/v1` },
      });
      const structured = chat.withStructuredOutput(Person, { name: 'person', method });
      for (let i = 0; i < 3; ++i) {
        const person = await structured.invoke('Describe a person.');
        Person.parse(person);
      }
    });
  }

  test('Vercel AI SDK generateObject', async () => {
    const provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
    for (let seed = 0; seed < 3; ++seed) {
      const { object, finishReason } = await generateObject({
        model: provider.chat('tiny'), schema: Person, prompt: 'Describe a person.',
        temperature: 1, seed, maxOutputTokens: 200, maxRetries: 0,
      });
      assert.equal(finishReason, 'stop');
      Person.parse(object);
    }
  });

  test('Vercel AI SDK streamText with a tool: the call runs and the reply follows', async () => {
    const provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'none' });
    const calls = [];
    const result = streamText({
      model: provider.chat('tiny'), prompt: 'What is the weather in Paris?', temperature: 1,
      seed: 2, maxOutputTokens: 60, maxRetries: 0, toolChoice: 'required',
      stopWhen: stepCountIs(2),
      tools: {
        weather: tool({
          description: 'The weather in a city',
          inputSchema: z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) }),
          execute: async ({ city, unit }) => {
            calls.push({ city, unit });
            return { city, temperature: 18, unit };
          },
        }),
      },
      prepareStep: ({ stepNumber }) => (stepNumber > 0 ? { toolChoice: 'none' } : {}),
    });
    for await (const _ of result.fullStream) { /* drain */ }
    const steps = await result.steps;
    assert.ok(calls.length >= 1, 'the tool was never called');
    assert.ok(['c', 'f'].includes(calls[0].unit));
    assert.equal(steps[0].finishReason, 'tool-calls');
    assert.equal(steps.length, 2);
  });
});
