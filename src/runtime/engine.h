// The engine of a run: turns an orchestration's submits into a dependency
// graph and hands ready tasks to an executor.
//
// Dynamic mode (tensormap_and_ringbuffer): the orchestration runs while the
// executor runs tasks. Every submit takes a slot from the task ring of its
// scope depth, runtime-created outputs from that depth's heap ring and its
// edges from that depth's dependency pool; when one is full the submit waits
// for tasks to retire, and fails the run (instead of hanging) when nothing
// left could free space. Slots retire in ring order once their scope has
// ended, they have finished and every consumer has finished.
//
// Build mode (host_build_graph): the same submits record a Graph that is run
// (and may be replayed) after the orchestration returns.
//
// The engine is level-agnostic: an Executor decides what "running a task"
// means (cpu core threads, CUDA streams; child workers at higher levels).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/kernel_ref.h"
#include "runtime/task.h"
#include "runtime/tensormap.h"
#include "simpler/orchestration.h"

namespace simpler {

class Device;
class Diagnostics;
class Engine;
struct Graph;

constexpr int kRings = 4;
constexpr uint64_t kHeapAlign = 1024;
constexpr uint64_t kDefaultTaskWindow = 16384;
constexpr uint64_t kDefaultHeap = 256ull << 20;
constexpr uint64_t kDefaultDepPool = 16384;

struct RingSizes {
  uint64_t task_window = kDefaultTaskWindow;
  uint64_t heap = kDefaultHeap;
  uint64_t dep_pool = kDefaultDepPool;
};

// Memory a run may name in its tensors besides the worker's allocations:
// host tensors of the chip call (cpu), staged copies, etc.
struct Region {
  uint64_t base;
  uint64_t size;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual int num_cores() const = 0;
  // A run starts/ends; `cores` is how many cores it may use (<= num_cores(),
  // 0 = all), `sched_threads` the call's aicpu_thread_num (0 = default).
  virtual void begin_run(Engine* engine, int cores, int sched_threads) = 0;
  virtual void end_run() = 0;
  // A task whose producers have all finished.
  virtual void push(TaskSlot* t) = 0;
  // Runs a whole recorded graph; false to let the engine push its roots.
  virtual bool run_graph(Graph&) { return false; }
  // Runs a whole recorded graph as one unit and reports it with one
  // Engine::graph_finished (no task finishes on its own, so the engine
  // resets no per-task state either); false when it cannot, and then
  // run_graph is asked. Only asked when no diagnostics want per-task records.
  virtual bool run_graph_whole(Graph&) { return false; }

  // Executors that order tasks on the device themselves (cuda: streams and
  // events) take every kernel task at submit, whatever its producers' state,
  // and report it finished when the device has run it; the engine then never
  // pushes kernel tasks. flush() hands over what submitted() may batch; the
  // engine calls it before it waits and when the orchestration ends.
  virtual bool launches_at_submit() const { return false; }
  virtual void submitted(TaskSlot*) {}
  virtual void flush() {}
  // An executor that can no longer run anything (a lost CUDA context) says why.
  virtual Error health() const { return {}; }
};

// A recorded graph (host_build_graph) with the storage it owns.
struct Graph {
  std::deque<TaskSlot> slots;
  std::vector<std::unique_ptr<DepEntry[]>> dep_chunks;
  size_t dep_chunk_used = 0, dep_chunk_cap = 0;
  Device* device = nullptr;
  std::vector<Region> heap_chunks;  // device allocations for created outputs
  uint64_t heap_chunk_used = 0, heap_bytes = 0, heap_limit = 0;
  uint64_t edges = 0;
  void* cuda_graph = nullptr;  // the executor's instantiated form, if any
  void (*destroy_cuda_graph)(void*) = nullptr;
  ~Graph();
};

struct RunSetup {
  bool build = false;            // host_build_graph
  RingSizes rings[kRings];
  const KernelTable* kernels = nullptr;
  Executor* executor = nullptr;
  Device* device = nullptr;
  Diagnostics* diag = nullptr;
  std::vector<Region> regions;
  int cores = 0;
  int sched_threads = 0;
  uint64_t heap_limit = kDefaultHeap;  // build mode: bytes of created outputs
};

class Engine {
 public:
  Engine();
  ~Engine();

  // Starts a run. In build mode `graph` receives the recorded tasks.
  Error begin(const RunSetup& setup, Graph* graph = nullptr);
  // Orchestration done: closes the outer scope, then (dynamic) waits for
  // every task or (build) returns at once.
  void end_orchestration();
  // Runs a recorded graph (build mode). A replay (`replay`: recorded by an
  // earlier run) reports its tasks to the diagnostics as if submitted now.
  void run_graph(Graph& g, bool replay);
  // Waits for every task of the run. Returns the run's first error.
  Error finish();

