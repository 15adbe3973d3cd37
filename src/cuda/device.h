// State shared by the CUDA backend's op files: the device, its streams and
// the library handles. Every op runs on a StreamState: the user's stream for
// `_async` calls, the context's own stream (then synchronised) otherwise.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/backend.h"

namespace tc {
namespace cuda {

// Per-stream resources: a cuBLASLt workspace must not be shared by work that
// may run concurrently on two streams.
struct StreamState {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::string last_kernel;  // named in the detail when the stream fails
  // Storage used by enqueued work, with the event recorded behind it. Work
  // on one stream completes in order, so only the front needs checking.
  struct Pending {
    cudaEvent_t done;
    std::vector<StorageRef> keep;
  };
  std::mutex pending_mu;
  std::deque<Pending> pending;
};

class Device {
 public:
  explicit Device(int index);
  ~Device();

  int index() const { return index_; }
  const cudaDeviceProp& props() const { return props_; }
  cublasLtHandle_t lt() const { return lt_; }

  StreamState* default_stream() { return &default_; }
  void init_stream(StreamState* s);
  void destroy_stream(StreamState* s);

  // Keeps `keep` alive until the work enqueued so far on `s` has finished:
  // an event is recorded behind the work and the references are dropped by a
  // later collect() once it has completed. (A host callback would also work
  // but stalls the stream until the driver thread runs it.)
  void keep_until_done(StreamState* s, std::vector<StorageRef> keep);
  // Drops the references of finished work on every stream; with `wait`,
  // waits for all of it.
  void collect(bool wait = false);

  // ---- Memory tiers (cuda/tiers.cu) ----
  // Drop `refs` / `obj` at the next collect(): callable from stream callbacks,
  // where freeing device or pinned memory is not allowed.
  void park(std::vector<StorageRef> refs);
  void park_object(std::shared_ptr<void> obj);

 private:
  int index_;
  cudaDeviceProp props_{};
  cublasLtHandle_t lt_ = nullptr;
  StreamState default_;
  void collect_stream(StreamState* s, bool wait);

  std::mutex mu_;  // guards streams_ and free_events_
  std::vector<StreamState*> streams_;
  std::vector<cudaEvent_t> free_events_;
  // Memory tiers: what host functions left to release (park, park_object).
  void drop_parked();
  std::mutex parked_mu_;
  std::vector<std::vector<StorageRef>> parked_;
  std::vector<std::shared_ptr<void>> parked_objects_;
};

// "what: cudaErrorX (message)" with the right status.
tc_status check(cudaError_t err, const char* what);
tc_status check_lt(cublasStatus_t st, const char* what);

// Ops (one file per family).
tc_status gemm(Device& dev, StreamState* s, const GemmArgs& args);

// Model ops (cuda/model_ops.cu): the decoder's small ops.
tc_status embed_rows(Device& dev, StreamState* s, const EmbedRowsArgs& args);
tc_status add(Device& dev, StreamState* s, const AddArgs& args);
tc_status convert(Device& dev, StreamState* s, const ConvertArgs& args);
tc_status rope_kv_append(Device& dev, StreamState* s, const RopeKvAppendArgs& args);
tc_status heads_to_tokens(Device& dev, StreamState* s, const HeadsToTokensArgs& args);
tc_status copy_2d(Device& dev, StreamState* s, const Copy2dArgs& args);
tc_status decode_attention(Device& dev, StreamState* s, const DecodeAttentionArgs& args);

// Memory tiers (cuda/tiers.cu). A null StreamState means synchronously.
void* alloc_pinned(Device& dev, size_t nbytes);
void free_pinned(Device& dev, void* ptr);
tc_status copy_tier(Device& dev, StreamState* s, void* dst, const void* src, size_t n, bool to_device);
tc_status run_host(Device& dev, StreamState* s, std::function<tc_status()> fn);

}  // namespace cuda
}  // namespace tc
