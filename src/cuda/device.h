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
  // Scratch for ops that need temporary device memory (attention backward's
  // f32 dQ accumulator, conv2d's transposed dY, partial sums of the norms'
  // weight gradients): grown stream-ordered (cudaMallocAsync), never shrunk,
  // so steady-state calls allocate nothing. Work on one stream runs in order,
  // so successive ops reuse it; it is freed with the stream.
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
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
  // later collect() once it has completed; an empty `keep` records nothing.
  // (A host callback would also work but stalls the stream until the driver
  // thread runs it.)
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

// The current device's SM count, and the shared memory a block may opt
// into (cached per device).
int sm_count();
int max_smem_per_block();

// Points *out at s->scratch, grown (stream-ordered) to at least `bytes`.
tc_status stream_scratch(StreamState* s, size_t bytes, const char* what, void** out);

// One kernel per op of core/ops.def, defined in its family's file.
#define TC_OP(name, Args, caps) tc_status name(Device& dev, StreamState* s, const Args& args);
#include "core/ops.def"
#undef TC_OP

// The cuBLASLt product behind gemm() for other ops: row-major
// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] with `d` normalised as GemmArgs's
// (pitches and strides filled in, batch >= 1; stride 0 reuses one matrix for
// every batch) and C of dtype `c_dtype` (f32 from f16 inputs is allowed).
tc_status gemm_lt(Device& dev, StreamState* s, const tc_gemm_desc& d, tc_dtype c_dtype, const void* a,
                  const void* b, void* c);

// Host <-> device copies of tc_buffer_write / tc_buffer_read (cuda/transfer.cu):
// pageable host memory goes through a pinned bounce buffer of the device,
// pinned (or device) memory is copied directly. Synchronous.
tc_status copy_to_device(Device& dev, void* dst, const void* src, size_t n);
tc_status copy_from_device(Device& dev, void* dst, const void* src, size_t n);
// One copy that has landed when this returns (cudaMemcpy alone does not
// guarantee it for pageable sources or device destinations; see transfer.cu).
tc_status copy_and_wait(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* what);
// M rows of X (K elements of dtype each, RMS-normalised with gamma when
// set) to 8 bits per block of 32: xq and (dx, sx) per block; with xh set,
// rounded to f16 into xh instead.
cudaError_t launch_quantize_q8(tc_dtype dtype, const void* x, const void* gamma, float eps, int64_t M, int64_t K,
                               int8_t* xq, float2* xd, cudaStream_t st, void* xh = nullptr);
// gemv_quantized's products of a few rows of X on 8-bit activations (Q4_0,
// Q8_0, Q4_K, Q5_K in GGUF's layout): X (M rows in dtype f16 or bf16, each
// RMS-normalised with gamma when set) quantised into `scratch`
// (gemv_q8_scratch_bytes(M, K), 256-byte aligned), then Y [M][N] in dtype.
size_t gemv_q8_scratch_bytes(int64_t M, int64_t K);
tc_status gemv_q8_x_rows(StreamState* s, int32_t fmt, tc_dtype dtype, const void* x, const void* gamma, float eps,
                         const void* w, int64_t M, int64_t N, int64_t K, void* y, void* scratch);

// Memory tiers (cuda/tiers.cu). A null StreamState means synchronously.
void* alloc_pinned(Device& dev, size_t nbytes);
void free_pinned(Device& dev, void* ptr);
tc_status copy_tier(Device& dev, StreamState* s, void* dst, const void* src, size_t n, bool to_device);
tc_status run_host(Device& dev, StreamState* s, std::function<tc_status()> fn);

}  // namespace cuda
}  // namespace tc
