// The submit path of the engine: checking a task against its kernel,
// resolving its tensors onto their allocations, finding its producers
// (creators, TensorMap, explicit dependencies), taking ring space and wiring
// the edges. See engine.h for the model.
#include <algorithm>
#include <cstdio>

#include "runtime/device.h"
#include "runtime/diagnostics.h"
#include "runtime/engine.h"
#include "simpler/simpler.h"

namespace simpler {

namespace {

const char* access_name(uint8_t a) {
  return a == SIMPLER_ACCESS_IN ? "add_input" : a == SIMPLER_ACCESS_OUT ? "add_output" : "add_inout";
}
const char* direction_name(int32_t d) {
  switch (d) {
    case SIMPLER_ARG_IN: return "IN";
    case SIMPLER_ARG_OUT: return "OUT";
    case SIMPLER_ARG_INOUT: return "INOUT";
    default: return "SCALAR";
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Submit
// ---------------------------------------------------------------------------

bool Engine::resolve(ChipTensor& v, uint32_t i, const KernelRef* k, int32_t func_id) {
  const uint64_t addr = v.buffer.addr;
  auto bad = [&](const std::string& why) {
    fail_submit(TC_ERR_INVALID_ARG,
                task_label(func_id, k) + ": tensor argument " + std::to_string(i) + " " + describe(v) + ": " + why);
    return false;
  };
  bool found = false;
  // Runtime-created outputs live in the heap rings (or a graph's heap) and
  // keep their own base: it is what the creator is known by.
  auto in_heap = [&](uint64_t base, uint64_t cap) {
    if (addr < base || addr >= base + cap) return false;
    found = true;
    return true;
  };
  if (!build_) {
    for (Ring& r : rings_)
      if (r.heap_base && in_heap(r.heap_base, r.heap_cap)) {
        if (v.buffer.size > r.heap_base + r.heap_cap - addr) return bad("its buffer runs past the heap ring");
        break;
      }
  } else {
    for (const Region& c : graph_->heap_chunks)
      if (in_heap(c.base, c.size)) {
        if (v.buffer.size > c.base + c.size - addr) return bad("its buffer runs past the graph's heap");
        break;
      }
  }
  if (v.scope_tag) {
    // A runtime-created tensor lives until its scope ends: after that its
    // heap bytes may already hold another task's output.
    if (!found) return bad("scope_tag is set but the tensor was not created by the runtime (it must be 0)");
    bool open = false;
    for (const Scope& sc : scopes_) open |= uint32_t(sc.seq) == v.scope_tag;
    if (!open)
      return bad("it was created (TensorCreateInfo) in a scope that has ended; a created tensor is valid only "
                 "inside the scope that created it (create it in an enclosing scope to use it later)");
  }
  if (!found) {
    // Chip arguments and host regions of this run.
    auto it = std::upper_bound(regions_.begin(), regions_.end(), addr,
                               [](uint64_t a, const Region& r) { return a < r.base; });
    uint64_t base = 0, size = 0;
    if (it != regions_.begin() && addr < std::prev(it)->base + std::prev(it)->size) {
      base = std::prev(it)->base;
      size = std::prev(it)->size;
      found = true;
    } else if (device_->find_start(addr, &base, &size)) {
      found = true;
    }
    if (!found) return bad("the address is not inside any allocation of this worker or argument of this call");
    if (addr != base) {
      const uint64_t e = elem_size(v);
      if (e == 0) return bad("unknown dtype");
      if ((addr - base) % e) return bad("its address is not a whole number of elements into its allocation");
      v.start_offset += (addr - base) / e;
      v.buffer.addr = base;
    }
    v.buffer.size = size;
  }
  std::string why;
  if (!check_view(v, &why)) return bad("outside its allocation: " + why);
  return true;
}

void Engine::add_producer(TaskSlot* p, uint64_t id, bool live, uint32_t arg, DepSource src, Overlap o) {
  producers_.push_back(Producer{p, id, live, arg, src, o});
}

void Engine::submit(int32_t func_id, int32_t core_type, const SimplerCoreArgs& a, TaskOutputTensors* out) {
  if (fatal()) return;
  const uint64_t t_begin = diag_ ? now_ns() : 0;
  Scope& sc = scopes_.back();
  const KernelRef* k = nullptr;
  if (func_id != -1) {
    k = kernels_ ? kernels_->find(func_id) : nullptr;
    if (!k) {
      std::string ids;
      if (kernels_)
        for (int32_t id : kernels_->ids()) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      fail_submit(TC_ERR_KERNEL_NOT_FOUND, task_label(func_id, nullptr) + ": unknown func_id " +
                                               std::to_string(func_id) + "; the ChipCallable's children are [" +
                                               ids + "]");
      return;
    }
  }
  if (a.error) {
    fail_submit(TC_ERR_INVALID_ARG, task_label(func_id, k) + ": " + a.error);
    return;
  }
  if (a.tensor_count > SIMPLER_MAX_CORE_TENSORS || a.scalar_count > SIMPLER_MAX_CORE_SCALARS ||
      a.dep_count > SIMPLER_MAX_CORE_DEPS) {
    fail_submit(TC_ERR_INVALID_ARG, task_label(func_id, k) + ": too many arguments (at most 32 tensors, 16 scalars, "
                                                              "16 explicit dependencies)");
    return;
  }
  if (k) {
    if (a.tensor_count != k->tensor_args || a.scalar_count != k->scalar_args) {
      fail_submit(TC_ERR_INVALID_ARG,
                  format("%s: the kernel's signature has %u tensor(s) and %u scalar(s) but the task passes %u "
                         "tensor(s) and %u scalar(s)",
                         task_label(func_id, k).c_str(), k->tensor_args, k->scalar_args, a.tensor_count,
                         a.scalar_count));
      return;
    }
    uint32_t ti = 0;
    for (int32_t d : k->signature) {
      if (d == SIMPLER_ARG_SCALAR) continue;
      uint8_t need = uint8_t(d == SIMPLER_ARG_IN ? SIMPLER_ACCESS_IN
                                                 : d == SIMPLER_ARG_OUT ? SIMPLER_ACCESS_OUT : SIMPLER_ACCESS_INOUT);
      if ((a.access[ti] & need) != need) {
        fail_submit(TC_ERR_INVALID_ARG,
                    format("%s: tensor argument %u is %s in the kernel's signature but was added with %s (the "
                           "runtime would miss %s)",
                           task_label(func_id, k).c_str(), ti, direction_name(d), access_name(a.access[ti]),
                           need & SIMPLER_ACCESS_OUT ? "its write" : "its read"));
        return;
      }
      ti++;
    }
  } else {
    for (uint32_t i = 0; i < a.tensor_count; i++)
      if (!a.created[i]) {
        fail_submit(TC_ERR_INVALID_ARG, task_label(func_id, k) + ": alloc_tensors takes TensorCreateInfo outputs only");
        return;
      }
    if (a.scalar_count) {
      fail_submit(TC_ERR_INVALID_ARG, task_label(func_id, k) + ": alloc_tensors takes no scalars");
      return;
    }
  }
  const uint32_t block_num = a.block_num == 0 ? 1 : a.block_num;
  if (block_num > (1u << 20)) {
    fail_submit(TC_ERR_INVALID_ARG, format("%s: block_num %u exceeds 2^20", task_label(func_id, k).c_str(), block_num));
    return;
  }

  // Resolve the tensors before taking any ring space, so a bad argument
  // leaves the rings untouched.
  thread_local ChipTensor views[SIMPLER_MAX_CORE_TENSORS];
  thread_local ByteRange ranges[SIMPLER_MAX_CORE_TENSORS];
  uint64_t created_bytes[SIMPLER_MAX_CORE_TENSORS];
  uint64_t heap_need = 0;
  for (uint32_t i = 0; i < a.tensor_count; i++) {
    views[i] = a.tensors[i];
    if (a.created[i]) {
      ChipTensor& v = views[i];
      if (a.access[i] != SIMPLER_ACCESS_OUT || v.ndims < 1 || v.ndims > SIMPLER_MAX_TENSOR_DIMS ||
          elem_size(v) == 0) {
        fail_submit(TC_ERR_INVALID_ARG, format("%s: TensorCreateInfo of output %u needs 1..5 dims and a known dtype",
                                               task_label(func_id, k).c_str(), i));
        return;
      }
      uint64_t n = elem_size(v);
      for (uint32_t d = 0; d < v.ndims; d++) {
        if (v.shapes[d] == 0 || __builtin_mul_overflow(n, uint64_t(v.shapes[d]), &n)) {
          fail_submit(TC_ERR_INVALID_SHAPE, format("%s: TensorCreateInfo of output %u has a zero or overflowing shape",
                                                   task_label(func_id, k).c_str(), i));
          return;
        }
      }
      created_bytes[i] = n;
      heap_need += (n + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
    } else if (!resolve(views[i], i, k, func_id)) {
      return;
    }
  }

  // Space: a slot, the heap bytes of created outputs.
  Ring& r = rings_[sc.ring];
  TaskSlot* t;
  if (build_) {
    graph_->slots.emplace_back();
    t = &graph_->slots.back();
    t->id = make_id(graph_->slots.size() - 1, 0);
  } else {
    t = alloc_slot(r, sc);
    if (!t) return;
  }
  t->ring = uint32_t(sc.ring);
  t->scope_depth = sc.depth;
  t->scope_seq = sc.seq;
  t->func_id = func_id;
  t->core_type = core_type;
  t->kernel = k;
  t->tensor_count = a.tensor_count;
  t->scalar_count = a.scalar_count;
  t->created_mask = 0;
  for (uint32_t i = 0; i < a.tensor_count; i++)
    if (a.created[i]) t->created_mask |= 1u << i;
  t->block_num = block_num;
  t->next_block.store(0, std::memory_order_relaxed);
  t->blocks_done.store(0, std::memory_order_relaxed);
  t->state.store(kPending, std::memory_order_relaxed);
  t->poisoned.store(false, std::memory_order_relaxed);
  t->block_failed.store(false, std::memory_order_relaxed);
  t->fanin_pending.store(1, std::memory_order_relaxed);  // the submit guard
  t->refs.store(2, std::memory_order_relaxed);           // scope + own completion
  t->fanout_closed = false;
  t->fanout = nullptr;
  t->fanin = nullptr;
  t->fanin_count = 0;
  t->retire_ready.store(false, std::memory_order_relaxed);
  t->retired.store(false, std::memory_order_relaxed);
  t->core = -1;
  t->t_submit = t_begin;
  t->t_ready = t->t_start = t->t_end = t->t_finish = 0;
  t->tensors.resize(a.tensor_count);
  t->argv.resize(a.tensor_count + a.scalar_count);

  for (uint32_t i = 0; i < a.tensor_count; i++) {
    t->access[i] = a.access[i];
    ChipTensor& v = t->tensors[i];
    v = views[i];
    if (a.created[i]) {
      uint64_t addr;
      const uint64_t bytes = (created_bytes[i] + kHeapAlign - 1) / kHeapAlign * kHeapAlign;
      if (build_) {
        Graph& g = *graph_;
        if (g.heap_bytes + bytes > g.heap_limit) {
          fail_submit(TC_ERR_ALLOC, format("%s: runtime-created outputs of this graph need more than %llu bytes; "
                                           "raise heap_ring_size",
                                           task_label(func_id, k).c_str(), (unsigned long long)g.heap_limit));
          return;
        }
        if (g.heap_chunks.empty() || g.heap_chunk_used + bytes > g.heap_chunks.back().size) {
          uint64_t cap = std::max<uint64_t>(bytes, 16ull << 20), base;
          if (Error e = device_->alloc(cap, true, &base); !e.ok()) {
            fail_submit(e.status, "host_build_graph heap: " + e.message);
            return;
          }
          g.heap_chunks.push_back(Region{base, cap});
          g.heap_chunk_used = 0;
        }
        addr = g.heap_chunks.back().base + g.heap_chunk_used;
        g.heap_chunk_used += bytes;
        g.heap_bytes += bytes;
      } else if (!alloc_heap(r, bytes, &addr)) {
        return;
      }
      v.buffer.addr = addr;
      v.buffer.size = created_bytes[i];
      v.start_offset = 0;
      v.scope_tag = uint32_t(sc.seq);
      int64_t stride = 1;
      for (int d = int(v.ndims) - 1; d >= 0; d--) {
        v.strides[d] = stride;
        stride *= v.shapes[d];
      }
      for (uint32_t d = v.ndims; d < SIMPLER_MAX_TENSOR_DIMS; d++) v.shapes[d] = 0, v.strides[d] = 0;
    }
    ranges[i] = byte_range(v);
    t->argv[i] = int64_t(reinterpret_cast<uintptr_t>(&v));
  }
  for (uint32_t s = 0; s < a.scalar_count; s++) t->argv[a.tensor_count + s] = int64_t(a.scalars[s]);

  // Producers: creators of runtime-created allocations (for lifetime), the
  // TensorMap (read-after-write, write-after-write), explicit dependencies.
  producers_.clear();
  const bool auto_deps = !sc.manual;
  // Diagnostics record every logical edge, to finished producers too.
  const bool history = diag_ && (diag_->options().dep_gen || diag_->swimlane() > 0);
  for (uint32_t i = 0; i < a.tensor_count; i++) {
    if (a.created[i]) continue;
    const ChipTensor& v = t->tensors[i];
    uint64_t cid;
    if (TaskSlot* c = tensormap_.creator(v.buffer.addr, &cid))
      add_producer(c, cid, true, i, DepSource::Creator, Overlap::Exact);
    if (auto_deps)
      tensormap_.find(v, ranges[i], history, [&](const TensorMap::Entry& e, Overlap o, bool live) {
        add_producer(e.task, e.task_id, live, i, DepSource::TensorMap, o);
      });
  }
  for (uint32_t d = 0; d < a.dep_count; d++) {
    const int64_t id = a.deps[d];
    TaskSlot* p = nullptr;
    const uint64_t pos = uint64_t(id) >> 2;
    const uint32_t ri = uint32_t(id) & 3;
    if (id < 0 || (build_ ? pos >= graph_->slots.size() - 1 || ri != 0 : pos >= rings_[ri].head)) {
      fail_submit(TC_ERR_INVALID_ARG, format("%s: add_dep(%lld) names no earlier task of this run",
                                             task_label(func_id, k).c_str(), (long long)id));
      return;
    }
    if (build_) {
      p = &graph_->slots[pos];
    } else {
      Ring& pr = rings_[ri];
      if (pos >= pr.tail.load(std::memory_order_acquire) && pr.slot(pos).id == uint64_t(id)) p = &pr.slot(pos);
    }
    if (p)
      add_producer(p, uint64_t(id), true, UINT32_MAX, DepSource::Explicit, Overlap::None);
    else if (history)
      add_producer(nullptr, uint64_t(id), false, UINT32_MAX, DepSource::Explicit, Overlap::None);
  }

  // Unique producers, in first-seen order.
  // Marks outlive runs (slots are reused), so the stamp never restarts.
  ++submitted_;
  const uint64_t stamp = ++mark_seq_;
  thread_local std::vector<TaskSlot*> uniq;
  uniq.clear();
  for (const Producer& p : producers_)
    if (p.live && p.task != t && p.task->mark != stamp) {
      p.task->mark = stamp;
      uniq.push_back(p.task);
    }
  t->fanin_total = uint32_t(uniq.size());
  DepEntry* deps = alloc_deps(r, uint32_t(uniq.size()));
  if (!uniq.empty() && !deps) return;
  uint32_t used = 0;
  for (TaskSlot* p : uniq) {
    if (build_) {
      DepEntry& e = deps[used++];
      e.producer = p;
      e.consumer = t;
      e.next = p->fanout;
      p->fanout = &e;
      graph_->edges++;
      continue;
    }
    // Hold the producer until this task finishes (its output may be a heap
    // allocation); a producer already retiring imposes nothing.
    int32_t refs = p->refs.load(std::memory_order_acquire);
    bool held = false;
    while (refs > 0)
      if (p->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel)) {
        held = true;
        break;
      }
    if (!held) continue;
    DepEntry& e = deps[used++];
    e.producer = p;
    e.consumer = t;
    e.next = nullptr;
    p->fanout_lock.lock();
    if (p->fanout_closed) {
      const uint8_t s = p->state.load(std::memory_order_acquire);
      p->fanout_lock.unlock();
      if (s != kDone) t->poisoned.store(true, std::memory_order_relaxed);
    } else {
      e.next = p->fanout;
      p->fanout = &e;
      t->fanin_pending.fetch_add(1, std::memory_order_relaxed);
      p->fanout_lock.unlock();
    }
  }
  t->fanin = deps;
  t->fanin_count = used;
  if (build_) t->static_fanin = int32_t(used);
  t->heap_end = r.heap_head;
  t->dep_end = r.dep_head;

  // Record this task's writes (manual scopes too, so later automatic tasks
  // see them; manual scopes only skip the lookups).
  for (uint32_t i = 0; i < a.tensor_count; i++) {
    if (a.created[i]) tensormap_.set_creator(t->tensors[i].buffer.addr, t);
    if (a.access[i] & SIMPLER_ACCESS_OUT) tensormap_.insert(t->tensors[i], ranges[i], t, history);
  }

  uint32_t n_out = 0;
  for (uint32_t i = 0; i < a.tensor_count; i++)
    if (a.created[i]) *out->output_ptr(n_out++) = t->tensors[i];
  out->output_count = n_out;
  out->id_ = int64_t(t->id);
  sc.tasks++;

  if (diag_) {
    thread_local std::vector<DiagEdge> edges;
    edges.clear();
    for (const Producer& p : producers_)
      if (p.id != t->id) edges.push_back(DiagEdge{p.id, p.arg, uint8_t(p.source), uint8_t(p.overlap)});
    t->t_submitted = now_ns();
    diag_->on_submit(*t, edges.data(), edges.size());
  }

  incomplete_.fetch_add(1, std::memory_order_relaxed);
  if (!build_ && k && executor_->launches_at_submit()) executor_->submitted(t);
  if (!build_ && t->fanin_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    make_ready(t, nullptr);
    drain_inline();  // alloc-only and cancelled tasks finish here
  }
}

}  // namespace simpler
