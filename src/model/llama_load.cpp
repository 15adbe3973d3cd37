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
// (GGUF lists dims[0] = row length first.) D is <arch>.attention.key_length
// where the file has it (Gemma, Qwen3: n_head * D need not be n_embd), else
// n_embd / n_head. What each architecture adds (Arch), as llama.cpp reads it:
//
//   llama, mistral  the above; RoPE on interleaved pairs
//   qwen2           NEOX RoPE; attn_q/k/v.bias [n_head*D], [n_head_kv*D]
//   qwen3           NEOX RoPE; attn_q_norm, attn_k_norm [D] on every head
//   gemma2          NEOX RoPE; embeddings * sqrt(n_embd); GEGLU; post_attention_norm
//                   and post_ffw_norm [n_embd] on the branch outputs; scores and
//                   logits soft-capped (attn_logit_softcapping, default 50;
//                   final_logit_softcapping, default 30); even layers attend a
//                   sliding window (attention.sliding_window, default 4096);
//                   output tied to token_embd
//   gemma3          as gemma2 with attn_q_norm / attn_k_norm, no score capping,
//                   final capping only where the file sets it; five of every
//                   six layers windowed (when the file sets a window), with
//                   their own RoPE base (rope.freq_base_swa, default 10000)
//
// The pattern of windowed layers may also come from the file
// (attention.sliding_window_pattern: a period, or one bool per layer). The
// softmax scale is 1/sqrt(D), except for the 27B Gemmas (1/sqrt(n_embd /
// n_head), the models' query_pre_attn_scalar). Norm weights are used as
// stored: the GGUF converter has already folded Gemma's (1 + w).
//
// RoPE tables for the cache's positions: theta(p, k) = p * freq_scale *
// freq_base^(-2k / D), k < D/2; a second table with the sliding-window
// layers' base where it differs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/config.h"
#include "core/dtypes.h"
#include "core/error.h"
#include "core/objects.h"
#include "gguf/llama_config.h"
#include "model/llama.h"
#include "quant/formats.h"
#include "tensorcore/attention.h"

