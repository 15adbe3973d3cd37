// The quantized product of many rows of X (a prompt) on AMX-INT8, with
// activations quantised to 8 bits per block of 32 (the contract of the f16
// and bf16 products, see quant_dot_vnni.cpp):
//
//   Y[m, n] = sum_b ( s[n, b] dx[m, b] sum_{k in b} q[n, k] xq[m, k] + c[n, b] sx[m, b] )
//
// where a block b of 32 weights of row n is w = s q + c (q the block's
// integer weights with any offset applied: Q4_0 q - 8, Q5_0 q - 16, Q8_0 q;
// Q4_1 / Q5_1 / Q4_K's sub-blocks of 32 have a min c = m or -dmin * min),
// xq = rne(x / dx), dx = max|x| / 127 per block of 32 activations and
// sx = dx sum_k xq. Every term is exact in int32 or in the f32 arithmetic
// of the row kernels: the result differs from the 8-bit row path of
// quant_dot_vnni.cpp only by the order of f32 additions.
//
// One tdpbssd multiplies a 16 x 32 byte tile of weights (one block of 16
// rows of W, unpacked to int8) by an 8 x 64 byte tile of xq (the same block
// of 16 rows of X, four consecutive activations of each row side by side:
// AMX's interleaved "B" layout, written so when X is quantised) into 16 x 16
// int32 sums: 8192 multiply-adds. The block scales differ per block, so
// the sums are stored and scaled once per block into 16 f32 accumulators
// (a row of W each, 16 rows of X in the lanes) that stay in registers over
// all of K: per 8192 multiply-adds, 16 loads, conversions, multiplies and
// FMAs (one more FMA with a min), about 1/6 of the vector work of the row
// kernels for the same products. W is unpacked per panel of 16 rows once
// per call (no transposition: a tile row is a block row) and reused by
// every 16 rows of X.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "cpu/cpu_features.h"
#include "cpu/quant_dot.h"
#include "quant/formats.h"

#define TC_AMX_Q __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c,amx-tile,amx-int8")))

namespace tc {
namespace cpu {
namespace {

using namespace tc::quant;

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0 / 3: weights (16 rows x 32 bytes); 1 / 4: xq (8 rows x 64
// bytes); 2 / 5: the int32 sums (16 x 16).
const TileConfig& tile_config() {
  static const TileConfig cfg = [] {
    TileConfig c;
    for (int t : {0, 3}) c.rows[t] = 16, c.colsb[t] = 32;
    for (int t : {1, 4}) c.rows[t] = 8, c.colsb[t] = 64;
    for (int t : {2, 5}) c.rows[t] = 16, c.colsb[t] = 64;
    return c;
  }();
  return cfg;
}

bool has_min(int32_t fmt) { return fmt == Q4_1 || fmt == Q5_1 || fmt == Q4_K; }

// Low and high nibbles of 16 bytes: weights 0-15 and 16-31 of a block.
TC_AMX_Q __attribute__((always_inline)) inline void nibbles(const uint8_t* qs, __m128i* lo, __m128i* hi) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)), m4 = _mm_set1_epi8(0x0F);
  *lo = _mm_and_si128(v, m4);
  *hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
}

// Block b (of 32 weights) of a row: its integer weights q[32], scale s and
// min c.
template <int32_t FMT>
TC_AMX_Q __attribute__((always_inline)) inline void unpack_block(const uint8_t* row, int64_t b, int8_t* q, float* s,
                                                                 float* c) {
  *c = 0.0f;
  __m128i lo, hi;
  auto store = [&](__m128i l, __m128i h) {
    _mm_store_si128(reinterpret_cast<__m128i*>(q), l);
    _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), h);
  };
  switch (FMT) {
    case Q4_0: {
      const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
      nibbles(blk->qs, &lo, &hi);
      store(_mm_sub_epi8(lo, _mm_set1_epi8(8)), _mm_sub_epi8(hi, _mm_set1_epi8(8)));
      *s = f16_to_f32(blk->d);
      return;
    }
    case Q4_1: {
      const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
      nibbles(blk->qs, &lo, &hi);
      store(lo, hi);
      *s = f16_to_f32(blk->d), *c = f16_to_f32(blk->m);
      return;
    }
    case Q5_0:
    case Q5_1: {
      uint32_t qh;
      int off;
      if (FMT == Q5_0) {
        const auto* blk = reinterpret_cast<const BlockQ5_0*>(row) + b;
        nibbles(blk->qs, &lo, &hi);
        off = 16, *s = f16_to_f32(blk->d);
        std::memcpy(&qh, blk->qh, 4);
      } else {
        const auto* blk = reinterpret_cast<const BlockQ5_1*>(row) + b;
        nibbles(blk->qs, &lo, &hi);
        off = 0, *s = f16_to_f32(blk->d), *c = f16_to_f32(blk->m);
        std::memcpy(&qh, blk->qh, 4);
      }
      // Bit j of qh is the fifth bit of weight j: add 16 under that mask.
      const __m128i sixteen = _mm_set1_epi8(16), o = _mm_set1_epi8(char(off));
      lo = _mm_mask_add_epi8(lo, __mmask16(qh & 0xFFFF), lo, sixteen);
      hi = _mm_mask_add_epi8(hi, __mmask16(qh >> 16), hi, sixteen);
      store(_mm_sub_epi8(lo, o), _mm_sub_epi8(hi, o));
      return;
    }
    case Q8_0: {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
      std::memcpy(q, blk->qs, 32);
      *s = f16_to_f32(blk->d);
      return;
    }
    default: {  // Q4_K: sub-block b % 8 of super-block b / 8
      const auto* blk = reinterpret_cast<const BlockQ4_K*>(row) + b / 8;
      const int j = int(b % 8);
      uint8_t sc, mn;
      scale_min_k4(j, blk->scales, &sc, &mn);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs + 32 * (j / 2)));
      const __m256i m4 = _mm256_set1_epi8(0x0F);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q),
                         _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, m4));
      *s = f16_to_f32(blk->d) * float(sc), *c = -f16_to_f32(blk->dmin) * float(mn);
      return;
    }
  }
}

