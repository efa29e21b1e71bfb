// vLLM's POST /tokenize and POST /detokenize on `infer serve` (issue 27), against independent
// references: Hugging Face's own tokenizers (@anush008/tokenizers, the Rust crate) encode and
// decode the same text with the same tokenizer.json, and Hugging Face's Jinja
// (@huggingface/jinja) renders the chat template for `messages`. The model: the Llama fixture's
// tiny shapes with the real Llama 3 vocabulary, tokenizer and chat template.
//
// Usage: node --test tests/integration/tokenize_routes_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { makeLlama3VocabModel, requireCached, startServer } from './serve_process.mjs';

const { Tokenizer } = requireCached('@anush008/tokenizers');
const { Template } = requireCached('@huggingface/jinja');

const texts = [
  'Hello, world!',
  '  leading spaces, tabs\tand\nnewlines  ',
  'Ünïcödé 日本語 🙂 and numbers 1234567',
  '<|begin_of_text|>special tokens in text<|eot_id|>',
];

describe('/tokenize and /detokenize against Hugging Face tokenizers', () => {
  let model;
  let server;
  let hf;
  const key = 'sk-tokenize';
  const maxModelLen = 256;

  async function post(route, body, headers = { Authorization: `Bearer ${key}` }) {
    const response = await fetch(`${server.url}${route}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: response.status, body: await response.json() };
  }

  before(async () => {
    model = makeLlama3VocabModel();
    server = await startServer(model, ['--max-model-len', String(maxModelLen), '--api-key', key]);
    hf = Tokenizer.fromFile(path.join(model, 'tokenizer.json'));
  });

  after(() => {
    server?.child.kill('SIGTERM');
    if (model) fs.rmSync(model, { recursive: true, force: true });
  });

  test('prompt: ids, count and max_model_len equal HF encode, with and without BOS', async () => {
    for (const text of texts) {
      for (const addSpecialTokens of [true, false]) {
        const expected = (await hf.encode(text, null, { addSpecialTokens })).getIds();
        const body = { model: 'tiny', prompt: text };
        if (!addSpecialTokens) body.add_special_tokens = false;
        const { status, body: reply } = await post('/tokenize', body);
        assert.equal(status, 200, JSON.stringify(reply));
        assert.deepEqual(Object.keys(reply), ['count', 'max_model_len', 'tokens']);
        assert.deepEqual(reply.tokens, expected, text);
        assert.equal(reply.count, expected.length);
        assert.equal(reply.max_model_len, maxModelLen);
      }
    }
  });

  test('return_token_strs: HF token strings', async () => {
    const { body } = await post('/tokenize', { prompt: texts[2], return_token_strs: true });
    assert.deepEqual(body.token_strs, body.tokens.map((id) => hf.idToToken(id)));
  });

  test('messages: the chat template as HF Jinja renders it, then HF encode', async () => {
    const config = JSON.parse(fs.readFileSync(path.join(model, 'tokenizer_config.json'), 'utf8'));
    const template = new Template(config.chat_template);
    const messages = [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'Name three colours.' },
    ];
    // date_string pins the Llama template's date (it reads strftime_now otherwise).
    const kwargs = { date_string: '26 Nov 2026' };
    for (const addGenerationPrompt of [true, false]) {
      const text = template.render({
        messages, bos_token: config.bos_token?.content ?? config.bos_token, add_generation_prompt: addGenerationPrompt, ...kwargs,
      });
      // The template writes BOS itself: a chat's default is no special tokens (as vLLM).
      const expected = (await hf.encode(text, null, { addSpecialTokens: false })).getIds();
      const body = { messages, chat_template_kwargs: kwargs };
      if (!addGenerationPrompt) body.add_generation_prompt = false;
      const { status, body: reply } = await post('/tokenize', body);
      assert.equal(status, 200, JSON.stringify(reply));
      assert.deepEqual(reply.tokens, expected);
      assert.equal(reply.count, expected.length);
    }
  });

  test('detokenize: HF decode of the same ids (special tokens kept)', async () => {
    for (const text of texts) {
      const ids = (await hf.encode(text, null, { addSpecialTokens: true })).getIds();
      const { status, body } = await post('/detokenize', { model: 'tiny', tokens: ids });
      assert.equal(status, 200, JSON.stringify(body));
      assert.deepEqual(body, { prompt: await hf.decode(ids, false) });
    }
  });

  test('bad input: 400 in OpenAI\'s error shape; another model 404; no key 401', async () => {
    for (const [route, body] of [
      ['/tokenize', {}],
      ['/tokenize', { prompt: 'a', messages: [{ role: 'user', content: 'b' }] }],
      ['/tokenize', { prompt: 7 }],
      ['/tokenize', { prompt: 'a', add_special_tokens: 'yes' }],
      ['/tokenize', { messages: [] }],
      ['/tokenize', '{not json'],
      ['/detokenize', {}],
      ['/detokenize', { tokens: 'abc' }],
      ['/detokenize', { tokens: [1, -2] }],
      ['/detokenize', { tokens: [128256 + 1000] }],
    ]) {
      const { status, body: reply } = await post(route, body);
      assert.equal(status, 400, `${route} ${JSON.stringify(body)}: ${JSON.stringify(reply)}`);
      assert.equal(reply.error.type, 'invalid_request_error');
      assert.equal(typeof reply.error.message, 'string');
      assert.equal(reply.error.code, 400);
    }
    const other = await post('/tokenize', { model: 'other', prompt: 'a' });
    assert.equal(other.status, 404);
    assert.equal(other.body.error.type, 'not_found_error');
    const unauthorized = await post('/detokenize', { tokens: [1] }, {});
    assert.equal(unauthorized.status, 401);
    assert.equal(unauthorized.body.error.type, 'authentication_error');
  });
});
