// AVX512-VNNI row kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K weights against
// activations quantised to 8 bits (used for f16/bf16 activations; see
// gemv_quantized.cpp).
//
// Each block of 32 activations is quantised like ggml's Q8_0:
//   dx = max|x| / 127,  xq = round(x / dx)  (int8)
// and 32 weights of scale s then contribute
//   s * dx * sum_k (q_k - 8) * xq_k            (Q4_0: s = d, q in 0..15)
//   s * dx * sum_k (q_k - 16) * xq_k           (Q5_0: s = d, q in 0..31)
//   s * dx * sum_k q_k * xq_k + m dx sum_k xq_k
//                                              (Q4_1 / Q5_1: s = d, q in 0..15 / 0..31)
//   s * dx * sum_k q_k * xq_k                  (Q8_0: s = d, q in -128..127)
//   s * dx * sum_k q_k * xq_k - dmin m dx sum_k xq_k
//                                              (Q4_K: s = d sc, q in 0..15)
//   s * dx * sum_k (q_k - 32) * xq_k           (Q6_K: s = d sc per 16, q in 0..63)
// with the integer sums done by vpdpbusd, which multiplies 64 unsigned bytes
// by 64 signed bytes and adds groups of four into 16 int32 lanes. Its
// unsigned operand is the weights (Q8_0 bytes flipped to q + 128); the
// offsets this introduces (-8, -16, -128 or -32 times the sum of four xq) depend
// on the activations only, so they are precomputed per lane and seed the
// accumulator. The mins of Q4_1, Q5_1 and Q4_K use the precomputed
// dx * sum xq of each block (sx).
//
// 64 weights fill a 512-bit register. Q4_0 (two blocks a, b): lanes 0-3 the
// low nibbles (weights 0-15) of a, 4-7 those of b, 8-11 the high nibbles
// (weights 16-31) of a, 12-15 of b; Q4_1 the same; Q5_0 / Q5_1 the same, their fifth bits added to
// those bytes under a 64-bit byte mask built from the two qh words. The
// others hold 64 consecutive weights,
// lanes 0-7 the first block of 32 activations, 8-15 the second. The
// activations are laid out in the same order when they are quantised, and dx
// is stored expanded to the lanes, so 64 weights cost one integer dot
// product, one conversion and two float multiply-adds per row of X:
//   acc += float(dot) * dx_lanes * s_lanes
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

// Index vectors spreading scales over the lanes: of blocks 2p, 2p+1 (of 16)
// for Q4_0 / Q8_0 and of Q4_K sub-blocks 2p, 2p+1; of Q6_K's sub-blocks of 16
// (four lanes each) for the r-th register of 64 weights of a super-block.
struct LaneIndex {
  alignas(64) int32_t q4[8][16];
  alignas(64) int32_t q8[8][16];
  alignas(64) int32_t q6[4][16];
  LaneIndex() {
    for (int p = 0; p < 8; ++p)
      for (int l = 0; l < 16; ++l) {
        q4[p][l] = 2 * p + kLaneBlockQ4[l];
        q8[p][l] = 2 * p + kLaneBlockQ8[l];
      }
    for (int r = 0; r < 4; ++r)
      for (int l = 0; l < 16; ++l) q6[r][l] = 4 * r + l / 4;
  }
};
const LaneIndex kLaneIndex;

// The 32-weight formats of the pair kernel: bytes per block, where the quants
// start, and whether they are nibbles (the Q4 lane layout) or int8.
constexpr int pair_stride(int32_t fmt) {
  return fmt == Q4_0 ? 18 : fmt == Q4_1 ? 20 : fmt == Q5_0 ? 22 : fmt == Q5_1 ? 24 : 34;
}
constexpr int pair_qs(int32_t fmt) { return fmt == Q4_1 ? 4 : fmt == Q5_0 ? 6 : fmt == Q5_1 ? 8 : 2; }
constexpr bool pair_nibbles(int32_t fmt) { return fmt != Q8_0; }
constexpr bool pair_fifth_bit(int32_t fmt) { return fmt == Q5_0 || fmt == Q5_1; }
constexpr int pair_qh(int32_t fmt) { return fmt == Q5_1 ? 4 : 2; }
// Formats with a min per block (w = d q + m): no lane offsets, a min term.
constexpr bool pair_min(int32_t fmt) { return fmt == Q4_1 || fmt == Q5_1; }

