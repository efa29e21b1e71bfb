// Kernel micro-benchmark: MatMul at Llama-3.2-1B shapes, m = 1 (GB/s of weights streamed,
// the decode bound; up to m = 64, batched decode and short prefills, the weights stream from
// memory too) and m = 512 (GFLOP/s, the prefill bound), per ISA and thread count; then
// one layer of PagedAttention (decode at Llama-3.2-1B and Gemma-3-1B shapes over 0 .. 4096
// keys, f32 and bf16 KV, and a 512-token prefill), to be read next to the matmul rows.
// Prints a markdown table; --json writes one JSON object per line instead (matmul only).
//
//   kernels_bench [--json] [--isa=avx512bf16,avx512,avx2] [--threads=1,2] [--m=1,512] [--reps=N]
//                 [--dtype=bf16|f16|f32] [--precision=f32,bf16]
//                 [--shape=qo_proj,kv_proj,gate_up,down,lm_head,
//                          gemma_q,gemma_gate_up,gemma_down,qwen_qkv,qwen_gate_up,qwen_down,
//                          expert_gate_up,expert_down]
//                 [--no-huge-pages] [--no-probe] [--no-attention] [--cached]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "infer/core/mapped_file.h"
#include "infer/core/tensor.h"
#include "infer/core/thread_pool.h"
#include "infer/kernels/cpu/isa.h"
#include "infer/kernels/ops.h"

