// The objects behind the C handles, and the registry that tells a live
// handle from a stale or foreign pointer.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/tiers.h"
#include "tensorcore/types.h"

namespace tc {

// The Storage behind a buffer handle. Tier moves and checkpoint discards
// replace it (core/tiers.h), so every read takes a reference under the
// buffer's lock: `buf->storage->data`, `StorageRef r = buf->storage` and
// `a->storage == b->storage` read like a plain StorageRef.
class StorageSlot {
 public:
  StorageSlot() : state_(std::make_shared<BufferState>()) {}
  StorageSlot(const StorageSlot&) = delete;
  StorageSlot& operator=(const StorageSlot&) = delete;

  StorageRef ref() const {
    std::lock_guard<std::mutex> lock(state_->mu);
    return state_->storage;
  }
  StorageRef operator->() const { return ref(); }
  operator StorageRef() const { return ref(); }
  StorageSlot& operator=(StorageRef r) {
    StorageRef old;  // released after the lock
    std::lock_guard<std::mutex> lock(state_->mu);
    old = std::move(state_->storage);
    state_->storage = std::move(r);
    return *this;
  }
  friend bool operator==(const StorageSlot& a, const StorageSlot& b) { return a.ref() == b.ref(); }
  friend bool operator!=(const StorageSlot& a, const StorageSlot& b) { return !(a == b); }

  const std::shared_ptr<BufferState>& state() const { return state_; }

 private:
  std::shared_ptr<BufferState> state_;
};

}  // namespace tc

struct tc_context_s {
  std::unique_ptr<tc::Backend> backend;
  std::atomic<int64_t> live_buffers{0};
  std::atomic<int64_t> live_streams{0};
  // The device GEMM is switched off (TC_DISABLE_CUDA_GEMM and friends, read
  // when the context is created): capi runs GEMMs on host copies.
  bool gemm_on_host = false;
  // Memory tiers: accounting, budgets, spill directory (core/tiers.h).
  tc::TierManager tiers;
  // -- dist: distributed groups (src/dist) built on this context --------------
  std::atomic<int64_t> live_dists{0};
};

struct tc_buffer_s {
  tc_context_s* ctx = nullptr;
  tc::StorageSlot storage;
  // gguf: non-null when the buffer belongs to an object that frees it (a
  // loaded GGUF model); tc_buffer_free refuses such buffers.
  const void* owner = nullptr;
  size_t size() const { return storage->size; }
  char* bytes() const { return static_cast<char*>(storage->data); }
};

struct tc_stream_s {
  tc_context_s* ctx = nullptr;
  std::unique_ptr<tc::Queue> queue;
};

namespace tc {

enum class HandleKind {
  Context,
  Buffer,
  Stream,
  // gguf
  GgufFile,
  GgufModel,
  GgufWriter,
  // end gguf
  Llama,
  Tokenizer,
};

// Every handle given out is registered until it is destroyed.
void register_handle(const void* h, HandleKind kind);
void unregister_handle(const void* h);
bool is_live_handle(const void* h, HandleKind kind);

// Thread-local record of the backend that ran the thread's last kernel, and
// of the last CUDA kernel or library call it launched.
void note_backend(tc_backend backend);
tc_backend last_backend();
void note_cuda_kernel(const char* name);
const char* last_cuda_kernel();

}  // namespace tc
