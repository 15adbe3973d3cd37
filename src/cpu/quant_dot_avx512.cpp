// AVX-512 row kernels of the quantized GEMV (see quant_dot.h).
//
// Each kernel turns 16 quantised weights at a time into 16 f32 weights in a
// zmm register and hands them to Acc::emit, which multiplies them into the
// accumulators of every row of X in the tile:
//
//   acc[m][slot] += w[k:k+16] * x[m][k:k+16]          (vfmadd231ps)
//
// Several accumulator slots per row hide the FMA latency when the tile is
// one or two rows. The 4-bit formats decode with a table lookup: vpermps
// picks lane q & 15 of a 16-entry table that already holds the dequantised
// values (q - 8) * d (Q4_0), q * d + m (Q4_1), (d sc) q - dmin m (Q4_K), and
// vpermt2ps a 32-entry one for the five bits of Q5_0 ((q - 16) d), Q5_1
// (q d + m) and Q5_K. Q8 and Q6_K widen int8 and convert. The block scales
// of the 32-weight formats are converted 16 blocks at a time into a small
// array, so each block reads its scale with a broadcast load instead of a
// scalar conversion.
// GCC 12 warns about the undefined upper lanes inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/quant_dot.h"
#include "cpu/row_dots_table.h"
#include "quant/formats.h"

#define TC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define TC_AVX512_INLINE TC_AVX512 __attribute__((always_inline)) inline

namespace tc {
namespace cpu {
namespace {

using namespace tc::quant;

template <int MT>
struct Acc {
  static constexpr int S = MT == 1 ? 4 : MT == 2 ? 2 : 1;  // independent FMA chains per row
  __m512 a[MT][S];
  const float* x[MT];

  TC_AVX512_INLINE void init(const float* const* xs) {
    for (int m = 0; m < MT; ++m) {
      x[m] = xs[m];
      for (int s = 0; s < S; ++s) a[m][s] = _mm512_setzero_ps();
    }
  }
  template <int SLOT>
  TC_AVX512_INLINE void emit(int64_t k, __m512 w) {
    for (int m = 0; m < MT; ++m) a[m][SLOT % S] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x[m] + k), a[m][SLOT % S]);
  }
  TC_AVX512_INLINE void finish(float* out) {
    for (int m = 0; m < MT; ++m) {
      __m512 s = a[m][0];
      for (int j = 1; j < S; ++j) s = _mm512_add_ps(s, a[m][j]);
      out[m] = _mm512_reduce_add_ps(s);
    }
  }
};

TC_AVX512_INLINE __m512 iota16() {
  return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

TC_AVX512_INLINE float half(uint16_t h) { return _cvtsh_ss(h); }

// Makes the compiler forget what it knows about memory, so scales stored to a
// small array are read back with broadcast loads (a load port) rather than
// shuffled out of a register (the shuffle port the decoders need).
TC_AVX512_INLINE void reload_barrier() { asm volatile("" ::: "memory"); }

// Scales (and Q4_1 mins) of up to 16 consecutive blocks of STRIDE bytes, as
// f32: the f16 at byte FIELD of each block, fetched with one gather.
template <int STRIDE, int FIELD>
TC_AVX512_INLINE void block_halves(const uint8_t* blocks, int n, float* out) {
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(STRIDE));
  const __mmask16 live = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  // Four bytes at each block's field: the f16 and what follows it in the block.
  const __m512i raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, blocks + FIELD, 1);
  _mm512_store_ps(out, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw)));
  reload_barrier();
}

// ---- Q4_0: w = (q - 8) d ----------------------------------------------------
template <int MT, int SLOT>
TC_AVX512_INLINE void q4_0_block(Acc<MT>& acc, const BlockQ4_0* b, int64_t k, __m512 iota8, const float* d) {
  const __m512 tbl = _mm512_mul_ps(iota8, _mm512_set1_ps(*d));
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
  acc.template emit<SLOT>(k, _mm512_permutexvar_ps(q, tbl));
  acc.template emit<SLOT + 1>(k + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), tbl));
}

