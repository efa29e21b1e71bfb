// llama.cpp's prefill and decode speed on a GGUF, through node-llama-cpp's prebuilt CPU build
// (its bindings call llama_decode directly): pp = one batch of N prompt tokens, tg = N tokens
// decoded one at a time, as llama-bench defines them. Prints one JSON line.
//
// Usage: node bench.mjs MODEL.gguf THREADS PP TG REPS   (NODE_LLAMA_CPP from the setup script)
import { createRequire } from 'node:module';
import path from 'node:path';

const [modelPath, threadsArg, ppArg, tgArg, repsArg] = process.argv.slice(2);
const threads = Number(threadsArg ?? 2);
const pp = Number(ppArg ?? 512);
const tg = Number(tgArg ?? 128);
const reps = Number(repsArg ?? 2);
const require = createRequire(path.join(process.env.NODE_LLAMA_CPP_DIR, 'package.json'));
const { getLlama, LlamaLogLevel } = await import(require.resolve('node-llama-cpp'));

let backend = '';
const llama = await getLlama({
  gpu: false, build: 'never', logLevel: LlamaLogLevel.debug,
  logger: (level, message) => {
    const match = message.match(/loaded CPU backend from .*\/(libggml-cpu-[\w-]+\.so)/);
    if (match) backend = match[1];
    else if (level === 'error' || level === 'fatal') console.error(message);
  },
});
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({
  contextSize: pp + tg + 16, batchSize: pp, threads, sequences: 1,
});
const sequence = context.getSequence();
const tokens = (n, seed) => Array.from({ length: n }, (_, i) => 1000 + ((i * 7919 + seed) % 20000));

// Warm-up, as infer bench does (a 16-token prompt, 4 tokens): every weight page touched and the
// buffers sized before anything is timed.
{
  await sequence.clearHistory();
  let generated = 0;
  for await (const token of sequence.evaluate(tokens(16, 99), { temperature: 0 })) {
    void token;
    if (++generated >= 4) break;
  }
}
const best = { pp: Infinity, tg: Infinity };
for (let rep = 0; rep < reps; ++rep) {
  await sequence.clearHistory();
  let start = performance.now();
  await sequence.evaluateWithoutGeneratingNewTokens(tokens(pp, rep));
  best.pp = Math.min(best.pp, (performance.now() - start) / 1000);
  await sequence.clearHistory();
  // tg: one prompt token, then tg tokens each decoded alone (greedy).
  let generated = 0;
  start = performance.now();
  const iterator = sequence.evaluate(tokens(1, rep), { temperature: 0 });
  for await (const token of iterator) {
    void token;
    if (++generated >= tg) break;
  }
  best.tg = Math.min(best.tg, (performance.now() - start) / 1000);
}
console.log(JSON.stringify({
  engine: 'llama.cpp (node-llama-cpp prebuilt CPU build)', model: path.basename(modelPath),
  backend, system_info: llama.systemInfo, release: llama.llamaCppRelease.release, threads, pp, tg,
  pp_tok_s: pp / best.pp, tg_tok_s: tg / best.tg,
}));
await context.dispose();
await model.dispose();
await llama.dispose();
