// The Backend interface: what a device must provide for tensorcore to run on
// it. src/capi validates every argument before calling in, so backends assume
// valid input. Each op runs on `queue` when one is given (returning at once)
// or synchronously in the caller's thread when `queue` is null.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorcore/context.h"
#include "tensorcore/gemm.h"
#include "tensorcore/training.h"
#include "tensorcore/conv2d.h"
#include "tensorcore/attention.h"
#include "tensorcore/quant.h"

namespace tc {

class Backend;
struct TierAccounts;

// Bytes owned by a buffer. Shared between the buffer handle and every op
// enqueued on it, so freeing a handle never frees memory that pending work
// still reads.
struct Storage {
  Backend* backend = nullptr;
  void* data = nullptr;
  size_t size = 0;
  bool owned = false;
  // ---- Memory tiers and checkpointing (core/tiers.h) ----
  // A Storage never changes tier: a move or a checkpoint discard replaces the
  // buffer's Storage with a new one.
  int32_t tier = 0;        // TC_TIER_*: L0 `data` is device memory, L1 host memory, L3 the file `path`
  bool resident = true;    // false: discarded by a checkpoint, no bytes anywhere
  std::string path;        // L3 spill file, removed with the Storage
  std::shared_ptr<TierAccounts> accounts;  // counts `size` under `tier` while alive (owned storage)
  // gguf: keeps memory that the storage borrows alive (e.g. a mapped file).
  std::shared_ptr<const void> keepalive;
  ~Storage();
};
using StorageRef = std::shared_ptr<Storage>;

// What every op's arguments carry: the name and shapes for TC_TRACE, and the
// storage the op touches, kept alive until the op has run.
struct OpInfo {
  const char* name = "";
  std::string shapes;
  std::vector<StorageRef> keep;
};

struct GemmArgs {
  OpInfo info;
  tc_gemm_desc d;  // normalised: lda/ldb/ldc and strides filled in, batch >= 1
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  // Not in the public descriptor: an f32 C for f16 / bf16 A and B (the
  // LLaMA prefill's products, whose Y the model keeps in f32).
  bool c_f32 = false;
  // C's element type: i32 for i8 inputs, f32 for half inputs with c_f32,
  // else the inputs' type.
  tc_dtype c_dtype() const {
    if (d.dtype == TC_DTYPE_I8) return TC_DTYPE_I32;
    return c_f32 && (d.dtype == TC_DTYPE_F16 || d.dtype == TC_DTYPE_BF16) ? TC_DTYPE_F32 : d.dtype;
  }
};

// ---- Training kernels (tensorcore/training.h) ------------------------------
// Pointers are the buffers' data; optional outputs are null when not wanted.
// `dtype` is the element type of the activations and weights; statistics and
// weight gradients are f32.

struct RmsNormForwardArgs {
  OpInfo info;
  int64_t N = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  float eps = 0.0f;
  const void* x = nullptr;
  const void* gamma = nullptr;
  void* y = nullptr;
  float* rstd = nullptr;  // optional
};

struct RmsNormBackwardArgs {
  OpInfo info;
  int64_t N = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* dy = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;
  float* dgamma = nullptr;  // optional
};

struct LayerNormForwardArgs {
  OpInfo info;
  int64_t N = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  float eps = 0.0f;
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;  // optional
  void* y = nullptr;
  float* mean = nullptr;  // optional
  float* rstd = nullptr;  // optional
};

struct LayerNormBackwardArgs {
  OpInfo info;
  int64_t N = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* dy = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dx = nullptr;
  float* dgamma = nullptr;  // optional
  float* dbeta = nullptr;   // optional
};

struct RopeArgs {
  OpInfo info;
  tc_rope_desc d;
  bool inverse = false;  // backward: rotate by -theta
  void* x = nullptr;
  const float* cos_t = nullptr;
  const float* sin_t = nullptr;
};

struct SwigluForwardArgs {
  OpInfo info;
  int64_t n = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* gate = nullptr;
  const void* up = nullptr;
  void* out = nullptr;
};

struct SwigluBackwardArgs {
  OpInfo info;
  int64_t n = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* dout = nullptr;
  void* dgate = nullptr;
  void* dup = nullptr;
};

// GEGLU with the tanh form of GELU (Gemma's feed-forward), over n elements:
//   gelu(g) = 0.5 g (1 + tanh(c (g + 0.044715 g^3))),  c = sqrt(2 / pi)
//   out = gelu(g) * u;  the same operands as SwiGLU.
using GegluForwardArgs = SwigluForwardArgs;
using GegluBackwardArgs = SwigluBackwardArgs;

struct SoftmaxForwardArgs {
  OpInfo info;
  int64_t N = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* x = nullptr;
  void* y = nullptr;
};

struct SoftmaxBackwardArgs {
  OpInfo info;
  int64_t N = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* y = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
};

struct AdamwArgs {
  OpInfo info;
  tc_adamw_desc d;
  float* params = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  const void* grads = nullptr;
};

struct FusedNormGemvArgs {
  OpInfo info;
  int64_t M = 0, N = 0, K = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  float eps = 0.0f;
  bool layernorm = false;  // else RMSNorm
  const void* x = nullptr;
  const void* gamma = nullptr;
  const void* beta = nullptr;  // LayerNorm only; optional
  const void* w = nullptr;
  void* y = nullptr;
};

// ---- end of training kernels ------------------------------------------------

// --- conv2d ---------------------------------------------------------------
// `d` is normalised: out_H and out_W filled in, dtype F16 or F32. Tensors are
// packed NCHW / OIHW; scratch sizes are those of the tc_conv2d_*_bytes helpers.
struct Conv2dForwardArgs {
  OpInfo info;
  tc_conv2d_desc d;
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;  // null: no bias
  void* y = nullptr;
  float* col = nullptr;
};

struct Conv2dBackwardInputArgs {
  OpInfo info;
  tc_conv2d_desc d;
  const void* dy = nullptr;
  const void* w = nullptr;
  void* dx = nullptr;
  float* col = nullptr;
  float* dx_f32 = nullptr;
};

struct Conv2dBackwardWeightArgs {
  OpInfo info;
  tc_conv2d_desc d;
  const void* x = nullptr;
  const void* dy = nullptr;
  void* dw = nullptr;
  float* col = nullptr;
};
// --- end conv2d -----------------------------------------------------------
// --- quantized ----------------------------------------------------------------
// Formats are TC_QUANT_* (src/quant/formats.h); matrices are row-major with
// quantised rows of K weights. Validated: sizes fit, K is whole blocks, the
// dtypes are f16/bf16/f32, outputs do not overlap inputs.
struct QuantizeWeightsArgs {
  OpInfo info;
  int32_t fmt = 0;
  int64_t N = 0, K = 0;
  tc_dtype src_dtype = TC_DTYPE_F16;
  const void* src = nullptr;  // N x K in src_dtype
  void* dst = nullptr;        // N quantised rows
};

struct DequantizeWeightsArgs {
  OpInfo info;
  int32_t fmt = 0;
  int64_t N = 0, K = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* src = nullptr;  // the first row to dequantise
  void* dst = nullptr;        // N x K in dtype
};

// Y[M, N] = f(X)[M, K] @ W[N, K]^T, f = identity, or the RMS norm with gamma
// when gamma is set (fused_rmsnorm_gemv_quantized).
struct GemvQuantizedArgs {
  OpInfo info;
  int32_t fmt = 0;
  int64_t M = 0, N = 0, K = 0;
  tc_dtype dtype = TC_DTYPE_F16;  // of X, Y and gamma
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  const void* gamma = nullptr;
  float eps = 0.0f;
  // Or also: the same W with its rows interleaved by eight
  // (quant::repack_rows8; N a multiple of 8), which a backend may read
  // instead where Backend::reads_rows8 says so.
  const void* w_rows8 = nullptr;
};
// --- end quantized ------------------------------------------------------------

// ---- attention ----
// d is normalised: kv_heads filled in, softmax_scale > 0, causal/return_lse
// 0 or 1. lse is null unless return_lse; alibi is null without ALiBi.
struct AttentionArgs {
  OpInfo info;
  tc_attention_desc d;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  const float* alibi = nullptr;
  // Not in the public descriptor: the decoder's logit soft-capping (Gemma 2).
  // softcap > 0 replaces each score s = scale <q, k> by softcap tanh(s /
  // softcap) before the mask and the softmax. Forward only.
  float softcap = 0.0f;
  // Not in the public descriptor: K and V rows (of head_dim elements)
  // between consecutive kv heads, and kv_heads times that between batch
  // entries; 0: seq_kv (packed). The LLaMA prompt attends its cache in
  // place: n_ctx rows a head, slots one after the other. Forward only.
  int64_t kv_rows = 0;
  int64_t kv_stride_rows() const { return kv_rows ? kv_rows : d.seq_kv; }
};

struct AttentionBackwardArgs {
  OpInfo info;
  tc_attention_desc d;  // normalised as for the forward
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const void* d_o = nullptr;
  const float* lse = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  const float* alibi = nullptr;
};
// ---- end attention ----

// ---- model ops (src/model: the LLaMA forward on any device) ----
// The small steps between the big ops of a decoder, so that a forward is
// backend ops only and runs where its buffers are. Values that change from
// one decode step to the next (the position, the token ids) are read from
// device memory (`pos`, `tokens`: int32 the model writes before the step),
// so a step captured once as a graph replays unchanged. All f32 unless said.

// dst[i, :] = row tokens[i] of `table` (rows of K weights in format fmt,
// row_bytes apart), dequantised exactly as quant::dequantize_row does.
struct EmbedRowsArgs {
  OpInfo info;
  int32_t fmt = 0;
  int64_t n = 0, K = 0;
  uint64_t row_bytes = 0;
  const void* table = nullptr;
  const int32_t* tokens = nullptr;  // n ids, valid rows of the table
  float* dst = nullptr;             // [n, K]
  float scale = 1.0f;               // dst = scale * row (Gemma scales its embeddings by sqrt(K))
};

// x[i] += y[i] for i < n (the residual add). With gamma, y's rows of D (n a
// multiple of D) RMS-normed first, as the rmsnorm op computes them:
// x += y rstd gamma, rstd = 1 / sqrt(mean y^2 + eps) (a post-branch norm
// and its residual add). With norm_out, the next norm's output too, from
// the sum: norm_out[r] = x[r] rstd(x[r]) norm_gamma in norm_dtype (F32 or
// F16) for rows of D (the next product's input without a norm and a
// conversion of their own); y may then be null (x as it is, normed).
struct AddArgs {
  OpInfo info;
  int64_t n = 0;
  float* x = nullptr;
  const float* y = nullptr;
  const float* gamma = nullptr;
  int64_t D = 0;
  float eps = 0.0f;
  const float* norm_gamma = nullptr;
  void* norm_out = nullptr;
  tc_dtype norm_dtype = TC_DTYPE_F32;
};

// dst[r * dst_pitch + i] = src[r * src_pitch + i] converted, for r < rows and
// i < n (pitches in elements, 0 = n; the rows do not overlap); one of
// src_dtype / dst_dtype is F32, the other F16 or BF16 (round to nearest
// even, as core/half.h); or src_dtype Q8_0 (a Q8_0 KV cache's rows, n and
// the pitches multiples of 32) into F32 (q d, exact), F16 or BF16 (q d
// rounded to nearest even).
struct ConvertArgs {
  OpInfo info;
  int64_t n = 0;
  int64_t rows = 1, src_pitch = 0, dst_pitch = 0;
  tc_dtype src_dtype = TC_DTYPE_F32, dst_dtype = TC_DTYPE_F16;
  const void* src = nullptr;
  void* dst = nullptr;
};

// RoPE on the new tokens' queries and keys, and the cache append.
// Token i (< n) is at position p = *pos + i; with c = cos_t[p, k],
// s = sin_t[p, k] and the pair (a, b) = (x[2k], x[2k+1]) (GGUF's llama
// layout) or, with neox, (x[k], x[k + D/2]) (the half rotation of Qwen and
// Gemma files):  a' = a c - b s,  b' = b c + a s.
//   qt[h, i, :]          = rope(q[i, h*D : (h+1)*D])      h < H
//   k_cache[g, p, :]     = rope(k[i, g*D : (g+1)*D])      g < Hkv
//   v_cache[g, p, :]     = v[i, g*D : (g+1)*D]
// stored as `cache`: F32; F16 rounded to nearest even; or Q8_0 (D a multiple
// of 32), each block of 32 of the row quantised as ggml's
// quantize_row_q8_0_ref: d = max|x| / 127, q = roundf(x / d) (0 when d is
// 0), d stored as f16. Cache offsets below count elements; a Q8_0 cache's
// bytes are dtype_bytes(Q8_0, elements) (34 per 32).
// With `slots` (a batch of sequences, one token each) token i is at
// position p = pos[i] of the cache slot slots[i] instead, whose cells start
// slots[i] * slot_stride elements into k_cache and v_cache; both arrays are
// in device memory, so a recorded step replays for any positions.
struct RopeKvAppendArgs {
  OpInfo info;
  int64_t n = 0, H = 0, Hkv = 0, D = 0;
  int64_t C = 0;                   // cache positions per kv head
  int64_t ldq = 0, ldk = 0, ldv = 0;  // elements between consecutive tokens of q, k, v
  const int32_t* pos = nullptr;    // device memory
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* cos_t = nullptr;    // [C, D/2]
  const float* sin_t = nullptr;
  float* qt = nullptr;             // [H, n, D]
  // When set, the queries go here in f16 instead of to qt (the chunk
  // attention's operand on f16 activations): each rounded as convert rounds.
  uint16_t* qt16 = nullptr;        // [H, n, D]
  void* k_cache = nullptr;         // [Hkv, C, D] of `cache` (F32, F16 or Q8_0)
  void* v_cache = nullptr;
  tc_dtype cache = TC_DTYPE_F32;
  bool neox = false;
  // Biases added to every token's q, k and v (one f32 sum each) before the
  // rotation and the append: [H D], [Hkv D], [Hkv D]; null: none (Qwen2's).
  const float* bq = nullptr;
  const float* bk = nullptr;
  const float* bv = nullptr;
  // Then q and k RMS-normed per head row of D with these weights [D] (the
  // rmsnorm op's y = x rstd gamma, rstd = 1 / sqrt(mean x^2 + norm_eps));
  // null: none (Qwen3's and Gemma's Q/K norms).
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0.0f;
  const int32_t* slots = nullptr;  // [n], device memory; pos is then [n] too
  int64_t slot_stride = 0;         // cache elements between slots
};

// dst[i, h, :] = src[h, i, :]: attention's head-major output back to token
// rows, both of dtype (F32 or F16).
struct HeadsToTokensArgs {
  OpInfo info;
  int64_t n = 0, H = 0, D = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  const void* src = nullptr;  // [H, n, D]
  void* dst = nullptr;        // [n, H, D]
};

// The GLU of the joined [gate | up] product's rows, gate at 0 and up at F of
// each row of ld floats: out[i, f] = act(gu[i, f]) gu[i, F + f] for i < n,
// f < F (gate::glu: SiLU, or GELU's tanh form with gelu), into out [n][F]
// of out_dtype (F32 or F16, rounded once): the down product's input.
struct GluRowsArgs {
  OpInfo info;
  int64_t n = 0, F = 0, ld = 0;
  bool gelu = false;
  const float* gu = nullptr;
  tc_dtype out_dtype = TC_DTYPE_F32;
  void* out = nullptr;  // must not overlap gu
};

// rows pieces of row_bytes each, from src + r * src_pitch to dst + r * dst_pitch
// (bytes; the pieces do not overlap): e.g. the cache prefix of every kv head,
// packed for one attention call over all heads.
struct Copy2dArgs {
  OpInfo info;
  int64_t rows = 0;
  size_t row_bytes = 0, src_pitch = 0, dst_pitch = 0;
  const void* src = nullptr;
  void* dst = nullptr;
};

// out[r] = the first i of the largest x[r * n + i], i < n, for each of the
// rows (NumPy's argmax of each row: the lowest index on a tie, a NaN counted
// largest): the next token of greedy decoding, found where the logits are.
struct ArgmaxRowsArgs {
  OpInfo info;
  int64_t rows = 0, n = 0;
  const float* x = nullptr;  // [rows][n]
  int32_t* out = nullptr;    // [rows], n < 2^31
};

// One query row per head against the cache positions j <= *pos (and
// j > *pos - window when window > 0):
//   o[h] = softmax(cap(scale * q[h] K_g^T)) V_g,   g = h / (H / Hkv)
// cap(s) = softcap tanh(s / softcap) when softcap > 0, else s.
// With `slots`, n query rows of n sequences (a batch step): row i attends
// over positions j <= pos[i] of the cache slot slots[i] (its cells
// slots[i] * slot_stride elements into k_cache and v_cache); without, n is
// 1 and the row attends over slot 0 up to *pos.
// A Q8_0 cache (D a multiple of 32) is read as its dequantised values q d,
// block by block inside the kernel: no widened copy of the cache.
// `partial` is scratch for a split over the cache: room for
// decode_attention_splits(C) partial results (D + 2 floats each) per head
// and row, laid out as the backend chooses.
struct DecodeAttentionArgs {
  OpInfo info;
  int64_t H = 0, Hkv = 0, D = 0, C = 0;
  float scale = 0.0f;
  const int32_t* pos = nullptr;  // device memory: [1], or [n] with slots
  const float* q = nullptr;      // [H, n, D]
  const void* k_cache = nullptr;   // [Hkv, C, D] of `cache` (F32, F16 or Q8_0) per slot
  const void* v_cache = nullptr;
  tc_dtype cache = TC_DTYPE_F32;
  float* o = nullptr;            // [n, H, D]
  float* partial = nullptr;      // [n, H, decode_attention_splits(C), D + 2]
  int64_t window = 0;
  float softcap = 0.0f;
  int64_t n = 1;
  const int32_t* slots = nullptr;  // [n], device memory
  int64_t slot_stride = 0;         // cache elements between slots
  // Or null: o also quantised for the next product, as quantize_q8 without a
  // norm quantises its n rows of H D (oq [n][H D], od [n][H D / 32][2];
  // D a multiple of 32), so that product needs no quantize_q8 of its own.
  int8_t* oq = nullptr;
  float* od = nullptr;
  // [n][H] counters, zero before the first call and left zero by every call
  // (device memory): the GPU's pieces of a head count themselves in and the
  // last one combines them (no second kernel). Needed by the GPU backend.
  uint32_t* arrivals = nullptr;
};
// One piece per 16 cache positions, at most 128: the scratch's size (the GPU
// kernel sizes the pieces it uses from the position).
inline int64_t decode_attention_splits(int64_t C) {
  const int64_t s = (C + 15) / 16;
  return s < 128 ? s : 128;
}

// The one-row products of a decode step on 8-bit activations (the
// VNNI contract of the quantized GEMV: each activation moves by at most half
// a quantisation step), in two ops so that one quantised X serves several
// products and the norm, the residual add and SwiGLU cost no launch of their own:
//   quantize_q8: v = x, or the RMS norm v = x * gamma / sqrt(mean(x^2) + eps)
//     (sum of squares in f64) when gamma is set; then per block of 32:
//     dx = max|v| / 127, xq = round-to-nearest-even(v / dx), sx = dx sum(xq)
//   gemv_q8: r[n] = sum_b d_b(W[n]) (dx_b dot(q_b, xq_b) + c_b sx_b), the
//     block's integer dot product exact (c = -8 for Q4_0, 0 for Q8_0; Q4_1
//     and Q5_1, w = d q + m: d_b dx_b dot(q_b, xq_b) + m_b sx_b), then
//       kStore: y[n] = r[n]     kAdd: y[n] += r[n]
//       kSwiglu: y[n] = silu(r[n]) r[n + N/2] for n < N/2 (W's rows [gate; up])
//       kGeglu:  y[n] = gelu(r[n]) r[n + N/2], gelu's tanh form as geglu_forward
// The K-quants as the CPU's VNNI path computes them, per sub-block j of
// 32 (Q4_K / Q5_K) or group g of 16 (Q6_K) inside X's block b:
//     d sc_j dx_b dot(q, xq) - dmin m_j sx_b     (Q4_K, Q5_K; q unsigned)
//     d sc_g dx_b dot(q - 32, xq)                (Q6_K)
// Q4_0, Q4_1, Q5_1, Q8_0 (K a multiple of 32), Q4_K, Q5_K and Q6_K (K a
// multiple of 256); other formats answer TC_ERR_UNSUPPORTED before anything
// is enqueued (check_gemv_q8). Q5_0 has no product of its own: repack_q8
// writes its blocks as Q8_0's split layout (each code minus 16), exactly.
//
// W comes in GGUF's layout (Q4_0 / Q8_0 blocks are 18 or 34 bytes, only
// 2-byte aligned) or in the split layout repack_q8 writes, the same numbers
// with every block's quants 16-byte aligned and the scales apart, which a
// GPU reads with whole 16-byte loads and no staging:
//   qs [N][K/B][QB], d [N][K/B] (f16 bits)
// with B = 32, QB = 16 (Q4_0) or 32 (Q8_0); B = 256, QB = 208 (Q6_K: ql,
// qh and the scales). Q4_K and Q5_K come in GGUF's layout only (their
// blocks are 16-byte multiples), Q4_1 and Q5_1 too (4-byte multiples);
// Q6_K in the split layout only.
// With xh, X stays in f16 (quantize_q8 only normalises and rounds it) and
// gemv_q8 is the exact product of the GEMM path, W dequantised to f16
// (K-quants: d sc and dmin m rounded to f16 first) times X, f32 sums:
// cheaper than the 8-bit epilogue per block once there are a few dozen
// rows; a GPU takes it for K a multiple of 256 and the formats of
// quant::q8_f16x_format only (else TC_ERR_UNSUPPORTED), on the tensor cores.
// M rows of X (several tokens: a batch of sequences) are M rows of each
// operand, every row its own norm and its own blocks; a GPU loads each
// weight once for up to 8 rows (4 for the K-quants), and from
// TC_CUDA_Q8_MMA_ROWS rows (8) multiplies on the int8 tensor cores, each
// weight loaded once for 64 rows (cuda/gemv_q8_mma.cu).
struct QuantizeQ8Args {
  OpInfo info;
  int64_t M = 1, K = 0;
  const float* x = nullptr;      // [M][K]
  const float* gamma = nullptr;  // [K], or null: no norm
  float eps = 0.0f;
  int8_t* xq = nullptr;  // [M][K], 16-byte aligned
  float* xd = nullptr;   // [M][K / 32][2]: (dx, sx), 8-byte aligned
  uint16_t* xh = nullptr;  // or: v rounded to f16 [M][K] (16-byte aligned), xq / xd unused
};
struct GemvQ8Args {
  enum Epilogue : int { kStore = 0, kAdd = 1, kSwiglu = 2, kGeglu = 3 };
  // The gated epilogues: W's rows are [gate; up], Y has N / 2 columns.
#ifdef __CUDACC__
  __host__ __device__
#endif
  static constexpr bool gated(int e) { return e == kSwiglu || e == kGeglu; }
  OpInfo info;
  int32_t fmt = 0;
  int64_t M = 1, N = 0, K = 0;
  const void* w = nullptr;        // N rows of K weights in fmt; with wd: the split layout's qs
  const uint16_t* wd = nullptr;   // the split layout's scales, or null: W in GGUF's layout
  const int8_t* xq = nullptr;     // [M][K]
  const float* xd = nullptr;      // [M][K / 32][2]
  const uint16_t* xh = nullptr;   // or: X in f16 [M][K], 16-byte aligned (see above)
  // Or X in f32 [M][K], quantised by the product exactly as quantize_q8 with
  // this gamma (null: no norm) and eps would; xq / xd are then scratch of
  // their usual shape whose contents afterwards are unspecified. x must not
  // overlap y.
  const float* x = nullptr;
  const float* gamma = nullptr;
  float eps = 0.0f;
  float* y = nullptr;  // [M][N], or [M][N / 2] for the gated epilogues
  int epilogue = kStore;
  // With rope.n > 0 (kStore): then rope_kv_append(rope), whose q, k and v
  // point into y (the decoder's [q | k | v] rows). A backend may do both in
  // one kernel and leave y unspecified. Held by value: a queued op outlives
  // the caller's frame.
  RopeKvAppendArgs rope;
};
// W (GGUF layout, 2-byte aligned) into the split layout (qs 16-byte aligned).
struct RepackQ8Args {
  OpInfo info;
  int32_t fmt = 0;
  int64_t N = 0, K = 0;
  const void* w = nullptr;
  void* qs = nullptr;
  uint16_t* d = nullptr;
};
// The format and layout rules of gemv_q8 / repack_q8 every backend applies
// (quant/formats.h, q8_product_format): TC_ERR_UNSUPPORTED with the detail
// set (TC_ERR_INVALID_ARG for inconsistent X arguments), or TC_OK.
// Alignment is each backend's own.
tc_status check_quantize_q8(const QuantizeQ8Args& a);
tc_status check_gemv_q8(const GemvQ8Args& a);
// A gemv_q8 that quantises X (a.x) as two steps, for a backend without a
// kernel doing both: quantize_q8 into the call's scratch xq / xd, then the
// product of that.
QuantizeQ8Args quantize_of(const GemvQ8Args& a);
GemvQ8Args product_of(const GemvQ8Args& a);
// The product alone, for a backend that appends its RoPE rows by a second op.
GemvQ8Args without_rope(const GemvQ8Args& a);
tc_status check_decode_attention(const DecodeAttentionArgs& a);
tc_status check_repack_q8(const RepackQ8Args& a);
// ---- end model ops ----

// ---- DiLoCo's outer step on device-resident parameters (src/dist/diloco.cpp) ----
// The parameters are one flat f32 vector (each parameter at its offset);
// anchor, moments, residual and the outer gradient g are flat vectors in
// device memory. prepare and update cover one parameter's range (its theta
// has the parameter's dtype), topk and combine the whole vector. Every
// product and sum is rounded one by one in the order written (no fused
// multiply-add), so the bits are those of the host path
// (src/dist/diloco_outer.cpp). n ranks, Delta = anchor - f32(theta), e the
// residual of the last round.
//   kDelta:          out = Delta
//   kFp16:           s = (Delta + e) * (1/n);  q = f16(s);  out = (s - f32(q)) * n
//                    (out: the next residual)
//   kErrorFeedback:  out = Delta + e  (u, which topk selects from)
struct DilocoPrepareArgs {
  enum Mode : int { kDelta = 0, kFp16 = 1, kErrorFeedback = 2 };
  OpInfo info;
  int64_t n = 0;
  int mode = kDelta;
  int32_t world = 1;
  tc_dtype dtype = TC_DTYPE_F32;  // theta's
  const void* theta = nullptr;
  const float* anchor = nullptr;
  const float* residual = nullptr;  // kFp16, kErrorFeedback
  float* out = nullptr;
  uint16_t* q = nullptr;  // kFp16: f16 bits
};
// The k (1 <= k <= n) largest |u_i|, ties to the lower index, written as
// pairs (index bits as uint32, u_i) in ascending index order; then u becomes
// the residual: the chosen entries zeroed, the rest kept. u finite.
struct DilocoTopkArgs {
  OpInfo info;
  int64_t n = 0, k = 0;
  float* u = nullptr;      // [n]
  float* pairs = nullptr;  // [k][2]
};
// g[i] = sum over ranks r in order, over r's pairs (i, v) with i < n, of
// v * (1/world) (g starts at zero; a rank names an index at most once).
struct DilocoCombineArgs {
  OpInfo info;
  int64_t n = 0, k = 0;
  int32_t world = 1;
  const float* pairs = nullptr;  // [world][k][2]
  float* g = nullptr;            // [n]
};
// The outer optimizer on the anchor a with lr, mu, b2 = beta2:
//   SGD       a = a - lr g
//   NESTEROV  v = mu v + g;  a = a - lr (g + mu v)                (v: m1)
//   ADAM      m = mu m + (1 - mu) g;  v = b2 v + ((1 - b2) g) g;
//             mh = m / bc1 (m when bc1 <= 0), vh = v / bc2 (v when bc2 <= 0);
//             a = a - (lr mh) / (sqrt(vh) + eps)                  (m: m1, v: m2)
// bc1 = 1 - mu^t, bc2 = 1 - b2^t computed by the caller (in double, then
// rounded to f32). Then, when theta is set, theta = a in theta's dtype
// (round to nearest even).
struct DilocoUpdateArgs {
  OpInfo info;
  int64_t n = 0;
  int32_t optimizer = 0;  // TC_DILOCO_OUTER_*
  float lr = 0, mu = 0, beta2 = 0, eps = 0, bc1 = 0, bc2 = 0;
  const float* g = nullptr;
  float* anchor = nullptr;
  float* m1 = nullptr;  // NESTEROV, ADAM
  float* m2 = nullptr;  // ADAM
  tc_dtype dtype = TC_DTYPE_F32;
  void* theta = nullptr;  // optional
};
// The asynchronous round's commit: the local progress made while the round
// ran is kept on top of the new anchor,
//   theta = narrow(anchor + (f32(theta) - theta_at_launch)).
struct DilocoCommitArgs {
  OpInfo info;
  int64_t n = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  void* theta = nullptr;
  const float* anchor = nullptr;
  const float* theta_at_launch = nullptr;
};
// ---- end DiLoCo ----

// The backend side of a stream: an ordered queue of work.
class Queue {
 public:
  virtual ~Queue() = default;
  // Waits for all enqueued work; returns the first failure since the last
  // sync and its detail.
  virtual tc_status sync(std::string* detail) = 0;
};

// A recorded sequence of a queue's work (Backend::begin_capture).
class Graph {
 public:
  virtual ~Graph() = default;
};

// The ops of core/ops.def, numbered in table order.
enum class OpId : int {
#define TC_OP(name, Args, caps) name,
#include "core/ops.def"
#undef TC_OP
  count
};
constexpr int kOpCount = int(OpId::count);
const char* op_name(OpId op);
// The capability bits of core/ops.def that `backend` has: those whose ops it
// all supports.
uint64_t op_capabilities(const Backend& backend);

class Backend {
 protected:
  tc_status no_kernel(const OpInfo& info) const;

