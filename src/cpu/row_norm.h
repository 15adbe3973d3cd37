// The scalar RMS-norm scale of one row, shared by the kernels that norm a
// row on the fly (the model ops, the fused norms of the 8-bit and f16
// products); the rmsnorm op's vector kernels sum in lanes instead.
#pragma once

#include <cmath>
#include <cstdint>

namespace tc {
namespace cpu {

// 1 / sqrt(mean x^2 + eps), the sum of squares in f64 in element order.
inline float rstd_of(const float* x, int64_t D, double eps) {
  double ss = 0;
  for (int64_t d = 0; d < D; ++d) ss += double(x[d]) * double(x[d]);
  return float(1.0 / std::sqrt(ss / double(D) + eps));
}

}  // namespace cpu
}  // namespace tc
