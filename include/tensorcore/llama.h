/* tensorcore: a LLaMA-family decoder over a GGUF file.
 *
 * tc_llama_load maps the file's weights onto the context's device (used in
 * place from the file's mapping on the CPU, copied once into device memory on
 * a GPU), builds the tokenizer from its tokenizer.ggml.* metadata and
 * allocates a KV cache of n_ctx positions and the scratch of a forward.
 * tc_llama_eval runs the forward for n new tokens at positions
 * [n_past, n_past + n), appends their keys and values to the cache and
 * (optionally) returns their f32 logits [n, n_vocab] to host memory; a later
 * eval continues the sequence, tc_llama_reset starts a new one. A model is
 * used by one thread at a time.
 *
 * Several sequences (continuous batching): tc_llama_set_max_sequences gives
 * the model S sequence slots, each with its own positions and n_ctx cache
 * cells. tc_llama_seq_eval runs a chunk of one sequence (its prompt), and
 * tc_llama_decode_batch one token of each of n distinct sequences as one
 * forward of n rows: the weights are read once for all of them. Sequences
 * join (tc_llama_seq_reset, then tc_llama_seq_eval of their prompt) and
 * leave between batch steps while the others go on. tc_llama_eval,
 * tc_llama_reset and tc_llama_n_past are sequence 0's. */
#ifndef TENSORCORE_LLAMA_H
#define TENSORCORE_LLAMA_H

#include "tensorcore/context.h"
#include "tensorcore/tokenizer.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_llama_s* tc_llama;

struct tc_llama_config {
  int64_t n_vocab;
  int64_t n_ctx;        /* KV cache positions */
  int64_t n_ctx_train;  /* <arch>.context_length (0 when absent) */
  int64_t n_embd;
  int64_t n_layer;
  int64_t n_head;
  int64_t n_head_kv;
  int64_t head_dim;
  int64_t n_ff;
  double rms_norm_eps;
  double rope_freq_base;
  double rope_freq_scale;
  int32_t tied_embeddings;  /* 1: no output.weight, token_embd is the output matrix */
  int32_t weight_type;      /* TC_QUANT_* of blk.0.attn_q.weight */
  int32_t bos_id, eos_id;   /* the tokenizer's (llama.cpp's defaults where the file has no key); without a
                               vocabulary the file's keys; -1 when absent. End-of-generation ids:
                               tc_tokenizer_eog_ids of tc_llama_tokenizer */
};

/* Loads a llama-family GGUF file. n_ctx <= 0 picks min(context_length, 2048)
 * (2048 when the file has no context length). TC_ERR_IO: the file cannot be
 * read; TC_ERR_CORRUPT: it is not valid GGUF; TC_ERR_UNSUPPORTED: not a
 * LLaMA-shaped model (missing tensor, wrong shape, a weight format without a
 * kernel, an unknown tokenizer); the detail names the cause. */
TC_API tc_status tc_llama_load(tc_context ctx, const char* path, int64_t n_ctx, tc_llama* out);
TC_API tc_status tc_llama_free(tc_llama model);
TC_API tc_status tc_llama_get_config(tc_llama model, struct tc_llama_config* out);

/* Runs `n` tokens (each in [0, n_vocab)) at positions [n_past, n_past + n),
 * n_past + n <= n_ctx. logits: NULL, or room for `capacity` floats; the call
 * writes the logits of all n tokens (capacity >= n * n_vocab) or, when
 * capacity is exactly n_vocab, those of the last token only. On a failed
 * validation nothing changes; n_past advances by n on success. */
TC_API tc_status tc_llama_eval(tc_llama model, const int32_t* tokens, int64_t n, float* logits, int64_t capacity);
TC_API tc_status tc_llama_reset(tc_llama model);
TC_API tc_status tc_llama_n_past(tc_llama model, int64_t* out);

/* Sequence slots: n_seq in [1, 512] (1 after load). The cache is
 * reallocated for n_seq * n_ctx positions (and the batch step's scratch), so
 * every sequence must be empty (n_past 0), else TC_ERR_INVALID_ARG; a failed
 * allocation keeps the old cache. */
TC_API tc_status tc_llama_set_max_sequences(tc_llama model, int64_t n_seq);
TC_API tc_status tc_llama_get_max_sequences(tc_llama model, int64_t* out);

/* tc_llama_eval, tc_llama_reset and tc_llama_n_past of sequence `seq` (in
 * [0, max sequences), else TC_ERR_INVALID_ARG). On a GPU a one-token
 * tc_llama_seq_eval of a sequence other than 0 runs without the recorded
 * graph; tc_llama_decode_batch is the fast path for them. */
TC_API tc_status tc_llama_seq_eval(tc_llama model, int32_t seq, const int32_t* tokens, int64_t n, float* logits,
                                   int64_t capacity);
TC_API tc_status tc_llama_seq_reset(tc_llama model, int32_t seq);
TC_API tc_status tc_llama_seq_n_past(tc_llama model, int32_t seq, int64_t* out);

