#include "tensorcore/tokenizer.h"

#include <cstdio>
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

const HandleKind& tokenizer_kind() {
  static const HandleKind& k = handle_kind("tokenizer");
  return k;
}

tc_status check_tokenizer(const char* fn, tc_tokenizer& t) {
  if (!t) return fail(TC_ERR_INVALID_ARG, "%s: tokenizer is null", fn);
  return check_handle(fn, "tokenizer", t, tokenizer_kind());
}

tc_status make(model::Vocab v, tc_tokenizer* out) {
  model::Tokenizer* impl = nullptr;
  if (tc_status st = model::Tokenizer::create(std::move(v), &impl)) return st;
  auto* t = new tc_tokenizer_s{std::unique_ptr<model::Tokenizer>(impl)};
  *out = register_handle(t, tokenizer_kind());
  return TC_OK;
}

// The arrays both descriptions share.
tc_status read_arrays(const char* fn, int64_t n_tokens, const char* const* tokens, const float* scores,
                      const int32_t* types, int64_t n_merges, const char* const* merges, model::Vocab* v) {
  if (n_tokens <= 0 || !tokens)
    return fail(TC_ERR_INVALID_ARG, "%s: a vocabulary of %lld tokens", fn, (long long)n_tokens);
  if (n_tokens > INT32_MAX) return fail(TC_ERR_INVALID_ARG, "%s: %lld tokens do not fit int32 ids", fn, (long long)n_tokens);
  if (n_merges < 0 || (n_merges > 0 && !merges))
    return fail(TC_ERR_INVALID_ARG, "%s: %lld merges without an array", fn, (long long)n_merges);
  v->tokens.reserve(size_t(n_tokens));
  for (int64_t i = 0; i < n_tokens; ++i) {
    if (!tokens[i]) return fail(TC_ERR_INVALID_ARG, "%s: token %lld is null", fn, (long long)i);
    v->tokens.emplace_back(tokens[i]);
  }
  if (scores) v->scores.assign(scores, scores + n_tokens);
  if (types) v->types.assign(types, types + n_tokens);
  for (int64_t i = 0; i < n_merges; ++i) {
    if (!merges[i]) return fail(TC_ERR_INVALID_ARG, "%s: merge %lld is null", fn, (long long)i);
    v->merges.emplace_back(merges[i]);
  }
  return TC_OK;
}

tc_status encode(const char* fn, tc_tokenizer& t, const char* text, size_t len, uint32_t flags, int32_t* ids,
                 int64_t capacity, int64_t* n_out) {
  if (tc_status st = check_tokenizer(fn, t)) return st;
  if (tc_status st = check_out_ptr(fn, "n_out", n_out)) return st;
  if (len && !text) return fail(TC_ERR_INVALID_ARG, "%s: text is null", fn);
  if (capacity < 0 || (capacity > 0 && !ids)) return fail(TC_ERR_INVALID_ARG, "%s: bad ids array", fn);
  const uint32_t known = TC_ENCODE_ADD_SPECIAL | TC_ENCODE_PARSE_SPECIAL | TC_ENCODE_FORCE_BOS | TC_ENCODE_NO_BOS |
                         TC_ENCODE_FORCE_EOS | TC_ENCODE_NO_EOS;
  if (flags & ~known) return fail(TC_ERR_INVALID_ARG, "%s: unknown flags 0x%x", fn, flags & ~known);
  if ((flags & TC_ENCODE_FORCE_BOS) && (flags & TC_ENCODE_NO_BOS))
    return fail(TC_ERR_INVALID_ARG, "%s: TC_ENCODE_FORCE_BOS and TC_ENCODE_NO_BOS together", fn);
  if ((flags & TC_ENCODE_FORCE_EOS) && (flags & TC_ENCODE_NO_EOS))
    return fail(TC_ERR_INVALID_ARG, "%s: TC_ENCODE_FORCE_EOS and TC_ENCODE_NO_EOS together", fn);
  const model::Vocab& v = t->impl->vocab();
  const bool special = flags & TC_ENCODE_ADD_SPECIAL;
  model::EncodeOptions opt;
  opt.add_bos = (flags & TC_ENCODE_FORCE_BOS) || (special && v.add_bos && !(flags & TC_ENCODE_NO_BOS));
  opt.add_eos = (flags & TC_ENCODE_FORCE_EOS) || (special && v.add_eos && !(flags & TC_ENCODE_NO_EOS));
  opt.parse_special = flags & TC_ENCODE_PARSE_SPECIAL;
  std::vector<int32_t> out = t->impl->encode(std::string(text ? text : "", len), opt);
  *n_out = int64_t(out.size());
  if (int64_t(out.size()) > capacity)
    return fail(TC_ERR_INVALID_ARG, "%s: %zu ids do not fit the capacity of %lld", fn, out.size(), (long long)capacity);
  if (!out.empty()) std::memcpy(ids, out.data(), out.size() * sizeof(int32_t));
  return TC_OK;
}

}  // namespace