template <int MT>
TC_AVX512 void dots_q4_0(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m512 iota8 = _mm512_sub_ps(iota16(), _mm512_set1_ps(8.0f));
  const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(w);
  const int64_t nb = K / QK4_0;
  alignas(64) float d[16];
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    block_halves<18, 0>(reinterpret_cast<const uint8_t*>(b + i0), n, d);
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      q4_0_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK4_0, iota8, d + j);
      q4_0_block<MT, 2>(acc, b + i0 + j + 1, (i0 + j + 1) * QK4_0, iota8, d + j + 1);
    }
    if (j < n) q4_0_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK4_0, iota8, d + j);
  }
  acc.finish(out);
}

// ---- Q4_1: w = q d + m --------------------------------------------------------
template <int MT, int SLOT>
TC_AVX512_INLINE void q4_1_block(Acc<MT>& acc, const BlockQ4_1* b, int64_t k, __m512 iota, const float* d,
                                 const float* m) {
  const __m512 tbl = _mm512_fmadd_ps(iota, _mm512_set1_ps(*d), _mm512_set1_ps(*m));
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
  acc.template emit<SLOT>(k, _mm512_permutexvar_ps(q, tbl));
  acc.template emit<SLOT + 1>(k + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), tbl));
}

template <int MT>
TC_AVX512 void dots_q4_1(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m512 iota = iota16();
  const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(w);
  const int64_t nb = K / QK4_1;
  alignas(64) float d[16], m[16];
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    block_halves<20, 0>(reinterpret_cast<const uint8_t*>(b + i0), n, d);
    block_halves<20, 2>(reinterpret_cast<const uint8_t*>(b + i0), n, m);
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      q4_1_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK4_1, iota, d + j, m + j);
      q4_1_block<MT, 2>(acc, b + i0 + j + 1, (i0 + j + 1) * QK4_1, iota, d + j + 1, m + j + 1);
    }
    if (j < n) q4_1_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK4_1, iota, d + j, m + j);
  }
  acc.finish(out);
}

// ---- Q5_0: w = (q - 16) d, Q5_1: w = q d + m ------------------------------------
// Weights j and j + 16 share byte j of qs (low, high nibble) as in Q4_0; their
// fifth bits are bits j and j + 16 of qh, which serve directly as lane masks:
// the masked OR sets index bit 4, so vpermt2ps reads the upper table
// (q = 16..31) in those lanes.
template <int MT, int SLOT>
TC_AVX512_INLINE void q5_block(Acc<MT>& acc, const uint8_t* qh, const uint8_t* qs, int64_t k, __m512 lo,
                               __m512 hi) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m512i c16 = _mm512_set1_epi32(16);
  // Index bit 4 also picks the table, so the low nibbles lose the high
  // nibble's bit first; q >> 4 is below 16 already.
  const __m512i qa = _mm512_and_si512(q, _mm512_set1_epi32(0x0F)), qb = _mm512_srli_epi32(q, 4);
  const __m512i ia = _mm512_mask_or_epi32(qa, __mmask16(h), qa, c16);
  const __m512i ib = _mm512_mask_or_epi32(qb, __mmask16(h >> 16), qb, c16);
  acc.template emit<SLOT>(k, _mm512_permutex2var_ps(lo, ia, hi));
  acc.template emit<SLOT + 1>(k + 16, _mm512_permutex2var_ps(lo, ib, hi));
}

template <int MT, int SLOT>
TC_AVX512_INLINE void q5_0_block(Acc<MT>& acc, const BlockQ5_0* b, int64_t k, __m512 iota, __m512 iota16m,
                                 const float* d) {
  // Tables: q = 0..15 -> (q - 16) d, q = 16..31 -> (q - 16) d = iota d.
  const __m512 vd = _mm512_set1_ps(*d);
  q5_block<MT, SLOT>(acc, b->qh, b->qs, k, _mm512_mul_ps(iota16m, vd), _mm512_mul_ps(iota, vd));
}