// Panel of 16 rows of W (rows past N are zero): per block, the 16 x 32
// byte tile (row j: the block's 32 integer weights of row j), then 16
// scales and 16 mins.
constexpr int64_t kPanelBlock = 512 + 64 + 64;

// `next` (or null): the next panel's rows, fetched into L2 as this one is
// read, so that they arrive while this panel's products are computed.
template <int32_t FMT>
TC_AMX_Q void pack_panel(const uint8_t* w, uint64_t row_bytes, int rows, int64_t nb, uint8_t* out,
                         const uint8_t* next, int next_rows) {
  const int64_t bb = int64_t(row_bytes) / nb;  // bytes per block of 32 (Q4_K: an eighth of a super-block)
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* o = out + b * kPanelBlock;
    int8_t* q = reinterpret_cast<int8_t*>(o);
    float* s = reinterpret_cast<float*>(o + 512);
    float* c = reinterpret_cast<float*>(o + 576);
    if (next && (b * bb) / 64 != ((b + 1) * bb) / 64)  // the block crosses into a new line
      for (int j = 0; j < next_rows; ++j) _mm_prefetch(reinterpret_cast<const char*>(next + j * row_bytes + (b + 1) * bb), _MM_HINT_T1);
    for (int j = 0; j < 16; ++j) {
      if (j < rows) {
        unpack_block<FMT>(w + uint64_t(j) * row_bytes, b, q + 32 * j, &s[j], &c[j]);
      } else {
        std::memset(q + 32 * j, 0, 32);
        s[j] = c[j] = 0.0f;
      }
    }
  }
}

// acc[j] += s[j] * (C[j] * dx) (+ c[j] * sx) for the 16 weight rows j of one
// block's sums C[j][m] (16 rows m of X in the lanes).
template <bool MIN>
TC_AMX_Q __attribute__((always_inline)) inline void scale_block(__m512 (&acc)[16], const int32_t* sums,
                                                                const uint8_t* pb, const float* dx,
                                                                const float* sx) {
  const float* s = reinterpret_cast<const float*>(pb + 512);
  const float* c = reinterpret_cast<const float*>(pb + 576);
  const __m512 dxv = _mm512_loadu_ps(dx);
  const __m512 sxv = MIN ? _mm512_loadu_ps(sx) : _mm512_setzero_ps();
  for (int j = 0; j < 16; ++j) {
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(sums + 16 * j)), dxv);
    acc[j] = _mm512_fmadd_ps(u, _mm512_set1_ps(s[j]), acc[j]);
    if (MIN) acc[j] = _mm512_fmadd_ps(sxv, _mm512_set1_ps(c[j]), acc[j]);
  }
}

// The 16 x 16 outputs of 16 rows of X (one tile row of QxTiles) against one
// packed panel. Software-pipelined: the tile
// product of the next block is issued before the sums of this one are
// stored and scaled, so its latency hides behind the scaling.
#define TC_AMX_ISSUE(A, B, C, blk)                       \
  do {                                                   \
    _tile_loadd(A, panel + (blk) * kPanelBlock, 32);     \
    _tile_loadd(B, xq + 512 * (blk), 64);                \
    _tile_zero(C);                                       \
    _tile_dpbssd(C, A, B);                               \
  } while (0)