namespace tc {
namespace capi {

tc_status tokenizer_from_gguf(const gguf::File& f, tc_tokenizer_s** out, bool* none) {
  model::Vocab v;
  if (tc_status st = model::vocab_from_gguf(f, &v, none)) return st;
  return make(std::move(v), out);
}

const model::Tokenizer& tokenizer_model(const tc_tokenizer_s* t) { return *t->impl; }

}  // namespace capi
}  // namespace tc

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
    model::Vocab v;
    if (tc_status st = read_arrays(fn, d->n_tokens, d->tokens, d->scores, d->token_types, d->n_merges, d->merges, &v))
      return st;
    v.kind = d->kind == TC_TOKENIZER_SPM ? model::TokenizerKind::Spm : model::TokenizerKind::Bpe;
    model::PreTokenizerSpec spec;
    model::pre_tokenizer_named(d->pre_tokenizer == TC_PRE_TOKENIZER_LLAMA3 ? "llama-bpe" : "gpt-2", &spec);
    v.pre = spec.pre;
    v.ignore_merges = spec.ignore_merges;
    v.bos = d->bos_id, v.eos = d->eos_id, v.unk = d->unk_id;
    v.add_bos = v.kind == model::TokenizerKind::Spm ? d->bos_id >= 0 : spec.add_bos && d->bos_id >= 0;
    v.add_space_prefix = d->add_space_prefix != 0;
    return make(std::move(v), out);
  });
}

tc_status tc_tokenizer_create2(const tc_tokenizer_desc2* d, tc_tokenizer* out) {
  return guarded("tc_tokenizer_create2", [&] {
    const char* fn = "tc_tokenizer_create2";
    if (!d) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (d->struct_size < sizeof(tc_tokenizer_desc2))
      return fail(TC_ERR_INVALID_ARG, "%s: struct_size %u is smaller than %zu", fn, d->struct_size,
                  sizeof(tc_tokenizer_desc2));
    if (d->kind != TC_TOKENIZER_SPM && d->kind != TC_TOKENIZER_BPE)
      return fail(TC_ERR_UNSUPPORTED, "%s: tokenizer kind %d (expected SPM=0 or BPE=1)", fn, d->kind);
    for (const auto& [name, x] : {std::make_pair("add_bos", d->add_bos), std::make_pair("add_eos", d->add_eos),
                                  std::make_pair("add_space_prefix", d->add_space_prefix)})
      if (x < -1 || x > 1) return fail(TC_ERR_INVALID_ARG, "%s: %s = %d (expected -1, 0 or 1)", fn, name, x);
    model::Vocab v;
    if (tc_status st = read_arrays(fn, d->n_tokens, d->tokens, d->scores, d->token_types, d->n_merges, d->merges, &v))
      return st;
    v.kind = d->kind == TC_TOKENIZER_SPM ? model::TokenizerKind::Spm : model::TokenizerKind::Bpe;
    model::PreTokenizerSpec spec;
    if (v.kind == model::TokenizerKind::Bpe) {
      const char* pre = d->pre_tokenizer ? d->pre_tokenizer : "default";
      if (!model::pre_tokenizer_named(pre, &spec))
        return fail(TC_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not a pre-tokenizer this library runs (%s)",
                    fn, pre, model::pre_tokenizer_names());
    }
    v.pre = spec.pre;
    v.ignore_merges = spec.ignore_merges;
    v.bos = d->bos_id, v.eos = d->eos_id, v.unk = d->unk_id, v.eot = d->eot_id, v.eom = d->eom_id;
    const bool bos_default = v.kind == model::TokenizerKind::Spm || spec.add_bos;
    v.add_bos = d->add_bos < 0 ? bos_default && d->bos_id >= 0 : d->add_bos == 1;
    v.add_eos = d->add_eos == 1;
    v.add_space_prefix = d->add_space_prefix != 0;
    return make(std::move(v), out);
  });
}