template <int MT>
TC_AVX512 void dots_q5_0(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m512 iota = iota16(), iota16m = _mm512_sub_ps(iota, _mm512_set1_ps(16.0f));
  const BlockQ5_0* b = reinterpret_cast<const BlockQ5_0*>(w);
  const int64_t nb = K / QK5_0;
  alignas(64) float d[16];
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    block_halves<22, 0>(reinterpret_cast<const uint8_t*>(b + i0), n, d);
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      q5_0_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK5_0, iota, iota16m, d + j);
      q5_0_block<MT, 2>(acc, b + i0 + j + 1, (i0 + j + 1) * QK5_0, iota, iota16m, d + j + 1);
    }
    if (j < n) q5_0_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK5_0, iota, iota16m, d + j);
  }
  acc.finish(out);
}

template <int MT, int SLOT>
TC_AVX512_INLINE void q5_1_block(Acc<MT>& acc, const BlockQ5_1* b, int64_t k, __m512 iota, __m512 iota16p,
                                 const float* d, const float* m) {
  // Tables: q = 0..15 -> q d + m, q = 16..31 -> (iota + 16) d + m.
  const __m512 vd = _mm512_set1_ps(*d), vm = _mm512_set1_ps(*m);
  q5_block<MT, SLOT>(acc, b->qh, b->qs, k, _mm512_fmadd_ps(iota, vd, vm), _mm512_fmadd_ps(iota16p, vd, vm));
}

template <int MT>
TC_AVX512 void dots_q5_1(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m512 iota = iota16(), iota16p = _mm512_add_ps(iota, _mm512_set1_ps(16.0f));
  const BlockQ5_1* b = reinterpret_cast<const BlockQ5_1*>(w);
  const int64_t nb = K / QK5_1;
  alignas(64) float d[16], m[16];
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    block_halves<24, 0>(reinterpret_cast<const uint8_t*>(b + i0), n, d);
    block_halves<24, 2>(reinterpret_cast<const uint8_t*>(b + i0), n, m);
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      q5_1_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK5_1, iota, iota16p, d + j, m + j);
      q5_1_block<MT, 2>(acc, b + i0 + j + 1, (i0 + j + 1) * QK5_1, iota, iota16p, d + j + 1, m + j + 1);
    }
    if (j < n) q5_1_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK5_1, iota, iota16p, d + j, m + j);
  }
  acc.finish(out);
}

// ---- Q8_0: w = q d -------------------------------------------------------------
template <int MT, int SLOT>
TC_AVX512_INLINE void q8_0_block(Acc<MT>& acc, const BlockQ8_0* b, int64_t k, const float* d) {
  const __m512 vd = _mm512_set1_ps(*d);
  const __m128i* q = reinterpret_cast<const __m128i*>(b->qs);
  acc.template emit<SLOT>(k, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q))), vd));
  acc.template emit<SLOT + 1>(k + 16,
                              _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + 1))), vd));
}

template <int MT>
TC_AVX512 void dots_q8_0(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(w);
  const int64_t nb = K / QK8_0;
  alignas(64) float d[16];
  for (int64_t i0 = 0; i0 < nb; i0 += 16) {
    const int n = nb - i0 < 16 ? int(nb - i0) : 16;
    block_halves<34, 0>(reinterpret_cast<const uint8_t*>(b + i0), n, d);
    int j = 0;
    for (; j + 2 <= n; j += 2) {
      q8_0_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK8_0, d + j);
      q8_0_block<MT, 2>(acc, b + i0 + j + 1, (i0 + j + 1) * QK8_0, d + j + 1);
    }
    if (j < n) q8_0_block<MT, 0>(acc, b + i0 + j, (i0 + j) * QK8_0, d + j);
  }
  acc.finish(out);
}

