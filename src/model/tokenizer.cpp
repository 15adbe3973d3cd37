#include "model/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <queue>
#include <string_view>

#include "core/error.h"

namespace tc {
namespace model {
namespace {

// llama.cpp's token attributes (the values of TC_TOKEN_ATTR_*).
enum Attr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
};

uint32_t attr_of_type(int32_t type) {
  switch (type) {
    case kNormal: return kAttrNormal;
    case kUnknown: return kAttrUnknown;
    case kControl: return kAttrControl;
    case kUserDefined: return kAttrUserDefined;
    case kUnused: return kAttrUnused;
    case kByte: return kAttrByte;
    default: return kAttrUndefined;
  }
}

const char kSpaceMark[] = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space
#define FW_BAR "\xef\xbd\x9c"                // U+FF5C, DeepSeek's fullwidth bar
#define SPM_SP "\xe2\x96\x81"

// Token texts llama.cpp recognises (llama_vocab::impl::load).
const char* const kEotTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                 "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                 "<" FW_BAR "end" SPM_SP "of" SPM_SP "sentence" FW_BAR ">", "<end_of_utterance>"};
const char* const kEomTexts[] = {"<|eom_id|>"};
const char* const kFimPreTexts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" FW_BAR "fim" SPM_SP "begin" FW_BAR ">",
                                    "<PRE>", SPM_SP "<PRE>", "<|code_prefix|>", "<|prefix|>"};
const char* const kFimSufTexts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" FW_BAR "fim" SPM_SP "hole" FW_BAR ">",
                                    "<SUF>", SPM_SP "<SUF>", "<|code_suffix|>", "<|suffix|>"};
const char* const kFimMidTexts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" FW_BAR "fim" SPM_SP "end" FW_BAR ">",
                                    "<MID>", SPM_SP "<MID>", "<|code_middle|>", "<|middle|>"};
const char* const kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const char* const kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
const char* const kFimSepTexts[] = {"<|file_sep|>"};
const char* const kEogTexts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                 "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                 "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                 "<turn|>", "<|tool_response>",
                                 "<" FW_BAR "end" SPM_SP "of" SPM_SP "sentence" FW_BAR ">", "[e~["};
const char* const kAlwaysUserDefined[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};

// A token for a message: at most 40 bytes, control bytes escaped.
std::string shown(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 40; ++i) {
    unsigned char c = s[i];
    if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02X", c);
      out += b;
    } else {
      out.push_back(char(c));
    }
  }
  if (s.size() > 40) out += "...";
  return out;
}

// llama.cpp's unicode_len_utf8: the length a lead byte announces.
size_t utf8_len(char c) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[uint8_t(c) >> 4];
}

struct Symbol {
  int prev, next;
  size_t pos, n;  // bytes [pos, pos + n) of the text
};

}  // namespace

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {
  const size_t n = vocab_.tokens.size();
  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) ids_.emplace(vocab_.tokens[i], int32_t(i));
  for (size_t i = 0; i < vocab_.merges.size(); ++i) {
    const std::string& m = vocab_.merges[i];
    size_t sp = m.find(' ', 1);
    ranks_.emplace(std::make_pair(m.substr(0, sp), m.substr(sp + 1)), int32_t(i));  // the first rank wins
  }
  attrs_.assign(n, kAttrNormal);
  if (!vocab_.types.empty())
    for (size_t i = 0; i < n; ++i) attrs_[i] = attr_of_type(vocab_.types[i]);
  find_special_tokens();
}

