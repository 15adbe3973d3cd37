#include "model/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"

namespace tc {
namespace model {
namespace {

struct CodeRange {
  uint32_t lo, hi;
};
#include "model/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&r)[N], uint32_t cp) {
  auto it = std::upper_bound(r, r + N, cp, [](uint32_t v, const CodeRange& x) { return v < x.lo; });
  return it != r && cp <= (it - 1)->hi;
}
bool is_letter(uint32_t c) { return c < 128 ? ((c | 32) - 'a' < 26u) : in_ranges(kLetterRanges, c); }
bool is_number(uint32_t c) { return c < 128 ? (c - '0' < 10u) : in_ranges(kNumberRanges, c); }
bool is_space(uint32_t c) { return in_ranges(kSpaceRanges, c); }

// One UTF-8 character at s[i]: its code point and byte length (an invalid
// byte counts as one character of its own).
uint32_t next_cp(const std::string& s, size_t i, size_t* len) {
  unsigned char c = s[i];
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > s.size()) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) {
    unsigned char cc = s[i + k];
    if ((cc >> 6) != 2) {
      n = 1;
      cp = c;
      break;
    }
    cp = (cp << 6) | (cc & 0x3f);
  }
  *len = n;
  return cp;
}

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xc0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xe0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(char(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(char(0xf0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(char(0x80 | (cp & 0x3f)));
  }
}

const char kSpaceMark[] = "\xe2\x96\x81";  // U+2581, SentencePiece's visible space

// Byte-level BPE shows every byte as a printable code point: printable
// Latin-1 bytes stand for themselves, the rest map to 256 + n in order.
struct ByteMap {
  uint32_t to_cp[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? b : 256 + extra++;
      to_byte[to_cp[b]] = uint8_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// Splits text into the pre-tokenizer's words (regex rules written out).
std::vector<std::string> pre_tokenize(const std::string& text, PreTokenizer pre) {
  std::vector<uint32_t> cps;
  std::vector<size_t> off;
  for (size_t i = 0, len; i < text.size(); i += len) {
    off.push_back(i);
    cps.push_back(next_cp(text, i, &len));
  }
  off.push_back(text.size());
  const size_t n = cps.size();
  auto lower = [](uint32_t c) { return c < 128 ? (c | 32) : c; };
  auto contraction = [&](size_t i, bool fold) -> size_t {  // length matched at a quote, or 0
    if (cps[i] != '\'' || i + 1 >= n) return 0;
    auto at = [&](size_t k) { return i + k < n ? (fold ? lower(cps[i + k]) : cps[i + k]) : 0u; };
    uint32_t a = at(1), b = at(2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    return 0;
  };
  auto run = [&](size_t i, auto pred, size_t max = SIZE_MAX) {
    size_t j = i;
    while (j < n && j - i < max && pred(cps[j])) ++j;
    return j;
  };
  auto other = [&](uint32_t c) { return !is_space(c) && !is_letter(c) && !is_number(c); };
  auto space_rule = [&](size_t i) {  // \s+(?!\S) | \s+
    size_t j = run(i, is_space);
    if (j < n && j - i >= 2) return j - 1;
    return j;
  };
  std::vector<std::string> words;
  size_t i = 0;
  while (i < n) {
    size_t end = 0;
    if (pre == PreTokenizer::Gpt2) {
      size_t k = contraction(i, false);
      if (k) {
        end = i + k;
      } else {
        size_t j = cps[i] == ' ' && i + 1 < n ? i + 1 : i;
        if (is_letter(cps[j])) end = run(j, is_letter);
        else if (is_number(cps[j])) end = run(j, is_number);
        else if (other(cps[j])) end = run(j, other);
        else end = space_rule(i);
      }
    } else {  // LLaMA-3
      size_t k = contraction(i, true);
      uint32_t c = cps[i];
      if (k) {
        end = i + k;
      } else if (is_letter(c)) {
        end = run(i, is_letter);
      } else if (c != '\r' && c != '\n' && !is_number(c) && i + 1 < n && is_letter(cps[i + 1])) {
        end = run(i + 1, is_letter);
      } else if (is_number(c)) {
        end = run(i, is_number, 3);
      } else {
        size_t j = c == ' ' && i + 1 < n ? i + 1 : i;
        if (other(cps[j])) {
          end = run(run(j, other), [](uint32_t x) { return x == '\r' || x == '\n'; });
        } else {
          size_t ws = run(i, is_space), last_nl = SIZE_MAX;
          for (size_t q = i; q < ws; ++q)
            if (cps[q] == '\r' || cps[q] == '\n') last_nl = q;
          end = last_nl != SIZE_MAX ? last_nl + 1 : space_rule(i);
        }
      }
    }
    if (end <= i) end = i + 1;  // never stall
    words.push_back(text.substr(off[i], off[end] - off[i]));
    i = end;
  }
  return words;
}

}  // namespace

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)) {
  ids_.reserve(vocab_.tokens.size());
  for (size_t i = 0; i < vocab_.tokens.size(); ++i) ids_.emplace(vocab_.tokens[i], int32_t(i));
  for (size_t i = 0; i < vocab_.merges.size(); ++i) merge_rank_.emplace(vocab_.merges[i], int32_t(i));
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    byte_ids_[b] = find(name);
  }
}

tc_status Tokenizer::create(Vocab v, Tokenizer** out) {
  const int64_t n = int64_t(v.tokens.size());
  if (n == 0) return fail(TC_ERR_INVALID_ARG, "tokenizer: the vocabulary is empty");
  if (!v.scores.empty() && int64_t(v.scores.size()) != n)
    return fail(TC_ERR_CORRUPT, "tokenizer: %zu scores for %lld tokens", v.scores.size(), (long long)n);
  if (!v.types.empty() && int64_t(v.types.size()) != n)
    return fail(TC_ERR_CORRUPT, "tokenizer: %zu token types for %lld tokens", v.types.size(), (long long)n);
  for (int32_t id : {v.bos, v.eos, v.unk})
    if (id < -1 || id >= n) return fail(TC_ERR_CORRUPT, "tokenizer: special token id %d outside the vocabulary", id);
  for (const std::string& m : v.merges) {
    size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == m.size())
      return fail(TC_ERR_CORRUPT, "tokenizer: merge '%s' is not 'left right'", m.c_str());
  }
  if (v.kind == TokenizerKind::Bpe && v.merges.empty())
    return fail(TC_ERR_CORRUPT, "tokenizer: a BPE vocabulary needs merges");
  *out = new Tokenizer(std::move(v));
  return TC_OK;
}

