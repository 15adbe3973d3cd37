#include "cuda/device.h"

#include <algorithm>
#include <atomic>

#include "core/error.h"
#include "cuda/attention_cudnn.h"

namespace tc {
namespace cuda {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

tc_status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return TC_OK;
  cudaGetLastError();  // clear a sticky-free error so later calls are not blamed
  return fail(err == cudaErrorMemoryAllocation ? TC_ERR_ALLOC : TC_ERR_DISPATCH, "%s: %s (%s)", what,
              cudaGetErrorName(err), cudaGetErrorString(err));
}

// The device's SM count, read once a device.
int sm_count() {
  static std::atomic<int> cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 132;
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 132;
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

// The device's opt-in shared memory a block may have, read once a device.
int max_smem_per_block() {
  static std::atomic<int> cached[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 48 * 1024;
  int n = cached[dev].load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess || n <= 0)
      n = 48 * 1024;
    cached[dev].store(n, std::memory_order_relaxed);
  }
  return n;
}

tc_status stream_scratch(StreamState* s, size_t bytes, const char* what, void** out) {
  *out = s->scratch;
  if (bytes <= s->scratch_bytes) return TC_OK;
  // Stream-ordered: the old block is released after the work already queued
  // on this stream, the new one is usable by what follows.
  size_t want = std::max(bytes, s->scratch_bytes + s->scratch_bytes / 2);
  void* p = nullptr;
  cudaError_t err = cudaMallocAsync(&p, want, s->stream);
  if (err != cudaSuccess) {
    want = bytes;
    cudaGetLastError();
    err = cudaMallocAsync(&p, want, s->stream);
  }
  if (err != cudaSuccess) return check(err, what);
  if (s->scratch) cudaFreeAsync(s->scratch, s->stream);
  s->scratch = p;
  s->scratch_bytes = want;
  *out = p;
  return TC_OK;
}

tc_status check_lt(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return TC_OK;
  tc_status code = st == CUBLAS_STATUS_ALLOC_FAILED ? TC_ERR_ALLOC
                   : st == CUBLAS_STATUS_NOT_SUPPORTED ? TC_ERR_UNSUPPORTED
                                                       : TC_ERR_DISPATCH;
  return fail(code, "%s: cuBLASLt status %d", what, int(st));
}

Device::Device(int index) : index_(index) {
  cudaSetDevice(index_);
  cudaGetDeviceProperties(&props_, index_);
  cublasLtCreate(&lt_);
  init_stream(&default_);
}

Device::~Device() {
  drain_cudnn_builds(index_);
  cudaSetDevice(index_);
  destroy_stream(&default_);
  drop_parked();
  for (cudaEvent_t ev : free_events_) cudaEventDestroy(ev);
  if (lt_) cublasLtDestroy(lt_);
}

void Device::init_stream(StreamState* s) {
  cudaSetDevice(index_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.push_back(s);
  }
  s->device = index_;
  cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (cudaMalloc(&s->workspace, kWorkspaceBytes) == cudaSuccess) s->workspace_bytes = kWorkspaceBytes;
  else s->workspace = nullptr;
}

void Device::destroy_stream(StreamState* s) {
  cudaSetDevice(index_);
  if (s->scratch) cudaFreeAsync(s->scratch, s->stream);
  s->scratch = nullptr;
  s->scratch_bytes = 0;
  if (s->stream) cudaStreamSynchronize(s->stream);
  collect_stream(s, true);
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
  }
  if (s->workspace) cudaFree(s->workspace);
  if (s->stream) cudaStreamDestroy(s->stream);
  s->stream = nullptr;
  s->workspace = nullptr;
}

void Device::keep_until_done(StreamState* s, std::vector<StorageRef> keep) {
  // Nothing to keep (every op a model enqueues on its own buffers): no event.
  // An event a kernel, recorded and then polled, cost a small model's
  // prefill about a third of its host time.
  if (keep.empty()) return;
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_events_.empty()) {
      ev = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (!ev && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    cudaStreamSynchronize(s->stream);  // no event: wait instead
    return;
  }
  cudaEventRecord(ev, s->stream);
  {
    std::lock_guard<std::mutex> lock(s->pending_mu);
    s->pending.push_back({ev, std::move(keep)});
  }
  collect_stream(s, false);  // cheap: stops at the first unfinished entry
}

void Device::collect_stream(StreamState* s, bool wait) {
  std::vector<std::vector<StorageRef>> dead;
  std::vector<cudaEvent_t> events;
  {
    std::lock_guard<std::mutex> lock(s->pending_mu);
    while (!s->pending.empty()) {
      auto& front = s->pending.front();
      cudaError_t q = wait ? cudaEventSynchronize(front.done) : cudaEventQuery(front.done);
      if (q == cudaErrorNotReady) break;
      if (q != cudaSuccess) cudaGetLastError();  // the stream's error is reported by its sync
      events.push_back(front.done);
      dead.push_back(std::move(front.keep));
      s->pending.pop_front();
    }
  }
  if (!events.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    free_events_.insert(free_events_.end(), events.begin(), events.end());
  }
  // `dead` is released here, outside the locks: buffers may be freed.
}

void Device::collect(bool wait) {
  std::vector<StreamState*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  for (StreamState* s : streams) collect_stream(s, wait);
  drop_parked();
}

// ---- Memory tiers ----------------------------------------------------------------

void Device::park(std::vector<StorageRef> refs) {
  std::lock_guard<std::mutex> lock(parked_mu_);
  parked_.push_back(std::move(refs));
}

void Device::park_object(std::shared_ptr<void> obj) {
  std::lock_guard<std::mutex> lock(parked_mu_);
  parked_objects_.push_back(std::move(obj));
}

void Device::drop_parked() {
  std::vector<std::vector<StorageRef>> refs;
  std::vector<std::shared_ptr<void>> objects;
  {
    std::lock_guard<std::mutex> lock(parked_mu_);
    refs.swap(parked_);
    objects.swap(parked_objects_);
  }
  // Released here, outside the lock and outside any stream callback.
}

}  // namespace cuda
}  // namespace tc
