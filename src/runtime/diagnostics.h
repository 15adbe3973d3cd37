// Diagnostics of one run, each switched on by a CallConfig field and written
// under output_prefix when the run ends:
//   swimlane     l2_perf_records.json  per-task (per-block) start/end on each
//                core; level 2 adds dispatch/finish, 3 scheduler phases,
//                4 orchestrator phases. simpler_setup.tools.swimlane_converter
//                turns it into Chrome Trace Event JSON (Perfetto).
//   dep_gen      deps.json             tasks, tensors and edges with their source.
//   scope_stats  scope_stats/scope_stats.jsonl   ring usage at scope begin/end.
//   dump_args    args_dump/manifest.json + args_dump/args.bin   each task's
//                arguments, inputs before and outputs after it ran.
//   pmu          pmu.csv               per-task counters (zeros on cpu).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"
#include "runtime/task.h"
#include "runtime/tensor_util.h"

namespace simpler {

class Device;

struct DiagOptions {
  int swimlane = 0;
  bool dump_args = false;
  int pmu = 0;
  bool dep_gen = false;
  bool scope_stats = false;
  std::string prefix;
  std::string platform;
  std::string runtime;
  std::string callable;  // the chip callable's func_name
};

struct DiagEdge {
  uint64_t pred;
  uint32_t arg;  // tensor argument of the consumer, or UINT32_MAX for add_dep
  uint8_t source;  // DepSource
  uint8_t overlap; // Overlap
};

struct ScopeSample {
  bool begin;
  uint64_t seq;
  uint32_t depth;
  int ring;
  uint64_t t_ns;
  uint64_t tasks, task_window, heap_used, heap, deps_used, dep_pool;
  uint64_t tensormap;
};

enum class SchedPhase : uint8_t { Idle = 0, Steal = 1, Complete = 2 };

class Diagnostics {
 public:
  Diagnostics(const DiagOptions& o, Device* dev, int cores);
  ~Diagnostics();
  const DiagOptions& options() const { return opt_; }
  bool any() const;
  bool wants_block_records() const { return opt_.swimlane > 0 || opt_.pmu > 0; }
  int swimlane() const { return opt_.swimlane; }

  // Orchestrating thread.
  void on_submit(const TaskSlot& t, const DiagEdge* edges, size_t n);
  void on_scope(const ScopeSample& s);
  void set_ring_capacities(const uint64_t window[4], const uint64_t heap[4], const uint64_t deps[4]);

  // Core threads. `core` indexes the executor's cores.
  void on_block(int core, const TaskSlot& t, uint32_t block, uint64_t t_dispatch, uint64_t t_start, uint64_t t_end);
  void on_sched(int core, SchedPhase phase, uint64_t t0, uint64_t t1);
  void before_task(const TaskSlot& t);  // dump_args: inputs
  void after_task(const TaskSlot& t);   // dump_args: outputs
  void on_finished(const TaskSlot& t);  // any thread; after the last block
  // Hardware counters of one task (cuda) and their names; tasks without any
  // read as zeros.
  void set_pmu(uint64_t task, const std::array<double, 8>& counters);
  void set_pmu_names(const std::vector<std::string>& names);

  // Writes every enabled file. `run_error` is noted in the files' metadata.
  Error write(const Error& run_error, uint64_t wall_ns);

 private:
  struct TaskRecord;
  struct BlockRecord;
  struct SchedRecord;
  struct DumpRecord;
  struct CoreLog;
  struct FinishRecord {
    uint64_t id;
    int32_t core;
    uint8_t state;
    uint64_t t_ready, t_start, t_end, t_finish;
  };
  void capture(const TaskSlot& t, bool before);

  DiagOptions opt_;
  Device* dev_;
  int cores_;
  std::vector<std::unique_ptr<CoreLog>> core_logs_;  // one per core + one shared (index cores_)
  std::mutex mu_;                                    // guards the shared log and the dump blob
  std::vector<TaskRecord> tasks_;                    // orchestrating thread only
  std::vector<ScopeSample> scopes_;
  uint64_t ring_window_[4] = {}, ring_heap_[4] = {}, ring_deps_[4] = {};
  std::vector<DumpRecord> dumps_;
  std::string blob_;
  std::vector<FinishRecord> finished_;
  std::unordered_map<uint64_t, std::array<double, 8>> pmu_;
  std::vector<std::string> pmu_names_;
};

}  // namespace simpler
