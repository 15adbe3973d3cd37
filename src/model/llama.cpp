// The LLaMA forward for n new tokens at positions [n_past, n_past + n), all
// activations f32 (rows are tokens, E = n_embd, D = head_dim, G = H / Hkv):
//
//   x = token_embd[tokens]                                        [n, E]
//   per layer:
//     h = rmsnorm(x) * attn_norm
//     q = h Wq^T [n, H*D],  k = h Wk^T, v = h Wv^T [n, Hkv*D]
//     q, k rotated by RoPE, interleaved pairs (x[2i], x[2i+1]) - the GGUF
//       convention: converters permute Wq/Wk rows so that this equals the
//       half-rotation of the original checkpoint
//     K/V cache[layer][g][n_past + i] = k, v of token i, kv head g
//     o_h = softmax(q_h K_g^T / sqrt(D) + causal mask) V_g    (g = h / G)
//       the mask is bottom-right aligned: query i sees keys j <= n_past + i
//     x += o Wo^T
//     h = rmsnorm(x) * ffn_norm
//     x += (silu(h Wgate^T) * (h Wup^T)) Wdown^T
//   logits = (rmsnorm(x) * output_norm) Wout^T                    [n, n_vocab]
//
// Every product is the backend's quantized GEMV (M = n rows share one pass
// over the weights); norms, RoPE, SwiGLU and attention are backend ops on
// sub-ranges of the scratch and cache. The layout changes between the
// projections' [n][H][D] rows and attention's [H][n][D] heads, the cache
// append and the residual adds are plain loops (the model requires a
// host-accessible backend, checked at load).
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/objects.h"
#include "model/llama.h"
#include "quant/formats.h"

