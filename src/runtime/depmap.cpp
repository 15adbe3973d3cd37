#include "runtime/depmap.h"

#include <string>

#include "runtime/tensor_util.h"
#include "simpler/simpler.h"

namespace simpler {

Error DepMap::check(uint64_t id, const ChipTensor* tensors, const uint8_t* access, uint32_t n) {
  if (live_.count(id)) return make_error(TC_ERR_INVALID_ARG, "task %llu is already live", (unsigned long long)id);
  ranges_.resize(n);
  for (uint32_t i = 0; i < n; i++) {
    std::string why;
    if (!check_view(tensors[i], &why))
      return make_error(TC_ERR_INVALID_ARG, "task %llu: tensor %u: %s", (unsigned long long)id, i, why.c_str());
    if (access[i] < SIMPLER_ARG_IN || access[i] > SIMPLER_ARG_INOUT)
      return make_error(TC_ERR_INVALID_ARG, "task %llu: tensor %u: access %d is not IN, OUT or INOUT",
                        (unsigned long long)id, i, access[i]);
    ranges_[i] = byte_range(tensors[i]);
  }
  return {};
}

void DepMap::record(uint64_t id, const ChipTensor* tensors, const uint8_t* access, uint32_t n) {
  TaskSlot* s;
  if (!free_slots_.empty()) {
    s = free_slots_.back();
    free_slots_.pop_back();
  } else {
    pool_.push_back(std::make_unique<TaskSlot>());
    s = pool_.back().get();
  }
  s->id = id;
  s->mark = 0;
  s->retired.store(false, std::memory_order_relaxed);
  s->state.store(kPending, std::memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++)
    if (access[i] == SIMPLER_ARG_OUT || access[i] == SIMPLER_ARG_INOUT) map_.insert(tensors[i], ranges_[i], s);
  live_[id] = s;
}

void DepMap::retire(std::unordered_map<uint64_t, TaskSlot*>::iterator it) {
  TaskSlot* s = it->second;
  s->state.store(kDone, std::memory_order_relaxed);
  s->id = ~0ull;  // entries naming the slot are stale from now on
  live_.erase(it);
  free_slots_.push_back(s);
}

void DepMap::finish(uint64_t id) {
  auto it = live_.find(id);
  if (it != live_.end()) retire(it);
}

Error DepMap::finish(const uint64_t* ids, uint32_t n) {
  // All or nothing: every id is checked (live, named once) before any retires.
  const uint64_t mark = ++mark_;
  finishing_.clear();
  for (uint32_t i = 0; i < n; i++) {
    auto it = live_.find(ids[i]);
    if (it == live_.end())
      return make_error(TC_ERR_INVALID_ARG, "task %llu is not live", (unsigned long long)ids[i]);
    if (it->second->mark == mark)
      return make_error(TC_ERR_INVALID_ARG, "task %llu is named twice", (unsigned long long)ids[i]);
    it->second->mark = mark;
    finishing_.push_back(it);
  }
  // Erasing one element of an unordered_map leaves the other iterators valid.
  for (auto it : finishing_) retire(it);
  return {};
}

}  // namespace simpler
