// The web chat page at GET / in real headless Chromium (Debian's `chromium`, driven by
// playwright-core from npm): load the page, send a message, see the reply stream in, press
// stop, and check through /metrics that the server freed (aborted) the request; then a short
// reply runs to its end and shows TTFT and tokens/s, and the conversation is kept. A screenshot
// of the page mid-stream is saved to $INFER_ARTIFACTS (ctest: build/test-artifacts).
//
// Usage: node --test tests/integration/chat_page_test.mjs   (INFER_BINARY=build/infer)
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { makeLlama3VocabModel, requireCached, startServer } from './serve_process.mjs';

const { chromium } = requireCached('playwright-core');
const browserPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const artifacts = process.env.INFER_ARTIFACTS ?? path.join(os.tmpdir(), 'infer-test-artifacts');

async function metric(url, series) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? NaN : Number(line.slice(series.length + 1));
}

let model;
let server;
let browser;

before(async () => {
  model = makeLlama3VocabModel();
  server = await startServer(model, ['--max-model-len', '4096']);
  browser = await chromium.launch({ executablePath: browserPath, args: ['--no-sandbox'] });
});

after(async () => {
  await browser?.close();
  server?.child.kill('SIGTERM');
  if (model) fs.rmSync(model, { recursive: true, force: true });
});

test('the chat page streams a reply, stops it, and the server frees the request', async () => {
  const page = await browser.newPage();
  await page.goto(server.url + '/');
  await page.waitForFunction(() => document.getElementById('model').textContent === 'tiny');
  await page.fill('#max_tokens', '3000');
  await page.fill('#temperature', '0.8');
  await page.fill('#input', 'Tell me a long story.');
  await page.click('#send');
  const reply = page.locator('.msg.assistant .content').last();
  // Streamed: the text is seen at two different, growing lengths before the reply ends.
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('.msg.assistant .content');
    return all.length > 0 && all[all.length - 1].textContent.length > 0;
  });
  const early = await reply.textContent();
  await page.waitForFunction((length) => {
    const all = document.querySelectorAll('.msg.assistant .content');
    return all[all.length - 1].textContent.length > length;
  }, early.length);
  const later = await reply.textContent();
  assert.ok(later.startsWith(early), 'the reply only grows');
  // A screenshot mid-stream for people to look at (the assertions are on the DOM, not on it).
  fs.mkdirSync(artifacts, { recursive: true });
  const shot = path.join(artifacts, 'chat_page_midstream.png');
  await page.screenshot({ path: shot });
  assert.equal(fs.readFileSync(shot).subarray(1, 4).toString(), 'PNG');
  console.log(`screenshot mid-stream: ${shot}`);
  assert.equal(await metric(server.url, 'vllm:num_requests_running{model_name="tiny"}'), 1);
  assert.equal(await page.isEnabled('#stop'), true);
  await page.click('#stop');
  await page.waitForSelector('.msg.assistant[data-finish="stopped"]');
  // The server noticed the disconnect and cancelled the request.
  let running = NaN;
  for (let i = 0; i < 100; ++i) {
    running = await metric(server.url, 'vllm:num_requests_running{model_name="tiny"}');
    if (running === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(running, 0);
  assert.equal(await metric(server.url,
    'vllm:request_success_total{model_name="tiny",finished_reason="abort"}'), 1);
  const stats = await page.textContent('.msg.assistant .stats');
  assert.match(stats, /TTFT \d+\.\d\d s/);
  assert.match(stats, /\d+\.\d tok\/s · stopped/);
  assert.equal(await page.isEnabled('#send'), true);

  // A short reply runs to its end; the conversation (two turns) stays in the page.
  await page.fill('#max_tokens', '5');
  await page.fill('#input', 'And a short one.');
  await page.press('#input', 'Enter');
  await page.waitForSelector('.msg.assistant[data-finish="length"]');
  assert.equal(await page.locator('.msg.user').count(), 2);
  assert.equal(await page.locator('.msg.assistant').count(), 2);
  const last = await page.locator('.msg.assistant .stats').last().textContent();
  assert.match(last, /^5 tokens · TTFT \d+\.\d\d s · \d+\.\d tok\/s · length$/);
  await page.close();
});
