// Tokenizers of llama-family GGUF models, built from the vocabulary in the
// file's metadata and run as llama.cpp runs them (llama-vocab.cpp), id for id:
//  - SPM ("llama"): SentencePiece BPE. A space is prefixed (add_space_prefix)
//    at the start and after each special token, spaces become U+2581, then
//    adjacent pieces are merged highest score first; a character outside the
//    vocabulary falls back to its <0xXX> byte tokens.
//  - BPE ("gpt2"): byte-level BPE. Text is split by the pre-tokenizer named in
//    the file (model/pre_tokenizer.h), bytes are mapped to printable code
//    points, and adjacent symbols are merged lowest merge rank first.
// Before either, the text of special tokens (control, user-defined, unknown)
// is cut out as single ids: user-defined ones always, control and unknown
// ones when asked to (llama.cpp's parse_special).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/pre_tokenizer.h"
#include "tensorcore/types.h"

namespace tc {
namespace gguf {
class File;
}
namespace model {

enum class TokenizerKind { Spm, Bpe };

// GGUF token types.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Vocab {
  TokenizerKind kind = TokenizerKind::Spm;
  PreTokenizer pre = PreTokenizer::Default;  // BPE
  bool ignore_merges = false;                // BPE: a word that is a token is taken whole
  std::vector<std::string> tokens;
  std::vector<float> scores;   // SPM merge priority (may be empty)
  std::vector<int32_t> types;  // TokenType per token (may be empty: all normal)
  std::vector<std::string> merges;  // BPE: "left right", rank = index
  // Special ids, -1 when absent. eot, eom and the FIM ids absent here are
  // looked for by their text, as llama.cpp does.
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
  int32_t fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;
  bool add_bos = false, add_eos = false;  // what an encode with the vocabulary's specials adds
  bool add_space_prefix = true;           // SPM
};

// The vocabulary of a GGUF file's tokenizer.ggml.* metadata as llama.cpp
// reads it: TC_ERR_UNSUPPORTED when there is none (`*none` set) or it names a
// tokenizer model or pre-tokenizer this library does not run; TC_ERR_CORRUPT
// when a key holds the wrong type or inconsistent values. The detail names
// the key.
tc_status vocab_from_gguf(const gguf::File& f, Vocab* out, bool* none = nullptr);

struct EncodeOptions {
  bool add_bos = false, add_eos = false;
  bool parse_special = false;  // control and unknown tokens' text becomes their ids
};

class Tokenizer {
 public:
  // Checks the vocabulary (sizes, ids in range, merges well formed and made
  // of tokens, no token twice); TC_OK or TC_ERR_CORRUPT / TC_ERR_INVALID_ARG
  // with a detail naming the tokenizer.ggml.* key.
  static tc_status create(Vocab vocab, Tokenizer** out);

  std::vector<int32_t> encode(const std::string& text, const EncodeOptions& opt) const;
  std::string decode(const int32_t* ids, int64_t n) const;  // unknown ids are skipped
  int64_t size() const { return int64_t(vocab_.tokens.size()); }
  // The vocabulary, with eot/eom/FIM ids found by text filled in.
  const Vocab& vocab() const { return vocab_; }
  // End-of-generation ids, ascending.
  const std::vector<int32_t>& eog() const { return eog_; }
  bool is_eog(int32_t id) const;
  // llama.cpp's attributes of `id` (in range): TC_TOKEN_ATTR_* bits.
  uint32_t token_attr(int32_t id) const { return attrs_[size_t(id)]; }

 private:
  explicit Tokenizer(Vocab v);
  void find_special_tokens();
  void partition(const std::string& text, bool parse_special, std::vector<std::pair<int32_t, std::string>>* frags) const;
  void encode_spm(const std::string& text, std::vector<int32_t>* out) const;
  void encode_bpe(const std::string& text, std::vector<int32_t>* out) const;
  int32_t find(const std::string& piece) const;
  int32_t spm_byte(uint8_t b) const;

  struct PairHash {
    size_t operator()(const std::pair<std::string, std::string>& p) const {
      return std::hash<std::string>()(p.first) * 31 + std::hash<std::string>()(p.second);
    }
  };

  Vocab vocab_;
  std::vector<uint32_t> attrs_;      // llama.cpp's token attributes
  std::vector<int32_t> special_;     // special tokens, longest text first
  std::vector<int32_t> eog_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::pair<std::string, std::string>, int32_t, PairHash> ranks_;
};

}  // namespace model
}  // namespace tc
