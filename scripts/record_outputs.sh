#!/usr/bin/env bash
# Records the outputs of `infer generate` and of every `infer serve` route on the repository's
# tiny fixture models, normalised so that two runs of the same binary give identical files.
# Use it to check that a refactor changes no behaviour:
#
#   scripts/record_outputs.sh OLD_INFER /tmp/rec_a
#   scripts/record_outputs.sh NEW_INFER /tmp/rec_b
#   diff -r /tmp/rec_a /tmp/rec_b          (or: scripts/record_outputs.sh --compare A B)
#
# Usage: scripts/record_outputs.sh INFER_BINARY OUT_DIR
#        scripts/record_outputs.sh --compare DIR_A DIR_B
#
# OUT_DIR (replaced; an existing folder must be empty or an earlier recording) gets:
#   SUMMARY.tsv                  case, HTTP status (or exit code), bytes of the recorded body
#   generate/CASE.{cmd,out,err,rc}   `infer generate` (and a few other subcommands): the command
#                                line, stdout, stderr, exit code
#   serve/SERVER/CASE.{req,head,body}  the request (method, path, body), the status line and
#                                headers, the response body (SSE streams as their raw bytes)
#   serve/SERVER/server.rc       the server's exit code after SIGTERM
#
# Models (all tiny; nothing is downloaded):
#   tests/fixtures/models/{llama,qwen3,gemma3}/model: real bf16 weights, vocab 512, no tokenizer
#     (prompts as token ids);
#   the same shapes with the real Llama 3 / Qwen3 / Gemma 3 vocabularies, tokenizers and chat
#     templates from .cache/tokenizers (scripts/fetch_tokenizers.sh) and --load-format dummy
#     (seeded random weights), as tests/testing/llama3_vocab_model.h builds them. The Llama 3
#     template's strftime_now("%d %b %Y") is replaced by its own fallback "26 Jul 2024": the
#     prompt would otherwise hold today's date, so runs on two days would differ.
#
# Every request is deterministic: greedy (temperature 0) or sampled with a fixed seed (the llama3
# and qwen3 servers also have --seed for the requests that give none: Responses and Anthropic
# requests have no seed field). Requests are sent one at a time, so batches and the prefix cache
# see the same sequence each run. Everything runs with --threads 1 on 127.0.0.1; every curl has
# --max-time and every subcommand a timeout; the servers are stopped on exit (trap). About 250
# cases, 35-65 s on 2 busy cores. The servers' "loading" answers (HTTP 503) are caught by making
# one model's config.json a FIFO that is written only after they are recorded.
#
# Normalised (normalise.py below), because they change from run to run by design:
#   * ids minted per request: chatcmpl-N, cmpl-N (counters), msg_<24 hex> (Anthropic),
#     resp_<32 hex> and its items msg_/rs_/fc_<32 hex>_N (random), call_<24 hex> and
#     toolu_<24 hex> (random tool-call ids) -> <kind>_<k>, numbered by first appearance in the
#     file (so equal ids stay equal), also in X-Request-Id and the server's error messages;
#   * "created" / "created_at" / "completed_at" Unix times -> 0;
#   * `infer generate --json`'s "timing" object -> "<timing>", and its stderr summary's
#     "prefill X ms, decode Y tok/s" -> "<ms>", "<tok/s>";
#   * /metrics: the *_seconds histograms' buckets and sums (latencies) -> <t> (their _count
#     lines are kept); the response's Content-Length then drops too;
#   * SSE heartbeat comments (": ping", written after 1 s without output: load dependent);
#   * OpenAI streams of several choices (n = 2, several prompts): their chunks interleave as the
#     choices happen to be scheduled, so they are stably sorted by choice index (each choice's
#     chunks keep their order; the usage chunk and [DONE] stay last);
#   * HTTP Date headers (httplib sends none today); X-Replica-Id is fixed by --replica-id rec;
#   * log lines on stderr: spdlog's "[HH:MM:SS.mmm]" and "in N ms"; `infer inspect`'s load time
#     and resident memory;
#   * the temporary folder, OUT_DIR and the repository's path -> $WORK, $OUT, $REPO.
#
# Environment: KEEP_WORK=1 keeps the temporary folder (model folders, server logs);
# RECORD_TIMES=1 prints each case's milliseconds on stderr.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ "${1:-}" == "--compare" ]]; then
  [[ $# -eq 3 ]] || { echo "usage: $0 --compare DIR_A DIR_B" >&2; exit 2; }
  if diff -r "$2" "$3"; then
    echo "record_outputs: no differences"
  else
    echo "record_outputs: the recordings differ" >&2
    exit 1
  fi
  exit 0
fi
if [[ $# -ne 2 ]]; then
  echo "usage: $0 INFER_BINARY OUT_DIR | $0 --compare DIR_A DIR_B" >&2
  exit 2
fi
infer="$(realpath "$1")"
out="$(realpath -m "$2")"
[[ -x "${infer}" ]] || { echo "record_outputs: ${infer} is not executable" >&2; exit 2; }
for tool in curl jq python3 timeout; do
  command -v "${tool}" >/dev/null || { echo "record_outputs: needs ${tool}" >&2; exit 2; }
done
fixtures="${repo_root}/tests/fixtures"
tokenizers="${repo_root}/.cache/tokenizers"
for key in llama3 qwen3 gemma3; do
  [[ -s "${tokenizers}/${key}/tokenizer.json" ]] || {
    echo "record_outputs: ${tokenizers}/${key} is missing: run scripts/fetch_tokenizers.sh" >&2
    exit 2
  }
done

max_time=60        # seconds per curl
gen_timeout=120    # seconds per subcommand
start_timeout=90   # seconds for a server to listen
started_at=$(date +%s)

work="$(mktemp -d /tmp/record_outputs.XXXXXX)"
server_pid=""
stop_server() {
  [[ -n "${server_pid}" ]] || return 0
  local pid="${server_pid}" rc=0
  server_pid=""
  kill -TERM "${pid}" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "${pid}" 2>/dev/null; then
    kill -KILL "${pid}" 2>/dev/null || true
  fi
  wait "${pid}" 2>/dev/null || rc=$?
  return "${rc}"
}
cleanup() {
  stop_server || true
  if [[ -n "${feeder_pid:-}" ]]; then kill "${feeder_pid}" 2>/dev/null || true; fi
  if [[ "${KEEP_WORK:-0}" == 1 ]]; then
    echo "record_outputs: work folder kept: ${work}" >&2
  else
    rm -rf "${work}"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -e "${out}" && ! -f "${out}/SUMMARY.tsv" ]] && [[ -n "$(ls -A "${out}" 2>/dev/null)" ]]; then
  echo "record_outputs: ${out} exists and is not a recording: not replacing it" >&2
  exit 2
fi
rm -rf "${out}"
mkdir -p "${out}/generate" "${out}/serve"
summary="${out}/SUMMARY.tsv"

# ---- the normaliser ---------------------------------------------------------------------------
# The files are written raw and listed in ${work}/manifest (MODE<TAB>PATH); one python run at the
# end normalises them in place (a python start per file costs more than the whole case) and
# writes SUMMARY.tsv from ${work}/cases (CASE<TAB>STATUS<TAB>PATHS whose bytes are summed).
cat >"${work}/normalise.py" <<'PY'
# normalise.py MANIFEST CASES SUMMARY WORK REPO OUT
import json
import os
import re
import sys

manifest, cases, summary, work, repo, out = sys.argv[1:7]


def normalise(text, mode):
    numbers = {}

    def number(kind, key):
        table = numbers.setdefault(kind, {})
        return table.setdefault(key, len(table) + 1)

    # The temporary folders and the recording's own folder.
    for path, name in sorted(((work, '$WORK'), (out, '$OUT'), (repo, '$REPO')),
                             key=lambda pair: -len(pair[0])):
        text = text.replace(path, name)
    if mode in ('head', 'metrics-head'):
        lines = text.replace('\r\n', '\n').split('\n')
        lines = [line for line in lines if not re.match(r'(?i)date:', line)]
        if mode == 'metrics-head':  # the body's latencies change its length
            lines = [line for line in lines if not re.match(r'(?i)content-length:', line)]
        text = '\n'.join(lines)
    rules = [
        # Responses ids and their items' ids (msg_/rs_/fc_ + the response's hex + _N).
        (r'\bresp_([0-9a-f]{32})\b', lambda m: 'resp_<%d>' % number('resp', m.group(1))),
        (r'\b(msg|rs|fc)_([0-9a-f]{32})_(\d+)\b',
         lambda m: '%s_<resp %d>_%s' % (m.group(1), number('resp', m.group(2)), m.group(3))),
        # Tool calls: call_X, and Anthropic's toolu_X made from it.
        (r'\b(call|toolu)_([0-9a-f]{24})\b',
         lambda m: '%s_<%d>' % (m.group(1), number('call', m.group(2)))),
        (r'\bmsg_([0-9a-f]{24})\b', lambda m: 'msg_<%d>' % number('msg', m.group(1))),
        (r'\bchatcmpl-(\d+)\b', lambda m: 'chatcmpl-<%d>' % number('chatcmpl', m.group(1))),
        (r'(?<![A-Za-z])cmpl-(\d+)\b', lambda m: 'cmpl-<%d>' % number('cmpl', m.group(1))),
        (r'"(created|created_at|completed_at)":(\s*)\d+', r'"\1":\g<2>0'),
        (r'"timing":\{[^{}]*\}', '"timing":"<timing>"'),
        (r'prefill [0-9.]+ ms, decode [0-9.a-z]+ tok/s', 'prefill <ms> ms, decode <tok/s> tok/s'),
        # Log lines (spdlog's time of day, "... in 120 ms") and `infer inspect`'s measurements.
        (r'(?m)^\[\d\d:\d\d:\d\d\.\d{3}\] ', '[<time>] '),
        (r'\bin [0-9.]+ ms\b', 'in <ms> ms'),
        (r'(?m)^(load time:\s+)[0-9.]+ s$', r'\1<s> s'),
        (r'(?m)^(resident memory:\s+)[0-9.]+ GB', r'\1<GB> GB'),
    ]
    if mode == 'body':
        rules.append((r'(?m)^: ping\n\n', ''))  # SSE heartbeats: after 1 s without output
    if mode == 'metrics':  # latency histograms (their _count lines stay)
        rules.append((r'(?m)^(\S+_seconds_(?:bucket|sum)(?:\{[^}]*\})?) \S+$', r'\1 <t>'))
    for pattern, replace in rules:
        text = re.sub(pattern, replace, text)
    if mode == 'body':
        text = by_choice(text)
    return text


def by_choice(text):
    """An OpenAI stream of several choices (n > 1, several prompts) with its chunks stably sorted
    by choice index: how they interleave depends on when each choice was scheduled."""
    if not text.startswith('data: '):
        return text
    events = text.split('\n\n')
    keys = []
    for event in events:
        key = float('inf')  # the usage chunk, [DONE], the end
        if event.startswith('data: {'):
            try:
                choices = json.loads(event[len('data: '):]).get('choices')
            except ValueError:
                choices = None
            if isinstance(choices, list) and len(choices) == 1:
                key = choices[0].get('index', 0)
        keys.append(key)
    if len({key for key in keys if key != float('inf')}) < 2:
        return text
    order = sorted(range(len(events)), key=lambda i: keys[i])
    return '\n\n'.join(events[i] for i in order)


for line in open(manifest, encoding='utf-8'):
    mode, path = line.rstrip('\n').split('\t')
    with open(path, 'rb') as f:
        text = f.read().decode('utf-8', errors='surrogateescape')
    with open(path, 'wb') as f:
        f.write(normalise(text, mode).encode('utf-8', errors='surrogateescape'))
with open(summary, 'w', encoding='utf-8') as f:
    f.write('case\tstatus\tbytes\n')
    for line in open(cases, encoding='utf-8'):
        name, status, paths = line.rstrip('\n').split('\t')
        size = sum(os.path.getsize(path) for path in paths.split(' '))
        f.write('%s\t%s\t%d\n' % (name, status, size))
PY
: >"${work}/manifest"
: >"${work}/cases"
normalise_later() { printf '%s\t%s\n' "$1" "$2" >>"${work}/manifest"; }  # MODE PATH

# ---- model folders ----------------------------------------------------------------------------
# vocab_model NAME FIXTURE TOKENIZER OVERRIDES_JSON [GENERATION_CONFIG_DIR]
vocab_model() {
  local dir="${work}/models/$1"
  mkdir -p "${dir}"
  python3 - "${fixtures}/models/$2/model/config.json" "$4" "${dir}/config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update(json.loads(sys.argv[2]))
json.dump(config, open(sys.argv[3], 'w'))
PY
  cp "${tokenizers}/$3/tokenizer.json" "${dir}/"
  python3 - "${tokenizers}/$3/tokenizer_config.json" "${dir}/tokenizer_config.json" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
template = config.get('chat_template')
if isinstance(template, str):  # Llama 3: no date of today in the prompt
    config['chat_template'] = template.replace('strftime_now("%d %b %Y")', '"26 Jul 2024"')
json.dump(config, open(sys.argv[2], 'w'), ensure_ascii=False)
PY
  if [[ -n "${5:-}" ]]; then cp "${fixtures}/configs/$5/generation_config.json" "${dir}/"; fi
}
vocab_model llama3 llama llama3 \
  '{"vocab_size": 128256, "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]}' \
  Llama-3.2-1B-Instruct
vocab_model qwen3 qwen3 qwen3 \
  '{"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": [151645, 151643]}' Qwen3-1.7B
vocab_model gemma3 gemma3 gemma3 \
  '{"vocab_size": 262144, "bos_token_id": 2, "eos_token_id": [1, 106]}' gemma-3-1b-it
# The Llama 3 model again, with config.json a FIFO: the server blocks reading it, so its
# "loading" answers can be recorded before it is fed (the python feeder below).
mkdir -p "${work}/models/llama3_slow"
cp "${work}/models/llama3/"{tokenizer.json,tokenizer_config.json,generation_config.json} \
  "${work}/models/llama3_slow/"
mkfifo "${work}/models/llama3_slow/config.json"
L3="${work}/models/llama3"
Q3="${work}/models/qwen3"
G3="${work}/models/gemma3"
FL="${fixtures}/models/llama/model"
FQ="${fixtures}/models/qwen3/model"
FG="${fixtures}/models/gemma3/model"
# The fixtures' greedy_short prompts (reference.json), 16 ids each.
IDS_L="1,185,377,194,388,224,168,357,401,278,256,258,313,332,448,132"
IDS_Q="1,287,29,143,106,22,344,393,439,389,170,56,441,402,58,40"
IDS_G="2,264,175,38,475,331,446,487,330,157,71,188,445,156,7,510"

last_ms=$(date +%s%3N)
record() {  # record CASE STATUS FILE...: a line of SUMMARY.tsv (FILEs' bytes once normalised)
  printf '%s\t%s\t%s\n' "$1" "$2" "${*:3}" >>"${work}/cases"
  if [[ "${RECORD_TIMES:-0}" == 1 ]]; then  # where the time goes (stderr only)
    local now
    now=$(date +%s%3N)
    echo "record_outputs: $1 $((now - last_ms)) ms" >&2
    last_ms=${now}
  fi
}

# ---- infer generate (and inspect / logits) ----------------------------------------------------
# gen CASE ARGS...: `infer ARGS...` (ARGS starts with the subcommand).
gen() {
  local name="$1" rc=0
  shift
  local base="${out}/generate/${name}"
  printf '%q ' infer "$@" >"${base}.cmd"
  echo >>"${base}.cmd"
  timeout "${gen_timeout}" "${infer}" "$@" >"${base}.out" 2>"${base}.err" || rc=$?
  echo "${rc}" >"${base}.rc"
  for file in cmd out err; do normalise_later body "${base}.${file}"; done
  record "generate/${name}" "rc=${rc}" "${base}.out" "${base}.err"
}
T1=(--threads 1)
echo "record_outputs: infer generate" >&2
for arch in llama qwen3 gemma3; do
  case "${arch}" in
    llama) m="${FL}" ids="${IDS_L}" ;;
    qwen3) m="${FQ}" ids="${IDS_Q}" ;;
    gemma3) m="${FG}" ids="${IDS_G}" ;;
  esac
  gen "${arch}_greedy32_json" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0 --max-new-tokens 32 --json
  gen "${arch}_greedy_default_len" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0
  gen "${arch}_sampled_seed" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0.8 --top-k 40 --top-p 0.9 --seed 7 --max-new-tokens 24 --json
  gen "${arch}_repetition_penalty" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0 --repetition-penalty 1.3 --max-new-tokens 24 --json
  gen "${arch}_no_kv_cache" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0 --max-new-tokens 12 --no-kv-cache --json
  gen "${arch}_kv_f32" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0 --max-new-tokens 24 --kv-cache-dtype f32 --json
  gen "${arch}_bf16_matmul" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --temperature 0 --max-new-tokens 24 --matmul-precision bf16 --json
  for q in int8 int4 int4k int6; do
    gen "${arch}_q_${q}" generate --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
      --temperature 0 --max-new-tokens 24 -q "${q}" --json
  done
  gen "${arch}_inspect" inspect --model "${m}"
  gen "${arch}_logits" logits --model "${m}" "${T1[@]}" --prompt-ids "${ids}" \
    --out "${out}/generate/${arch}_logits.f32"
  record "generate/${arch}_logits.f32" file "${out}/generate/${arch}_logits.f32"