// One pair of weight blocks (a, b) into the accumulators of slot SLOT.
template <int MT, int32_t FMT, int SLOT>
TC_VNNI_INLINE void pair(__m512 (&acc)[MT][2], const uint8_t* a, const uint8_t* b, int64_t pr, __m512 dwp,
                         const QxRow* const* x) {
  constexpr int QS = pair_qs(FMT);
  __m512i q;
  if (pair_nibbles(FMT)) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i t = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + QS))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + QS)), 1);
    q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(t, m4)),
                           _mm256_and_si256(_mm256_srli_epi16(t, 4), m4), 1);
    if (pair_fifth_bit(FMT)) {
      // Bytes 0-15 hold weights 0-15 of a, 16-31 those of b, 32-47 weights
      // 16-31 of a, 48-63 those of b: the fifth bits in that order are the
      // halves of the qh words, and adding 16 sets bit 4 of a nibble.
      uint32_t ha, hb;
      std::memcpy(&ha, a + pair_qh(FMT), 4);
      std::memcpy(&hb, b + pair_qh(FMT), 4);
      const __mmask64 k = uint64_t(ha & 0xFFFF) | uint64_t(hb & 0xFFFF) << 16 | uint64_t(ha >> 16) << 32 |
                          uint64_t(hb >> 16) << 48;
      q = _mm512_mask_add_epi8(q, k, q, _mm512_set1_epi8(16));
    }
  } else {
    q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + QS))),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + QS)), 1);
    q = _mm512_xor_si512(q, _mm512_set1_epi8(char(0x80)));
  }
  for (int m = 0; m < MT; ++m) {
    const __m512i init = pair_min(FMT) ? _mm512_setzero_si512() : _mm512_loadu_si512(x[m]->bias + pr * 16);
    const __m512i dot = _mm512_dpbusd_epi32(init, q, _mm512_loadu_si512(x[m]->xq + pr * 64));
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps(x[m]->dx + pr * 16));
    acc[m][SLOT] = _mm512_fmadd_ps(f, dwp, acc[m][SLOT]);
  }
}

template <int MT, int32_t FMT>
TC_VNNI void dots(const uint8_t* w, int64_t K, const QxRow* const* x, float* out) {
  constexpr int STRIDE = pair_stride(FMT);
  const int64_t nb = K / 32;
  __m512 acc[MT][2], mins[MT];
  for (int m = 0; m < MT; ++m) acc[m][0] = acc[m][1] = mins[m] = _mm512_setzero_ps();
  const __m512i gidx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                          _mm512_set1_epi32(STRIDE));
  const int32_t(*lanes)[16] = pair_nibbles(FMT) ? kLaneIndex.q4 : kLaneIndex.q8;
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    const uint8_t* blk = w + i0 * STRIDE;
    const __mmask16 live = n == 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    const __m512 dw = _mm512_cvtph_ps(
        _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, gidx, blk, 1)));
    if (pair_min(FMT)) {  // sum over the blocks of m * dx * sum xq
      const __m512 mw = _mm512_cvtph_ps(
          _mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, gidx, blk + 2, 1)));
      for (int m = 0; m < MT; ++m) mins[m] = _mm512_fmadd_ps(mw, _mm512_maskz_loadu_ps(live, x[m]->sx + i0), mins[m]);
    }
    const int64_t pr0 = i0 >> 1;
    int p = 0;
    for (; 2 * p + 4 <= n; p += 2) {  // two pairs, two accumulator slots
      const uint8_t* a = blk + 2 * p * STRIDE;
      pair<MT, FMT, 0>(acc, a, a + STRIDE, pr0 + p, _mm512_permutexvar_ps(_mm512_load_si512(lanes[p]), dw), x);
      pair<MT, FMT, 1>(acc, a + 2 * STRIDE, a + 3 * STRIDE, pr0 + p + 1,
                       _mm512_permutexvar_ps(_mm512_load_si512(lanes[p + 1]), dw), x);
    }
    for (; 2 * p < n; ++p) {
      const uint8_t* a = blk + 2 * p * STRIDE;
      const uint8_t* b = 2 * p + 1 < n ? a + STRIDE : a;  // an odd last block pairs with itself (x is 0 there)
      pair<MT, FMT, 0>(acc, a, b, pr0 + p, _mm512_permutexvar_ps(_mm512_load_si512(lanes[p]), dw), x);
    }
  }
  for (int m = 0; m < MT; ++m) {
    out[m] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]));
    if (pair_min(FMT)) out[m] += _mm512_reduce_add_ps(mins[m]);
  }
}

