// Loading a LLaMA-family GGUF model: the configuration from the metadata
// (gguf/llama_config.cpp), then every tensor the forward reads, checked for
// presence, a format the quantized GEMV computes with, and its shape:
//
//   token_embd.weight   [n_vocab rows of n_embd]      output.weight (optional: tied)
//   output_norm.weight  [n_embd]
//   blk.i.attn_norm / ffn_norm            [n_embd]
//   blk.i.attn_q  [n_head*D rows of n_embd]   attn_k, attn_v [n_head_kv*D rows of n_embd]
//   blk.i.attn_output [n_embd rows of n_head*D]
//   blk.i.ffn_gate, ffn_up [n_ff rows of n_embd]  ffn_down [n_embd rows of n_ff]
//
// (GGUF lists dims[0] = row length first.) RoPE tables for the cache's
// positions: theta(p, k) = p * freq_scale * freq_base^(-2k / D), k < D/2.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/objects.h"
#include "gguf/llama_config.h"
#include "model/llama.h"
#include "quant/formats.h"
#include "tensorcore/buffer.h"

namespace tc {
namespace model {
namespace {

const char* kArchs[] = {"llama", "mistral"};

}  // namespace

Llama::~Llama() {
  // Freeing through the C API records success; a failed load must keep its
  // own status and detail.
  const tc_status st = last_status();
  const std::string detail = last_detail();
  if (kv_) tc_buffer_free(kv_);
  if (st != TC_OK) fail_with(st, detail);
}

tc_status Llama::load(tc_context_s* ctx, const char* path, int64_t n_ctx, std::unique_ptr<Llama>* out) {
  if (!ctx->backend->host_accessible())
    return fail(TC_ERR_UNSUPPORTED,
                "tc_llama_load: the context's device backend has no LLaMA decode kernels in this build (CPU only)");
  std::unique_ptr<Llama> m(new Llama());
  m->ctx_ = ctx;
  if (tc_status st = gguf::File::open(path, &m->file_)) return st;
  tc_gguf_llama_config c;
  if (tc_status st = gguf::llama_config(*m->file_, &c)) return st;
  bool known = false;
  for (const char* a : kArchs) known |= std::strcmp(a, c.architecture) == 0;
  if (!known) return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: architecture '%s' is not a LLaMA model", c.architecture);
  tc_llama_config& g = m->cfg_;
  g.n_vocab = c.vocab_size;
  g.n_ctx_train = c.context_length;
  g.n_embd = c.embedding_length;
  g.n_layer = c.block_count;
  g.n_head = c.attention_head_count;
  g.n_head_kv = c.attention_head_count_kv;
  g.head_dim = c.embedding_length / c.attention_head_count;
  g.n_ff = c.feed_forward_length;
  g.rms_norm_eps = c.rms_norm_epsilon;
  g.rope_freq_base = c.rope_freq_base;
  g.rope_freq_scale = c.rope_freq_scale;
  g.bos_id = g.eos_id = -1;
  if (g.n_embd % g.n_head || g.head_dim % 2 || g.n_head % g.n_head_kv)
    return fail(TC_ERR_UNSUPPORTED,
                "tc_llama_load: n_embd %lld, n_head %lld, n_head_kv %lld: need n_embd = n_head * even head_dim and "
                "n_head a multiple of n_head_kv",
                (long long)g.n_embd, (long long)g.n_head, (long long)g.n_head_kv);
  if (c.rope_dimension_count != g.head_dim)
    return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: partial RoPE (rope.dimension_count %lld, head_dim %lld)",
                (long long)c.rope_dimension_count, (long long)g.head_dim);
  if (!(g.rms_norm_eps >= 0) || !std::isfinite(g.rms_norm_eps) || !(g.rope_freq_base > 0) ||
      !std::isfinite(g.rope_freq_base) || !(g.rope_freq_scale > 0) || !std::isfinite(g.rope_freq_scale))
    return fail(TC_ERR_CORRUPT, "tc_llama_load: rms epsilon %g, rope freq_base %g, freq_scale %g out of range",
                g.rms_norm_eps, g.rope_freq_base, g.rope_freq_scale);
  if (tc_status st = m->check_and_bind(path)) return st;

  g.n_ctx = n_ctx > 0 ? n_ctx : (g.n_ctx_train > 0 ? std::min<int64_t>(g.n_ctx_train, 2048) : 2048);
  const int64_t D = g.head_dim, half = D / 2;
  // Cache: 2 * n_layer * n_head_kv * n_ctx * D floats.
  const double cache_floats = 2.0 * double(g.n_layer) * double(g.n_head_kv) * double(g.n_ctx) * double(D);
  if (cache_floats * 4 > double(INT64_MAX / 2))
    return fail(TC_ERR_INVALID_SHAPE, "tc_llama_load: a KV cache of n_ctx %lld does not fit", (long long)g.n_ctx);
  const size_t cache_bytes = size_t(cache_floats) * sizeof(float);
  if (tc_status st = tc_buffer_alloc(ctx, cache_bytes, &m->kv_)) return st;
  m->k_cache_ = reinterpret_cast<float*>(m->kv_->bytes());
  m->v_cache_ = m->k_cache_ + size_t(cache_floats / 2);