/* One batch step: tokens[i] appended to sequence seqs[i] at its own n_past,
 * for n distinct sequences (1 <= n <= max sequences). logits: NULL, or room
 * for capacity >= n * n_vocab floats: row i is sequence seqs[i]'s logits.
 * Every sequence of the batch advances by one on success. Refused with
 * nothing changed: a sequence out of range or twice, a token outside
 * [0, n_vocab), a sequence already at n_ctx (TC_ERR_INVALID_SHAPE), n out
 * of range (TC_ERR_INVALID_SHAPE), a null array, a capacity too small; the
 * detail names the row. On a GPU the step is recorded once per n and
 * replayed. */
TC_API tc_status tc_llama_decode_batch(tc_llama model, const int32_t* seqs, const int32_t* tokens, int64_t n,
                                       float* logits, int64_t capacity);

/* tc_llama_decode_batch for greedy decoding: the same step and refusals,
 * and next[i] (room for n ids) = the id of sequence seqs[i]'s largest logit
 * (the lowest id on a tie, a NaN counted largest; taken before a model's
 * final soft-capping, which is increasing), found where the step ran: on a
 * GPU only the n ids come back instead of n * n_vocab floats. A null next
 * is TC_ERR_INVALID_ARG. */
TC_API tc_status tc_llama_decode_batch_greedy(tc_llama model, const int32_t* seqs, const int32_t* tokens, int64_t n,
                                              int32_t* next);

/* Rows of any sequences as one batch (llama.cpp's llama_decode): row i
 * appends tokens[i] to sequence seqs[i]; a sequence may have any number of
 * rows, which take its next positions in row order. want: NULL (every row)
 * or n flags; logits: NULL, or room for capacity >= (wanted rows) * n_vocab
 * floats, the wanted rows' logits in row order. Runs as forwards of up to
 * 512 rows whose weight products take all their rows at once (a prompt of
 * several sequences is one prefill) and whose attention is each sequence's
 * own; tc_llama_decode_batch stays the fast path for one token of each
 * sequence. Every sequence advances by its rows on success. Refused with
 * nothing changed: n < 1 or a sequence whose n_past plus its rows exceeds
 * n_ctx (TC_ERR_INVALID_SHAPE), a sequence out of range, a token outside
 * [0, n_vocab), a null array, a capacity too small (TC_ERR_INVALID_ARG);
 * the detail names the row. */
TC_API tc_status tc_llama_eval_batch(tc_llama model, const int32_t* seqs, const int32_t* tokens, int64_t n,
                                     const uint8_t* want, float* logits, int64_t capacity);

/* Element type of the activations that enter the weight products: TC_DTYPE_F32
 * (the default: products exact up to f32 rounding) or TC_DTYPE_F16 (inputs
 * and outputs of the products rounded to f16; on AVX512-VNNI processors the
 * products of Q4_0/Q8_0/Q4_K/Q6_K weights then quantise the activations to 8
 * bits per block of 32 and use integer dot products, as llama.cpp does:
 * faster; logits within a few 1e-2 relative). Norms, RoPE, attention and
 * the residual stream stay f32 either way. On a GPU, F16 runs the one-token
 * step on 8-bit activations when every matrix is Q4_0, Q8_0, Q4_K, Q5_K or
 * Q6_K, and makes a second device copy of the Q4_0, Q8_0 and Q6_K matrices
 * laid out for those products (their size again; Q4_K and Q5_K are read in
 * place; TC_LLAMA_SPLIT=0 skips the copy, and Q6_K matrices then take the
 * f16 products): TC_ERR_ALLOC (or the allocation's status) when it does not
 * fit, the model unchanged apart from the activation type. */
TC_API tc_status tc_llama_set_activations(tc_llama model, tc_dtype dtype);

/* Element type of the KV cache: TC_DTYPE_F16 (the default after load, as
 * llama.cpp's: keys after RoPE and values rounded to f16 as they are
 * appended, half the bytes a one-token step reads from the cache; attention
 * scores and sums stay f32), TC_DTYPE_F32, or TC_DTYPE_Q8_0 (as llama.cpp's
 * -ctk q8_0 -ctv q8_0: each key after RoPE and each value stored as GGUF
 * Q8_0 blocks of 32 along the head dim, d = max|x| / 127 and q = roundf(x /
 * d) as ggml's reference quantiser, 34 bytes per 32 values, and read back as
 * q d inside the attention kernels; the head dim must be a multiple of 32,
 * else TC_ERR_UNSUPPORTED). The cache is reallocated, so
 * the model must be empty (n_past 0: after load or tc_llama_reset), else
 * TC_ERR_INVALID_ARG (with several sequences: all of them empty); other
 * types TC_ERR_UNSUPPORTED_DTYPE; a failed
 * allocation keeps the old cache. */
TC_API tc_status tc_llama_set_kv_cache_type(tc_llama model, tc_dtype dtype);
TC_API tc_status tc_llama_get_kv_cache_type(tc_llama model, tc_dtype* out);

/* The model's tokenizer, owned by the model (valid until tc_llama_free; do
 * not free it). */
TC_API tc_status tc_llama_tokenizer(tc_llama model, tc_tokenizer* out);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_LLAMA_H */
