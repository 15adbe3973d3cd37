// The cuda platform's executor.
//
// Dynamic runs: every kernel task is taken at submit and launched in order on
// a pool of non-blocking streams, its producers expressed on the device: a
// task with one unfinished producer follows it on the producer's stream;
// otherwise it takes a stream round-robin and waits on an event recorded
// after each producer. The host never waits for a producer to finish before
// launching its consumer.
//
// A kernel takes `int64_t* args` in device memory: argv followed by the
// ChipTensor descriptors. Submitted tasks are batched (up to 64, or until the
// orchestration waits or ends, or the oldest has waited 50 us). A batch is
// planned (streams, waits), then cut into segments: runs of tasks on one
// stream with no event wait between them. A segment of several kernels whose
// shape repeats launches as one CUDA Graph (a chain of kernel nodes,
// instantiated once per shape, its argument blocks refilled by one copy per
// launch): per task, a graph node's launch cost on the device and none on
// the host, where a kernel launch costs about 2 us of driver time. Other
// segments' argument blocks go to the device in one copy from pinned memory,
// then their kernels are launched one by one. A thread watches one event per
// stream and batch and reports the batch's tasks finished when it completes.
//
// host_build_graph: the recorded graph becomes a CUDA Graph (one kernel node
// per task, edges from the dependencies, argument blocks uploaded once),
// instantiated once and replayed; without diagnostics a replay is launched
// and reported as one unit (no per-task work on the host before or after).
// Graphs with built-in ops (which run through tensorcore on the host) are
// launched task by task instead.
//
// Built-in tensorcore ops run synchronously on the orchestrating thread after
// their producers' streams are drained. A kernel fault is sticky for a CUDA
// context: the run fails with the driver's error and the Worker refuses
// later runs (close it and open another).
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/builtins.h"
#include "runtime/cuda/cuda_graph.h"
#include "runtime/cuda/cuda_util.h"
#include "runtime/cuda/cupti_pmu.h"
#include "runtime/device.h"
#include "runtime/diagnostics.h"
#include "runtime/engine.h"
#include "runtime/platform.h"
#include "runtime/switches.h"
#include "simpler/simpler.h"

namespace simpler {
namespace {

using cuda::cu;
using cuda::cu_error;
using cuda::cu_error_text;

constexpr int kMaxStreams = 16;
constexpr int kDefaultStreams = 4;
constexpr size_t kBatch = 64;
constexpr uint64_t kBatchAgeNs = 50000;
constexpr uint64_t kArenaBytes = 64ull << 20;
constexpr size_t kPmuRanges = 1024;  // kernels per CUPTI session before it is read out
// Segments (see Segment) of at least this many kernels launch as a CUDA
// Graph: below it, the copy of the arguments and the graph launch cost about
// what the kernel launches they replace do.
constexpr size_t kMinGraphSegment = 4;
// Instantiated segment graphs kept (more than a batch's segments, so none a
// batch plans to use is evicted), and shapes seen once remembered.
constexpr size_t kMaxSegmentGraphs = 128;
constexpr size_t kMaxSeenShapes = 4096;

// Kernel modules unloaded so far (an unregistered callable's): a segment
// graph names kernels by CUfunction, which a module loaded later may reuse.
std::atomic<uint64_t> g_module_unloads{0};

uint64_t steady_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

int threads_per_block() {
  static int n = [] {
    return int(read_switch("SIMPLER_CUDA_THREADS").number);
  }();
  return n;
}

class CudaExecutor final : public Executor {
 public:
  Error open(Device* dev) {
    dev_ = dev;
    if (Error e = ctx_.open(dev->device_id()); !e.ok()) return e;
    ctx_.bind();
    for (int i = 0; i < kMaxStreams; i++) {
      CUresult r = cu().cuStreamCreate(&streams_[i], CU_STREAM_NON_BLOCKING);
      if (r != CUDA_SUCCESS) return cu_error(r, "cuStreamCreate");
    }
    CUresult r = cu().cuMemAlloc(&arena_dev_, kArenaBytes);
    if (r != CUDA_SUCCESS) return cu_error(r, "cuMemAlloc (kernel argument arena)");
    r = cu().cuMemHostAlloc(reinterpret_cast<void**>(&arena_host_), kArenaBytes, 0);
    if (r != CUDA_SUCCESS) return cu_error(r, "cuMemHostAlloc (kernel argument staging)");
    watcher_ = std::thread([this] { watch(); });
    return {};
  }

  ~CudaExecutor() override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (watcher_.joinable()) watcher_.join();
    ctx_.bind();
    for (CUstream s : streams_)
      if (s) cu().cuStreamSynchronize(s), cu().cuStreamDestroy(s);
    for (auto& kv : seg_graphs_) drop(*kv.second);
    events_.destroy_all();
    if (arena_dev_) cu().cuMemFree(arena_dev_);
    if (arena_host_) cu().cuMemFreeHost(arena_host_);
  }

  int num_cores() const override { return kMaxStreams; }  // lanes: the streams

