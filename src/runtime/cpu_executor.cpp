#include "runtime/cpu_executor.h"

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/builtins.h"
#include "runtime/diagnostics.h"
#include "runtime/fault_guard.h"
#include "runtime/kernel_ref.h"
#include "runtime/switches.h"
#include "simpler/simpler.h"
#include "tensorcore/context.h"

namespace simpler {

namespace {

thread_local const SimplerLaunch* t_launch = nullptr;
thread_local int t_core = -1;

struct KernelCall {
  KernelEntry entry;
  int64_t* args;
};
void call_kernel(void* p) {
  auto* c = static_cast<KernelCall*>(p);
  c->entry(c->args);
}

}  // namespace

const SimplerLaunch* current_launch() { return t_launch; }
void set_current_launch(const SimplerLaunch* l) { t_launch = l; }

int default_cpu_cores() {
  const Switch cores = read_switch("SIMPLER_CPU_CORES");
  if (cores.from_env) return int(cores.number);
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

CpuExecutor::CpuExecutor(int cores) {
  if (cores < 1) cores = 1;
  for (int i = 0; i < cores; i++) cores_.emplace_back(new Core());
  for (int i = 0; i < cores; i++) cores_[i]->thread = std::thread([this, i] { loop(i); });
}

CpuExecutor::~CpuExecutor() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    sleep_cv_.notify_all();
    park_cv_.notify_all();
  }
  for (auto& c : cores_) c->thread.join();
}

uint64_t CpuExecutor::clock_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void CpuExecutor::begin_run(Engine* engine, int cores, int) {
  int n = cores <= 0 || cores > int(cores_.size()) ? int(cores_.size()) : cores;
  Diagnostics* d = engine->diag();
  const bool record = d && d->swimlane() >= 3;
  if (record) {
    run_t0_ = clock_ns() - engine->now_ns();  // the engine's time origin
    for (auto& c : cores_) {
      std::lock_guard<std::mutex> lk(c->log_mu);
      c->spans.clear();
    }
  }
  record_sched_.store(record);
  engine_.store(engine);
  // Cores sleep on sleep_cv_ only while they may take work (index < active_)
  // and park on park_cv_ otherwise; a new share of cores moves them across.
  if (active_.exchange(n) != n) {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    sleep_cv_.notify_all();
    park_cv_.notify_all();
  }
}

void CpuExecutor::end_run() {
  Engine* e = engine_.exchange(nullptr);
  if (record_sched_.exchange(false) && e && e->diag()) {
    for (size_t i = 0; i < cores_.size(); i++) {
      std::lock_guard<std::mutex> lk(cores_[i]->log_mu);
      for (const Core::Span& sp : cores_[i]->spans)
        if (sp.t0 >= run_t0_) e->diag()->on_sched(int(i), sp.phase, sp.t0 - run_t0_, sp.t1 - run_t0_);
      cores_[i]->spans.clear();
    }
  }
}

void CpuExecutor::push_to(int index, TaskSlot* t) {
  Core& c = *cores_[index];
  {
    std::lock_guard<std::mutex> lk(c.mu);
    c.q.push_back(t);
  }
  queued_.fetch_add(1);
  // A spinning core will take it; wake a sleeper (a system call) only when
  // none spins. The idle loop stops spinning before it looks at queued_ for
  // the last time, so one of the two sides always sees the other. Only cores
  // that may take work spin or wait on sleep_cv_ (see loop()), so neither a
  // spinner nor the one sleeper notify_one wakes can be a core outside the
  // run's share that would drop the wake-up.
  if (spinning_.load() == 0 && sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    sleep_cv_.notify_one();
  }
}

void CpuExecutor::push(TaskSlot* t) {
  // A core keeps its own work (it is hot in its cache); anyone else deals.
  int n = active_.load(std::memory_order_relaxed);
  int target = t_core >= 0 && t_core < n ? t_core : int(rr_.fetch_add(1, std::memory_order_relaxed) % uint32_t(n));
  push_to(target, t);
}

TaskSlot* CpuExecutor::take(int index) {
  if (queued_.load(std::memory_order_relaxed) == 0) return nullptr;
  {
    Core& c = *cores_[index];
    std::lock_guard<std::mutex> lk(c.mu);
    if (!c.q.empty()) {
      TaskSlot* t = c.q.back();
      c.q.pop_back();
      queued_.fetch_sub(1);
      return t;
    }
  }
  const int n = int(cores_.size());
  const uint64_t t0 = record_sched_.load(std::memory_order_relaxed) ? clock_ns() : 0;
  for (int k = 1; k < n; k++) {
    Core& v = *cores_[(index + k) % n];
    std::lock_guard<std::mutex> lk(v.mu);
    if (!v.q.empty()) {
      TaskSlot* t = v.q.front();
      v.q.pop_front();
      queued_.fetch_sub(1);
      if (t0) log_span(index, SchedPhase::Steal, t0, clock_ns());
      return t;
    }
  }
  return nullptr;
}

void CpuExecutor::log_span(int index, SchedPhase phase, uint64_t t0, uint64_t t1) {
  Core& c = *cores_[index];
  std::lock_guard<std::mutex> lk(c.log_mu);
  c.spans.push_back(Core::Span{phase, t0, t1});
}