 public:
  virtual ~Backend() = default;
  virtual tc_backend kind() const = 0;
  virtual void device_info(struct tc_device_info* out) const = 0;

  // Memory. alloc returns null on failure.
  virtual void* alloc(size_t nbytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual bool host_accessible() const = 0;
  // Whether caller memory at `ptr` can back a buffer of this device
  // (tc_buffer_from_ptr); false with a detail recorded otherwise.
  virtual bool accepts_pointer(const void* ptr, size_t nbytes) const { return true; }
  virtual tc_status copy_in(void* dst, const void* src, size_t nbytes) = 0;
  virtual tc_status copy_out(void* dst, const void* src, size_t nbytes) = 0;

  virtual std::unique_ptr<Queue> create_queue() = 0;

  // Ops (core/ops.def). A backend overrides the ones it has kernels for and
  // says so in supports_op; the rest answer TC_ERR_UNSUPPORTED naming the op
  // and the backend, never run elsewhere.
#define TC_OP(name, Args, caps) \
  virtual tc_status name(const Args& args, Queue*) { return no_kernel(args.info); }
#include "core/ops.def"
#undef TC_OP
  virtual bool supports_op(OpId) const { return false; }
  // Whether gemv_quantized reads a W of this format with its rows interleaved
  // by eight (GemvQuantizedArgs::w_rows8) for rows of X in this dtype: a model
  // makes that copy at load only then.
  virtual bool reads_rows8(int32_t /*fmt*/, tc_dtype) const { return false; }
  // Makes that copy of a GGUF matrix (N rows of K, N a multiple of 8) at dst
  // (quant::rows8_bytes long): quant::repack_rows8 on the calling thread,
  // unless a backend spreads it over threads of its own.
  virtual void make_rows8(int32_t fmt, const void* src, int64_t N, int64_t K, void* dst);
  // Bits beyond the ops' (streams, TF32 GEMM, GGUF loading).
  virtual uint64_t extra_capabilities() const { return 0; }

  // ---- Memory tiers (core/tiers.h) -----------------------------------------
  // Whether the methods below are implemented (TC_CAPABILITY_MEMORY_TIERS).
  virtual bool supports_tiers() const { return false; }
  // Host memory for the L1 tier (page-locked where the device copies from
  // it directly); null on failure.
  virtual void* alloc_host(size_t nbytes);
  virtual void release_host(void* ptr);
  // Copies n bytes between device memory and host memory (`to_device` says
  // which way) after the work enqueued on `queue`, or now when it is null.
  virtual tc_status copy_async(void* dst, const void* src, size_t n, bool to_device, Queue* queue);
  // Runs `fn` on a host thread after the work enqueued on `queue` and before
  // work enqueued later, or now when `queue` is null. `fn` records its own
  // failure; it must not call the device API nor free device memory.
  virtual tc_status run_host(Queue* queue, std::function<tc_status()> fn);
  // Drops `refs` where freeing memory is allowed (CUDA: at the next
  // collect(), never inside a stream callback).
  virtual void defer_release(std::vector<StorageRef> refs) {}
  // Frees what defer_release and finished stream work left behind.
  virtual void collect() {}

  // ---- Graphs: a queue's work recorded once and replayed as one launch ----
  // (CUDA graphs). Between begin_capture and end_capture the ops enqueued on
  // `queue` are recorded, not run; the pointers they were given are baked
  // in, so values that change per replay must be read from device memory
  // the caller updates on the queue before replay. Backends without graphs
  // answer TC_ERR_UNSUPPORTED.
  virtual bool supports_graphs() const { return false; }
  virtual tc_status begin_capture(Queue* queue);
  // Ends the capture started on `queue`; *out is the graph when the capture
  // and its instantiation succeeded.
  virtual tc_status end_capture(Queue* queue, std::unique_ptr<Graph>* out);
  virtual tc_status replay(Graph& graph, Queue* queue);
};

// The backends a context can be created on, in order of preference for the
// default device (core/ops.cpp). A device is named "name" (device 0) or
// "name:N".
struct BackendKind {
  const char* name;                                  // "cpu", "cuda"
  int (*device_count)();                             // 0 when not built or no device
  std::unique_ptr<Backend> (*make)(int device_index);  // null with a detail recorded on failure
};
const std::vector<BackendKind>& backend_kinds();

// Backend factories. make_cuda_backend returns null with a detail recorded
// when CUDA is not built or no GPU is usable.
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend(int device_index);
int cuda_device_count();  // 0 when not built or no GPU
tc_status cuda_device_info(int device_index, struct tc_device_info* out);

}  // namespace tc
