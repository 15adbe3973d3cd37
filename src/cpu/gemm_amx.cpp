// AMX micro-kernels (plan in gemm_packed.h): i8 x i8 -> i32 on AMX-INT8,
// bf16 x bf16 -> f32 and f16 x f16 -> f32 on AMX-BF16.
//
// A tile register holds up to 16 rows of 64 bytes. One tdp* instruction does
//   C[16 x 16] += A[16 x 64 bytes] . B[16 x 64 bytes]
// where a row of A is 64 (i8) or 32 (bf16) consecutive depth steps of one
// row, and a row of B holds, for each of 16 columns, the 4 (i8) or 2 (bf16)
// depth steps matching that group of A's row: B is "VNNI-interleaved".
//   tdpbssd:   C.i32 += sum of s8 * s8 (exact, wrapping)
//   tdpbf16ps: C.f32 += sum of bf16 * bf16 (products exact in f32, sums
//              rounded to nearest even; bf16 subnormals read as zero and
//              subnormal results flush to zero, unlike IEEE)
// Tile 32 x 32: C in tiles 0-3 (2 x 2), A rows 0-15 / 16-31 in tiles 4 / 5,
// B columns 0-15 / 16-31 in tiles 6 / 7. Packed A is row-major with a pitch
// of the depth plus 64 bytes: a pitch that is a multiple of 4 KiB would put
// the 16 rows of a tile load in one L1 set (12 ways). Packed B is a
// [depth / G][32 columns][G] interleave, so the two B tiles are the two
// halves of each 128-byte row.
//
// f16 has no AMX instruction on these processors. Each f16 value is split
// exactly into bf16 hi + lo (convert.h: split_f16_bf16), and
//   a b = ah bh + ah bl + al bh + al bl,
// of which the last term, below 2^-16 |a b|, is dropped: far under the f16
// rounding of the result (2^-11). Packing lays the depth out three times,
//   A row: [ah | ah | al]     B column: [bh ; bl ; bh]
// so the bf16 kernel runs unchanged over a depth of 3 K.
#include <immintrin.h>

#include <cstring>

#include "cpu/convert.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm_pack.h"
#include "cpu/gemm_packed.h"

#define TC_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-int8,amx-bf16")))

namespace tc {
namespace cpu {
namespace {

constexpr int kMR = 32, kNR = 32;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Eight tiles of 16 rows x 64 bytes, for every kernel here.
TC_AMX void tiles_begin() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.colsb[t] = 64;
      c.rows[t] = 16;
    }
    return c;
  }();
  _tile_loadconfig(&cfg);
}

TC_AMX void tiles_end() { _tile_release(); }

// The 2 x 2 tile product over `bytes` bytes of A's rows, 64 per step.
// pa: 32 rows at a pitch of `pitch` bytes; pb: rows of 128 bytes, of which
// 16 (2048 bytes) go with each 64 bytes of A; t: the 32 x 32 tile.
#define TC_AMX_LOOP(DP)                                            \
  if (accumulate) {                                                \
    _tile_loadd(0, t, 128);                                        \
    _tile_loadd(1, t + 16, 128);                                   \
    _tile_loadd(2, t + 16 * 32, 128);                              \
    _tile_loadd(3, t + 16 * 32 + 16, 128);                         \
  } else {                                                         \
    _tile_zero(0);                                                 \
    _tile_zero(1);                                                 \
    _tile_zero(2);                                                 \
    _tile_zero(3);                                                 \
  }                                                                \
  for (int64_t k = 0; k < bytes; k += 64) {                        \
    /* each load just before its first use, so that loads overlap  \
       the products already issued */                              \
    _tile_loadd(4, pa + k, pitch);                                 \
    _tile_loadd(6, pb + k * 32, 128);                              \
    DP(0, 4, 6);                                                   \
    _tile_loadd(7, pb + k * 32 + 64, 128);                         \
    DP(1, 4, 7);                                                   \
    _tile_loadd(5, pa + 16 * pitch + k, pitch);                    \
    DP(2, 5, 6);                                                   \
    DP(3, 5, 7);                                                   \
  }                                                                \
  _tile_stored(0, t, 128);                                         \
  _tile_stored(1, t + 16, 128);                                    \
  _tile_stored(2, t + 16 * 32, 128);                               \
  _tile_stored(3, t + 16 * 32 + 16, 128);

// ---- i8 ----------------------------------------------------------------------

