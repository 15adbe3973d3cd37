// Bulk conversion between f32 and the 16-bit float formats, vectorised where
// the processor allows, rounding exactly as core/half.h.
#pragma once

#include <cstdint>

namespace tc {
namespace cpu {

void widen_row(bool bf16, const uint16_t* src, float* dst, int64_t n);
void narrow_row(bool bf16, const float* src, uint16_t* dst, int64_t n);

// rows x cols with source pitch `ld` into packed dst (and back), in parallel.
void widen_matrix(bool bf16, const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst);
void narrow_matrix(bool bf16, const float* src, int64_t rows, int64_t cols, uint16_t* dst, int64_t ld);

}  // namespace cpu
}  // namespace tc