// 64 consecutive weights (register pair index pr) into slot SLOT:
// acc += float(dot(q, xq) + bias) * dx * s, with `seed` choosing whether
// the lane offsets of the activations start the integer sum.
template <int MT, int SLOT, bool SEED>
TC_VNNI_INLINE void natural64(__m512 (&acc)[MT][2], __m512i q, int64_t pr, __m512 s, const QxRow* const* x) {
  for (int m = 0; m < MT; ++m) {
    const __m512i init = SEED ? _mm512_loadu_si512(x[m]->bias + pr * 16) : _mm512_setzero_si512();
    const __m512i dot = _mm512_dpbusd_epi32(init, q, _mm512_loadu_si512(x[m]->xq + pr * 64));
    const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_loadu_ps(x[m]->dx + pr * 16));
    acc[m][SLOT] = _mm512_fmadd_ps(f, s, acc[m][SLOT]);
  }
}

// Two 32-byte halves as one register.
TC_VNNI_INLINE __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

template <int MT>
TC_VNNI void dots_q4_k(const uint8_t* w, int64_t K, const QxRow* const* x, float* out) {
  __m512 acc[MT][2];
  __m256 mins[MT];
  for (int m = 0; m < MT; ++m) {
    acc[m][0] = acc[m][1] = _mm512_setzero_ps();
    mins[m] = _mm256_setzero_ps();
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(w);
  for (int64_t i = 0; i < K / QK_K; ++i) {
    // The 8 (scale, min) pairs, unpacked four at a time from 32-bit words.
    uint32_t u0, u1, u2;
    std::memcpy(&u0, b[i].scales, 4);
    std::memcpy(&u1, b[i].scales + 4, 4);
    std::memcpy(&u2, b[i].scales + 8, 4);
    const uint64_t sc = uint64_t(u0 & 0x3F3F3F3Fu) | uint64_t((u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u)) << 32;
    const uint64_t mn = uint64_t(u1 & 0x3F3F3F3Fu) | uint64_t(((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u)) << 32;
    const __m512 dsc = _mm512_castps256_ps512(_mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc)))), _mm256_set1_ps(_cvtsh_ss(b[i].d))));
    const __m256 dm = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mn)))),
                                    _mm256_set1_ps(_cvtsh_ss(b[i].dmin)));
    for (int m = 0; m < MT; ++m) mins[m] = _mm256_fmadd_ps(dm, _mm256_loadu_ps(x[m]->sx + 8 * i), mins[m]);
    const int64_t pr = 4 * i;
    for (int c = 0; c < 4; c += 2) {  // chunks of 64: sub-blocks 2c (low nibbles) and 2c+1 (high)
      const __m256i t0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c));
      const __m256i t1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs + 32 * c + 32));
      natural64<MT, 0, false>(acc, join(_mm256_and_si256(t0, m4), _mm256_and_si256(_mm256_srli_epi16(t0, 4), m4)),
                              pr + c, _mm512_permutexvar_ps(_mm512_load_si512(kLaneIndex.q8[c]), dsc), x);
      natural64<MT, 1, false>(acc, join(_mm256_and_si256(t1, m4), _mm256_and_si256(_mm256_srli_epi16(t1, 4), m4)),
                              pr + c + 1, _mm512_permutexvar_ps(_mm512_load_si512(kLaneIndex.q8[c + 1]), dsc), x);
    }
  }
  for (int m = 0; m < MT; ++m) {
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(mins[m]), _mm256_extractf128_ps(mins[m], 1));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    out[m] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1])) - _mm_cvtss_f32(v);
  }
}

template <int MT>
TC_VNNI void dots_q6_k(const uint8_t* w, int64_t K, const QxRow* const* x, float* out) {
  __m512 acc[MT][2];
  for (int m = 0; m < MT; ++m) acc[m][0] = acc[m][1] = _mm512_setzero_ps();
  const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(w);
  for (int64_t i = 0; i < K / QK_K; ++i) {
    const __m512 sc = _mm512_mul_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales)))),
        _mm512_set1_ps(_cvtsh_ss(b[i].d)));
    for (int h = 0; h < 2; ++h) {
      const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h));
      const __m256i B = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h + 32));
      const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(A, m0f), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(B, m0f), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m0f), _mm256_and_si256(H, m30));
      const __m256i q4 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m0f), _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
      const int64_t pr = 4 * i + 2 * h;
      natural64<MT, 0, true>(acc, join(q1, q2), pr, _mm512_permutexvar_ps(_mm512_load_si512(kLaneIndex.q6[2 * h]), sc),
                             x);
      natural64<MT, 1, true>(acc, join(q3, q4), pr + 1,
                             _mm512_permutexvar_ps(_mm512_load_si512(kLaneIndex.q6[2 * h + 1]), sc), x);
    }
  }
  for (int m = 0; m < MT; ++m) out[m] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]));
}