done
gen llama_threads2 generate --model "${FL}" --threads 2 --prompt-ids "${IDS_L}" \
  --temperature 0 --max-new-tokens 32 --json
gen llama_speculative generate --model "${FL}" "${T1[@]}" --prompt-ids "${IDS_L},${IDS_L}" \
  --temperature 0 --max-new-tokens 32 --json --speculative-config \
  '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}'
gen llama_err_id_outside_vocab generate --model "${FL}" "${T1[@]}" --prompt-ids 1,2,99999 \
  --max-new-tokens 4
gen llama_err_text_without_tokenizer generate --model "${FL}" "${T1[@]}" --prompt "Hello"
gen err_no_model generate --model "${work}/no-such-model" --prompt "Hello"

D=(--load-format dummy "${T1[@]}")
gen llama3v_greedy_json generate --model "${L3}" "${D[@]}" --prompt "Hello world" \
  --temperature 0 --max-new-tokens 12 --json
gen llama3v_greedy_text generate --model "${L3}" "${D[@]}" --prompt "Hello world" \
  --temperature 0 --max-new-tokens 12
gen llama3v_chat_greedy generate --model "${L3}" "${D[@]}" --chat --prompt "Name three colours." \
  --temperature 0 --max-new-tokens 16 --json
gen llama3v_generation_config_seed generate --model "${L3}" "${D[@]}" --chat \
  --prompt "Name three colours." --seed 11 --max-new-tokens 16 --json
