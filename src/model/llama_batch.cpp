// Several sequences in one model (continuous batching): the cache's
// sequence slots, the batch step (one token of each of n sequences) and
// eval_batch (rows of any sequences: several prompts as one prefill).
//
// A batch step is the forward of llama.cpp for n rows (Llama::forward with
// batch set): one embedding of n rows, every product at M = n (the 8-bit
// products up to kQ8MaxRows rows where the model has them, else GEMV rows
// below kGemmMinRows and GEMM above on a device), the norms, SwiGLU and adds on
// n rows, and per layer one rope_kv_append and one decode_attention for all
// n rows, each row reading its own position and cache slot from the
// parameter block [.., positions[max_batch_], slots[max_batch_]]. Since
// nothing of the step depends on host values, a device with graphs records
// the step once per row count n and replays it with a new parameter block.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/llama.h"

namespace tc {
namespace model {

tc_status Llama::set_max_sequences(int64_t n) {
  if (n == max_sequences()) return TC_OK;
  drop_graphs();  // the recorded steps address the old cache
  return alloc_kv_cache(kv_, n);
}

tc_status Llama::step_batch(int64_t n, float* logits, int32_t* next) {
  if (host_) {  // params_host_ is the block itself
    if (!next) return forward(n, 0, logits, n, 0, true);
    float* lg = logits;
    if (!lg) {
      greedy_logits_.resize(size_t(n * cfg_.n_vocab));
      lg = greedy_logits_.data();
    }
    TC_TRY(forward(n, 0, lg, n, 0, true));
    return argmax_rows(lg, n, next);
  }

  Queue* q = queue_.get();
  TC_TRY(be_->copy_async(params_, params_host_, size_t(3 * max_batch_ + 2) * sizeof(int32_t), true, q));
  if (be_->supports_graphs() && !graph_failed_) {
    if (batch_graphs_.size() <= size_t(n)) batch_graphs_.resize(size_t(n) + 1);
    TC_TRY(replay_or_record(batch_graphs_[size_t(n)], n, true));
  } else {
    TC_TRY(forward(n, 0, logits || next ? logits_ : nullptr, n, 0, true));
  }
  if (next) {
    TC_TRY(argmax_rows(logits_, n, next_));
    TC_TRY(be_->copy_async(next, next_, size_t(n) * sizeof(int32_t), false, q));
  }
  return logits_back(logits, n, "tc_llama_decode_batch");
}

tc_status Llama::argmax_rows(const float* logits, int64_t rows, int32_t* out) {
  ArgmaxRowsArgs a;
  a.info.name = "llama.argmax";
  a.rows = rows, a.n = cfg_.n_vocab;
  a.x = logits, a.out = out;
  return be_->argmax_rows(a, queue_.get());
}

tc_status Llama::decode_batch(const int32_t* seqs, const int32_t* tokens, int64_t n, float* logits, int32_t* next) {
  params_host_[0] = 0;
  params_host_[1] = int32_t(n);
  std::memcpy(params_host_ + 2, tokens, size_t(n) * sizeof(int32_t));
  int32_t* pos = batch_pos(params_host_);
  int32_t* slots = batch_slots(params_host_);
  for (int64_t i = 0; i < n; ++i) {
    pos[i] = int32_t(n_past_[size_t(seqs[i])]);
    slots[i] = seqs[i];
  }
  if (tc_status st = finish(step_batch(n, logits, next))) return st;
  if (logits && arch_.final_softcap > 0.0f) softcap_logits(logits, n * cfg_.n_vocab);
  for (int64_t i = 0; i < n; ++i) ++n_past_[size_t(seqs[i])];
  return TC_OK;
}

// Rows of several sequences as forwards of up to max_batch_ rows: the
// products run on all of a forward's rows at once (a GEMM of every prompt's
// tokens where decode_batch's rows are one token each), each sequence's run
// of rows attends as a chunk of that sequence, and only the wanted rows go
// through the output matrix.
tc_status Llama::eval_batch(const int32_t* seqs, const int32_t* tokens, int64_t n, const uint8_t* want,
                            float* logits) {
  const int64_t V = cfg_.n_vocab;
  std::vector<int64_t> next(n_past_);  // each sequence's next position
  float* out = logits;
  Chunk chunk;
  for (int64_t c0 = 0; c0 < n; c0 += max_batch_) {
    const int64_t m = std::min(max_batch_, n - c0);
    params_host_[0] = 0;
    params_host_[1] = int32_t(m);
    std::memcpy(params_host_ + 2, tokens + c0, size_t(m) * sizeof(int32_t));
    int32_t* pos = batch_pos(params_host_);
    chunk.segments.clear();
    chunk.out.clear();
    int64_t rows = 0;
    for (int64_t i = 0; i < m; ++i) {
      const int32_t s = seqs[c0 + i];
      pos[i] = int32_t(next[size_t(s)]++);
      if (chunk.segments.empty() || chunk.segments.back().slot != s)
        chunk.segments.push_back({i, 0, s, pos[i]});
      ++chunk.segments.back().n;
      if (out && (!want || want[c0 + i])) {
        if (!chunk.out.empty() && chunk.out.back().first + chunk.out.back().second == i) ++chunk.out.back().second;
        else chunk.out.push_back({i, 1});
        ++rows;
      }
    }
    tc_status st;
    if (host_) {
      st = forward(m, 0, rows ? out : nullptr, rows, 0, false, &chunk);  // params_host_ is the block itself
    } else {
      st = be_->copy_async(params_, params_host_, size_t(3 * max_batch_ + 2) * sizeof(int32_t), true, queue_.get());
      if (!st) st = forward(m, 0, rows ? logits_ : nullptr, rows, 0, false, &chunk);
      if (!st) st = logits_back(out, rows, "tc_llama_eval_batch");
    }
    if (tc_status f = finish(st)) return f;
    if (rows && arch_.final_softcap > 0.0f) softcap_logits(out, rows * V);
    if (rows) out += rows * V;
  }
  n_past_ = next;
  return TC_OK;
}

}  // namespace model
}  // namespace tc
