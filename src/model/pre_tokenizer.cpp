#include "model/pre_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_map>

namespace tc {
namespace model {
namespace {

// ---- Unicode categories -----------------------------------------------------------------

enum Cat : uint8_t { kUndefined, kNumber, kLetter, kSeparator, kMark, kPunctuation, kSymbol, kControl };
struct CategoryRun {
  uint32_t first;
  Cat cat;
};
#include "model/unicode_tables.inc"

Cat category(uint32_t cp) {
  if (cp > 0x10FFFF) return kUndefined;
  auto it = std::upper_bound(std::begin(kCategoryRuns), std::end(kCategoryRuns), cp,
                             [](uint32_t v, const CategoryRun& r) { return v < r.first; });
  return (it - 1)->cat;
}
bool white_space(uint32_t cp) { return std::find(std::begin(kWhiteSpace), std::end(kWhiteSpace), cp) != std::end(kWhiteSpace); }

// The properties of one code point the expressions ask about. `any` is false
// only outside the piece being split (llama.cpp's flags of "no code point").
struct Props {
  bool any = false, ws = false;
  Cat cat = kUndefined;
  bool letter() const { return any && !ws && cat == kLetter; }
  bool number() const { return any && !ws && cat == kNumber; }
  bool punct() const { return any && !ws && cat == kPunctuation; }
};

// The text being split: code points and their properties, and the piece
// [ini, end) the current expression works on.
struct Text {
  std::vector<uint32_t> cp;
  std::vector<Props> props;
  size_t ini = 0, end = 0;