// ---- Q4_K / Q5_K: sub-block j of 32 has w = (d sc_j) q - (dmin m_j) ------------
// The 8 scales and mins of a super-block as f32 d*sc and dmin*m, unpacked
// four at a time from 32-bit words (see scale_min_k4 for the layout).
TC_AVX512_INLINE void k4_scales(const uint8_t* scales, float d, float dmin, float* dsc, float* dm) {
  uint32_t a, b, c;
  std::memcpy(&a, scales, 4);
  std::memcpy(&b, scales + 4, 4);
  std::memcpy(&c, scales + 8, 4);
  const uint64_t sc = uint64_t(a & 0x3F3F3F3Fu) | uint64_t((c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u)) << 32;
  const uint64_t mn = uint64_t(b & 0x3F3F3F3Fu) | uint64_t(((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u)) << 32;
  const __m256 vs = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc))));
  const __m256 vm = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mn))));
  _mm256_store_ps(dsc, _mm256_mul_ps(vs, _mm256_set1_ps(d)));
  _mm256_store_ps(dm, _mm256_mul_ps(vm, _mm256_set1_ps(dmin)));
  reload_barrier();
}

template <int MT>
TC_AVX512 void dots_q4_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m512 iota = iota16();
  const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(w);
  const int64_t nb = K / QK_K;
  alignas(32) float dsc[8], dm[8];
  for (int64_t i = 0; i < nb; ++i) {
    k4_scales(b[i].scales, half(b[i].d), half(b[i].dmin), dsc, dm);
    const int64_t k0 = i * QK_K;
    for (int c = 0; c < 4; ++c) {  // chunks of 64: sub-blocks 2c (low nibbles) and 2c+1 (high)
      const __m512 t0 = _mm512_fmsub_ps(iota, _mm512_set1_ps(dsc[2 * c]), _mm512_set1_ps(dm[2 * c]));
      const __m512 t1 = _mm512_fmsub_ps(iota, _mm512_set1_ps(dsc[2 * c + 1]), _mm512_set1_ps(dm[2 * c + 1]));
      const __m128i* qs = reinterpret_cast<const __m128i*>(b[i].qs + 32 * c);
      const __m512i qa = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs));
      const __m512i qb = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs + 1));
      const int64_t k = k0 + 64 * c;
      acc.template emit<0>(k, _mm512_permutexvar_ps(qa, t0));
      acc.template emit<1>(k + 16, _mm512_permutexvar_ps(qb, t0));
      acc.template emit<2>(k + 32, _mm512_permutexvar_ps(_mm512_srli_epi32(qa, 4), t1));
      acc.template emit<3>(k + 48, _mm512_permutexvar_ps(_mm512_srli_epi32(qb, 4), t1));
    }
  }
  acc.finish(out);
}

// Index of a five-bit Q5_K weight: the nibble in bits 0-3 of `nib` (bits
// above 4 are ignored by vpermt2ps) and the fifth bit moved to bit 4 of `h`.
TC_AVX512_INLINE __m512i q5_index(__m512i nib, __m512i h_at_bit4) {
  return _mm512_ternarylogic_epi32(nib, h_at_bit4, _mm512_set1_epi32(0x10), 0xD8);  // bit4 ? h : nib
}

// Moves bit `from` of each lane to bit 4.
template <int FROM>
TC_AVX512_INLINE __m512i bit_to_4(__m512i h) {
  return FROM <= 4 ? _mm512_slli_epi32(h, (4 - FROM) & 31) : _mm512_srli_epi32(h, (FROM - 4) & 31);
}

