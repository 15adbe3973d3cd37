// The LLaMA decoder's entry points (include/tensorcore/llama.h): handle and
// argument checks, and the tokenizer built from the file's tokenizer.ggml.*
// metadata:
//   model "llama" -> SentencePiece (tokens, scores, token_type,
//                    add_space_prefix default true)
//   model "gpt2"  -> byte-level BPE (tokens, merges, token_type) with the
//                    pre-tokenizer of tokenizer.ggml.pre: absent, "default" or
//                    "gpt2" -> GPT-2's; "llama-bpe" or "llama3" -> LLaMA-3's
// anything else is TC_ERR_UNSUPPORTED.
#include "tensorcore/llama.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/api.h"
#include "model/llama.h"

using namespace tc;
using namespace tc::capi;

struct tc_llama_s {
  std::unique_ptr<model::Llama> impl;
  tc_tokenizer tokenizer = nullptr;  // null when the file has no vocabulary
  std::string no_tokenizer;          // why, when null
};

namespace {

tc_status check_llama(const char* fn, tc_llama m) {
  if (!m) return fail(TC_ERR_INVALID_ARG, "%s: model is null", fn);
  if (!is_live_handle(m, HandleKind::Llama)) return fail(TC_ERR_INVALID_ARG, "%s: %p is not a live tc_llama", fn, (void*)m);
  return TC_OK;
}

const gguf::Value* array_of(const gguf::File& f, const char* key, int32_t elem) {
  const gguf::KeyValue* kv = f.find_kv(key);
  if (!kv || kv->value.type != gguf::kArray || kv->value.elem_type != elem) return nullptr;
  return &kv->value;
}

std::string str_of(const gguf::File& f, const char* key, const char* dflt) {
  const gguf::KeyValue* kv = f.find_kv(key);
  if (!kv || kv->value.type != gguf::kString) return dflt;
  uint64_t len = 0;
  const char* s = f.string_at(kv->value.pos, &len);
  return std::string(s, len);
}

// TC_OK with *out set, TC_ERR_UNSUPPORTED when the file has no vocabulary or
// an unknown tokenizer, TC_ERR_CORRUPT for malformed tokenizer metadata.
tc_status build_tokenizer(const gguf::File& f, int64_t n_vocab, tc_tokenizer* out) {
  const char* fn = "tc_llama_load";
  const gguf::Value* toks = array_of(f, "tokenizer.ggml.tokens", gguf::kString);
  if (!toks) return fail(TC_ERR_UNSUPPORTED, "%s: the file has no tokenizer.ggml.tokens vocabulary", fn);
  const std::string model = str_of(f, "tokenizer.ggml.model", "");
  tc_tokenizer_desc d{};
  if (model == "llama") {
    d.kind = TC_TOKENIZER_SPM;
  } else if (model == "gpt2") {
    d.kind = TC_TOKENIZER_BPE;
    const std::string pre = str_of(f, "tokenizer.ggml.pre", "default");
    if (pre == "default" || pre == "gpt2") d.pre_tokenizer = TC_PRE_TOKENIZER_GPT2;
    else if (pre == "llama-bpe" || pre == "llama3") d.pre_tokenizer = TC_PRE_TOKENIZER_LLAMA3;
    else return fail(TC_ERR_UNSUPPORTED, "%s: BPE pre-tokenizer '%s' is not supported (gpt2, llama-bpe)", fn, pre.c_str());
  } else {
    return fail(TC_ERR_UNSUPPORTED, "%s: tokenizer model '%s' is not supported (llama, gpt2)", fn, model.c_str());
  }
  const int64_t n = int64_t(toks->count);
  if (n != n_vocab)
    return fail(TC_ERR_CORRUPT, "%s: %lld tokens in tokenizer.ggml.tokens for a vocabulary of %lld", fn, (long long)n,
                (long long)n_vocab);
  std::vector<const char*> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    uint64_t len;
    tokens[size_t(i)] = f.string_at(toks->elems[size_t(i)], &len);
  }
  d.n_tokens = n;
  d.tokens = tokens.data();
  std::vector<float> scores;
  if (const gguf::Value* s = array_of(f, "tokenizer.ggml.scores", gguf::kF32)) {
    if (int64_t(s->count) != n) return fail(TC_ERR_CORRUPT, "%s: %llu scores for %lld tokens", fn, (unsigned long long)s->count, (long long)n);
    scores.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      double v;
      f.scalar_f64(gguf::kF32, s->pos + uint64_t(i) * 4, &v);
      scores[size_t(i)] = float(v);
    }
    d.scores = scores.data();
  }
  std::vector<int32_t> types;
  if (const gguf::KeyValue* kv = f.find_kv("tokenizer.ggml.token_type"); kv && kv->value.type == gguf::kArray) {
    const gguf::Value& t = kv->value;
    const int sz = gguf::value_size(t.elem_type);
    if (int64_t(t.count) != n || !sz || t.elem_type == gguf::kF32 || t.elem_type == gguf::kF64)
      return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.token_type is not %lld integers", fn, (long long)n);
    types.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = 0;
      f.scalar_i64(t.elem_type, t.pos + uint64_t(i) * uint64_t(sz), &v);
      types[size_t(i)] = int32_t(v);
    }
    d.token_types = types.data();
  }
  std::vector<const char*> merges;
  if (const gguf::Value* mg = array_of(f, "tokenizer.ggml.merges", gguf::kString)) {
    merges.resize(mg->count);
    for (size_t i = 0; i < mg->count; ++i) {
      uint64_t len;
      merges[i] = f.string_at(mg->elems[i], &len);
    }
    d.n_merges = int64_t(merges.size());
    d.merges = merges.data();
  }
  auto id = [&](const char* key) -> int32_t {
    const gguf::KeyValue* kv = f.find_kv(key);
    int64_t v;
    if (kv && f.scalar_i64(kv->value.type, kv->value.pos, &v) && v >= 0 && v < n) return int32_t(v);
    return -1;
  };
  d.bos_id = id("tokenizer.ggml.bos_token_id");
  d.eos_id = id("tokenizer.ggml.eos_token_id");
  d.unk_id = id("tokenizer.ggml.unknown_token_id");
  d.add_space_prefix = 1;
  if (const gguf::KeyValue* kv = f.find_kv("tokenizer.ggml.add_space_prefix"); kv && kv->value.type == gguf::kBool) {
    int64_t v;
    if (f.scalar_i64(gguf::kBool, kv->value.pos, &v)) d.add_space_prefix = v != 0;
  }
  return tc_tokenizer_create(&d, out);
}

}  // namespace

