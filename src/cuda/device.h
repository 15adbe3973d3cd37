// State shared by the CUDA backend's op files: the device, its streams and
// the library handles. Every op runs on a StreamState: the user's stream for
// `_async` calls, the context's own stream (then synchronised) otherwise.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <deque>
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

 private:
  int index_;
  cudaDeviceProp props_{};
  cublasLtHandle_t lt_ = nullptr;
  StreamState default_;
  void collect_stream(StreamState* s, bool wait);

  std::mutex mu_;  // guards streams_ and free_events_
  std::vector<StreamState*> streams_;
  std::vector<cudaEvent_t> free_events_;
};

// "what: cudaErrorX (message)" with the right status.
tc_status check(cudaError_t err, const char* what);
tc_status check_lt(cublasStatus_t st, const char* what);

// Ops (one file per family).
tc_status gemm(Device& dev, StreamState* s, const GemmArgs& args);

}  // namespace cuda
}  // namespace tc
