#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "runtime/device.h"
#include "runtime/diagnostics.h"
#include "simpler/simpler.h"

namespace simpler {

namespace {

thread_local Engine* t_engine = nullptr;

uint64_t steady_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Tasks finished inline (cancelled ones, alloc-only ones) wait here instead
// of recursing, so a long poisoned chain cannot overflow the stack.
struct Pending {
  TaskSlot* t;
  uint8_t state;
};
thread_local std::vector<Pending> t_pending;

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

Engine* current_engine() { return t_engine; }
void set_current_engine(Engine* e) { t_engine = e; }

Graph::~Graph() {
  if (cuda_graph && destroy_cuda_graph) destroy_cuda_graph(cuda_graph);
  if (device)
    for (const Region& c : heap_chunks) device->release(c.base, true);
}

Engine::Engine() {
  for (int r = 0; r < kRings; r++) rings_[r].index = r;
}

Engine::~Engine() {
  for (Ring& r : rings_)
    if (r.heap_base && device_) device_->release(r.heap_base, true);
}

uint64_t Engine::now_ns() const { return steady_ns() - t0_; }

Error Engine::configure_rings(const RunSetup& s) {
  for (int i = 0; i < kRings; i++) {
    Ring& r = rings_[i];
    const RingSizes& z = s.rings[i];
    if (r.window != z.task_window) {
      r.slots.reset();  // allocated on first use
      r.window = z.task_window;
    }
    if (r.heap_cap != z.heap) {
      if (r.heap_base && device_) device_->release(r.heap_base, true);
      r.heap_base = 0;
      r.heap_cap = z.heap;
    }
    if (r.dep_cap != z.dep_pool) {
      r.deps.reset();
      r.dep_cap = z.dep_pool;
    }
    r.head = 0;
    r.tail.store(0);
    r.heap_head = 0;
    r.heap_tail.store(0);
    r.dep_head = 0;
    r.dep_tail.store(0);
    r.waiters.store(0);
  }
  return {};
}

Error Engine::begin(const RunSetup& s, Graph* graph) {
  kernels_ = s.kernels;
  executor_ = s.executor;
  if (device_ && device_ != s.device) {
    for (Ring& r : rings_)
      if (r.heap_base) device_->release(r.heap_base, true), r.heap_base = 0;
  }
  device_ = s.device;
  diag_ = s.diag;
  build_ = s.build;
  graph_ = graph;
  regions_ = s.regions;
  std::sort(regions_.begin(), regions_.end(), [](const Region& a, const Region& b) { return a.base < b.base; });
  t0_ = steady_ns();
  executor_owns_graph_ = false;
  submitted_ = 0;
  scope_seq_ = 0;
  aborting_.store(false);
  incomplete_.store(0);
  waiting_.store(false);
  error_ = {};
  tensormap_.clear();
  scopes_.clear();
  if (build_) {
    graph_->device = device_;
    graph_->heap_limit = s.heap_limit;
  } else {
    if (Error e = configure_rings(s); !e.ok()) return e;
  }
  if (diag_) {
    uint64_t w[4], h[4], d[4];
    // A recorded graph has no rings: one heap of heap_limit bytes, no windows.
    for (int i = 0; i < kRings; i++) {
      w[i] = build_ ? 0 : s.rings[i].task_window;
      h[i] = build_ ? s.heap_limit : s.rings[i].heap;
      d[i] = build_ ? 0 : s.rings[i].dep_pool;
    }
    diag_->set_ring_capacities(w, h, d);
  }
  executor_->begin_run(this, s.cores, s.sched_threads);
  scopes_.push_back(Scope{0, 0, false, 0, 0, ++scope_seq_});
  return {};
}

std::string Engine::task_label(int32_t func_id, const KernelRef* k) const {
  char buf[160];
  if (func_id == -1)
    std::snprintf(buf, sizeof buf, "alloc_tensors (task %llu)", (unsigned long long)submitted_);
  else if (k)
    std::snprintf(buf, sizeof buf, "task %llu (%s)", (unsigned long long)submitted_, k->name.c_str());
  else
    std::snprintf(buf, sizeof buf, "task %llu (func_id %d)", (unsigned long long)submitted_, func_id);
  return buf;
}

Error Engine::fail_submit(tc_status st, const std::string& msg) {
  Error e{st, msg};
  report_fatal(e);
  return e;
}

void Engine::report_fatal(const Error& e) {
  {
    std::lock_guard<std::mutex> lk(err_mu_);
    if (error_.ok()) error_ = e;
  }
  aborting_.store(true, std::memory_order_release);
  for (Ring& r : rings_) {
    std::lock_guard<std::mutex> lk(r.mu);
    r.cv.notify_all();
  }
}

void Engine::fail_task(TaskSlot* t, const Error& e) {
  t->block_failed.store(true, std::memory_order_release);
  report_fatal(e);
}

// ---------------------------------------------------------------------------
// Ring space
// ---------------------------------------------------------------------------

namespace {
// Units a contiguous allocation of n takes in a circular space of cap units
// whose next free unit is head % cap: n, plus the unused end when it wraps.
uint64_t wrap_cost(uint64_t head, uint64_t cap, uint64_t n) {
  uint64_t off = head % cap;
  return off + n > cap ? (cap - off) + n : n;
}
}  // namespace

bool Engine::wait_for_space(Ring& r, const char* what, uint64_t need, const Scope& sc) {
  auto fits = [&] {
    if (what[0] == 't') return r.head - r.tail.load(std::memory_order_acquire) < r.window;
    if (what[0] == 'h')
      return r.heap_head + wrap_cost(r.heap_head, r.heap_cap, need) - r.heap_tail.load(std::memory_order_acquire) <=
             r.heap_cap;
    return r.dep_head + wrap_cost(r.dep_head, r.dep_cap, need) - r.dep_tail.load(std::memory_order_acquire) <=
           r.dep_cap;
  };
  if (fits()) return true;
  executor_->flush();  // batched work must reach the device before we wait on it
  std::unique_lock<std::mutex> lk(r.mu);
  r.waiters.fetch_add(1);
  bool ok = true;
  while (!fits()) {
    if (aborting_.load()) {
      ok = false;
      break;
    }
    // Every submitted task has finished and retired what it could (retiring
    // needs r.mu, which we hold): only the end of the open scope could free
    // space, and the scope cannot end while its orchestration waits here.
    if (incomplete_.load() == 0) {
      const char* env = what[0] == 't' ? "ring_task_window" : what[0] == 'h' ? "ring_heap" : "ring_dep_pool";
      const char* envvar =
          what[0] == 't' ? "PTO2_RING_TASK_WINDOW" : what[0] == 'h' ? "PTO2_RING_HEAP" : "PTO2_RING_DEP_POOL";
      uint64_t cap = what[0] == 't' ? r.window : what[0] == 'h' ? r.heap_cap : r.dep_cap;
      const char* unit = what[0] == 't' ? "slots" : what[0] == 'h' ? "bytes" : "entries";
      char msg[768];
      std::snprintf(msg, sizeof msg,
                    "deadlock: the %s ring of scope depth %u (ring %d, %llu %s) is full of finished tasks that "
                    "cannot retire before their scope ends, and the scope cannot end while its orchestration waits "
                    "for space (%llu task(s) submitted in the open scope; %llu %s wanted). Raise %s[%d] "
                    "(CallConfig.runtime_env or %s) or split the work into smaller scopes",
                    what[0] == 't' ? "task" : what[0] == 'h' ? "heap" : "dependency-pool", sc.depth, r.index,
                    (unsigned long long)cap, unit, (unsigned long long)sc.tasks, (unsigned long long)need, unit,
                    env, r.index, envvar);
      r.waiters.fetch_sub(1);
      lk.unlock();
      report_fatal(Error{TC_ERR_PIPELINE, msg});
      return false;
    }
    r.cv.wait_for(lk, std::chrono::milliseconds(20));
  }
  r.waiters.fetch_sub(1);
  return ok;
}

TaskSlot* Engine::alloc_slot(Ring& r, const Scope& sc) {
  if (!r.slots) r.slots.reset(new TaskSlot[r.window]);
  if (r.head - r.tail.load(std::memory_order_acquire) >= r.window && !wait_for_space(r, "task", 1, sc)) return nullptr;
  TaskSlot& t = r.slot(r.head);
  t.id = make_id(r.head, uint32_t(r.index));
  r.head++;
  return &t;
}

bool Engine::alloc_heap(Ring& r, uint64_t bytes, uint64_t* addr) {
  if (bytes > r.heap_cap) {
    fail_submit(TC_ERR_ALLOC, format("runtime-created outputs of one task need %llu bytes but the heap ring of "
                                     "scope depth %d holds %llu; raise ring_heap[%d] (CallConfig.runtime_env, "
                                     "PTO2_RING_HEAP or Worker(heap_ring_size=...))",
                                     (unsigned long long)bytes, r.index, (unsigned long long)r.heap_cap, r.index));
    return false;
  }
  if (!r.heap_base) {
    if (Error e = device_->alloc(r.heap_cap, true, &r.heap_base); !e.ok()) {
      fail_submit(e.status, "cannot allocate the heap ring of scope depth " + std::to_string(r.index) + ": " +
                                e.message);
      return false;
    }
  }
  const Scope& sc = scopes_.back();
  uint64_t cost = wrap_cost(r.heap_head, r.heap_cap, bytes);
  if (r.heap_head + cost - r.heap_tail.load(std::memory_order_acquire) > r.heap_cap &&
      !wait_for_space(r, "heap", bytes, sc))
    return false;
  cost = wrap_cost(r.heap_head, r.heap_cap, bytes);
  *addr = r.heap_base + (r.heap_head + cost - bytes) % r.heap_cap;
  r.heap_head += cost;
  return true;
}

DepEntry* Engine::alloc_deps(Ring& r, uint32_t n) {
  if (n == 0) return nullptr;
  if (build_) {
    Graph& g = *graph_;
    if (g.dep_chunks.empty() || g.dep_chunk_used + n > g.dep_chunk_cap) {
      size_t cap = std::max<size_t>(4096, n);
      g.dep_chunks.emplace_back(new DepEntry[cap]);
      g.dep_chunk_cap = cap;
      g.dep_chunk_used = 0;
    }
    DepEntry* e = g.dep_chunks.back().get() + g.dep_chunk_used;
    g.dep_chunk_used += n;
    return e;
  }
  if (n > r.dep_cap) {
    fail_submit(TC_ERR_ALLOC, format("one task has %u producers but the dependency pool of scope depth %d holds %llu "
                                     "entries; raise ring_dep_pool[%d] (CallConfig.runtime_env or PTO2_RING_DEP_POOL)",
                                     n, r.index, (unsigned long long)r.dep_cap, r.index));
    return nullptr;
  }
  if (!r.deps) r.deps.reset(new DepEntry[r.dep_cap]);
  const Scope& sc = scopes_.back();
  if (r.dep_head + wrap_cost(r.dep_head, r.dep_cap, n) - r.dep_tail.load(std::memory_order_acquire) > r.dep_cap &&
      !wait_for_space(r, "deps", n, sc))
    return nullptr;
  uint64_t cost = wrap_cost(r.dep_head, r.dep_cap, n);
  DepEntry* e = r.deps.get() + (r.dep_head + cost - n) % r.dep_cap;
  r.dep_head += cost;
  return e;
}

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
    // Drain what finished inline (alloc-only and cancelled tasks).
    while (!t_pending.empty()) {
      Pending p = t_pending.back();
      t_pending.pop_back();
      task_finished(p.t, p.state == kDone, nullptr);
    }
  }
}