namespace {

using infer::DType;
using infer::Tensor;
using infer::ThreadPool;
namespace kernels = infer::kernels;

// Up to this many rows the matmuls cycle through copies of the weights (--cached: not).
constexpr int64_t kStreamedRows = 64;

struct Options {
  bool json = false;
  std::vector<kernels::Isa> isas;
  std::vector<int> threads = {1, 2};
  std::vector<int64_t> ms = {1, 512};
  int reps = 5;
  DType dtype = DType::kBF16;
  std::vector<kernels::MatMulPrecision> precisions = {kernels::MatMulPrecision::kF32};
  // Weight types of the MatMul runs: none (the --dtype values) and/or int8, int6, int4, int4k.
  std::vector<kernels::Quantization> quantizations = {kernels::Quantization::kNone};
  bool huge_pages = true;
  std::vector<std::string> shapes;  // empty: all
  bool probe = true;
  bool attention = true;
  // m = 1 reads one copy of the weights again and again (cache-resident when it fits): the
  // kernel's compute ceiling rather than the memory stream.
  bool cached = false;
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    parts.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

Options ParseArgs(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* prefix) -> const char* {
      const size_t len = std::strlen(prefix);
      return arg.compare(0, len, prefix) == 0 ? argv[i] + len : nullptr;
    };
    if (arg == "--json") {
      options.json = true;
    } else if (arg == "--cached") {
      options.cached = true;
    } else if (arg == "--no-attention") {
      options.attention = false;
    } else if (arg == "--no-probe") {
      options.probe = false;
    } else if (const char* v = value("--shape=")) {
      options.shapes = Split(v);
    } else if (arg == "--no-huge-pages") {
      options.huge_pages = false;
    } else if (const char* v = value("--isa=")) {
      for (const auto& name : Split(v)) options.isas.push_back(kernels::ParseIsa(name));
    } else if (const char* v = value("--threads=")) {
      options.threads.clear();
      for (const auto& t : Split(v)) options.threads.push_back(std::stoi(t));
    } else if (const char* v = value("--m=")) {
      options.ms.clear();
      for (const auto& m : Split(v)) options.ms.push_back(std::stoll(m));
    } else if (const char* v = value("--reps=")) {
      options.reps = std::max(1, std::stoi(v));
    } else if (const char* v = value("--precision=")) {
      options.precisions.clear();
      for (const auto& name : Split(v)) {
        options.precisions.push_back(kernels::ParseMatMulPrecision(name));
      }
    } else if (const char* v = value("--quantization=")) {
      options.quantizations.clear();
      for (const std::string& name : Split(v)) {
        // int6k and int5k (GGUF's Q6_K, Q5_K) are no --quantization choice: named here, made by
        // QuantizedWeights.
        options.quantizations.push_back(name == "int6k"   ? kernels::Quantization::kInt6K
                                        : name == "int5k" ? kernels::Quantization::kInt5K
                                                          : kernels::ParseQuantization(name));
      }
    } else if (const char* v = value("--dtype=")) {
      const std::string d = v;
      options.dtype = d == "f32" ? DType::kF32 : d == "f16" ? DType::kF16 : DType::kBF16;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--json] [--isa=avx512bf16,avx512,avx2] [--threads=1,2] "
                   "[--m=1,512] [--reps=N] [--dtype=bf16|f16|f32] [--precision=f32,bf16] "
                   "[--quantization=none,int8,int6,int4,int4k,int6k,int5k] "
                   "[--shape=a,b] [--no-huge-pages] [--no-probe] [--no-attention] [--cached]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (options.isas.empty()) {
    // The best AVX-512 level (the two differ only in bf16 precision), then AVX2.
    if (kernels::IsaSupported(kernels::Isa::kAvx512)) options.isas.push_back(kernels::DetectIsa());
    if (kernels::IsaSupported(kernels::Isa::kAvx2)) options.isas.push_back(kernels::Isa::kAvx2);
  }
  return options;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Fills with small random-ish values (a cheap LCG; the values do not matter for speed).
// values quantized as `quantization` says; int6k and int5k, which only GGUF Q6_K and Q5_K blocks
// make, from random q, scales and d in their ranges.
kernels::PackedMatrix QuantizedWeights(const Tensor& values, kernels::Quantization quantization,
                                       infer::TensorArena* storage) {
  const bool six = quantization == kernels::Quantization::kInt6K;
  if (!six && quantization != kernels::Quantization::kInt5K) {
    return kernels::PackedMatrix::Quantize(values, quantization, 0, nullptr, storage);
  }
  return kernels::PackedMatrix::FromQuantizedRows(
      quantization, values.dim(0), values.dim(1),
      [six](int64_t row, kernels::PackedMatrix::QuantizedRow& out) {
        for (size_t i = 0; i < out.q.size(); ++i) {
          // The stored values: int6k's q + 32, int5k's q (its minimum is apart).
          out.q[i] = static_cast<uint8_t>((row + i * 7) % (six ? 64 : 32));
        }
        for (size_t i = 0; i < out.sc16.size() && six; ++i) {
          out.sc16[i] = static_cast<int8_t>((row + i * 13) % 255 - 127);
        }
        for (size_t i = 0; i < out.sc.size() && !six; ++i) {
          out.sc[i] = static_cast<uint8_t>((row + i * 13) % 64);
          out.mn[i] = static_cast<uint8_t>((row + i * 5) % 64);
        }
        for (uint16_t& d : out.d) d = infer::F32ToF16(1e-3F);
        for (uint16_t& m : out.m) m = infer::F32ToF16(-1e-3F);
      },
      nullptr, storage);
}

void Fill(const Tensor& t) {
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return (static_cast<float>(state >> 8) / 16777216.0F - 0.5F) * 0.1F;
  };
  const int64_t n = t.numel();
  if (t.dtype() == DType::kF32) {
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = next();
  } else {
    for (int64_t i = 0; i < n; ++i) {
      t.data<uint16_t>()[i] =
          t.dtype() == DType::kBF16 ? infer::F32ToBf16(next()) : infer::F32ToF16(next());
    }
  }
}

// Ceilings measured in the same run, since the shared host's speed drifts: f32 FMA peak
// (24 independent zmm FMA chains per thread) and streaming read bandwidth.
__attribute__((target("avx512f"))) float FmaLoop(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3F);
  __m512 a = _mm512_set1_ps(0.999999F);
  const __m512 b = _mm512_set1_ps(1e-7F);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __asm__ volatile("" : "+v"(a));
  }
  float sum = 0;
  for (int i = 0; i < 24; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return sum;
}

