// The LLaMA decoder's entry points (include/tensorcore/llama.h): handle and
// argument checks, and the tokenizer built from the file's tokenizer.ggml.*
// metadata as llama.cpp reads it (model/vocab_gguf.cpp); a file without a
// vocabulary still runs on token ids.
#include "tensorcore/llama.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/api.h"
#include "model/llama.h"
#include "model/tokenizer.h"

using namespace tc;
using namespace tc::capi;

struct tc_llama_s {
  std::unique_ptr<model::Llama> impl;
  tc_tokenizer tokenizer = nullptr;  // null when the file has no vocabulary
  std::string no_tokenizer;          // why, when null
};

namespace {

const HandleKind& llama_kind() {
  static const HandleKind& k = handle_kind("llama model");
  return k;
}

tc_status check_llama(const char* fn, tc_llama& m) {
  if (!m) return fail(TC_ERR_INVALID_ARG, "%s: model is null", fn);
  return check_handle(fn, "model", m, llama_kind());
}

tc_status check_seq(const char* fn, const tc_llama& m, int64_t seq) {
  const int64_t slots = m->impl->max_sequences();
  if (seq < 0 || seq >= slots)
    return fail(TC_ERR_INVALID_ARG, "%s: sequence %lld outside [0, %lld) (tc_llama_set_max_sequences)", fn,
                (long long)seq, (long long)slots);
  return TC_OK;
}

tc_status eval_seq(const char* fn, tc_llama m, int64_t seq, const int32_t* tokens, int64_t n, float* logits,
                   int64_t capacity) {
  if (tc_status st = check_llama(fn, m)) return st;
  if (tc_status st = check_seq(fn, m, seq)) return st;
  const tc_llama_config& c = m->impl->config();
  if (n <= 0) return fail(TC_ERR_INVALID_SHAPE, "%s: n = %lld tokens (must be > 0)", fn, (long long)n);
  if (!tokens) return fail(TC_ERR_INVALID_ARG, "%s: tokens is null", fn);
  const int64_t past = m->impl->n_past(seq);
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
  return m->impl->eval(seq, tokens, n, logits, all);
}

// Calls that reallocate the cache need every sequence empty; the detail
// names the first that is not.
tc_status check_empty(const char* fn, const tc_llama& m) {
  for (int64_t s = 0; s < m->impl->max_sequences(); ++s)
    if (m->impl->n_past(s))
      return fail(TC_ERR_INVALID_ARG, "%s: sequence %lld holds %lld positions; reset every sequence first", fn,
                  (long long)s, (long long)m->impl->n_past(s));
  return TC_OK;
}

// The rows of a batch step (tc_llama_decode_batch and its greedy form):
// 1 <= n <= max sequences, distinct sequences in range and not full,
// tokens in the vocabulary. m is resolved in place, as check_llama does.
tc_status check_batch_step(const char* fn, tc_llama& m, const int32_t* seqs, const int32_t* tokens, int64_t n) {
  if (tc_status st = check_llama(fn, m)) return st;
  const tc_llama_config& c = m->impl->config();
  const int64_t slots = m->impl->max_sequences();
  if (n < 1 || n > slots)
    return fail(TC_ERR_INVALID_SHAPE, "%s: n = %lld sequences (1 to max_sequences %lld)", fn, (long long)n,
                (long long)slots);
  if (!seqs || !tokens) return fail(TC_ERR_INVALID_ARG, "%s: %s is null", fn, seqs ? "tokens" : "seqs");
  std::vector<int64_t> row_of(size_t(slots), -1);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t s = seqs[i];
    if (s < 0 || s >= slots)
      return fail(TC_ERR_INVALID_ARG, "%s: seqs[%lld] is %d, outside [0, %lld)", fn, (long long)i, s,
                  (long long)slots);
    if (row_of[size_t(s)] >= 0)
      return fail(TC_ERR_INVALID_ARG, "%s: sequence %d is in the batch twice (rows %lld and %lld)", fn, s,
                  (long long)row_of[size_t(s)], (long long)i);
    row_of[size_t(s)] = i;
    if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
      return fail(TC_ERR_INVALID_ARG, "%s: tokens[%lld] is %d, outside [0, %lld)", fn, (long long)i, tokens[i],
                  (long long)c.n_vocab);
    if (m->impl->n_past(s) >= c.n_ctx)
      return fail(TC_ERR_INVALID_SHAPE, "%s: sequence %d is full (n_past %lld = n_ctx)", fn, s,
                  (long long)m->impl->n_past(s));
  }
  return TC_OK;
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
    bool none = false;
    tc_tokenizer tokenizer = nullptr;
    tc_status st = tokenizer_from_gguf(m->impl->file(), &tokenizer, &none);
    m->tokenizer = handle_address(tokenizer);  // held as an object, like every stored handle
    if (st) {
      if (!none) return fail_with(st, std::string(fn) + ": " + last_detail());
      // No vocabulary at all: the model still runs on token ids.
      m->no_tokenizer = last_detail();
      m->tokenizer = nullptr;
    } else if (tokenizer_model(m->tokenizer).size() != m->impl->config().n_vocab) {
      const long long nt = (long long)tokenizer_model(m->tokenizer).size();
      tc_tokenizer_free(m->tokenizer);
      m->tokenizer = nullptr;
      return fail(TC_ERR_CORRUPT, "%s: %lld tokens in tokenizer.ggml.tokens for a vocabulary of %lld", fn, nt,
                  (long long)m->impl->config().n_vocab);
    }
    *out = register_handle(m.release(), llama_kind());
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
    if (m->tokenizer) {  // the ids the tokenizer reads, llama.cpp's defaults included
      const model::Vocab& v = tokenizer_model(m->tokenizer).vocab();
      out->bos_id = v.bos, out->eos_id = v.eos;
    }
    return TC_OK;
  });
}

