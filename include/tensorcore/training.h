/* tensorcore: training kernels (normalisation, RoPE, activations, softmax,
 * AdamW, fused normalisation + GEMV).
 *
 * Conventions shared by every function here:
 * - Tensors are packed row-major. `dtype` (TC_DTYPE_F16, TC_DTYPE_BF16 or
 *   TC_DTYPE_F32) is the element type of the activations, their gradients and
 *   the weights gamma, beta and W. Per-row statistics (mean, rstd) and weight
 *   gradients (dgamma, dbeta) are always f32. Arithmetic is f32.
 * - Every dimension must be >= 1; a buffer must hold at least the bytes its
 *   tensor spans (it may be larger).
 * - Aliasing: an output may be the very same memory as an input of the same
 *   shape where a function says so (same start, same size); any other overlap
 *   between an output and another argument is TC_ERR_INVALID_ARG.
 * - Weight gradients are overwritten, not accumulated.
 * - A failing call writes nothing.
 * - Every function has an _async twin with a trailing tc_stream: validated
 *   the same way, enqueued on the stream, returns at once (tc_stream_sync
 *   waits and reports a kernel's failure). */
#ifndef TENSORCORE_TRAINING_H
#define TENSORCORE_TRAINING_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* RMSNorm over the last dimension of X [N, D]:
 *   rstd[i] = 1 / sqrt(mean_j(X[i,j]^2) + eps),  Y[i,j] = X[i,j] * rstd[i] * gamma[j]
 * gamma [D]; rstd_out [N] f32 may be NULL. eps >= 0 and finite. Y may be X. */
TC_API tc_status tc_rmsnorm_forward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer Y, tc_buffer rstd_out,
                                    int64_t N, int64_t D, float eps, tc_dtype dtype);
TC_API tc_status tc_rmsnorm_forward_async(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer Y,
                                          tc_buffer rstd_out, int64_t N, int64_t D, float eps, tc_dtype dtype,
                                          tc_stream stream);

/* Gradients of RMSNorm given rstd from the forward pass:
 *   dX[i,j]   = rstd[i] * (gamma[j] dY[i,j] - X[i,j] rstd[i]^2 / D * sum_k dY[i,k] gamma[k] X[i,k])
 *   dgamma[j] = sum_i dY[i,j] X[i,j] rstd[i]
 * dgamma [D] f32 may be NULL (not computed). dX may be X or dY. */
TC_API tc_status tc_rmsnorm_backward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer rstd,
                                     tc_buffer dX, tc_buffer dgamma, int64_t N, int64_t D, tc_dtype dtype);
TC_API tc_status tc_rmsnorm_backward_async(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer rstd,
                                           tc_buffer dX, tc_buffer dgamma, int64_t N, int64_t D, tc_dtype dtype,
                                           tc_stream stream);

/* LayerNorm over the last dimension of X [N, D] (biased variance):
 *   mean[i] = mean_j X[i,j],  rstd[i] = 1 / sqrt(mean_j (X[i,j] - mean[i])^2 + eps)
 *   Y[i,j]  = (X[i,j] - mean[i]) * rstd[i] * gamma[j] + beta[j]
 * beta may be NULL (no shift); mean_out and rstd_out [N] f32 may be NULL.
 * eps >= 0 and finite. Y may be X. */
TC_API tc_status tc_layernorm_forward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer Y,
                                      tc_buffer mean_out, tc_buffer rstd_out, int64_t N, int64_t D, float eps,
                                      tc_dtype dtype);
TC_API tc_status tc_layernorm_forward_async(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer Y,
                                            tc_buffer mean_out, tc_buffer rstd_out, int64_t N, int64_t D, float eps,
                                            tc_dtype dtype, tc_stream stream);

/* Gradients of LayerNorm given mean and rstd from the forward pass, with
 * xhat = (X - mean) * rstd and g = dY * gamma:
 *   dX[i,j]   = rstd[i] * (g[i,j] - mean_k g[i,k] - xhat[i,j] * mean_k g[i,k] xhat[i,k])
 *   dgamma[j] = sum_i dY[i,j] xhat[i,j],   dbeta[j] = sum_i dY[i,j]
 * dgamma and dbeta [D] f32 may each be NULL. dX may be X or dY. */