gen llama3v_sampled_seed generate --model "${L3}" "${D[@]}" --prompt "Once upon a time" \
  --temperature 1.0 --top-p 0.95 --seed 3 --max-new-tokens 16 --json
gen llama3v_stop generate --model "${L3}" "${D[@]}" --prompt "Hello world" --temperature 0 \
  --max-new-tokens 12 --stop " guarantee" --json
gen llama3v_default_max_new_tokens generate --model "${L3}" "${D[@]}" --prompt "Hello world" \
  --temperature 0 --json
gen llama3v_dummy_seed generate --model "${L3}" "${D[@]}" --dummy-seed 5 --prompt "Hello world" \
  --temperature 0 --max-new-tokens 12 --json
cat >"${work}/schema.json" <<'JSON'
{"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
 "temp": {"type": "integer"}}, "required": ["city", "temp"], "additionalProperties": false}
JSON
gen llama3v_json_schema generate --model "${L3}" "${D[@]}" --chat --prompt "Weather?" \
  --temperature 0 --max-new-tokens 40 --json-schema "${work}/schema.json" --json
gen llama3v_regex generate --model "${L3}" "${D[@]}" --prompt "Date:" --temperature 0 \
  --max-new-tokens 20 --regex '[0-9]{4}-[0-9]{2}-[0-9]{2}' --json