// The same with vdpbf16ps (64 flops per instruction).
__attribute__((target("avx512f,avx512bf16"))) float DotBf16Loop(int64_t iters) {
  __m512 acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i) * 1e-3F);
  __m512bh a = (__m512bh)_mm512_set1_epi32(0x3f803f80);  // bf16 pairs (1.0, 1.0)
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x33d633d6);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    __asm__ volatile("" : "+v"(a));
  }
  float sum = 0;
  for (int i = 0; i < 24; ++i) sum += _mm512_reduce_add_ps(acc[i]);
  return sum;
}

__attribute__((target("avx512f"))) float ReadLoop(const char* bytes, int64_t begin, int64_t end) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = begin; i < end; i += 256) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(reinterpret_cast<const float*>(bytes + i)));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(reinterpret_cast<const float*>(bytes + i + 64)));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(reinterpret_cast<const float*>(bytes + i + 128)));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(reinterpret_cast<const float*>(bytes + i + 192)));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

// flops_per_op: 32 for an f32 FMA, 64 for vdpbf16ps.
// The same with vpdpbusd (16 lanes x 4 u8 x s8 products: 128 integer ops per instruction).
__attribute__((target("avx512f,avx512vnni"))) float DotVnniLoop(int64_t iters) {
  __m512i acc[24];
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(3);
  const __m512i b = _mm512_set1_epi8(-1);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    __asm__ volatile("" : "+v"(a));
  }
  int sum = 0;
  for (int i = 0; i < 24; ++i) sum += _mm512_reduce_add_epi32(acc[i]);
  return static_cast<float>(sum);
}

// AVX2 (no AVX-512): 12 independent ymm FMA chains (16 flops each; 12 accumulators and the two
// operands fit the 16 ymm registers), two rounds per iteration, for CPUs and forced runs
// without AVX-512.
__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i) * 1e-3F);
  __m256 a = _mm256_set1_ps(0.999999F);
  const __m256 b = _mm256_set1_ps(1e-7F);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 2
    for (int round = 0; round < 2; ++round) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
      __asm__ volatile("" : "+x"(a));
    }
  }
  float sum = 0;
  for (int i = 0; i < 12; ++i) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc[i]);
    for (float v : lanes) sum += v;
  }
  return sum;
}

// AVX2's exact int8 x int8 step without VNNI, as the int8 GEMM runs it (matmul_quant_simd.cc,
// Int8PanelTile): acc += vpmaddwd(vpmaddubsw(|x|, u ^ f), 1), 32 products (64 integer ops) per
// step; 8 accumulator chains, three rounds per iteration. Each chain's weights u are its own
// accumulator's bytes, so that the compiler cannot share or hoist the xor and the products.
__attribute__((target("avx2"))) float MaddubsLoopAvx2(int64_t iters) {
  __m256i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi32(i);
  const __m256i ax = _mm256_set1_epi8(3);
  const __m256i fx = _mm256_set1_epi8(0x7f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 3
    for (int round = 0; round < 3; ++round) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        acc[i] = _mm256_add_epi32(
            acc[i],
            _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_xor_si256(acc[i], fx)), ones));
      }
    }
  }
  int sum = 0;
  for (int i = 0; i < 8; ++i) {
    alignas(32) int lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[i]);
    for (int v : lanes) sum += v;
  }
  return static_cast<float>(sum);
}

__attribute__((target("avx2"))) float ReadLoopAvx2(const char* bytes, int64_t begin, int64_t end) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = begin; i < end; i += 128) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(reinterpret_cast<const float*>(bytes + i)));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(reinterpret_cast<const float*>(bytes + i + 32)));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(reinterpret_cast<const float*>(bytes + i + 64)));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(reinterpret_cast<const float*>(bytes + i + 96)));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float sum = 0;
  for (float v : lanes) sum += v;
  return sum;
}

