// Hugging Face's native tokenizer (Rust crate via @anush008/tokenizers) on the same texts as
// benchmarks/tokenizer_bench.cc, single thread, so the two can be compared as a ratio.
// Usage: node benchmarks/hf_tokenizer_bench.mjs [--repetitions N] [--json FILE]
// (run scripts/fetch_tokenizers.sh first; run from the repository root).
import { createRequire } from "node:module";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

process.env.RAYON_NUM_THREADS = "1";
process.env.TOKENIZERS_PARALLELISM = "false";

const root = process.cwd();
const require = createRequire(path.join(root, ".cache/npm/package.json"));
const { Tokenizer } = require("@anush008/tokenizers");

const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : fallback;
};
const repetitions = Number(option("--repetitions", "5"));
const jsonPath = option("--json", "");
const models = option("--models", "llama3,qwen3,gemma3").split(",");
const texts = option("--texts", "english_1mib.txt,mixed_1mib.txt").split(",");
const tokenizersDir = option("--tokenizers-dir", ".cache/tokenizers");
const textDir = option("--text-dir", "tests/fixtures/tokenizer/bench");

const results = [];
console.log("| model | text | load_ms | MB/s | stddev | Mtok/s | tokens |");
console.log("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
for (const model of models) {
  const loadStart = process.hrtime.bigint();
  const tokenizer = Tokenizer.fromFile(path.join(tokenizersDir, model, "tokenizer.json"));
  const loadS = Number(process.hrtime.bigint() - loadStart) / 1e9;
  for (const textName of texts) {
    const buffer = readFileSync(path.join(textDir, textName));
    const text = buffer.toString("utf8");
    let numTokens = (await tokenizer.encode(text, null, { addSpecialTokens: false })).getIds().length;
    const mbS = [];
    for (let r = 0; r < repetitions; ++r) {
      // Time the native encode only (getIds copies into JS afterwards).
      const start = process.hrtime.bigint();
      const encoding = await tokenizer.encode(text, null, { addSpecialTokens: false });
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      numTokens = encoding.getIds().length;
      mbS.push(buffer.length / 1e6 / seconds);
    }
    const mean = mbS.reduce((a, b) => a + b, 0) / mbS.length;
    const stddev = mbS.length > 1
      ? Math.sqrt(mbS.reduce((a, b) => a + (b - mean) ** 2, 0) / (mbS.length - 1)) : 0;
    const tokS = (mean * 1e6 / buffer.length) * numTokens;
    console.log(`| ${model} | ${textName} | ${(loadS * 1e3).toFixed(0)} | ${mean.toFixed(2)} | ` +
                `${stddev.toFixed(2)} | ${(tokS / 1e6).toFixed(3)} | ${numTokens} |`);
    results.push({ model, text: textName, text_bytes: buffer.length, num_tokens: numTokens,
                   load_time_s: loadS, encode_mb_s: mean, encode_mb_s_stddev: stddev,
                   encode_tok_s: tokS });
  }
}
if (jsonPath) {
  writeFileSync(jsonPath, JSON.stringify({ benchmark: "hf_tokenizer_encode",
    implementation: "@anush008/tokenizers 0.6.0 (HF tokenizers Rust)", threads: 1,
    repetitions, results }, null, 2) + "\n");
}