gen llama3v_choice generate --model "${L3}" "${D[@]}" --prompt "Pick:" --temperature 0 \
  --max-new-tokens 8 --choice red,green,blue --json
cat >"${work}/grammar.gbnf" <<'GBNF'
root ::= "yes" | "no" | "maybe " [a-z]+
GBNF
gen llama3v_grammar generate --model "${L3}" "${D[@]}" --prompt "Answer:" --temperature 0 \
  --max-new-tokens 8 --grammar "${work}/grammar.gbnf" --json
gen qwen3v_chat_greedy generate --model "${Q3}" "${D[@]}" --chat --prompt "Hello" \
  --temperature 0 --max-new-tokens 16 --json
gen qwen3v_think_budget generate --model "${Q3}" "${D[@]}" \
  --prompt $'<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n' \
  --temperature 0 --max-new-tokens 10 --reasoning-budget 2 --json
gen qwen3v_sampled_seed generate --model "${Q3}" "${D[@]}" --chat --prompt "Hello" --seed 5 \
  --max-new-tokens 16 --json
gen gemma3v_chat_greedy generate --model "${G3}" "${D[@]}" --chat --prompt "Hello" \
  --temperature 0 --max-new-tokens 16 --json
gen gemma3v_greedy generate --model "${G3}" "${D[@]}" --prompt "The sky is" \
  --temperature 0 --max-new-tokens 16 --json

# ---- infer serve ------------------------------------------------------------------------------
srv=""    # the server's name: the folder of its cases
base=""   # http://127.0.0.1:PORT
auth=()   # extra curl arguments (the API key)

# wait_log PATTERN: the server's log has a line matching PATTERN (prints the port), or fail.
wait_log() {
  local log="${work}/${srv}.log"
  for _ in $(seq $((start_timeout * 10))); do
    if grep -qE "$1" "${log}" 2>/dev/null; then
      grep -oE "$1" "${log}" | head -1 | grep -oE '[0-9]+$'
      return 0
    fi
    if ! kill -0 "${server_pid}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "record_outputs: server ${srv} did not get to '$1':" >&2
  cat "${log}" >&2
  return 1
}

# start_server NAME [--no-wait] ARGS...: `infer serve ARGS` on a free loopback port.
start_server() {
  srv="$1"
  shift
  local wait=1
  if [[ "${1:-}" == --no-wait ]]; then wait=0; shift; fi
  mkdir -p "${out}/serve/${srv}"
  echo "record_outputs: serve ${srv}" >&2
  "${infer}" serve --host 127.0.0.1 --port 0 --threads 1 --replica-id rec "$@" \
    >"${work}/${srv}.log" 2>&1 &
  server_pid=$!
  local port
  port="$(wait_log 'on http://127\.0\.0\.1:[0-9]+')" || exit 1
  base="http://127.0.0.1:${port}"
  if [[ "${wait}" == 1 ]]; then
    wait_log 'listening on http://127\.0\.0\.1:[0-9]+' >/dev/null || exit 1
  fi
  auth=()
}

finish_server() {
  local rc=0
  stop_server || rc=$?
  echo "${rc}" >"${out}/serve/${srv}/server.rc"
  record "serve/${srv}/server.rc" "rc=${rc}" "${out}/serve/${srv}/server.rc"
}

# req CASE METHOD PATH [BODY [CURL_ARGS...]]: one request; saves .req, .head, .body.
req() {
  local name="$1" method="$2" path="$3" body="${4-}"
  shift 3
  if [[ $# -gt 0 ]]; then shift; fi
  local dest="${out}/serve/${srv}/${name}" code mode=body head_mode=head
  printf '%s %s\n%s\n' "${method}" "${path}" "${body}" >"${dest}.req"
  local args=(-sS --max-time "${max_time}" -X "${method}" -o "${work}/body" -D "${work}/head"
    -w '%{http_code}' -H 'Expect:')
  if [[ -n "${body}" ]]; then
    printf '%s' "${body}" >"${work}/request"
    args+=(-H 'Content-Type: application/json' --data-binary "@${work}/request")
  fi
  : >"${work}/body"
  : >"${work}/head"
  code="$(curl "${args[@]}" "${auth[@]}" "$@" "${base}${path}" 2>"${work}/curl.err")" ||
    code="curl-error-$?"
  cp "${work}/body" "${dest}.body"
  cp "${work}/head" "${dest}.head"
  if [[ "${path}" == /metrics ]]; then mode=metrics head_mode=metrics-head; fi
  normalise_later body "${dest}.req"
  normalise_later "${mode}" "${dest}.body"
  normalise_later "${head_mode}" "${dest}.head"
  record "serve/${srv}/${name}" "${code}" "${dest}.body"
}
post() { req "$1" POST "$2" "$3" "${@:4}"; }
# The raw body of the last request (before normalisation), for ids a later request needs.
last_raw() { cat "${work}/body"; }

TOOLS='[{"type": "function", "function": {"name": "get_weather",
  "description": "The current weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string", "maxLength": 12},
  "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city", "unit"],
  "additionalProperties": false}}},
 {"type": "function", "function": {"name": "get_time", "description": "The time in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
  "required": ["city"], "additionalProperties": false}}}]'
