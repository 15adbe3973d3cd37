// A LLaMA-family decoder over a GGUF file (include/tensorcore/llama.h), on
// any backend: the forward is backend ops only, on one queue. One forward
// serves every architecture it loads (llama, mistral, qwen2, qwen3, gemma2,
// gemma3): what a family changes is read from the file into an Arch.
//
// Weights: on a host-accessible backend (the CPU) the matrices stay in the
// file's read-only mapping and are used in place; on a device they are
// copied once at load, in their own formats, into one device buffer with
// the norms and the RoPE tables. The quantized GEMV computes every format
// (F32 and F16 included). Activations are f32. The KV cache is f16 (the
// default, as llama.cpp's), f32 or Q8_0 blocks along head_dim
// (set_kv_cache_type), laid out [layer][sequence slot][kv head][n_ctx]
// [head_dim] so that one kv head's keys for positions [0, n_past + n) are
// one contiguous [Skv, D] matrix (offsets in elements; a Q8_0 cache's bytes
// are dtype_bytes of them).
//
// Sequences: the cache has max_sequences() slots (1 unless
// set_max_sequences), each with its own n_past. eval runs a chunk of one
// sequence; decode_batch (llama_batch.cpp) runs one token of each of n
// distinct sequences as one forward of n rows, RoPE, the cache append and
// the decode attention reading each row's position and slot from the
// parameter block.
//
// Everything a step writes lives in buffers of the context allocated at
// load, sized for the largest chunk an eval runs at once (max_batch tokens;
// longer evals run in chunks). The position and the token ids of a step are
// in a small parameter block in device memory, written before the step and
// read by the kernels, so a one-token step can be recorded once as a graph
// (Backend::begin_capture) and replayed for every later token.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "gguf/file.h"
#include "tensorcore/llama.h"

struct tc_context_s;
struct tc_buffer_s;

// Returns the status of expr from the enclosing function when it fails.
#define TC_TRY(expr)                        \
  do {                                      \
    if (tc_status st_ = (expr)) return st_; \
  } while (0)

namespace tc {
namespace model {

// A weight matrix of N rows of K weights in format `fmt` (TC_QUANT_*), in
// the mapping (host) or in the weight buffer (device).
struct Matrix {
  const uint8_t* data = nullptr;
  int32_t fmt = -1;
  int64_t N = 0, K = 0;
  uint64_t row_bytes = 0;
  uint64_t bytes() const { return uint64_t(N) * row_bytes; }
  // The split layout of a Q4_0 / Q8_0 / Q6_K matrix (GemvQ8Args: quants, scales),
  // a second copy on a device for the one-token step's 8-bit products
  // (Llama::split_weights); null otherwise.
  const uint8_t* split_qs = nullptr;
  const uint16_t* split_d = nullptr;
  // The matrix with its rows interleaved by eight (quant::repack_rows8),
  // a second copy on a host backend that reads it (Llama::rows8_weights); null otherwise.
  const uint8_t* rows8 = nullptr;
};

// What a model family changes in the forward, from general.architecture and
// the file's metadata (llama_load.cpp lists each family's choices).
struct Arch {
  bool neox_rope = false;    // RoPE pairs (x[k], x[k + D/2]) instead of (x[2k], x[2k+1])
  bool qkv_bias = false;     // biases on q, k and v (qwen2)
  bool qk_norm = false;      // RMSNorm with a [D] weight on every head of q and k (qwen3, gemma3)
  bool post_norms = false;   // RMSNorm on the attention and feed-forward outputs before their adds (gemma)
  bool gelu = false;         // GEGLU (tanh GELU) feed-forward instead of SwiGLU (gemma)
  float embed_scale = 1.0f;  // embeddings times sqrt(n_embd) (gemma)
  double attn_scale = 0.0;   // softmax scale
  float attn_softcap = 0.0f, final_softcap = 0.0f;  // cap tanh(x / cap) of scores / logits; 0: none
  int64_t window = 0;        // sliding window of the layers in swa (keys in (p - window, p])
  std::vector<uint8_t> swa;  // per layer: 1 for a sliding-window layer
  double rope_base_swa = 0;   // the sliding-window layers' RoPE base and scale (their own
  double rope_scale_swa = 1;  // table when either differs)
};

struct LlamaLayer {
  Matrix wq, wk, wv, wo, w_gate, w_up, w_down;
  // Offsets of the layer's f32 vectors in the model's vector pool (floats);
  // -1 where the architecture has none.
  int64_t attn_norm = -1, ffn_norm = -1, post_attn_norm = -1, post_ffn_norm = -1;
  int64_t q_norm = -1, k_norm = -1, bq = -1, bk = -1, bv = -1;
  int rope = 0;  // which RoPE table: 0, or 1 for sliding-window layers with their own base
  // On a device, where the load laid them out one after the other and their
  // formats agree: [Wq; Wk; Wv] and [Wgate; Wup] as one matrix each, so a
  // one-token step reads its inputs' weights in one product (data null
  // otherwise).
  Matrix wqkv, w_gate_up;
};

class Llama {
 public:
  // Reads the configuration, checks every tensor's presence, type and shape,
  // places the weights on the context's device and allocates the KV cache
  // and the scratch (n_ctx <= 0: the default).
  static tc_status load(tc_context_s* ctx, const char* path, int64_t n_ctx, std::unique_ptr<Llama>* out);
  ~Llama();

