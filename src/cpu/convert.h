// Bulk conversion between f32 and the 16-bit float formats, vectorised where
// the processor allows, rounding exactly as core/half.h. The row conversions
// are core's (core/convert.h); here they take the path TC_CPU_ISA allows.
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "cpu/cpu_features.h"

namespace tc {
namespace cpu {

inline void widen_row(bool bf16, const uint16_t* src, float* dst, int64_t n) {
  tc::widen_row(bf16, src, dst, n, features().avx2);
}
inline void narrow_row(bool bf16, const float* src, uint16_t* dst, int64_t n) {
  tc::narrow_row(bf16, src, dst, n, features().avx2);
}

// Splits f16 values into two bf16 with x == hi + lo exactly: hi is x rounded
// to bf16 (8 significant bits) and the remainder, at most 3 significant bits
// above x's last one, fits bf16 too (bf16 has f32's exponent range, so even
// f16 subnormals stay normal). lo is 0 where x is infinite or NaN (hi carries
// it). Lets an f16 product run on bf16 hardware as three bf16 products.
void split_f16_bf16(const uint16_t* src, uint16_t* hi, uint16_t* lo, int64_t n);

// True when no f16 element of the rows x cols matrix (pitch ld) is infinite
// or NaN; scanned in parallel.
bool f16_matrix_finite(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld);

// rows x cols with source pitch `ld` into packed dst (and back), in parallel.
void widen_matrix(bool bf16, const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst);
void narrow_matrix(bool bf16, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld);

}  // namespace cpu
}  // namespace tc
