// i8 x i8 -> i32 GEMM: C = alpha * op(A) @ op(B) + beta * C, with int32
// accumulation and wrapping int32 arithmetic in the epilogue.
#include "cpu/gemm_i8.h"

#include <vector>

#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {

void gemm_i8(const tc_gemm_desc& d, const int8_t* a, const int8_t* b, int32_t* c) {
  const int64_t M = d.M, N = d.N, K = d.K;
  const int32_t alpha = int32_t(int64_t(d.alpha)), beta = int32_t(int64_t(d.beta));
  // Pack op(B) transposed (N x K) so the inner loop walks both operands along K.
  std::vector<int8_t> bt(size_t(N * K));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j)
      bt[size_t(j * K + k)] = d.transpose_b ? b[j * d.ldb + k] : b[k * d.ldb + j];
  parallel_for(M, 4, [&](int64_t i0, int64_t i1) {
    std::vector<int8_t> arow(static_cast<size_t>(K));
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t k = 0; k < K; ++k) arow[size_t(k)] = d.transpose_a ? a[k * d.lda + i] : a[i * d.lda + k];
      int32_t* crow = c + i * d.ldc;
      for (int64_t j = 0; j < N; ++j) {
        const int8_t* bj = bt.data() + j * K;
        int32_t acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += int32_t(arow[size_t(k)]) * int32_t(bj[k]);
        uint32_t r = uint32_t(alpha) * uint32_t(acc);
        if (beta != 0) r += uint32_t(beta) * uint32_t(crow[j]);
        crow[j] = int32_t(r);
      }
    }
  });
}

}  // namespace cpu
}  // namespace tc