// TDPBF16PS on operands held in tile registers: four independent 16 x 16 f32 accumulators, 24
// tile products (16 x 16 x 32 multiply-adds each) per iteration. The tile peak the tile MatMul's
// fraction is reported against.
__attribute__((target("amx-tile,amx-bf16"))) float TileBf16Loop(int64_t iters) {
  struct alignas(64) Config {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  alignas(64) static uint16_t operand[16 * 32];
  std::fill(std::begin(operand), std::end(operand), uint16_t{0x3c00});  // bf16 2^-7
  alignas(64) float out[16 * 16];
  _tile_loadconfig(&config);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  for (int64_t it = 0; it < iters; ++it) {
    for (int r = 0; r < 6; ++r) {
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, out, 64);
  _tile_release();
  return out[0];
}

double PeakGflops(ThreadPool& pool, float (*loop)(int64_t), int flops_per_op,
                  int64_t iters = 20'000'000) {
  std::vector<float> sink(static_cast<size_t>(pool.num_threads()));
  const double start = NowSeconds();
  pool.RunTasks(pool.num_threads(), [&](int t) { sink[static_cast<size_t>(t)] = loop(iters); });
  const double seconds = NowSeconds() - start;
  return static_cast<double>(iters) * 24 * flops_per_op * pool.num_threads() / seconds / 1e9;
}

// The bf16 tile peak for `threads` threads (best of three), 0 without AMX.
double TilePeakGflops(int threads) {
  if (!kernels::IsaSupported(kernels::Isa::kAvx512Amx)) return 0;
  ThreadPool pool(threads);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    best = std::max(best, PeakGflops(pool, TileBf16Loop, 2 * 16 * 16 * 32, 400'000));
  }
  return best;
}

double ReadBandwidthGbs(ThreadPool& pool, const Tensor& buffer) {
  const auto* bytes = static_cast<const char*>(buffer.raw());
  const int64_t size = static_cast<int64_t>(buffer.size_bytes()) / 4096 * 4096;
  std::vector<float> sink(static_cast<size_t>(pool.num_threads()));
  const bool avx512 = kernels::IsaSupported(kernels::Isa::kAvx512);
  const double start = NowSeconds();
  pool.ParallelFor(size, 4096, [&](int64_t begin, int64_t end) {
    sink[0] += avx512 ? ReadLoop(bytes, begin, end) : ReadLoopAvx2(bytes, begin, end);
  });
  return static_cast<double>(size) / (NowSeconds() - start) / 1e9;
}

struct TimeStats {
  double mean, sd, best;
};

// Mean, sample standard deviation and minimum of repeated timings (at least one).
TimeStats Summarize(const std::vector<double>& times) {
  double mean = 0;
  for (double t : times) mean += t;
  mean /= static_cast<double>(times.size());
  double var = 0;
  for (double t : times) var += (t - mean) * (t - mean);
  const double sd = times.size() > 1 ? std::sqrt(var / static_cast<double>(times.size() - 1)) : 0.0;
  return {mean, sd, *std::min_element(times.begin(), times.end())};
}

struct Shape {
  const char* name;
  int64_t n, k;
  bool by_default = true;  // in the set run when --shape names none (Llama's)
};

// ---- Attention ---------------------------------------------------------------------------

struct AttentionCase {
  const char* model;
  int64_t num_heads, num_kv_heads, head_dim;
  DType dtype;
  int64_t tokens, first_pos;
  bool shuffled;  // block ids shuffled (a long-running cache) or ascending (a fresh one)
};

// One layer of PagedAttention per call, block size 16 (the engine's default), the cache in
// 2 MiB pages as the engine allocates it (unless --no-huge-pages). A decode call must stream its
// K/V from memory as the model's does (every layer's cache is read once per token, the weights in
// between): the calls cycle through copies of the layer worth >= 256 MiB.
void RunAttentionCase(const Options& options, const AttentionCase& c) {
  constexpr int64_t kBlockSize = 16;
  const int64_t positions = c.first_pos + c.tokens;
  const int64_t blocks_per_layer = (positions + kBlockSize - 1) / kBlockSize;
  const int64_t head_stride = kBlockSize * c.head_dim;
  const int64_t block_stride = c.num_kv_heads * head_stride;
  const int64_t layer_bytes =
      blocks_per_layer * block_stride * 2 * static_cast<int64_t>(infer::DTypeSize(c.dtype));
  const int64_t copies =
      c.tokens == 1 ? std::max<int64_t>(1, (int64_t{256} << 20) / layer_bytes) : 1;
  const int64_t num_blocks = copies * blocks_per_layer;
  const Tensor k = Tensor::Empty(c.dtype, {num_blocks * block_stride}, options.huge_pages);
  const Tensor v = Tensor::Empty(c.dtype, {num_blocks * block_stride}, options.huge_pages);
  Fill(k);
  Fill(v);
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  uint32_t state = 777;
  for (int64_t i = num_blocks - 1; c.shuffled && i > 0; --i) {  // Fisher-Yates with an LCG
    state = state * 1664525u + 1013904223u;
    std::swap(ids[static_cast<size_t>(i)], ids[state % static_cast<uint32_t>(i + 1)]);
  }
  kernels::PagedKvLayer layer{.k = k.raw(),
                              .v = v.raw(),
                              .dtype = c.dtype,
                              .block_size = kBlockSize,
                              .block_stride = block_stride,
                              .head_stride = head_stride};
  std::vector<kernels::AttentionSequence> seqs(static_cast<size_t>(copies));
  for (int64_t i = 0; i < copies; ++i) {
    seqs[static_cast<size_t>(i)] = {.row = 0,
                                    .num_tokens = c.tokens,
                                    .first_pos = c.first_pos,
                                    .block_table = ids.data() + i * blocks_per_layer,
                                    .num_blocks = blocks_per_layer};
  }
  const kernels::AttentionParams params{.num_heads = c.num_heads,
                                        .num_kv_heads = c.num_kv_heads,
                                        .head_dim = c.head_dim,
                                        .scale = 1.0F / std::sqrt(static_cast<float>(c.head_dim))};
  std::vector<float> q(static_cast<size_t>(c.tokens * c.num_heads * c.head_dim), 0.03F);
  std::vector<float> out(q.size());
  // (query head, visible key) pairs; q.k and p.v are 2 x 2 x head_dim flops per pair.
  double pairs = 0;
  for (int64_t t = 0; t < c.tokens; ++t) pairs += static_cast<double>(c.first_pos + t + 1);
  pairs *= static_cast<double>(c.num_heads);
  const double kv_bytes = static_cast<double>(positions * c.num_kv_heads * c.head_dim * 2) *
                          static_cast<double>(infer::DTypeSize(c.dtype));
  for (kernels::Isa isa : options.isas) {
    kernels::SetActiveIsa(isa);
    for (int threads : options.threads) {
      ThreadPool pool(threads);
      const int64_t calls = c.tokens == 1 ? std::max<int64_t>(copies, 64) : 2;
      std::vector<double> times;
      for (int rep = -1; rep < options.reps; ++rep) {  // rep -1 warms up
        const double start = NowSeconds();
        for (int64_t call = 0; call < calls; ++call) {
          kernels::PagedAttention(q.data(), {&seqs[static_cast<size_t>(call % copies)], 1}, layer,
                                  params, out.data(), pool);
        }
        if (rep >= 0) times.push_back((NowSeconds() - start) / static_cast<double>(calls));
      }
      const auto [mean, sd, best] = Summarize(times);
      std::printf(
          "| %s %lldx%lldx%lld | %s | %s | %lld | %lld | %s | %d | %.4f | %.4f | %.4f | %.1f | "
          "%.1f |\n",
          c.model, static_cast<long long>(c.num_heads), static_cast<long long>(c.num_kv_heads),
          static_cast<long long>(c.head_dim), std::string(infer::DTypeName(c.dtype)).c_str(),
          c.shuffled ? "shuffled" : "ascending", static_cast<long long>(c.tokens),
          static_cast<long long>(c.first_pos), std::string(kernels::IsaName(isa)).c_str(), threads,
          best * 1e3, mean * 1e3, sd * 1e3, kv_bytes / best / 1e9,
          pairs * 4 * static_cast<double>(c.head_dim) / best / 1e9);
      std::fflush(stdout);
    }
  }
}

void RunAttention(const Options& options) {
  std::printf(
      "\n| attention (one layer) | kv | blocks | tokens | first_pos | isa | threads | best ms | "
      "mean ms | sd ms | KV GB/s | GFLOP/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<AttentionCase> cases;
  // Decode at Llama-3.2-1B shape: its per-layer cost next to context 0.
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    for (int64_t context : {0, 512, 4096}) {
      cases.push_back({"llama", 32, 8, 64, dtype, 1, context, false});
    }
  }
  cases.push_back({"llama", 32, 8, 64, DType::kBF16, 1, 4096, true});
  // Gemma-3-1B shape: one kv head, so a lone decode splits its partitions across threads.
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    cases.push_back({"gemma", 4, 1, 256, dtype, 1, 4096, false});
  }
  cases.push_back({"llama", 32, 8, 64, DType::kBF16, 512, 0, false});  // a prefill chunk
  for (const AttentionCase& c : cases) RunAttentionCase(options, c);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = ParseArgs(argc, argv);
  } catch (const std::exception& error) {  // an unknown --isa or --precision name
    std::fprintf(stderr, "error: %s\n", error.what());
    return 2;
  }
  const Shape shapes[] = {{"qo_proj", 2048, 2048},
                          {"kv_proj", 512, 2048},
                          {"gate_up", 8192, 2048},
                          {"down", 2048, 8192},
                          {"lm_head", 128256, 2048},
                          // gemma-3-1b's (hidden 1152, intermediate 6912, 4 x 256 query heads)
                          {"gemma_q", 1024, 1152, false},
                          {"gemma_gate_up", 6912, 1152, false},
                          {"gemma_down", 1152, 6912, false},
                          // Qwen3-1.7B's (hidden 2048, intermediate 6144, q 16 x 128 and k, v
                          // 8 x 128 in one)
                          {"qwen_qkv", 4096, 2048, false},
                          {"qwen_gate_up", 6144, 2048, false},
                          {"qwen_down", 2048, 6144, false},
                          // one expert of Qwen3-30B-A3B (hidden 2048, expert width 768): its gate
                          // and up as one matrix, its down
                          {"expert_gate_up", 1536, 2048, false},
                          {"expert_down", 2048, 768, false}};
  // The bf16 tile peak per thread count, for the tile MatMul's fraction of it.
  std::map<int, double> tile_peaks;
  for (int threads : options.threads) tile_peaks[threads] = TilePeakGflops(threads);
  if (!options.json) {
    std::printf("dtype %s, huge pages %s, detected ISA %s\n\n",
                std::string(infer::DTypeName(options.dtype)).c_str(),
                options.huge_pages ? "requested" : "off",
                std::string(kernels::IsaName(kernels::DetectIsa())).c_str());
    std::printf(
        "| shape | n x k | m | isa | precision | threads | best ms | mean ms | sd ms | best GB/s "
        "| best GFLOP/s | tile peak %% |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  }
  if (!options.json && options.probe && kernels::IsaSupported(kernels::Isa::kAvx2)) {
    const bool avx512 = kernels::IsaSupported(kernels::Isa::kAvx512);
    const char* probe_isa = avx512 ? "avx512" : "avx2";
    const Tensor buffer = Tensor::Empty(DType::kBF16, {512 << 20}, options.huge_pages);
    Fill(buffer);
    for (int threads : options.threads) {
      ThreadPool pool(threads);
      double best_bw = 0;
      for (int rep = 0; rep < 3; ++rep) best_bw = std::max(best_bw, ReadBandwidthGbs(pool, buffer));
      std::printf("| probe | read bandwidth | - | %s | - | %d | - | - | - | %.1f | - | - |\n",
                  probe_isa, threads, best_bw);
      std::printf("| probe | f32 FMA peak | - | %s | - | %d | - | - | - | - | %.1f | - |\n",
                  probe_isa, threads,
                  avx512 ? PeakGflops(pool, FmaLoop, 32) : PeakGflops(pool, FmaLoopAvx2, 16));
      if (!avx512) {
        std::printf(
            "| probe | int8 vpmaddubsw peak (GOP/s) | - | avx2 | - | %d | - | - | - | - | %.1f | - "
            "|\n",
            threads, PeakGflops(pool, MaddubsLoopAvx2, 64));
      }
      if (kernels::IsaSupported(kernels::Isa::kAvx512Bf16)) {
        std::printf(
            "| probe | bf16 dot peak | - | avx512bf16 | - | %d | - | - | - | - | %.1f | - |\n",
            threads, PeakGflops(pool, DotBf16Loop, 64));
        // The avx512bf16 level requires VNNI too (isa.h).
        std::printf(
            "| probe | int8 dot peak (GOP/s) | - | avx512bf16 | - | %d | - | - | - | - | "
            "%.1f | - |\n",
            threads, PeakGflops(pool, DotVnniLoop, 128));
      }
      if (kernels::IsaSupported(kernels::Isa::kAvx512Amx)) {
        std::printf(
            "| probe | bf16 tile peak | - | avx512amx | - | %d | - | - | - | - | %.1f | 100 |\n",
            threads, tile_peaks.at(threads));
      }
    }
    std::printf("\nhuge-page resident with the probe buffer: %.0f MiB\n\n",
                static_cast<double>(infer::HugePageResidentBytes()) / (1 << 20));
  }
  for (const Shape& shape : shapes) {
    const bool named =
        std::find(options.shapes.begin(), options.shapes.end(), shape.name) != options.shapes.end();
    if (options.shapes.empty() ? !shape.by_default : !named) continue;
    for (kernels::Quantization quantization : options.quantizations) {
      const bool quantized = quantization != kernels::Quantization::kNone;
      const size_t weight_bytes =
          quantized
              ? QuantizedWeights(Tensor::Empty(options.dtype, {32, shape.k}), quantization, nullptr)
                        .size_bytes() *
                    static_cast<size_t>((shape.n + 31) / 32)
              : static_cast<size_t>(shape.n * shape.k) * infer::DTypeSize(options.dtype);
      // Decode and batched decode (m <= kStreamedRows) must stream from memory, as in a model:
      // cycle through copies worth >= 512 MiB so none is cached. (Prefill shapes are
      // compute-bound and call one matrix.)
      const bool streams =
          !options.cached && std::any_of(options.ms.begin(), options.ms.end(),
                                         [](int64_t m) { return m <= kStreamedRows; });
      const int copies =
          streams ? static_cast<int>(std::max<size_t>(1, (512u << 20) / weight_bytes)) : 1;
      // Packed once, as the model packs its weights at load (one after another in 2 MiB pages).
      std::vector<kernels::PackedMatrix> weights;
      infer::TensorArena arena;
      infer::TensorArena* const storage = options.huge_pages ? &arena : nullptr;
      // (The copies are byte copies of one: quantizing 512 MiB with int4k's search took minutes.)
      {
        Tensor values = Tensor::Empty(options.dtype, {shape.n, shape.k});
        Fill(values);
        weights.push_back(QuantizedWeights(values, quantization, storage));
      }
      for (int c = 1; c < copies; ++c) weights.push_back(weights[0].Copy(storage));
      for (int64_t m : options.ms) {
        std::vector<float> x(static_cast<size_t>(m * shape.k), 0.01F);
        std::vector<float> y(static_cast<size_t>(m * shape.n));
        for (kernels::Isa isa : options.isas) {
          kernels::SetActiveIsa(isa);
          for (int threads : options.threads) {
            for (kernels::MatMulPrecision precision : options.precisions) {
              // Quantized weights have one arithmetic: one run, named by the type.
              if (quantized && precision != options.precisions.front()) continue;
              ThreadPool pool(threads);
              const std::string precision_name(quantized ? kernels::QuantizationName(quantization)
                                                         : kernels::MatMulPrecisionName(precision));
              const int calls_per_rep = m == 1 ? copies * 4 : m <= kStreamedRows ? copies : 1;
              std::vector<double> times;
              for (int rep = -1; rep < options.reps; ++rep) {  // rep -1 warms up
                const double start = NowSeconds();
                for (int call = 0; call < calls_per_rep; ++call) {
                  kernels::MatMul(x.data(), m, shape.k, shape.k, weights[call % copies], nullptr,
                                  y.data(), shape.n, pool, precision);
                }
                if (rep >= 0) times.push_back((NowSeconds() - start) / calls_per_rep);
              }
              const auto [mean, sd, best] = Summarize(times);
              const double gb_s = static_cast<double>(weight_bytes) / best / 1e9;
              const double gflop_s = 2.0 * static_cast<double>(m * shape.n * shape.k) / best / 1e9;
              // The bf16 tile MatMul against the tile probe (AMX, kBf16 on bf16 weights only).
              const bool on_tiles = isa == kernels::Isa::kAvx512Amx && !quantized &&
                                    precision == kernels::MatMulPrecision::kBf16 &&
                                    options.dtype == DType::kBF16;
              const double peak = on_tiles ? tile_peaks.at(threads) : 0;
              const std::string fraction =
                  peak > 0 ? std::to_string(static_cast<int>(100 * gflop_s / peak + 0.5)) : "-";
              if (options.json) {
                std::printf(
                    "{\"shape\":\"%s\",\"n\":%lld,\"k\":%lld,\"m\":%lld,\"isa\":\"%s\",\"dtype\":"
                    "\"%"
                    "s\",\"precision\":\"%s\","
                    "\"threads\":%d,\"reps\":%d,\"best_ns\":%.0f,\"avg_ns\":%.0f,\"stddev_ns\":%."
                    "0f,"
                    "\"best_gb_s\":%.2f,\"best_gflop_s\":%.2f,\"tile_peak_gflop_s\":%.2f}\n",
                    shape.name, static_cast<long long>(shape.n), static_cast<long long>(shape.k),
                    static_cast<long long>(m), std::string(kernels::IsaName(isa)).c_str(),
                    std::string(infer::DTypeName(options.dtype)).c_str(), precision_name.c_str(),
                    threads, options.reps, best * 1e9, mean * 1e9, sd * 1e9, gb_s, gflop_s, peak);
              } else {
                std::printf(
                    "| %s | %lldx%lld | %lld | %s | %s | %d | %.3f | %.3f | %.3f | %.1f | %.1f | "
                    "%s "
                    "|\n",
                    shape.name, static_cast<long long>(shape.n), static_cast<long long>(shape.k),
                    static_cast<long long>(m), std::string(kernels::IsaName(isa)).c_str(),
                    precision_name.c_str(), threads, best * 1e3, mean * 1e3, sd * 1e3, gb_s,
                    gflop_s, fraction.c_str());
              }
              std::fflush(stdout);
            }
          }
        }
      }
    }
  }
  if (!options.json && options.attention) RunAttention(options);
  return 0;
}
