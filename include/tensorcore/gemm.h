/* tensorcore: general matrix multiply.
 *
 *   C = alpha * op(A) @ op(B) + beta * C      (row-major; op = transpose or not)
 *
 * A is M x K (K x M when transpose_a), B is K x N (N x K when transpose_b),
 * C is M x N. lda/ldb/ldc are row pitches in elements; 0 means packed.
 * beta == 0 never reads C. K == 0 gives beta * C. */
#ifndef TENSORCORE_GEMM_H
#define TENSORCORE_GEMM_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Supported (dtype, accum) pairs:
 *   F32 x F32 -> F32, accum F32 (TF32 where the device has it and
 *                     allow_tf32 is set; ignored on the CPU)
 *   F16 x F16 -> F16, accum F32 or F16 (the CPU accumulates F16 in F32)
 *   BF16 x BF16 -> BF16, accum F32
 *   I8 x I8 -> I32, accum I32 (alpha and beta must be integers; int32
 *                     arithmetic wraps like the hardware's) */
typedef struct tc_gemm_desc {
  int64_t M, N, K;
  tc_dtype dtype;   /* element type of A and B (and of C except for I8) */
  tc_dtype accum;
  double alpha, beta;
  int32_t transpose_a, transpose_b;
  int64_t lda, ldb, ldc;
  int64_t batch;    /* >= 1; tc_gemm and tc_gemm_async use 1 */
  int64_t stride_a, stride_b, stride_c; /* elements between batches; 0 = packed */
  int32_t allow_tf32;
} tc_gemm_desc;

TC_API tc_status tc_gemm(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc);
TC_API tc_status tc_gemm_async(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc,
                               tc_stream stream);
TC_API tc_status tc_gemm_batched(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc);
TC_API tc_status tc_gemm_batched_async(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc,
                                       tc_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_GEMM_H */