namespace i8 {

int64_t depth(int64_t K) { return round_up(K, 64); }
int64_t a_pitch(int64_t depth) { return depth + 64; }  // elements (bytes)
size_t a_bytes(int64_t depth) { return size_t(a_pitch(depth)) * kMR; }
size_t b_bytes(int64_t depth) { return size_t(depth) * kNR; }

TC_AMX void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.a) + i0 * op.a_rs;
  pack_rows<kMR>(p, op.a_rs, op.a_cs, rows, op.K, depth, a_pitch(depth), static_cast<int8_t*>(out),
                 [](int8_t v) { return v; });
}

TC_AMX void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.b) + j0 * op.b_rs;
  int8_t* o = static_cast<int8_t*>(out);
  if (op.b_rs == 1 && cols == kNR) {  // whole groups vectorised, the rest below
    const int64_t full = op.K / 4;
    interleave32_i8x4(p, op.b_cs, full, o);
    pack_interleaved<kNR, 4>(p + full * 4 * op.b_cs, op.b_rs, op.b_cs, cols, op.K - full * 4, depth - full * 4,
                             o + full * 4 * kNR, [](int8_t v) { return v; });
    return;
  }
  pack_interleaved<kNR, 4>(p, op.b_rs, op.b_cs, cols, op.K, depth, o, [](int8_t v) { return v; });
}

// Chunks of 768 depth steps: 24 KiB of the B panel, half of L1.
constexpr int64_t kKC = 768;

TC_AMX void micro(const void* a, const void* b, int64_t depth, int64_t k0, int64_t kn, void* tile,
                  bool accumulate) {
  const char* pa = static_cast<const char*>(a) + k0;
  const char* pb = static_cast<const char*>(b) + k0 * kNR;
  int32_t* t = static_cast<int32_t*>(tile);
  const int64_t pitch = a_pitch(depth), bytes = kn;
  TC_AMX_LOOP(_tile_dpbssd)
}

}  // namespace i8

// ---- bf16 and f16 -------------------------------------------------------------

namespace bf {

// A rows are depth bf16 long, 32 elements apart; B rows hold 32 columns x 2
// depth steps.
int64_t a_pitch(int64_t depth) { return depth + 32; }  // elements
size_t a_bytes(int64_t depth) { return size_t(a_pitch(depth)) * kMR * 2; }
size_t b_bytes(int64_t depth) { return size_t(depth) * kNR * 2; }

// Chunks of 384 depth steps: 24 KiB of the B panel, half of L1.
constexpr int64_t kKC = 384;

TC_AMX void micro(const void* a, const void* b, int64_t depth, int64_t k0, int64_t kn, void* tile,
                  bool accumulate) {
  const char* pa = static_cast<const char*>(a) + 2 * k0;
  const char* pb = static_cast<const char*>(b) + 2 * k0 * kNR;
  float* t = static_cast<float*>(tile);
  const int64_t pitch = a_pitch(depth) * 2, bytes = kn * 2;
  TC_AMX_LOOP(_tile_dpbf16ps)
}

int64_t depth_bf16(int64_t K) { return round_up(K, 32); }
int64_t depth_f16(int64_t K) { return 3 * round_up(K, 32); }

TC_AMX void pack_a_bf16(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const uint16_t* p = static_cast<const uint16_t*>(op.a) + i0 * op.a_rs;
  pack_rows<kMR>(p, op.a_rs, op.a_cs, rows, op.K, depth, a_pitch(depth), static_cast<uint16_t*>(out),
                 [](uint16_t v) { return v; });
}

TC_AMX void pack_b_bf16(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const uint16_t* p = static_cast<const uint16_t*>(op.b) + j0 * op.b_rs;
  uint16_t* o = static_cast<uint16_t*>(out);
  if (op.b_rs == 1 && cols == kNR) {
    const int64_t full = op.K / 2;
    interleave32_u16x2(p, op.b_cs, full, o);
    pack_interleaved<kNR, 2>(p + full * 2 * op.b_cs, op.b_rs, op.b_cs, cols, op.K - full * 2, depth - full * 2,
                             o + full * 2 * kNR, [](uint16_t v) { return v; });
    return;
  }
  pack_interleaved<kNR, 2>(p, op.b_rs, op.b_cs, cols, op.K, depth, o, [](uint16_t v) { return v; });
}

// f16 A: each row [ah | ah | al], segments of depth / 3 (K rounded to 32).
TC_AMX void pack_a_f16(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const uint16_t* p = static_cast<const uint16_t*>(op.a) + i0 * op.a_rs;
  uint16_t* o = static_cast<uint16_t*>(out);
  const int64_t K = op.K, seg = depth / 3, pitch = a_pitch(depth);
  std::memset(o, 0, size_t(kMR * pitch) * 2);
  if (op.a_cs == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      uint16_t* row = o + r * pitch;
      split_f16_bf16(p + r * op.a_rs, row, row + 2 * seg, K);
      std::memcpy(row + seg, row, size_t(K) * 2);
    }
  } else {  // rows contiguous for a fixed k
    uint16_t hi[kMR], lo[kMR];
    for (int64_t k = 0; k < K; ++k) {
      split_f16_bf16(p + k * op.a_cs, hi, lo, rows);
      for (int64_t r = 0; r < rows; ++r) {
        uint16_t* row = o + r * pitch;
        row[k] = row[seg + k] = hi[r];
        row[2 * seg + k] = lo[r];
      }
    }
  }
}