RESP_TOOLS='[{"type": "function", "name": "get_weather",
  "description": "The current weather in a city", "parameters": {"type": "object",
  "properties": {"city": {"type": "string", "maxLength": 12},
  "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city", "unit"],
  "additionalProperties": false}, "strict": true}]'
ANT_TOOLS='[{"name": "get_weather", "description": "The current weather in a city",
  "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
  "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city", "unit"],
  "additionalProperties": false}}]'
SCHEMA='{"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
  "temp": {"type": "integer"}}, "required": ["city", "temp"], "additionalProperties": false}'
USER='[{"role": "system", "content": "You are terse."},
  {"role": "user", "content": "Name three colours."}]'
LONG="$(printf 'word %.0s' $(seq 700))"

# -- llama3: the Llama 3 vocabulary model, seed /v1/completions, every route; --seed 2024 for
# the sampled requests of the APIs without a seed field (Responses, Anthropic) ---------------
start_server llama3 --no-wait --model "${work}/models/llama3_slow" --load-format dummy \
  --served-model-name tiny --max-model-len 512 --seed 2024
# The loading server's answers (config.json is a FIFO nobody has written yet).
req loading_health GET /health
post loading_chat /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}'
post loading_messages /v1/messages '{"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]}'
python3 - "${work}/models/llama3_slow/config.json" "${L3}/config.json" <<'PY' &
import os, shutil, signal, sys
fifo, source = sys.argv[1:3]
signal.alarm(60)
fd = os.open(fifo, os.O_WRONLY)  # returns once the server opens it
shutil.copy(source, fifo + '.tmp')
os.replace(fifo + '.tmp', fifo)  # any later open reads a plain file
os.write(fd, open(source, 'rb').read())
os.close(fd)
PY
feeder_pid=$!
wait "${feeder_pid}"
feeder_pid=""
wait_log 'listening on http://127\.0\.0\.1:[0-9]+' >/dev/null || exit 1

req health GET /health
req models GET /v1/models
req chat_page GET /
chat() { post "$1" /v1/chat/completions "{\"model\": \"tiny\", \"messages\": ${USER}, $2}"; }
chat chat_greedy '"max_tokens": 16, "temperature": 0'
chat chat_greedy_stream '"max_tokens": 16, "temperature": 0, "stream": true'
chat chat_stream_usage '"max_tokens": 8, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}'
chat chat_generation_config_seed '"max_tokens": 12, "seed": 7'
chat chat_sampled_seed '"max_tokens": 12, "temperature": 0.9, "top_p": 0.95, "top_k": 50, "seed": 123'
chat chat_n2_seed '"max_tokens": 8, "temperature": 1.0, "n": 2, "seed": 42'
chat chat_n2_seed_stream '"max_tokens": 8, "temperature": 1.0, "n": 2, "seed": 42, "stream": true'
chat chat_stop '"max_tokens": 16, "temperature": 0, "stop": [" Decoder", "xyz"]'
chat chat_stop_stream '"max_tokens": 16, "temperature": 0, "stop": [" Decoder", "xyz"], "stream": true'
chat chat_logprobs '"max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 3'
chat chat_logprobs_stream '"max_tokens": 4, "temperature": 0, "logprobs": true, "top_logprobs": 2, "stream": true'
chat chat_penalties '"max_tokens": 16, "temperature": 0, "repetition_penalty": 1.2, "presence_penalty": 0.5, "frequency_penalty": 0.5'
chat chat_logit_bias '"max_tokens": 6, "temperature": 0, "logit_bias": {"1234": 100}'
chat chat_min_tokens_ignore_eos '"max_completion_tokens": 10, "temperature": 0, "min_tokens": 10, "ignore_eos": true, "return_token_ids": true'
chat chat_no_max_tokens '"temperature": 0, "stop": ["."]'
chat chat_json_schema "\"max_tokens\": 48, \"temperature\": 0, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"w\", \"schema\": ${SCHEMA}}}"
chat chat_json_schema_stream "\"max_tokens\": 48, \"temperature\": 0, \"stream\": true, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"w\", \"schema\": ${SCHEMA}}}"
chat chat_json_object '"max_tokens": 24, "temperature": 0, "response_format": {"type": "json_object"}'
chat chat_structured_regex '"max_tokens": 16, "temperature": 0, "structured_outputs": {"regex": "[a-z]{3,8}( [a-z]{3,8}){2}"}'
chat chat_guided_choice '"max_tokens": 8, "temperature": 0, "guided_choice": ["red", "green", "blue"]'
chat chat_tools_required "\"max_tokens\": 64, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": \"required\""
chat chat_tools_required_stream "\"max_tokens\": 64, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": \"required\", \"stream\": true"
chat chat_tools_named "\"max_tokens\": 64, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}"
chat chat_tools_auto "\"max_tokens\": 24, \"temperature\": 0, \"tools\": ${TOOLS}"
chat chat_tools_none "\"max_tokens\": 12, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": \"none\""
chat chat_tools_parallel "\"max_tokens\": 96, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": \"required\", \"parallel_tool_calls\": true"
post chat_tool_result_turn /v1/chat/completions "{\"model\": \"tiny\", \"max_tokens\": 12, \"temperature\": 0, \"tools\": ${TOOLS}, \"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"unit\\\": \\\"c\\\"}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"21 C, sunny\"}]}"
post chat_content_parts /v1/chat/completions '{"model": "tiny", "max_tokens": 8, "temperature": 0, "messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}, {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]}'
post chat_no_model_field /v1/chat/completions '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}'
post chat_unknown_fields_ignored /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0, "foo": 1, "user": "u1", "metadata": {"a": "b"}}'

