#include "runtime/tensormap.h"

namespace simpler {

namespace {

// True when every element of `inner` is an element of `outer` (both views of
// one allocation). Exact for identical views and contiguous ranges; false
// (keep both entries) whenever that is not certain.
bool covers(const ChipTensor& outer, const ByteRange& ro, const ChipTensor& inner, const ByteRange& ri) {
  if (ri.lo < ro.lo || ri.hi > ro.hi) return false;
  if (is_contiguous(outer)) return true;
  return overlap(outer, ro, inner, ri) == Overlap::Exact;
}

bool creator_live(TaskSlot* t, uint64_t id) {
  return t && t->id == id && !t->retired.load(std::memory_order_acquire);
}

}  // namespace

void TensorMap::insert(const ChipTensor& t, const ByteRange& r, TaskSlot* task, bool keep_history) {
  if (r.lo == r.hi) return;
  keep_history_ = keep_history;
  Bucket& b = buckets_[t.buffer.addr];
  uint64_t from = r.lo > b.max_span ? r.lo - b.max_span : 0;
  for (auto e = b.by_lo.lower_bound(from); e != b.by_lo.end() && e->first < r.hi;) {
    if ((!keep_history && !live(e->second)) || covers(t, r, e->second.view, e->second.range)) {
      e = b.by_lo.erase(e);
      size_--;
    } else {
      ++e;
    }
  }
  b.by_lo.emplace(r.lo, Entry{t, r, task, task->id});
  if (r.hi - r.lo > b.max_span) b.max_span = r.hi - r.lo;
  if (++size_ >= sweep_at_) sweep();
}

TaskSlot* TensorMap::creator(uint64_t base, uint64_t* id) const {
  auto it = buckets_.find(base);
  if (it == buckets_.end() || !creator_live(it->second.creator, it->second.creator_id)) return nullptr;
  *id = it->second.creator_id;
  return it->second.creator;
}

void TensorMap::set_creator(uint64_t base, TaskSlot* task) {
  Bucket& b = buckets_[base];
  b.creator = task;
  b.creator_id = task->id;
}

void TensorMap::sweep() {
  if (keep_history_) {  // diagnostics keep finished writers; only stale slots go
    sweep_at_ = size_ * 2;
    return;
  }
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    Bucket& b = it->second;
    for (auto e = b.by_lo.begin(); e != b.by_lo.end();) {
      if (!live(e->second)) {
        e = b.by_lo.erase(e);
        size_--;
      } else {
        ++e;
      }
    }
    if (b.by_lo.empty()) b.max_span = 0;
    if (b.by_lo.empty() && !creator_live(b.creator, b.creator_id))
      it = buckets_.erase(it);
    else
      ++it;
  }
  sweep_at_ = size_ * 2 > 4096 ? size_ * 2 : 4096;
}

void TensorMap::clear() {
  buckets_.clear();
  size_ = 0;
  sweep_at_ = 4096;
}

}  // namespace simpler
