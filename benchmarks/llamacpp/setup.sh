#!/usr/bin/env bash
# Installs llama.cpp for the side-by-side benchmark: node-llama-cpp from npm, whose prebuilt CPU
# build of llama.cpp (libggml-cpu-{haswell,cascadelake,zen4,...}.so, picked at run time) comes
# in @node-llama-cpp/linux-x64. Nothing is compiled. Into .cache/llamacpp (gitignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
version="3.22.1"
dir=".cache/llamacpp"
mkdir -p "$dir"
if grep -qs "\"version\": \"$version\"" "$dir/node_modules/node-llama-cpp/package.json"; then
  echo "llamacpp setup: node-llama-cpp@$version present"
  exit 0
fi
[[ -f "$dir/package.json" ]] || echo '{"private": true}' >"$dir/package.json"
(cd "$dir" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm install --silent --no-audit --no-fund \
  "node-llama-cpp@$version")
echo "llamacpp setup: node-llama-cpp@$version installed ($(cat "$dir/node_modules/node-llama-cpp/llama/llama.cpp.info.json" | tr -d '\n '))"
