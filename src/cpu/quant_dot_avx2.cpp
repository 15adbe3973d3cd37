// AVX2 row kernels of the quantized GEMV (see quant_dot.h), for processors
// without AVX-512. Same scheme as quant_dot_avx512.cpp on 8 lanes: the
// quantised bytes are split into their fields with byte operations, widened
// to int32 eight at a time, converted, scaled with one FMA into dequantised
// f32 weights, and multiplied into every row of the tile:
//
//   acc[m][slot] += w[k:k+8] * x[m][k:k+8]
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/quant_dot.h"
#include "cpu/row_dots_table.h"
#include "quant/formats.h"

#define TC_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TC_AVX2_INLINE TC_AVX2 __attribute__((always_inline)) inline

namespace tc {
namespace cpu {
namespace {

using namespace tc::quant;

template <int MT>
struct Acc {
  static constexpr int S = MT == 1 ? 4 : MT == 2 ? 2 : 1;
  __m256 a[MT][S];
  const float* x[MT];

  TC_AVX2_INLINE void init(const float* const* xs) {
    for (int m = 0; m < MT; ++m) {
      x[m] = xs[m];
      for (int s = 0; s < S; ++s) a[m][s] = _mm256_setzero_ps();
    }
  }
  template <int SLOT>
  TC_AVX2_INLINE void emit(int64_t k, __m256 w) {
    for (int m = 0; m < MT; ++m) a[m][SLOT % S] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[m] + k), a[m][SLOT % S]);
  }
  TC_AVX2_INLINE void finish(float* out) {
    for (int m = 0; m < MT; ++m) {
      __m256 s = a[m][0];
      for (int j = 1; j < S; ++j) s = _mm256_add_ps(s, a[m][j]);
      __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
      v = _mm_add_ps(v, _mm_movehl_ps(v, v));
      v = _mm_add_ss(v, _mm_movehdup_ps(v));
      out[m] = _mm_cvtss_f32(v);
    }
  }
};

TC_AVX2_INLINE float half(uint16_t h) { return _cvtsh_ss(h); }

// Eight unsigned / signed bytes starting at byte 8*HALF of v, as f32.
template <int HALF>
TC_AVX2_INLINE __m256 u8x8(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(HALF ? _mm_srli_si128(v, 8) : v));
}
template <int HALF>
TC_AVX2_INLINE __m256 i8x8(__m128i v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(HALF ? _mm_srli_si128(v, 8) : v));
}

// 16 weights from 16 bytes of 4-bit values v (0..15 each): w = q * scale + bias.
template <int MT, int SLOT>
TC_AVX2_INLINE void emit16(Acc<MT>& acc, int64_t k, __m128i v, __m256 scale, __m256 bias) {
  acc.template emit<SLOT>(k, _mm256_fmadd_ps(u8x8<0>(v), scale, bias));
  acc.template emit<SLOT + 1>(k + 8, _mm256_fmadd_ps(u8x8<1>(v), scale, bias));
}

// ---- Q4_0 / Q4_1 ----------------------------------------------------------------
template <int MT>
TC_AVX2 void dots_q4_0(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m128i m0f = _mm_set1_epi8(0x0F);
  const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(w);
  for (int64_t i = 0; i < K / QK4_0; ++i) {
    const float d = half(b[i].d);
    const __m256 vd = _mm256_set1_ps(d), bias = _mm256_set1_ps(-8.0f * d);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    emit16<MT, 0>(acc, i * QK4_0, _mm_and_si128(q, m0f), vd, bias);
    emit16<MT, 2>(acc, i * QK4_0 + 16, _mm_and_si128(_mm_srli_epi16(q, 4), m0f), vd, bias);
  }
  acc.finish(out);
}

