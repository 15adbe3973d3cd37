// The LLaMA forward for n new tokens at positions [P, P + n), P = n_past,
// all activations f32 (rows are tokens, E = n_embd, D = head_dim, G = H / Hkv):
//
//   x = token_embd[tokens]                                        [n, E]
//   per layer:
//     h = rmsnorm(x) * attn_norm
//     q = h Wq^T [n, H*D],  k = h Wk^T, v = h Wv^T [n, Hkv*D]
//     q, k rotated by RoPE, interleaved pairs (x[2i], x[2i+1]) - the GGUF
//       convention: converters permute Wq/Wk rows so that this equals the
//       half-rotation of the original checkpoint
//     K/V cache[layer][g][P + i] = k, v of token i, kv head g
//     o_h = softmax(q_h K_g^T / sqrt(D) + causal mask) V_g    (g = h / G)
//       the mask is bottom-right aligned: query i sees keys j <= P + i
//     x += o Wo^T
//     h = rmsnorm(x) * ffn_norm
//     x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T
//   logits = (rmsnorm(x) * output_norm) Wout^T                    [n, n_vocab]
//
// with the architecture's changes (Arch, llama_load.cpp): x scaled by
// embed_scale; biases added to q, k, v; q and k normed per head (D) before
// RoPE; RoPE on NEOX pairs (x[k], x[k + D/2]); scores scaled by attn_scale,
// soft-capped and limited to a sliding window in the windowed layers (with
// their own RoPE table); each branch's output normed (post_attention_norm,
// post_ffw_norm) before its residual add; GEGLU for SwiGLU; logits
// soft-capped (on the host, after they arrive).
//
// Every step is a backend op on the model's queue (none on a host backend:
// ops then run at once in this thread). Products are the quantized GEMV
// (M = n rows share one pass over the weights), or on a device, for
// M >= kGemmMinRows, the weights dequantised to the activations' type and a
// GEMM. RoPE and the cache append are one op (rope_kv_append), which adds
// the q / k / v biases and applies the Q/K norms first. Attention is
// the backend's attention op: on the host once per kv head on the cache in
// place; on a device, for a chunk, once for all heads over the cache
// prefixes packed by copy_2d (converted to f16 as they are packed, with f16
// activations, for the tensor-core attention), and for a single token the one-row
// decode_attention over the cache (its length read from the parameter
// block, so a recorded step replays). On a device a one-token step also reads [Wq; Wk; Wv] and [Wgate; Wup] as one matrix each
// (stored so at load) and, with f32 activations, takes the norm inside the
// product (fused_rmsnorm_gemv_quantized): fewer, larger launches.
//
// A one-token step on a backend with graphs is recorded once (after its
// first eager run) and replayed: it reads its position and token from the
// parameter block, which each eval updates with one copy before the replay.
//
// A batch step (llama_batch.cpp) is this forward with `batch` set: n rows,
// one token of each of n sequences, RoPE, the cache append and the decode
// attention taking each row's position and cache slot from the parameter
// block; a chunk or one-token step of one sequence addresses its slot's
// cells directly.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/config.h"
#include "core/dtypes.h"
#include "core/error.h"
#include "core/half.h"
#include "core/objects.h"
#include "model/llama.h"
#include "quant/formats.h"

