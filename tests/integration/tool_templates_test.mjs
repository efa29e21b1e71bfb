// Chat templates with tools (issue 26): the Llama 3.2 and Qwen3 templates rendered by infer's
// Jinja engine (`infer chat-template`, the contract of DESIGN.md) must equal Hugging Face's own
// Jinja (@huggingface/jinja, what transformers.js renders chat templates with) for conversations
// with tools, an assistant's tool call and the tool's result, as apply_chat_template passes them.
//
// Usage: node --test tests/integration/tool_templates_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { infer, requireCached, root } from './serve_process.mjs';

const { Template } = requireCached('@huggingface/jinja');

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The current weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city'],
    },
  },
};
const time = { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } };

const conversations = [
  [{ role: 'user', content: 'What is the weather in Paris?' }],
  [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Weather in Rome?' }],
  [
    { role: 'user', content: 'Weather in Paris?' },
    {
      role: 'assistant', content: '',
      tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: { city: 'Paris' } } }],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '18 C and sunny' },
  ],
];

for (const [key, dir] of [['llama3', 'Llama-3.2-1B-Instruct'], ['qwen3', 'Qwen3-1.7B']]) {
  test(`${dir}: tools render as Hugging Face's Jinja renders them`, (t) => {
    const configPath = path.join(root, '.cache/tokenizers', key, 'tokenizer_config.json');
    if (!fs.existsSync(configPath)) {
      t.skip('no tokenizer files (scripts/fetch_tokenizers.sh)');
      return;
    }
    const config = JSON.parse(fs.readFileSync(configPath, 'utf8'));
    const special = {};
    for (const name of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
      const value = config[name];
      if (value !== undefined && value !== null) special[name] = value.content ?? value;
    }
    const template = new Template(config.chat_template);
    const model = fs.mkdtempSync(path.join(os.tmpdir(), 'infer-tools-'));
    for (const name of ['tokenizer.json', 'tokenizer_config.json']) {
      fs.copyFileSync(path.join(root, '.cache/tokenizers', key, name), path.join(model, name));
    }
    const lines = [];
    const expected = [];
    for (const messages of conversations) {
      for (const tools of [[weather], [weather, time]]) {
        // date_string pins the Llama template's date (it reads strftime_now otherwise).
        const options = { tools, add_generation_prompt: true, date_string: '26 Nov 2026' };
        lines.push(JSON.stringify({ messages, options }));
        expected.push(template.render({ messages, ...special, ...options }));
      }
    }
    const input = path.join(model, 'input.jsonl');
    fs.writeFileSync(input, lines.join('\n') + '\n');
    const output = execFileSync(infer, ['chat-template', '--model', model, '--input-jsonl', input],
      { encoding: 'utf8' }).trim().split('\n').map((line) => JSON.parse(line));
    assert.equal(output.length, expected.length);
    for (let i = 0; i < expected.length; ++i) {
      assert.equal(output[i].error, undefined, `case ${i}: ${output[i].error}`);
      assert.equal(output[i].text, expected[i], `case ${i}`);
    }
    fs.rmSync(model, { recursive: true, force: true });
  });
}