TC_API tc_status tc_layernorm_backward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer mean,
                                       tc_buffer rstd, tc_buffer dX, tc_buffer dgamma, tc_buffer dbeta, int64_t N,
                                       int64_t D, tc_dtype dtype);
TC_API tc_status tc_layernorm_backward_async(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY,
                                             tc_buffer mean, tc_buffer rstd, tc_buffer dX, tc_buffer dgamma,
                                             tc_buffer dbeta, int64_t N, int64_t D, tc_dtype dtype, tc_stream stream);

/* Rotary position embedding, in place on X [batch, heads, seq, head_dim]
 * with f32 tables cos_t, sin_t [seq, head_dim / 2] (head_dim even). For
 * position s and pair k (c = cos_t[s,k], s_ = sin_t[s,k]) the pair (a, b) is
 *   half rotation (interleaved = 0, GPT-NeoX / HF LLaMA): a = x[k], b = x[k + head_dim/2]
 *   interleaved   (interleaved = 1, GGUF / Meta LLaMA):  a = x[2k], b = x[2k + 1]
 * and forward writes (a c - b s_, b c + a s_); backward applies the inverse
 * (transposed) rotation (a c + b s_, b c - a s_) to the gradient.
 * The tables must not overlap X. */
typedef struct tc_rope_desc {
  int64_t batch, heads, seq, head_dim;
  tc_dtype dtype;      /* of X */
  int32_t interleaved; /* 0 or 1 */
} tc_rope_desc;

TC_API tc_status tc_rope_forward(tc_context ctx, tc_buffer X, tc_buffer cos_t, tc_buffer sin_t,
                                 const tc_rope_desc* desc);
TC_API tc_status tc_rope_forward_async(tc_context ctx, tc_buffer X, tc_buffer cos_t, tc_buffer sin_t,
                                       const tc_rope_desc* desc, tc_stream stream);
TC_API tc_status tc_rope_backward(tc_context ctx, tc_buffer dX, tc_buffer cos_t, tc_buffer sin_t,
                                  const tc_rope_desc* desc);
TC_API tc_status tc_rope_backward_async(tc_context ctx, tc_buffer dX, tc_buffer cos_t, tc_buffer sin_t,
                                        const tc_rope_desc* desc, tc_stream stream);

/* SwiGLU on n elements: out = silu(gate) * up, silu(g) = g * sigmoid(g).
 * out may be gate or up. */
TC_API tc_status tc_swiglu_forward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n,
                                   tc_dtype dtype);
TC_API tc_status tc_swiglu_forward_async(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n,
                                         tc_dtype dtype, tc_stream stream);

/* With s = sigmoid(gate):
 *   dgate = dout * up * s * (1 + gate * (1 - s)),   dup = dout * gate * s
 * dgate and dup may each be gate, up or dout, but not each other. */
TC_API tc_status tc_swiglu_backward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate,
                                    tc_buffer dup, int64_t n, tc_dtype dtype);
TC_API tc_status tc_swiglu_backward_async(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout,
                                          tc_buffer dgate, tc_buffer dup, int64_t n, tc_dtype dtype,
                                          tc_stream stream);

/* GEGLU with the tanh form of GELU (Gemma's feed-forward) on n elements:
 *   gelu(g) = 0.5 g (1 + tanh(c (g + 0.044715 g^3))),  c = sqrt(2 / pi)
 *   out = gelu(gate) * up.   out may be gate or up. */
TC_API tc_status tc_geglu_forward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n,
                                  tc_dtype dtype);
TC_API tc_status tc_geglu_forward_async(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n,
                                        tc_dtype dtype, tc_stream stream);

/* dgate = dout * up * gelu'(gate),  dup = dout * gelu(gate), with
 *   gelu'(g) = 0.5 (1 + t) + 0.5 g (1 - t^2) c (1 + 3 * 0.044715 g^2),  t = tanh(c (g + 0.044715 g^3)).
 * dgate and dup may each be gate, up or dout, but not each other. */
