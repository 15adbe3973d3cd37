// AVX512-VNNI row kernels for Q4_0 and Q8_0 weights against activations
// quantised to 8 bits (used for f16/bf16 activations; see gemv_quantized.cpp).
//
// Each block of 32 activations is quantised like ggml's Q8_0:
//   dx = max|x| / 127,  xq = round(x / dx)  (int8)
// and a weight block (scale dw) then contributes
//   dw * dx * sum_k (q_k - 8) * xq_k            (Q4_0, q in 0..15)
//   dw * dx * sum_k q_k * xq_k                  (Q8_0, q in -128..127)
// with the integer sum done by vpdpbusd, which multiplies 64 unsigned bytes
// by 64 signed bytes and adds groups of four into 16 int32 lanes. Its
// unsigned operand is the weights: Q4_0 nibbles as they are, Q8_0 bytes
// flipped to q + 128. The offsets this introduces (-8 sum xq, -128 sum xq)
// depend on the activations only, so they are precomputed per lane and used
// as the accumulator's starting value.
//
// Blocks are taken in pairs (a, b) per 512-bit register. Q4_0 lanes: 0-3 the
// low nibbles (weights 0-15) of a, 4-7 those of b, 8-11 the high nibbles
// (weights 16-31) of a, 12-15 of b; Q8_0 lanes: 0-7 block a, 8-15 block b.
// The activations are laid out in the same order when they are quantised,
// and dx is stored expanded to the lane pattern, so a pair costs one integer
// dot product, one conversion, and two float multiply-adds:
//   acc += float(dot) * dx_lanes * dw_lanes
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/quant_dot.h"
#include "quant/formats.h"

#define TC_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define TC_VNNI_INLINE TC_VNNI __attribute__((always_inline)) inline

namespace tc {
namespace cpu {
namespace {

using namespace tc::quant;

// Lane -> block of the pair (0: a, 1: b), for each layout.
constexpr int kLaneBlockQ4[16] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
constexpr int kLaneBlockQ8[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
// Byte position, in the pair's 64 bytes, of weight j (0..31) of block s (0, 1).
inline int pos_q4(int s, int j) { return (j < 16 ? 0 : 32) + 16 * s + (j & 15); }
inline int pos_q8(int s, int j) { return 32 * s + j; }

// Quantises 32 activations: the int8 values into their layout positions of
// the pair, the scale returned.
TC_VNNI_INLINE float quantize_block(const float* x, int8_t* pair, int s, bool q4) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
  const float d = amax / 127.0f;
  const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  const __m128i qa = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(a, id)));  // round to nearest even
  const __m128i qb = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(b, id)));
  if (q4) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pair + pos_q4(s, 0)), qa);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pair + pos_q4(s, 16)), qb);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pair + pos_q8(s, 0)), qa);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(pair + pos_q8(s, 16)), qb);
  }
  return d;
}

// Index vectors spreading the scales of blocks 2p, 2p+1 (of 16) over a pair's lanes.
struct LaneIndex {
  alignas(64) int32_t q4[8][16];
  alignas(64) int32_t q8[8][16];
  LaneIndex() {
    for (int p = 0; p < 8; ++p)
      for (int l = 0; l < 16; ++l) {
        q4[p][l] = 2 * p + kLaneBlockQ4[l];
        q8[p][l] = 2 * p + kLaneBlockQ8[l];
      }
  }
};
const LaneIndex kLaneIndex;

// One pair of weight blocks (a, b) into the accumulators of slot SLOT.
template <int MT, bool Q4, int SLOT>
TC_VNNI_INLINE void pair(__m512 (&acc)[MT][2], const uint8_t* a, const uint8_t* b, int64_t pr, __m512 dwp,
                         const QxRow* const* x) {
  __m512i q;
  if (Q4) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i t = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 2))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2)), 1);
    q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(t, m4)),
                           _mm256_and_si256(_mm256_srli_epi16(t, 4), m4), 1);
  } else {
    q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 2))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)), 1);
    q = _mm512_xor_si512(q, _mm512_set1_epi8(char(0x80)));
  }
  for (int m = 0; m < MT; ++m) {
    const __m512i dot =
        _mm512_dpbusd_epi32(_mm512_loadu_si512(x[m]->bias + pr * 16), q, _mm512_loadu_si512(x[m]->xq + pr * 64));
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps(x[m]->dx + pr * 16));
    acc[m][SLOT] = _mm512_fmadd_ps(f, dwp, acc[m][SLOT]);
  }
}

