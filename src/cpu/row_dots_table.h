// What both f32 row-kernel sets (quant_dot_avx2.cpp, quant_dot_avx512.cpp)
// build their RowDots from: a tile of mt rows of X sent to one of four
// kernels, and the plain formats' K % W tail done in scalar code (W floats a
// vector; the vector kernels take whole multiples of it). Each set defines
// dots_<format><MT> for MT = 1..4 and returns TC_ROW_DOTS_BY_FORMAT(fmt, W).
#pragma once

#include <cstdint>

#include "cpu/quant_dot.h"
#include "quant/formats.h"

namespace tc {
namespace cpu {
namespace row_dots {

using Kernel = void (*)(const uint8_t* w, int64_t K, const float* const* x, float* out);

template <int W, Kernel Vec, int MT, int FMT>
void dense_with_tail(const uint8_t* w, int64_t K, const float* const* x, float* out) {
  const int64_t kv = K / W * W;
  if (kv) Vec(w, kv, x, out);
  else for (int m = 0; m < MT; ++m) out[m] = 0.0f;
  if (kv == K) return;
  float wt[W];
  quant::dequantize_row(FMT, w + kv * quant::format_info(FMT)->block_bytes, wt, K - kv);
  for (int m = 0; m < MT; ++m)
    for (int64_t k = kv; k < K; ++k) out[m] += wt[k - kv] * x[m][k];
}

template <Kernel F1, Kernel F2, Kernel F3, Kernel F4>
void by_tile(const uint8_t* w, int64_t K, const float* const* x, int mt, float* out) {
  switch (mt) {
    case 1: F1(w, K, x, out); break;
    case 2: F2(w, K, x, out); break;
    case 3: F3(w, K, x, out); break;
    default: F4(w, K, x, out); break;
  }
}

}  // namespace row_dots
}  // namespace cpu
}  // namespace tc

#define TC_ROW_DOTS_TILES(f) ::tc::cpu::row_dots::by_tile<f<1>, f<2>, f<3>, f<4>>
#define TC_ROW_DOTS_DENSE(W, f, fmt)                                                  \
  ::tc::cpu::row_dots::by_tile<::tc::cpu::row_dots::dense_with_tail<W, f<1>, 1, fmt>, \
                               ::tc::cpu::row_dots::dense_with_tail<W, f<2>, 2, fmt>, \
                               ::tc::cpu::row_dots::dense_with_tail<W, f<3>, 3, fmt>, \
                               ::tc::cpu::row_dots::dense_with_tail<W, f<4>, 4, fmt>>
// The body of a set's row_dots_<isa>(fmt), from the dots_<format> kernels
// in scope where it is expanded.
#define TC_ROW_DOTS_BY_FORMAT(fmt, W)                                                    \
  switch (fmt) {                                                                         \
    case ::tc::quant::Q4_0: return TC_ROW_DOTS_TILES(dots_q4_0);                         \
    case ::tc::quant::Q4_1: return TC_ROW_DOTS_TILES(dots_q4_1);                         \
    case ::tc::quant::Q8_0: return TC_ROW_DOTS_TILES(dots_q8_0);                         \
    case ::tc::quant::Q5_0: return TC_ROW_DOTS_TILES(dots_q5_0);                         \
    case ::tc::quant::Q5_1: return TC_ROW_DOTS_TILES(dots_q5_1);                         \
    case ::tc::quant::Q4_K: return TC_ROW_DOTS_TILES(dots_q4_k);                         \
    case ::tc::quant::Q5_K: return TC_ROW_DOTS_TILES(dots_q5_k);                         \
    case ::tc::quant::Q6_K: return TC_ROW_DOTS_TILES(dots_q6_k);                         \
    case ::tc::quant::Q8_K: return TC_ROW_DOTS_TILES(dots_q8_k);                         \
    case ::tc::quant::F16: return TC_ROW_DOTS_DENSE(W, dots_f16, ::tc::quant::F16);      \
    case ::tc::quant::BF16: return TC_ROW_DOTS_DENSE(W, dots_bf16, ::tc::quant::BF16);   \
    case ::tc::quant::F32: return TC_ROW_DOTS_DENSE(W, dots_f32, ::tc::quant::F32);      \
    default: return nullptr;                                                             \
  }
