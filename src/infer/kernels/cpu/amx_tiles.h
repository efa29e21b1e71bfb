// The AMX tile operations the tile MatMuls use, for kernel sources compiled with -mamx-tile
// -mamx-int8 -mamx-bf16 (the instructions), or with INFER_AMX_EMULATE: the same operations on
// memory, written from the definitions in Intel's Software Developer's Manual (LDTILECFG,
// TILELOADD, TILESTORED, TILEZERO, TDPBSUD, TDPBF16PS), so that the tile paths' layout, loops
// and arithmetic run in the tests of CPUs without AMX. Tile numbers are literals (the
// instructions encode them).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "infer/core/dtype.h"

#if !defined(INFER_AMX_EMULATE)
#include <immintrin.h>
#endif

namespace infer::kernels::cpu {

// LDTILECFG's 64-byte operand, palette 1: up to 8 tiles of up to 16 rows of up to 64 bytes.
// Unused tiles keep 0 rows and 0 bytes; the reserved bytes must stay 0.
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// MXCSR with FTZ (bit 15) and DAZ (bit 6) set, for as long as it lives: f32 arithmetic that
// treats denormal inputs as zero and flushes denormal results, as TDPBF16PS does (the
// tile order's vector code, and the emulation).
class FlushDenormalsScope {
 public:
  FlushDenormalsScope() : saved_(__builtin_ia32_stmxcsr()) {
    __builtin_ia32_ldmxcsr(saved_ | 0x8040);
  }
  ~FlushDenormalsScope() { __builtin_ia32_ldmxcsr(saved_); }
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  unsigned saved_;
};

#if defined(INFER_AMX_EMULATE)

// Eight tiles of 16 rows of 64 bytes per thread, and the configuration loaded (palette 0:
// none, as after TILERELEASE).
struct EmulatedTiles {
  TileConfig config{.palette_id = 0};
  alignas(64) uint8_t tile[8][16][64];
};
inline thread_local EmulatedTiles emulated_tiles;

// Where the instruction would fault (#UD, #GP): the emulation stops the process.
inline void EmulatedCheck(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "emulated AMX: %s\n", what);
    std::abort();
  }
}

inline void EmulatedLoadConfig(const TileConfig* config) {
  EmulatedCheck(config->palette_id == 1 && config->start_row == 0, "LDTILECFG: palette 1 only");
  for (int t = 0; t < 16; ++t) {
    const bool used = config->rows[t] != 0 || config->colsb[t] != 0;
    EmulatedCheck(!used || (t < 8 && config->rows[t] <= 16 && config->colsb[t] <= 64 &&
                            config->rows[t] > 0 && config->colsb[t] > 0),
                  "LDTILECFG: a tile's shape is out of range");
  }
  emulated_tiles.config = *config;
  std::memset(emulated_tiles.tile, 0, sizeof(emulated_tiles.tile));
}
inline void EmulatedRelease() {
  emulated_tiles.config = TileConfig{.palette_id = 0};
  std::memset(emulated_tiles.tile, 0, sizeof(emulated_tiles.tile));
}
inline void EmulatedCheckTile(int t) {
  EmulatedCheck(emulated_tiles.config.palette_id == 1, "tile instruction without LDTILECFG");
  EmulatedCheck(emulated_tiles.config.rows[t] > 0, "tile instruction on an unconfigured tile");
}
// Rows past the configured ones, and bytes past a row's configured ones, read as 0.
inline void EmulatedLoad(int t, const void* base, int64_t stride) {
  EmulatedCheckTile(t);
  const TileConfig& c = emulated_tiles.config;
  std::memset(emulated_tiles.tile[t], 0, sizeof(emulated_tiles.tile[t]));
  for (int r = 0; r < c.rows[t]; ++r) {
    std::memcpy(emulated_tiles.tile[t][r], static_cast<const uint8_t*>(base) + r * stride,
                c.colsb[t]);
  }
}
inline void EmulatedStore(int t, void* base, int64_t stride) {
  EmulatedCheckTile(t);
  const TileConfig& c = emulated_tiles.config;
  for (int r = 0; r < c.rows[t]; ++r) {
    std::memcpy(static_cast<uint8_t*>(base) + r * stride, emulated_tiles.tile[t][r], c.colsb[t]);
  }
}
inline void EmulatedZero(int t) {
  EmulatedCheckTile(t);
  std::memset(emulated_tiles.tile[t], 0, sizeof(emulated_tiles.tile[t]));
}
// A tile product's operands: configured, a (rows x K dwords) against b (K rows) into dst (a's
// rows x b's columns). The configuration, for the product's loops.
inline const TileConfig& EmulatedCheckProduct(int dst, int a, int b, const char* what) {
  EmulatedCheckTile(dst);
  EmulatedCheckTile(a);
  EmulatedCheckTile(b);
  const TileConfig& c = emulated_tiles.config;
  EmulatedCheck(c.colsb[a] / 4 == c.rows[b] && c.colsb[dst] == c.colsb[b] &&
                    c.rows[dst] == c.rows[a] && c.colsb[a] % 4 == 0,
                what);
  return c;
}
// TDPBSUD: for each row m of dst and dword n of it, the sum over k < a.colsb / 4 of the four
// products of a's signed bytes [m][4k + i] with b's unsigned bytes [k][4n + i], added to
// dst's int32 [m][n].
inline void EmulatedDpbsud(int dst, int a, int b) {
  const TileConfig& c = EmulatedCheckProduct(dst, a, b, "TDPBSUD: the tiles' shapes do not match");
  for (int m = 0; m < c.rows[dst]; ++m) {
    for (int n = 0; n < c.colsb[dst] / 4; ++n) {
      int32_t sum;
      std::memcpy(&sum, &emulated_tiles.tile[dst][m][4 * n], 4);
      for (int k = 0; k < c.colsb[a] / 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          sum += static_cast<int8_t>(emulated_tiles.tile[a][m][4 * k + i]) *
                 static_cast<int32_t>(emulated_tiles.tile[b][k][4 * n + i]);
        }
      }
      std::memcpy(&emulated_tiles.tile[dst][m][4 * n], &sum, 4);
    }
  }
}