# Seed protocol (POST /v1/completions, --completions-format seed): an event stream always.
post seed_text /v1/completions '{"model": "tiny", "prompt": "Hello world", "max_tokens": 8, "temperature": 0}'
post seed_ids /v1/completions '{"model": "tiny", "prompt": [128000, 9906, 1917], "max_tokens": 8, "temperature": 0}'
post seed_sampled /v1/completions '{"model": "tiny", "prompt": "Hello world", "max_tokens": 8, "temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 9}'
post seed_stop /v1/completions '{"model": "tiny", "prompt": "Hello world", "max_tokens": 12, "temperature": 0, "stop": [" guarantee"]}'
post seed_penalty_priority /v1/completions '{"model": "tiny", "prompt": "Hello world", "max_tokens": 8, "temperature": 0, "repetition_penalty": 1.3, "priority": 5, "stream": false}'
post seed_err_unknown_field /v1/completions '{"model": "tiny", "prompt": "Hi", "echo": true}'
post seed_err_model /v1/completions '{"model": "other", "prompt": "Hi"}'
post seed_err_no_prompt /v1/completions '{"model": "tiny"}'
post seed_err_max_tokens /v1/completions '{"model": "tiny", "prompt": "Hi", "max_tokens": 0}'
post seed_err_too_long /v1/completions "{\"model\": \"tiny\", \"prompt\": \"${LONG}\", \"max_tokens\": 4}"

# vLLM's tokenizer routes.
post tokenize_prompt /tokenize '{"model": "tiny", "prompt": "Hello world", "return_token_strs": true}'
post tokenize_no_special /tokenize '{"prompt": "Hello world", "add_special_tokens": false}'
post tokenize_chat /tokenize "{\"model\": \"tiny\", \"messages\": ${USER}}"
post tokenize_chat_tools /tokenize "{\"model\": \"tiny\", \"messages\": ${USER}, \"tools\": ${TOOLS}}"
post detokenize /detokenize '{"model": "tiny", "tokens": [128000, 9906, 1917]}'
post detokenize_err_vocab /detokenize '{"model": "tiny", "tokens": [999999]}'
post tokenize_err_both /tokenize '{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}'

# OpenAI Responses.
resp() { post "$1" /v1/responses "{\"model\": \"tiny\", $2}"; }
resp resp_basic '"input": "Name three colours.", "max_output_tokens": 12, "temperature": 0'
stored_id="$(last_raw | jq -r '.id // empty')"
resp resp_stream '"input": "Name three colours.", "max_output_tokens": 12, "temperature": 0, "stream": true'
resp resp_instructions '"instructions": "You are terse.", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}], "max_output_tokens": 8, "temperature": 0, "store": false'
resp resp_tools_required "\"input\": \"Weather in Paris?\", \"tools\": ${RESP_TOOLS}, \"tool_choice\": \"required\", \"max_output_tokens\": 64, \"temperature\": 0"
call_id="$(last_raw | jq -r '[.output[] | select(.type == "function_call")][0].call_id // empty')"
tool_resp_id="$(last_raw | jq -r '.id // empty')"
resp resp_tools_required_stream "\"input\": \"Weather in Paris?\", \"tools\": ${RESP_TOOLS}, \"tool_choice\": \"required\", \"max_output_tokens\": 64, \"temperature\": 0, \"stream\": true"
resp resp_tools_auto "\"input\": \"Weather in Paris?\", \"tools\": ${RESP_TOOLS}, \"max_output_tokens\": 16, \"temperature\": 0"
resp resp_json_schema "\"input\": \"Weather?\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"w\", \"schema\": ${SCHEMA}, \"strict\": true}}, \"max_output_tokens\": 48, \"temperature\": 0"
# Responses has no seed field: this one samples with the server's --seed.
resp resp_sampled_server_seed '"input": "Hi", "max_output_tokens": 8, "temperature": 0.9'
resp resp_function_output "\"previous_response_id\": \"${tool_resp_id}\", \"input\": [{\"type\": \"function_call_output\", \"call_id\": \"${call_id}\", \"output\": \"21 C, sunny\"}], \"tools\": ${RESP_TOOLS}, \"max_output_tokens\": 12, \"temperature\": 0"
req resp_get GET "/v1/responses/${stored_id}"
resp resp_previous "\"previous_response_id\": \"${stored_id}\", \"input\": \"And three more.\", \"max_output_tokens\": 8, \"temperature\": 0"
req resp_delete DELETE "/v1/responses/${stored_id}"
req resp_get_deleted GET "/v1/responses/${stored_id}"
resp resp_err_previous_unknown '"previous_response_id": "resp_00000000000000000000000000000000", "input": "Hi"'
resp resp_err_no_input '"max_output_tokens": 4'

# Anthropic Messages.
msg() { post "$1" /v1/messages "{\"model\": \"tiny\", $2}"; }
msg msg_basic '"system": "You are terse.", "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 12, "temperature": 0'
msg msg_stream '"system": "You are terse.", "messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 12, "temperature": 0, "stream": true'
msg msg_stop_sequences '"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 16, "temperature": 0, "stop_sequences": ["should"]'
# Anthropic has no seed field either: the server's --seed.
msg msg_sampled_server_seed '"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0.9, "top_k": 50, "top_p": 0.9'
msg msg_tools_any "\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"tools\": ${ANT_TOOLS}, \"tool_choice\": {\"type\": \"any\"}, \"max_tokens\": 64, \"temperature\": 0"
msg msg_tools_any_stream "\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"tools\": ${ANT_TOOLS}, \"tool_choice\": {\"type\": \"tool\", \"name\": \"get_weather\"}, \"max_tokens\": 64, \"temperature\": 0, \"stream\": true"
msg msg_tool_result "\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"role\": \"assistant\", \"content\": [{\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": {\"city\": \"Paris\", \"unit\": \"c\"}}]}, {\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\", \"content\": \"21 C\"}]}], \"tools\": ${ANT_TOOLS}, \"max_tokens\": 12, \"temperature\": 0"
msg msg_thinking '"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 1024}'
post msg_count_tokens /v1/messages/count_tokens "{\"model\": \"tiny\", \"system\": \"You are terse.\", \"messages\": [{\"role\": \"user\", \"content\": \"Name three colours.\"}], \"tools\": ${ANT_TOOLS}}"
msg msg_err_no_max_tokens '"messages": [{"role": "user", "content": "Hi"}]'
msg msg_err_role '"messages": [{"role": "system", "content": "Hi"}], "max_tokens": 4'
post msg_err_bad_json /v1/messages '{"model": "tiny",'

# Errors of the OpenAI routes and the server.
post err_bad_json /v1/chat/completions '{"model": "tiny", "messages": ['
post err_not_object /v1/chat/completions '[1, 2]'
post err_unknown_model /v1/chat/completions '{"model": "gpt-4", "messages": [{"role": "user", "content": "Hi"}]}'
post err_no_messages /v1/chat/completions '{"model": "tiny"}'
post err_bad_role /v1/chat/completions '{"model": "tiny", "messages": [{"role": "robot", "content": "Hi"}]}'
post err_n_range /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "n": 0}'
post err_temperature /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "temperature": -1}'
post err_functions /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "functions": []}'
post err_tools_and_format /v1/chat/completions "{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tools\": ${TOOLS}, \"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}}"
post err_too_long_prompt /v1/chat/completions "{\"model\": \"tiny\", \"messages\": [{\"role\": \"user\", \"content\": \"${LONG}\"}], \"max_tokens\": 4}"
post err_max_tokens_over_context /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 100000}'
post err_image_part /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}'
req err_unknown_route GET /v1/nothing
req err_wrong_method GET /v1/chat/completions
req err_unknown_route_messages GET /v1/messages/nothing
req metrics GET /metrics
req health_end GET /health
finish_server

