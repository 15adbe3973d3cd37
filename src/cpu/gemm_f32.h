// The f32 product of the CPU backend. f32 GEMM, f16/bf16 GEMM without AMX
// (widened to f32) and conv2d all go through sgemm, which runs on the BLAS
// the build links or on tensorcore's own kernels (gemm_f32.cpp).
#pragma once

#include <cstdint>

namespace tc {
namespace cpu {

// C = alpha * op(A) @ op(B) + beta * C for one row-major matrix: op(A) is
// M x K (A stored K x M with pitch lda when ta), op(B) K x N. beta == 0 never
// reads C; alpha == 0 or K == 0 only scales C. Dimensions and pitches fit
// int32 (capi checks them).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace cpu
}  // namespace tc
