// The hyper-parameters of a LLaMA-family model from GGUF metadata. The keys
// are llama.cpp's: "<arch>.embedding_length" and so on, with <arch> from
// general.architecture, so mistral, qwen2 and other architectures that
// reuse the scheme are read the same way.
#include "gguf/llama_config.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace tc {
namespace gguf {
namespace {

struct Reader {
  const File& f;
  std::string arch;

  // Integer key: a scalar, or an array of integers (per-layer values), whose
  // largest entry is taken. Absent keys keep *out; false after fail().
  bool get_int(const std::string& key, int64_t* out, bool* found = nullptr) const {
    if (found) *found = false;
    const KeyValue* kv = f.find_kv(key);
    if (!kv) return true;
    const Value& v = kv->value;
    int64_t r = 0;
    if (v.type == kArray && value_size(v.elem_type) && v.elem_type != kF32 && v.elem_type != kF64 && v.count) {
      const int sz = value_size(v.elem_type);
      for (uint64_t i = 0; i < v.count; ++i) {
        int64_t e;
        if (!f.scalar_i64(v.elem_type, v.pos + i * uint64_t(sz), &e)) return bad(key, "an integer array in range");
        if (i == 0 || e > r) r = e;
      }
    } else if (value_size(v.type) && v.type != kF32 && v.type != kF64) {
      if (!f.scalar_i64(v.type, v.pos, &r)) return bad(key, "an integer in range");
    } else {
      return bad(key, "an integer");
    }
    *out = r;
    if (found) *found = true;
    return true;
  }

  bool get_float(const std::string& key, double* out) const {
    const KeyValue* kv = f.find_kv(key);
    if (!kv) return true;
    if (!value_size(kv->value.type) || !f.scalar_f64(kv->value.type, kv->value.pos, out)) return bad(key, "a number");
    return true;
  }

  bool bad(const std::string& key, const char* want) const {
    fail(TC_ERR_CORRUPT, "gguf: metadata '%s' is not %s", key.c_str(), want);
    return false;
  }
};

}  // namespace

tc_status llama_config(const File& f, tc_gguf_llama_config* out) {
  std::memset(out, 0, sizeof *out);
  const KeyValue* a = f.find_kv("general.architecture");
  if (!a) return fail(TC_ERR_UNSUPPORTED, "gguf: no general.architecture key, so no model configuration");
  if (a->value.type != kString) return fail(TC_ERR_CORRUPT, "gguf: general.architecture is not a string");
  uint64_t len;
  const char* arch = f.string_at(a->value.pos, &len);
  if (len == 0 || len >= sizeof out->architecture || std::strlen(arch) != len)
    return fail(TC_ERR_CORRUPT, "gguf: general.architecture must be 1 to %zu characters without NUL",
                sizeof out->architecture - 1);
  std::memcpy(out->architecture, arch, len + 1);
  Reader r{f, std::string(arch)};
  const std::string p = r.arch + ".";

  bool has_embd = false, has_blocks = false, has_heads = false, has_kv = false, has_rope_dims = false, has_vocab = false;
  if (!r.get_int(p + "embedding_length", &out->embedding_length, &has_embd) ||
      !r.get_int(p + "block_count", &out->block_count, &has_blocks) ||
      !r.get_int(p + "attention.head_count", &out->attention_head_count, &has_heads) ||
      !r.get_int(p + "attention.head_count_kv", &out->attention_head_count_kv, &has_kv) ||
      !r.get_int(p + "rope.dimension_count", &out->rope_dimension_count, &has_rope_dims) ||
      !r.get_int(p + "context_length", &out->context_length) ||
      !r.get_int(p + "feed_forward_length", &out->feed_forward_length) ||
      !r.get_int(p + "vocab_size", &out->vocab_size, &has_vocab))
    return last_status();
  const char* missing = !has_embd ? "embedding_length" : !has_blocks ? "block_count" : !has_heads ? "attention.head_count" : nullptr;
  if (missing)
    return fail(TC_ERR_UNSUPPORTED, "gguf: not a LLaMA-family model: no '%s%s' key", p.c_str(), missing);
  if (out->embedding_length <= 0 || out->block_count <= 0 || out->attention_head_count <= 0)
    return fail(TC_ERR_CORRUPT, "gguf: embedding_length %lld, block_count %lld and head_count %lld must be > 0",
                (long long)out->embedding_length, (long long)out->block_count, (long long)out->attention_head_count);
  if (!has_kv) out->attention_head_count_kv = out->attention_head_count;
  if (!has_rope_dims) out->rope_dimension_count = out->embedding_length / out->attention_head_count;
  if (out->attention_head_count_kv <= 0 || out->rope_dimension_count < 0 || out->context_length < 0 ||
      out->feed_forward_length < 0 || out->vocab_size < 0)
    return fail(TC_ERR_CORRUPT, "gguf: negative or zero count in the %s configuration", arch);

  if (!has_vocab) {
    if (const KeyValue* t = f.find_kv("tokenizer.ggml.tokens"); t && t->value.type == kArray)
      out->vocab_size = int64_t(t->value.count);
    else if (const TensorInfo* e = f.find_tensor("token_embd.weight"); e && e->n_dims >= 2)
      out->vocab_size = e->dims[1];
  }

  out->rms_norm_epsilon = 1e-5;
  out->rope_freq_base = 10000.0;
  double factor = 0.0;
  if (!r.get_float(p + "attention.layer_norm_rms_epsilon", &out->rms_norm_epsilon) ||
      !r.get_float(p + "rope.freq_base", &out->rope_freq_base) ||
      !r.get_float(p + "rope.scale_linear", &factor) || !r.get_float(p + "rope.scaling.factor", &factor))
    return last_status();
  out->rope_freq_scale = factor > 0.0 ? 1.0 / factor : 1.0;
  return TC_OK;
}

}  // namespace gguf
}  // namespace tc
