// State shared by the CUDA backend's op files: the device, its streams and
// the library handles. Every op runs on a StreamState: the user's stream for
// `_async` calls, the context's own stream (then synchronised) otherwise.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

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

  // Keeps `keep` alive until the work enqueued so far on `s` has finished.
  // The references are parked on the device and dropped at the next collect()
  // (CUDA calls are not allowed inside stream callbacks).
  void keep_until_done(StreamState* s, std::vector<StorageRef> keep);
  void collect();

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
  std::mutex grave_mu_;
  std::vector<std::vector<StorageRef>> grave_;
  std::vector<std::shared_ptr<void>> grave_objects_;  // memory tiers: finished host tasks
};

// "what: cudaErrorX (message)" with the right status.
tc_status check(cudaError_t err, const char* what);
tc_status check_lt(cublasStatus_t st, const char* what);

// Ops (one file per family).
tc_status gemm(Device& dev, StreamState* s, const GemmArgs& args);

// Memory tiers (cuda/tiers.cu). A null StreamState means synchronously.
void* alloc_pinned(Device& dev, size_t nbytes);
void free_pinned(Device& dev, void* ptr);
tc_status copy_tier(Device& dev, StreamState* s, void* dst, const void* src, size_t n, bool to_device);
tc_status run_host(Device& dev, StreamState* s, std::function<tc_status()> fn);

}  // namespace cuda
}  // namespace tc