  void begin_run(Engine* engine, int, int sched_threads) override {
    ctx_.bind();
    nstreams_ = sched_threads > 0 ? std::min(sched_threads, kMaxStreams) : kDefaultStreams;
    rr_ = 0;
    Diagnostics* d = engine->diag();
    timing_ = d && d->swimlane() > 0;
    serial_ = d && (d->options().dump_args || d->options().pmu > 0);
    for (int i = 0; i < kMaxStreams; i++) recorded_[i] = Recorded{};
    for (int i = 0; i < kMaxStreams; i++) launches_[i] = 0;
    if (timing_) {
      run_start_ = events_.get(true);
      cu().cuEventRecord(run_start_, streams_[0]);
      run_start_ns_ = engine->now_ns();
    }
    pmu_type_ = d ? d->options().pmu : 0;
    pmu_tasks_.clear();
    // Segment graphs may name kernels of a module unloaded since: drop them
    // all (nothing of the last run still runs).
    if (const uint64_t unloads = g_module_unloads.load(); unloads != unloads_seen_) {
      std::lock_guard<std::recursive_mutex> lk(launch_mu_);
      for (auto& kv : seg_graphs_) drop(*kv.second);
      seg_graphs_.clear();
      seg_seen_.clear();
      unloads_seen_ = unloads;
    }
    engine_.store(engine);
  }

  void end_run() override {
    flush();
    pmu_flush();
    // Everything launched has been reported (the engine waited for it).
    if (run_start_) events_.put(run_start_, true), run_start_ = nullptr;
    for (Recorded& r : recorded_)
      if (r.event) events_.put(r.event, false), r.event = nullptr;
    engine_.store(nullptr);
  }

  Error health() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return broken_;
  }

  bool launches_at_submit() const override { return true; }

  void submitted(TaskSlot* t) override {
    std::lock_guard<std::recursive_mutex> lk(launch_mu_);
    if (batch_.empty()) batch_since_ = steady_ns();
    batch_.push_back(t);
    if (batch_.size() >= kBatch || serial_ || steady_ns() - batch_since_ > kBatchAgeNs) flush();
  }

  void push(TaskSlot* t) override {
    std::lock_guard<std::recursive_mutex> lk(launch_mu_);
    batch_.push_back(t);
    flush();
  }

  void flush() override {
    std::lock_guard<std::recursive_mutex> lk(launch_mu_);
    if (batch_.empty()) return;
    ctx_.bind();
    std::vector<TaskSlot*> batch;
    batch.swap(batch_);
    launch(batch);
  }

  bool run_graph_whole(Graph& g) override {
    // Per-task timing or checks need the task-by-task paths of run_graph.
    if (timing_ || serial_) return false;
    Engine* eng = engine_.load();
    ctx_.bind();
    auto* gs = static_cast<cuda::GraphState*>(g.cuda_graph);
    if (!gs) {
      for (TaskSlot& t : g.slots)
        if (t.kernel && t.kernel->builtin) return false;
      if (!cuda::build_graph(g, &ctx_, threads_per_block(), &gs).ok()) return false;  // run_graph reports it
      g.cuda_graph = gs;
      g.destroy_cuda_graph = cuda::destroy_graph_state;
    }
    CUresult r = cu().cuGraphLaunch(gs->exec, streams_[0]);
    if (r != CUDA_SUCCESS) {
      Error e = cu_error(r, "cuGraphLaunch");
      note_sticky(r, e);
      eng->graph_finished(e);
      return true;
    }
    Completion c;
    c.stream = 0;
    c.whole = true;
    enqueue_completion(0, std::move(c));
    return true;
  }

  bool run_graph(Graph& g) override {
    Engine* eng = engine_.load();
    bool builtin = false;
    for (TaskSlot& t : g.slots) builtin |= t.kernel && t.kernel->builtin;
    if (builtin || serial_) {
      // Task by task, in recording order (a topological order).
      std::vector<TaskSlot*> batch;
      for (TaskSlot& t : g.slots) {
        if (!t.kernel) {
          eng->task_finished(&t, true, nullptr);
          continue;
        }
        batch.push_back(&t);
      }
      std::lock_guard<std::recursive_mutex> lk(launch_mu_);
      ctx_.bind();
      for (size_t i = 0; i < batch.size(); i += kBatch) {
        std::vector<TaskSlot*> part(batch.begin() + i, batch.begin() + std::min(batch.size(), i + kBatch));
        launch(part);
      }
      return true;
    }
    ctx_.bind();
    auto* gs = static_cast<cuda::GraphState*>(g.cuda_graph);
    if (!gs) {
      Error e = cuda::build_graph(g, &ctx_, threads_per_block(), &gs);
      if (!e.ok()) {
        for (TaskSlot& t : g.slots) eng->fail_task(&t, e), eng->task_finished(&t, false, nullptr);
        return true;
      }
      g.cuda_graph = gs;
      g.destroy_cuda_graph = cuda::destroy_graph_state;
    }
    Completion c;
    c.stream = 0;
    if (timing_) {
      c.graph_start = events_.get(true);
      cu().cuEventRecord(c.graph_start, streams_[0]);
    }
    CUresult r = cu().cuGraphLaunch(gs->exec, streams_[0]);
    if (r != CUDA_SUCCESS) {
      Error e = cu_error(r, "cuGraphLaunch");
      note_sticky(r, e);
      for (TaskSlot& t : g.slots) eng->fail_task(&t, e), eng->task_finished(&t, false, nullptr);
      return true;
    }
    for (TaskSlot& t : g.slots) {
      t.core = 0;
      t.state.store(kRunning, std::memory_order_relaxed);
      c.tasks.push_back(&t);
    }
    if (timing_) {
      c.graph_end = events_.get(true);
      cu().cuEventRecord(c.graph_end, streams_[0]);
    }
    enqueue_completion(0, std::move(c));
    return true;
  }