  uint32_t at(size_t p) const { return p >= ini && p < end ? cp[p] : 0xFFFFFFFFu; }
  Props pr(size_t p) const { return p >= ini && p < end ? props[p] : Props{}; }
  // std::wregex sees non-ASCII white space as U+000B (llama.cpp replaces it).
  uint32_t wide(size_t p) const { return cp[p] > 0x7F && props[p].ws ? 0x0B : cp[p]; }
  template <class Pred>
  size_t run(size_t p, Pred pred) const {
    while (p < end && pred(p)) ++p;
    return p;
  }
};

using Offsets = std::vector<size_t>;  // lengths of consecutive pieces, in code points

// Applies `split` (which appends the lengths of one piece's words) to every
// piece of `in`.
template <class Split>
Offsets each_piece(Text& t, const Offsets& in, Split split) {
  Offsets out;
  out.reserve(in.size());
  size_t start = 0;
  for (size_t len : in) {
    t.ini = start;
    t.end = start + len;
    split(t, out);
    start += len;
  }
  return out;
}

// std::regex_iterator over one piece: `match(t, p)` is the end of the match the
// expression finds starting at p (p itself when none); the leftmost match
// wins, and the stretches between matches are pieces too.
template <class Match>
Offsets regex_split(Text& t, const Offsets& in, Match match) {
  return each_piece(t, in, [&](const Text& tx, Offsets& out) {
    size_t start = tx.ini, p = tx.ini;
    while (p < tx.end) {
      size_t e = match(tx, p);
      if (e > p) {
        if (p > start) out.push_back(p - start);
        out.push_back(e - p);
        start = p = e;
      } else {
        ++p;
      }
    }
    if (start < tx.end) out.push_back(tx.end - start);
  });
}

struct Range {
  uint32_t lo, hi;
};
template <size_t N>
bool in_set(const Range (&set)[N], uint32_t c) {
  for (const Range& r : set)
    if (c >= r.lo && c <= r.hi) return true;
  return false;
}

// ---- llama.cpp's own implementations (unicode.cpp's unicode_regex_split_custom_*) ---------

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Text& t, Offsets& out) {
  size_t prev = t.ini;
  auto add = [&](size_t e) -> size_t {
    size_t len = e - prev;
    if (len) out.push_back(len);
    prev = e;
    return len;
  };
  for (size_t pos = t.ini; pos < t.end;) {
    const uint32_t c = t.at(pos);
    const Props f = t.pr(pos);
    if (c == '\'' && pos + 1 < t.end) {
      uint32_t n1 = t.at(pos + 1);
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        pos += add(pos + 2);
        continue;
      }
      if (pos + 2 < t.end) {
        uint32_t n2 = t.at(pos + 2);
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
          pos += add(pos + 3);
          continue;
        }
      }
    }
    Props f2 = c == ' ' ? t.pr(pos + 1) : f;
    if (f2.any && !f2.ws && f2.cat == kLetter) {
      pos += c == ' ';
      while (t.pr(pos).letter()) ++pos;
      add(pos);
      continue;
    }
    if (f2.number()) {
      pos += c == ' ';
      while (t.pr(pos).number()) ++pos;
      add(pos);
      continue;
    }
    auto other = [](const Props& p) { return p.any && !p.ws && p.cat != kLetter && p.cat != kNumber; };
    if (other(f2)) {
      pos += c == ' ';
      while (other(t.pr(pos))) ++pos;
      add(pos);
      continue;
    }
    size_t nws = 0;
    while (t.pr(pos + nws).ws) ++nws;
    if (nws > 1 && pos + nws < t.end) {  // \s+(?!\S)
      pos += nws - 1;
      add(pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

// LLaMA-3 (max_digits 3) and Qwen2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Text& t, Offsets& out, size_t max_digits) {
  size_t prev = t.ini;
  auto add = [&](size_t e) -> size_t {
    size_t len = e - prev;
    if (len) out.push_back(len);
    prev = e;
    return len;
  };
  // Only A-Z lower to the letters of the contractions.
  auto lower = [](uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; };
  for (size_t pos = t.ini; pos < t.end;) {
    const uint32_t c = t.at(pos);
    const Props f = t.pr(pos);
    if (c == '\'' && pos + 1 < t.end) {
      uint32_t n1 = lower(t.at(pos + 1));
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        pos += add(pos + 2);
        continue;
      }
      if (pos + 2 < t.end) {
        uint32_t n2 = lower(t.at(pos + 2));
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
          pos += add(pos + 3);
          continue;
        }
      }
    }
    if (!(c == '\r' || c == '\n' || f.number())) {
      if (f.letter() || t.pr(pos + 1).letter()) {
        ++pos;
        while (t.pr(pos).letter()) ++pos;
        add(pos);
        continue;
      }
    }
    if (f.number()) {
      size_t ini = pos;
      while (t.pr(pos).number()) {
        if (++pos - ini >= max_digits) {
          add(pos);
          ini = pos;
        }
      }
      add(pos);
      continue;
    }
    Props f2 = c == ' ' ? t.pr(pos + 1) : f;
    auto other = [](const Props& p) { return !(p.ws || p.letter() || p.number()); };
    if (other(f2) && f.any) {
      pos += c == ' ';
      while (other(f2) && f2.any) f2 = t.pr(++pos);
      uint32_t c2 = t.at(pos);
      while (c2 == '\r' || c2 == '\n') c2 = t.at(++pos);
      add(pos);
      continue;
    }
    size_t nws = 0, last_nl = 0;
    while (t.pr(pos + nws).ws) {
      uint32_t c2 = t.at(pos + nws);
      if (c2 == '\r' || c2 == '\n') last_nl = pos + nws + 1;
      ++nws;
    }
    if (last_nl > 0) {  // \s*[\r\n]+
      pos = last_nl;
      add(pos);
      continue;
    }
    if (nws > 1 && pos + nws < t.end) {  // \s+(?!\S)
      pos += nws - 1;
      add(pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      add(pos);
      continue;
    }
    add(++pos);
  }
}

// ---- expressions llama.cpp runs through std::regex ----------------------------------------

// \p{N}: every number its own piece; with `runs`, \p{N}+.
Offsets split_numbers(Text& t, const Offsets& in, bool runs) {
  return regex_split(t, in, [runs](const Text& tx, size_t p) {
    if (!tx.props[p].number()) return p;
    return runs ? tx.run(p, [&](size_t q) { return tx.props[q].number(); }) : p + 1;
  });
}

// [\p{P}\$\+<=>\^~\|]+
Offsets split_default_punct(Text& t, const Offsets& in) {
  auto hit = [](const Text& tx, size_t q) {
    uint32_t c = tx.cp[q];
    return tx.props[q].punct() || (c < 128 && std::strchr("$+<=>^~|", int(c)) && c != 0);
  };
  return regex_split(t, in, [&](const Text& tx, size_t p) {
    return hit(tx, p) ? tx.run(p, [&](size_t q) { return hit(tx, q); }) : p;
  });
}

// [0-9][0-9][0-9]
Offsets split_digit_triples(Text& t, const Offsets& in) {
  return regex_split(t, in, [](const Text& tx, size_t p) {
    auto d = [&](size_t q) { return q < tx.end && tx.cp[q] >= '0' && tx.cp[q] <= '9'; };
    return d(p) && d(p + 1) && d(p + 2) ? p + 3 : p;
  });
}

// [\r\n]
Offsets split_line_breaks(Text& t, const Offsets& in) {
  return regex_split(t, in, [](const Text& tx, size_t p) {
    return tx.cp[p] == '\r' || tx.cp[p] == '\n' ? p + 1 : p;
  });
}

// \s?[set]+ where `in_class(tx, q)` tests one code point of the set.
template <class InClass>
Offsets split_space_then_run(Text& t, const Offsets& in, InClass in_class) {
  return regex_split(t, in, [&](const Text& tx, size_t p) {
    auto hit = [&](size_t q) { return q < tx.end && in_class(tx, q); };
    size_t s = tx.props[p].ws && hit(p + 1) ? p + 1 : p;
    return hit(s) ? tx.run(s, hit) : p;
  });
}

// \s+$: the white space that ends a piece.
Offsets split_trailing_space(Text& t, const Offsets& in) {
  return each_piece(t, in, [](const Text& tx, Offsets& out) {
    size_t s = tx.end;
    while (s > tx.ini && tx.props[s - 1].ws) --s;
    if (s > tx.ini) out.push_back(s - tx.ini);
    if (s < tx.end) out.push_back(tx.end - s);
  });
}

// DeepSeek's letters (the ranges of its \s?[A-Za-zµÀ-Ö...]+), its punctuation
// (\s?[!-/:-~！-／：-～‘-‟　-。]+) and CJK ([一-龥ࠀ-一가-퟿]+).
constexpr Range kDeepseekLetters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943}};
constexpr Range kDeepseekPunct[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0xFF01, 0xFF0F},
                                    {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};
