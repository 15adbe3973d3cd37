// Host <-> device copies of tc_buffer_write / tc_buffer_read.
//
// A copy from pageable host memory cannot be DMA'd directly: the driver
// copies it into its own small pinned buffers first and loses much of the
// link's bandwidth. Large copies here go through a pinned bounce buffer of
// the device instead, in kSlots chunks of kChunk bytes so that the host
// memcpy of one chunk overlaps the DMA of the other:
//
//   write:  memcpy(slot[k], src + off)  ->  cudaMemcpyAsync(dst + off, slot[k])  -> event[k]
//           (slot k is reused once event[k] has completed)
//   read:   cudaMemcpyAsync(slot[k], src + off) -> event[k]; the next chunk is
//           enqueued into the other slot before waiting on event[k] and
//           memcpy'ing slot[k] out.
//
// One thread's memcpy of pageable memory runs well below the link's speed,
// so each chunk's host copy is split over the CPU thread pool (1 MiB slices).
//
// Host memory that is already pinned (cudaHostAlloc, cudaHostRegister) or is
// device/managed memory is copied directly, as are small copies, where the
// driver's own staging is as fast. A direct copy is a cudaMemcpyAsync on the
// legacy default stream followed by a synchronisation of that stream, not a
// plain cudaMemcpy: cudaMemcpy returns once a small pageable host source has
// been staged (before its DMA lands) and does not wait for device-to-device
// copies at all, and the ops run on non-blocking streams that do not order
// themselves after the legacy stream. A kernel launched right after a write
// could otherwise run before the written bytes arrive (and have its output
// overwritten by them).
//
// The bounce buffer and its stream are per device and live for the process
// (freeing pinned memory from a static destructor would run after the CUDA
// runtime has shut down); a mutex serialises copies through it.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "cpu/thread_pool.h"
#include "cuda/device.h"

namespace tc {
namespace cuda {
namespace {

constexpr size_t kChunk = size_t(8) << 20;
constexpr int kSlots = 2;  // copy_from_device refills the slot it is not draining: two exactly
constexpr size_t kDirectBelow = size_t(256) << 10;

struct Staging {
  std::mutex mu;
  bool ready = false;
  cudaStream_t stream = nullptr;
  char* slot[kSlots] = {};
  cudaEvent_t done[kSlots] = {};
};

// The staging of device `index`, set up on first use; null when pinned
// memory or a stream could not be had (copies then go direct).
Staging* staging_of(int index) {
  static std::mutex mu;
  static std::map<int, Staging*>* all = new std::map<int, Staging*>();
  std::lock_guard<std::mutex> lock(mu);
  Staging*& st = (*all)[index];
  if (!st) {
    st = new Staging();
    bool ok = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking) == cudaSuccess;
    for (int k = 0; ok && k < kSlots; ++k)
      ok = cudaHostAlloc(reinterpret_cast<void**>(&st->slot[k]), kChunk, cudaHostAllocPortable) == cudaSuccess &&
           cudaEventCreateWithFlags(&st->done[k], cudaEventDisableTiming) == cudaSuccess;
    if (!ok) cudaGetLastError();
    st->ready = ok;
  }
  return st->ready ? st : nullptr;
}

void host_copy(char* dst, const char* src, size_t n) {
  cpu::parallel_for(int64_t(n), int64_t(1) << 20, [&](int64_t b, int64_t e) {
    std::memcpy(dst + b, src + b, size_t(e - b));
  });
}

// Whether the DMA engines can read/write `p` as it is (pinned host memory,
// device or managed memory).
bool directly_copyable(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// Waits for the staging stream after a failure so no DMA still targets a slot.
tc_status drain(Staging* st, tc_status status) {
  cudaStreamSynchronize(st->stream);
  cudaGetLastError();
  return status;
}

}  // namespace

// See the top of the file for why this is not a plain cudaMemcpy.
tc_status copy_sync(void* dst, const void* src, size_t n, const char* what) {
  if (tc_status e = check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, cudaStreamLegacy), what)) return e;
  return check(cudaStreamSynchronize(cudaStreamLegacy), what);
}

tc_status copy_to_device(Device& dev, void* dst, const void* src, size_t n) {
  cudaSetDevice(dev.index());
  Staging* st = n < kDirectBelow || directly_copyable(src) ? nullptr : staging_of(dev.index());
  if (!st) return copy_sync(dst, src, n, "buffer write");
  std::lock_guard<std::mutex> lock(st->mu);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  for (size_t off = 0, i = 0; off < n; off += kChunk, ++i) {
    const int k = int(i % kSlots);
    const size_t len = std::min(kChunk, n - off);
    if (tc_status e = check(cudaEventSynchronize(st->done[k]), "buffer write (staging)")) return drain(st, e);
    host_copy(st->slot[k], s + off, len);
    if (tc_status e = check(cudaMemcpyAsync(d + off, st->slot[k], len, cudaMemcpyDefault, st->stream),
                            "buffer write (staged copy)"))
      return drain(st, e);
    cudaEventRecord(st->done[k], st->stream);
  }
  return check(cudaStreamSynchronize(st->stream), "buffer write");
}

tc_status copy_from_device(Device& dev, void* dst, const void* src, size_t n) {
  cudaSetDevice(dev.index());
  Staging* st = n < kDirectBelow || directly_copyable(dst) ? nullptr : staging_of(dev.index());
  if (!st) return copy_sync(dst, src, n, "buffer read");
  std::lock_guard<std::mutex> lock(st->mu);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t chunks = (n + kChunk - 1) / kChunk;
  auto enqueue = [&](size_t i) {
    const int k = int(i % kSlots);
    const size_t off = i * kChunk, len = std::min(kChunk, n - off);
    if (tc_status e = check(cudaMemcpyAsync(st->slot[k], s + off, len, cudaMemcpyDefault, st->stream),
                            "buffer read (staged copy)"))
      return e;
    return check(cudaEventRecord(st->done[k], st->stream), "buffer read (staging)");
  };
  if (tc_status e = enqueue(0)) return drain(st, e);
  for (size_t i = 0; i < chunks; ++i) {
    // Slot (i+1) % kSlots held chunk i-1, already copied out: refill it now.
    if (i + 1 < chunks)
      if (tc_status e = enqueue(i + 1)) return drain(st, e);
    const int k = int(i % kSlots);
    if (tc_status e = check(cudaEventSynchronize(st->done[k]), "buffer read")) return drain(st, e);
    const size_t off = i * kChunk;
    host_copy(d + off, st->slot[k], std::min(kChunk, n - off));
  }
  return TC_OK;
}

}  // namespace cuda
}  // namespace tc