template <int MT, int C>
TC_AVX512_INLINE void q5_k_chunk(Acc<MT>& acc, const BlockQ5_K* b, int64_t k, __m512 iota, __m512 iota16v,
                                 const float* dsc, const float* dm, __m512i h0, __m512i h1) {
  const __m512 s0 = _mm512_set1_ps(dsc[2 * C]), m0 = _mm512_set1_ps(dm[2 * C]);
  const __m512 s1 = _mm512_set1_ps(dsc[2 * C + 1]), m1 = _mm512_set1_ps(dm[2 * C + 1]);
  const __m512 lo0 = _mm512_fmsub_ps(iota, s0, m0), hi0 = _mm512_fmsub_ps(iota16v, s0, m0);
  const __m512 lo1 = _mm512_fmsub_ps(iota, s1, m1), hi1 = _mm512_fmsub_ps(iota16v, s1, m1);
  const __m128i* qs = reinterpret_cast<const __m128i*>(b->qs + 32 * C);
  const __m512i qa = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs));
  const __m512i qb = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs + 1));
  acc.template emit<0>(k, _mm512_permutex2var_ps(lo0, q5_index(qa, bit_to_4<2 * C>(h0)), hi0));
  acc.template emit<1>(k + 16, _mm512_permutex2var_ps(lo0, q5_index(qb, bit_to_4<2 * C>(h1)), hi0));
  acc.template emit<2>(k + 32,
                       _mm512_permutex2var_ps(lo1, q5_index(_mm512_srli_epi32(qa, 4), bit_to_4<2 * C + 1>(h0)), hi1));
  acc.template emit<3>(k + 48,
                       _mm512_permutex2var_ps(lo1, q5_index(_mm512_srli_epi32(qb, 4), bit_to_4<2 * C + 1>(h1)), hi1));
}

template <int MT>
TC_AVX512 void dots_q5_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m512 iota = iota16();
  const __m512 iota16v = _mm512_add_ps(iota, _mm512_set1_ps(16.0f));
  const BlockQ5_K* b = reinterpret_cast<const BlockQ5_K*>(w);
  const int64_t nb = K / QK_K;
  alignas(32) float dsc[8], dm[8];
  for (int64_t i = 0; i < nb; ++i) {
    k4_scales(b[i].scales, half(b[i].d), half(b[i].dmin), dsc, dm);
    const __m128i* qh = reinterpret_cast<const __m128i*>(b[i].qh);
    const __m512i h0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(qh));
    const __m512i h1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(qh + 1));
    const int64_t k0 = i * QK_K;
    q5_k_chunk<MT, 0>(acc, b + i, k0, iota, iota16v, dsc, dm, h0, h1);
    q5_k_chunk<MT, 1>(acc, b + i, k0 + 64, iota, iota16v, dsc, dm, h0, h1);
    q5_k_chunk<MT, 2>(acc, b + i, k0 + 128, iota, iota16v, dsc, dm, h0, h1);
    q5_k_chunk<MT, 3>(acc, b + i, k0 + 192, iota, iota16v, dsc, dm, h0, h1);
  }
  acc.finish(out);
}

// ---- Q6_K: sub-block j of 16 has w = (d sc_j) (q - 32) ---------------------------
template <int MT, int SLOT>
TC_AVX512_INLINE void q6_emit32(Acc<MT>& acc, int64_t k, __m256i q, const float* s) {
  // q: 32 bytes holding q - 32 as int8, for weights k .. k+31 (scales s[0], s[1])
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  acc.template emit<SLOT>(k, _mm512_mul_ps(lo, _mm512_set1_ps(s[0])));
  acc.template emit<SLOT + 1>(k + 16, _mm512_mul_ps(hi, _mm512_set1_ps(s[1])));
}