// ---------------------------------------------------------------------------
// Scopes
// ---------------------------------------------------------------------------

void Engine::scope_begin(int32_t mode) {
  const uint32_t depth = uint32_t(scopes_.size());
  const int ring = depth < kRings ? int(depth) : kRings - 1;
  Scope sc{depth, ring, mode == int32_t(PTO2ScopeMode::MANUAL), build_ ? 0 : rings_[ring].head, 0, ++scope_seq_};
  scopes_.push_back(sc);
  if (diag_ && diag_->options().scope_stats) {
    RingUsage u = ring_usage(ring);
    diag_->on_scope(ScopeSample{true, sc.seq, depth, ring, now_ns(), u.tasks, u.task_window, u.heap_used, u.heap,
                                u.deps_used, u.dep_pool, tensormap_.size()});
  }
}

void Engine::scope_end() {
  if (scopes_.size() <= 1) {
    if (!fatal()) report_fatal(Error{TC_ERR_INVALID_ARG, "rt_scope_end() without a matching rt_scope_begin()"});
    return;
  }
  Scope sc = scopes_.back();
  scopes_.pop_back();
  if (diag_ && diag_->options().scope_stats) {
    RingUsage u = ring_usage(sc.ring);
    diag_->on_scope(ScopeSample{false, sc.seq, sc.depth, sc.ring, now_ns(), u.tasks, u.task_window, u.heap_used,
                                u.heap, u.deps_used, u.dep_pool, tensormap_.size()});
  }
  if (build_) return;
  // Drop the scope's reference of each of its tasks (all still in the ring:
  // none can retire while it holds this reference).
  Ring& r = rings_[sc.ring];
  for (uint64_t pos = std::max(sc.first_pos, r.tail.load(std::memory_order_acquire)); pos < r.head; pos++) {
    TaskSlot& s = r.slot(pos);
    if (s.scope_seq == sc.seq && s.id == make_id(pos, uint32_t(r.index))) release(&s);
  }
}

