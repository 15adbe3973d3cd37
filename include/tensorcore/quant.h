/* tensorcore: quantized weights (ggml/GGUF block formats) and the GEMV over them.
 *
 *   Y[M, N] = X[M, K] @ W[N, K]^T
 *
 * W is stored row by row in one of the formats below, byte-compatible with
 * ggml (a GGUF tensor's bytes are a valid W: GGUF dims [K, N]). X and Y are
 * dense row-major in f16 (the default), bf16 or f32; accumulation is f32.
 * K must be a multiple of the format's block size (32, or 256 for the K
 * formats). */
#ifndef TENSORCORE_QUANT_H
#define TENSORCORE_QUANT_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Weight formats. Values are part of the ABI. */
typedef int32_t tc_quant_type;
#define TC_QUANT_Q4_0 0 /* 32 weights in 18 bytes: f16 d, 16 bytes of nibbles; w = (q - 8) d */
#define TC_QUANT_Q8_0 1 /* 32 weights in 34 bytes: f16 d, 32 int8; w = q d */
#define TC_QUANT_Q4_1 2 /* 32 weights in 20 bytes: f16 d, f16 m, nibbles; w = q d + m */
#define TC_QUANT_Q4_K 3 /* 256 weights in 144 bytes */
#define TC_QUANT_Q5_K 4 /* 256 weights in 176 bytes */
#define TC_QUANT_Q6_K 5 /* 256 weights in 210 bytes */
#define TC_QUANT_Q8_K 6 /* 256 weights in 292 bytes: f32 d, 256 int8, 16 int16 sums */
#define TC_QUANT_F16 7  /* plain IEEE half */
#define TC_QUANT_BF16 8 /* plain bfloat16 */
#define TC_QUANT_F32 9  /* plain float */
#define TC_QUANT_Q5_0 10 /* 32 weights in 22 bytes: f16 d, 32 fifth bits, nibbles; w = (q - 16) d */
#define TC_QUANT_Q5_1 11 /* 32 weights in 24 bytes: f16 d, f16 m, 32 fifth bits, nibbles; w = q d + m */

/* "q4_0", "q8_0", "q4_1", "q4_k", "q5_k", "q6_k", "q8_k", "f16", "bf16",
 * "f32", "q5_0", "q5_1"; "unknown" otherwise. */
TC_API const char* tc_quant_name(tc_quant_type fmt);

/* Block geometry of a format: weights per block and bytes per block. */
TC_API tc_status tc_quant_block_info(tc_quant_type fmt, int64_t* block_elems, int64_t* block_bytes);

/* Exact bytes of an N x K matrix in `fmt`. INVALID_SHAPE when N or K is
 * <= 0, K is not a multiple of the block size, or the size overflows. */
TC_API tc_status tc_quantized_size(tc_quant_type fmt, int64_t N, int64_t K, size_t* out);

/* Quantises W_src[N, K] (dtype f16, bf16 or f32) into W_quant, row by row,
 * bit-identical to ggml's reference quantisers (quantize_row_*_ref) run on the
 * f32 values. Formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_K, F16, BF16, F32;
 * the others give TC_ERR_UNSUPPORTED. */
TC_API tc_status tc_quantize_weights(tc_context ctx, tc_buffer W_src, tc_buffer W_quant, tc_quant_type fmt,
                                     int64_t N, int64_t K, tc_dtype src_dtype);
TC_API tc_status tc_quantize_weights_async(tc_context ctx, tc_buffer W_src, tc_buffer W_quant, tc_quant_type fmt,
                                           int64_t N, int64_t K, tc_dtype src_dtype, tc_stream stream);

/* Dequantises rows [row_offset, row_offset + N) of a matrix W_quant of K
 * columns into Y[N, K] (dtype f16, bf16 or f32). W_quant must hold those rows;
 * use it for an embedding lookup (N = 1) or to inspect weights. f32 results
 * are bit-identical to ggml's dequantize_row_*. */
TC_API tc_status tc_dequantize_weights(tc_context ctx, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt,
                                       int64_t row_offset, int64_t N, int64_t K, tc_dtype dtype);
TC_API tc_status tc_dequantize_weights_async(tc_context ctx, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt,
                                             int64_t row_offset, int64_t N, int64_t K, tc_dtype dtype,
                                             tc_stream stream);

/* Y[M, N] = X[M, K] @ W_quant[N, K]^T. X and Y have dtype `dtype` (f16, bf16
 * or f32); Y may not overlap X or W. W is read once for all M rows. */
TC_API tc_status tc_gemv_quantized(tc_context ctx, tc_buffer X, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt,
                                   int64_t M, int64_t N, int64_t K, tc_dtype dtype);
TC_API tc_status tc_gemv_quantized_async(tc_context ctx, tc_buffer X, tc_buffer W_quant, tc_buffer Y,
                                         tc_quant_type fmt, int64_t M, int64_t N, int64_t K, tc_dtype dtype,
                                         tc_stream stream);

/* Y = rmsnorm(X) @ W_quant^T with rmsnorm(x) = x * gamma / sqrt(mean(x^2) + eps)
 * per row of X, gamma[K] in `dtype`. The normalised X is never written out.
 * eps must be finite and >= 0. */
TC_API tc_status tc_fused_rmsnorm_gemv_quantized(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W_quant,
                                                 tc_buffer Y, tc_quant_type fmt, int64_t M, int64_t N, int64_t K,
                                                 float eps, tc_dtype dtype);
TC_API tc_status tc_fused_rmsnorm_gemv_quantized_async(tc_context ctx, tc_buffer X, tc_buffer gamma,
                                                       tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt, int64_t M,
                                                       int64_t N, int64_t K, float eps, tc_dtype dtype,
                                                       tc_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_QUANT_H */