  m->cos_.resize(size_t(g.n_ctx * half));
  m->sin_.resize(size_t(g.n_ctx * half));
  for (int64_t p = 0; p < g.n_ctx; ++p)
    for (int64_t k = 0; k < half; ++k) {
      const double theta = double(p) * g.rope_freq_scale * std::pow(g.rope_freq_base, -2.0 * double(k) / double(D));
      m->cos_[size_t(p * half + k)] = float(std::cos(theta));
      m->sin_[size_t(p * half + k)] = float(std::sin(theta));
    }

  const gguf::File& f = *m->file_;
  auto id = [&](const char* key, int32_t* out) {
    const gguf::KeyValue* kv = f.find_kv(key);
    int64_t v;
    if (kv && f.scalar_i64(kv->value.type, kv->value.pos, &v) && v >= 0 && v < g.n_vocab) *out = int32_t(v);
  };
  id("tokenizer.ggml.bos_token_id", &g.bos_id);
  id("tokenizer.ggml.eos_token_id", &g.eos_id);
  *out = std::move(m);
  return TC_OK;
}

// Finds every tensor, checks it, and points the matrices into the mapping.
tc_status Llama::check_and_bind(const char* path) {
  const gguf::File& f = *file_;
  tc_llama_config& g = cfg_;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t k, bool optional, Matrix* out) -> tc_status {
    const gguf::TensorInfo* t = f.find_tensor(name);
    if (!t) {
      if (optional) return TC_OK;
      return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: %s has no tensor '%s'", path, name.c_str());
    }
    const quant::FormatInfo* fi = quant::format_info(t->format);
    if (!fi)
      return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: tensor '%s' has GGML type %d, which has no kernel here",
                  name.c_str(), t->type);
    const bool vec = rows == 0;
    const bool shape_ok = vec ? (t->n_dims == 1 && t->dims[0] == k)
                              : (t->n_dims == 2 && t->dims[0] == k && t->dims[1] == rows);
    if (!shape_ok)
      return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: tensor '%s' has shape [%lld, %lld] (n_dims %d), expected [%lld, %lld]",
                  name.c_str(), (long long)t->dims[0], (long long)(t->n_dims > 1 ? t->dims[1] : 1), t->n_dims,
                  (long long)k, (long long)(vec ? 1 : rows));
    out->data = f.tensor_data(*t);
    out->fmt = t->format;
    out->N = vec ? 1 : rows;
    out->K = k;
    out->row_bytes = uint64_t(k / fi->block_elems) * uint64_t(fi->block_bytes);
    return TC_OK;
  };
  auto vector = [&](const std::string& name, std::vector<float>* out) -> tc_status {
    Matrix v;
    if (tc_status st = matrix(name, 0, g.n_embd, false, &v)) return st;
    out->resize(size_t(g.n_embd));
    quant::dequantize_row(v.fmt, v.data, out->data(), g.n_embd);
    return TC_OK;
  };
  if (g.n_vocab <= 0 || g.n_vocab > INT32_MAX)
    return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: vocabulary size %lld", (long long)g.n_vocab);
  if (tc_status st = matrix("token_embd.weight", g.n_vocab, g.n_embd, false, &tok_embd_)) return st;
  if (tc_status st = matrix("output.weight", g.n_vocab, g.n_embd, true, &output_)) return st;
  g.tied_embeddings = output_.data == nullptr;
  if (g.tied_embeddings) output_ = tok_embd_;
  if (tc_status st = vector("output_norm.weight", &output_norm_)) return st;
  // The feed-forward width from the first layer's gate (the metadata may be
  // absent or a per-layer array).
  if (const gguf::TensorInfo* t = f.find_tensor("blk.0.ffn_gate.weight"); t && t->n_dims == 2) g.n_ff = t->dims[1];
  if (g.n_ff <= 0) return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: no feed-forward length");
  const int64_t E = g.n_embd, Dq = g.n_head * g.head_dim, Dkv = g.n_head_kv * g.head_dim, F = g.n_ff;
  layers_.resize(size_t(g.n_layer));
  for (int64_t i = 0; i < g.n_layer; ++i) {
    LlamaLayer& L = layers_[size_t(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    tc_status st;
    if ((st = vector(p + "attn_norm.weight", &L.attn_norm)) || (st = vector(p + "ffn_norm.weight", &L.ffn_norm)) ||
        (st = matrix(p + "attn_q.weight", Dq, E, false, &L.wq)) ||
        (st = matrix(p + "attn_k.weight", Dkv, E, false, &L.wk)) ||
        (st = matrix(p + "attn_v.weight", Dkv, E, false, &L.wv)) ||
        (st = matrix(p + "attn_output.weight", E, Dq, false, &L.wo)) ||
        (st = matrix(p + "ffn_gate.weight", F, E, false, &L.w_gate)) ||
        (st = matrix(p + "ffn_up.weight", F, E, false, &L.w_up)) ||
        (st = matrix(p + "ffn_down.weight", E, F, false, &L.w_down)))
      return st;
  }
  g.weight_type = layers_[0].wq.fmt;
  return TC_OK;
}

}  // namespace model
}  // namespace tc