constexpr Range kDeepseekCjk[] = {{0x4E00, 0x9FA5}, {0x800, 0x4E00}, {0xAC00, 0xD7FF}};

Offsets split_cjk(Text& t, const Offsets& in) {
  return regex_split(t, in, [](const Text& tx, size_t p) {
    auto hit = [&](size_t q) { return in_set(kDeepseekCjk, tx.wide(q)); };
    return hit(p) ? tx.run(p, hit) : p;
  });
}

// GPT-4o's and Tekken's expression:
//   [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,k}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// where U = ((?=[\p{L}])([^a-z])) (a letter other than a-z), W =
// ((?=[\p{L}])([^A-Z])) (a letter other than A-Z) and C the optional
// contraction (GPT-4o only), matched by backtracking as std::regex does.
struct CaseSplit {
  bool contractions;
  size_t max_digits;

  size_t operator()(const Text& t, size_t p) const {
    auto letter = [&](size_t q) { return q < t.end && t.props[q].letter(); };
    auto upper = [&](size_t q) { return letter(q) && !(t.cp[q] >= 'a' && t.cp[q] <= 'z'); };
    auto lower = [&](size_t q) { return letter(q) && !(t.cp[q] >= 'A' && t.cp[q] <= 'Z'); };
    auto contraction = [&](size_t q) -> size_t {
      if (!contractions || q >= t.end || t.cp[q] != '\'') return q;
      auto lc = [&](size_t k) -> uint32_t {
        if (k >= t.end) return 0;
        uint32_t c = t.cp[k];
        return c >= 'A' && c <= 'Z' ? c + 32 : c;
      };
      uint32_t a = lc(q + 1), b = lc(q + 2);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') return q + 2;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return q + 3;
      return q;
    };
    // U*W+C? from s: the longest U run that still leaves a W after it.
    auto first = [&](size_t s) -> size_t {
      size_t r = t.run(s, upper);
      size_t k = r;
      while (!lower(k)) {
        if (k == s) return 0;
        --k;
      }
      return contraction(t.run(k, lower));
    };
    // U+W*C? from s.
    auto second = [&](size_t s) -> size_t {
      size_t r = t.run(s, upper);
      if (r == s) return 0;
      return contraction(t.run(r, lower));
    };
    const uint32_t c = t.cp[p];
    const bool prefix = !(c == '\r' || c == '\n' || letter(p) || t.props[p].number());
    for (auto alt : {+0, +1}) {
      size_t e = 0;
      if (prefix) e = alt == 0 ? first(p + 1) : second(p + 1);
      if (!e) e = alt == 0 ? first(p) : second(p);
      if (e) return e;
    }
    if (t.props[p].number()) {
      size_t e = p;
      while (e < t.end && e - p < max_digits && t.props[e].number()) ++e;
      return e;
    }
    auto other = [&](size_t q) { return q < t.end && !t.props[q].ws && !letter(q) && !t.props[q].number(); };
    {
      size_t s = c == ' ' && other(p + 1) ? p + 1 : p;
      if (other(s)) {
        size_t e = t.run(s, other);
        return t.run(e, [&](size_t q) { return t.cp[q] == '\r' || t.cp[q] == '\n' || t.cp[q] == '/'; });
      }
    }
    size_t e = t.run(p, [&](size_t q) { return t.props[q].ws; });
    if (e == p) return p;
    for (size_t q = e; q > p; --q)  // \s*[\r\n]+
      if (t.cp[q - 1] == '\r' || t.cp[q - 1] == '\n') return q;
    if (e == t.end) return e;  // \s+(?!\S)
    if (e - p >= 2) return e - 1;
    return e;  // \s+
  }
};