TC_API tc_status tc_geglu_backward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate,
                                   tc_buffer dup, int64_t n, tc_dtype dtype);
TC_API tc_status tc_geglu_backward_async(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout,
                                         tc_buffer dgate, tc_buffer dup, int64_t n, tc_dtype dtype, tc_stream stream);

/* Softmax over the last dimension of X [N, D]:
 *   Y[i,j] = exp(X[i,j] - max_k X[i,k]) / sum_k exp(X[i,k] - max_k X[i,k])
 * Y may be X. A row of all -inf gives NaN (as 0/0). */
TC_API tc_status tc_softmax_forward(tc_context ctx, tc_buffer X, tc_buffer Y, int64_t N, int64_t D, tc_dtype dtype);
TC_API tc_status tc_softmax_forward_async(tc_context ctx, tc_buffer X, tc_buffer Y, int64_t N, int64_t D,
                                          tc_dtype dtype, tc_stream stream);

/* dX[i,j] = Y[i,j] * (dY[i,j] - sum_k dY[i,k] Y[i,k]).  dX may be Y or dY. */
TC_API tc_status tc_softmax_backward(tc_context ctx, tc_buffer Y, tc_buffer dY, tc_buffer dX, int64_t N, int64_t D,
                                     tc_dtype dtype);
TC_API tc_status tc_softmax_backward_async(tc_context ctx, tc_buffer Y, tc_buffer dY, tc_buffer dX, int64_t N,
                                           int64_t D, tc_dtype dtype, tc_stream stream);

/* One AdamW step (decoupled weight decay) on n f32 parameters:
 *   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
 *   p -= lr * ((m / bias_correction1) / (sqrt(v / bias_correction2) + eps) + weight_decay * p)
 * grads are in grad_dtype (F32, F16 or BF16). Constraints (as PyTorch):
 * lr >= 0, 0 <= beta1, beta2 < 1, eps >= 0, weight_decay >= 0, all finite;
 * bias corrections in (0, 1] (1 - beta^t for step t). params, m, v and
 * grads must not overlap. */
typedef struct tc_adamw_desc {
  int64_t n;
  tc_dtype grad_dtype;
  /* double, so that 1 - beta2 (e.g. 0.001 from 0.999) keeps its precision;
   * the arithmetic is f32. */
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1, bias_correction2;
} tc_adamw_desc;

TC_API tc_status tc_adamw_step(tc_context ctx, tc_buffer params, tc_buffer m, tc_buffer v, tc_buffer grads,
                               const tc_adamw_desc* desc);
TC_API tc_status tc_adamw_step_async(tc_context ctx, tc_buffer params, tc_buffer m, tc_buffer v, tc_buffer grads,
                                     const tc_adamw_desc* desc, tc_stream stream);

/* Normalisation fused with a matrix-vector product, in one pass over W:
 *   Y[i,n] = sum_k norm(X)[i,k] * W[n,k]      X [M, K], W [N, K], Y [M, N]
 * with norm = RMSNorm (gamma [K]) or LayerNorm (gamma, beta [K]; beta may be
 * NULL). The normalised X is never written: each row's statistics are
 * computed first, then every row of W is read once for all M rows. X, gamma,
 * beta, W and Y share `dtype`. Y must not overlap an input. */
TC_API tc_status tc_fused_rmsnorm_gemv(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W, tc_buffer Y,
                                       int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype);
TC_API tc_status tc_fused_rmsnorm_gemv_async(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W, tc_buffer Y,
                                             int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype,
                                             tc_stream stream);
TC_API tc_status tc_fused_layernorm_gemv(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer W,
                                         tc_buffer Y, int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype);
TC_API tc_status tc_fused_layernorm_gemv_async(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta,
                                               tc_buffer W, tc_buffer Y, int64_t M, int64_t N, int64_t K, float eps,
                                               tc_dtype dtype, tc_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_TRAINING_H */
