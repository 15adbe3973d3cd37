// Row kernels of the quantized GEMV: the dot products of one quantised row of
// W (K weights, format fmt) with up to kMaxTile rows of X in f32:
//
//   out[m] = sum_k w[k] * x[m][k]      m < mt, 1 <= mt <= kMaxTile
//
// w[k] is the dequantised weight (src/quant/formats.h), computed in registers
// and never stored; the products are accumulated in f32. One set per
// instruction set, chosen at run time; each returns null for a format it has
// no kernel for.
#pragma once

#include <cstdint>

namespace tc {
namespace cpu {

constexpr int kMaxTile = 4;

using RowDots = void (*)(const uint8_t* w, int64_t K, const float* const* x, int mt, float* out);

RowDots row_dots_avx512(int32_t fmt);  // AVX-512 F/BW/VL with FMA and F16C
RowDots row_dots_avx2(int32_t fmt);    // AVX2 with FMA and F16C

}  // namespace cpu
}  // namespace tc