const char kPreNames[] =
    "default, gpt-2 (phi-2, gigachat, a.x-4.0, mellum, mpt, olmo, jais, exaone4, trillion, granite-docling), "
    "llama-bpe (llama3, llama-v3, falcon3, falcon-h1, pixtral, midm-2.0, lfm2, jina-v5-nano, dbrx, smaug-bpe), "
    "qwen2 (deepseek-r1-qwen, kormo, f2llmv2, megrez, stablelm2, hunyuan, solar-open), "
    "starcoder (refact, command-r, smollm, codeshell, exaone, minerva-7b, mellum2), deepseek-llm, deepseek-coder, "
    "gpt-4o (llama4, kanana2, talkie, minimax-m2), tekken";

}  // namespace

bool pre_tokenizer_named(const std::string& name, PreTokenizerSpec* out) {
  struct Entry {
    const char* names[10];
    PreTokenizerSpec spec;
  };
  static const Entry table[] = {
      {{"default"}, {PreTokenizer::Default, false, false}},
      {{"gpt-2", "phi-2", "gigachat", "a.x-4.0", "mellum", "mpt", "olmo", "jais", "exaone4"},
       {PreTokenizer::Gpt2, false, false}},
      {{"trillion", "granite-docling"}, {PreTokenizer::Gpt2, false, false}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
       {PreTokenizer::Llama3, true, true}},
      {{"dbrx", "smaug-bpe"}, {PreTokenizer::Llama3, false, false}},
      {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open"},
       {PreTokenizer::Qwen2, false, false}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2"},
       {PreTokenizer::Starcoder, false, false}},
      {{"deepseek-llm"}, {PreTokenizer::DeepseekLlm, false, false}},
      {{"deepseek-coder"}, {PreTokenizer::DeepseekCoder, false, false}},
      {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {PreTokenizer::Gpt4o, false, false}},
      {{"tekken"}, {PreTokenizer::Tekken, true, true}},
  };
  for (const Entry& e : table)
    for (const char* n : e.names)
      if (n && name == n) {
        *out = e.spec;
        return true;
      }
  return false;
}

const char* pre_tokenizer_names() { return kPreNames; }

const char* pre_tokenizer_label(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::Default: return "default";
    case PreTokenizer::Gpt2: return "gpt-2";
    case PreTokenizer::Llama3: return "llama-bpe";
    case PreTokenizer::Qwen2: return "qwen2";
    case PreTokenizer::Starcoder: return "starcoder";
    case PreTokenizer::DeepseekLlm: return "deepseek-llm";
    case PreTokenizer::DeepseekCoder: return "deepseek-coder";
    case PreTokenizer::Gpt4o: return "gpt-4o";
    case PreTokenizer::Tekken: return "tekken";
  }
  return "?";
}

