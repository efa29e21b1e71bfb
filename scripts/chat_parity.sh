#!/usr/bin/env bash
# The same greedy chat request through `infer serve`'s /v1/chat/completions and through
# `infer generate --chat` must give the same token ids (issue 14's acceptance on the dev configs).
# Usage: scripts/chat_parity.sh MODEL_DIR [MAX_TOKENS] [extra load options, e.g. --load-format dummy]
set -euo pipefail
cd "$(dirname "$0")/.."
model="$1"
max_tokens="${2:-24}"
shift $(($# >= 2 ? 2 : 1))
prompt="Write a haiku about CPUs."
work="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
build/infer serve --model "$model" "$@" --port 0 --served-model-name parity 2>"$work/serve.log" &
server=$!
build/infer generate --model "$model" "$@" --chat --prompt "$prompt" --temperature 0 \
  --max-new-tokens "$max_tokens" --json 2>/dev/null | tail -1 >"$work/generate.json"
for _ in $(seq 300); do grep -q "listening on" "$work/serve.log" && break; sleep 0.5; done
url="$(grep -o 'http://[0-9.]*:[0-9]*' "$work/serve.log" | head -1)"
curl -s "$url/v1/chat/completions" -H 'Content-Type: application/json' -d "{\"model\": \"parity\",
  \"messages\": [{\"role\": \"user\", \"content\": \"$prompt\"}], \"max_tokens\": $max_tokens,
  \"temperature\": 0, \"return_token_ids\": true}" >"$work/chat.json"
python3 - "$work/generate.json" "$work/chat.json" "$model" <<'PY'
import json, sys
generated = json.load(open(sys.argv[1]))
chat = json.load(open(sys.argv[2]))
served = chat["choices"][0]["token_ids"]
same = generated["token_ids"] == served
print(f"{sys.argv[3]}: {len(served)} tokens, prompt {chat['usage']['prompt_tokens']} tokens: "
      f"{'identical' if same else 'DIFFERENT'} to infer generate --chat")
sys.exit(0 if same else 1)
PY