void Engine::end_orchestration() {
  if (scopes_.size() > 1 && !fatal())
    report_fatal(Error{TC_ERR_INVALID_ARG, format("the orchestration returned with %zu scope(s) still open "
                                                  "(rt_scope_begin() without rt_scope_end())",
                                                  scopes_.size() - 1)});
  while (scopes_.size() > 1) scope_end();
  executor_->flush();
  // The outer scope.
  if (!scopes_.empty() && !build_) {
    Scope sc = scopes_.back();
    Ring& r = rings_[sc.ring];
    for (uint64_t pos = std::max(sc.first_pos, r.tail.load(std::memory_order_acquire)); pos < r.head; pos++) {
      TaskSlot& s = r.slot(pos);
      if (s.scope_seq == sc.seq && s.id == make_id(pos, uint32_t(r.index))) release(&s);
    }
  }
  scopes_.clear();
}

Engine::RingUsage Engine::ring_usage(int i) const {
  const Ring& r = rings_[i];
  RingUsage u{};
  u.task_window = r.window;
  u.heap = r.heap_cap;
  u.dep_pool = r.dep_cap;
  if (build_) {
    u.task_window = u.dep_pool = 0;
    u.heap = graph_ ? graph_->heap_limit : 0;
    u.tasks = graph_ ? graph_->slots.size() : 0;
    u.heap_used = graph_ ? graph_->heap_bytes : 0;
    u.deps_used = graph_ ? graph_->edges : 0;
    return u;
  }
  u.tasks = r.head - r.tail.load();
  u.heap_used = r.heap_head - r.heap_tail.load();
  u.deps_used = r.dep_head - r.dep_tail.load();
  return u;
}