# -- llama3_openai: OpenAI's /v1/completions, an API key ------------------------------------
start_server llama3_openai --model "${L3}" --load-format dummy --served-model-name tiny \
  --max-model-len 512 --completions-format openai --api-key sk-rec --max-num-seqs 4
post auth_missing /v1/completions '{"model": "tiny", "prompt": "Hi", "max_tokens": 2}'
auth=(-H 'Authorization: Bearer wrong')
post auth_wrong /v1/completions '{"model": "tiny", "prompt": "Hi", "max_tokens": 2}'
auth=(-H 'x-api-key: sk-rec')
post auth_x_api_key /v1/messages/count_tokens '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]}'
auth=()
req health_without_key GET /health
req metrics_without_key GET /metrics
auth=(-H 'Authorization: Bearer sk-rec')
cmpl() { post "$1" /v1/completions "{\"model\": \"tiny\", $2}"; }
cmpl cmpl_greedy '"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0'
cmpl cmpl_greedy_stream '"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "stream": true'
cmpl cmpl_stream_usage '"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}'
cmpl cmpl_default_max_tokens '"prompt": "Once upon a time", "temperature": 0'
cmpl cmpl_logprobs '"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logprobs": 3'
cmpl cmpl_logprobs_stream '"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logprobs": 2, "stream": true'
cmpl cmpl_echo '"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "echo": true'
cmpl cmpl_token_ids '"prompt": [128000, 12805, 5304, 264, 892], "max_tokens": 8, "temperature": 0, "return_token_ids": true'
cmpl cmpl_multi_prompt '"prompt": ["Once upon a time", "Hello world"], "max_tokens": 6, "temperature": 0'
cmpl cmpl_multi_prompt_stream '"prompt": ["Once upon a time", "Hello world"], "max_tokens": 6, "temperature": 0, "stream": true'
cmpl cmpl_multi_token_prompts '"prompt": [[128000, 9906], [128000, 12805, 5304]], "max_tokens": 4, "temperature": 0'
cmpl cmpl_n2_seed '"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.0, "n": 2, "seed": 17'
cmpl cmpl_best_of '"prompt": "Hi", "max_tokens": 4, "temperature": 0, "best_of": 1'
cmpl cmpl_stop '"prompt": "Hello world", "max_tokens": 12, "temperature": 0, "stop": " guarantee"'
cmpl cmpl_stop_stream '"prompt": "Hello world", "max_tokens": 12, "temperature": 0, "stop": [" guarantee"], "stream": true'
cmpl cmpl_guided_regex '"prompt": "Date:", "max_tokens": 16, "temperature": 0, "guided_regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}"'
cmpl cmpl_json_schema "\"prompt\": \"JSON:\", \"max_tokens\": 48, \"temperature\": 0, \"guided_json\": ${SCHEMA}"
cmpl cmpl_grammar '"prompt": "Answer:", "max_tokens": 8, "temperature": 0, "grammar": "root ::= \"yes\" | \"no\""'
cmpl cmpl_err_suffix '"prompt": "Hi", "suffix": "x"'
cmpl cmpl_err_echo_logprobs '"prompt": "Hi", "echo": true, "logprobs": 1'
cmpl cmpl_err_empty_prompt '"prompt": ""'
cmpl cmpl_err_too_long "\"prompt\": \"${LONG}\", \"max_tokens\": 4"
chat chat_greedy_again '"max_tokens": 16, "temperature": 0'
req metrics GET /metrics
finish_server

# -- qwen3: the Qwen3 vocabulary (reasoning), --reasoning-budget 3, a default --seed ---------
start_server qwen3 --model "${Q3}" --load-format dummy --served-model-name qwen \
  --max-model-len 512 --completions-format openai --reasoning-budget 3 --seed 1234
qchat() { post "$1" /v1/chat/completions "{\"model\": \"qwen\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], $2}"; }
qchat chat_thinking '"max_tokens": 16, "temperature": 0'
qchat chat_thinking_stream '"max_tokens": 16, "temperature": 0, "stream": true'
qchat chat_no_thinking '"max_tokens": 12, "temperature": 0, "chat_template_kwargs": {"enable_thinking": false}'
qchat chat_reasoning_effort_none '"max_tokens": 12, "temperature": 0, "reasoning_effort": "none"'
qchat chat_server_seed '"max_tokens": 12'
qchat chat_budget_request '"max_tokens": 12, "temperature": 0, "thinking_token_budget": 1'
# The random model never opens <think> by itself: a logit bias on it (id 151667) makes it.
qchat chat_think_bias '"max_tokens": 16, "temperature": 0, "logit_bias": {"151667": 5}'
qchat chat_think_bias_stream '"max_tokens": 16, "temperature": 0, "logit_bias": {"151667": 5}, "stream": true'
qchat chat_tools_required "\"max_tokens\": 64, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": \"required\""
qchat chat_tools_required_stream "\"max_tokens\": 64, \"temperature\": 0, \"tools\": ${TOOLS}, \"tool_choice\": \"required\", \"stream\": true"
THINK='<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n'
post cmpl_think_budget_default /v1/completions "{\"model\": \"qwen\", \"prompt\": \"${THINK}\", \"max_tokens\": 10, \"temperature\": 0, \"return_token_ids\": true}"
post cmpl_think_unbounded /v1/completions "{\"model\": \"qwen\", \"prompt\": \"${THINK}\", \"max_tokens\": 10, \"temperature\": 0, \"thinking_token_budget\": -1}"
post cmpl_think_budget_0_stream /v1/completions "{\"model\": \"qwen\", \"prompt\": \"${THINK}\", \"max_tokens\": 10, \"temperature\": 0, \"thinking_token_budget\": 0, \"stream\": true}"
post msg_thinking /v1/messages '{"model": "qwen", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 4}}'
post msg_thinking_stream /v1/messages '{"model": "qwen", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16, "temperature": 0, "thinking": {"type": "enabled", "budget_tokens": 4}, "stream": true}'
post msg_thinking_disabled /v1/messages '{"model": "qwen", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0, "thinking": {"type": "disabled"}}'
post msg_tools "/v1/messages" "{\"model\": \"qwen\", \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], \"tools\": ${ANT_TOOLS}, \"tool_choice\": {\"type\": \"any\"}, \"max_tokens\": 64, \"temperature\": 0}"
post resp_reasoning /v1/responses '{"model": "qwen", "input": "Hi", "reasoning": {"effort": "low"}, "max_output_tokens": 16, "temperature": 0}'
post resp_reasoning_stream /v1/responses '{"model": "qwen", "input": "Hi", "reasoning": {"effort": "low"}, "max_output_tokens": 16, "temperature": 0, "stream": true}'
post resp_reasoning_none /v1/responses '{"model": "qwen", "input": "Hi", "reasoning": {"effort": "none"}, "max_output_tokens": 8, "temperature": 0}'
post tokenize_chat /tokenize '{"model": "qwen", "messages": [{"role": "user", "content": "Hi"}], "return_token_strs": true}'
req metrics GET /metrics
finish_server