// llama.cpp's special tokens, in its order: eot, eom and FIM ids by text
// (made control tokens), end-of-generation tokens by text (made control
// tokens), gpt-oss's always-rendered tokens, eos/eot/eom, the <|end|> and
// </s> exceptions, then the special-token cache longest text first. Where
// llama.cpp takes the first of several candidates in hash order, the lowest
// id is taken here.
void Tokenizer::find_special_tokens() {
  auto by_text = [&](int32_t* id, const auto& texts) {
    if (*id >= 0) return;
    int32_t best = -1;
    for (const char* t : texts) {
      int32_t i = find(t);
      if (i >= 0 && (best < 0 || i < best)) best = i;
    }
    if (best >= 0) {
      *id = best;
      attrs_[size_t(best)] |= kAttrControl;
    }
  };
  by_text(&vocab_.eot, kEotTexts);
  by_text(&vocab_.eom, kEomTexts);
  by_text(&vocab_.fim_pre, kFimPreTexts);
  by_text(&vocab_.fim_suf, kFimSufTexts);
  by_text(&vocab_.fim_mid, kFimMidTexts);
  by_text(&vocab_.fim_pad, kFimPadTexts);
  by_text(&vocab_.fim_rep, kFimRepTexts);
  by_text(&vocab_.fim_sep, kFimSepTexts);

  // Control tokens named "unused" are unused ones too.
  for (size_t i = 0; i < attrs_.size(); ++i)
    if ((attrs_[i] & kAttrControl) && vocab_.tokens[i].find("unused") != std::string::npos) attrs_[i] |= kAttrUnused;

  std::vector<int32_t> eog;
  for (int32_t id : {vocab_.fim_pad, vocab_.fim_rep, vocab_.fim_sep})
    if (id >= 0) eog.push_back(id);
  for (const char* t : kEogTexts) {
    int32_t i = find(t);
    if (i >= 0) {
      eog.push_back(i);
      attrs_[size_t(i)] |= kAttrControl;
    }
  }
  for (const char* t : kAlwaysUserDefined) {
    int32_t i = find(t);
    if (i >= 0) attrs_[size_t(i)] = kAttrUserDefined;
  }
  for (int32_t id : {vocab_.eos, vocab_.eot, vocab_.eom})
    if (id >= 0) eog.push_back(id);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  auto text_in_eog = [&](const char* t) {
    int32_t i = find(t);
    return i >= 0 && std::binary_search(eog.begin(), eog.end(), i) ? i : -1;
  };
  // gpt-oss and solar-open: <|end|> ends a message, not the generation.
  int32_t end = text_in_eog("<|end|>");
  bool has_return = text_in_eog("<|return|>") >= 0, has_flush = text_in_eog("<|flush|>") >= 0;
  bool has_call = text_in_eog("<|call|>") >= 0 || text_in_eog("<|calls|>") >= 0;
  if (end >= 0 && ((has_return && has_call) || (has_call && has_flush))) {
    eog.erase(std::find(eog.begin(), eog.end(), end));
    attrs_[size_t(end)] = kAttrUserDefined;
  }
  // gemma4 and plamo: </s> is a normal token.
  int32_t s = text_in_eog("</s>");
  if (s >= 0 && (text_in_eog("<|tool_response>") >= 0 || text_in_eog("<|plamo:eos|>") >= 0)) {
    eog.erase(std::find(eog.begin(), eog.end(), s));
    attrs_[size_t(s)] = kAttrNormal;
  }
  eog_ = std::move(eog);

  for (size_t i = 0; i < attrs_.size(); ++i)
    if (attrs_[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_.push_back(int32_t(i));
  std::stable_sort(special_.begin(), special_.end(), [&](int32_t a, int32_t b) {
    return vocab_.tokens[size_t(a)].size() > vocab_.tokens[size_t(b)].size();
  });
}

tc_status Tokenizer::create(Vocab v, Tokenizer** out) {
  const int64_t n = int64_t(v.tokens.size());
  if (n == 0) return fail(TC_ERR_INVALID_ARG, "tokenizer: tokenizer.ggml.tokens is empty");
  if (n > INT32_MAX) return fail(TC_ERR_CORRUPT, "tokenizer: %lld tokens do not fit int32 ids", (long long)n);
  if (!v.scores.empty() && int64_t(v.scores.size()) != n)
    return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.scores has %zu scores for %lld tokens", v.scores.size(),
                (long long)n);
  if (!v.types.empty() && int64_t(v.types.size()) != n)
    return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.token_type has %zu types for %lld tokens", v.types.size(),
                (long long)n);
  const std::pair<const char*, int32_t> ids[] = {
      {"bos_token_id", v.bos},         {"eos_token_id", v.eos},         {"unknown_token_id", v.unk},
      {"eot_token_id", v.eot},         {"eom_token_id", v.eom},         {"fim_pre_token_id", v.fim_pre},
      {"fim_suf_token_id", v.fim_suf}, {"fim_mid_token_id", v.fim_mid}, {"fim_pad_token_id", v.fim_pad},
      {"fim_rep_token_id", v.fim_rep}, {"fim_sep_token_id", v.fim_sep}};
  for (const auto& [key, id] : ids)
    if (id < -1 || id >= n)
      return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.%s = %d is outside the vocabulary of %lld tokens", key, id,
                  (long long)n);
  if (v.add_bos && v.bos < 0)
    return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
  if (v.add_eos && v.eos < 0)
    return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.add_eos_token is true but there is no eos_token_id");
  // llama.cpp reads an empty token as "[EMPTY_<id>]".
  for (int64_t i = 0; i < n; ++i)
    if (v.tokens[size_t(i)].empty()) v.tokens[size_t(i)] = "[EMPTY_" + std::to_string(i) + "]";
  {
    std::unordered_map<std::string_view, int64_t> seen;
    seen.reserve(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      auto [it, fresh] = seen.emplace(v.tokens[size_t(i)], i);
      if (!fresh)
        return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.tokens[%lld] '%s' repeats token %lld", (long long)i,
                    shown(v.tokens[size_t(i)]).c_str(), (long long)it->second);
    }
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const std::string& m = v.merges[i];
      size_t sp = m.find(' ', 1);
      if (sp == std::string::npos)
        return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.merges[%zu] '%s' is not 'left right'", i,
                    shown(m).c_str());
      const std::string parts[] = {m.substr(0, sp), m.substr(sp + 1)};
      for (const std::string& part : parts)
        if (!seen.count(part))
          return fail(TC_ERR_CORRUPT, "tokenizer: tokenizer.ggml.merges[%zu] '%s' refers to '%s', which is not a token",
                      i, shown(m).c_str(), shown(part).c_str());
    }
  }
  if (v.kind == TokenizerKind::Bpe && v.merges.empty())
    return fail(TC_ERR_CORRUPT, "tokenizer: a BPE vocabulary needs tokenizer.ggml.merges");
  *out = new Tokenizer(std::move(v));
  return TC_OK;
}

