/* tensorcore: scaled dot-product attention, forward and backward.
 *
 * Layouts (row-major, packed):
 *   Q, O, dQ, dO : [batch, heads,    seq_q,  head_dim]   io dtype
 *   K, V, dK, dV : [batch, kv_heads, seq_kv, head_dim]   io dtype
 *   LSE          : [batch, heads,    seq_q]              f32, natural log
 *   alibi slopes : [heads]                               f32
 *
 * For query head h, row i and key j (kv head g = h / (heads / kv_heads)):
 *   p      = i + (seq_kv - seq_q)          absolute position of the query
 *   s[i,j] = softmax_scale * <Q[h,i], K[g,j]> - slope[h] * (p - j)
 *   O[h,i] = sum_j softmax_j(s[i,:]) V[g,j],  LSE[h,i] = log sum_j exp(s[i,j])
 * over the keys the row sees:
 *   causal          : j <= p (aligned bottom-right; with seq_q == 1 the query
 *                     sees every key)
 *   window_size W>0 : p - W < j <= p, whether or not causal is set (a window
 *                     never looks ahead)
 *   neither         : every key
 * A row that sees no key (causal or windowed with seq_q > seq_kv, i.e. p < 0)
 * gets O = 0 and LSE = -inf; its gradients are 0.
 * The ALiBi term is (p - j) as written, also for keys after p when
 * neither causal nor a window is set.
 *
 * dtype F16, BF16 or F32 (accum must be F32: every sum is kept in f32).
 * kv_heads 0 means heads; heads must be a multiple of kv_heads (GQA/MQA).
 * softmax_scale <= 0 means 1/sqrt(head_dim). head_dim is 1..256.
 * Outputs may not share bytes with inputs or with each other. */
#ifndef TENSORCORE_ATTENTION_H
#define TENSORCORE_ATTENTION_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TC_ATTENTION_MAX_HEAD_DIM 256

typedef struct tc_attention_desc {
  int64_t batch, heads, kv_heads, seq_q, seq_kv, head_dim;
  tc_dtype dtype;        /* F16, BF16 or F32: Q, K, V, O and the gradients */
  tc_dtype accum;        /* F32 */
  double softmax_scale;  /* <= 0: 1/sqrt(head_dim) */
  int32_t causal;        /* nonzero: bottom-right aligned causal mask */
  int32_t return_lse;    /* forward: write LSE (the LSE buffer is then required) */
  int64_t window_size;   /* 0: no window; W > 0: keys in (p - W, p] */
} tc_attention_desc;

/* O = attention(Q, K, V). LSE may be null unless desc->return_lse is set;
 * alibi_slopes may be null (no ALiBi). */
TC_API tc_status tc_attention_forward(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                                      tc_buffer LSE, tc_buffer alibi_slopes, const tc_attention_desc* desc);
TC_API tc_status tc_attention_forward_async(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                                            tc_buffer LSE, tc_buffer alibi_slopes, const tc_attention_desc* desc,
                                            tc_stream stream);

/* dQ, dK, dV from dO, given the forward's O and LSE (same desc; return_lse is
 * ignored). dK and dV of a kv head sum over the query heads that read it. */
TC_API tc_status tc_attention_backward(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                                       tc_buffer dO, tc_buffer LSE, tc_buffer dQ, tc_buffer dK, tc_buffer dV,
                                       tc_buffer alibi_slopes, const tc_attention_desc* desc);
TC_API tc_status tc_attention_backward_async(tc_context ctx, tc_buffer Q, tc_buffer K, tc_buffer V, tc_buffer O,
                                             tc_buffer dO, tc_buffer LSE, tc_buffer dQ, tc_buffer dK, tc_buffer dV,
                                             tc_buffer alibi_slopes, const tc_attention_desc* desc, tc_stream stream);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_ATTENTION_H */