namespace tc {
namespace model {

tc_status Llama::set_activations(tc_dtype t) {
  if (t != act_) drop_graphs();  // the recorded steps have the other products
  act_ = t;
  if (host_) return rows8_weights();
  if (!q8_decode()) return TC_OK;
  const tc_status st = split_weights();
  if (st != TC_OK) {
    // Without their split copies Q6_K matrices have no 8-bit product.
    for (const Matrix* m : q8_matrices())
      if (quant::q8_split_only(m->fmt)) q8_state_ = 0;
  }
  return st;
}

// The matrices of the 8-bit one-token step: per layer [q; k; v] fused or
// each alone (formats differ in K-quant mixes: attn_v is often Q6_K), Wo,
// [gate; up] fused or each alone, Wdown; then the output matrix.
std::vector<Matrix*> Llama::q8_matrices() {
  std::vector<Matrix*> mats;
  for (LlamaLayer& L : layers_) {
    if (L.wqkv.data) mats.push_back(&L.wqkv);
    else mats.insert(mats.end(), {&L.wq, &L.wk, &L.wv});
    mats.push_back(&L.wo);
    if (L.w_gate_up.data) mats.push_back(&L.w_gate_up);
    else mats.insert(mats.end(), {&L.w_gate, &L.w_up});
    mats.push_back(&L.w_down);
  }
  mats.push_back(&output_);
  return mats;
}

tc_status Llama::set_kv_cache_type(tc_dtype t) {
  if (t == kv_) return TC_OK;
  drop_graphs();  // the recorded steps write and read the old cache
  return alloc_kv_cache(t, max_sequences());
}

void Llama::drop_graphs() {
  graph_.reset();
  batch_graphs_.clear();
}

void* Llama::cache_layer(void* cache, int64_t l, int64_t slot) const {
  return static_cast<char*>(cache) + dtype_bytes(kv_, (l * max_sequences() + slot) * slot_elems());
}

tc_status Llama::convert(const void* src, tc_dtype from, void* dst, tc_dtype to, int64_t n) {
  ConvertArgs c;
  c.info.name = "llama.convert";
  c.n = n;
  c.src_dtype = from, c.dst_dtype = to;
  c.src = src, c.dst = dst;
  return be_->convert(c, queue_.get());
}

// With f16 activations (set_activations) X is rounded to f16 once for all
// the products that read it, and the GEMV may take its integer path (X
// quantised to 8 bits per block of 32 on VNNI processors, as llama.cpp
// computes); a GEMV's Y comes back through f16, a GEMM's is written in f32.
// Everything outside the products stays f32.
tc_status Llama::products(const float* x, int64_t M, std::initializer_list<Product> outs, const Matrix* joined) {
  if (act_ != TC_DTYPE_F16) return products_act(x, M, outs, joined);
  TC_TRY(convert(x, TC_DTYPE_F32, xh_, TC_DTYPE_F16, M * outs.begin()->w->K));
  return products_act(xh_, M, outs, joined);
}

// products() on x already in the activation dtype (xh_ with f16 activations).
tc_status Llama::products_act(const void* xg, int64_t M, std::initializer_list<Product> outs, const Matrix* joined) {
  const bool f16 = act_ == TC_DTYPE_F16;
  const Matrix* dequantised = nullptr;  // what wdq_ holds
  for (const Product& p : outs) {
    const Matrix& w = *p.w;
    if (!host_ && M >= kGemmMinRows) {
      // The matrices of a joined one (their formats agree) are dequantised
      // together, once; each GEMM reads its own rows of the copy.
      const Matrix& src = joined && joined->data ? *joined : w;
      if (&src != dequantised) TC_TRY(dequantize_for_gemm(src));
      dequantised = &src;
      const size_t row0 = size_t(w.data - src.data) / src.row_bytes;
      TC_TRY(gemm_dequantized(static_cast<const uint8_t*>(wdq_) + row0 * size_t(w.K) * (f16 ? 2 : 4), w.N, w.K, xg,
                              p.y, M));
      continue;
    }
    GemvQuantizedArgs a;
    a.info.name = "llama.gemv";
    a.fmt = w.fmt;
    a.M = M, a.N = w.N, a.K = w.K;
    a.w = w.data;
    a.w_rows8 = w.rows8;
    a.dtype = act_;
    a.x = xg;
    a.y = f16 ? static_cast<void*>(yh_) : p.y;
    TC_TRY(be_->gemv_quantized(a, queue_.get()));
    if (f16) TC_TRY(convert(yh_, TC_DTYPE_F16, p.y, TC_DTYPE_F32, M * w.N));
  }
  return TC_OK;
}

// Y = X W^T as W dequantised (to f16 with f16 activations, else f32) and a
// GEMM: f16 x f16 with f32 accumulation and an f32 Y, or exact f32 (no
// TF32), so the numerics are those of the GEMV path (less Y's rounding to
// f16). x is f16 (xh_) or f32 as the activations are. The dequantised copy
// is one matrix at a time (or one joined matrix: [q; k; v], [gate; up]) in
// a scratch buffer grown on demand (a chunk's products are never recorded
// in a graph, so growing it here is safe).
tc_status Llama::dequantize_for_gemm(const Matrix& w) {
  const bool f16 = act_ == TC_DTYPE_F16;
  const size_t need = size_t(w.N) * size_t(w.K) * (f16 ? 2 : 4);
  if (need > wdq_bytes_) {
    if (wdq_) {
      // The queue may still read the old copy.
      std::string detail;
      if (tc_status st = queue_->sync(&detail)) return fail_with(st, "llama: " + detail);
      for (auto it = buffers_.begin(); it != buffers_.end(); ++it)
        if ((*it)->bytes() == wdq_) {
          delete_buffer(*it);
          buffers_.erase(it);
          break;
        }
      wdq_ = nullptr, wdq_bytes_ = 0;
    }
    // Sized for the largest matrix so it grows at most once per dtype.
    size_t most = size_t(output_.N) * size_t(output_.K);
    for (const LlamaLayer& L : layers_)
      for (const Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.wqkv, &L.w_gate_up})
        if (m->data) most = std::max(most, size_t(m->N) * size_t(m->K));
    TC_TRY(alloc(most * (f16 ? 2 : 4), &wdq_));
    wdq_bytes_ = most * (f16 ? 2 : 4);
  }
  DequantizeWeightsArgs dq;
  dq.info.name = "llama.dequantize";
  dq.fmt = w.fmt;
  dq.N = w.N, dq.K = w.K;
  dq.dtype = f16 ? TC_DTYPE_F16 : TC_DTYPE_F32;
  dq.src = w.data, dq.dst = wdq_;
  return be_->dequantize_weights(dq, queue_.get());
}

// Y [M][N] = X W^T with W the N x K dequantised rows at w (in wdq_).
tc_status Llama::gemm_dequantized(const void* w, int64_t N, int64_t K, const void* x, float* y, int64_t M) {
  const bool f16 = act_ == TC_DTYPE_F16;
  GemmArgs g;
  g.info.name = "llama.gemm";
  tc_gemm_desc& d = g.d;
  std::memset(&d, 0, sizeof d);
  d.M = M, d.N = N, d.K = K;
  d.dtype = f16 ? TC_DTYPE_F16 : TC_DTYPE_F32;
  d.accum = TC_DTYPE_F32;
  d.alpha = 1.0, d.beta = 0.0;
  d.transpose_a = 0, d.transpose_b = 1;
  d.lda = K, d.ldb = K, d.ldc = N;
  d.batch = 1;
  d.stride_a = M * K, d.stride_b = N * K, d.stride_c = M * N;
  d.allow_tf32 = 0;
  g.a = x, g.b = w, g.c = y;
  g.c_f32 = f16;
  return be_->gemm(g, queue_.get());
}

// x += y for M rows of n_embd, or with gamma (a post-branch norm) x += rmsnorm(y) * gamma;
// then (with norm_gamma) the next products' input from the sum:
// rmsnorm(x) * norm_gamma into act_rows() in the activation dtype, in the
// same op (no norm and no conversion of their own). y null: x as it is.
tc_status Llama::residual(float* x, const float* y, const float* gamma, int64_t M, const float* norm_gamma) {
  AddArgs a;
  a.info.name = norm_gamma ? "llama.residual_norm" : gamma ? "llama.post_norm_residual" : "llama.residual";
  a.D = cfg_.n_embd, a.n = M * a.D, a.x = x, a.y = y;
  a.gamma = gamma, a.eps = float(cfg_.rms_norm_eps);
  if (norm_gamma) a.norm_gamma = norm_gamma, a.norm_out = act_rows(), a.norm_dtype = act_;
  return be_->add(a, queue_.get());
}

tc_status Llama::glu(const float* gate, const float* up, float* out, int64_t n) {
  SwigluForwardArgs a;
  a.info.name = arch_.gelu ? "llama.geglu" : "llama.swiglu";
  a.n = n;
  a.dtype = TC_DTYPE_F32;
  a.gate = gate, a.up = up, a.out = out;
  return arch_.gelu ? be_->geglu_forward(a, queue_.get()) : be_->swiglu_forward(a, queue_.get());
}

// Gemma 2's final soft-capping, on the logits in host memory:
// cap tanh(z / cap).
void Llama::softcap_logits(float* logits, int64_t n) const {
  const float cap = arch_.final_softcap;
  for (int64_t i = 0; i < n; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
}

// y = (rmsnorm(x) * gamma) W^T for the one row of a decode step: the
// backend's fused op where it may be used (f32 products on a device), else
// the norm into h and the product.
tc_status Llama::norm_product(const float* gamma, const Matrix& w, float* y) {
  if (!host_ && act_ == TC_DTYPE_F32 && fused_norm_) {
    GemvQuantizedArgs a;
    a.info.name = "llama.norm_gemv";
    a.fmt = w.fmt;
    a.M = 1, a.N = w.N, a.K = w.K;
    a.dtype = TC_DTYPE_F32;
    a.x = x_, a.w = w.data, a.y = y;
    a.gamma = gamma;
    a.eps = float(cfg_.rms_norm_eps);
    const tc_status st = be_->fused_rmsnorm_gemv_quantized(a, queue_.get());
    if (st != TC_ERR_UNSUPPORTED) return st;
    fused_norm_ = false;  // no kernel for it here: nothing was enqueued
  }
  TC_TRY(residual(x_, nullptr, nullptr, 1, gamma));
  return products_act(act_rows(), 1, {{&w, y}});
}

// With f16 activations on a device, a one-token step quantises X to 8 bits
// per block of 32 (the contract of the f16 products: as the CPU's VNNI path
// and llama.cpp compute) once per distinct input, and its products fold
// the residual adds and SwiGLU into their epilogues: 11 launches a layer
// instead of ~20 where [q; k; v] and [gate; up] are fused. The fused
// products and down take their X in f32 and quantise it themselves
// (gemv_q8's x), which a GPU does inside the product where its streaming
// kernel takes the weights (Q4_0, Q8_0; K <= 4096): two quantize_q8
// launches a layer fewer on a 7B. Needs every
// matrix in a gemv_q8 format (Q4_0, Q4_1, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K) or Q5_0, whose
// split copy is Q8_0's (Q6_K and Q5_0 only with their split copies);
// TC_LLAMA_Q8=0 turns it off (read once).
bool Llama::q8_decode() {
  if (host_ || act_ != TC_DTYPE_F16) return false;
  if (q8_state_ < 0) {
    static const bool off = !config::on(config::Key::kLlamaQ8);
    static const bool split_off = !config::on(config::Key::kLlamaSplit);
    bool all = !off;
    for (const Matrix* m : q8_matrices())
      all = all && m->data && quant::q8_product_format(quant::q8_split_product(m->fmt)) &&
            m->K % quant::q8_block_elems(m->fmt) == 0 &&
            reinterpret_cast<uintptr_t>(m->data) % 16 == 0 && (!quant::q8_split_only(m->fmt) || !split_off);
    q8_state_ = all ? 1 : 0;
  }
  return q8_state_ == 1;
}

// Whether every matrix of the 8-bit step can take f16 X on any backend:
// a format a GPU's tensor-core kernels read, whole stages of 256 weights.
bool Llama::q8_f16x_allowed() {
  for (const Matrix* m : q8_matrices())
    if (m->K % 256 != 0 || !quant::q8_f16x_format(quant::q8_split_product(m->fmt))) return false;
  return true;
}

tc_status Llama::quantize_q8(const float* x, const float* gamma, int64_t K, int64_t M) {
  QuantizeQ8Args a;
  a.info.name = "llama.quantize_q8";
  a.M = M, a.K = K;
  a.x = x, a.gamma = gamma, a.eps = float(cfg_.rms_norm_eps);
  a.xq = q8x_, a.xd = q8d_;
  if (q8_f16x_) a.xh = reinterpret_cast<uint16_t*>(xh_);
  return be_->quantize_q8(a, queue_.get());
}

tc_status Llama::gemv_q8(const Matrix& w, float* y, int epilogue, int64_t M, const float* x, const float* gamma,
                         const RopeKvAppendArgs* rope) {
  if (x && q8_f16x_) {  // f16 X is made by quantize_q8 only
    TC_TRY(quantize_q8(x, gamma, w.K, M));
    x = nullptr, gamma = nullptr;
  }
  GemvQ8Args a;
  a.info.name = "llama.gemv_q8";
  a.fmt = w.split_qs ? quant::q8_split_product(w.fmt) : w.fmt;  // Q5_0's split copy is Q8_0's
  a.M = M, a.N = w.N, a.K = w.K;
  a.w = w.split_qs ? w.split_qs : w.data;
  a.wd = w.split_d;
  a.xq = q8x_, a.xd = q8d_;
  if (q8_f16x_) a.xh = reinterpret_cast<const uint16_t*>(xh_);
  a.x = x, a.gamma = gamma, a.eps = float(cfg_.rms_norm_eps);
  a.y = y;
  a.epilogue = epilogue;
  if (rope) a.rope = *rope;
  return be_->gemv_q8(a, queue_.get());
}

// The attention of n rows of one sequence at positions [P, P + n) over its
// slot's cache of layer l (kc, vc): queries qt [H][n][D] (rotated), output
// token rows o [n][H][D], ot scratch [H][n][D]. The mask is causal and
// bottom-right aligned: row i sees positions j <= P + i. With group > 1, as
// many such sequences of the same n and P in consecutive slots from kc / vc
// on, their rows one after the other (qt, ot, o hold group blocks): one
// attention call for all of them (a device's; the host takes group 1).
// Slots are consecutive in a layer's cache, so the group's kv heads are a
// batch of group * Hkv heads n_ctx rows apart: the attention reads them in
// place (AttentionArgs::kv_rows) unless packs_kv().
tc_status Llama::chunk_attention(int64_t l, int64_t n, int64_t P, const void* kc, const void* vc, const void* qt,
                                 float* ot, void* o, int64_t group) {
  const tc_llama_config& g = cfg_;
  const int64_t H = g.n_head, Hkv = g.n_head_kv, D = g.head_dim, G = H / Hkv, C = g.n_ctx;
  const Arch& A = arch_;
  const int64_t window = A.swa[size_t(l)] ? A.window : 0;
  Queue* q = queue_.get();
  AttentionArgs a;
  a.info.name = "llama.attention";
  a.d.batch = 1, a.d.heads = G, a.d.kv_heads = 1;
  a.d.seq_q = n, a.d.seq_kv = P + n, a.d.head_dim = D;
  a.d.dtype = TC_DTYPE_F32, a.d.accum = TC_DTYPE_F32;
  a.d.softmax_scale = A.attn_scale;
  a.d.causal = 1, a.d.return_lse = 0, a.d.window_size = window;
  a.softcap = A.attn_softcap;
  // One token: [H][1][D] is already o's [1][H][D].
  void* heads_out = n == 1 ? o : ot;
  tc_dtype heads_type = TC_DTYPE_F32;  // of heads_out
  // The kv heads' prefixes packed [Hkv][P+n][D] into kpack/vpack in the
  // attention's element type (f16 with f16 activations on a device,
  // else f32): a copy where the cache has that type, else a conversion
  // (a Q8_0 cache dequantised, q d, as it is packed).
  auto pack_kv = [&](tc_dtype to) -> tc_status {
    if (to == kv_) {
      const size_t esize = dtype_size(kv_);
      Copy2dArgs c;
      c.info.name = "llama.pack_kv";
      c.rows = group * Hkv;
      c.row_bytes = size_t((P + n) * D) * esize;
      c.src_pitch = size_t(C * D) * esize, c.dst_pitch = c.row_bytes;
      c.src = kc, c.dst = kpack_;
      TC_TRY(be_->copy_2d(c, q));
      c.src = vc, c.dst = vpack_;
      return be_->copy_2d(c, q);
    }
    ConvertArgs c;
    c.info.name = "llama.pack_kv_convert";
    c.rows = group * Hkv, c.n = (P + n) * D;
    c.src_pitch = C * D, c.dst_pitch = c.n;
    c.src_dtype = kv_, c.dst_dtype = to;
    c.src = kc, c.dst = kpack_;
    TC_TRY(be_->convert(c, q));
    c.src = vc, c.dst = vpack_;
    return be_->convert(c, q);
  };
  // The kv heads in place, or packed [Hkv][P+n][D] into kpack / vpack.
  auto kv_operands = [&]() -> tc_status {
    if (!packs_kv()) {
      a.k = kc, a.v = vc, a.kv_rows = C;
      return TC_OK;
    }
    a.k = kpack_, a.v = vpack_;
    return pack_kv(act_ == TC_DTYPE_F16 ? TC_DTYPE_F16 : TC_DTYPE_F32);
  };
  if (host_) {
    // Once per kv head (the CPU's vectorised attention, also for a
    // single token), on an f32 cache in place, an f16 or Q8_0 one
    // widened first.
    const float* K = static_cast<const float*>(kc);
    const float* V = static_cast<const float*>(vc);
    int64_t pitch = C * D;
    if (kv_ != TC_DTYPE_F32) {
      TC_TRY(pack_kv(TC_DTYPE_F32));
      K = kpack_, V = vpack_, pitch = (P + n) * D;
    }
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      a.q = static_cast<const float*>(qt) + kh * G * n * D;
      a.k = K + kh * pitch;
      a.v = V + kh * pitch;
      a.o = static_cast<float*>(heads_out) + kh * G * n * D;
      TC_TRY(be_->attention_forward(a, q));
    }
  } else if (act_ == TC_DTYPE_F16) {
    // f16 activations: the attention on f16 operands too (tensor cores,
    // f32 accumulation, as the products): the queries as rope_kv_append
    // wrote them in f16, the kv heads in f16, the heads' outputs through yh
    // into o, which is f16 here: the wo product's input.
    TC_TRY(kv_operands());
    a.d.batch = group * Hkv;
    a.d.dtype = TC_DTYPE_F16;
    a.q = qt, a.o = n == 1 ? o : yh_;
    TC_TRY(be_->attention_forward(a, q));
    heads_out = yh_, heads_type = TC_DTYPE_F16;
  } else {
    // One call for every head: the kv heads a batch of Hkv with G query
    // heads each, instead of Hkv launches.
    TC_TRY(kv_operands());
    a.d.batch = group * Hkv;
    a.q = qt, a.o = heads_out;
    TC_TRY(be_->attention_forward(a, q));
  }
  const size_t seq_bytes = size_t(n * H * D) * dtype_size(heads_type);
  for (int64_t i = 0; n > 1 && i < group; ++i) {
    HeadsToTokensArgs t;
    t.info.name = "llama.heads_to_tokens";
    t.n = n, t.H = H, t.D = D;
    t.dtype = heads_type;
    t.src = static_cast<const char*>(heads_out) + i * seq_bytes, t.dst = static_cast<char*>(o) + i * seq_bytes;
    TC_TRY(be_->heads_to_tokens(t, q));
  }
  return TC_OK;
}

// Enqueues the forward of n tokens (ids and position in the parameter
// block). P, the position on the host, is used only by the chunk attention
// (n > 1): a one-token step depends on nothing but the parameter block.
tc_status Llama::forward(int64_t n, int64_t P, float* lg, int64_t rows, int64_t slot, bool batch, const Chunk* chunk) {
  const tc_llama_config& g = cfg_;
  const int64_t E = g.n_embd, H = g.n_head, Hkv = g.n_head_kv, D = g.head_dim;
  const int64_t Dq = H * D, Dkv = Hkv * D, C = g.n_ctx;
  Queue* q = queue_.get();

  EmbedRowsArgs e;
  e.info.name = "llama.embed";
  e.fmt = tok_embd_.fmt;
  e.n = n, e.K = E;
  e.row_bytes = tok_embd_.row_bytes;
  e.table = tok_embd_.data;
  e.tokens = params_ + 2;
  e.dst = x_;
  e.scale = arch_.embed_scale;
  TC_TRY(be_->embed_rows(e, q));
  const bool q8 = !chunk && (n == 1 || (batch && n <= kQ8MaxRows)) && q8_decode();
  q8_f16x_ = q8 && batch && n >= kQ8F16MinRows && !host_ && q8_f16x_allowed();
  if (q8) {
    // The first op of the 8-bit path: a backend without it enqueues
    // nothing and the step reruns on the exact products.
    const tc_status st = quantize_q8(x_, vec(layers_[0].attn_norm), E, n);
    if (st == TC_ERR_UNSUPPORTED) {
      q8_state_ = 0;
      return forward(n, P, lg, rows, slot, batch, chunk);
    }
    TC_TRY(st);
  }
  const Arch& A = arch_;
  // The chunk attention's output o: f16 token rows in xh_ (the wo product's
  // input) with f16 activations on a device, else f32 rows in o_.
  const bool o16 = act_ == TC_DTYPE_F16 && !host_;
  auto att_out = [&](int64_t row) -> void* {
    return o16 ? static_cast<void*>(xh_ + row * Dq) : static_cast<void*>(o_ + row * Dq);
  };
  // The decode attention (one token, or a batch step's rows) reads f32
  // queries; the chunk attention takes them in its own type: with o16,
  // rope_kv_append writes them in f16 into ot_.
  const bool decoded = !chunk && (batch || (n == 1 && (!host_ || kv_ != TC_DTYPE_F32)));  // f32 o_
  uint16_t* const q16 = o16 && !decoded ? reinterpret_cast<uint16_t*>(ot_) : nullptr;
  auto queries = [&](int64_t row) -> const void* {
    return q16 ? static_cast<const void*>(q16 + row * Dq) : static_cast<const void*>(qt_ + row * Dq);
  };
  bool normed = false;  // the previous layer's residual wrote this layer's normed x
  for (int64_t l = 0; l < g.n_layer; ++l) {
    const LlamaLayer& L = layers_[size_t(l)];
    // A batch step's rows find their slots from slot 0's cells.
    void* kc = cache_layer(k_cache_, l, batch ? 0 : slot);
    void* vc = cache_layer(v_cache_, l, batch ? 0 : slot);
    const int64_t window = A.swa[size_t(l)] ? A.window : 0;
    RopeKvAppendArgs r;
    r.info.name = "llama.rope_kv";
    r.n = n, r.H = H, r.Hkv = Hkv, r.D = D, r.C = C;
    r.ldq = Dq, r.ldk = Dkv, r.ldv = Dkv;
    r.neox = A.neox_rope;
    r.pos = params_;
    r.cos_t = cos_[L.rope], r.sin_t = sin_[L.rope];
    r.qt = qt_, r.qt16 = q16, r.k_cache = kc, r.v_cache = vc, r.cache = kv_;
    if (batch) {
      r.pos = batch_pos(params_), r.slots = batch_slots(params_);
      r.slot_stride = slot_elems();
    }
    bool roped = false;  // rope_kv_append done by the [q | k | v] product
    // rope_kv_append adds the biases and norms q and k per head before it rotates.
    r.bq = L.bq >= 0 ? vec(L.bq) : nullptr, r.bk = L.bk >= 0 ? vec(L.bk) : nullptr;
    r.bv = L.bv >= 0 ? vec(L.bv) : nullptr;
    if (A.qk_norm) r.q_norm = vec(L.q_norm), r.k_norm = vec(L.k_norm), r.norm_eps = float(cfg_.rms_norm_eps);
    float *qp, *kp, *vp;
    if (q8) {
      // Layer 0 reads the 8-bit X quantised above; the fused product quantises its own.
      if (L.wqkv.data) {  // one product for rows [q | k | v]
        qp = qkv_, kp = qkv_ + Dq, vp = qkv_ + Dq + Dkv;
        r.ldq = r.ldk = r.ldv = Dq + 2 * Dkv;
        r.q = qp, r.k = kp, r.v = vp;
        // The product appends the rows (or leaves them to rope_kv_append where its epilogue cannot).
        roped = true;
        TC_TRY(gemv_q8(L.wqkv, qkv_, GemvQ8Args::kStore, n, l > 0 ? x_ : nullptr,
                       l > 0 ? vec(L.attn_norm) : nullptr, &r));
      } else {  // q, k and v of different formats
        if (l > 0) TC_TRY(quantize_q8(x_, vec(L.attn_norm), E, n));
        TC_TRY(gemv_q8(L.wq, q_, GemvQ8Args::kStore, n));
        TC_TRY(gemv_q8(L.wk, k_, GemvQ8Args::kStore, n));
        TC_TRY(gemv_q8(L.wv, v_, GemvQ8Args::kStore, n));
        qp = q_, kp = k_, vp = v_;
      }
    } else if (n == 1 && L.wqkv.data) {
      // One product for q, k and v: [q | k | v] in one row.
      TC_TRY(norm_product(vec(L.attn_norm), L.wqkv, qkv_));
      qp = qkv_, kp = qkv_ + Dq, vp = qkv_ + Dq + Dkv;
    } else {
      if (!normed) TC_TRY(residual(x_, nullptr, nullptr, n, vec(L.attn_norm)));
      if (L.wqkv.data && !host_ && n >= kGemmMinRows) {
        // One GEMM for [q | k | v] rows (the joined matrix dequantised once);
        // rope_kv_append reads q, k and v out of them.
        TC_TRY(products_act(act_rows(), n, {{&L.wqkv, qkv_}}));
        qp = qkv_, kp = qkv_ + Dq, vp = qkv_ + Dq + Dkv;
        r.ldq = r.ldk = r.ldv = Dq + 2 * Dkv;
      } else {
        TC_TRY(products_act(act_rows(), n, {{&L.wq, q_}, {&L.wk, k_}, {&L.wv, v_}}, &L.wqkv));
        qp = q_, kp = k_, vp = v_;
      }
    }
    r.q = qp, r.k = kp, r.v = vp;
    if (chunk) {
      // Each sequence's rows into its own slot, from the position of its first row.
      for (const Segment& sg : chunk->segments) {
        RopeKvAppendArgs rs = r;
        rs.n = sg.n;
        rs.q = qp + sg.row * r.ldq, rs.k = kp + sg.row * r.ldk, rs.v = vp + sg.row * r.ldv;
        rs.qt = qt_ + sg.row * Dq;
        if (q16) rs.qt16 = q16 + sg.row * Dq;
        rs.k_cache = cache_layer(k_cache_, l, sg.slot), rs.v_cache = cache_layer(v_cache_, l, sg.slot);
        rs.pos = batch_pos(params_) + sg.row;
        TC_TRY(be_->rope_kv_append(rs, q));
      }
    } else if (!roped) {
      TC_TRY(be_->rope_kv_append(r, q));
    }
    // One token on 8-bit products: the attention quantises its output into
    // the 8-bit X the wo product reads (no quantize_q8 between them; the
    // qkv product that read the previous X has finished in stream order).
    bool o_quantised = false;
    if (decoded) {
      // The decode attention reads queries [H][n][D] and writes token rows
      // [n][H][D]. Its lengths come from the parameter block, so a recorded
      // step replays.
      DecodeAttentionArgs a;
      a.info.name = "llama.decode_attention";
      a.H = H, a.Hkv = Hkv, a.D = D, a.C = C;
      a.scale = float(A.attn_scale);
      a.window = window, a.softcap = A.attn_softcap;
      a.pos = params_;
      a.q = qt_, a.k_cache = kc, a.v_cache = vc, a.cache = kv_;
      a.o = o_, a.partial = partial_, a.arrivals = arrivals_;
      if (batch) {
        a.n = n;
        a.pos = r.pos, a.slots = r.slots, a.slot_stride = r.slot_stride;
      }
      if (q8 && n == 1 && D % 32 == 0) a.oq = q8x_, a.od = q8d_, o_quantised = true;
      TC_TRY(be_->decode_attention(a, q));
    } else if (!chunk) {
      TC_TRY(chunk_attention(l, n, P, kc, vc, queries(0), ot_, att_out(0)));
    } else {
      // Each sequence's rows: their own chunk attention on their slot's cache,
      // runs of segments of the same n and P in consecutive slots as one call
      // (B prompts of one length: B / group calls); where the kv heads are
      // packed, as many as their scratch holds (Hkv n_ctx D floats).
      // (Segments are adjacent runs of rows: equal n keeps their rows in
      // order.) The host's attention goes kv head by kv head: no groups.
      const auto& sgs = chunk->segments;
      const int64_t esize = act_ == TC_DTYPE_F16 ? 2 : 4;
      for (size_t i = 0; i < sgs.size();) {
        const Segment& sg = sgs[i];
        size_t j = i + 1;
        while (!host_ && j < sgs.size() && sgs[j].n == sg.n && sgs[j].P == sg.P &&
               sgs[j].slot == sg.slot + int64_t(j - i) &&
               (!packs_kv() || int64_t(j - i + 1) * (sg.P + sg.n) * esize <= C * 4))
          ++j;
        TC_TRY(chunk_attention(l, sg.n, sg.P, cache_layer(k_cache_, l, sg.slot), cache_layer(v_cache_, l, sg.slot),
                               queries(sg.row), ot_ + sg.row * Dq, att_out(sg.row), int64_t(j - i)));
        i = j;
      }
    }
    if (q8) {
      // x += o Wo^T; x += glu(h Wgate^T, h Wup^T) Wdown^T, h = rmsnorm(x) * ffn_norm;
      // with post-branch norms (gemma) each branch's output is normalised before its add.
      const int64_t F = g.n_ff;
      if (!o_quantised) TC_TRY(quantize_q8(o_, nullptr, Dq, n));
      if (L.post_attn_norm >= 0) {
        TC_TRY(gemv_q8(L.wo, tmp_, GemvQ8Args::kStore, n));
        TC_TRY(residual(x_, tmp_, vec(L.post_attn_norm), n));
      } else {
        TC_TRY(gemv_q8(L.wo, x_, GemvQ8Args::kAdd, n));
      }
      if (L.w_gate_up.data) {  // the GLU in the product's epilogue
        TC_TRY(gemv_q8(L.w_gate_up, gu_, A.gelu ? GemvQ8Args::kGeglu : GemvQ8Args::kSwiglu, n, x_,
                       vec(L.ffn_norm)));
      } else {  // gate rows [n][F], then up rows [n][F], then the GLU over all of them
        TC_TRY(quantize_q8(x_, vec(L.ffn_norm), E, n));
        TC_TRY(gemv_q8(L.w_gate, gu_, GemvQ8Args::kStore, n));
        TC_TRY(gemv_q8(L.w_up, gu_ + n * F, GemvQ8Args::kStore, n));
        TC_TRY(glu(gu_, gu_ + n * F, gu_, n * F));
      }
      if (L.post_ffn_norm >= 0) {
        TC_TRY(gemv_q8(L.w_down, tmp_, GemvQ8Args::kStore, n, gu_));
        TC_TRY(residual(x_, tmp_, vec(L.post_ffn_norm), n));
      } else {
        TC_TRY(gemv_q8(L.w_down, x_, GemvQ8Args::kAdd, n, gu_));
      }
      continue;
    }
    // The chunk attention's o16 rows are the product's input as they are.
    if (o16 && !decoded) TC_TRY(products_act(xh_, n, {{&L.wo, tmp_}}));
    else TC_TRY(products(o_, n, {{&L.wo, tmp_}}));
    // Each residual add also norms the sum for the next products where they
    // read it whole (a one-row step's joined product norms its own row).
    const bool gate_up_normed = !(n == 1 && L.w_gate_up.data);
    TC_TRY(residual(x_, tmp_, L.post_attn_norm >= 0 ? vec(L.post_attn_norm) : nullptr, n,
                         gate_up_normed ? vec(L.ffn_norm) : nullptr));

    const float* ffn_out = nullptr;  // null: the GLU's f16 rows are in xh_
    if (!gate_up_normed) {
      // One product for gate and up: [gate | up] in one row.
      TC_TRY(norm_product(vec(L.ffn_norm), L.w_gate_up, gu_));
      TC_TRY(glu(gu_, gu_ + g.n_ff, gu_, g.n_ff));
      ffn_out = gu_;
    } else if (o16 && L.w_gate_up.data) {
      // One product for [gate | up] rows (gate_ holds 2 n_ff a row), their
      // GLU rounded to f16 into xh_: the down product's input as it is.
      TC_TRY(products_act(act_rows(), n, {{&L.w_gate_up, gate_}}));
      GluRowsArgs gl;
      gl.info.name = A.gelu ? "llama.geglu_rows" : "llama.swiglu_rows";
      gl.n = n, gl.F = g.n_ff, gl.ld = 2 * g.n_ff;
      gl.gelu = A.gelu;
      gl.gu = gate_, gl.out = xh_, gl.out_dtype = TC_DTYPE_F16;
      TC_TRY(be_->glu_rows(gl, q));
    } else {
      TC_TRY(products_act(act_rows(), n, {{&L.w_gate, gate_}, {&L.w_up, up_}}, &L.w_gate_up));
      TC_TRY(glu(gate_, up_, gate_, n * g.n_ff));
      ffn_out = gate_;
    }
    if (ffn_out) TC_TRY(products(ffn_out, n, {{&L.w_down, tmp_}}));
    else TC_TRY(products_act(xh_, n, {{&L.w_down, tmp_}}));
    const LlamaLayer* next = l + 1 < g.n_layer ? &layers_[size_t(l + 1)] : nullptr;
    normed = next && !(n == 1 && next->wqkv.data);
    TC_TRY(residual(x_, tmp_, L.post_ffn_norm >= 0 ? vec(L.post_ffn_norm) : nullptr, n,
                         normed ? vec(next->attn_norm) : nullptr));
  }
  if (lg) {
    // Only the rows whose logits are wanted go through the output matrix.
    if (q8) {  // a batch step wants every row's logits (rows == n)
      return gemv_q8(output_, lg, GemvQ8Args::kStore, n, x_, vec(output_norm_));
    }
    if (chunk) {
      // The wanted rows gathered into tmp (one copy per run of them).
      int64_t at = 0;
      for (const auto& run : chunk->out) {
        Copy2dArgs c;
        c.info.name = "llama.gather_rows";
        c.rows = 1;
        c.row_bytes = c.src_pitch = c.dst_pitch = size_t(run.second * E) * sizeof(float);
        c.src = x_ + run.first * E, c.dst = tmp_ + at * E;
        TC_TRY(be_->copy_2d(c, q));
        at += run.second;
      }
      if (at == 0) return TC_OK;
      TC_TRY(residual(tmp_, nullptr, nullptr, at, vec(output_norm_)));
      return products_act(act_rows(), at, {{&output_, lg}});
    }
    if (n == 1) return norm_product(vec(output_norm_), output_, lg);
    TC_TRY(residual(x_ + (n - rows) * E, nullptr, nullptr, rows, vec(output_norm_)));
    TC_TRY(products_act(act_rows(), rows, {{&output_, lg}}));
  }
  return TC_OK;
}

// A step of n rows (a one-token step of slot 0, or a batch step) that
// depends on nothing but the parameter block: replays `graph`, or on the
// first call runs the step eagerly (the lazy work of the kernels: plans,
// scratch, which must not happen inside a recording) and records it. A
// backend or kernel that cannot be recorded leaves the model on eager
// steps, which compute the same.
tc_status Llama::replay_or_record(std::unique_ptr<Graph>& graph, int64_t n, bool batch) {
  Queue* q = queue_.get();
  if (graph) return be_->replay(*graph, q);
  TC_TRY(forward(n, 0, logits_, n, 0, batch));
  if (be_->begin_capture(q)) {
    graph_failed_ = true;
    return TC_OK;
  }
  const tc_status st = forward(n, 0, logits_, n, 0, batch);
  std::unique_ptr<Graph> recorded;
  const tc_status end = be_->end_capture(q, &recorded);
  if (st || end || !recorded) graph_failed_ = true;
  else graph = std::move(recorded);
  return TC_OK;
}

tc_status Llama::step(int64_t slot, const int32_t* tokens, int64_t n, int64_t P, float* logits, int64_t rows) {
  params_host_[0] = int32_t(P);
  params_host_[1] = int32_t(n);
  std::memcpy(params_host_ + 2, tokens, size_t(n) * sizeof(int32_t));
  if (host_) return forward(n, P, logits, rows, slot);  // params_host_ is the block itself

  Queue* q = queue_.get();
  TC_TRY(be_->copy_async(params_, params_host_, size_t(n + 2) * sizeof(int32_t), true, q));
  // The recorded step writes slot 0's cells; other slots' steps run eagerly.
  if (n == 1 && slot == 0 && be_->supports_graphs() && !graph_failed_) {
    TC_TRY(replay_or_record(graph_, 1, false));
  } else {
    TC_TRY(forward(n, P, logits ? logits_ : nullptr, rows, slot));
  }
  return logits_back(logits, rows, "tc_llama_eval");
}

// The end of a device step: `rows` rows of logits_ to the caller's host
// array (when given), then the queue drained, since the parameter block's
// staging copy and logits_ are reused by the next step.
tc_status Llama::logits_back(float* logits, int64_t rows, const char* fn) {
  Queue* q = queue_.get();
  if (logits && rows) TC_TRY(be_->copy_async(logits, logits_, size_t(rows * cfg_.n_vocab) * sizeof(float), false, q));
  std::string detail;
  if (tc_status st = q->sync(&detail)) return fail_with(st, std::string(fn) + ": " + detail);
  return TC_OK;
}

// A failure leaves the queue drained, so the next eval starts clean.
tc_status Llama::finish(tc_status st) {
  if (st && queue_) {
    const std::string detail = last_detail();
    std::string ignored;
    queue_->sync(&ignored);
    fail_with(st, detail);
  }
  return st;
}

tc_status Llama::eval(int64_t seq, const int32_t* tokens, int64_t n, float* logits, bool all) {
  const int64_t V = cfg_.n_vocab, past = n_past_[size_t(seq)];
  for (int64_t c0 = 0; c0 < n; c0 += max_batch_) {
    const int64_t m = std::min(max_batch_, n - c0);
    const bool last = c0 + m == n;
    float* out = !logits ? nullptr : all ? logits + c0 * V : last ? logits : nullptr;
    if (tc_status st = finish(step(seq, tokens + c0, m, past + c0, out, all ? m : 1))) return st;
    if (out && arch_.final_softcap > 0.0f) softcap_logits(out, (all ? m : 1) * V);
  }
  n_past_[size_t(seq)] += n;
  return TC_OK;
}

}  // namespace model
}  // namespace tc
