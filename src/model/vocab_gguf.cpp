// The vocabulary of a GGUF file, read as llama.cpp reads it
// (llama_vocab::impl::load):
//   tokenizer.ggml.model   "llama" -> SPM, "gpt2" -> byte-level BPE
//   tokenizer.ggml.pre     BPE: the pre-tokenizer (absent: "default")
//   tokenizer.ggml.tokens / scores (f32 or i32) / token_type (i32) / merges
//   tokenizer.ggml.{bos,eos,unknown,eot,eom}_token_id, fim_{pre,suf,mid,pad,rep,sep}_token_id
//                          (and the older prefix/suffix/middle_token_id)
//   tokenizer.ggml.add_bos_token / add_eos_token / add_space_prefix
// with llama.cpp's defaults where a key is absent: SPM bos 1, eos 2, unk 0,
// add_bos true, add_space_prefix true; BPE bos and eos 11 (GPT-2's
// "<|endoftext|>" position, kept as llama.cpp keeps it), add_bos as the
// pre-tokenizer says; add_eos false. A default id outside the vocabulary is
// no id. Where llama.cpp warns and carries on over a bad value (an id outside
// the vocabulary) the file is refused here, naming the key.
#include <cstring>
#include <string>

#include "core/error.h"
#include "gguf/file.h"
#include "model/tokenizer.h"

namespace tc {
namespace model {
namespace {

bool is_integer(int32_t t) {
  return t == gguf::kU8 || t == gguf::kI8 || t == gguf::kU16 || t == gguf::kI16 || t == gguf::kU32 ||
         t == gguf::kI32 || t == gguf::kU64 || t == gguf::kI64;
}

}  // namespace

tc_status vocab_from_gguf(const gguf::File& f, Vocab* out, bool* none) {
  const char* fn = "tokenizer";
  if (none) *none = false;
  Vocab v;
  auto kv_of = [&](const char* key) { return f.find_kv(key); };
  auto str = [&](const char* key, std::string* s) -> tc_status {
    const gguf::KeyValue* kv = kv_of(key);
    if (!kv) return TC_OK;
    if (kv->value.type != gguf::kString)
      return fail(TC_ERR_CORRUPT, "%s: %s is a %s, not a string", fn, key, gguf::value_type_name(kv->value.type));
    uint64_t len = 0;
    const char* p = f.string_at(kv->value.pos, &len);
    s->assign(p, len);
    return TC_OK;
  };
  auto flag = [&](const char* key, bool* b) -> tc_status {
    const gguf::KeyValue* kv = kv_of(key);
    if (!kv) return TC_OK;
    int64_t x = 0;
    if (kv->value.type != gguf::kBool || !f.scalar_i64(gguf::kBool, kv->value.pos, &x))
      return fail(TC_ERR_CORRUPT, "%s: %s is a %s, not a bool", fn, key, gguf::value_type_name(kv->value.type));
    *b = x != 0;
    return TC_OK;
  };

  const gguf::KeyValue* toks = kv_of("tokenizer.ggml.tokens");
  std::string model;
  if (tc_status st = str("tokenizer.ggml.model", &model)) return st;
  if (!toks || model == "no_vocab" || model == "none") {
    if (none) *none = true;
    return fail(TC_ERR_UNSUPPORTED, "%s: the file has no tokenizer.ggml.tokens vocabulary", fn);
  }
  if (toks->value.type != gguf::kArray || toks->value.elem_type != gguf::kString)
    return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.tokens is not an array of strings", fn);
  const uint64_t n = toks->value.count;
  if (n == 0) return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.tokens is empty", fn);
  if (n > uint64_t(INT32_MAX)) return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.tokens has %llu tokens", fn, (unsigned long long)n);

  PreTokenizerSpec spec;
  if (model == "llama") {
    v.kind = TokenizerKind::Spm;
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else if (model == "gpt2") {
    v.kind = TokenizerKind::Bpe;
    std::string pre = "default";
    if (tc_status st = str("tokenizer.ggml.pre", &pre)) return st;
    if (!pre_tokenizer_named(pre, &spec))
      return fail(TC_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not a pre-tokenizer this library runs (%s)", fn,
                  pre.c_str(), pre_tokenizer_names());
    v.pre = spec.pre;
    v.ignore_merges = spec.ignore_merges;
    v.add_bos = spec.add_bos;
    v.bos = 11, v.eos = 11;
    v.add_space_prefix = false;
  } else if (model.empty()) {
    return fail(TC_ERR_UNSUPPORTED, "%s: the file has tokenizer.ggml.tokens but no tokenizer.ggml.model", fn);
  } else {
    return fail(TC_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%s' is not supported (llama, gpt2)", fn, model.c_str());
  }
  for (int32_t* id : {&v.bos, &v.eos, &v.unk})
    if (*id >= int64_t(n)) *id = -1;

  v.tokens.resize(size_t(n));
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t len = 0;
    const char* s = f.string_at(toks->value.elems[size_t(i)], &len);
    v.tokens[size_t(i)].assign(s, len);
  }
  if (const gguf::KeyValue* kv = kv_of("tokenizer.ggml.scores")) {
    const gguf::Value& a = kv->value;
    if (a.type != gguf::kArray || (a.elem_type != gguf::kF32 && a.elem_type != gguf::kI32))
      return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.scores is not an array of f32 or i32", fn);
    if (a.count != n)
      return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.scores has %llu scores for %llu tokens", fn,
                  (unsigned long long)a.count, (unsigned long long)n);
    v.scores.resize(size_t(n));
    for (uint64_t i = 0; i < n; ++i) {
      double x = 0;
      f.scalar_f64(a.elem_type, a.pos + i * 4, &x);
      v.scores[size_t(i)] = float(x);
    }
  }
  if (const gguf::KeyValue* kv = kv_of("tokenizer.ggml.token_type")) {
    const gguf::Value& a = kv->value;
    if (a.type != gguf::kArray || a.elem_type != gguf::kI32)
      return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.token_type is not an array of i32", fn);
    if (a.count != n)
      return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.token_type has %llu types for %llu tokens", fn,
                  (unsigned long long)a.count, (unsigned long long)n);
    v.types.resize(size_t(n));
    for (uint64_t i = 0; i < n; ++i) {
      int64_t x = 0;
      f.scalar_i64(gguf::kI32, a.pos + i * 4, &x);
      v.types[size_t(i)] = int32_t(x);
    }
  }
  if (const gguf::KeyValue* kv = kv_of("tokenizer.ggml.merges")) {
    const gguf::Value& a = kv->value;
    if (a.type != gguf::kArray || a.elem_type != gguf::kString)
      return fail(TC_ERR_CORRUPT, "%s: tokenizer.ggml.merges is not an array of strings", fn);
    v.merges.resize(a.count);
    for (size_t i = 0; i < a.count; ++i) {
      uint64_t len = 0;
      const char* s = f.string_at(a.elems[i], &len);
      v.merges[i].assign(s, len);
    }
  } else if (v.kind == TokenizerKind::Bpe) {
    return fail(TC_ERR_CORRUPT, "%s: a gpt2 tokenizer needs tokenizer.ggml.merges", fn);
  }