inline float Bf16Value(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return Bf16ToF32(bits);
}

// TDPBF16PS: for each row m of dst and f32 n of it, two sums from +0 over k < a.colsb / 4, in k
// order, each step an f32 fused multiply-add (round to nearest even, DAZ and FTZ): one of the
// products of a's bf16 [m][2k] with b's bf16 [k][2n], one of a's [m][2k + 1] with b's
// [k][2n + 1]; then dst[m][n] + (the first sum + the second).
inline void EmulatedDpbf16ps(int dst, int a, int b) {
  const TileConfig& c =
      EmulatedCheckProduct(dst, a, b, "TDPBF16PS: the tiles' shapes do not match");
  const FlushDenormalsScope flush;
  for (int m = 0; m < c.rows[dst]; ++m) {
    for (int n = 0; n < c.colsb[dst] / 4; ++n) {
      float even = 0.0F;
      float odd = 0.0F;
      for (int k = 0; k < c.colsb[a] / 4; ++k) {
        const uint8_t* ap = &emulated_tiles.tile[a][m][4 * k];
        const uint8_t* bp = &emulated_tiles.tile[b][k][4 * n];
        even = __builtin_fmaf(Bf16Value(ap), Bf16Value(bp), even);
        odd = __builtin_fmaf(Bf16Value(ap + 2), Bf16Value(bp + 2), odd);
      }
      float sum;
      std::memcpy(&sum, &emulated_tiles.tile[dst][m][4 * n], 4);
      sum += even + odd;
      std::memcpy(&emulated_tiles.tile[dst][m][4 * n], &sum, 4);
    }
  }
}

#define INFER_TILE_LOAD_CONFIG(config) EmulatedLoadConfig(config)
#define INFER_TILE_RELEASE() EmulatedRelease()
#define INFER_TILE_LOAD(t, base, stride) EmulatedLoad(t, base, stride)
#define INFER_TILE_STORE(t, base, stride) EmulatedStore(t, base, stride)
#define INFER_TILE_ZERO(t) EmulatedZero(t)
#define INFER_TILE_DPBSUD(dst, a, b) EmulatedDpbsud(dst, a, b)
#define INFER_TILE_DPBF16PS(dst, a, b) EmulatedDpbf16ps(dst, a, b)

#else

// GCC's tile loads (and LDTILECFG) are asm statements that name no memory operand, or only
// its first 8 bytes: the barrier makes the stores before them (a tile's rows written just
// before) land first.
#define INFER_TILE_LOAD_CONFIG(config) \
  do {                                 \
    __asm__ volatile("" ::: "memory"); \
    _tile_loadconfig(config);          \
  } while (0)
#define INFER_TILE_RELEASE() _tile_release()
#define INFER_TILE_LOAD(t, base, stride) \
  do {                                   \
    __asm__ volatile("" ::: "memory");   \
    _tile_loadd(t, base, stride);        \
  } while (0)
#define INFER_TILE_STORE(t, base, stride) _tile_stored(t, base, stride)
#define INFER_TILE_ZERO(t) _tile_zero(t)
#define INFER_TILE_DPBSUD(dst, a, b) _tile_dpbsud(dst, a, b)
#define INFER_TILE_DPBF16PS(dst, a, b) _tile_dpbf16ps(dst, a, b)

#endif

}  // namespace infer::kernels::cpu
