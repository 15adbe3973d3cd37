// The Backend interface: what a device must provide for tensorcore to run on
// it. src/capi validates every argument before calling in, so backends assume
// valid input. Each op runs on `queue` when one is given (returning at once)
// or synchronously in the caller's thread when `queue` is null.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorcore/context.h"
#include "tensorcore/gemm.h"

namespace tc {

class Backend;
struct TierAccounts;

// Bytes owned by a buffer. Shared between the buffer handle and every op
// enqueued on it, so freeing a handle never frees memory that pending work
// still reads.
struct Storage {
  Backend* backend = nullptr;
  void* data = nullptr;
  size_t size = 0;
  bool owned = false;
  // ---- Memory tiers and checkpointing (core/tiers.h) ----
  // A Storage never changes tier: a move or a checkpoint discard replaces the
  // buffer's Storage with a new one.
  int32_t tier = 0;        // TC_TIER_*: L0 `data` is device memory, L1 host memory, L3 the file `path`
  bool resident = true;    // false: discarded by a checkpoint, no bytes anywhere
  std::string path;        // L3 spill file, removed with the Storage
  std::shared_ptr<TierAccounts> accounts;  // counts `size` under `tier` while alive (owned storage)
  ~Storage();
};
using StorageRef = std::shared_ptr<Storage>;

// What every op's arguments carry: the name and shapes for TC_TRACE, and the
// storage the op touches, kept alive until the op has run.
struct OpInfo {
  const char* name = "";
  std::string shapes;
  std::vector<StorageRef> keep;
};

struct GemmArgs {
  OpInfo info;
  tc_gemm_desc d;  // normalised: lda/ldb/ldc and strides filled in, batch >= 1
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
};

// The backend side of a stream: an ordered queue of work.
class Queue {
 public:
  virtual ~Queue() = default;
  // Waits for all enqueued work; returns the first failure since the last
  // sync and its detail.
  virtual tc_status sync(std::string* detail) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual tc_backend kind() const = 0;
  virtual void device_info(struct tc_device_info* out) const = 0;
  virtual uint64_t available_capabilities() const = 0;

  // Memory. alloc returns null on failure.
  virtual void* alloc(size_t nbytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual bool host_accessible() const = 0;
  // Whether caller memory at `ptr` can back a buffer of this device
  // (tc_buffer_from_ptr); false with a detail recorded otherwise.
  virtual bool accepts_pointer(const void* ptr, size_t nbytes) const { return true; }
  virtual tc_status copy_in(void* dst, const void* src, size_t nbytes) = 0;
  virtual tc_status copy_out(void* dst, const void* src, size_t nbytes) = 0;

  virtual std::unique_ptr<Queue> create_queue() = 0;

  // Ops.
  virtual tc_status gemm(const GemmArgs& args, Queue* queue) = 0;

  // ---- Memory tiers (core/tiers.h) -----------------------------------------
  // Whether the methods below are implemented (TC_CAPABILITY_MEMORY_TIERS).
  virtual bool supports_tiers() const { return false; }
  // Host memory for the L1 tier (page-locked where the device copies from
  // it directly); null on failure.
  virtual void* alloc_host(size_t nbytes);
  virtual void release_host(void* ptr);
  // Copies n bytes between device memory and host memory (`to_device` says
  // which way) after the work enqueued on `queue`, or now when it is null.
  virtual tc_status copy_async(void* dst, const void* src, size_t n, bool to_device, Queue* queue);
  // Runs `fn` on a host thread after the work enqueued on `queue` and before
  // work enqueued later, or now when `queue` is null. `fn` records its own
  // failure; it must not call the device API nor free device memory.
  virtual tc_status run_host(Queue* queue, std::function<tc_status()> fn);
  // Drops `refs` where freeing memory is allowed (CUDA: at the next
  // collect(), never inside a stream callback).
  virtual void defer_release(std::vector<StorageRef> refs) {}
  // Frees what defer_release and finished stream work left behind.
  virtual void collect() {}
};

// Backend factories. make_cuda_backend returns null with a detail recorded
// when CUDA is not built or no GPU is usable.
std::unique_ptr<Backend> make_cpu_backend();
std::unique_ptr<Backend> make_cuda_backend(int device_index);
int cuda_device_count();  // 0 when not built or no GPU
tc_status cuda_device_info(int device_index, struct tc_device_info* out);

}  // namespace tc