  const tc_llama_config& config() const { return cfg_; }
  // Sequence slots (seq in [0, max_sequences()), checked by the caller).
  int64_t max_sequences() const { return int64_t(n_past_.size()); }
  // The most set_max_sequences accepts: a batch step's rows fit the scratch.
  int64_t sequence_limit() const { return max_batch_; }
  int64_t n_past(int64_t seq = 0) const { return n_past_[size_t(seq)]; }
  void reset(int64_t seq = 0) { n_past_[size_t(seq)] = 0; }
  // Reallocates the cache for n slots, so the model must be empty (checked
  // by the caller); a failed allocation keeps the old cache.
  tc_status set_max_sequences(int64_t n);
  // Element type of the weight products' activations: F32 (exact) or F16.
  // F16 on a device may copy the weights once more (split_weights).
  tc_dtype activations() const { return act_; }
  tc_status set_activations(tc_dtype t);
  // Element type of the KV cache: F16 (default), F32 or Q8_0 (head_dim a
  // multiple of 32). Reallocates the cache, so the model must be empty
  // (n_past 0; both checked by the caller).
  tc_dtype kv_cache_type() const { return kv_; }
  tc_status set_kv_cache_type(tc_dtype t);

  // Runs tokens at [n_past, n_past + n) of sequence `seq` (validated by the
  // caller) and writes the logits of every token (all) or of the last one to
  // `logits` (host memory; may be null). n_past advances only on success.
  tc_status eval(int64_t seq, const int32_t* tokens, int64_t n, float* logits, bool all);
  // One token of each of n distinct sequences, each at its own n_past
  // (validated by the caller: n <= max_sequences(), every sequence below
  // n_ctx); logits [n, n_vocab] to host memory (may be null). Every
  // sequence advances by one on success. With `next`, also each row's
  // greedy token (argmax_rows of its logits before any soft-capping, found
  // where the step ran), so that no logits need to travel.
  tc_status decode_batch(const int32_t* seqs, const int32_t* tokens, int64_t n, float* logits,
                         int32_t* next = nullptr);
  // Rows of any sequences (llama.cpp's llama_decode of a batch): row i
  // appends tokens[i] to sequence seqs[i], a sequence's rows at its next
  // positions in row order; the logits of the rows with want[i] != 0 (every
  // row without want) to `logits` in row order (host memory; may be null).
  // Validated by the caller (every sequence's n_past plus its rows <= n_ctx).
  // Runs as forwards of up to max_batch_ rows; the sequences advance only
  // on success.
  tc_status eval_batch(const int32_t* seqs, const int32_t* tokens, int64_t n, const uint8_t* want, float* logits);

  // Tokenizer vocabulary from the file (built by the C API).
  const gguf::File& file() const { return *file_; }

  // Products with at least this many rows run as dequantise + GEMM on a
  // device (a GEMV re-reads its weights per block of rows; a tensor-core
  // GEMM is faster once the rows fill its tiles).
  static constexpr int64_t kGemmMinRows = 32;
  // A batch step of up to this many rows runs the one-token step's 8-bit
  // products (q8_decode) on all of them: on a GPU from 8 rows on the int8
  // tensor cores, about one pass over the weights for all the rows, where
  // dequantise + GEMM converts every weight to f16 each step.
  static constexpr int64_t kQ8MaxRows = 64;
  // From this many rows a device's batch step keeps X in f16 for those
  // products (QuantizeQ8Args / GemvQ8Args::xh: W dequantised on the tensor
  // cores, no per-block 8-bit epilogue), where every matrix allows it.
  static constexpr int64_t kQ8F16MinRows = 16;
  // The largest number of tokens one forward runs (the scratch's size).
  static constexpr int64_t kMaxBatch = 512;

