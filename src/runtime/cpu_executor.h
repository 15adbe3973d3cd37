// The cpu platform's executor: a persistent pool of core threads standing for
// the chip's cores. Each core has its own ready queue; the orchestrating
// thread deals ready tasks round-robin, a core runs the newest task of its
// own queue first and steals the oldest of another's when it runs dry. A
// core that finishes a task runs one newly ready consumer straight away
// (no queue round trip), which is what keeps a dependent chain cheap.
//
// A task of N blocks is claimed block by block: the core that takes block b
// puts the task back while blocks remain, so idle cores join in.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/diagnostics.h"
#include "runtime/engine.h"

namespace simpler {

class CpuExecutor final : public Executor {
 public:
  explicit CpuExecutor(int cores);
  ~CpuExecutor() override;

  int num_cores() const override { return int(cores_.size()); }
  void begin_run(Engine* engine, int cores, int sched_threads) override;
  void end_run() override;
  void push(TaskSlot* t) override;

 private:
  struct Core {
    std::mutex mu;
    std::deque<TaskSlot*> q;
    std::thread thread;
    std::mutex log_mu;  // scheduler phases (swimlane level 3), read at end_run
    struct Span {
      SchedPhase phase;
      uint64_t t0, t1;
    };
    std::vector<Span> spans;
  };
  static uint64_t clock_ns();
  void log_span(int index, SchedPhase phase, uint64_t t0, uint64_t t1);
  void loop(int index);
  TaskSlot* take(int index);
  void run(int index, TaskSlot* t);
  void push_to(int index, TaskSlot* t);

  std::vector<std::unique_ptr<Core>> cores_;
  std::atomic<Engine*> engine_{nullptr};
  std::atomic<int> active_{0};
  std::atomic<int64_t> queued_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> spinning_{0};  // idle cores still polling for work
  std::atomic<bool> stop_{false};
  std::atomic<uint32_t> rr_{0};
  std::atomic<bool> record_sched_{false};
  uint64_t run_t0_ = 0;
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;  // idle cores of the run's share (index < active_)
  std::condition_variable park_cv_;   // the other cores, until a run's share takes them in
};

// Core threads for the cpu platform: SIMPLER_CPU_CORES, else the hardware threads.
int default_cpu_cores();

}  // namespace simpler