template <bool MIN>
TC_AMX_Q void panel_tile(const int8_t* xq, const float* dx, const float* sx, int64_t K, const uint8_t* panel,
                         float* out /* [16 rows of W][16 rows of X] */) {
  const int64_t nb = K / 32;
  alignas(64) int32_t sums[2][256];
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  TC_AMX_ISSUE(0, 1, 2, 0);
  for (int64_t b = 0; b < nb; b += 2) {
    if (b + 1 < nb) TC_AMX_ISSUE(3, 4, 5, b + 1);
    _tile_stored(2, sums[0], 64);
    scale_block<MIN>(acc, sums[0], panel + b * kPanelBlock, dx + 16 * b, sx + 16 * b);
    if (b + 2 < nb) TC_AMX_ISSUE(0, 1, 2, b + 2);
    if (b + 1 < nb) {
      _tile_stored(5, sums[1], 64);
      scale_block<MIN>(acc, sums[1], panel + (b + 1) * kPanelBlock, dx + 16 * (b + 1), sx + 16 * (b + 1));
    }
  }
  for (int r = 0; r < 16; ++r) _mm512_store_ps(out + 16 * r, acc[r]);
}

#undef TC_AMX_ISSUE

}  // namespace

bool quant_gemm_amx_supported(int32_t fmt) {
  switch (fmt) {
    case Q4_0:
    case Q4_1:
    case Q5_0:
    case Q5_1:
    case Q8_0:
    case Q4_K: break;
    default: return false;
  }
  const Features& f = features();
  return f.amx_int8 && f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.f16c && amx_ready();
}

TC_AMX_Q void quantize_activations_amx(const float* x, int64_t K, int64_t m, int8_t* xq_all, float* dx_all,
                                       float* sx_all) {
  const int64_t nb = K / 32;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = (m / 16 * nb + b) * 16 + m % 16;  // row m % 16 of tile (m / 16, b)
    const __m512 a = _mm512_loadu_ps(x + 32 * b), c = _mm512_loadu_ps(x + 32 * b + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id));  // round to nearest even
    const __m512i qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, id));
    // The tile's row g holds the activations 4g..4g+3 of its 16 rows side by side.
    alignas(32) int32_t v[8];
    _mm_store_si128(reinterpret_cast<__m128i*>(v), _mm512_cvtsepi32_epi8(qa));
    _mm_store_si128(reinterpret_cast<__m128i*>(v + 4), _mm512_cvtsepi32_epi8(qc));
    int32_t* t = reinterpret_cast<int32_t*>(xq_all + 512 * (at / 16)) + m % 16;
    for (int g = 0; g < 8; ++g) t[16 * g] = v[g];
    dx_all[at] = d;
    sx_all[at] = d * float(_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qc)));
  }
}

TC_AMX_Q void quant_gemm_amx(int32_t fmt, const QxTiles& x, const uint8_t* w, uint64_t row_bytes, int64_t n0,
                             int64_t n1, float* y, int64_t ldy) {
  const int64_t K = x.K, nb = K / 32, M = x.M;
  thread_local std::vector<uint8_t> panel_store;
  if (panel_store.size() < size_t(nb * kPanelBlock + 64)) panel_store.resize(size_t(nb * kPanelBlock + 64));
  uint8_t* panel = panel_store.data() + (-reinterpret_cast<uintptr_t>(panel_store.data()) & 63);
  alignas(64) float out[256];
  _tile_loadconfig(&tile_config());
  const bool min = has_min(fmt);
  void (*pack)(const uint8_t*, uint64_t, int, int64_t, uint8_t*, const uint8_t*, int) =
      fmt == Q4_0   ? pack_panel<Q4_0>
      : fmt == Q4_1 ? pack_panel<Q4_1>
      : fmt == Q5_0 ? pack_panel<Q5_0>
      : fmt == Q5_1 ? pack_panel<Q5_1>
      : fmt == Q8_0 ? pack_panel<Q8_0>
                    : pack_panel<Q4_K>;
  for (int64_t p0 = n0; p0 < n1; p0 += 16) {
    const int rows = int(std::min<int64_t>(16, n1 - p0));
    const int next_rows = int(std::max<int64_t>(0, std::min<int64_t>(16, n1 - p0 - 16)));
    pack(w + uint64_t(p0) * row_bytes, row_bytes, rows, nb, panel,
         next_rows ? w + uint64_t(p0 + 16) * row_bytes : nullptr, next_rows);
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      const int8_t* xq = x.xq + m0 * K;
      const float* dx = x.dx + m0 * nb;
      const float* sx = x.sx + m0 * nb;
      float* yo = y + m0 * ldy + (p0 - n0);
      if (min) panel_tile<true>(xq, dx, sx, K, panel, out);
      else panel_tile<false>(xq, dx, sx, K, panel, out);
      const int mr = int(std::min<int64_t>(16, M - m0));
      for (int r = 0; r < mr; ++r)
        for (int j = 0; j < rows; ++j) yo[r * ldy + j] = out[16 * j + r];
    }
  }
  _tile_release();
}

}  // namespace cpu
}  // namespace tc
