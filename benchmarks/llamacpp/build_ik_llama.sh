#!/usr/bin/env bash
# Builds ik_llama.cpp's llama-bench (the CPU fork of llama.cpp that issue 28 measured against)
# for benchmarks/run_llamacpp_compare.sh's IK_LLAMA_BENCH, from a clone of
# https://github.com/ikawrakow/ik_llama.cpp (its git directory or work tree): only the folders
# llama-bench needs are taken (git archive), into .cache/ik_llama-ISA (gitignored).
# Usage: benchmarks/llamacpp/build_ik_llama.sh IK_LLAMA_GIT_DIR [avx2|avxvnni|native]
#   avx2: GGML_NATIVE off and only AVX, AVX2, FMA, F16C (an AVX2 CPU measured on a wider one,
#   as FORCE_ISA=avx2); avxvnni: those and AVX-VNNI; native (default): -march=native.
# Prints the path of llama-bench. Took 5-15 minutes on 2 cores here (ccache helps).
set -euo pipefail
cd "$(dirname "$0")/../.."
src="${1:?usage: build_ik_llama.sh IK_LLAMA_GIT_DIR [avx2|avxvnni|native]}"
isa="${2:-native}"
case "$isa" in
  native) flags=(-DGGML_NATIVE=ON) ;;
  avx2) flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_AVX512=OFF) ;;
  avxvnni) flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
    -DGGML_AVXVNNI=ON -DGGML_AVX512=OFF) ;;
  *) echo "build_ik_llama.sh: ISA avx2, avxvnni or native, not '$isa'" >&2; exit 2 ;;
esac
dir="$PWD/.cache/ik_llama-$isa"
if [[ ! -f "$dir/CMakeLists.txt" ]]; then
  mkdir -p "$dir.tmp"
  git -C "$src" archive HEAD CMakeLists.txt cmake ggml src include common vendor \
    examples/llama-bench | tar -x -C "$dir.tmp"
  git -C "$src" log -1 --format='%H %cd' >"$dir.tmp/SOURCE_COMMIT"
  # Only llama-bench among the examples; the top CMakeLists also asks for pocs/.
  printf 'find_package(Threads REQUIRED)\nadd_subdirectory(llama-bench)\n' \
    >"$dir.tmp/examples/CMakeLists.txt"
  mkdir -p "$dir.tmp/pocs" && : >"$dir.tmp/pocs/CMakeLists.txt"
  mv "$dir.tmp" "$dir"
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$dir" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
  -DGGML_IQK_FA_ALL_QUANTS=OFF -DGGML_CCACHE=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir/build" -j"$(nproc)" --target llama-bench >&2
echo "$dir/build/bin/llama-bench"
