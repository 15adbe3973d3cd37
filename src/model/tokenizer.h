// Tokenizers of llama-family GGUF models, built from the vocabulary in the
// file's metadata:
//  - SPM ("llama"): SentencePiece BPE. Spaces become U+2581, a space is
//    prefixed, then adjacent pieces are merged highest score first; a
//    character outside the vocabulary falls back to its <0xXX> byte tokens.
//  - BPE ("gpt2"): byte-level BPE. Text is split by the pre-tokenizer named in
//    the file (GPT-2's or LLaMA-3's rules), bytes are mapped to printable code
//    points, and adjacent symbols are merged lowest merge rank first.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorcore/types.h"

namespace tc {
namespace model {

enum class TokenizerKind { Spm, Bpe };
enum class PreTokenizer { Gpt2, Llama3 };

// GGUF token types.
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

struct Vocab {
  TokenizerKind kind = TokenizerKind::Spm;
  PreTokenizer pre = PreTokenizer::Gpt2;
  std::vector<std::string> tokens;
  std::vector<float> scores;   // SPM merge priority (may be empty for BPE)
  std::vector<int32_t> types;  // TokenType per token (may be empty: all normal)
  std::vector<std::string> merges;  // BPE: "left right", rank = index
  int32_t bos = -1, eos = -1, unk = -1;
  bool add_space_prefix = true;  // SPM
};

class Tokenizer {
 public:
  // Checks the vocabulary (ids in range, merges well formed); TC_OK or a
  // status with a detail.
  static tc_status create(Vocab vocab, Tokenizer** out);

  std::vector<int32_t> encode(const std::string& text, bool add_bos) const;
  std::string decode(const int32_t* ids, int64_t n) const;  // unknown ids are skipped
  int64_t size() const { return int64_t(vocab_.tokens.size()); }
  const Vocab& vocab() const { return vocab_; }

 private:
  explicit Tokenizer(Vocab v);
  void encode_spm(const std::string& text, std::vector<int32_t>* out) const;
  void encode_bpe(const std::string& text, std::vector<int32_t>* out) const;
  void bpe_word(const std::string& word, std::vector<int32_t>* out) const;
  int32_t find(const std::string& piece) const;

  Vocab vocab_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_map<std::string, int32_t> merge_rank_;  // "left right" -> rank
  int32_t byte_ids_[256];  // SPM <0xXX> tokens, -1 when absent
};

}  // namespace model
}  // namespace tc