template <int MT>
TC_AVX512 void dots_q6_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(w);
  const int64_t nb = K / QK_K;
  const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
  alignas(64) float s[16];
  for (int64_t i = 0; i < nb; ++i) {
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].scales))));
    _mm512_store_ps(s, _mm512_mul_ps(sc, _mm512_set1_ps(half(b[i].d))));
    reload_barrier();
    for (int h = 0; h < 2; ++h) {
      const __m256i A = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h));
      const __m256i B = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].ql + 64 * h + 32));
      const __m256i H = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qh + 32 * h));
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(A, m0f), _mm256_and_si256(_mm256_slli_epi16(H, 4), m30));
      const __m256i q2 = _mm256_or_si256(_mm256_and_si256(B, m0f), _mm256_and_si256(_mm256_slli_epi16(H, 2), m30));
      const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m0f), _mm256_and_si256(H, m30));
      const __m256i q4 =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m0f), _mm256_and_si256(_mm256_srli_epi16(H, 2), m30));
      const int64_t k = i * QK_K + 128 * h;
      const float* sh = s + 8 * h;
      q6_emit32<MT, 0>(acc, k, _mm256_sub_epi8(q1, c32), sh + 0);
      q6_emit32<MT, 2>(acc, k + 32, _mm256_sub_epi8(q2, c32), sh + 2);
      q6_emit32<MT, 0>(acc, k + 64, _mm256_sub_epi8(q3, c32), sh + 4);
      q6_emit32<MT, 2>(acc, k + 96, _mm256_sub_epi8(q4, c32), sh + 6);
    }
  }
  acc.finish(out);
}

// ---- Q8_K: w = q d (f32 d per 256) -----------------------------------------------
template <int MT>
TC_AVX512 void dots_q8_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ8_K* b = reinterpret_cast<const BlockQ8_K*>(w);
  const int64_t nb = K / QK_K;
  for (int64_t i = 0; i < nb; ++i) {
    const __m512 d = _mm512_set1_ps(b[i].d);
    const __m128i* q = reinterpret_cast<const __m128i*>(b[i].qs);
    for (int t = 0; t < 16; t += 2) {
      acc.template emit<0>(i * QK_K + 16 * t,
                           _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + t))), d));
      acc.template emit<1>(i * QK_K + 16 * t + 16,
                           _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q + t + 1))), d));
    }
  }
  acc.finish(out);
}

// ---- F16 / BF16 / F32 ---------------------------------------------------------------
template <int MT>
TC_AVX512 void dots_f16(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m256i* p = reinterpret_cast<const __m256i*>(w);
  int64_t k = 0;
  for (; k + 32 <= K; k += 32, p += 2) {
    acc.template emit<0>(k, _mm512_cvtph_ps(_mm256_loadu_si256(p)));
    acc.template emit<1>(k + 16, _mm512_cvtph_ps(_mm256_loadu_si256(p + 1)));
  }
  if (k < K) acc.template emit<0>(k, _mm512_cvtph_ps(_mm256_loadu_si256(p)));  // K is a multiple of 16 here
  acc.finish(out);
}

TC_AVX512_INLINE __m512 bf16x16(const __m256i* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)), 16));
}

template <int MT>
TC_AVX512 void dots_bf16(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m256i* p = reinterpret_cast<const __m256i*>(w);
  int64_t k = 0;
  for (; k + 32 <= K; k += 32, p += 2) {
    acc.template emit<0>(k, bf16x16(p));
    acc.template emit<1>(k + 16, bf16x16(p + 1));
  }
  if (k < K) acc.template emit<0>(k, bf16x16(p));
  acc.finish(out);
}

template <int MT>
TC_AVX512 void dots_f32(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const float* p = reinterpret_cast<const float*>(w);
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    acc.template emit<0>(k, _mm512_loadu_ps(p + k));
    acc.template emit<1>(k + 16, _mm512_loadu_ps(p + k + 16));
  }
  if (k < K) acc.template emit<0>(k, _mm512_loadu_ps(p + k));
  acc.finish(out);
}

}  // namespace

RowDots row_dots_avx512(int32_t fmt) { TC_ROW_DOTS_BY_FORMAT(fmt, 16) }

}  // namespace cpu
}  // namespace tc
