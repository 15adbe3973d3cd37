#include "cpu/convert.h"

#include <immintrin.h>

// GCC 12 flags the AVX-512 intrinsics' own _mm512_undefined_*() (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/half.h"
#include "cpu/cpu_features.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

// The bf16 rounding of vcvtneps2bf16 (nearest even, quiet NaN) is
// f32_to_bf16's for every value here: no f16 value is an f32 subnormal,
// where the instruction would flush.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void split_f16_avx512(const uint16_t* s,
                                                                                        uint16_t* hi,
                                                                                        uint16_t* lo, int64_t n) {
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + i));
    const __m256i h = (__m256i)_mm512_cvtneps_pbh(x);
    const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    const __mmask16 finite = _mm512_cmp_ps_mask(_mm512_abs_ps(x), inf, _CMP_LT_OQ);
    const __m512 r = _mm512_maskz_sub_ps(finite, x, hf);
    _mm256_mask_storeu_epi16(hi + i, m, h);
    _mm256_mask_storeu_epi16(lo + i, m, (__m256i)_mm512_cvtneps_pbh(r));
  }
}

// f16 is infinite or NaN when its exponent bits are all ones.
__attribute__((target("avx2"))) bool f16_row_finite_avx2(const uint16_t* s, int64_t n) {
  const __m256i e = _mm256_set1_epi16(0x7c00);
  __m256i bad = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i x = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i)), e);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi16(x, e));
  }
  bool ok = _mm256_testz_si256(bad, bad);
  for (; i < n; ++i) ok &= (s[i] & 0x7c00) != 0x7c00;
  return ok;
}

}  // namespace

bool f16_matrix_finite(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld) {
  std::atomic<bool> finite{true};
  const bool avx2 = features().avx2;
  parallel_for(rows, std::max<int64_t>(1, 65536 / (cols + 1)), [&](int64_t r0, int64_t r1) {
    bool ok = true;
    for (int64_t r = r0; r < r1 && ok; ++r) {
      const uint16_t* s = src + r * ld;
      if (avx2) {
        ok = f16_row_finite_avx2(s, cols);
      } else {
        for (int64_t i = 0; i < cols; ++i) ok &= (s[i] & 0x7c00) != 0x7c00;
      }
    }
    if (!ok) finite.store(false, std::memory_order_relaxed);
  });
  return finite.load();
}

void split_f16_bf16(const uint16_t* src, uint16_t* hi, uint16_t* lo, int64_t n) {
  const Features& f = features();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512_bf16) {
    split_f16_avx512(src, hi, lo, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float x = f16_to_f32(src[i]);
    hi[i] = f32_to_bf16(x);
    lo[i] = std::isfinite(x) ? f32_to_bf16(x - bf16_to_f32(hi[i])) : uint16_t(0);
  }
}

void widen_matrix(bool bf16, const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  parallel_for(rows, std::max<int64_t>(1, 16384 / (cols + 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) widen_row(bf16, src + r * ld, dst + r * cols, cols);
  });
}

void narrow_matrix(bool bf16, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld) {
  parallel_for(rows, std::max<int64_t>(1, 16384 / (cols + 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) narrow_row(bf16, src + r * cols, dst + r * ld, cols);
  });
}

}  // namespace cpu
}  // namespace tc
