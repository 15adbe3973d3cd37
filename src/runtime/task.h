// One task of a run: what to call, with which arguments, and its place in the
// dependency graph. Slots live in the task ring of their scope depth (or in
// the graph of a host_build_graph run) and are reused once the task retires.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "simpler/orchestration.h"
#include "simpler/tensor.h"

namespace simpler {

struct KernelRef;
struct TaskSlot;

enum TaskState : uint8_t {
  kPending = 0,    // waiting for producers
  kReady = 1,      // handed to the executor
  kRunning = 2,
  kDone = 3,       // finished successfully
  kFailed = 4,     // its kernel reported or raised an error
  kCancelled = 5,  // not run: a producer failed or the run is aborting
};

inline bool finished(uint8_t s) { return s >= kDone; }

// Where a dependency came from (dep_gen's "source").
enum class DepSource : uint8_t { TensorMap = 0, Creator = 1, Explicit = 2 };

// One edge, producer -> consumer. Allocated from the consumer's dependency
// pool at submit; the consumer's edges are contiguous (its fan-in), the
// producer threads the ones it must notify through `next` (its fan-out).
struct DepEntry {
  TaskSlot* producer;
  TaskSlot* consumer;
  DepEntry* next;
};

// A tiny test-and-set lock for a task's fan-out list; held for a few stores.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire))
      while (flag_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct TaskSlot {
  // Identity: id = (position in its ring << 2) | ring.
  uint64_t id = 0;
  uint32_t ring = 0;
  uint32_t scope_depth = 0;
  uint64_t scope_seq = 0;  // the scope whose reference this task holds
  uint64_t mark = 0;       // scratch of the orchestrating thread (de-duplication)
  int32_t func_id = -1;
  int32_t core_type = 0;
  const KernelRef* kernel = nullptr;  // null: an alloc-only task (no kernel)

  // Arguments: tensors (normalised), then argv = pointers to them + scalars.
  uint32_t tensor_count = 0;
  uint32_t scalar_count = 0;
  uint8_t access[SIMPLER_MAX_CORE_TENSORS] = {};
  uint32_t created_mask = 0;  // bit i: tensor i was allocated by the runtime
  // Vectors keep their capacity when the slot is reused, so a warm ring
  // submits without allocating.
  std::vector<ChipTensor> tensors;
  std::vector<int64_t> argv;

  // Execution.
  uint32_t block_num = 1;
  std::atomic<uint32_t> next_block{0};
  std::atomic<uint32_t> blocks_done{0};
  std::atomic<uint8_t> state{kPending};
  std::atomic<bool> poisoned{false};
  std::atomic<bool> block_failed{false};

  // Graph. fanin_pending counts unfinished producers plus one guard held
  // during submit; refs counts the scope's reference, the task's own
  // completion and one per consumer that has not finished yet. The slot
  // retires (its ring space and heap bytes come back) when refs reaches 0.
  std::atomic<int32_t> fanin_pending{0};
  std::atomic<int32_t> refs{0};
  SpinLock fanout_lock;
  bool fanout_closed = false;  // set under fanout_lock when the task finishes
  DepEntry* fanout = nullptr;
  DepEntry* fanin = nullptr;
  uint32_t fanin_count = 0;
  uint32_t fanin_total = 0;  // producers at submit, finished ones included
  std::atomic<bool> retire_ready{false};
  std::atomic<bool> retired{false};  // its ring space is free again (slot not yet reused)

  // Ring bookkeeping: where the heap and the dependency pool stand once this
  // task's allocations are made; retiring the task frees up to there.
  uint64_t heap_end = 0;
  uint64_t dep_end = 0;

  // Timeline, nanoseconds since the run started (swimlane).
  uint64_t t_submit = 0, t_submitted = 0, t_ready = 0, t_start = 0, t_end = 0, t_finish = 0;
  int32_t core = -1;

  // Host-build-graph: successors in execution order (the fan-out, frozen).
  std::vector<TaskSlot*> succ;
  int32_t static_fanin = 0;
};

inline uint32_t ring_of(uint64_t id) { return uint32_t(id & 3); }
inline uint64_t pos_of(uint64_t id) { return id >> 2; }
inline uint64_t make_id(uint64_t pos, uint32_t ring) { return (pos << 2) | ring; }

}  // namespace simpler