namespace tc {
namespace model {


// With f16 activations (set_activations) X is rounded to f16 and the GEMV
// may take its integer path (X quantised to 8 bits per block of 32 on VNNI
// processors, as llama.cpp computes); Y comes back through f16. Everything
// outside the products stays f32.
tc_status Llama::gemv(const Matrix& w, const float* x, float* y, int64_t M) {
  if (act_ == TC_DTYPE_F16) {
    if (xh_.size() < size_t(M * w.K)) xh_.resize(size_t(M * w.K));
    if (yh_.size() < size_t(M * w.N)) yh_.resize(size_t(M * w.N));
    for (int64_t i = 0; i < M * w.K; ++i) xh_[size_t(i)] = f32_to_f16(x[i]);
    GemvQuantizedArgs a;
    a.info.name = "llama.gemv";
    a.fmt = w.fmt;
    a.M = M, a.N = w.N, a.K = w.K;
    a.dtype = TC_DTYPE_F16;
    a.x = xh_.data(), a.w = w.data, a.y = yh_.data();
    if (tc_status st = ctx_->backend->gemv_quantized(a, nullptr)) return st;
    for (int64_t i = 0; i < M * w.N; ++i) y[i] = f16_to_f32(yh_[size_t(i)]);
    return TC_OK;
  }
  GemvQuantizedArgs a;
  a.info.name = "llama.gemv";
  a.fmt = w.fmt;
  a.M = M, a.N = w.N, a.K = w.K;
  a.dtype = TC_DTYPE_F32;
  a.x = x, a.w = w.data, a.y = y;
  return ctx_->backend->gemv_quantized(a, nullptr);
}

tc_status Llama::rmsnorm(const float* x, const float* gamma, float* y, int64_t M) {
  RmsNormForwardArgs a;
  a.info.name = "llama.rmsnorm";
  a.N = M, a.D = cfg_.n_embd;
  a.dtype = TC_DTYPE_F32;
  a.eps = float(cfg_.rms_norm_eps);
  a.x = x, a.gamma = gamma, a.y = y;
  return ctx_->backend->rmsnorm_forward(a, nullptr);
}

// Embedding rows: each token's row of token_embd, dequantised to f32.
tc_status Llama::embed(const int32_t* tokens, int64_t n, float* x) {
  for (int64_t i = 0; i < n; ++i) {
    DequantizeWeightsArgs a;
    a.info.name = "llama.embed";
    a.fmt = tok_embd_.fmt;
    a.N = 1, a.K = cfg_.n_embd;
    a.dtype = TC_DTYPE_F32;
    a.src = tok_embd_.data + uint64_t(tokens[i]) * tok_embd_.row_bytes;
    a.dst = x + i * cfg_.n_embd;
    if (tc_status st = ctx_->backend->dequantize_weights(a, nullptr)) return st;
  }
  return TC_OK;
}

tc_status Llama::eval(const int32_t* tokens, int64_t n, float* logits, bool all) {
  const tc_llama_config& g = cfg_;
  const int64_t E = g.n_embd, H = g.n_head, Hkv = g.n_head_kv, D = g.head_dim, F = g.n_ff;
  const int64_t G = H / Hkv, Dq = H * D, Dkv = Hkv * D, C = g.n_ctx, P = n_past_;
  // Scratch: x, h, tmp [n, E]; q, qt, o, ot [n, Dq]; k, v [n, Dkv]; gate, up [n, F].
  const size_t need = size_t(n) * size_t(3 * E + 4 * Dq + 2 * Dkv + 2 * F);
  if (scratch_.size() < need) scratch_.resize(need);
  float* x = scratch_.data();
  float* h = x + n * E;
  float* tmp = h + n * E;
  float* q = tmp + n * E;
  float* qt = q + n * Dq;
  float* o = qt + n * Dq;
  float* ot = o + n * Dq;
  float* k = ot + n * Dq;
  float* v = k + n * Dkv;
  float* gate = v + n * Dkv;
  float* up = gate + n * F;

  if (tc_status st = embed(tokens, n, x)) return st;
  for (int64_t l = 0; l < g.n_layer; ++l) {
    const LlamaLayer& L = layers_[size_t(l)];
    tc_status st;
    if ((st = rmsnorm(x, L.attn_norm.data(), h, n)) || (st = gemv(L.wq, h, q, n)) || (st = gemv(L.wk, h, k, n)) ||
        (st = gemv(L.wv, h, v, n)))
      return st;
    // q [n][H][D] -> qt [H][n][D]; k, v into the cache rows P .. P+n-1.
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hh = 0; hh < H; ++hh)
        std::memcpy(qt + (hh * n + i) * D, q + i * Dq + hh * D, size_t(D) * sizeof(float));
    float* kc = k_cache_ + l * Hkv * C * D;
    float* vc = v_cache_ + l * Hkv * C * D;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t kh = 0; kh < Hkv; ++kh) {
        std::memcpy(kc + (kh * C + P + i) * D, k + i * Dkv + kh * D, size_t(D) * sizeof(float));
        std::memcpy(vc + (kh * C + P + i) * D, v + i * Dkv + kh * D, size_t(D) * sizeof(float));
      }
    RopeArgs r;
    r.info.name = "llama.rope";
    r.d.batch = 1, r.d.heads = H, r.d.seq = n, r.d.head_dim = D;
    r.d.dtype = TC_DTYPE_F32;
    r.d.interleaved = 1;
    r.cos_t = cos_.data() + P * (D / 2);
    r.sin_t = sin_.data() + P * (D / 2);
    r.x = qt;
    if ((st = ctx_->backend->rope(r, nullptr))) return st;
    r.d.heads = 1;
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      r.x = kc + (kh * C + P) * D;
      if ((st = ctx_->backend->rope(r, nullptr))) return st;
    }
    for (int64_t kh = 0; kh < Hkv; ++kh) {
      AttentionArgs a;
      a.info.name = "llama.attention";
      a.d.batch = 1, a.d.heads = G, a.d.kv_heads = 1;
      a.d.seq_q = n, a.d.seq_kv = P + n, a.d.head_dim = D;
      a.d.dtype = TC_DTYPE_F32, a.d.accum = TC_DTYPE_F32;
      a.d.softmax_scale = 1.0 / std::sqrt(double(D));
      a.d.causal = 1, a.d.return_lse = 0, a.d.window_size = 0;
      a.q = qt + kh * G * n * D;
      a.k = kc + kh * C * D;
      a.v = vc + kh * C * D;
      a.o = ot + kh * G * n * D;
      if ((st = ctx_->backend->attention_forward(a, nullptr))) return st;
    }
    for (int64_t i = 0; i < n; ++i)
      for (int64_t hh = 0; hh < H; ++hh)
        std::memcpy(o + i * Dq + hh * D, ot + (hh * n + i) * D, size_t(D) * sizeof(float));
    if ((st = gemv(L.wo, o, tmp, n))) return st;
    for (int64_t j = 0; j < n * E; ++j) x[j] += tmp[j];

    if ((st = rmsnorm(x, L.ffn_norm.data(), h, n)) || (st = gemv(L.w_gate, h, gate, n)) ||
        (st = gemv(L.w_up, h, up, n)))
      return st;
    SwigluForwardArgs s;
    s.info.name = "llama.swiglu";
    s.n = n * F;
    s.dtype = TC_DTYPE_F32;
    s.gate = gate, s.up = up, s.out = gate;
    if ((st = ctx_->backend->swiglu_forward(s, nullptr)) || (st = gemv(L.w_down, gate, tmp, n))) return st;
    for (int64_t j = 0; j < n * E; ++j) x[j] += tmp[j];
  }
  if (logits) {
    // Only the rows whose logits are wanted go through the output matrix.
    const int64_t first = all ? 0 : n - 1, rows = n - first;
    if (tc_status st = rmsnorm(x + first * E, output_norm_.data(), h, rows)) return st;
    if (tc_status st = gemv(output_, h, logits, rows)) return st;
  }
  n_past_ += n;
  return TC_OK;
}

}  // namespace model
}  // namespace tc
