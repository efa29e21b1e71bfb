// Helpers of the node tests that drive `infer serve` (openai_client_test.mjs,
// chat_page_test.mjs): the npm packages from .cache/npm, the tiny Llama model folder with the
// real Llama 3 vocabulary (as tests/testing/llama3_vocab_model.h builds it for the C++ tests),
// a server child process on a free loopback port, and `infer generate` as the reference.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const infer = process.env.INFER_BINARY ?? path.join(root, 'build/infer');
// require() of the packages scripts/fetch_tokenizers.sh installs into .cache/npm.
export const requireCached = createRequire(path.join(root, '.cache/npm/package.json'));

// The Llama fixture's tiny shapes with the real Llama 3 vocabulary, tokenizer and chat
// template, in a new temporary folder (--load-format dummy: seeded random weights).
// $INFER_TEST_FIXTURE names another fixture's architecture and shapes (qwen3_moe: the same
// tests on a mixture of experts), still with Llama 3's vocabulary and template.
export function makeLlama3VocabModel({ generationConfig = false, maxPositionEmbeddings } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'infer-node-'));
  const fixture = process.env.INFER_TEST_FIXTURE ?? 'llama';
  const config = JSON.parse(fs.readFileSync(
    path.join(root, `tests/fixtures/models/${fixture}/model/config.json`), 'utf8'));
  Object.assign(config,
    { vocab_size: 128256, bos_token_id: 128000, eos_token_id: [128001, 128008, 128009] });
  if (maxPositionEmbeddings !== undefined) config.max_position_embeddings = maxPositionEmbeddings;
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  for (const name of ['tokenizer.json', 'tokenizer_config.json']) {
    fs.copyFileSync(path.join(root, '.cache/tokenizers/llama3', name), path.join(dir, name));
  }
  if (generationConfig) {
    fs.copyFileSync(
      path.join(root, 'tests/fixtures/configs/Llama-3.2-1B-Instruct/generation_config.json'),
      path.join(dir, 'generation_config.json'));
  }
  return dir;
}

// `infer serve --model MODEL --load-format dummy ... EXTRA` on 127.0.0.1 with a free port;
// resolves to {child, url (http://127.0.0.1:PORT), log()} once it listens.
// The date chat templates read (strftime_now: Llama 3's "Today Date"), pinned so that prompts,
// and what the tiny models answer them, do not change with the day the tests run.
export const pinnedDateEnv = { ...process.env, SOURCE_DATE_EPOCH: '1796644800' };  // 07 Dec 2026

export function startServer(model, extra) {
  return new Promise((resolve, reject) => {
    const child = spawn(infer, ['serve', '--model', model, '--load-format', 'dummy', '--threads',
      '1', '--host', '127.0.0.1', '--port', '0', '--served-model-name', 'tiny', ...extra],
    { stdio: ['ignore', 'ignore', 'pipe'], env: pinnedDateEnv });
    let log = '';
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 120000);
    child.stderr.on('data', (data) => {
      log += data;
      const match = log.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (match) {
        clearTimeout(timer);
        resolve({ child, url: match[1], log: () => log });
      }
    });
    child.on('exit', (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
  });
}

// `infer generate --json` with `model` (--load-format dummy, one thread) and `args`: the
// reference the API tests compare with. Asynchronous on purpose: a synchronous child blocks the
// event loop for seconds under ASan, so undici would miss the server closing an idle keep-alive
// connection and reuse a dead socket.
export async function generate(model, args) {
  const { stdout } = await promisify(execFile)(infer, ['generate', '--model', model,
    '--load-format', 'dummy', '--threads', '1', '--json', ...args],
  { encoding: 'utf8', env: pinnedDateEnv });
  return JSON.parse(stdout.trim().split('\n').pop());
}

// The weather tool the tool-calling tests share: its description and its arguments' JSON schema
// (each test wraps them in its API's tool shape).
export const weatherDescription = 'The current weather in a city';
export const weatherParameters = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 12 },
    unit: { type: 'string', enum: ['c', 'f'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