template <int MT, bool Q4>
TC_VNNI void dots(const uint8_t* w, int64_t K, const QxRow* const* x, float* out) {
  constexpr int STRIDE = Q4 ? 18 : 34;
  const int64_t nb = K / 32;
  __m512 acc[MT][2];
  for (int m = 0; m < MT; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  const __m512i gidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(STRIDE));
  const int32_t(*lanes)[16] = Q4 ? kLaneIndex.q4 : kLaneIndex.q8;
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    const uint8_t* blk = w + i0 * STRIDE;
    const __mmask16 live = n == 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    const __m512 dw = _mm512_cvtph_ps(
        _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, gidx, blk, 1)));
    const int64_t pr0 = i0 >> 1;
    int p = 0;
    for (; 2 * p + 4 <= n; p += 2) {  // two pairs, two accumulator slots
      const uint8_t* a = blk + 2 * p * STRIDE;
      pair<MT, Q4, 0>(acc, a, a + STRIDE, pr0 + p, _mm512_permutexvar_ps(_mm512_load_si512(lanes[p]), dw), x);
      pair<MT, Q4, 1>(acc, a + 2 * STRIDE, a + 3 * STRIDE, pr0 + p + 1,
                      _mm512_permutexvar_ps(_mm512_load_si512(lanes[p + 1]), dw), x);
    }
    for (; 2 * p < n; ++p) {
      const uint8_t* a = blk + 2 * p * STRIDE;
      const uint8_t* b = 2 * p + 1 < n ? a + STRIDE : a;  // an odd last block pairs with itself (x is 0 there)
      pair<MT, Q4, 0>(acc, a, b, pr0 + p, _mm512_permutexvar_ps(_mm512_load_si512(lanes[p]), dw), x);
    }
  }
  for (int m = 0; m < MT; ++m) out[m] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]));
}

template <bool Q4>
void by_tile(const uint8_t* w, int64_t K, const QxRow* const* x, int mt, float* out) {
  switch (mt) {
    case 1: dots<1, Q4>(w, K, x, out); break;
    case 2: dots<2, Q4>(w, K, x, out); break;
    case 3: dots<3, Q4>(w, K, x, out); break;
    default: dots<4, Q4>(w, K, x, out); break;
  }
}

}  // namespace

int64_t qx_pairs(int64_t K) { return (K / 32 + 1) / 2; }

TC_VNNI void quantize_activations(int32_t fmt, const float* x, int64_t K, QxRow* row) {
  const bool q4 = fmt == Q4_0;
  const int64_t nb = K / 32, np = qx_pairs(K);
  std::memset(row->xq, 0, size_t(np) * 64);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t p = b / 2;
    const int s = int(b & 1);
    const float d = quantize_block(x + 32 * b, row->xq + p * 64, s, q4);
    for (int l = 0; l < 16; ++l)
      if ((q4 ? kLaneBlockQ4[l] : kLaneBlockQ8[l]) == s) row->dx[p * 16 + l] = d;
  }
  if (nb & 1)  // the padding block of the last pair
    for (int l = 0; l < 16; ++l)
      if ((q4 ? kLaneBlockQ4[l] : kLaneBlockQ8[l]) == 1) row->dx[(np - 1) * 16 + l] = 0.0f;
  // The offsets of the unsigned weight operand, per lane of four bytes.
  const int32_t off = q4 ? -8 : -128;
  for (int64_t p = 0; p < np; ++p)
    for (int l = 0; l < 16; ++l) {
      const int8_t* g = row->xq + p * 64 + 4 * l;
      row->bias[p * 16 + l] = off * (int32_t(g[0]) + g[1] + g[2] + g[3]);
    }
}

QxDots row_dots_vnni(int32_t fmt) {
  switch (fmt) {
    case Q4_0: return by_tile<true>;
    case Q8_0: return by_tile<false>;
    default: return nullptr;
  }
}

}  // namespace cpu
}  // namespace tc
