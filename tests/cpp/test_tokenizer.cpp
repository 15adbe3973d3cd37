// The tokenizer's C entry points (include/tensorcore/tokenizer.h): a
// vocabulary from GGUF metadata (made byte by byte, gguf_bytes.h), special
// tokens in the text, BOS/EOS from the file, end-of-generation ids, the
// capacity protocol, and bad input for every entry point (right status, the
// key named, the caller's buffers as they were). Tokenization against
// llama.cpp itself is tests/python/test_tokenizer.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gguf_bytes.h"
#include "tensorcore/tensorcore.h"

using namespace gguf_test;

namespace {

// GPT-2's printable code point of each byte, as UTF-8.
std::string byte_piece(int b) {
  int n = 0, cp = b;
  bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  if (!printable) {
    for (int x = 0; x < b; ++x)
      if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  int32_t id(const std::string& t) const {
    return int32_t(std::find(tokens.begin(), tokens.end(), t) - tokens.begin());
  }
};

// 256 byte tokens, the merges of "hello" and " world", and three special
// tokens: <|im_start|> and <|im_end|> (control), <tool> (user-defined).
Vocab bpe_vocab() {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(byte_piece(b)), v.types.push_back(1);
  v.merges = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "l d", "\xC4\xA0wor ld"};
  for (const std::string& m : v.merges) {
    std::string t = m;
    t.erase(t.find(' '), 1);
    v.tokens.push_back(t), v.types.push_back(1);
  }
  for (auto [t, ty] : {std::pair<const char*, int>{"<|im_start|>", 3}, {"<|im_end|>", 3}, {"<tool>", 4}})
    v.tokens.push_back(t), v.types.push_back(ty);
  return v;
}

struct Meta {
  std::string pre = "gpt-2";
  bool add_bos = false, add_eos = false;
  int64_t bos = -1, eos = -1, eot = -1;  // -1: no key
  bool types_as_f32 = false;
};

std::vector<uint8_t> gguf_of(const Vocab& v, const Meta& m) {
  Bytes h;
  uint64_t n_kv = 6 + (m.bos >= 0) + (m.eos >= 0) + (m.eot >= 0) + 2;
  h.u32(0x46554747u).u32(3).u64(0).u64(n_kv);
  h.str("general.architecture").u32(STRING).str("llama");
  h.str("tokenizer.ggml.model").u32(STRING).str("gpt2");
  h.str("tokenizer.ggml.pre").u32(STRING).str(m.pre);
  h.str("tokenizer.ggml.tokens").u32(ARRAY).u32(STRING).u64(v.tokens.size());
  for (const std::string& t : v.tokens) h.str(t);
  if (m.types_as_f32) {
    h.str("tokenizer.ggml.token_type").u32(ARRAY).u32(F32).u64(v.types.size());
    for (int32_t t : v.types) h.raw<float>(float(t));
  } else {
    h.str("tokenizer.ggml.token_type").u32(ARRAY).u32(I32).u64(v.types.size());
    for (int32_t t : v.types) h.raw<int32_t>(t);
  }
  h.str("tokenizer.ggml.merges").u32(ARRAY).u32(STRING).u64(v.merges.size());
  for (const std::string& mg : v.merges) h.str(mg);
  if (m.bos >= 0) h.str("tokenizer.ggml.bos_token_id").u32(U32).u32(uint32_t(m.bos));
  if (m.eos >= 0) h.str("tokenizer.ggml.eos_token_id").u32(U32).u32(uint32_t(m.eos));
  if (m.eot >= 0) h.str("tokenizer.ggml.eot_token_id").u32(U32).u32(uint32_t(m.eot));
  h.str("tokenizer.ggml.add_bos_token").u32(BOOL).u8(m.add_bos);
  h.str("tokenizer.ggml.add_eos_token").u32(BOOL).u8(m.add_eos);
  h.pad_to(32);
  return h.b;
}

// The tokenizer of a file, or the failing status and its detail.
tc_status from_gguf(const std::vector<uint8_t>& bytes, tc_tokenizer* out, std::string* detail) {
  tc_gguf g = nullptr;
  tc_status st = tc_gguf_open_memory(bytes.data(), bytes.size(), &g);
  if (st == TC_OK) st = tc_tokenizer_create_from_gguf(g, out);
  *detail = tc_last_error_detail();
  if (g) EXPECT_EQ(tc_gguf_close(g), TC_OK);
  return st;
}

std::vector<int32_t> encode(tc_tokenizer t, const std::string& text, uint32_t flags) {
  int64_t n = 0;
  EXPECT_EQ(tc_tokenizer_encode2(t, text.data(), text.size(), flags, nullptr, 0, &n),
            text.empty() && !(flags & (TC_ENCODE_ADD_SPECIAL | TC_ENCODE_FORCE_BOS)) ? TC_OK : TC_ERR_INVALID_ARG);
  std::vector<int32_t> ids(size_t(std::max<int64_t>(n, 1)), -7);
  int64_t m = -1;
  EXPECT_EQ(tc_tokenizer_encode2(t, text.data(), text.size(), flags, ids.data(), n, &m), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(m, n);
  ids.resize(size_t(n));
  return ids;
}

}  // namespace

TEST(Tokenizer, GgufVocabularySpecialTokensAndBosEos) {
  Vocab v = bpe_vocab();
  const int32_t start = v.id("<|im_start|>"), end = v.id("<|im_end|>"), tool = v.id("<tool>");
  Meta m;
  m.bos = start, m.eos = end, m.add_bos = true, m.add_eos = true;
  tc_tokenizer t = nullptr;
  std::string detail;
  ASSERT_EQ(from_gguf(gguf_of(v, m), &t, &detail), TC_OK) << detail;
  tc_tokenizer_info info{};
  info.struct_size = sizeof info;
  ASSERT_EQ(tc_tokenizer_get_info(t, &info), TC_OK);
  EXPECT_EQ(info.kind, TC_TOKENIZER_BPE);
  EXPECT_EQ(info.n_tokens, int64_t(v.tokens.size()));
  EXPECT_EQ(info.bos_id, start);
  EXPECT_EQ(info.eos_id, end);
  EXPECT_EQ(info.eot_id, end);  // found by its text
  EXPECT_EQ(info.add_bos, 1);
  EXPECT_EQ(info.add_eos, 1);
  EXPECT_STREQ(info.pre_tokenizer, "gpt-2");

  const int32_t hello = v.id("hello"), world = v.id("\xC4\xA0world");
  EXPECT_EQ(encode(t, "hello world", 0), (std::vector<int32_t>{hello, world}));
  EXPECT_EQ(encode(t, "hello world", TC_ENCODE_ADD_SPECIAL), (std::vector<int32_t>{start, hello, world, end}));
  EXPECT_EQ(encode(t, "hello world", TC_ENCODE_ADD_SPECIAL | TC_ENCODE_NO_BOS | TC_ENCODE_NO_EOS),
            (std::vector<int32_t>{hello, world}));
  EXPECT_EQ(encode(t, "hello", TC_ENCODE_FORCE_BOS), (std::vector<int32_t>{start, hello}));
  // Control tokens' text becomes their ids only with PARSE_SPECIAL; user-defined ones always.
  const std::string chat = "<|im_start|>hello<tool><|im_end|>";
  EXPECT_EQ(encode(t, chat, TC_ENCODE_PARSE_SPECIAL), (std::vector<int32_t>{start, hello, tool, end}));
  std::vector<int32_t> plain = encode(t, chat, 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), start), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), tool), 1);
  // The first entry point: add_bos forces a BOS, nothing else is added.
  int32_t ids[4] = {-1, -1, -1, -1};
  int64_t n = 0;
  ASSERT_EQ(tc_tokenizer_encode(t, "hello", 5, 1, ids, 4, &n), TC_OK);
  EXPECT_EQ(n, 2);
  EXPECT_EQ(ids[0], start);
  EXPECT_EQ(ids[1], hello);

  int32_t eog[4] = {-1, -1, -1, -1};
  ASSERT_EQ(tc_tokenizer_eog_ids(t, eog, 4, &n), TC_OK);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(eog[0], end);
  int32_t is = -1;
  ASSERT_EQ(tc_tokenizer_is_eog(t, end, &is), TC_OK);
  EXPECT_EQ(is, 1);
  ASSERT_EQ(tc_tokenizer_is_eog(t, start, &is), TC_OK);
  EXPECT_EQ(is, 0);
  uint32_t attr = 0;
  ASSERT_EQ(tc_tokenizer_token_attr(t, tool, &attr), TC_OK);
  EXPECT_EQ(attr, TC_TOKEN_ATTR_USER_DEFINED);
  ASSERT_EQ(tc_tokenizer_token_attr(t, hello, &attr), TC_OK);
  EXPECT_EQ(attr, TC_TOKEN_ATTR_NORMAL);
  EXPECT_EQ(tc_tokenizer_free(t), TC_OK);
}

