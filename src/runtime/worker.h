// A Worker at level 2: one device, its executor and engine, the callables
// registered with it, and a thread that executes submitted runs in order
// (staging host tensors, running the orchestration, waiting for the tasks,
// writing diagnostics).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/callable.h"
#include "runtime/config.h"
#include "runtime/device.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "simpler/simpler.h"

namespace simpler {

struct WorkerConfig {
  int level = 2;
  Platform platform = Platform::Cpu;
  bool build_graph = false;  // runtime "host_build_graph"
  int device_id = 0;
  int num_cores = 0;
  uint64_t heap_ring_size = kDefaultHeap;
};

// Checks a C config and translates it.
Error parse_worker_config(const simpler_worker_config* in, WorkerConfig* out);

// A registered ChipCallable, loaded on the worker's device.
struct LoadedChip {
  CallablePtr callable;
  int registrations = 0;
  bool loaded = false;
  uint64_t generation = 0;
  OrchEntry entry = nullptr;
  OrchConfigEntry config = nullptr;
  const struct TaskList* task_list = nullptr;  // a built-in orchestration's program
  std::vector<std::unique_ptr<KernelRef>> kernels;
  KernelTable table;
  std::vector<std::shared_ptr<void>> keep;  // shared objects, CUDA modules
};

struct HostArg {
  uint32_t index;      // tensor argument
  uint64_t host;       // caller's host address of the first byte the view touches
  uint64_t bytes;      // the bytes it can touch (staged in and back)
  int32_t direction;   // SIMPLER_ARG_*
  uint64_t device = 0; // staging allocation (cuda)
};

struct RunState {
  std::shared_ptr<LoadedChip> chip;
  CallConfig cfg;
  std::vector<ChipTensor> tensors;
  std::vector<uint64_t> scalars;
  std::vector<HostArg> host;
  std::vector<Region> regions;
  std::vector<uint64_t> bases;  // worker allocations the arguments name (free() refuses them)

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Error error;
  void complete(const Error& e);
};

class Worker {
 public:
  explicit Worker(const WorkerConfig& cfg);
  ~Worker();

  const WorkerConfig& config() const { return cfg_; }
  bool initialized() const { return initialized_; }
  bool closed() const { return closed_; }
  int num_cores() const;
  uint64_t runs() const { return runs_.load(); }
  uint64_t graph_builds() const { return graph_builds_.load(); }
  uint64_t graph_replays() const { return graph_replays_.load(); }
  std::string device_name() const;

  Error init();
  Error close();

  Error malloc(uint64_t nbytes, uint64_t* out);
  Error free(uint64_t ptr);
  Error copy_to(uint64_t dst, const void* src, uint64_t nbytes);
  Error copy_from(void* dst, uint64_t src, uint64_t nbytes);

  Error register_callable(const CallablePtr& chip, int32_t* slot);
  Error unregister(int32_t slot);

  Error submit(int32_t slot, const simpler_task_args& args, const simpler_call_config* cfg,
               std::shared_ptr<RunState>* out);
  // submit + wait in one: an idle Worker executes the run on the calling thread.
  Error run(int32_t slot, const simpler_task_args& args, const simpler_call_config* cfg);

 private:
  Error prepare(int32_t slot, const simpler_task_args& args, const simpler_call_config* cfg,
                std::shared_ptr<RunState>* out);
  Error load(LoadedChip& chip);
  Error check_usable(const char* what) const;
  Error bind_args(const LoadedChip& chip, const simpler_task_args& args, RunState* run);
  void loop();
  void execute(RunState& run);
  Error execute_inner(RunState& run, uint64_t* wall_ns);
  Error stage_in(RunState& run);
  Error stage_out(RunState& run);
  void release_staging(RunState& run);
  std::string graph_key(const RunState& run) const;

  WorkerConfig cfg_;
  bool initialized_ = false;
  bool closed_ = false;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Engine> engine_;

  std::mutex mu_;  // registry, queue, state
  std::shared_ptr<LoadedChip> slots_[SIMPLER_MAX_CALLABLES];
  uint64_t generation_ = 0;
  std::deque<std::shared_ptr<RunState>> queue_;
  std::condition_variable queue_cv_, idle_cv_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;
  std::shared_ptr<RunState> current_;  // the run executing now
  std::atomic<uint64_t> runs_{0}, graph_builds_{0}, graph_replays_{0};

  // host_build_graph: recorded graphs by callable and arguments. A run holds
  // its graph's reference, so unregister can drop it from here meanwhile.
  std::mutex graphs_mu_;
  std::list<std::pair<std::string, std::shared_ptr<Graph>>> graphs_;
};

}  // namespace simpler