tc_status tc_tokenizer_create_from_gguf(tc_gguf g, tc_tokenizer* out) {
  return guarded("tc_tokenizer_create_from_gguf", [&] {
    const char* fn = "tc_tokenizer_create_from_gguf";
    const gguf::File* f = nullptr;
    if (tc_status st = gguf_file_of(fn, g, &f)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    return tokenizer_from_gguf(*f, out, nullptr);
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

tc_status tc_tokenizer_get_info(tc_tokenizer t, tc_tokenizer_info* out) {
  return guarded("tc_tokenizer_get_info", [&] {
    const char* fn = "tc_tokenizer_get_info";
    if (tc_status st = check_tokenizer(fn, t)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (out->struct_size < sizeof(tc_tokenizer_info))
      return fail(TC_ERR_INVALID_ARG, "%s: struct_size %u is smaller than %zu", fn, out->struct_size,
                  sizeof(tc_tokenizer_info));
    const model::Vocab& v = t->impl->vocab();
    tc_tokenizer_info info{};
    info.struct_size = sizeof info;
    info.kind = v.kind == model::TokenizerKind::Spm ? TC_TOKENIZER_SPM : TC_TOKENIZER_BPE;
    info.n_tokens = t->impl->size();
    info.bos_id = v.bos, info.eos_id = v.eos, info.unk_id = v.unk, info.eot_id = v.eot, info.eom_id = v.eom;
    info.add_bos = v.add_bos, info.add_eos = v.add_eos, info.add_space_prefix = v.add_space_prefix;
    info.n_eog = int64_t(t->impl->eog().size());
    if (v.kind == model::TokenizerKind::Bpe)
      std::snprintf(info.pre_tokenizer, sizeof info.pre_tokenizer, "%s", model::pre_tokenizer_label(v.pre));
    *out = info;
    return TC_OK;
  });
}

tc_status tc_tokenizer_eog_ids(tc_tokenizer t, int32_t* ids, int64_t capacity, int64_t* n_out) {
  return guarded("tc_tokenizer_eog_ids", [&] {
    const char* fn = "tc_tokenizer_eog_ids";
    if (tc_status st = check_tokenizer(fn, t)) return st;
    if (tc_status st = check_out_ptr(fn, "n_out", n_out)) return st;
    if (capacity < 0 || (capacity > 0 && !ids)) return fail(TC_ERR_INVALID_ARG, "%s: bad ids array", fn);
    const std::vector<int32_t>& eog = t->impl->eog();
    *n_out = int64_t(eog.size());
    if (int64_t(eog.size()) > capacity)
      return fail(TC_ERR_INVALID_ARG, "%s: %zu ids do not fit the capacity of %lld", fn, eog.size(), (long long)capacity);
    if (!eog.empty()) std::memcpy(ids, eog.data(), eog.size() * sizeof(int32_t));
    return TC_OK;
  });
}

tc_status tc_tokenizer_is_eog(tc_tokenizer t, int32_t id, int32_t* out) {
  return guarded("tc_tokenizer_is_eog", [&] {
    if (tc_status st = check_tokenizer("tc_tokenizer_is_eog", t)) return st;
    if (tc_status st = check_out_ptr("tc_tokenizer_is_eog", "out", out)) return st;
    *out = t->impl->is_eog(id) ? 1 : 0;
    return TC_OK;
  });
}

tc_status tc_tokenizer_token_attr(tc_tokenizer t, int32_t id, uint32_t* out) {
  return guarded("tc_tokenizer_token_attr", [&] {
    const char* fn = "tc_tokenizer_token_attr";
    if (tc_status st = check_tokenizer(fn, t)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (id < 0 || id >= t->impl->size())
      return fail(TC_ERR_INVALID_ARG, "%s: id %d outside [0, %lld)", fn, id, (long long)t->impl->size());
    *out = t->impl->token_attr(id);
    return TC_OK;
  });
}

tc_status tc_tokenizer_encode2(tc_tokenizer t, const char* text, size_t len, uint32_t flags, int32_t* ids,
                               int64_t capacity, int64_t* n_out) {
  return guarded("tc_tokenizer_encode2",
                 [&] { return encode("tc_tokenizer_encode2", t, text, len, flags, ids, capacity, n_out); });
}

tc_status tc_tokenizer_encode(tc_tokenizer t, const char* text, size_t len, int32_t add_bos, int32_t* ids,
                              int64_t capacity, int64_t* n_out) {
  return guarded("tc_tokenizer_encode", [&] {
    return encode("tc_tokenizer_encode", t, text, len, add_bos ? TC_ENCODE_FORCE_BOS : 0u, ids, capacity, n_out);
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