template <int MT>
TC_AVX2 void dots_q4_1(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m128i m0f = _mm_set1_epi8(0x0F);
  const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(w);
  for (int64_t i = 0; i < K / QK4_1; ++i) {
    const __m256 vd = _mm256_set1_ps(half(b[i].d)), vm = _mm256_set1_ps(half(b[i].m));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    emit16<MT, 0>(acc, i * QK4_1, _mm_and_si128(q, m0f), vd, vm);
    emit16<MT, 2>(acc, i * QK4_1 + 16, _mm_and_si128(_mm_srli_epi16(q, 4), m0f), vd, vm);
  }
  acc.finish(out);
}

// ---- Q5_0 / Q5_1 -----------------------------------------------------------------
// 16 bits of qh (the fifth bits of 16 consecutive weights) as 16 bytes holding
// 0x10 where the bit is set: byte i takes byte i / 8 of the bits, keeps bit
// i % 8 and compares it with itself.
TC_AVX2_INLINE __m128i fifth_bits(uint32_t bits16) {
  const __m128i v = _mm_set1_epi16(short(bits16 & 0xFFFF));
  const __m128i spread = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
  const __m128i bit = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(spread, bit), bit), _mm_set1_epi8(0x10));
}

// Both 5-bit formats are w = q * scale + bias with q = nibble | fifth bit << 4:
// Q5_0 scale d, bias -16 d; Q5_1 scale d, bias m.
template <int MT>
TC_AVX2_INLINE void q5_block(Acc<MT>& acc, int64_t k, const uint8_t* qh, const uint8_t* qs, __m256 scale,
                             __m256 bias) {
  const __m128i m0f = _mm_set1_epi8(0x0F);
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  emit16<MT, 0>(acc, k, _mm_or_si128(_mm_and_si128(q, m0f), fifth_bits(h)), scale, bias);
  emit16<MT, 2>(acc, k + 16, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q, 4), m0f), fifth_bits(h >> 16)), scale,
                bias);
}

template <int MT>
TC_AVX2 void dots_q5_0(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ5_0* b = reinterpret_cast<const BlockQ5_0*>(w);
  for (int64_t i = 0; i < K / QK5_0; ++i) {
    const float d = half(b[i].d);
    q5_block<MT>(acc, i * QK5_0, b[i].qh, b[i].qs, _mm256_set1_ps(d), _mm256_set1_ps(-16.0f * d));
  }
  acc.finish(out);
}

template <int MT>
TC_AVX2 void dots_q5_1(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ5_1* b = reinterpret_cast<const BlockQ5_1*>(w);
  for (int64_t i = 0; i < K / QK5_1; ++i)
    q5_block<MT>(acc, i * QK5_1, b[i].qh, b[i].qs, _mm256_set1_ps(half(b[i].d)), _mm256_set1_ps(half(b[i].m)));
  acc.finish(out);
}

// ---- Q8_0 / Q8_K ------------------------------------------------------------------
template <int MT, int SLOT>
TC_AVX2_INLINE void emit_i8x16(Acc<MT>& acc, int64_t k, const int8_t* q, __m256 d) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  acc.template emit<SLOT>(k, _mm256_mul_ps(i8x8<0>(v), d));
  acc.template emit<SLOT + 1>(k + 8, _mm256_mul_ps(i8x8<1>(v), d));
}

template <int MT>
TC_AVX2 void dots_q8_0(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(w);
  for (int64_t i = 0; i < K / QK8_0; ++i) {
    const __m256 d = _mm256_set1_ps(half(b[i].d));
    emit_i8x16<MT, 0>(acc, i * QK8_0, b[i].qs, d);
    emit_i8x16<MT, 2>(acc, i * QK8_0 + 16, b[i].qs + 16, d);
  }
  acc.finish(out);
}

template <int MT>
TC_AVX2 void dots_q8_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ8_K* b = reinterpret_cast<const BlockQ8_K*>(w);
  for (int64_t i = 0; i < K / QK_K; ++i) {
    const __m256 d = _mm256_set1_ps(b[i].d);
    for (int t = 0; t < QK_K; t += 32) {
      emit_i8x16<MT, 0>(acc, i * QK_K + t, b[i].qs + t, d);
      emit_i8x16<MT, 2>(acc, i * QK_K + t + 16, b[i].qs + t + 16, d);
    }
  }
  acc.finish(out);
}