TEST(Tokenizer, EotKeyJoinsTheEndOfGeneration) {
  Vocab v = bpe_vocab();
  Meta m;
  m.eos = v.id("<|im_end|>"), m.eot = v.id("<tool>");
  tc_tokenizer t = nullptr;
  std::string detail;
  ASSERT_EQ(from_gguf(gguf_of(v, m), &t, &detail), TC_OK) << detail;
  int32_t eog[4];
  int64_t n = 0;
  ASSERT_EQ(tc_tokenizer_eog_ids(t, eog, 4, &n), TC_OK);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(eog[0], v.id("<|im_end|>"));
  EXPECT_EQ(eog[1], v.id("<tool>"));
  EXPECT_EQ(tc_tokenizer_free(t), TC_OK);
}

TEST(Tokenizer, InconsistentMetadataIsRefusedByKey) {
  struct Case {
    const char* what;
    Vocab v;
    Meta m;
    tc_status status;
    const char* words[2];
  };
  std::vector<Case> cases;
  {
    Case c{"unknown pre-tokenizer", bpe_vocab(), Meta{}, TC_ERR_UNSUPPORTED, {"tokenizer.ggml.pre", "'gpt2'"}};
    c.m.pre = "gpt2";  // llama.cpp's name is "gpt-2"
    cases.push_back(c);
  }
  {
    Case c{"types too short", bpe_vocab(), Meta{}, TC_ERR_CORRUPT, {"tokenizer.ggml.token_type", "types"}};
    c.v.types.pop_back();
    cases.push_back(c);
  }
  {
    Case c{"types as floats", bpe_vocab(), Meta{}, TC_ERR_CORRUPT, {"tokenizer.ggml.token_type", "i32"}};
    c.m.types_as_f32 = true;
    cases.push_back(c);
  }
  {
    Case c{"merge of a missing token", bpe_vocab(), Meta{}, TC_ERR_CORRUPT, {"tokenizer.ggml.merges[9]", "'zz'"}};
    c.v.merges.push_back("h zz");
    cases.push_back(c);
  }
  {
    Case c{"bos out of range", bpe_vocab(), Meta{}, TC_ERR_CORRUPT, {"tokenizer.ggml.bos_token_id", "outside"}};
    c.m.bos = int64_t(c.v.tokens.size());
    cases.push_back(c);
  }
  {
    Case c{"a token twice", bpe_vocab(), Meta{}, TC_ERR_CORRUPT, {"tokenizer.ggml.tokens", "repeats"}};
    c.v.tokens.back() = "hello";
    cases.push_back(c);
  }
  for (Case& c : cases) {
    tc_tokenizer t = reinterpret_cast<tc_tokenizer>(0x1);
    std::string detail;
    tc_status st = from_gguf(gguf_of(c.v, c.m), &t, &detail);
    EXPECT_EQ(st, c.status) << c.what << ": " << detail;
    for (const char* w : c.words) EXPECT_NE(detail.find(w), std::string::npos) << c.what << ": " << detail;
    EXPECT_EQ(t, reinterpret_cast<tc_tokenizer>(0x1)) << c.what;  // the caller's handle as it was
  }
}