int32_t Tokenizer::find(const std::string& piece) const {
  auto it = ids_.find(piece);
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int32_t> Tokenizer::encode(const std::string& text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  if (text.empty()) return out;
  if (vocab_.kind == TokenizerKind::Spm) encode_spm(text, &out);
  else encode_bpe(text, &out);
  return out;
}

// SentencePiece BPE: start from characters, repeatedly merge the adjacent
// pair whose concatenation is a piece with the highest score (leftmost on a
// tie), then emit pieces, falling back to byte tokens.
void Tokenizer::encode_spm(const std::string& input, std::vector<int32_t>* out) const {
  std::string text = vocab_.add_space_prefix ? kSpaceMark : "";
  for (char c : input) {
    if (c == ' ') text += kSpaceMark;
    else text.push_back(c);
  }
  struct Sym {
    size_t pos, len;
    int prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0, len; i < text.size(); i += len) {
    next_cp(text, i, &len);
    syms.push_back({i, len, int(syms.size()) - 1, int(syms.size()) + 1});
  }
  syms.back().next = -1;
  struct Bigram {
    int left, right;
    float score;
    size_t len;
  };
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_pair = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    size_t len = syms[l].len + syms[r].len;
    int32_t id = find(text.substr(syms[l].pos, len));
    if (id < 0) return;
    queue.push({l, r, vocab_.scores.empty() ? 0.0f : vocab_.scores[size_t(id)], len});
  };
  for (size_t i = 0; i + 1 < syms.size(); ++i) try_pair(int(i), int(i + 1));
  while (!queue.empty()) {
    Bigram b = queue.top();
    queue.pop();
    Sym &l = syms[size_t(b.left)], &r = syms[size_t(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[size_t(r.next)].prev = b.left;
    try_pair(l.prev, b.left);
    try_pair(b.left, l.next);
  }
  for (int i = 0; i >= 0; i = syms[size_t(i)].next) {
    const Sym& s = syms[size_t(i)];
    int32_t id = find(text.substr(s.pos, s.len));
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (size_t k = 0; k < s.len; ++k) {
      int32_t b = byte_ids_[uint8_t(text[s.pos + k])];
      if (b >= 0) out->push_back(b);
      else if (vocab_.unk >= 0) out->push_back(vocab_.unk);
    }
  }
}

void Tokenizer::encode_bpe(const std::string& text, std::vector<int32_t>* out) const {
  for (const std::string& word : pre_tokenize(text, vocab_.pre)) bpe_word(word, out);
}

// Byte-level BPE of one pre-token: merge the adjacent pair of lowest rank
// (every occurrence, left to right) until no pair is a merge.
void Tokenizer::bpe_word(const std::string& word, std::vector<int32_t>* out) const {
  const ByteMap& bm = byte_map();
  std::vector<std::string> syms;
  for (unsigned char c : word) {
    std::string s;
    append_utf8(&s, bm.to_cp[c]);
    syms.push_back(std::move(s));
  }
  for (;;) {
    int32_t best = INT32_MAX;
    size_t at = 0;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      auto it = merge_rank_.find(syms[i] + " " + syms[i + 1]);
      if (it != merge_rank_.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == INT32_MAX) break;
    const std::string first = syms[at], second = syms[at + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < syms.size();) {
      if (i + 1 < syms.size() && syms[i] == first && syms[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(syms[i++]);
      }
    }
    syms.swap(merged);
  }
  for (const std::string& s : syms) {
    int32_t id = find(s);
    if (id >= 0) out->push_back(id);
    else if (vocab_.unk >= 0) out->push_back(vocab_.unk);
  }
}

std::string Tokenizer::decode(const int32_t* ids, int64_t n) const {
  std::string out;
  const ByteMap& bm = byte_map();
  bool first_piece = true;
  for (int64_t k = 0; k < n; ++k) {
    int32_t id = ids[k];
    if (id < 0 || id >= size()) continue;
    int32_t type = vocab_.types.empty() ? kNormal : vocab_.types[size_t(id)];
    if (type == kControl || type == kUnused) continue;
    const std::string& piece = vocab_.tokens[size_t(id)];
    if (vocab_.kind == TokenizerKind::Spm) {
      unsigned byte;
      if (type == kByte || (piece.size() == 6 && std::sscanf(piece.c_str(), "<0x%2X>", &byte) == 1)) {
        if (std::sscanf(piece.c_str(), "<0x%2X>", &byte) == 1) out.push_back(char(byte));
        first_piece = false;
        continue;
      }
      std::string text;
      for (size_t i = 0; i < piece.size();) {
        if (piece.compare(i, 3, kSpaceMark) == 0) {
          text.push_back(' ');
          i += 3;
        } else {
          text.push_back(piece[i++]);
        }
      }
      // The space SentencePiece put in front of the text is not the text's.
      if (first_piece && vocab_.add_space_prefix && !text.empty() && text[0] == ' ') text.erase(0, 1);
      out += text;
    } else {
      for (size_t i = 0, len; i < piece.size(); i += len) {
        uint32_t cp = next_cp(piece, i, &len);
        auto it = bm.to_byte.find(cp);
        if (it != bm.to_byte.end()) out.push_back(char(it->second));
        else out.append(piece, i, len);
      }
    }
    first_piece = false;
  }
  return out;
}

}  // namespace model
}  // namespace tc
