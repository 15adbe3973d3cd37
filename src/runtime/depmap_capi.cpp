// The level-2 TensorMap behind a small C ABI, so the level-3 scheduler (in
// Python, one process above the chips) infers dependencies by exactly the
// rules of a chip run: read-after-write and write-after-write over
// overlapping views of one allocation, write-after-read not tracked.
//
// A caller names tasks by increasing ids. Each live task owns a TaskSlot
// (only id and state matter to the TensorMap); a finished task's slot goes
// back to a free list, and reusing it under a new id makes every entry that
// still points at it stale, which is how TensorMap::live() prunes them.
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"
#include "runtime/task.h"
#include "runtime/tensor_util.h"
#include "runtime/tensormap.h"
#include "simpler/simpler.h"

struct simpler_depmap_s {
  simpler::TensorMap map;
  std::unordered_map<uint64_t, simpler::TaskSlot*> live;
  std::vector<std::unique_ptr<simpler::TaskSlot>> pool;
  std::vector<simpler::TaskSlot*> free_slots;
  uint64_t mark = 0;  // de-duplicates producers within one submit, ids within one finish
  // finish's tasks between its check and its retirement (kept: no allocation a call).
  std::vector<std::unordered_map<uint64_t, simpler::TaskSlot*>::iterator> finishing;
};

using namespace simpler;

namespace {

template <class F>
tc_status depmap_guarded(const char* fn, F&& body) noexcept {
  try {
    Error e = body();
    return e.ok() ? ok() : fail_with(e);
  } catch (const std::bad_alloc&) {
    return fail(TC_ERR_ALLOC, "%s: out of host memory", fn);
  } catch (const std::exception& ex) {
    return fail(TC_ERR_INTERNAL, "%s: %s", fn, ex.what());
  }
}

TaskSlot* take_slot(simpler_depmap_s* m, uint64_t id) {
  TaskSlot* s;
  if (!m->free_slots.empty()) {
    s = m->free_slots.back();
    m->free_slots.pop_back();
  } else {
    m->pool.push_back(std::make_unique<TaskSlot>());
    s = m->pool.back().get();
  }
  s->id = id;
  s->mark = 0;
  s->retired.store(false, std::memory_order_relaxed);
  s->state.store(kPending, std::memory_order_relaxed);
  return s;
}

}  // namespace

extern "C" {

tc_status simpler_depmap_create(simpler_depmap* out) {
  return depmap_guarded("simpler_depmap_create", [&]() -> Error {
    if (!out) return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_create: output pointer is null");
    *out = new simpler_depmap_s();
    return {};
  });
}

tc_status simpler_depmap_destroy(simpler_depmap m) {
  delete m;
  return ok();
}

tc_status simpler_depmap_submit(simpler_depmap m, uint64_t task_id, const ChipTensor* tensors, const uint8_t* access,
                                uint32_t n, uint64_t* out_producers, uint32_t capacity, uint32_t* out_count) {
  return depmap_guarded("simpler_depmap_submit", [&]() -> Error {
    if (!m || !out_count || (n && (!tensors || !access)) || (capacity && !out_producers))
      return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_submit: null argument");
    if (m->live.count(task_id))
      return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_submit: task %llu is already live",
                        (unsigned long long)task_id);
    std::vector<ByteRange> ranges(n);
    for (uint32_t i = 0; i < n; i++) {
      std::string why;
      if (!check_view(tensors[i], &why))
        return make_error(TC_ERR_INVALID_ARG, "task %llu: tensor %u: %s", (unsigned long long)task_id, i, why.c_str());
      if (access[i] < SIMPLER_ARG_IN || access[i] > SIMPLER_ARG_INOUT)
        return make_error(TC_ERR_INVALID_ARG, "task %llu: tensor %u: access %d is not IN, OUT or INOUT",
                          (unsigned long long)task_id, i, access[i]);
      ranges[i] = byte_range(tensors[i]);
    }
    TaskSlot* self = take_slot(m, task_id);
    const uint64_t mark = ++m->mark;
    uint32_t count = 0;
    // Every access (read or write) waits for live writers of what it touches.
    for (uint32_t i = 0; i < n; i++) {
      m->map.find(tensors[i], ranges[i], false, [&](const TensorMap::Entry& e, Overlap, bool) {
        if (e.task == self || e.task->mark == mark) return;
        e.task->mark = mark;
        if (count < capacity) out_producers[count] = e.task_id;
        count++;
      });
    }
    *out_count = count;
    if (count > capacity) {  // nothing recorded: the task is not live
      self->id = ~0ull;
      m->free_slots.push_back(self);
      return make_error(TC_ERR_INVALID_ARG, "task %llu has %u producers; the output holds %u",
                        (unsigned long long)task_id, count, capacity);
    }
    for (uint32_t i = 0; i < n; i++)
      if (access[i] == SIMPLER_ARG_OUT || access[i] == SIMPLER_ARG_INOUT) m->map.insert(tensors[i], ranges[i], self);
    m->live[task_id] = self;
    return {};
  });
}

tc_status simpler_depmap_finish(simpler_depmap m, const uint64_t* task_ids, uint32_t n) {
  return depmap_guarded("simpler_depmap_finish", [&]() -> Error {
    if (!m || (n && !task_ids)) return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_finish: null argument");
    // All or nothing: every id is checked (live, named once) before any retires.
    const uint64_t mark = ++m->mark;
    m->finishing.clear();
    for (uint32_t i = 0; i < n; i++) {
      auto it = m->live.find(task_ids[i]);
      if (it == m->live.end())
        return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_finish: task %llu is not live",
                          (unsigned long long)task_ids[i]);
      if (it->second->mark == mark)
        return make_error(TC_ERR_INVALID_ARG, "simpler_depmap_finish: task %llu is named twice",
                          (unsigned long long)task_ids[i]);
      it->second->mark = mark;
      m->finishing.push_back(it);
    }
    // Erasing one element of an unordered_map leaves the other iterators valid.
    for (auto it : m->finishing) {
      TaskSlot* s = it->second;
      s->state.store(kDone, std::memory_order_relaxed);
      s->id = ~0ull;  // entries naming the slot are stale from now on
      m->live.erase(it);
      m->free_slots.push_back(s);
    }
    return {};
  });
}

uint64_t simpler_depmap_size(simpler_depmap m) { return m ? m->map.size() : 0; }

}  // extern "C"