// ---- Q4_K / Q5_K ---------------------------------------------------------------------
TC_AVX2_INLINE void k4_scales(const uint8_t* scales, float d, float dmin, float* dsc, float* dm) {
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    scale_min_k4(j, scales, &s, &m);
    dsc[j] = d * float(s);
    dm[j] = dmin * float(m);
  }
}

template <int MT>
TC_AVX2 void dots_q4_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m128i m0f = _mm_set1_epi8(0x0F);
  const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(w);
  float dsc[8], dm[8];
  for (int64_t i = 0; i < K / QK_K; ++i) {
    k4_scales(b[i].scales, half(b[i].d), half(b[i].dmin), dsc, dm);
    for (int c = 0; c < 4; ++c) {
      const __m256 s0 = _mm256_set1_ps(dsc[2 * c]), m0 = _mm256_set1_ps(-dm[2 * c]);
      const __m256 s1 = _mm256_set1_ps(dsc[2 * c + 1]), m1 = _mm256_set1_ps(-dm[2 * c + 1]);
      const __m128i* qs = reinterpret_cast<const __m128i*>(b[i].qs + 32 * c);
      const __m128i qa = _mm_loadu_si128(qs), qb = _mm_loadu_si128(qs + 1);
      const int64_t k = i * QK_K + 64 * c;
      emit16<MT, 0>(acc, k, _mm_and_si128(qa, m0f), s0, m0);
      emit16<MT, 2>(acc, k + 16, _mm_and_si128(qb, m0f), s0, m0);
      emit16<MT, 0>(acc, k + 32, _mm_and_si128(_mm_srli_epi16(qa, 4), m0f), s1, m1);
      emit16<MT, 2>(acc, k + 48, _mm_and_si128(_mm_srli_epi16(qb, 4), m0f), s1, m1);
    }
  }
  acc.finish(out);
}

template <int MT>
TC_AVX2 void dots_q5_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m128i m0f = _mm_set1_epi8(0x0F), m01 = _mm_set1_epi8(0x01);
  const BlockQ5_K* b = reinterpret_cast<const BlockQ5_K*>(w);
  float dsc[8], dm[8];
  for (int64_t i = 0; i < K / QK_K; ++i) {
    k4_scales(b[i].scales, half(b[i].d), half(b[i].dmin), dsc, dm);
    __m128i ha = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qh));
    __m128i hb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qh + 16));
    for (int c = 0; c < 4; ++c) {
      // fifth bits: bit 2c (low nibbles) and 2c+1 (high nibbles); ha/hb shift right by 2 each chunk
      const __m128i ba0 = _mm_slli_epi16(_mm_and_si128(ha, m01), 4);
      const __m128i bb0 = _mm_slli_epi16(_mm_and_si128(hb, m01), 4);
      const __m128i ba1 = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(ha, 1), m01), 4);
      const __m128i bb1 = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(hb, 1), m01), 4);
      const __m256 s0 = _mm256_set1_ps(dsc[2 * c]), m0 = _mm256_set1_ps(-dm[2 * c]);
      const __m256 s1 = _mm256_set1_ps(dsc[2 * c + 1]), m1 = _mm256_set1_ps(-dm[2 * c + 1]);
      const __m128i* qs = reinterpret_cast<const __m128i*>(b[i].qs + 32 * c);
      const __m128i qa = _mm_loadu_si128(qs), qb = _mm_loadu_si128(qs + 1);
      const int64_t k = i * QK_K + 64 * c;
      emit16<MT, 0>(acc, k, _mm_or_si128(_mm_and_si128(qa, m0f), ba0), s0, m0);
      emit16<MT, 2>(acc, k + 16, _mm_or_si128(_mm_and_si128(qb, m0f), bb0), s0, m0);
      emit16<MT, 0>(acc, k + 32, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qa, 4), m0f), ba1), s1, m1);
      emit16<MT, 2>(acc, k + 48, _mm_or_si128(_mm_and_si128(_mm_srli_epi16(qb, 4), m0f), bb1), s1, m1);
      ha = _mm_srli_epi16(ha, 2);
      hb = _mm_srli_epi16(hb, 2);
    }
  }
  acc.finish(out);
}