tc_status tc_llama_eval(tc_llama m, const int32_t* tokens, int64_t n, float* logits, int64_t capacity) {
  return guarded("tc_llama_eval", [&] { return eval_seq("tc_llama_eval", m, 0, tokens, n, logits, capacity); });
}

tc_status tc_llama_seq_eval(tc_llama m, int32_t seq, const int32_t* tokens, int64_t n, float* logits,
                            int64_t capacity) {
  return guarded("tc_llama_seq_eval",
                 [&] { return eval_seq("tc_llama_seq_eval", m, seq, tokens, n, logits, capacity); });
}

tc_status tc_llama_decode_batch(tc_llama m, const int32_t* seqs, const int32_t* tokens, int64_t n, float* logits,
                                int64_t capacity) {
  const char* fn = "tc_llama_decode_batch";
  return guarded(fn, [&] {
    if (tc_status st = check_batch_step(fn, m, seqs, tokens, n)) return st;
    if (logits) {
      int64_t want;
      if (!mul_ok(n, m->impl->config().n_vocab, &want))
        return fail(TC_ERR_INVALID_SHAPE, "%s: n * n_vocab overflows", fn);
      if (capacity < want)
        return fail(TC_ERR_INVALID_ARG, "%s: logits capacity %lld, need n * n_vocab = %lld", fn,
                    (long long)capacity, (long long)want);
    } else if (capacity != 0) {
      return fail(TC_ERR_INVALID_ARG, "%s: capacity %lld without a logits array", fn, (long long)capacity);
    }
    return m->impl->decode_batch(seqs, tokens, n, logits);
  });
}

tc_status tc_llama_decode_batch_greedy(tc_llama m, const int32_t* seqs, const int32_t* tokens, int64_t n,
                                       int32_t* next) {
  const char* fn = "tc_llama_decode_batch_greedy";
  return guarded(fn, [&] {
    if (tc_status st = check_batch_step(fn, m, seqs, tokens, n)) return st;
    if (!next) return fail(TC_ERR_INVALID_ARG, "%s: next is null", fn);
    return m->impl->decode_batch(seqs, tokens, n, nullptr, next);
  });
}

