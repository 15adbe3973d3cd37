// Pre-tokenizers of byte-level BPE vocabularies: the regular expressions a
// GGUF file's tokenizer.ggml.pre names, run as llama.cpp runs them
// (llama-vocab.cpp's regex lists, unicode.cpp's unicode_regex_split), written
// out as code. Each expression of a list splits every piece the previous ones
// left into its matches and the stretches between them; the expressions
// llama.cpp runs through std::regex keep ECMAScript's semantics (ordered
// alternatives, greedy quantifiers that back off, leftmost match) over its
// Unicode categories (Unicode 15.1, src/model/unicode_tables.inc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tc {
namespace model {

// One per distinct list of expressions.
enum class PreTokenizer {
  Default,        // [\p{P}\$\+<=>\^~\|]+, GPT-2's, \p{N}+, [0-9][0-9][0-9]
  Gpt2,           // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
  Llama3,         // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  Qwen2,          // LLaMA-3's with \p{N} for \p{N}{1,3}
  Starcoder,      // \p{N}, then GPT-2's
  DeepseekLlm,    // [\r\n], \s?[Latin, Greek, ... letters]+, \s?[ASCII and CJK punctuation]+, \s+$, [CJK]+, \p{N}+
  DeepseekCoder,  // [\r\n], \s?\p{L}+, \s?\p{P}+, [CJK]+, \p{N}
  Gpt4o,          // case-split letter runs with contractions, \p{N}{1,3}, ...
  Tekken,         // case-split letter runs, \p{N}, ...
};

// What a tokenizer.ggml.pre name means to llama.cpp: its expressions, whether
// a word that is a token is taken whole (ignore_merges) and whether a BOS is
// added by default (tokenizer.ggml.add_bos_token overrides).
struct PreTokenizerSpec {
  PreTokenizer pre = PreTokenizer::Default;
  bool ignore_merges = false;
  bool add_bos = false;
};

// False for a name this library does not run.
bool pre_tokenizer_named(const std::string& name, PreTokenizerSpec* out);
// The names pre_tokenizer_named accepts, comma-separated (for messages).
const char* pre_tokenizer_names();
const char* pre_tokenizer_label(PreTokenizer pre);

// Code points of UTF-8 text as llama.cpp reads them: a byte that does not
// start a well-formed sequence stands for U+FFFD.
std::vector<uint32_t> decode_utf8(const std::string& text);
void append_utf8(std::string* out, uint32_t cp);
// The UTF-8 text of byte-level BPE: each byte as its printable code point.
std::string byte_encode(const std::string& bytes);
// The inverse for one code point: its byte, or -1 when it stands for none.
int byte_of_code_point(uint32_t cp);

// The words of `text` (UTF-8, re-encoded from its code points), byte-encoded.
std::vector<std::string> pre_tokenize(const std::string& text, PreTokenizer pre);

}  // namespace model
}  // namespace tc