void CpuExecutor::loop(int index) {
  t_core = index;
  prepare_thread_for_faults();
  // With several cores the executor already keeps that many threads busy: a
  // tensorcore op a task runs stays on its core's thread instead of fanning
  // out to tensorcore's pool and the BLAS's threads on top (one core alone
  // leaves the op the whole machine).
  if (cores_.size() > 1) tc_cpu_run_inline(1);
  while (!stop_.load(std::memory_order_relaxed)) {
    if (index < active_.load(std::memory_order_relaxed)) {
      if (TaskSlot* t = take(index)) {
        run(index, t);
        continue;
      }
    }
    // Idle: spin briefly (a dependent chain hands work over in microseconds),
    // then sleep until something is queued.
    const bool record = record_sched_.load(std::memory_order_relaxed);
    const uint64_t t_idle = record ? clock_ns() : 0;
    bool found = false;
    // A core outside the run's share (index >= active_: a run with fewer
    // cores than the pool) neither spins nor waits on sleep_cv_: push_to()
    // skips the wake-up while anyone spins and wakes one sleeper only, so a
    // spinner or sleeper that cannot take the task would swallow it and
    // leave the run's cores asleep with work queued (the run never ends).
    if (index < active_.load()) {
      spinning_.fetch_add(1);
      for (int spin = 0; spin < 4000 && !stop_.load(std::memory_order_relaxed); spin++) {
        if (queued_.load(std::memory_order_relaxed) > 0 && index < active_.load(std::memory_order_relaxed)) {
          found = true;
          break;
        }
        if (spin < 64)
          __builtin_ia32_pause();
        else
          sched_yield();
      }
      spinning_.fetch_sub(1);
    }
    if (!found) {
      std::unique_lock<std::mutex> lk(sleep_mu_);
      // The share shrank while this core spun (a new run began): a push that
      // saw it spinning woke nobody, so pass the wake-up on.
      if (index >= active_.load() && queued_.load() > 0) sleep_cv_.notify_all();
      sleepers_.fetch_add(1);
      while (!stop_.load() && (queued_.load() == 0 || index >= active_.load())) {
        if (index < active_.load())
          sleep_cv_.wait(lk);
        else
          park_cv_.wait(lk);
      }
      sleepers_.fetch_sub(1);
    }
    if (record) log_span(index, SchedPhase::Idle, t_idle, clock_ns());
  }
}

void CpuExecutor::run(int index, TaskSlot* t) {
  Engine* eng = engine_.load(std::memory_order_acquire);
  while (t) {
    Diagnostics* diag = eng->diag();
    const uint64_t t_dispatch = diag ? eng->now_ns() : 0;
    // Read before this block counts as done: the last block's core may then
    // finish the task and the slot be reused.
    const uint32_t nb = t->block_num;
    const uint32_t b = t->next_block.fetch_add(1, std::memory_order_acq_rel);
    if (b >= nb) return;  // cannot happen: one queued copy per unclaimed block
    if (b == 0) {
      t->core = index;
      t->state.store(kRunning, std::memory_order_relaxed);
      if (diag) {
        t->t_start = t_dispatch;
        diag->before_task(*t);  // inputs, before any block can write
      }
    }
    if (b + 1 < nb) push_to(index, t);  // more blocks: let other cores help
    bool ok = true;
    if (eng->aborting()) {
      ok = false;  // the run failed elsewhere: do not start more work
    } else {
      const KernelRef* k = t->kernel;
      SimplerLaunch launch{int64_t(b), int64_t(nb), int64_t(t->id), t->func_id, index};
      const SimplerLaunch* prev = t_launch;
      t_launch = &launch;
      const uint64_t t0 = diag ? eng->now_ns() : 0;
      std::string what;
      if (k->builtin) {
        Error e = run_builtin(*k, *t, eng->device());
        if (!e.ok()) {
          ok = false;
          eng->fail_task(t, Error{e.status, format("task %llu (%s) failed: %s", (unsigned long long)pos_of(t->id),
                                                   k->name.c_str(), e.message.c_str())});
        }
      } else {
        KernelCall call{k->entry, t->argv.data()};
        if (!guarded_call(call_kernel, &call, &what)) {
          ok = false;
          eng->fail_task(t, Error{TC_ERR_DISPATCH,
                                  format("task %llu (%s), block %u of %u, faulted on core %d: %s",
                                         (unsigned long long)pos_of(t->id), k->name.c_str(), b, nb, index,
                                         what.c_str())});
        }
      }
      t_launch = prev;
      if (diag && diag->wants_block_records()) diag->on_block(index, *t, b, t_dispatch, t0, eng->now_ns());
    }
    if (!ok) t->poisoned.store(true, std::memory_order_relaxed);
    if (t->blocks_done.fetch_add(1, std::memory_order_acq_rel) + 1 != nb) return;
    // Last block: the task is finished.
    const bool task_ok = !t->poisoned.load(std::memory_order_acquire) && !t->block_failed.load();
    if (diag) {
      t->t_end = eng->now_ns();
      diag->after_task(*t);
    }
    TaskSlot* next = nullptr;
    const uint64_t t_complete = record_sched_.load(std::memory_order_relaxed) ? clock_ns() : 0;
    eng->task_finished(t, task_ok, &next);
    if (t_complete) log_span(index, SchedPhase::Complete, t_complete, clock_ns());
    t = next;
  }
}

}  // namespace simpler