tc_status tc_llama_eval_batch(tc_llama m, const int32_t* seqs, const int32_t* tokens, int64_t n, const uint8_t* want,
                              float* logits, int64_t capacity) {
  const char* fn = "tc_llama_eval_batch";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    const tc_llama_config& c = m->impl->config();
    const int64_t slots = m->impl->max_sequences();
    if (n < 1) return fail(TC_ERR_INVALID_SHAPE, "%s: n = %lld rows (at least 1)", fn, (long long)n);
    if (!seqs || !tokens) return fail(TC_ERR_INVALID_ARG, "%s: %s is null", fn, seqs ? "tokens" : "seqs");
    std::vector<int64_t> rows_of(size_t(slots), 0);
    int64_t wanted = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t s = seqs[i];
      if (s < 0 || s >= slots)
        return fail(TC_ERR_INVALID_ARG, "%s: seqs[%lld] is %d, outside [0, %lld)", fn, (long long)i, s,
                    (long long)slots);
      if (tokens[i] < 0 || tokens[i] >= c.n_vocab)
        return fail(TC_ERR_INVALID_ARG, "%s: tokens[%lld] is %d, outside [0, %lld)", fn, (long long)i, tokens[i],
                    (long long)c.n_vocab);
      if (m->impl->n_past(s) + ++rows_of[size_t(s)] > c.n_ctx)
        return fail(TC_ERR_INVALID_SHAPE, "%s: row %lld overflows sequence %d (n_past %lld + its rows > n_ctx %lld)",
                    fn, (long long)i, s, (long long)m->impl->n_past(s), (long long)c.n_ctx);
      if (!want || want[i]) ++wanted;
    }
    if (logits) {
      int64_t need;
      if (!mul_ok(wanted, c.n_vocab, &need)) return fail(TC_ERR_INVALID_SHAPE, "%s: rows * n_vocab overflows", fn);
      if (capacity < need)
        return fail(TC_ERR_INVALID_ARG, "%s: logits capacity %lld, need %lld wanted rows * n_vocab = %lld", fn,
                    (long long)capacity, (long long)wanted, (long long)need);
    } else if (capacity != 0) {
      return fail(TC_ERR_INVALID_ARG, "%s: capacity %lld without a logits array", fn, (long long)capacity);
    }
    return m->impl->eval_batch(seqs, tokens, n, want, logits);
  });
}

tc_status tc_llama_set_max_sequences(tc_llama m, int64_t n_seq) {
  const char* fn = "tc_llama_set_max_sequences";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    const int64_t limit = m->impl->sequence_limit();
    if (n_seq < 1 || n_seq > limit)
      return fail(TC_ERR_INVALID_ARG, "%s: %lld sequences (1 to %lld)", fn, (long long)n_seq,
                  (long long)limit);
    if (tc_status st = check_empty(fn, m)) return st;
    return m->impl->set_max_sequences(n_seq);
  });
}

tc_status tc_llama_get_max_sequences(tc_llama m, int64_t* out) {
  const char* fn = "tc_llama_get_max_sequences";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    *out = m->impl->max_sequences();
    return TC_OK;
  });
}

tc_status tc_llama_seq_reset(tc_llama m, int32_t seq) {
  const char* fn = "tc_llama_seq_reset";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    if (tc_status st = check_seq(fn, m, seq)) return st;
    m->impl->reset(seq);
    return TC_OK;
  });
}

tc_status tc_llama_seq_n_past(tc_llama m, int32_t seq, int64_t* out) {
  const char* fn = "tc_llama_seq_n_past";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    if (tc_status st = check_seq(fn, m, seq)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    *out = m->impl->n_past(seq);
    return TC_OK;
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

tc_status tc_llama_set_kv_cache_type(tc_llama m, tc_dtype dtype) {
  const char* fn = "tc_llama_set_kv_cache_type";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    if (dtype != TC_DTYPE_F32 && dtype != TC_DTYPE_F16 && dtype != TC_DTYPE_Q8_0)
      return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: a %s cache (f16, f32 or q8_0)", fn, dtype_label(dtype).c_str());
    // Q8_0 rows are whole blocks of 32 along the head dim.
    const int64_t D = m->impl->config().head_dim;
    if (dtype == TC_DTYPE_Q8_0 && D % 32 != 0)
      return fail(TC_ERR_UNSUPPORTED, "%s: a q8_0 cache needs a head dim that is a multiple of 32; this model's is %lld",
                  fn, (long long)D);
    if (tc_status st = check_empty(fn, m)) return st;
    return m->impl->set_kv_cache_type(dtype);
  });
}

tc_status tc_llama_get_kv_cache_type(tc_llama m, tc_dtype* out) {
  const char* fn = "tc_llama_get_kv_cache_type";
  return guarded(fn, [&] {
    if (tc_status st = check_llama(fn, m)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    *out = m->impl->kv_cache_type();
    return TC_OK;
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
    *out = handle_of(m->tokenizer);
    return TC_OK;
  });
}

}  // extern "C"