// f16 B: each column [bh ; bl ; bh] in the [depth / 2][32][2] interleave.
TC_AMX void pack_b_f16(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const uint16_t* p = static_cast<const uint16_t*>(op.b) + j0 * op.b_rs;
  uint16_t* o = static_cast<uint16_t*>(out);
  const int64_t K = op.K, seg = depth / 3;  // depth steps per segment
  uint16_t* s_hi = o;
  uint16_t* s_lo = o + seg * kNR;
  std::memset(o, 0, size_t(2 * seg * kNR) * 2);
  auto at = [](int64_t k, int64_t j) { return ((k >> 1) * kNR + j) * 2 + (k & 1); };
  int64_t k_done = 0;
  if (op.b_rs == 1 && cols == kNR) {  // whole panel: split two rows, interleave them
    alignas(32) uint16_t hi[2][kNR], lo[2][kNR];
    for (; k_done + 2 <= K; k_done += 2) {
      split_f16_bf16(p + k_done * op.b_cs, hi[0], lo[0], kNR);
      split_f16_bf16(p + (k_done + 1) * op.b_cs, hi[1], lo[1], kNR);
      interleave32_u16x2(hi[0], kNR, 1, s_hi + k_done * kNR);
      interleave32_u16x2(lo[0], kNR, 1, s_lo + k_done * kNR);
    }
  }
  if (op.b_rs == 1) {  // columns contiguous for a fixed k (what is left of it)
    uint16_t hi[kNR], lo[kNR];
    for (int64_t k = k_done; k < K; ++k) {
      split_f16_bf16(p + k * op.b_cs, hi, lo, cols);
      for (int64_t j = 0; j < cols; ++j) {
        s_hi[at(k, j)] = hi[j];
        s_lo[at(k, j)] = lo[j];
      }
    }
  } else {  // depth contiguous for a fixed column
    uint16_t hi[256], lo[256];
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t k0 = 0; k0 < K; k0 += 256) {
        const int64_t n = K - k0 < 256 ? K - k0 : 256;
        split_f16_bf16(p + j * op.b_rs + k0, hi, lo, n);
        for (int64_t k = 0; k < n; ++k) {
          s_hi[at(k0 + k, j)] = hi[k];
          s_lo[at(k0 + k, j)] = lo[k];
        }
      }
  }
  std::memcpy(o + 2 * seg * kNR, s_hi, size_t(seg * kNR) * 2);
}

}  // namespace bf

void begin() { tiles_begin(); }
void end() { tiles_end(); }

}  // namespace

const KernelSet& i8_amx_kernels() {
  static const KernelSet ks{"amx_int8", kMR, kNR, i8::kKC, i8::depth, i8::a_bytes, i8::b_bytes, i8::pack_a, i8::pack_b,
                            i8::micro, nullptr, begin, end};
  return ks;
}

const KernelSet& bf16_amx_kernels() {
  static const KernelSet ks{"amx_bf16", kMR, kNR, bf::kKC, bf::depth_bf16, bf::a_bytes, bf::b_bytes, bf::pack_a_bf16,
                            bf::pack_b_bf16, bf::micro, nullptr, begin, end};
  return ks;
}

const KernelSet& f16_amx_kernels() {
  static const KernelSet ks{"amx_bf16_split_f16", kMR, kNR, bf::kKC, bf::depth_f16, bf::a_bytes, bf::b_bytes,
                            bf::pack_a_f16, bf::pack_b_f16, bf::micro, nullptr, begin, end};
  return ks;
}

}  // namespace cpu
}  // namespace tc