// ---------------------------------------------------------------------------
// Completion and retirement
// ---------------------------------------------------------------------------

void Engine::make_ready(TaskSlot* t, TaskSlot** next) {
  // Kernel tasks of a launch-at-submit executor are its own to run or cancel,
  // and so are all tasks of a graph the executor runs itself.
  if (t->kernel && !build_ && executor_->launches_at_submit()) return;
  if (build_ && executor_owns_graph_) return;
  if (t->poisoned.load(std::memory_order_acquire) || aborting_.load(std::memory_order_acquire)) {
    t_pending.push_back(Pending{t, kCancelled});
    return;
  }
  if (!t->kernel) {
    t_pending.push_back(Pending{t, kDone});
    return;
  }
  t->state.store(kReady, std::memory_order_relaxed);
  if (diag_) t->t_ready = now_ns();
  if (next && !*next)
    *next = t;
  else
    executor_->push(t);
}

void Engine::task_finished(TaskSlot* t, bool ok, TaskSlot** next) {
  t_pending.push_back(Pending{t, uint8_t(ok ? kDone : (t->block_failed.load() ? kFailed : kCancelled))});
  while (!t_pending.empty()) {
    Pending cur = t_pending.back();
    t_pending.pop_back();
    TaskSlot* x = cur.t;
    x->state.store(cur.state, std::memory_order_release);
    if (diag_) {
      x->t_finish = now_ns();
      diag_->on_finished(*x);
    }
    x->fanout_lock.lock();
    x->fanout_closed = true;
    DepEntry* list = x->fanout;
    x->fanout_lock.unlock();
    const bool bad = cur.state != kDone;
    for (DepEntry* e = list; e;) {
      DepEntry* nx = e->next;  // e belongs to the consumer, which may retire once released below
      TaskSlot* c = e->consumer;
      if (bad) c->poisoned.store(true, std::memory_order_release);
      if (c->fanin_pending.fetch_sub(1, std::memory_order_acq_rel) == 1) make_ready(c, next);
      e = nx;
    }
    if (!build_) {
      for (uint32_t i = 0; i < x->fanin_count; i++) release(x->fanin[i].producer);
      release(x);
    }
    if (incomplete_.fetch_sub(1, std::memory_order_acq_rel) == 1 && waiting_.load()) {
      std::lock_guard<std::mutex> lk(done_mu_);
      done_cv_.notify_all();
    }
  }
}

