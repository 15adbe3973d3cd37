// Memory tiers on CUDA: page-locked host memory for L1 (so copies to and from
// the GPU are DMA and can overlap kernels), cudaMemcpyAsync on the caller's
// stream for L0 <-> L1, and host work (the spill-file I/O of L3) ordered with
// the stream as a host function (cudaLaunchHostFunc). Host functions may not
// call CUDA nor free device or pinned memory, so each finished task is parked
// on the device and destroyed at its next collect().
#include <memory>

#include "core/error.h"
#include "cuda/device.h"

namespace tc {
namespace cuda {

void* alloc_pinned(Device& dev, size_t nbytes) {
  cudaSetDevice(dev.index());
  dev.collect();
  void* p = nullptr;
  if (cudaHostAlloc(&p, nbytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void free_pinned(Device& dev, void* ptr) {
  cudaSetDevice(dev.index());
  cudaFreeHost(ptr);
}

tc_status copy_tier(Device& dev, StreamState* s, void* dst, const void* src, size_t n, bool to_device) {
  cudaSetDevice(dev.index());
  const cudaMemcpyKind kind = to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
  if (!s) return copy_sync(dst, src, n, "tier move copy");
  s->last_kernel = to_device ? "tier_copy_h2d" : "tier_copy_d2h";
  return check(cudaMemcpyAsync(dst, src, n, kind, s->stream), "tier move copy (async)");
}

namespace {

struct HostTask {
  std::function<tc_status()> fn;
  Device* dev;
};

void CUDART_CB run_task(void* p) {
  auto* task = static_cast<HostTask*>(p);
  task->fn();  // records its own failure (the move's status)
  task->dev->park_object(std::shared_ptr<void>(task));  // destroyed at collect(), outside the callback
}

}  // namespace

tc_status run_host(Device& dev, StreamState* s, std::function<tc_status()> fn) {
  if (!s) return fn();
  cudaSetDevice(dev.index());
  auto* task = new HostTask{std::move(fn), &dev};
  cudaError_t err = cudaLaunchHostFunc(s->stream, run_task, task);
  if (err != cudaSuccess) {
    delete task;
    return check(err, "tier move: cudaLaunchHostFunc");
  }
  return TC_OK;
}

}  // namespace cuda
}  // namespace tc
