// Bulk conversion of a row between f32 and the 16-bit float formats,
// rounding exactly as core/half.h, vectorised with AVX2/F16C. Shared by the
// CPU kernels (cpu/convert.h, which picks the path under TC_CPU_ISA's cap)
// and by code outside the backends (dist's collectives and DiLoCo).
#pragma once

#include <cstdint>

namespace tc {

// `avx2`: the caller knows the processor has AVX2 and F16C.
void widen_row(bool bf16, const uint16_t* src, float* dst, int64_t n, bool avx2);
void narrow_row(bool bf16, const float* src, uint16_t* dst, int64_t n, bool avx2);

// Whether this processor has AVX2 and F16C.
bool has_avx2_f16c();

inline void widen_row(bool bf16, const uint16_t* src, float* dst, int64_t n) {
  widen_row(bf16, src, dst, n, has_avx2_f16c());
}
inline void narrow_row(bool bf16, const float* src, uint16_t* dst, int64_t n) {
  narrow_row(bf16, src, dst, n, has_avx2_f16c());
}

}  // namespace tc