template <int32_t FMT>
void by_tile(const uint8_t* w, int64_t K, const QxRow* const* x, int mt, float* out) {
  switch (mt) {
    case 1: dots<1, FMT>(w, K, x, out); break;
    case 2: dots<2, FMT>(w, K, x, out); break;
    case 3: dots<3, FMT>(w, K, x, out); break;
    default: dots<4, FMT>(w, K, x, out); break;
  }
}

template <void (*F1)(const uint8_t*, int64_t, const QxRow* const*, float*),
          void (*F2)(const uint8_t*, int64_t, const QxRow* const*, float*),
          void (*F3)(const uint8_t*, int64_t, const QxRow* const*, float*),
          void (*F4)(const uint8_t*, int64_t, const QxRow* const*, float*)>
void by_tile_k(const uint8_t* w, int64_t K, const QxRow* const* x, int mt, float* out) {
  switch (mt) {
    case 1: F1(w, K, x, out); break;
    case 2: F2(w, K, x, out); break;
    case 3: F3(w, K, x, out); break;
    default: F4(w, K, x, out); break;
  }
}

}  // namespace

int64_t qx_pairs(int64_t K) { return (K / 32 + 1) / 2; }

TC_VNNI void quantize_activations(int32_t fmt, const float* x, int64_t K, QxRow* row) {
  const bool q4 = fmt == Q4_0 || fmt == Q4_1 || fmt == Q5_0 || fmt == Q5_1;  // the nibble lane layout
  const int64_t nb = K / 32, np = qx_pairs(K);
  std::memset(row->xq, 0, size_t(np) * 64);
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t p = b / 2;
    const int s = int(b & 1);
    const float d = quantize_block(x + 32 * b, row->xq + p * 64, s, q4);
    for (int l = 0; l < 16; ++l)
      if ((q4 ? kLaneBlockQ4[l] : kLaneBlockQ8[l]) == s) row->dx[p * 16 + l] = d;
    if (fmt == Q4_K || fmt == Q4_1 || fmt == Q5_1) {  // dx * sum of the block's xq, for the mins
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) sum += row->xq[p * 64 + (q4 ? pos_q4(s, j) : pos_q8(s, j))];
      row->sx[b] = d * float(sum);
    }
  }
  if (nb & 1)  // the padding block of the last pair
    for (int l = 0; l < 16; ++l)
      if ((q4 ? kLaneBlockQ4[l] : kLaneBlockQ8[l]) == 1) row->dx[(np - 1) * 16 + l] = 0.0f;
  // The offsets of the unsigned weight operand, per lane of four bytes.
  const int32_t off = fmt == Q4_0 ? -8 : fmt == Q5_0 ? -16 : fmt == Q8_0 ? -128 : fmt == Q6_K ? -32 : 0;
  for (int64_t p = 0; p < np; ++p)
    for (int l = 0; l < 16; ++l) {
      const int8_t* g = row->xq + p * 64 + 4 * l;
      row->bias[p * 16 + l] = off * (int32_t(g[0]) + g[1] + g[2] + g[3]);
    }
}

QxDots row_dots_vnni(int32_t fmt) {
  switch (fmt) {
    case Q4_0: return by_tile<Q4_0>;
    case Q4_1: return by_tile<Q4_1>;
    case Q5_0: return by_tile<Q5_0>;
    case Q5_1: return by_tile<Q5_1>;
    case Q8_0: return by_tile<Q8_0>;
    case Q4_K: return by_tile_k<dots_q4_k<1>, dots_q4_k<2>, dots_q4_k<3>, dots_q4_k<4>>;
    case Q6_K: return by_tile_k<dots_q6_k<1>, dots_q6_k<2>, dots_q6_k<3>, dots_q6_k<4>>;
    default: return nullptr;
  }
}

}  // namespace cpu
}  // namespace tc