  const std::pair<const char*, int32_t*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &v.bos},          {"tokenizer.ggml.eos_token_id", &v.eos},
      {"tokenizer.ggml.eot_token_id", &v.eot},          {"tokenizer.ggml.eom_token_id", &v.eom},
      {"tokenizer.ggml.unknown_token_id", &v.unk},      {"tokenizer.ggml.fim_pre_token_id", &v.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &v.fim_suf},  {"tokenizer.ggml.fim_mid_token_id", &v.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &v.fim_pad},  {"tokenizer.ggml.fim_rep_token_id", &v.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &v.fim_sep},  {"tokenizer.ggml.prefix_token_id", &v.fim_pre},
      {"tokenizer.ggml.suffix_token_id", &v.fim_suf},   {"tokenizer.ggml.middle_token_id", &v.fim_mid}};
  for (const auto& [key, id] : ids) {
    const gguf::KeyValue* kv = kv_of(key);
    if (!kv) continue;
    int64_t x = 0;
    if (!is_integer(kv->value.type) || !f.scalar_i64(kv->value.type, kv->value.pos, &x))
      return fail(TC_ERR_CORRUPT, "%s: %s is a %s, not an integer", fn, key, gguf::value_type_name(kv->value.type));
    if (x < 0 || x >= int64_t(n))
      return fail(TC_ERR_CORRUPT, "%s: %s = %lld is outside the vocabulary of %llu tokens", fn, key, (long long)x,
                  (unsigned long long)n);
    *id = int32_t(x);
  }
  if (tc_status st = flag("tokenizer.ggml.add_bos_token", &v.add_bos)) return st;
  if (tc_status st = flag("tokenizer.ggml.add_eos_token", &v.add_eos)) return st;
  if (tc_status st = flag("tokenizer.ggml.add_space_prefix", &v.add_space_prefix)) return st;
  // A default BOS the file never asked for is no reason to refuse it.
  if (v.add_bos && v.bos < 0 && !kv_of("tokenizer.ggml.add_bos_token")) v.add_bos = false;
  *out = std::move(v);
  return TC_OK;
}

}  // namespace model
}  // namespace tc
