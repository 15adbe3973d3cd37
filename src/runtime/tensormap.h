// The TensorMap: which unfinished task last wrote which part of which
// allocation, so a new task can find its producers.
//
// Entries are hashed by the allocation's base address (buffer.addr). A new
// access depends on every live entry of the same allocation whose view
// overlaps its own (tensor_util's overlap test). Entries of tasks that
// finished successfully impose nothing and are pruned lazily; an entry that a
// new write fully covers is replaced, since the new writer is itself ordered
// after it. Only the orchestrating thread touches the map.
//
// For allocations the runtime created (heap-ring outputs) the bucket also
// remembers the creator, so every later user of the allocation holds the
// creator (and with it the heap bytes) until the user has finished.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>

#include "runtime/task.h"
#include "runtime/tensor_util.h"

namespace simpler {

class TensorMap {
 public:
  struct Entry {
    ChipTensor view;
    ByteRange range;
    TaskSlot* task;
    uint64_t task_id;
  };

  // Calls f(const Entry&, Overlap, bool live) for every entry of t's
  // allocation whose view overlaps t. Entries of finished tasks are pruned,
  // unless `keep_history` (diagnostics want every logical edge): then they
  // are reported with live = false and kept until a write covers them.
  template <class F>
  void find(const ChipTensor& t, const ByteRange& r, bool keep_history, F&& f) {
    auto it = buckets_.find(t.buffer.addr);
    if (it == buckets_.end()) return;
    Bucket& b = it->second;
    // Entries are ordered by their low byte; none is wider than max_span.
    uint64_t from = r.lo > b.max_span ? r.lo - b.max_span : 0;
    for (auto e = b.by_lo.lower_bound(from); e != b.by_lo.end() && e->first < r.hi;) {
      const bool is_live = live(e->second);
      if (!is_live && !keep_history) {
        e = b.by_lo.erase(e);
        size_--;
        continue;
      }
      Overlap o = overlap(t, r, e->second.view, e->second.range);
      if (o != Overlap::None) f(e->second, o, is_live);
      ++e;
    }
  }

  // Records `task` as the latest writer of t's view.
  void insert(const ChipTensor& t, const ByteRange& r, TaskSlot* task, bool keep_history = false);

  // The live creator of a runtime-created allocation, or null.
  TaskSlot* creator(uint64_t base, uint64_t* id) const;
  void set_creator(uint64_t base, TaskSlot* task);

  size_t size() const { return size_; }
  void clear();

  static bool live(const Entry& e) {
    if (e.task->id != e.task_id || e.task->retired.load(std::memory_order_acquire)) return false;
    return e.task->state.load(std::memory_order_acquire) != kDone;
  }

 private:
  struct Bucket {
    std::multimap<uint64_t, Entry> by_lo;
    uint64_t max_span = 0;
    TaskSlot* creator = nullptr;
    uint64_t creator_id = 0;
  };
  void sweep();
  bool keep_history_ = false;

  std::unordered_map<uint64_t, Bucket> buckets_;
  size_t size_ = 0;
  size_t sweep_at_ = 4096;
};

}  // namespace simpler