 private:
  struct TaskTiming {
    CUevent start = nullptr, end = nullptr;
  };
  struct Completion {
    int stream = 0;
    CUevent done = nullptr;
    std::vector<TaskSlot*> tasks;
    std::vector<TaskTiming> timing;  // parallel to tasks when timing_
    CUevent graph_start = nullptr, graph_end = nullptr;
    uint64_t span = 0;               // arena span index (+1), 0 if none
    bool whole = false;              // a graph of run_graph_whole: no tasks, one report
  };
  // An instantiated segment graph, used on one stream only (so a launch
  // never overwrites the argument blocks of one still running).
  struct SegmentGraph {
    CUgraphExec exec = nullptr;
    CUdeviceptr args = 0;
    int stream = 0;
    uint64_t last_used = 0;
  };
  struct Span {
    uint64_t end;
    int refs;
  };
  struct Recorded {
    CUevent event = nullptr;
    uint64_t launches = ~0ull;  // the stream's launch count when recorded
  };

  void note_sticky(CUresult r, const Error& e) {
    if (!cuda::sticky(r)) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_.ok())
      broken_ = make_error(TC_ERR_DISPATCH, "the CUDA context is lost after an earlier failure (%s); close this "
                                            "Worker and open a new one",
                           e.message.c_str());
  }

  // An event on stream s after everything launched there so far.
  CUevent stream_event(int s) {
    Recorded& rec = recorded_[s];
    if (rec.event && rec.launches == launches_[s]) return rec.event;
    if (!rec.event) rec.event = events_.get(false);
    cu().cuEventRecord(rec.event, streams_[s]);
    rec.launches = launches_[s];
    return rec.event;
  }

  // Reserves `bytes` of the argument arena (waiting for completions).
  bool reserve(uint64_t bytes, uint64_t* offset, uint64_t* span_index) {
    std::unique_lock<std::mutex> lk(mu_);
    uint64_t cost;
    for (;;) {
      const uint64_t off = arena_head_ % kArenaBytes;
      cost = off + bytes > kArenaBytes ? (kArenaBytes - off) + bytes : bytes;
      if (arena_head_ + cost - arena_tail_ <= kArenaBytes) break;
      if (!broken_.ok()) return false;
      arena_cv_.wait_for(lk, std::chrono::milliseconds(10));
    }
    *offset = (arena_head_ + cost - bytes) % kArenaBytes;
    arena_head_ += cost;
    spans_.push_back(Span{arena_head_, 1});  // held by the launcher until its completions are queued
    *span_index = span_base_ + spans_.size();  // 1-based
    return true;
  }

  // Reads the counters of the kernels launched since the session opened and
  // gives them to the diagnostics. CUPTI numbers auto ranges in launch order
  // (their names are those numbers, never kernel names), and only task
  // kernels launch while a session is open (a built-in op closes it first),
  // so range i is the kernel of pmu_tasks_[i]; a count that differs means
  // something else launched kernels on the context, and no attribution
  // would be right.
  void pmu_flush() {
    if (!pmu_) return;
    Engine* eng = engine_.load();
    // Every counted kernel has finished before the session stops.
    CUresult sr = CUDA_SUCCESS;
    for (int s = 0; s < nstreams_ && sr == CUDA_SUCCESS; s++) sr = cu().cuStreamSynchronize(streams_[s]);
    std::vector<cuda::PmuRange> ranges;
    Error e = sr == CUDA_SUCCESS ? pmu_->finish(&ranges) : cu_error(sr, "enable_pmu: waiting for counted kernels");
    pmu_.reset();
    std::vector<uint64_t> tasks;
    tasks.swap(pmu_tasks_);
    if (!eng) return;
    if (e.ok() && ranges.size() != tasks.size())
      e = make_error(TC_ERR_DISPATCH, "enable_pmu: CUPTI counted %zu kernel(s) where %zu task kernel(s) were launched "
                     "(another kernel ran on this device's context while counting), so no range can be attributed",
                     ranges.size(), tasks.size());
    if (!e.ok()) {
      eng->report_fatal(e);
      return;
    }
    Diagnostics* d = eng->diag();
    if (!d) return;
    for (size_t k = 0; k < tasks.size(); k++) d->set_pmu(tasks[k], ranges[k].values);
    d->set_pmu_names(cuda::pmu_metric_names(pmu_type_));
  }

  void release_span(uint64_t span_index) {
    if (!span_index) return;
    std::lock_guard<std::mutex> lk(mu_);
    Span& s = spans_[span_index - 1 - span_base_];
    if (--s.refs > 0) return;
    while (!spans_.empty() && spans_.front().refs <= 0) {
      arena_tail_ = spans_.front().end;
      spans_.pop_front();
      span_base_++;
    }
    arena_cv_.notify_all();
  }

  void fail_now(TaskSlot* t, const Error& e) {
    Engine* eng = engine_.load();
    eng->fail_task(t, e);
    eng->task_finished(t, false, nullptr);
  }

  // A run of a batch's tasks on one stream with no event wait between them
  // (stream order alone orders them): launched as one CUDA Graph when its
  // shape repeats, else kernel by kernel.
  struct Segment {
    int stream = 0;
    bool builtin = false;
    int waits[kMaxStreams];  // other streams whose work so far must finish first
    int nwait = 0;
    std::vector<uint32_t> tasks;  // indices into the batch
    uint64_t off = 0, bytes = 0;  // its argument blocks, contiguous in the arena
    SegmentGraph* graph = nullptr;
  };

  // Streams and segments of a batch, in batch order: a task follows its one
  // unfinished producer's stream (else takes one round-robin) and waits on
  // an event of every other stream holding a producer. Segments launch in
  // the order they are created, which keeps every stream's order and
  // records each event right after the producers it stands for.
  std::vector<Segment> plan(const std::vector<TaskSlot*>& live) {
    std::vector<Segment> segs;
    int open[kMaxStreams];
    std::fill(open, open + kMaxStreams, -1);
    for (uint32_t i = 0; i < live.size(); i++) {
      TaskSlot* t = live[i];
      int last_launched = -1, waits[kMaxStreams], nwait = 0;
      for (uint32_t k = 0; k < t->fanin_count; k++) {
        TaskSlot* p = t->fanin[k].producer;
        if (p->state.load(std::memory_order_acquire) != kRunning || p->core < 0) continue;
        last_launched = p->core;
        bool seen = false;
        for (int w = 0; w < nwait; w++) seen |= waits[w] == p->core;
        if (!seen) waits[nwait++] = p->core;
      }
      const int chosen = last_launched >= 0 ? last_launched : int(rr_++ % uint32_t(nstreams_));
      int cross = 0;
      for (int w = 0; w < nwait; w++)
        if (waits[w] != chosen) waits[cross++] = waits[w];
      // Taken: the batch's later tasks see it as launched on `chosen`.
      t->core = chosen;
      t->state.store(kRunning, std::memory_order_release);
      const bool builtin = t->kernel->builtin;
      // A stream waited on takes later tasks into a new segment, so the
      // event (recorded when the waiting segment launches) covers no more
      // than the producers.
      for (int w = 0; w < cross; w++) open[waits[w]] = -1;
      if (builtin || cross > 0 || open[chosen] < 0) {
        segs.emplace_back();
        Segment& sg = segs.back();
        sg.stream = chosen;
        sg.builtin = builtin;
        sg.nwait = cross;
        std::copy(waits, waits + cross, sg.waits);
        open[chosen] = int(segs.size() - 1);
      }
      segs[size_t(open[chosen])].tasks.push_back(i);
      // A built-in op runs on the host between what comes before and after it.
      if (builtin) std::fill(open, open + kMaxStreams, -1);
    }
    return segs;
  }

  // The instantiated graph for a segment's shape (stream; each task's
  // kernel, grid and argument bytes), or null to launch it kernel by kernel.
  // A shape is instantiated the second time it is seen: one seen once costs
  // no instantiation.
  SegmentGraph* segment_graph(const Segment& sg, const std::vector<TaskSlot*>& live) {
    if (sg.builtin || sg.tasks.size() < kMinGraphSegment) return nullptr;
    std::vector<uint64_t> key;
    key.reserve(1 + 3 * sg.tasks.size());
    key.push_back(uint64_t(sg.stream));
    for (uint32_t i : sg.tasks) {
      const TaskSlot& t = *live[i];
      key.push_back(reinterpret_cast<uint64_t>(t.kernel->cuda_function));
      key.push_back(t.block_num);
      key.push_back((cuda::arg_block_bytes(t) + 255) / 256 * 256);
    }
    auto it = seg_graphs_.find(key);
    if (it != seg_graphs_.end()) {
      it->second->last_used = use_clock_;
      return it->second->exec ? it->second.get() : nullptr;
    }
    if (seg_seen_.size() >= kMaxSeenShapes) seg_seen_.clear();
    if (++seg_seen_[key] < 2) return nullptr;
    seg_seen_.erase(key);
    if (seg_graphs_.size() >= kMaxSegmentGraphs) evict_segment_graph();
    auto g = std::make_unique<SegmentGraph>();
    g->stream = sg.stream;
    g->last_used = use_clock_;
    if (!build_segment_graph(sg, live, g.get())) {
      drop(*g);  // remembered without an exec: this shape launches kernel by kernel
      g->exec = nullptr, g->args = 0;
    }
    SegmentGraph* out = g->exec ? g.get() : nullptr;
    seg_graphs_.emplace(std::move(key), std::move(g));
    return out;
  }

  // A chain of kernel nodes (stream order), argument blocks at fixed
  // places in g->args, which each launch refills from the staging arena.
  bool build_segment_graph(const Segment& sg, const std::vector<TaskSlot*>& live, SegmentGraph* g) {
    uint64_t bytes = 0;
    for (uint32_t i : sg.tasks) bytes += (cuda::arg_block_bytes(*live[i]) + 255) / 256 * 256;
    if (cu().cuMemAlloc(&g->args, bytes) != CUDA_SUCCESS) return false;
    CUgraph graph = nullptr;
    if (cu().cuGraphCreate(&graph, 0) != CUDA_SUCCESS) return false;
    CUgraphNode prev = nullptr;
    uint64_t off = 0;
    bool ok = true;
    for (uint32_t i : sg.tasks) {
      const TaskSlot& t = *live[i];
      CUdeviceptr argp = g->args + off;
      off += (cuda::arg_block_bytes(t) + 255) / 256 * 256;
      void* params[] = {&argp};
      CUDA_KERNEL_NODE_PARAMS kp;
      std::memset(&kp, 0, sizeof kp);
      kp.func = static_cast<CUfunction>(t.kernel->cuda_function);
      kp.gridDimX = t.block_num, kp.gridDimY = 1, kp.gridDimZ = 1;
      kp.blockDimX = unsigned(threads_per_block()), kp.blockDimY = 1, kp.blockDimZ = 1;
      kp.kernelParams = params;
      CUgraphNode node = nullptr;
      if (cu().cuGraphAddKernelNode(&node, graph, prev ? &prev : nullptr, prev ? 1 : 0, &kp) != CUDA_SUCCESS) {
        ok = false;
        break;
      }
      prev = node;
    }
    ok = ok && cu().cuGraphInstantiate(&g->exec, graph, 0) == CUDA_SUCCESS;
    cu().cuGraphDestroy(graph);  // the exec is independent of it
    return ok;
  }

  void drop(SegmentGraph& g) {
    if (g.exec) cu().cuGraphExecDestroy(g.exec);
    if (g.args) cu().cuMemFree(g.args);
  }

  // Frees the least recently used segment graph; it may still run, so its
  // stream is drained first (rare: the cache holds many shapes).
  void evict_segment_graph() {
    auto victim = seg_graphs_.begin();
    for (auto it = seg_graphs_.begin(); it != seg_graphs_.end(); ++it)
      if (it->second->last_used < victim->second->last_used) victim = it;
    if (victim == seg_graphs_.end()) return;
    if (victim->second->exec) cu().cuStreamSynchronize(streams_[victim->second->stream]);
    drop(*victim->second);
    seg_graphs_.erase(victim);
  }

  // Launches a batch (orchestrating thread, launch_mu_ held, context bound).
  void launch(std::vector<TaskSlot*>& batch) {
    Engine* eng = engine_.load();
    if (!eng) return;
    Error broken = health();
    std::vector<TaskSlot*> live;
    for (TaskSlot* t : batch) {
      if (!broken.ok())
        fail_now(t, broken);
      else
        live.push_back(t);
    }
    if (live.empty()) return;
    use_clock_++;
    std::vector<Segment> segs = plan(live);
    // Diagnostics want each kernel launched (and timed, dumped, counted) alone.
    const bool graphs = !timing_ && !serial_ && pmu_type_ == 0;
    // Argument blocks of the whole batch, each segment's contiguous: one
    // staging area, one copy to the arena (for what launches kernel by
    // kernel), one copy per segment graph into its own blocks.
    uint64_t bytes = 0;
    std::vector<uint64_t> offs(live.size());
    bool arena_used = false;
    for (Segment& sg : segs) {
      sg.off = bytes;
      for (uint32_t i : sg.tasks) {
        offs[i] = bytes;
        bytes += (cuda::arg_block_bytes(*live[i]) + 255) / 256 * 256;
      }
      sg.bytes = bytes - sg.off;
      sg.graph = graphs ? segment_graph(sg, live) : nullptr;
      arena_used |= !sg.graph;
    }
    uint64_t base = 0, span = 0;
    if (!reserve(bytes, &base, &span)) {
      for (TaskSlot* t : live) t->state.store(kPending, std::memory_order_release), fail_now(t, health());
      return;
    }
    for (Segment& sg : segs)
      for (uint32_t i : sg.tasks) {
        const uint64_t dev = sg.graph ? sg.graph->args + (offs[i] - sg.off) : arena_dev_ + base + offs[i];
        cuda::write_arg_block(*live[i], arena_host_ + base + offs[i], dev);
      }
    CUevent copied = nullptr;
    if (arena_used) {
      CUresult r = cu().cuMemcpyHtoDAsync(arena_dev_ + base, arena_host_ + base, bytes, streams_[0]);
      if (r != CUDA_SUCCESS) {
        Error e = cu_error(r, "uploading kernel arguments");
        note_sticky(r, e);
        for (TaskSlot* t : live) t->state.store(kPending, std::memory_order_release), fail_now(t, e);
        release_span(span);
        return;
      }
      launches_[0]++;  // the copy counts as work on stream 0
      // Other streams wait for the copy alone, not for kernels stream 0 runs next.
      if (nstreams_ > 1) {
        copied = events_.get(false);
        cu().cuEventRecord(copied, streams_[0]);
      }
    }
    bool waited_copy[kMaxStreams] = {};
    waited_copy[0] = true;
    std::vector<Completion> per_stream(nstreams_);
    for (int s = 0; s < nstreams_; s++) per_stream[s].stream = s;
    for (Segment& sg : segs) {
      CUstream st = streams_[sg.stream];
      for (int w = 0; w < sg.nwait; w++) cu().cuStreamWaitEvent(st, stream_event(sg.waits[w]), 0);
      if (sg.graph) {
        launch_segment_graph(sg, live, base, offs, per_stream[sg.stream], eng);
        continue;
      }
      if (!waited_copy[sg.stream]) {
        cu().cuStreamWaitEvent(st, copied, 0);
        waited_copy[sg.stream] = true;
      }
      for (uint32_t i : sg.tasks) launch_one(live[i], sg.stream, arena_dev_ + base + offs[i], per_stream[sg.stream], eng);
    }
    if (copied) events_.put(copied, false);  // reusable once recorded: waits captured it
    int users = 0;
    for (Completion& c : per_stream) users += !c.tasks.empty();
    {
      std::lock_guard<std::mutex> lk(mu_);
      spans_[span - 1 - span_base_].refs += users;
    }
    for (Completion& c : per_stream) {
      if (c.tasks.empty()) continue;
      c.span = span;
      enqueue_completion(c.stream, std::move(c));
    }
    release_span(span);  // the launcher's own hold
  }

  // One copy of the segment's argument blocks into the graph's, one launch.
  void launch_segment_graph(Segment& sg, const std::vector<TaskSlot*>& live, uint64_t base,
                            const std::vector<uint64_t>& offs, Completion& done, Engine* eng) {
    SegmentGraph& g = *sg.graph;
    CUstream st = streams_[sg.stream];
    CUresult r = cu().cuMemcpyHtoDAsync(g.args, arena_host_ + base + sg.off, sg.bytes, st);
    if (r == CUDA_SUCCESS) {
      launches_[sg.stream]++;
      // A failure earlier in this batch cancels what has not started: the
      // segment then goes kernel by kernel, skipping those it cancels.
      bool cancel = eng->aborting();
      for (uint32_t i : sg.tasks) cancel |= live[i]->poisoned.load(std::memory_order_acquire);
      if (cancel) {
        for (uint32_t i : sg.tasks) launch_one(live[i], sg.stream, g.args + (offs[i] - sg.off), done, eng);
        return;
      }
      r = cu().cuGraphLaunch(g.exec, st);
    }
    if (r != CUDA_SUCCESS) {
      Error e = make_error(TC_ERR_DISPATCH, "launching a CUDA Graph of %zu task(s) from task %llu (%s): %s",
                           sg.tasks.size(), (unsigned long long)pos_of(live[sg.tasks[0]]->id),
                           live[sg.tasks[0]]->kernel->name.c_str(), cu_error_text(r).c_str());
      note_sticky(r, e);
      cu().cuStreamSynchronize(st);  // no copy may still read the staging area once the batch lets it go
      for (uint32_t i : sg.tasks) live[i]->state.store(kPending, std::memory_order_release), fail_now(live[i], e);
      return;
    }
    launches_[sg.stream]++;
    for (uint32_t i : sg.tasks) {
      done.tasks.push_back(live[i]);
      done.timing.push_back(TaskTiming{});
    }
  }

  // One task's kernel (or built-in op) on stream s, its arguments at argp.
  void launch_one(TaskSlot* t, int s, CUdeviceptr argp, Completion& done, Engine* eng) {
    // A failure so far (a built-in op of this batch, a bad launch) cancels
    // what has not started: poisoned consumers, or everything once aborting.
    if (eng->aborting() || t->poisoned.load(std::memory_order_acquire)) {
      eng->task_finished(t, false, nullptr);
      return;
    }
    CUstream st = streams_[s];
    if (t->kernel->builtin) {
      pmu_flush();  // tensorcore's kernels must not become ranges of the session
      run_builtin_now(t, eng, st);
      return;
    }
    Diagnostics* diag = eng->diag();
    if (serial_ && diag) {
      cu().cuStreamSynchronize(st);
      diag->before_task(*t);
    }
    if (pmu_type_ && !pmu_) {
      auto session = std::make_unique<cuda::PmuSession>();
      Error pe = session->open(ctx_.get(), dev_->device_id(), pmu_type_, kPmuRanges);
      if (!pe.ok()) {
        t->state.store(kPending, std::memory_order_release);
        fail_now(t, pe);
        return;
      }
      pmu_ = std::move(session);
    }
    TaskTiming tm;
    if (timing_) {
      tm.start = events_.get(true);
      cu().cuEventRecord(tm.start, st);
    }
    void* params[] = {&argp};
    CUresult r = cu().cuLaunchKernel(static_cast<CUfunction>(t->kernel->cuda_function), t->block_num, 1, 1,
                                     unsigned(threads_per_block()), 1, 1, 0, st, params, nullptr);
    if (r != CUDA_SUCCESS) {
      Error e = make_error(TC_ERR_DISPATCH, "task %llu (%s): cuLaunchKernel with %u block(s) of %d threads: %s",
                           (unsigned long long)pos_of(t->id), t->kernel->name.c_str(), t->block_num,
                           threads_per_block(), cu_error_text(r).c_str());
      note_sticky(r, e);
      if (tm.start) events_.put(tm.start, true);
      t->state.store(kPending, std::memory_order_release);
      fail_now(t, e);
      return;
    }
    launches_[s]++;
    if (timing_) {
      tm.end = events_.get(true);
      cu().cuEventRecord(tm.end, st);
    }
    if (serial_ && diag) {
      CUresult sr = cu().cuStreamSynchronize(st);
      if (sr == CUDA_SUCCESS) diag->after_task(*t);
    }
    if (pmu_) {
      pmu_tasks_.push_back(t->id);
      if (pmu_tasks_.size() >= kPmuRanges) pmu_flush();
    }
    done.tasks.push_back(t);
    done.timing.push_back(tm);
  }

  // A built-in op: drain its producers' streams, run it through tensorcore.
  void run_builtin_now(TaskSlot* t, Engine* eng, CUstream st) {
    CUresult r = cu().cuStreamSynchronize(st);
    for (uint32_t k = 0; k < t->fanin_count && r == CUDA_SUCCESS; k++) {
      TaskSlot* p = t->fanin[k].producer;
      if (p->core >= 0) r = cu().cuStreamSynchronize(streams_[p->core]);
    }
    if (r != CUDA_SUCCESS) {
      Error e = cu_error(r, "waiting for a built-in op's producers");
      note_sticky(r, e);
      fail_now(t, e);
      return;
    }
    if (Diagnostics* d = eng->diag()) d->before_task(*t);
    const uint64_t t0 = eng->now_ns();
    Error e = run_builtin(*t->kernel, *t, dev_);
    const uint64_t t1 = eng->now_ns();
    if (!e.ok()) {
      fail_now(t, Error{e.status, format("task %llu (%s) failed: %s", (unsigned long long)pos_of(t->id),
                                         t->kernel->name.c_str(), e.message.c_str())});
      return;
    }
    if (Diagnostics* d = eng->diag()) {
      t->t_start = t0, t->t_end = t1;
      // Logged as "no core": the watcher thread owns the stream lanes' logs.
      if (d->wants_block_records()) d->on_block(-1, *t, 0, t0, t0, t1);
      d->after_task(*t);
    }
    t->core = -1;  // no device work to wait for
    eng->task_finished(t, true, nullptr);
  }

  void enqueue_completion(int stream, Completion&& c) {
    c.done = events_.get(false);
    cu().cuEventRecord(c.done, streams_[stream]);
    std::lock_guard<std::mutex> lk(mu_);
    fifo_[stream].push_back(std::move(c));
    pending_++;
    cv_.notify_all();
  }

  uint64_t event_ns(CUevent e) {
    float ms = 0;
    if (!run_start_ || cu().cuEventElapsedTime(&ms, run_start_, e) != CUDA_SUCCESS) return 0;
    return run_start_ns_ + uint64_t(double(ms) * 1e6);
  }

  void finish(Completion& c, CUresult r) {
    Engine* eng = engine_.load();
    if (c.whole) {
      events_.put(c.done, false);
      Error e;
      if (r != CUDA_SUCCESS) {
        e = make_error(TC_ERR_DISPATCH, "a kernel failed on the GPU in the replayed CUDA Graph of the recorded "
                       "graph (stream 0): %s", cu_error_text(r).c_str());
        note_sticky(r, e);
      }
      eng->graph_finished(e);
      return;
    }
    Diagnostics* diag = eng ? eng->diag() : nullptr;
    if (r == CUDA_SUCCESS && diag) {
      for (size_t i = 0; i < c.tasks.size(); i++) {
        TaskSlot* t = c.tasks[i];
        CUevent a = i < c.timing.size() ? c.timing[i].start : c.graph_start;
        CUevent b = i < c.timing.size() ? c.timing[i].end : c.graph_end;
        if (a && b) {
          t->t_start = event_ns(a);
          t->t_end = event_ns(b);
          if (diag->wants_block_records()) diag->on_block(c.stream, *t, 0, t->t_start, t->t_start, t->t_end);
        }
      }
    }
    for (TaskTiming& tm : c.timing) events_.put(tm.start, true), events_.put(tm.end, true);
    events_.put(c.graph_start, true);
    events_.put(c.graph_end, true);
    events_.put(c.done, false);
    Error e;
    if (r != CUDA_SUCCESS) {
      std::string ids;
      for (size_t i = 0; i < c.tasks.size() && i < 8; i++)
        ids += (i ? ", " : "") + std::to_string(pos_of(c.tasks[i]->id));
      if (c.tasks.size() > 8) ids += ", ...";
      e = make_error(TC_ERR_DISPATCH, "a kernel failed on the GPU in one of tasks [%s] (stream %d): %s", ids.c_str(),
                     c.stream, cu_error_text(r).c_str());
      note_sticky(r, e);
    }
    for (TaskSlot* t : c.tasks) {
      if (r != CUDA_SUCCESS) eng->fail_task(t, e);
      eng->task_finished(t, r == CUDA_SUCCESS, nullptr);
    }
    release_span(c.span);
  }

  // The completion watcher: polls the oldest event of each stream.
  void watch() {
    ctx_.bind();
    int idle = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        if (pending_ == 0) {
          cv_.wait(lk, [&] { return stop_ || pending_ > 0; });
          idle = 0;
        }
        if (stop_ && pending_ == 0) return;
      }
      bool progressed = false;
      for (int s = 0; s < kMaxStreams; s++) {
        Completion c;
        CUresult r;
        {
          std::lock_guard<std::mutex> lk(mu_);
          if (fifo_[s].empty()) continue;
          r = cu().cuEventQuery(fifo_[s].front().done);
          if (r == CUDA_ERROR_NOT_READY) continue;
          c = std::move(fifo_[s].front());
          fifo_[s].pop_front();
          pending_--;
        }
        finish(c, r);
        progressed = true;
      }
      if (progressed) {
        idle = 0;
      } else if (++idle < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }

  Device* dev_ = nullptr;
  cuda::PrimaryContext ctx_;
  CUstream streams_[kMaxStreams] = {};
  int nstreams_ = kDefaultStreams;
  uint32_t rr_ = 0;
  uint64_t launches_[kMaxStreams] = {};
  Recorded recorded_[kMaxStreams];
  cuda::EventPool events_;
  std::atomic<Engine*> engine_{nullptr};
  bool timing_ = false, serial_ = false;
  CUevent run_start_ = nullptr;
  uint64_t run_start_ns_ = 0;
  int pmu_type_ = 0;
  std::unique_ptr<cuda::PmuSession> pmu_;
  std::vector<uint64_t> pmu_tasks_;

  std::recursive_mutex launch_mu_;
  std::vector<TaskSlot*> batch_;
  uint64_t batch_since_ = 0;
  // Segment graphs by shape (see segment_graph), under launch_mu_.
  std::map<std::vector<uint64_t>, std::unique_ptr<SegmentGraph>> seg_graphs_;
  std::map<std::vector<uint64_t>, uint32_t> seg_seen_;
  uint64_t use_clock_ = 0;  // launch() calls, for the least recently used graph
  uint64_t unloads_seen_ = 0;  // g_module_unloads when seg_graphs_ was last checked

  CUdeviceptr arena_dev_ = 0;
  char* arena_host_ = nullptr;
  uint64_t arena_head_ = 0, arena_tail_ = 0;
  std::deque<Span> spans_;
  uint64_t span_base_ = 0;
  std::condition_variable arena_cv_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Completion> fifo_[kMaxStreams];
  int64_t pending_ = 0;
  bool stop_ = false;
  Error broken_;
  std::thread watcher_;
};

}  // namespace