void Engine::release(TaskSlot* t) {
  Ring& r = rings_[t->ring];  // read first: once retired, the slot may be reused
  if (t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    t->retire_ready.store(true, std::memory_order_release);
    advance(r);
  }
}

void Engine::advance(Ring& r) {
  std::lock_guard<std::mutex> lk(r.mu);
  uint64_t tail = r.tail.load(std::memory_order_relaxed);
  bool moved = false;
  for (;;) {
    TaskSlot& s = r.slot(tail);
    if (!s.retire_ready.load(std::memory_order_acquire)) break;
    s.retire_ready.store(false, std::memory_order_relaxed);
    r.heap_tail.store(s.heap_end, std::memory_order_release);
    r.dep_tail.store(s.dep_end, std::memory_order_release);
    s.retired.store(true, std::memory_order_release);
    tail++;
    moved = true;
  }
  if (moved) {
    r.tail.store(tail, std::memory_order_release);
    if (r.waiters.load()) r.cv.notify_all();
  }
}

// ---------------------------------------------------------------------------
// Running a recorded graph and finishing
// ---------------------------------------------------------------------------

void Engine::run_graph(Graph& g, bool replay) {
  if (fatal()) return;
  graph_ = &g;
  build_ = true;
  if (replay && diag_) {
    std::vector<DiagEdge> edges;
    for (TaskSlot& t : g.slots) {
      edges.clear();
      for (uint32_t i = 0; i < t.fanin_count; i++)
        edges.push_back(DiagEdge{t.fanin[i].producer->id, UINT32_MAX, uint8_t(DepSource::TensorMap),
                                 uint8_t(Overlap::None)});
      t.t_submit = t.t_submitted = 0;
      diag_->on_submit(t, edges.data(), edges.size());
    }
  }
  incomplete_.store(int64_t(g.slots.size()));
  std::vector<TaskSlot*> roots;
  for (TaskSlot& t : g.slots) {
    t.state.store(kPending, std::memory_order_relaxed);
    t.poisoned.store(false, std::memory_order_relaxed);
    t.block_failed.store(false, std::memory_order_relaxed);
    t.next_block.store(0, std::memory_order_relaxed);
    t.blocks_done.store(0, std::memory_order_relaxed);
    t.fanin_pending.store(t.static_fanin, std::memory_order_relaxed);
    t.fanout_closed = false;
    if (t.static_fanin == 0) roots.push_back(&t);
  }
  if (g.slots.empty()) return;
  executor_owns_graph_ = true;  // before run_graph: the executor may finish tasks at once
  if (executor_->run_graph(g)) return;
  executor_owns_graph_ = false;
  for (TaskSlot* t : roots) {
    make_ready(t, nullptr);
    while (!t_pending.empty()) {
      Pending p = t_pending.back();
      t_pending.pop_back();
      task_finished(p.t, p.state == kDone, nullptr);
    }
  }
}

Error Engine::finish() {
  {
    std::unique_lock<std::mutex> lk(done_mu_);
    waiting_.store(true);
    while (incomplete_.load() != 0) done_cv_.wait_for(lk, std::chrono::milliseconds(50));
    waiting_.store(false);
  }
  executor_->end_run();
  std::lock_guard<std::mutex> lk(err_mu_);
  return error_;
}

}  // namespace simpler