namespace tc {
namespace model {
namespace {

const char* kArchs[] = {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"};

// Metadata readers for the keys llama_config does not cover: absent keys
// keep *out; a key of the wrong type fails naming it.
struct Meta {
  const gguf::File& f;
  std::string prefix;  // "<arch>."

  tc_status num(const char* key, double* out, bool* found = nullptr) const {
    if (found) *found = false;
    const gguf::KeyValue* kv = f.find_kv(prefix + key);
    if (!kv) return TC_OK;
    if (!gguf::value_size(kv->value.type) || kv->value.type == gguf::kString ||
        !f.scalar_f64(kv->value.type, kv->value.pos, out) || !std::isfinite(*out))
      return fail(TC_ERR_CORRUPT, "tc_llama_load: metadata '%s%s' is not a finite number", prefix.c_str(), key);
    if (found) *found = true;
    return TC_OK;
  }
  tc_status count(const char* key, int64_t* out, bool* found = nullptr) const {
    double v = 0;
    bool have = false;
    if (tc_status st = num(key, &v, &have)) return st;
    if (found) *found = have;
    if (!have) return TC_OK;
    if (v < 0 || v > double(INT32_MAX) || v != std::floor(v))
      return fail(TC_ERR_CORRUPT, "tc_llama_load: metadata '%s%s' = %g is not a count", prefix.c_str(), key, v);
    *out = int64_t(v);
    return TC_OK;
  }
  // The sliding-window layers: a period n (layer i windowed when i % n < n - 1,
  // llama.cpp's rule), or a bool per layer; default_period when absent.
  tc_status swa_layers(int64_t n_layer, int64_t default_period, std::vector<uint8_t>* out) const {
    out->assign(size_t(n_layer), 0);
    const std::string key = prefix + "attention.sliding_window_pattern";
    int64_t period = default_period;
    if (const gguf::KeyValue* kv = f.find_kv(key)) {
      const gguf::Value& v = kv->value;
      if (v.type == gguf::kArray) {
        const int sz = gguf::value_size(v.elem_type);
        if (!sz || v.elem_type == gguf::kF32 || v.elem_type == gguf::kF64 || int64_t(v.count) != n_layer)
          return fail(TC_ERR_CORRUPT, "tc_llama_load: metadata '%s' is not one flag per layer (%lld)", key.c_str(),
                      (long long)n_layer);
        for (int64_t i = 0; i < n_layer; ++i) {
          int64_t e = 0;
          if (!f.scalar_i64(v.elem_type, v.pos + uint64_t(i) * uint64_t(sz), &e))
            return fail(TC_ERR_CORRUPT, "tc_llama_load: metadata '%s' has a bad entry", key.c_str());
          (*out)[size_t(i)] = e != 0;
        }
        return TC_OK;
      }
      if (tc_status st = count("attention.sliding_window_pattern", &period)) return st;
    }
    for (int64_t i = 0; i < n_layer; ++i) (*out)[size_t(i)] = period == 0 || i % period < period - 1;
    return TC_OK;
  }
};

}  // namespace

// The architecture's choices (see the top of this file).
tc_status Llama::read_arch(const char* name) {
  const gguf::File& f = *file_;
  tc_llama_config& g = cfg_;
  Arch& a = arch_;
  const std::string n(name);
  const Meta m{f, n + "."};
  const bool gemma = n == "gemma2" || n == "gemma3";
  a.neox_rope = n == "qwen2" || n == "qwen3" || gemma;
  a.qkv_bias = n == "qwen2";
  a.qk_norm = n == "qwen3" || n == "gemma3";
  a.post_norms = a.gelu = gemma;
  a.embed_scale = gemma ? float(std::sqrt(double(g.n_embd))) : 1.0f;
  a.rope_base_swa = g.rope_freq_base;
  a.rope_scale_swa = g.rope_freq_scale;
  double attn_cap = 0, final_cap = 0;
  if (n == "gemma2") attn_cap = 50.0, final_cap = 30.0, a.window = 4096;
  if (n == "gemma3") a.rope_base_swa = 10000.0, a.rope_scale_swa = 1.0;
  if (gemma) {
    // The file's window where it has one (0: no windowed layers).
    if (tc_status st = m.count("attention.sliding_window", &a.window)) return st;
    if (tc_status st = m.num("attn_logit_softcapping", &attn_cap)) return st;
    if (tc_status st = m.num("final_logit_softcapping", &final_cap)) return st;
    if (tc_status st = m.num("rope.freq_base_swa", &a.rope_base_swa)) return st;
    if (a.window > 0) {
      if (tc_status st = m.swa_layers(g.n_layer, n == "gemma2" ? 2 : 6, &a.swa)) return st;
    }
    if (attn_cap < 0 || final_cap < 0 || !(a.rope_base_swa > 0))
      return fail(TC_ERR_CORRUPT, "tc_llama_load: soft-capping %g / %g or rope.freq_base_swa %g out of range",
                  attn_cap, final_cap, a.rope_base_swa);
  }
  a.swa.resize(size_t(g.n_layer), 0);
  if (n == "gemma3") attn_cap = 0;  // gemma3 has no score capping (its files may still carry the key)
  a.attn_softcap = float(attn_cap), a.final_softcap = float(final_cap);

  // Head size: attention.key_length where present (and value_length equal).
  int64_t key_len = 0, value_len = 0, rope_dims = 0;
  bool has_key = false, has_value = false, has_rope = false;
  if (tc_status st = m.count("attention.key_length", &key_len, &has_key)) return st;
  if (tc_status st = m.count("attention.value_length", &value_len, &has_value)) return st;
  if (tc_status st = m.count("rope.dimension_count", &rope_dims, &has_rope)) return st;
  if (has_key && has_value && key_len != value_len)
    return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: %sattention.key_length %lld and value_length %lld differ",
                m.prefix.c_str(), (long long)key_len, (long long)value_len);
  if (!has_key && g.n_embd % g.n_head)
    return fail(TC_ERR_UNSUPPORTED,
                "tc_llama_load: n_embd %lld is not a multiple of n_head %lld and the file has no %sattention.key_length",
                (long long)g.n_embd, (long long)g.n_head, m.prefix.c_str());
  g.head_dim = has_key ? key_len : g.n_embd / g.n_head;
  if (g.head_dim <= 0 || g.head_dim % 2 || g.head_dim > TC_ATTENTION_MAX_HEAD_DIM || g.n_head % g.n_head_kv)
    return fail(TC_ERR_UNSUPPORTED,
                "tc_llama_load: head_dim %lld (%sattention.key_length or n_embd / n_head), n_head %lld, n_head_kv %lld: "
                "need an even head_dim <= %d and n_head a multiple of n_head_kv",
                (long long)g.head_dim, m.prefix.c_str(), (long long)g.n_head, (long long)g.n_head_kv,
                TC_ATTENTION_MAX_HEAD_DIM);
  if (has_rope && rope_dims != g.head_dim)
    return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: partial RoPE (%srope.dimension_count %lld, head_dim %lld)",
                m.prefix.c_str(), (long long)rope_dims, (long long)g.head_dim);
  const bool big_gemma = (n == "gemma2" && g.n_layer == 46) || (n == "gemma3" && g.n_layer == 62);
  a.attn_scale = 1.0 / std::sqrt(double(big_gemma ? g.n_embd / g.n_head : g.head_dim));
  return TC_OK;
}

Llama::~Llama() {
  // A failed load must keep its own status and detail, whatever freeing records.
  const tc_status st = last_status();
  const std::string detail = last_detail();
  drop_graphs();
  queue_.reset();  // waits for the queue's work
  for (tc_buffer_s* b : buffers_) delete_buffer(b);
  if (params_pinned_) be_->release_host(params_host_);
  if (st != TC_OK) fail_with(st, detail);
}

tc_status Llama::load(tc_context_s* ctx, const char* path, int64_t n_ctx, std::unique_ptr<Llama>* out) {
  std::unique_ptr<Llama> m(new Llama());
  m->ctx_ = ctx;
  m->be_ = ctx->backend.get();
  // TC_LLAMA_DEVICE_PATH=1 runs a host backend the way a device runs: weights
  // copied, every step on a queue, products of many rows through GEMM, so
  // the tests exercise that path where no GPU is present.
  m->host_ = m->be_->host_accessible() && !config::on(config::Key::kLlamaDevicePath);
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
  g.n_ff = c.feed_forward_length;
  g.rms_norm_eps = c.rms_norm_epsilon;
  g.rope_freq_base = c.rope_freq_base;
  g.rope_freq_scale = c.rope_freq_scale;
  g.bos_id = g.eos_id = -1;
  // Every layer has at least 9 tensors: a block_count beyond that is corrupt
  // metadata, refused before anything is sized from it.
  if (g.n_layer > int64_t(m->file_->tensors().size() / 9))
    return fail(TC_ERR_CORRUPT, "tc_llama_load: %s.block_count %lld, but the file has %zu tensors", c.architecture,
                (long long)g.n_layer, m->file_->tensors().size());
  if (tc_status st = m->read_arch(c.architecture)) return st;
  if (!(g.rms_norm_eps >= 0) || !std::isfinite(g.rms_norm_eps) || !(g.rope_freq_base > 0) ||
      !std::isfinite(g.rope_freq_base) || !(g.rope_freq_scale > 0) || !std::isfinite(g.rope_freq_scale))
    return fail(TC_ERR_CORRUPT, "tc_llama_load: rms epsilon %g, rope freq_base %g, freq_scale %g out of range",
                g.rms_norm_eps, g.rope_freq_base, g.rope_freq_scale);
  if (tc_status st = m->check_and_bind(path)) return st;

  g.n_ctx = n_ctx > 0 ? n_ctx : (g.n_ctx_train > 0 ? std::min<int64_t>(g.n_ctx_train, 2048) : 2048);
  const int64_t D = g.head_dim, half = D / 2;
  // Table 1 (the sliding-window layers' base and scale) only where some
  // layer uses it.
  const Arch& a = m->arch_;
  const bool second = a.rope_base_swa != g.rope_freq_base || a.rope_scale_swa != g.rope_freq_scale;
  bool any_swa = false;
  for (LlamaLayer& L : m->layers_) {
    L.rope = second && a.swa[size_t(&L - m->layers_.data())] ? 1 : 0;
    any_swa |= L.rope == 1;
  }
  m->host_rope_.resize(size_t((any_swa ? 4 : 2) * g.n_ctx * half));
  for (int t = 0; t < (any_swa ? 2 : 1); ++t) {
    const double base = t ? a.rope_base_swa : g.rope_freq_base, scale = t ? a.rope_scale_swa : g.rope_freq_scale;
    float* cos_t = m->host_rope_.data() + 2 * t * g.n_ctx * half;
    float* sin_t = cos_t + g.n_ctx * half;
    for (int64_t p = 0; p < g.n_ctx; ++p)
      for (int64_t k = 0; k < half; ++k) {
        const double theta = double(p) * scale * std::pow(base, -2.0 * double(k) / double(D));
        cos_t[p * half + k] = float(std::cos(theta));
        sin_t[p * half + k] = float(std::sin(theta));
      }
  }
  if (tc_status st = m->place_weights()) return st;
  if (tc_status st = m->alloc_state()) return st;

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
    if (!fi) {
      const quant::GgmlTypeInfo* ti = quant::ggml_type_info(t->type);
      return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: tensor '%s' has type %s (GGML type %d), which tensorcore does "
                  "not compute with", name.c_str(), ti ? ti->name : "unknown", t->type);
    }
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
  // Norms and biases widened to f32 into the vector pool; *at is the offset
  // (left -1 for an optional vector the file lacks).
  host_vecs_.clear();
  auto vector = [&](const std::string& name, int64_t n, bool optional, int64_t* at) -> tc_status {
    Matrix v;
    if (tc_status st = matrix(name, 0, n, optional, &v)) return st;
    if (!v.data) return TC_OK;
    *at = int64_t(host_vecs_.size());
    host_vecs_.resize(host_vecs_.size() + size_t(n));
    quant::dequantize_row(v.fmt, v.data, host_vecs_.data() + *at, n);
    return TC_OK;
  };
  if (g.n_vocab <= 0 || g.n_vocab > INT32_MAX)
    return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: vocabulary size %lld", (long long)g.n_vocab);
  if (tc_status st = matrix("token_embd.weight", g.n_vocab, g.n_embd, false, &tok_embd_)) return st;
  if (tc_status st = matrix("output.weight", g.n_vocab, g.n_embd, true, &output_)) return st;
  g.tied_embeddings = output_.data == nullptr;
  if (g.tied_embeddings) output_ = tok_embd_;
  if (tc_status st = vector("output_norm.weight", g.n_embd, false, &output_norm_)) return st;
  // The feed-forward width from the first layer's gate (the metadata may be
  // absent or a per-layer array).
  if (const gguf::TensorInfo* t = f.find_tensor("blk.0.ffn_gate.weight"); t && t->n_dims == 2) g.n_ff = t->dims[1];
  if (g.n_ff <= 0) return fail(TC_ERR_UNSUPPORTED, "tc_llama_load: no feed-forward length");
  const int64_t E = g.n_embd, Dq = g.n_head * g.head_dim, Dkv = g.n_head_kv * g.head_dim, F = g.n_ff;
  layers_.resize(size_t(g.n_layer));
  const Arch& a = arch_;
  const int64_t D = g.head_dim;
  for (int64_t i = 0; i < g.n_layer; ++i) {
    LlamaLayer& L = layers_[size_t(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    tc_status st;
    if ((st = vector(p + "attn_norm.weight", E, false, &L.attn_norm)) ||
        (st = vector(p + "ffn_norm.weight", E, false, &L.ffn_norm)) ||
        (a.post_norms && (st = vector(p + "post_attention_norm.weight", E, false, &L.post_attn_norm))) ||
        (a.post_norms && (st = vector(p + "post_ffw_norm.weight", E, false, &L.post_ffn_norm))) ||
        (a.qk_norm && (st = vector(p + "attn_q_norm.weight", D, false, &L.q_norm))) ||
        (a.qk_norm && (st = vector(p + "attn_k_norm.weight", D, false, &L.k_norm))) ||
        (st = vector(p + "attn_q.bias", Dq, !a.qkv_bias, &L.bq)) ||
        (st = vector(p + "attn_k.bias", Dkv, !a.qkv_bias, &L.bk)) ||
        (st = vector(p + "attn_v.bias", Dkv, !a.qkv_bias, &L.bv)) ||
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

namespace {
constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

tc_status Llama::alloc(size_t bytes, void** out) {
  tc_buffer_s* b = nullptr;
  if (tc_status st = allocate_buffer(ctx_, std::max<size_t>(bytes, 1), nullptr, &b))
    return fail_with(st, "llama: " + last_detail());
  buffers_.push_back(b);
  *out = b->bytes();
  return TC_OK;
}

// On the host the matrices stay in the mapping and the norms and RoPE tables
// in their vectors. On a device everything is copied once into one buffer,
// in the file's formats: each matrix, the norms, the tables, 256-byte aligned.
tc_status Llama::place_weights() {
  const tc_llama_config& g = cfg_;
  const size_t rope_half = size_t(g.n_ctx * (g.head_dim / 2));
  // Table t is cos then sin at 2 t rope_half; a single table serves both slots.
  auto bind_rope = [&](const float* base) {
    const bool two = host_rope_.size() > 2 * rope_half;
    for (int t = 0; t < 2; ++t) {
      cos_[t] = base + (two ? 2 * t * rope_half : 0);
      sin_[t] = cos_[t] + rope_half;
    }
  };
  if (host_) {
    vecs_ = host_vecs_.data();
    bind_rope(host_rope_.data());
    return TC_OK;
  }
  // Groups stored back to back: a layer's [Wq; Wk; Wv] and [Wgate; Wup]
  // become one matrix each where the formats agree (LlamaLayer).
  std::vector<std::vector<Matrix*>> groups{{&tok_embd_}};
  if (!g.tied_embeddings) groups.push_back({&output_});
  for (LlamaLayer& L : layers_) {
    groups.push_back({&L.wq, &L.wk, &L.wv});
    groups.push_back({&L.wo});
    groups.push_back({&L.w_gate, &L.w_up});
    groups.push_back({&L.w_down});
  }
  std::vector<Matrix*> mats;
  std::vector<size_t> at;
  size_t total = 0;
  for (const auto& grp : groups) {
    for (Matrix* m : grp) {
      mats.push_back(m);
      at.push_back(total);
      total += size_t(m->bytes());
    }
    total = aligned(total);
  }
  const size_t vecs_at = total;
  total += aligned(host_vecs_.size() * sizeof(float));
  const size_t rope_at = total;
  total += aligned(host_rope_.size() * sizeof(float));
  void* base_v = nullptr;
  if (tc_status st = alloc(total, &base_v)) return st;
  uint8_t* base = static_cast<uint8_t*>(base_v);
  for (size_t i = 0; i < mats.size(); ++i) {
    if (tc_status st = be_->copy_in(base + at[i], mats[i]->data, size_t(mats[i]->bytes()))) return st;
    mats[i]->data = base + at[i];
  }
  if (g.tied_embeddings) output_ = tok_embd_;
  auto fuse = [](std::initializer_list<const Matrix*> parts, Matrix* out) {
    const Matrix& first = **parts.begin();
    *out = first;
    out->N = 0;
    for (const Matrix* m : parts) {
      if (m->fmt != first.fmt || m->K != first.K) {
        *out = Matrix();
        return;
      }
      out->N += m->N;
    }
  };
  for (LlamaLayer& L : layers_) {
    fuse({&L.wq, &L.wk, &L.wv}, &L.wqkv);
    fuse({&L.w_gate, &L.w_up}, &L.w_gate_up);
  }
  if (tc_status st = be_->copy_in(base + vecs_at, host_vecs_.data(), host_vecs_.size() * sizeof(float))) return st;
  if (tc_status st = be_->copy_in(base + rope_at, host_rope_.data(), host_rope_.size() * sizeof(float))) return st;
  vecs_ = reinterpret_cast<const float*>(base + vecs_at);
  bind_rope(reinterpret_cast<const float*>(base + rope_at));
  return TC_OK;
}

// The one-token step's 8-bit products (q8_decode) read Q4_0, Q8_0 and Q6_K
// matrices in the split layout (GemvQ8Args), where every block's quants are
// 16-byte aligned: a GPU reads them with whole 16-byte loads instead of
// staging GGUF's 18-, 34- or 210-byte blocks. A second copy of those
// matrices (about their size again), made once on the device from the
// first, which the prefill's products and f32 activations keep reading.
// Q4_K and Q5_K blocks are aligned already and are read in place. A Q5_0
// matrix's copy is Q8_0's split layout (its codes minus 16, exact: 34 bytes
// a block against 22), which the Q8_0 products read.
// TC_LLAMA_SPLIT=0 (read once) keeps one copy (Q6_K and Q5_0 then have no
// 8-bit product).
tc_status Llama::split_weights() {
  static const bool off = !config::on(config::Key::kLlamaSplit);
  if (off || split_made_) return TC_OK;  // off, or made already
  std::vector<Matrix*> mats;
  for (Matrix* m : q8_matrices())
    if (quant::q8_split_format(m->fmt)) mats.push_back(m);
  // A matrix's quants, then its scales, each 256-byte aligned.
  auto blocks = [](const Matrix* m) { return size_t(m->N) * size_t(m->K / quant::q8_block_elems(m->fmt)); };
  auto qs_bytes = [&](const Matrix* m) { return aligned(blocks(m) * size_t(quant::split_quant_bytes(m->fmt))); };
  auto d_bytes = [&](const Matrix* m) { return aligned(blocks(m) * sizeof(uint16_t)); };
  size_t total = 0;
  for (const Matrix* m : mats) total += qs_bytes(m) + d_bytes(m);
  if (total == 0) return TC_OK;
  void* base_v = nullptr;
  if (tc_status st = alloc(total, &base_v))
    return fail_with(st, "tc_llama_set_activations: the f16 decode's second copy of the weights (" +
                             std::to_string(total >> 20) + " MiB; TC_LLAMA_SPLIT=0 does without): " + last_detail());
  // On a failure the products keep reading the first copy.
  auto undo = [&](tc_status st) {
    for (Matrix* m : mats) m->split_qs = nullptr, m->split_d = nullptr;
    return st;
  };
  uint8_t* at = static_cast<uint8_t*>(base_v);
  for (Matrix* m : mats) {
    RepackQ8Args r;
    r.info.name = "llama.repack_q8";
    r.fmt = m->fmt;
    r.N = m->N, r.K = m->K;
    r.w = m->data;
    r.qs = at;
    r.d = reinterpret_cast<uint16_t*>(at + qs_bytes(m));
    at += qs_bytes(m) + d_bytes(m);
    if (tc_status st = be_->repack_q8(r, queue_.get())) return undo(finish(st));
    m->split_qs = static_cast<const uint8_t*>(r.qs);
    m->split_d = r.d;
  }
  std::string detail;
  if (tc_status st = queue_->sync(&detail)) return undo(fail_with(st, "tc_llama_set_activations: " + detail));
  split_made_ = true;
  return TC_OK;
}

// On a host backend whose 8-bit products read rows interleaved by eight
// (AVX512-VNNI: one 256-bit integer dot product serves eight rows), a copy
// of every matrix of such a format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
// Q5_K, Q6_K) in that layout, made once: about as many bytes again as those
// matrices (Q4_K's copy 148 / 144 of GGUF's bytes, Q5_K's 180 / 176; the
// mapped file stays, for the products of more rows and the token
// embedding). TC_LLAMA_ROWS8=0 keeps to the mapped file.
tc_status Llama::rows8_weights() {
  static const bool off = !config::on(config::Key::kLlamaRows8);
  if (rows8_made_ || !host_ || off) return TC_OK;
  std::vector<Matrix*> mats;
  for (Matrix* m : q8_matrices())
    if (m->data && be_->reads_rows8(m->fmt, act_) && m->N % 8 == 0 && m->K % 32 == 0) mats.push_back(m);
  size_t total = 0;
  for (const Matrix* m : mats) total += aligned(size_t(quant::rows8_bytes(m->fmt, m->N, m->K)));
  if (total == 0) return TC_OK;
  void* base_v = nullptr;
  if (tc_status st = alloc(total, &base_v))
    return fail_with(st, "tc_llama_set_activations: the interleaved copy of the weights (" +
                             std::to_string(total >> 20) + " MiB; TC_LLAMA_ROWS8=0 does without): " + last_detail());
  uint8_t* at = static_cast<uint8_t*>(base_v);
  for (Matrix* m : mats) {
    be_->make_rows8(m->fmt, m->data, m->N, m->K, at);
    m->rows8 = at;
    at += aligned(size_t(quant::rows8_bytes(m->fmt, m->N, m->K)));
  }
  rows8_made_ = true;
  return TC_OK;
}

// The KV cache, then one scratch buffer for a chunk of up to max_batch_
// tokens (B), carved into (floats):
//   x, h, tmp [B, E]; q, qt, o, ot [B, H*D]; k, v [B, Hkv*D]; gate, up [B, F];
//   logits [B, n_vocab] (device only: a host backend writes the caller's
//   array), kpack, vpack [Hkv, n_ctx, D] (the packed or widened prefix
//   attention reads; a host backend attends on an f32 cache in place);
//   qkv [R, H*D + 2 Hkv*D]; gu [R, 2F] (R = min(B, kQ8MaxRows));
// then f16 copies of a product's input and output, and the parameter block
// [position, n, B token ids, B positions, B slots] (int32).
// The KV cache of element type t for `slots` sequences: 2 * n_layer * slots
// * n_head_kv * n_ctx * D elements, keys then values, then the decode
// attention's partial results for a batch step of `slots` rows
// [slots, H, decode_attention_splits(n_ctx), D + 2] (f32) and its arrival
// counters [slots, H] (uint32, zeroed here, left zero by every call). A new cache
// replaces the old one only once it is allocated (a failure keeps the model
// as it was).
tc_status Llama::alloc_kv_cache(tc_dtype t, int64_t slots) {
  const tc_llama_config& g = cfg_;
  // Bytes per element: 4, 2, or 34 / 32 for Q8_0 (head_dim a multiple of 32,
  // checked by the caller, so every row is whole blocks).
  const double esize = double(dtype_bytes(t, dtype_block(t))) / double(dtype_block(t));
  const double elems = 2.0 * double(g.n_layer) * double(slots) * double(slot_elems());
  const double partial = double(slots) * double(g.n_head) * double(decode_attention_splits(g.n_ctx)) *
                         double(g.head_dim + 2);
  if (elems * esize + partial * 4.0 > double(INT64_MAX / 2))
    return fail(TC_ERR_INVALID_SHAPE, "llama: a KV cache of n_ctx %lld for %lld sequences does not fit",
                (long long)g.n_ctx, (long long)slots);
  void* kv = nullptr;
  const size_t cache_bytes = aligned(dtype_bytes(t, int64_t(elems)));
  const size_t arrivals = size_t(slots * g.n_head);
  if (tc_status st = alloc(cache_bytes + size_t(partial) * 4 + arrivals * 4, &kv)) return st;
  tc_buffer_s* fresh = buffers_.back();
  uint32_t* counts = reinterpret_cast<uint32_t*>(static_cast<char*>(kv) + cache_bytes + size_t(partial) * 4);
  const std::vector<uint32_t> zeros(arrivals, 0u);
  if (tc_status st = be_->copy_in(counts, zeros.data(), arrivals * 4)) {
    buffers_.pop_back();
    delete_buffer(fresh);
    return st;
  }
  if (kv_buffer_) {
    if (queue_) {  // the old cache may still be read by enqueued work
      std::string detail;
      if (tc_status st = queue_->sync(&detail)) return fail_with(st, "llama: " + detail);
    }
    buffers_.erase(std::find(buffers_.begin(), buffers_.end(), kv_buffer_));
    delete_buffer(kv_buffer_);
  }
  kv_buffer_ = fresh;
  kv_ = t;
  k_cache_ = kv;
  v_cache_ = static_cast<char*>(kv) + dtype_bytes(t, int64_t(elems / 2));
  partial_ = reinterpret_cast<float*>(static_cast<char*>(kv) + cache_bytes);
  arrivals_ = counts;
  if (int64_t(n_past_.size()) != slots) n_past_.assign(size_t(slots), 0);
  return TC_OK;
}

tc_status Llama::alloc_state() {
  const tc_llama_config& g = cfg_;
  const int64_t E = g.n_embd, H = g.n_head, D = g.head_dim, Dq = H * D, Dkv = g.n_head_kv * D, F = g.n_ff;
  const int64_t V = g.n_vocab;
  if (tc_status st = alloc_kv_cache(kv_, 1)) return st;

  // Not min(n_ctx, 512): eval_batch's forwards take rows of many sequences,
  // so a short context must not cap them (32 prompts of 128 tokens at
  // n_ctx 137 ran as one prompt a forward, at the one-by-one rate).
  const int64_t B = max_batch_ = kMaxBatch;
  const int64_t widest_out = std::max({Dq, Dkv, E, F, V});
  std::vector<std::pair<void**, size_t>> pieces;
  auto f32 = [&](float** p, int64_t n) { pieces.push_back({reinterpret_cast<void**>(p), size_t(n) * 4}); };
  f32(&x_, B * E), f32(&h_, B * E), f32(&tmp_, B * E);
  f32(&q_, B * Dq), f32(&qt_, B * Dq), f32(&o_, B * Dq), f32(&ot_, B * Dq);
  // gate_ also holds a chunk's [gate | up] rows (2 F a row); up_ is its second half.
  f32(&k_, B * Dkv), f32(&v_, B * Dkv), f32(&gate_, 2 * B * F);
  if (!host_) f32(&logits_, B * V);
  f32(&kpack_, g.n_head_kv * g.n_ctx * D), f32(&vpack_, g.n_head_kv * g.n_ctx * D);
  // The 8-bit products' outputs: [q | k | v] and [gate | up] rows of a
  // one-token step or a small batch step (R rows).
  const int64_t R = std::min(B, kQ8MaxRows);
  // On a device [q | k | v] rows of a chunk too (its one GEMM): B rows.
  f32(&qkv_, (host_ ? R : B) * (Dq + 2 * Dkv)), f32(&gu_, R * 2 * F);
  // xh also holds the 8-bit X of those steps: R x K int8 values, then
  // (dx, sx) per block of 32, from byte aligned(R K) on.
  const int64_t widest_in = std::max({E, Dq, F});
  const size_t q8_bytes = aligned(size_t(R * widest_in)) + size_t(R * widest_in) / 4;
  pieces.push_back({reinterpret_cast<void**>(&xh_), std::max(size_t(B * widest_in) * 2, q8_bytes)});
  pieces.push_back({reinterpret_cast<void**>(&yh_), size_t(B * widest_out) * 2});
  pieces.push_back({reinterpret_cast<void**>(&params_), size_t(3 * B + 2) * 4});
  if (!host_) pieces.push_back({reinterpret_cast<void**>(&next_), size_t(B) * 4});
  size_t total = 0;
  for (auto& p : pieces) total += aligned(p.second);
  void* base_v = nullptr;
  if (tc_status st = alloc(total, &base_v)) return st;
  char* base = static_cast<char*>(base_v);
  for (auto& p : pieces) {
    *p.first = base;
    base += aligned(p.second);
  }
  up_ = gate_ + B * F;
  q8x_ = reinterpret_cast<int8_t*>(xh_);
  q8d_ = reinterpret_cast<float*>(reinterpret_cast<char*>(xh_) + aligned(size_t(R * widest_in)));
  if (host_) {
    params_host_ = params_;
    return TC_OK;
  }
  params_host_ = static_cast<int32_t*>(be_->alloc_host(size_t(3 * B + 2) * 4));
  if (!params_host_)
    return fail(TC_ERR_ALLOC, "tc_llama_load: %lld bytes of host memory", (long long)(3 * B + 2) * 4);
  params_pinned_ = true;
  queue_ = be_->create_queue();
  return TC_OK;
}

}  // namespace model
}  // namespace tc