TEST(Tokenizer, BadCallsAreRefusedAndLeaveBuffers) {
  const char* toks[] = {"a", "b", "ab", "<s>"};
  const char* merges[] = {"a b"};
  tc_tokenizer_desc2 d{};
  d.struct_size = sizeof d;
  d.kind = TC_TOKENIZER_BPE;
  d.pre_tokenizer = "llama-bpe";
  d.n_tokens = 4, d.tokens = toks, d.n_merges = 1, d.merges = merges;
  d.bos_id = 3, d.eos_id = -1, d.unk_id = -1, d.eot_id = -1, d.eom_id = -1;
  d.add_bos = -1, d.add_eos = -1, d.add_space_prefix = -1;
  tc_tokenizer t = nullptr;
  ASSERT_EQ(tc_tokenizer_create2(&d, &t), TC_OK) << tc_last_error_detail();

  // Descriptions.
  tc_tokenizer u = nullptr;
  EXPECT_EQ(tc_tokenizer_create2(nullptr, &u), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_create2(&d, nullptr), TC_ERR_INVALID_ARG);
  tc_tokenizer_desc2 e = d;
  e.struct_size = 8;
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_INVALID_ARG);
  e = d, e.kind = 7;
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_UNSUPPORTED);
  e = d, e.add_bos = 2;
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_INVALID_ARG);
  e = d, e.pre_tokenizer = "no-such-pre";
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(tc_last_error_detail()).find("no-such-pre"), std::string::npos);
  const char* with_null[] = {"a", nullptr, "ab", "<s>"};
  e = d, e.tokens = with_null;
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_INVALID_ARG);
  e = d, e.n_merges = 1, e.merges = nullptr;
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_INVALID_ARG);
  e = d, e.eot_id = 9;
  EXPECT_EQ(tc_tokenizer_create2(&e, &u), TC_ERR_CORRUPT);
  EXPECT_EQ(u, nullptr);
  EXPECT_EQ(tc_tokenizer_create_from_gguf(nullptr, &u), TC_ERR_INVALID_ARG);

  // Encode: the caller's array untouched on every failure.
  int32_t ids[4] = {-5, -5, -5, -5};
  int64_t n = -9;
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, 64u, ids, 4, &n), TC_ERR_INVALID_ARG);  // unknown flag
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, TC_ENCODE_FORCE_BOS | TC_ENCODE_NO_BOS, ids, 4, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, TC_ENCODE_FORCE_EOS | TC_ENCODE_NO_EOS, ids, 4, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_encode2(t, nullptr, 2, 0, ids, 4, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, 0, nullptr, 4, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, 0, ids, -1, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, 0, ids, 4, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_encode2(t, "abab", 4, TC_ENCODE_ADD_SPECIAL, ids, 2, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(n, 3);  // the count needed: BOS (llama-bpe adds one by default) and two "ab"
  for (int32_t x : ids) EXPECT_EQ(x, -5);
  ASSERT_EQ(tc_tokenizer_encode2(t, "abab", 4, TC_ENCODE_ADD_SPECIAL, ids, 3, &n), TC_OK);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 2);
  EXPECT_EQ(ids[2], 2);
  EXPECT_EQ(ids[3], -5);

  // Queries.
  tc_tokenizer_info info{};
  info.struct_size = 4;
  EXPECT_EQ(tc_tokenizer_get_info(t, &info), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_get_info(t, nullptr), TC_ERR_INVALID_ARG);
  uint32_t attr = 77;
  EXPECT_EQ(tc_tokenizer_token_attr(t, 4, &attr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_token_attr(t, -1, &attr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(attr, 77u);
  int32_t is = 5;
  ASSERT_EQ(tc_tokenizer_is_eog(t, 1000, &is), TC_OK);
  EXPECT_EQ(is, 0);
  EXPECT_EQ(tc_tokenizer_is_eog(t, 0, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_eog_ids(t, nullptr, 1, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_eog_ids(t, ids, -1, &n), TC_ERR_INVALID_ARG);

  // A freed tokenizer is no tokenizer.
  ASSERT_EQ(tc_tokenizer_free(t), TC_OK);
  EXPECT_EQ(tc_tokenizer_encode2(t, "ab", 2, 0, ids, 4, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_get_info(t, &info), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_eog_ids(t, ids, 4, &n), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_is_eog(t, 0, &is), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_token_attr(t, 0, &attr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_tokenizer_free(t), TC_ERR_INVALID_ARG);
}