bool cuda_built() { return true; }

std::unique_ptr<Executor> make_cuda_executor(Device* dev, Error* err) {
  auto ex = std::make_unique<CudaExecutor>();
  if (Error e = ex->open(dev); !e.ok()) {
    *err = e;
    return nullptr;
  }
  return ex;
}

Error load_cuda_kernel(Device* dev, const std::string& binary, const std::string& what, KernelRef* k,
                       std::shared_ptr<void>* keep) {
  auto ctx = std::make_shared<cuda::PrimaryContext>();
  if (Error e = ctx->open(dev->device_id()); !e.ok()) return e;
  ctx->bind();
  CUmodule mod = nullptr;
  CUresult r = cu().cuModuleLoadData(&mod, binary.data());
  if (r != CUDA_SUCCESS)
    return make_error(TC_ERR_INVALID_ARG,
                      "cannot load %s: %s; cuda kernels are cubins built for this GPU (KernelCompiler(platform='cuda'))",
                      what.c_str(), cu_error_text(r).c_str());
  CUfunction fn = nullptr;
  r = cu().cuModuleGetFunction(&fn, mod, "kernel_entry");
  if (r != CUDA_SUCCESS) {
    cu().cuModuleUnload(mod);
    return make_error(TC_ERR_KERNEL_NOT_FOUND,
                      "%s does not export kernel_entry (declare it extern \"C\" __global__ void kernel_entry(int64_t* "
                      "args), or use SIMPLER_KERNEL_ENTRY from kernel.h): %s",
                      what.c_str(), cu_error_text(r).c_str());
  }
  k->cuda_function = fn;
  struct Module {
    std::shared_ptr<cuda::PrimaryContext> ctx;
    CUmodule mod;
    ~Module() {
      ctx->bind();
      cu().cuModuleUnload(mod);
      g_module_unloads.fetch_add(1);
    }
  };
  *keep = std::shared_ptr<Module>(new Module{ctx, mod});
  return {};
}

bool cuda_pointer_is_device(uint64_t addr) {
  if (!cuda::load_driver(nullptr) || cu().cuInit(0) != CUDA_SUCCESS) return false;
  unsigned int type = 0;
  CUresult r = cu().cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CUdeviceptr(addr));
  return r == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE;
}

}  // namespace simpler