extern "C" {

tc_status tc_llama_load(tc_context ctx, const char* path, int64_t n_ctx, tc_llama* out) {
  return guarded("tc_llama_load", [&] {
    const char* fn = "tc_llama_load";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (!path) return fail(TC_ERR_INVALID_ARG, "%s: path is null", fn);
    if (n_ctx < 0 || n_ctx > (int64_t(1) << 24))
      return fail(TC_ERR_INVALID_SHAPE, "%s: n_ctx %lld (0 for the default, at most 2^24)", fn, (long long)n_ctx);
    std::unique_ptr<tc_llama_s> m(new tc_llama_s());
    if (tc_status st = model::Llama::load(ctx, path, n_ctx, &m->impl)) return st;
    if (tc_status st = build_tokenizer(m->impl->file(), m->impl->config().n_vocab, &m->tokenizer)) {
      if (st != TC_ERR_UNSUPPORTED || m->impl->file().find_kv("tokenizer.ggml.tokens")) return st;
      // No vocabulary at all: the model still runs on token ids.
      m->no_tokenizer = last_detail();
      m->tokenizer = nullptr;
    }
    register_handle(m.get(), HandleKind::Llama);
    *out = m.release();
    return TC_OK;
  });
}

tc_status tc_llama_free(tc_llama m) {
  return guarded("tc_llama_free", [&] {
    if (tc_status st = check_llama("tc_llama_free", m)) return st;
    unregister_handle(m);
    if (m->tokenizer) tc_tokenizer_free(m->tokenizer);
    delete m;
    return TC_OK;
  });
}

tc_status tc_llama_get_config(tc_llama m, struct tc_llama_config* out) {
  return guarded("tc_llama_get_config", [&] {
    if (tc_status st = check_llama("tc_llama_get_config", m)) return st;
    if (tc_status st = check_out_ptr("tc_llama_get_config", "out", out)) return st;
    *out = m->impl->config();
    return TC_OK;
  });
}

tc_status tc_llama_eval(tc_llama m, const int32_t* tokens, int64_t n, float* logits, int64_t capacity) {
  return guarded("tc_llama_eval", [&] {
    const char* fn = "tc_llama_eval";
    if (tc_status st = check_llama(fn, m)) return st;
    const tc_llama_config& c = m->impl->config();
    if (n <= 0) return fail(TC_ERR_INVALID_SHAPE, "%s: n = %lld tokens (must be > 0)", fn, (long long)n);
    if (!tokens) return fail(TC_ERR_INVALID_ARG, "%s: tokens is null", fn);
    const int64_t past = m->impl->n_past();
    if (n > c.n_ctx - past)
      return fail(TC_ERR_INVALID_SHAPE, "%s: %lld tokens after %lld overflow the context of %lld positions", fn,
                  (long long)n, (long long)past, (long long)c.n_ctx);
    for (int64_t i = 0; i < n; ++i)
      if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
        return fail(TC_ERR_INVALID_ARG, "%s: token %lld is %d, outside [0, %lld)", fn, (long long)i, tokens[i],
                    (long long)c.n_vocab);
    bool all = true;
    if (logits) {
      int64_t want;
      if (!mul_ok(n, c.n_vocab, &want)) return fail(TC_ERR_INVALID_SHAPE, "%s: n * n_vocab overflows", fn);
      if (capacity >= want) all = true;
      else if (capacity == c.n_vocab) all = false;
      else
        return fail(TC_ERR_INVALID_ARG, "%s: logits capacity %lld: need %lld (all tokens) or %lld (the last)", fn,
                    (long long)capacity, (long long)want, (long long)c.n_vocab);
    } else if (capacity != 0) {
      return fail(TC_ERR_INVALID_ARG, "%s: capacity %lld without a logits array", fn, (long long)capacity);
    }
    return m->impl->eval(tokens, n, logits, all);
  });
}

tc_status tc_llama_set_activations(tc_llama m, tc_dtype dtype) {
  return guarded("tc_llama_set_activations", [&] {
    if (tc_status st = check_llama("tc_llama_set_activations", m)) return st;
    if (dtype != TC_DTYPE_F32 && dtype != TC_DTYPE_F16)
      return fail(TC_ERR_UNSUPPORTED_DTYPE, "tc_llama_set_activations: %s activations (f32 or f16)",
                  dtype_label(dtype).c_str());
    return m->impl->set_activations(dtype);
  });
}

tc_status tc_llama_reset(tc_llama m) {
  return guarded("tc_llama_reset", [&] {
    if (tc_status st = check_llama("tc_llama_reset", m)) return st;
    m->impl->reset();
    return TC_OK;
  });
}

tc_status tc_llama_n_past(tc_llama m, int64_t* out) {
  return guarded("tc_llama_n_past", [&] {
    if (tc_status st = check_llama("tc_llama_n_past", m)) return st;
    if (tc_status st = check_out_ptr("tc_llama_n_past", "out", out)) return st;
    *out = m->impl->n_past();
    return TC_OK;
  });
}

tc_status tc_llama_tokenizer(tc_llama m, tc_tokenizer* out) {
  return guarded("tc_llama_tokenizer", [&] {
    if (tc_status st = check_llama("tc_llama_tokenizer", m)) return st;
    if (tc_status st = check_out_ptr("tc_llama_tokenizer", "out", out)) return st;
    if (!m->tokenizer) return fail_with(TC_ERR_UNSUPPORTED, "tc_llama_tokenizer: " + m->no_tokenizer);
    *out = m->tokenizer;
    return TC_OK;
  });
}

}  // extern "C"
