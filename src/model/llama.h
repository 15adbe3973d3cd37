// A LLaMA-family decoder over a GGUF file (include/tensorcore/llama.h).
//
// The weights stay in the file's read-only mapping and are used in place by
// the backend's quantized GEMV (every format the file may hold, F32 and F16
// included). Activations are f32. The KV cache is f32, laid out
// [layer][kv head][n_ctx][head_dim] so that one kv head's keys for positions
// [0, n_past + n) are one contiguous [Skv, D] matrix: attention runs once per
// kv head over pointer offsets, with the H / Hkv query heads that read it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/file.h"
#include "tensorcore/llama.h"

struct tc_context_s;

namespace tc {
namespace model {

// A weight matrix of N rows of K weights in format `fmt` (TC_QUANT_*).
struct Matrix {
  const uint8_t* data = nullptr;
  int32_t fmt = -1;
  int64_t N = 0, K = 0;
  uint64_t row_bytes = 0;
};

struct LlamaLayer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd], widened to f32
  Matrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

class Llama {
 public:
  // Reads the configuration, checks every tensor's presence, type and shape,
  // and allocates the KV cache in `ctx` (n_ctx <= 0: the default).
  static tc_status load(tc_context_s* ctx, const char* path, int64_t n_ctx, std::unique_ptr<Llama>* out);
  ~Llama();

  const tc_llama_config& config() const { return cfg_; }
  int64_t n_past() const { return n_past_; }
  void reset() { n_past_ = 0; }
  // Element type of the weight products' activations: F32 (exact) or F16.
  tc_dtype activations() const { return act_; }
  void set_activations(tc_dtype t) { act_ = t; }

  // Runs tokens at [n_past, n_past + n) (validated by the caller) and writes
  // the logits of every token (all) or of the last one to `logits` (may be
  // null). n_past advances only on success.
  tc_status eval(const int32_t* tokens, int64_t n, float* logits, bool all);

  // Tokenizer vocabulary from the file (built by the C API); false when the
  // file has none.
  const gguf::File& file() const { return *file_; }

 private:
  Llama() = default;
  tc_status check_and_bind(const char* path);
  tc_status gemv(const Matrix& w, const float* x, float* y, int64_t M);
  tc_status rmsnorm(const float* x, const float* gamma, float* y, int64_t M);
  tc_status embed(const int32_t* tokens, int64_t n, float* x);

  tc_context_s* ctx_ = nullptr;
  std::unique_ptr<gguf::File> file_;
  tc_llama_config cfg_{};
  Matrix tok_embd_, output_;
  std::vector<float> output_norm_;
  std::vector<LlamaLayer> layers_;
  std::vector<float> cos_, sin_;  // [n_ctx, head_dim / 2]
  struct tc_buffer_s* kv_ = nullptr;  // K then V caches, f32
  float* k_cache_ = nullptr;
  float* v_cache_ = nullptr;
  int64_t n_past_ = 0;
  std::vector<float> scratch_;
  tc_dtype act_ = TC_DTYPE_F32;
  std::vector<uint16_t> xh_, yh_;  // f16 activations of a product
};

}  // namespace model
}  // namespace tc