 private:
  Llama() = default;
  tc_status read_arch(const char* name);
  tc_status check_and_bind(const char* path);
  tc_status place_weights();
  tc_status split_weights();
  tc_status alloc_state();
  tc_status alloc_kv_cache(tc_dtype t, int64_t slots);
  tc_status alloc(size_t bytes, void** out);
  // Elements of one slot of one layer's keys (or values): Hkv * n_ctx * D.
  int64_t slot_elems() const { return cfg_.n_head_kv * cfg_.n_ctx * cfg_.head_dim; }
  // Layer l's keys (or values) of sequence slot `slot` in the cache:
  // [Hkv][n_ctx][D] of kv_.
  void* cache_layer(void* cache, int64_t l, int64_t slot) const;
  // The parameter block's per-row positions and slots of a batch step.
  int32_t* batch_pos(int32_t* block) const { return block + 2 + max_batch_; }
  int32_t* batch_slots(int32_t* block) const { return block + 2 + 2 * max_batch_; }
  void drop_graphs();

  // One chunk of n tokens of sequence slot `slot` at position P whose ids
  // are in the parameter block; logits of the last `rows` tokens into `lg`
  // (skipped when null).
  tc_status step(int64_t slot, const int32_t* tokens, int64_t n, int64_t P, float* logits, int64_t rows);
  // Rows of several sequences in one forward (eval_batch): each run of
  // consecutive rows of one sequence is a segment, attended as a chunk of
  // that sequence at the position of its first row; `out` are the runs of
  // rows [first, first + count) whose logits are wanted, in row order.
  struct Segment {
    int64_t row, n, slot, P;
  };
  struct Chunk {
    std::vector<Segment> segments;
    std::vector<std::pair<int64_t, int64_t>> out;
  };
  // batch: the n rows are one token each of the sequences in the parameter
  // block (batch_pos, batch_slots) instead of a chunk of `slot` at P.
  // chunk: the n rows are its segments (positions in batch_pos); logits of
  // its `out` rows into `lg`; P, rows, slot and batch unused.
  tc_status forward(int64_t n, int64_t P, float* lg, int64_t rows, int64_t slot = 0, bool batch = false,
                    const Chunk* chunk = nullptr);
  // qt: the rotated queries, in f16 with f16 activations on a device
  // (rope_kv_append's qt16), else f32; o: token rows of the same type.
  tc_status chunk_attention(int64_t l, int64_t n, int64_t P, const void* kc, const void* vc, const void* qt,
                            float* ot, void* o, int64_t group = 1);
  // The chunk attention reads the cache in place where its elements are the
  // attention's (f16 with f16 activations on a device, f32 otherwise);
  // else it packs each kv head's prefix, converted, into kpack_ / vpack_.
  bool packs_kv() const { return kv_ != (act_ == TC_DTYPE_F16 && !host_ ? TC_DTYPE_F16 : TC_DTYPE_F32); }
  tc_status replay_or_record(std::unique_ptr<Graph>& graph, int64_t n, bool batch);
  tc_status step_batch(int64_t n, float* logits, int32_t* next);
  tc_status argmax_rows(const float* logits, int64_t rows, int32_t* out);
  tc_status logits_back(float* logits, int64_t rows, const char* fn);
  tc_status finish(tc_status st);

  // y = x W^T for each {W, y} of `outs`, all reading the same M rows of x
  // (one K): x is rounded to f16 once for all of them.
  struct Product {
    const Matrix* w;
    float* y;
  };
  // With joined (data set): outs' matrices are rows of it, one after the other.
  tc_status products(const float* x, int64_t M, std::initializer_list<Product> outs, const Matrix* joined = nullptr);
  tc_status products_act(const void* x, int64_t M, std::initializer_list<Product> outs, const Matrix* joined = nullptr);
  // Where residual writes the products' normed input (activation dtype).
  void* act_rows() const { return act_ == TC_DTYPE_F16 ? static_cast<void*>(xh_) : static_cast<void*>(h_); }
  tc_status dequantize_for_gemm(const Matrix& w);
  tc_status gemm_dequantized(const void* w, int64_t N, int64_t K, const void* x, float* y, int64_t M);
  tc_status residual(float* x, const float* y, const float* gamma, int64_t M, const float* norm_gamma = nullptr);
  // out = GLU(gate, up) over n elements: SwiGLU, or GEGLU where the family has it.
  tc_status glu(const float* gate, const float* up, float* out, int64_t n);
  void softcap_logits(float* logits, int64_t n) const;
  tc_status norm_product(const float* gamma, const Matrix& w, float* y);
  tc_status convert(const void* src, tc_dtype from, void* dst, tc_dtype to, int64_t n);
  // The one-token step's products on 8-bit activations (QuantizeQ8Args /
  // GemvQ8Args): X quantised into q8x_ / q8d_, then the product with its
  // epilogue (store, residual add, SwiGLU).
  bool q8_f16x_allowed();
  bool q8_decode();
  tc_status rows8_weights();
  std::vector<Matrix*> q8_matrices();
  tc_status quantize_q8(const float* x, const float* gamma, int64_t K, int64_t M);
  // x: the product quantises it (normalised with gamma when set) itself
  // rather than reading the 8-bit X of the last quantize_q8. rope: y holds
  // [q | k | v] rows that rope_kv_append(*rope) then takes (backend.h).
  tc_status gemv_q8(const Matrix& w, float* y, int epilogue, int64_t M, const float* x = nullptr,
                    const float* gamma = nullptr, const RopeKvAppendArgs* rope = nullptr);
  const float* vec(int64_t offset) const { return offset < 0 ? nullptr : vecs_ + offset; }

