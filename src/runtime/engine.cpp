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

void Engine::drain_inline() {
  while (!t_pending.empty()) {
    Pending p = t_pending.back();
    t_pending.pop_back();
    task_finished(p.t, p.state == kDone, nullptr);
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
  if (!g.slots.empty() && !diag_) {
    // The executor may run the graph as one unit (a replayed CUDA Graph):
    // then nothing here touches the tasks, before or after.
    incomplete_.store(1);
    executor_owns_graph_ = true;
    if (executor_->run_graph_whole(g)) return;
    executor_owns_graph_ = false;
  }
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
    drain_inline();
  }
}

void Engine::graph_finished(const Error& e) {
  if (!e.ok()) report_fatal(e);
  if (incomplete_.fetch_sub(1, std::memory_order_acq_rel) == 1 && waiting_.load()) {
    std::lock_guard<std::mutex> lk(done_mu_);
    done_cv_.notify_all();
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
