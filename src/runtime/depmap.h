// The level-2 TensorMap keyed by task ids a caller picks, for schedulers
// above the chips (the level-3 one, and simpler_depmap_* of the C ABI):
// dependencies by exactly the rules of a chip run, read-after-write and
// write-after-write over overlapping views of one allocation, write-after-read
// not tracked.
//
// Each live task owns a TaskSlot (only id and state matter to the TensorMap);
// a finished task's slot goes back to a free list, and reusing it under a new
// id makes every entry that still points at it stale, which is how
// TensorMap::live() prunes them.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"
#include "runtime/task.h"
#include "runtime/tensormap.h"

namespace simpler {

class DepMap {
 public:
  // Checks the views and access bytes of a new task `id` (not live) and
  // calls on_producer(id) once for each live task whose recorded writes
  // overlap any of them. Nothing is recorded: record() follows (or not).
  template <class F>
  Error producers(uint64_t id, const ChipTensor* tensors, const uint8_t* access, uint32_t n, F&& on_producer);
  // Makes `id` live with the OUT / INOUT views of the last producers() call as its writes.
  void record(uint64_t id, const ChipTensor* tensors, const uint8_t* access, uint32_t n);
  // Ends n live tasks, all or none (an id not live, or named twice, is an error).
  Error finish(const uint64_t* ids, uint32_t n);
  // Ends one live task (the caller knows it is).
  void finish(uint64_t id);
  bool live(uint64_t id) const { return live_.count(id) != 0; }
  size_t size() const { return map_.size(); }

 private:
  Error check(uint64_t id, const ChipTensor* tensors, const uint8_t* access, uint32_t n);
  void retire(std::unordered_map<uint64_t, TaskSlot*>::iterator it);

  TensorMap map_;
  std::unordered_map<uint64_t, TaskSlot*> live_;
  std::vector<std::unique_ptr<TaskSlot>> pool_;
  std::vector<TaskSlot*> free_slots_;
  std::vector<ByteRange> ranges_;  // of the last producers() call
  uint64_t mark_ = 0;              // de-duplicates producers within one call, ids within one finish
  std::vector<std::unordered_map<uint64_t, TaskSlot*>::iterator> finishing_;
};

template <class F>
Error DepMap::producers(uint64_t id, const ChipTensor* tensors, const uint8_t* access, uint32_t n, F&& on_producer) {
  if (Error e = check(id, tensors, access, n); !e.ok()) return e;
  const uint64_t mark = ++mark_;
  // Every access (read or write) waits for live writers of what it touches.
  for (uint32_t i = 0; i < n; i++) {
    map_.find(tensors[i], ranges_[i], false, [&](const TensorMap::Entry& e, Overlap, bool) {
      if (e.task->mark == mark) return;
      e.task->mark = mark;
      on_producer(e.task_id);
    });
  }
  return {};
}

}  // namespace simpler
