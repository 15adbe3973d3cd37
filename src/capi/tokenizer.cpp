#include "tensorcore/tokenizer.h"

#include <cstring>
#include <memory>

#include "capi/api.h"
#include "model/tokenizer.h"

using namespace tc;
using namespace tc::capi;

struct tc_tokenizer_s {
  std::unique_ptr<model::Tokenizer> impl;
};

namespace {

tc_status check_tokenizer(const char* fn, tc_tokenizer t) {
  if (!t) return fail(TC_ERR_INVALID_ARG, "%s: tokenizer is null", fn);
  if (!is_live_handle(t, HandleKind::Tokenizer))
    return fail(TC_ERR_INVALID_ARG, "%s: %p is not a live tokenizer", fn, (void*)t);
  return TC_OK;
}

}  // namespace

extern "C" {

tc_status tc_tokenizer_create(const tc_tokenizer_desc* d, tc_tokenizer* out) {
  return guarded("tc_tokenizer_create", [&] {
    const char* fn = "tc_tokenizer_create";
    if (!d) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (d->kind != TC_TOKENIZER_SPM && d->kind != TC_TOKENIZER_BPE)
      return fail(TC_ERR_UNSUPPORTED, "%s: tokenizer kind %d (expected SPM=0 or BPE=1)", fn, d->kind);
    if (d->pre_tokenizer != TC_PRE_TOKENIZER_GPT2 && d->pre_tokenizer != TC_PRE_TOKENIZER_LLAMA3)
      return fail(TC_ERR_UNSUPPORTED, "%s: pre-tokenizer %d (expected GPT2=0 or LLAMA3=1)", fn, d->pre_tokenizer);
    if (d->n_tokens <= 0 || !d->tokens)
      return fail(TC_ERR_INVALID_ARG, "%s: a vocabulary of %lld tokens", fn, (long long)d->n_tokens);
    if (d->n_merges < 0 || (d->n_merges > 0 && !d->merges))
      return fail(TC_ERR_INVALID_ARG, "%s: %lld merges without an array", fn, (long long)d->n_merges);
    model::Vocab v;
    v.kind = d->kind == TC_TOKENIZER_SPM ? model::TokenizerKind::Spm : model::TokenizerKind::Bpe;
    v.pre = d->pre_tokenizer == TC_PRE_TOKENIZER_LLAMA3 ? model::PreTokenizer::Llama3 : model::PreTokenizer::Gpt2;
    v.tokens.reserve(size_t(d->n_tokens));
    for (int64_t i = 0; i < d->n_tokens; ++i) {
      if (!d->tokens[i]) return fail(TC_ERR_INVALID_ARG, "%s: token %lld is null", fn, (long long)i);
      v.tokens.emplace_back(d->tokens[i]);
    }
    if (d->scores) v.scores.assign(d->scores, d->scores + d->n_tokens);
    if (d->token_types) v.types.assign(d->token_types, d->token_types + d->n_tokens);
    for (int64_t i = 0; i < d->n_merges; ++i) {
      if (!d->merges[i]) return fail(TC_ERR_INVALID_ARG, "%s: merge %lld is null", fn, (long long)i);
      v.merges.emplace_back(d->merges[i]);
    }
    v.bos = d->bos_id, v.eos = d->eos_id, v.unk = d->unk_id;
    v.add_space_prefix = d->add_space_prefix != 0;
    model::Tokenizer* impl = nullptr;
    if (tc_status st = model::Tokenizer::create(std::move(v), &impl)) return st;
    auto* t = new tc_tokenizer_s{std::unique_ptr<model::Tokenizer>(impl)};
    register_handle(t, HandleKind::Tokenizer);
    *out = t;
    return TC_OK;
  });
}

tc_status tc_tokenizer_free(tc_tokenizer t) {
  return guarded("tc_tokenizer_free", [&] {
    if (tc_status st = check_tokenizer("tc_tokenizer_free", t)) return st;
    unregister_handle(t);
    delete t;
    return TC_OK;
  });
}

tc_status tc_tokenizer_vocab_size(tc_tokenizer t, int64_t* out) {
  return guarded("tc_tokenizer_vocab_size", [&] {
    if (tc_status st = check_tokenizer("tc_tokenizer_vocab_size", t)) return st;
    if (tc_status st = check_out_ptr("tc_tokenizer_vocab_size", "out", out)) return st;
    *out = t->impl->size();
    return TC_OK;
  });
}

tc_status tc_tokenizer_encode(tc_tokenizer t, const char* text, size_t len, int32_t add_bos, int32_t* ids,
                              int64_t capacity, int64_t* n_out) {
  return guarded("tc_tokenizer_encode", [&] {
    const char* fn = "tc_tokenizer_encode";
    if (tc_status st = check_tokenizer(fn, t)) return st;
    if (tc_status st = check_out_ptr(fn, "n_out", n_out)) return st;
    if (len && !text) return fail(TC_ERR_INVALID_ARG, "%s: text is null", fn);
    if (capacity < 0 || (capacity > 0 && !ids)) return fail(TC_ERR_INVALID_ARG, "%s: bad ids array", fn);
    std::vector<int32_t> v = t->impl->encode(std::string(text ? text : "", len), add_bos != 0);
    *n_out = int64_t(v.size());
    if (int64_t(v.size()) > capacity)
      return fail(TC_ERR_INVALID_ARG, "%s: %zu ids do not fit the capacity of %lld", fn, v.size(), (long long)capacity);
    if (!v.empty()) std::memcpy(ids, v.data(), v.size() * sizeof(int32_t));
    return TC_OK;
  });
}

tc_status tc_tokenizer_decode(tc_tokenizer t, const int32_t* ids, int64_t n, char* text, size_t capacity,
                              size_t* n_out) {
  return guarded("tc_tokenizer_decode", [&] {
    const char* fn = "tc_tokenizer_decode";
    if (tc_status st = check_tokenizer(fn, t)) return st;
    if (tc_status st = check_out_ptr(fn, "n_out", n_out)) return st;
    if (n < 0 || (n > 0 && !ids)) return fail(TC_ERR_INVALID_ARG, "%s: bad ids array", fn);
    if (capacity > 0 && !text) return fail(TC_ERR_INVALID_ARG, "%s: text is null", fn);
    std::string s = t->impl->decode(ids, n);
    *n_out = s.size();
    if (s.size() > capacity)
      return fail(TC_ERR_INVALID_ARG, "%s: %zu bytes do not fit the capacity of %zu", fn, s.size(), capacity);
    if (!s.empty()) std::memcpy(text, s.data(), s.size());
    return TC_OK;
  });
}

}  // extern "C"