  // ---- orchestration side (the orchestrating thread) ----
  void submit(int32_t func_id, int32_t core_type, const SimplerCoreArgs& a, TaskOutputTensors* out);
  void scope_begin(int32_t mode);
  void scope_end();
  bool fatal() const { return aborting_.load(std::memory_order_acquire); }
  void report_fatal(const Error& e);

  // ---- executor side ----
  // Every block of t has run; `ok` says how it went. Newly ready consumers
  // are pushed to the executor, except one returned in *next (may be null)
  // for the caller to run at once.
  void task_finished(TaskSlot* t, bool ok, TaskSlot** next);
  // A graph taken by Executor::run_graph_whole has finished (e: its error).
  void graph_finished(const Error& e);
  // Records a task's failure (the first one becomes the run's error).
  void fail_task(TaskSlot* t, const Error& e);
  bool aborting() const { return aborting_.load(std::memory_order_relaxed); }
  uint64_t now_ns() const;
  Diagnostics* diag() const { return diag_; }
  Device* device() const { return device_; }

  // Introspection for diagnostics and tests.
  struct RingUsage {
    uint64_t tasks, task_window, heap_used, heap, deps_used, dep_pool;
  };
  RingUsage ring_usage(int r) const;
  size_t tensormap_size() const { return tensormap_.size(); }
  uint64_t tasks_submitted() const { return submitted_; }
  uint64_t heap_base(int r) const { return rings_[r].heap_base; }
  int scope_depth() const { return int(scopes_.size()) - 1; }

 private:
  struct Ring {
    int index = 0;
    uint64_t window = 0;
    std::unique_ptr<TaskSlot[]> slots;
    uint64_t head = 0;              // next position to allocate (orchestrator)
    std::atomic<uint64_t> tail{0};  // oldest position not yet retired
    uint64_t heap_cap = 0, heap_head = 0, heap_base = 0;
    std::atomic<uint64_t> heap_tail{0};
    uint64_t dep_cap = 0, dep_head = 0;
    std::atomic<uint64_t> dep_tail{0};
    std::unique_ptr<DepEntry[]> deps;
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<int> waiters{0};
    TaskSlot& slot(uint64_t pos) { return slots[pos & (window - 1)]; }
  };
  struct Scope {
    uint32_t depth;
    int ring;
    bool manual;
    uint64_t first_pos;
    uint64_t tasks = 0;
    uint64_t seq;
  };
  struct Producer {
    TaskSlot* task;  // valid only when `live`
    uint64_t id;
    bool live;       // unfinished: a real edge; otherwise recorded for diagnostics only
    uint32_t arg;
    DepSource source;
    Overlap overlap;
  };

  Error configure_rings(const RunSetup& s);
  bool resolve(ChipTensor& t, uint32_t index, const KernelRef* k, int32_t func_id);
  TaskSlot* alloc_slot(Ring& r, const Scope& sc);
  bool alloc_heap(Ring& r, uint64_t bytes, uint64_t* addr);
  DepEntry* alloc_deps(Ring& r, uint32_t n);
  bool wait_for_space(Ring& r, const char* what, uint64_t need, const Scope& sc);
  void add_producer(TaskSlot* p, uint64_t id, bool live, uint32_t arg, DepSource src, Overlap o);
  void make_ready(TaskSlot* t, TaskSlot** next);
  void drain_inline();  // finishes the tasks make_ready finished inline
  void release(TaskSlot* t);
  void advance(Ring& r);
  Error fail_submit(tc_status st, const std::string& msg);
  std::string task_label(int32_t func_id, const KernelRef* k) const;

  Ring rings_[kRings];
  std::vector<Scope> scopes_;
  TensorMap tensormap_;
  std::vector<Producer> producers_;  // scratch of one submit
  const KernelTable* kernels_ = nullptr;
  Executor* executor_ = nullptr;
  Device* device_ = nullptr;
  Diagnostics* diag_ = nullptr;
  Graph* graph_ = nullptr;
  bool build_ = false;
  bool executor_owns_graph_ = false;  // the executor runs (and finishes) the graph itself
  std::vector<Region> regions_;
  uint64_t t0_ = 0;
  uint64_t submitted_ = 0;
  uint64_t mark_seq_ = 0;  // de-duplication stamps, never reset
  uint64_t scope_seq_ = 0;

  std::atomic<bool> aborting_{false};
  std::atomic<int64_t> incomplete_{0};
  std::atomic<bool> waiting_{false};
  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::mutex err_mu_;
  Error error_;
};

// The engine the calling thread orchestrates for (set while an orchestration
// function runs); the ops table below forwards to it.
Engine* current_engine();
void set_current_engine(Engine* e);
const SimplerOrchOps* orch_ops_table();

}  // namespace simpler