// ---- Q6_K -------------------------------------------------------------------------------
// 32 weights from 32 bytes of q - 32 (int8), scales s[0] (first 16), s[1].
template <int MT>
TC_AVX2_INLINE void q6_emit32(Acc<MT>& acc, int64_t k, __m256i q, const float* s) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m256 s0 = _mm256_set1_ps(s[0]), s1 = _mm256_set1_ps(s[1]);
  acc.template emit<0>(k, _mm256_mul_ps(i8x8<0>(lo), s0));
  acc.template emit<1>(k + 8, _mm256_mul_ps(i8x8<1>(lo), s0));
  acc.template emit<2>(k + 16, _mm256_mul_ps(i8x8<0>(hi), s1));
  acc.template emit<3>(k + 24, _mm256_mul_ps(i8x8<1>(hi), s1));
}

template <int MT>
TC_AVX2 void dots_q6_k(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(w);
  const __m256i m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), c32 = _mm256_set1_epi8(32);
  float s[16];
  for (int64_t i = 0; i < K / QK_K; ++i) {
    const float d = half(b[i].d);
    for (int j = 0; j < 16; ++j) s[j] = d * float(b[i].scales[j]);
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
      q6_emit32<MT>(acc, k, _mm256_sub_epi8(q1, c32), s + 8 * h + 0);
      q6_emit32<MT>(acc, k + 32, _mm256_sub_epi8(q2, c32), s + 8 * h + 2);
      q6_emit32<MT>(acc, k + 64, _mm256_sub_epi8(q3, c32), s + 8 * h + 4);
      q6_emit32<MT>(acc, k + 96, _mm256_sub_epi8(q4, c32), s + 8 * h + 6);
    }
  }
  acc.finish(out);
}

// ---- F16 / BF16 / F32 (K a multiple of 8 here) ----------------------------------------------
template <int MT>
TC_AVX2 void dots_f16(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m128i* p = reinterpret_cast<const __m128i*>(w);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16, p += 2) {
    acc.template emit<0>(k, _mm256_cvtph_ps(_mm_loadu_si128(p)));
    acc.template emit<1>(k + 8, _mm256_cvtph_ps(_mm_loadu_si128(p + 1)));
  }
  if (k < K) acc.template emit<0>(k, _mm256_cvtph_ps(_mm_loadu_si128(p)));
  acc.finish(out);
}

TC_AVX2_INLINE __m256 bf16x8(const __m128i* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p)), 16));
}

template <int MT>
TC_AVX2 void dots_bf16(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const __m128i* p = reinterpret_cast<const __m128i*>(w);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16, p += 2) {
    acc.template emit<0>(k, bf16x8(p));
    acc.template emit<1>(k + 8, bf16x8(p + 1));
  }
  if (k < K) acc.template emit<0>(k, bf16x8(p));
  acc.finish(out);
}

template <int MT>
TC_AVX2 void dots_f32(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  Acc<MT> acc;
  acc.init(x);
  const float* p = reinterpret_cast<const float*>(w);
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    acc.template emit<0>(k, _mm256_loadu_ps(p + k));
    acc.template emit<1>(k + 8, _mm256_loadu_ps(p + k + 8));
  }
  if (k < K) acc.template emit<0>(k, _mm256_loadu_ps(p + k));
  acc.finish(out);
}

}  // namespace

RowDots row_dots_avx2(int32_t fmt) { TC_ROW_DOTS_BY_FORMAT(fmt, 8) }

}  // namespace cpu
}  // namespace tc