std::vector<uint32_t> decode_utf8(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const size_t n = s.size();
  auto cont = [&](size_t i) { return i < n && (uint8_t(s[i]) & 0xC0) == 0x80; };
  for (size_t i = 0; i < n;) {
    const uint8_t c = uint8_t(s[i]);
    uint32_t cp = 0xFFFD;
    size_t len = 1;
    if (!(c & 0x80)) {
      cp = c;
    } else if (!(c & 0x40)) {
      // a continuation byte: invalid
    } else if (!(c & 0x20)) {
      if (cont(i + 1)) cp = (uint32_t(c & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F), len = 2;
    } else if (!(c & 0x10)) {
      if (cont(i + 1) && cont(i + 2))
        cp = (uint32_t(c & 0x0F) << 12) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6) | (uint8_t(s[i + 2]) & 0x3F),
        len = 3;
    } else if (!(c & 0x08)) {
      if (cont(i + 1) && cont(i + 2) && cont(i + 3))
        cp = (uint32_t(c & 0x07) << 18) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12) |
             (uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F),
        len = 4;
    }
    // Beyond U+10FFFF llama.cpp fails to re-encode the text; it reads as U+FFFD here.
    if (cp > 0x10FFFF) cp = 0xFFFD;
    out.push_back(cp);
    i += len;
  }
  return out;
}

void append_utf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

namespace {
// Byte-level BPE shows every byte as a printable code point: printable
// Latin-1 bytes stand for themselves, the others map to 256 + n in order.
struct ByteMap {
  std::string utf8[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t extra = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? b : 256 + extra++;
      append_utf8(&utf8[b], cp);
      to_byte[cp] = uint8_t(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}
}  // namespace

std::string byte_encode(const std::string& bytes) {
  const ByteMap& m = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += m.utf8[c];
  return out;
}

int byte_of_code_point(uint32_t cp) {
  const ByteMap& m = byte_map();
  auto it = m.to_byte.find(cp);
  return it == m.to_byte.end() ? -1 : it->second;
}

std::vector<std::string> pre_tokenize(const std::string& text, PreTokenizer pre) {
  Text t;
  t.cp = decode_utf8(text);
  t.props.resize(t.cp.size());
  for (size_t i = 0; i < t.cp.size(); ++i) {
    t.props[i].any = true;
    t.props[i].ws = white_space(t.cp[i]);
    t.props[i].cat = category(t.cp[i]);
  }
  Offsets off;
  if (!t.cp.empty()) off.push_back(t.cp.size());
  auto custom = [&](auto fn) { off = each_piece(t, off, fn); };
  auto gpt2 = [&] { custom([](const Text& tx, Offsets& o) { split_gpt2(tx, o); }); };
  switch (pre) {
    case PreTokenizer::Default:
      off = split_default_punct(t, off);
      gpt2();
      off = split_numbers(t, off, true);
      off = split_digit_triples(t, off);
      break;
    case PreTokenizer::Gpt2:
      gpt2();
      break;
    case PreTokenizer::Llama3:
      custom([](const Text& tx, Offsets& o) { split_llama3(tx, o, 3); });
      break;
    case PreTokenizer::Qwen2:
      custom([](const Text& tx, Offsets& o) { split_llama3(tx, o, 1); });
      break;
    case PreTokenizer::Starcoder:
      off = split_numbers(t, off, false);
      gpt2();
      break;
    case PreTokenizer::DeepseekLlm:
      off = split_line_breaks(t, off);
      off = split_space_then_run(t, off, [](const Text& tx, size_t q) { return in_set(kDeepseekLetters, tx.wide(q)); });
      off = split_space_then_run(t, off, [](const Text& tx, size_t q) { return in_set(kDeepseekPunct, tx.wide(q)); });
      off = split_trailing_space(t, off);
      off = split_cjk(t, off);
      off = split_numbers(t, off, true);
      break;
    case PreTokenizer::DeepseekCoder:
      off = split_line_breaks(t, off);
      off = split_space_then_run(t, off, [](const Text& tx, size_t q) { return tx.props[q].letter(); });
      off = split_space_then_run(t, off, [](const Text& tx, size_t q) { return tx.props[q].punct(); });
      off = split_cjk(t, off);
      off = split_numbers(t, off, false);
      break;
    case PreTokenizer::Gpt4o:
      off = regex_split(t, off, CaseSplit{true, 3});
      break;
    case PreTokenizer::Tekken:
      off = regex_split(t, off, CaseSplit{false, 1});
      break;
  }
  std::vector<std::string> words;
  words.reserve(off.size());
  size_t start = 0;
  for (size_t len : off) {
    std::string w;
    for (size_t i = start; i < start + len; ++i) append_utf8(&w, t.cp[i]);
    words.push_back(byte_encode(w));
    start += len;
  }
  return words;
}

}  // namespace model
}  // namespace tc
