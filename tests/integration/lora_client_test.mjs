// LoRA adapters through the official `openai` npm client: GET /v1/models lists each adapter with
// its parent, and a chat completion that names an adapter runs with it, token for token what
// `infer generate --lora` gives. The model: the Llama fixture's tiny shapes with the real Llama 3
// vocabulary (--load-format dummy); the adapters: PEFT folders from tests/lora/make_adapter.py.
//
// Usage: node --test tests/integration/lora_client_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { generate, makeLlama3VocabModel, requireCached, root, startServer } from './serve_process.mjs';

const { default: OpenAI } = requireCached('openai');

describe('openai npm client with LoRA adapters', () => {
  let model;
  let server;
  let client;
  const adapters = {};

  before(async () => {
    model = makeLlama3VocabModel({ generationConfig: true });
    for (const [name, rank] of [['sql', '8'], ['poet', '16']]) {
      adapters[name] = path.join(model, `adapter-${name}`);
      // Shapes from config.json alone (the dummy model has no weights on disk).
      execFileSync('/usr/bin/python3', [path.join(root, 'tests/lora/make_adapter.py'), model,
        adapters[name], '--rank', rank, '--dtype', 'bf16', '--strength', '0',
        '--seed', rank]);
    }
    server = await startServer(model, ['--max-model-len', '256', '--enable-lora',
      '--lora-modules', `sql=${adapters.sql}`, `poet=${adapters.poet}`]);
    client = new OpenAI({ apiKey: 'none', baseURL: `${server.url}/v1`, maxRetries: 0 });
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  test('models.list names the base and each adapter with its parent', async () => {
    const ids = {};
    for await (const entry of client.models.list()) ids[entry.id] = entry;
    assert.deepEqual(Object.keys(ids).sort(), ['poet', 'sql', 'tiny']);
    assert.equal(ids.sql.parent, 'tiny');
    assert.equal(ids.poet.root, adapters.poet);
    assert.equal(ids.tiny.parent, null);
  });

  test('a chat completion by adapter name runs with it: infer generate --lora tokens', async () => {
    const prompt = 'Name three colours.';
    for (const name of ['sql', 'poet']) {
      const expected = await generate(model, ['--chat', '--prompt', prompt, '--temperature', '0',
        '--max-new-tokens', '10', '--lora', adapters[name]]);
      const reply = await client.chat.completions.create({
        model: name, messages: [{ role: 'user', content: prompt }], max_tokens: 10,
        temperature: 0, return_token_ids: true,
      });
      assert.equal(reply.model, name);
      assert.deepEqual(reply.choices[0].token_ids, expected.token_ids, name);
      assert.equal(reply.choices[0].message.content, expected.text, name);
    }
  });

  test('an unknown model is the client\'s NotFoundError', async () => {
    await assert.rejects(client.chat.completions.create({
      model: 'nobody', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2,
    }), (error) => error instanceof OpenAI.NotFoundError && error.status === 404);
  });
});