  tc_context_s* ctx_ = nullptr;
  Backend* be_ = nullptr;
  bool host_ = true;              // buffers are host memory: weights used in place, no queue
  std::unique_ptr<Queue> queue_;  // device only: every op of a forward, in order
  std::unique_ptr<gguf::File> file_;
  tc_llama_config cfg_{};
  Arch arch_;
  Matrix tok_embd_, output_;
  std::vector<LlamaLayer> layers_;
  int64_t output_norm_ = -1;
  std::vector<float> host_vecs_;     // the vector pool: norms and biases, widened to f32
  std::vector<float> host_rope_;     // per table: cos [n_ctx, D/2] then sin
  const float* vecs_ = nullptr;      // host_vecs_ or its device copy
  const float* cos_[2] = {nullptr, nullptr};
  const float* sin_[2] = {nullptr, nullptr};
  std::vector<tc_buffer_s*> buffers_;  // freed with the model

  void* k_cache_ = nullptr;
  void* v_cache_ = nullptr;
  tc_buffer_s* kv_buffer_ = nullptr;  // holds both, partial_ and arrivals_ (in buffers_)
  uint32_t* arrivals_ = nullptr;      // decode_attention's counters (DecodeAttentionArgs::arrivals)
  tc_dtype kv_ = TC_DTYPE_F16;
  int64_t max_batch_ = 0;
  // Scratch (see alloc_state): f32 activations, f16 copies for the
  // products, the device's logits; the decode attention's partial results
  // for a batch of max_sequences() rows (in the cache's buffer).
  float *x_ = nullptr, *h_ = nullptr, *tmp_ = nullptr, *q_ = nullptr, *qt_ = nullptr, *o_ = nullptr,
        *ot_ = nullptr, *k_ = nullptr, *v_ = nullptr, *gate_ = nullptr, *up_ = nullptr, *logits_ = nullptr,
        *partial_ = nullptr, *qkv_ = nullptr, *gu_ = nullptr,
        *kpack_ = nullptr, *vpack_ = nullptr;
  uint16_t *xh_ = nullptr, *yh_ = nullptr;
  // Parameter block [position, n, token ids[max_batch_], a batch step's
  // positions[max_batch_] and slots[max_batch_]] (device memory) and its
  // host staging copy (page-locked on a device; the block itself on a host).
  int32_t* params_ = nullptr;
  int32_t* params_host_ = nullptr;
  bool params_pinned_ = false;
  // A batch step's greedy tokens on a device (max_batch_ ids); on the host
  // path the step's logits for them, grown on demand.
  int32_t* next_ = nullptr;
  std::vector<float> greedy_logits_;
  // Dequantised weights for the GEMM path, one matrix at a time.
  void* wdq_ = nullptr;
  size_t wdq_bytes_ = 0;
  // The recorded one-token step of sequence slot 0 and the recorded batch
  // steps by row count (device backends with graphs).
  std::unique_ptr<Graph> graph_;
  std::vector<std::unique_ptr<Graph>> batch_graphs_;
  bool graph_failed_ = false;
  // Whether the backend's fused RMSNorm + GEMV may be tried (f32 one-token
  // products on a device); cleared when it answers that it has no kernel.
  bool fused_norm_ = true;
  // Whether a one-token step with f16 activations runs its products on
  // 8-bit activations (q8_decode): -1 not yet known.
  int q8_state_ = -1;
  bool split_made_ = false;  // split_weights has made the second copies
  bool rows8_made_ = false;  // rows8_weights has made the host's interleaved copies
  int8_t* q8x_ = nullptr;  // in the f16 staging buffer xh_
  bool q8_f16x_ = false;   // this forward's 8-bit products take f16 X (at xh_)
  float* q8d_ = nullptr;

  std::vector<int64_t> n_past_ = std::vector<int64_t>(1, 0);  // per sequence slot
  tc_dtype act_ = TC_DTYPE_F32;
};

}  // namespace model
}  // namespace tc
