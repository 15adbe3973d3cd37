#include "core/convert.h"

#include <immintrin.h>

#include "core/half.h"

namespace tc {
namespace {

__attribute__((target("avx2,f16c"))) void widen_f16_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}

__attribute__((target("avx2,f16c"))) void narrow_f16_avx2(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) d[i] = f32_to_f16(s[i]);
}

__attribute__((target("avx2"))) void widen_bf16_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
    _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

// Round to nearest even; NaN stays NaN (quiet), as f32_to_bf16.
__attribute__((target("avx2"))) void narrow_bf16_avx2(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i qnan = _mm256_set1_epi32(0x40 << 16);
  for (; i + 8 <= n; i += 8) {
    __m256i u = _mm256_castps_si256(_mm256_loadu_ps(s + i));
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, lsb));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, qnan), is_nan);
    r = _mm256_srli_epi32(r, 16);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), packed);
  }
  for (; i < n; ++i) d[i] = f32_to_bf16(s[i]);
}

}  // namespace

void widen_row(bool bf16, const uint16_t* src, float* dst, int64_t n, bool avx2) {
  if (avx2) {
    bf16 ? widen_bf16_avx2(src, dst, n) : widen_f16_avx2(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
}

void narrow_row(bool bf16, const float* src, uint16_t* dst, int64_t n, bool avx2) {
  if (avx2) {
    bf16 ? narrow_bf16_avx2(src, dst, n) : narrow_f16_avx2(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
}

bool has_avx2_f16c() {
  // Every AVX2 processor has F16C (as cpu/cpu_features.cpp assumes), and
  // clang 14 cannot query "f16c" through the builtin.
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

}  // namespace tc
