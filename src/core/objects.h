// The objects behind the core C handles (context, buffer, stream); the
// handle registry is core/handles.h.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/handles.h"
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

// Buffer objects, for the C API and for code inside the library (models,
// loaders) that needs device memory without going through the C API. They
// return plain objects; handle_of() gives the handle for a caller.
//
// A buffer over `storage`, counted by its context and known to the memory
// tiers; `owner` non-null marks one that only its owner frees.
tc_buffer_s* new_buffer(tc_context_s* ctx, StorageRef storage, const void* owner = nullptr);
// `nbytes` (> 0) of device memory under the context's budget, in tier L0.
tc_status allocate_buffer(tc_context_s* ctx, size_t nbytes, const void* owner, tc_buffer_s** out);
// Frees it as tc_buffer_free would (a checkpoint registered on it is dropped
// with it); fails, keeping the buffer, when its checkpoint is busy.
tc_status delete_buffer(tc_buffer_s* buf);

// Thread-local record of the backend that ran the thread's last kernel, and
// of the last CUDA kernel or library call it launched.
void note_backend(tc_backend backend);
tc_backend last_backend();
void note_cuda_kernel(const char* name);
const char* last_cuda_kernel();

}  // namespace tc