int32_t Tokenizer::find(const std::string& piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

bool Tokenizer::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }


// llama.cpp's tokenizer_st_partition: for each special token, longest first,
// every occurrence in the text not yet cut out becomes that token's id.
// Fragments: (id, "") for a token, (-1, text) for text.
void Tokenizer::partition(const std::string& text, bool parse_special,
                          std::vector<std::pair<int32_t, std::string>>* frags) const {
  struct Frag {
    int32_t id;
    size_t off, len;
  };
  std::vector<Frag> cur{{-1, 0, text.size()}}, next;
  const std::string_view all(text);
  for (int32_t id : special_) {
    if (!parse_special && (attrs_[size_t(id)] & (kAttrControl | kAttrUnknown))) continue;
    const std::string& tok = vocab_.tokens[size_t(id)];
    bool hit = false;
    next.clear();
    for (const Frag& f : cur) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, end = f.off + f.len;
      for (;;) {
        size_t m = all.substr(0, end).find(tok, off);
        if (m == std::string_view::npos) break;
        hit = true;
        if (m > off) next.push_back({-1, off, m - off});
        next.push_back({id, m, tok.size()});
        off = m + tok.size();
      }
      if (off < end) next.push_back({-1, off, end - off});
    }
    if (hit) cur.swap(next);
  }
  for (const Frag& f : cur) frags->emplace_back(f.id, f.id >= 0 ? std::string() : text.substr(f.off, f.len));
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, const EncodeOptions& opt) const {
  std::vector<int32_t> out;
  std::vector<std::pair<int32_t, std::string>> frags;
  if (!text.empty()) partition(text, opt.parse_special, &frags);
  if (opt.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool prev_special = true;  // SPM: a space is prefixed at the start and after a special token
  for (const auto& [id, piece] : frags) {
    if (id >= 0) {
      out.push_back(id);
      prev_special = true;
      continue;
    }
    if (vocab_.kind == TokenizerKind::Spm) {
      std::string t = vocab_.add_space_prefix && prev_special ? kSpaceMark : "";
      for (char c : piece) {
        if (c == ' ') t += kSpaceMark;
        else t.push_back(c);
      }
      encode_spm(t, &out);
    } else {
      encode_bpe(piece, &out);
    }
    prev_special = false;
  }
  if (opt.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

int32_t Tokenizer::spm_byte(uint8_t b) const {
  char name[8];
  std::snprintf(name, sizeof name, "<0x%02X>", b);
  int32_t id = find(name);
  if (id < 0) id = find(std::string(1, char(b)));
  return id;
}

// llama.cpp's llm_tokenizer_spm_session: start from UTF-8 characters,
// repeatedly merge the adjacent pair whose concatenation is a token with the
// highest score (leftmost on a tie), then emit the pieces; a piece that is no
// token is split back along its merges, and a character falls back to bytes.
void Tokenizer::encode_spm(const std::string& text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<Symbol> syms;
  for (size_t off = 0; off < text.size();) {
    size_t len = std::min(utf8_len(text[off]), text.size() - off);
    int idx = int(syms.size());
    syms.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
    off += len;
  }
  struct Bigram {
    int left, right;
    float score;
    size_t size;
  };
  auto worse = [](const Bigram& l, const Bigram& r) {
    return l.score < r.score || (l.score == r.score && l.left > r.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  std::map<std::string, std::pair<int, int>> rev_merge;
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    std::string piece = text.substr(syms[size_t(l)].pos, syms[size_t(l)].n + syms[size_t(r)].n);
    int32_t id = find(piece);
    if (id < 0) return;
    queue.push({l, r, vocab_.scores.empty() ? 0.0f : vocab_.scores[size_t(id)], piece.size()});
    rev_merge[piece] = {l, r};
  };
  for (size_t i = 1; i < syms.size(); ++i) try_pair(int(i - 1), int(i));
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Symbol &l = syms[size_t(b.left)], &r = syms[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[size_t(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  auto resegment = [&](auto& self, const Symbol& s) -> void {
    std::string piece = text.substr(s.pos, s.n);
    int32_t id = find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
    auto it = rev_merge.find(piece);
    if (it == rev_merge.end()) {
      for (char c : piece) {
        int32_t b = spm_byte(uint8_t(c));
        if (b >= 0) out->push_back(b);
        else if (vocab_.unk >= 0) out->push_back(vocab_.unk);  // llama.cpp fails here
      }
      return;
    }
    self(self, syms[size_t(it->second.first)]);
    self(self, syms[size_t(it->second.second)]);
  };
  for (int i = 0; i != -1; i = syms[size_t(i)].next) resegment(resegment, syms[size_t(i)]);
}

// llama.cpp's llm_tokenizer_bpe_session: each pre-token (byte-encoded) is
// split into UTF-8 characters, the adjacent pair of lowest merge rank is
// merged (leftmost on a tie) until none is a merge; a piece that is no token
// falls back to the tokens of its single bytes.
void Tokenizer::encode_bpe(const std::string& text, std::vector<int32_t>* out) const {
  for (const std::string& word : pre_tokenize(text, vocab_.pre)) {
    if (vocab_.ignore_merges) {
      int32_t id = find(word);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
    }
    std::vector<Symbol> syms;
    for (size_t off = 0; off < word.size();) {
      size_t len = std::min(utf8_len(word[off]), word.size() - off);
      int idx = int(syms.size());
      syms.push_back({idx - 1, off + len == word.size() ? -1 : idx + 1, off, len});
      off += len;
    }
    struct Bigram {
      int left, right;
      std::string text;
      int32_t rank;
    };
    auto worse = [](const Bigram& l, const Bigram& r) {
      return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto add_pair = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      std::string a = word.substr(syms[size_t(l)].pos, syms[size_t(l)].n);
      std::string b = word.substr(syms[size_t(r)].pos, syms[size_t(r)].n);
      auto it = ranks_.find({a, b});
      if (it == ranks_.end()) return;
      queue.push({l, r, a + b, it->second});
    };
    for (size_t i = 1; i < syms.size(); ++i) add_pair(int(i - 1), int(i));
    while (!queue.empty()) {
      Bigram b = queue.top();
      queue.pop();
      Symbol &l = syms[size_t(b.left)], &r = syms[size_t(b.right)];
      if (l.n == 0 || r.n == 0) continue;
      if (word.compare(l.pos, l.n, b.text, 0, l.n) != 0 || l.n + r.n != b.text.size() ||
          word.compare(r.pos, r.n, b.text, l.n, r.n) != 0)
        continue;  // outdated
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) syms[size_t(r.next)].prev = b.left;
      add_pair(l.prev, b.left);
      add_pair(b.left, l.next);
    }
    for (const Symbol& s : syms) {
      if (s.n == 0) continue;
      std::string piece = word.substr(s.pos, s.n);
      int32_t id = find(piece);
      if (id >= 0) {
        out->push_back(id);
        continue;
      }
      for (char c : piece) {  // the bytes of the encoded piece, as llama.cpp looks them up
        int32_t b = find(std::string(1, c));
        if (b >= 0) out->push_back(b);
      }
    }
  }
}

// llama.cpp's token_to_piece without special tokens: control and unknown
// tokens render as nothing, user-defined ones as their text, byte tokens as
// their byte; SPM pieces show U+2581 as a space (the one SentencePiece put in
// front of the text is dropped), byte-level ones map back to their bytes.
std::string Tokenizer::decode(const int32_t* ids, int64_t n) const {
  std::string out;
  bool first_piece = true;
  for (int64_t k = 0; k < n; ++k) {
    int32_t id = ids[k];
    if (id < 0 || id >= size()) continue;
    const uint32_t attr = attrs_[size_t(id)];
    const std::string& piece = vocab_.tokens[size_t(id)];
    std::string text;
    if (attr & (kAttrControl | kAttrUnknown)) {
      continue;
    } else if (attr & kAttrUserDefined) {
      text = piece;
    } else if (attr & kAttrNormal) {
      if (vocab_.kind == TokenizerKind::Spm) {
        for (size_t i = 0; i < piece.size();) {
          if (piece.compare(i, 3, kSpaceMark) == 0) {
            text.push_back(' ');
            i += 3;
          } else {
            text.push_back(piece[i++]);
          }
        }
        if (first_piece && vocab_.add_space_prefix && !text.empty() && text[0] == ' ') text.erase(0, 1);
      } else {
        std::vector<uint32_t> cps = decode_utf8(piece);
        for (uint32_t cp : cps) {
          int b = byte_of_code_point(cp);
          if (b >= 0) text.push_back(char(b));
          else append_utf8(&text, cp);
        }
      }
    } else if (attr & kAttrByte) {
      unsigned byte;
      if (vocab_.kind == TokenizerKind::Spm && piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%2X>", &byte) == 1) {
        text.push_back(char(byte));
      } else {
        std::vector<uint32_t> cps = decode_utf8(piece);
        int b = cps.size() == 1 ? byte_of_code_point(cps[0]) : -1;
        if (b >= 0) text.push_back(char(b));
      }
    } else {
      continue;
    }
    out += text;
    first_piece = false;
  }
  return out;
}

}  // namespace model
}  // namespace tc