# -- gemma3: the Gemma 3 vocabulary model -----------------------------------------------------
start_server gemma3 --model "${G3}" --load-format dummy --served-model-name gemma \
  --max-model-len 256
post chat_greedy /v1/chat/completions '{"model": "gemma", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0}'
post chat_generation_config_seed /v1/chat/completions '{"model": "gemma", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "seed": 3}'
post chat_stream /v1/chat/completions '{"model": "gemma", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0, "stream": true}'
post chat_tools_required /v1/chat/completions "{\"model\": \"gemma\", \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}], \"tools\": ${TOOLS}, \"tool_choice\": \"required\", \"max_tokens\": 64, \"temperature\": 0}"
post seed_text /v1/completions '{"model": "gemma", "prompt": "The sky is", "max_tokens": 8, "temperature": 0}'
post msg_basic /v1/messages '{"model": "gemma", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "temperature": 0}'
finish_server

# -- llama_fixture: real weights, no tokenizer, --max-seq-len 64, a 4 KiB body limit ---------
start_server llama_fixture --model "${FL}" --served-model-name tiny --max-seq-len 64 \
  --max-body-size 4KiB
post seed_greedy32 /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_L}], \"max_tokens\": 32, \"temperature\": 0}"
post seed_sampled /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_L}], \"max_tokens\": 16, \"temperature\": 0.7, \"seed\": 99}"
post seed_top_k /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_L}], \"max_tokens\": 16, \"temperature\": 1.0, \"top_k\": 3, \"seed\": 1}"
post seed_prefix_again /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_L}, 143, 511], \"max_tokens\": 8, \"temperature\": 0}"
post seed_err_text_prompt /v1/completions '{"model": "tiny", "prompt": "Hello", "max_tokens": 4}'
post seed_err_too_long /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_L},${IDS_L},${IDS_L},${IDS_L},${IDS_L}], \"max_tokens\": 4}"
post seed_err_context /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_L}], \"max_tokens\": 60}"
post seed_err_id_outside_vocab /v1/completions '{"model": "tiny", "prompt": [1, 600], "max_tokens": 4}'
post chat_err_no_template /v1/chat/completions '{"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}'
post tokenize_err_no_tokenizer /tokenize '{"model": "tiny", "prompt": "Hi"}'
post detokenize_err_no_tokenizer /detokenize '{"model": "tiny", "tokens": [1, 2]}'
post err_body_too_large /v1/completions "{\"model\": \"tiny\", \"prompt\": \"$(printf 'x%.0s' $(seq 5000))\"}"
req models GET /v1/models
req health GET /health
req metrics GET /metrics
finish_server

# -- qwen3_fixture_static: real weights, static batching ---------------------------------------
start_server qwen3_fixture_static --model "${FQ}" --served-model-name tiny --max-seq-len 128 \
  --batching-mode static --batch-wait-timeout 0.01 --max-num-seqs 2
post seed_greedy32 /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_Q}], \"max_tokens\": 32, \"temperature\": 0}"
post seed_sampled /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_Q}], \"max_tokens\": 16, \"temperature\": 0.7, \"seed\": 99}"
post seed_stop_tokens_free /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_Q}], \"max_tokens\": 8, \"temperature\": 0, \"repetition_penalty\": 1.5}"
req health GET /health
finish_server

# -- gemma3_fixture_spec: real weights, n-gram speculative decoding, OpenAI completions -------
start_server gemma3_fixture_spec --model "${FG}" --served-model-name tiny --max-seq-len 128 \
  --completions-format openai --speculative-config \
  '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
post cmpl_greedy32 /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_G}], \"max_tokens\": 32, \"temperature\": 0, \"return_token_ids\": true}"
post cmpl_repeated /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_G},${IDS_G},${IDS_G}], \"max_tokens\": 32, \"temperature\": 0, \"ignore_eos\": true, \"return_token_ids\": true}"
post cmpl_repeated_stream /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_G},${IDS_G},${IDS_G}], \"max_tokens\": 16, \"temperature\": 0, \"ignore_eos\": true, \"stream\": true}"
post cmpl_logprobs /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_G}], \"max_tokens\": 4, \"temperature\": 0, \"logprobs\": 2}"
post cmpl_sampled /v1/completions "{\"model\": \"tiny\", \"prompt\": [${IDS_G},${IDS_G}], \"max_tokens\": 16, \"temperature\": 0.8, \"seed\": 4}"
req metrics GET /metrics
finish_server

python3 "${work}/normalise.py" "${work}/manifest" "${work}/cases" "${summary}" "${work}" \
  "${repo_root}" "${out}"
elapsed=$(($(date +%s) - started_at))
cases=$(($(wc -l <"${summary}") - 1))
ok=$(awk -F'\t' 'NR > 1 && ($2 == "200" || $2 == "rc=0")' "${summary}" | wc -l)
column -t -s $'\t' "${summary}" 2>/dev/null || cat "${summary}"
echo "record_outputs: ${cases} cases (${ok} with status 200 or exit 0) in ${elapsed} s -> ${out}" >&2
