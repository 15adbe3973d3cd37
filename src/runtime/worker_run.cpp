// How a Worker executes a run, on its orchestrating thread: host tensors
// staged in, the orchestration's own checks, the engine started, the
// orchestration called (or a recorded graph replayed), the tasks waited for,
// diagnostics written and outputs staged back.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "runtime/diagnostics.h"
#include "runtime/fault_guard.h"
#include "runtime/platform.h"
#include "runtime/switches.h"
#include "runtime/task_list.h"
#include "runtime/worker.h"

namespace simpler {

namespace {

constexpr size_t kMaxCachedGraphs = 16;

struct OrchCall {
  OrchEntry fn;
  const ChipTaskArgs* args;
};
void call_orchestration(void* p) {
  auto* c = static_cast<OrchCall*>(p);
  c->fn(*c->args);
}

struct ConfigCall {
  OrchConfigEntry fn;
  const ChipTaskArgs* args;
  PTO2OrchestrationConfig out;
};
void call_config(void* p) {
  auto* c = static_cast<ConfigCall*>(p);
  c->out = c->fn(*c->args);
}

}  // namespace

void Worker::loop() {
  for (;;) {
    std::shared_ptr<RunState> run;
    {
      std::unique_lock<std::mutex> lk(mu_);
      // busy_ without a run of ours: a caller executes one itself (Worker::run).
      queue_cv_.wait(lk, [&] { return stopping_ || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;
      run = queue_.front();
      queue_.pop_front();
      busy_ = true;
      current_ = run;
    }
    execute(*run);
    {
      std::lock_guard<std::mutex> lk(mu_);
      busy_ = false;
      current_.reset();
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }
}

void Worker::execute(RunState& run) {
  uint64_t wall = 0;
  Error e;
  try {
    e = execute_inner(run, &wall);
  } catch (const std::bad_alloc&) {
    e = make_error(TC_ERR_ALLOC, "run: out of host memory");
  } catch (const std::exception& ex) {
    e = make_error(TC_ERR_INTERNAL, "run: %s", ex.what());
  }
  release_staging(run);
  runs_++;
  run.complete(e);
}

std::string Worker::graph_key(const RunState& run) const {
  std::string key = std::to_string(run.chip->generation) + "|";
  key.append(reinterpret_cast<const char*>(run.tensors.data()), run.tensors.size() * sizeof(ChipTensor));
  key.append(reinterpret_cast<const char*>(run.scalars.data()), run.scalars.size() * sizeof(uint64_t));
  key.append(reinterpret_cast<const char*>(&run.cfg.c.block_dim), sizeof run.cfg.c.block_dim);
  key.append(reinterpret_cast<const char*>(&run.cfg.c.aicpu_thread_num), sizeof run.cfg.c.aicpu_thread_num);
  return key;
}

Error Worker::stage_in(RunState& run) {
  for (HostArg& h : run.host) {
    if (Error e = device_->alloc(h.bytes, true, &h.device); !e.ok()) return e;
    ChipTensor& t = run.tensors[h.index];
    t.buffer.addr = h.device;
    t.buffer.size = h.bytes;
    run.regions.push_back(Region{h.device, h.bytes});
    if (h.direction == SIMPLER_ARG_IN || h.direction == SIMPLER_ARG_INOUT) {
      if (Error e = device_->copy_in(h.device, reinterpret_cast<const void*>(h.host), h.bytes); !e.ok()) return e;
    } else if (h.direction == SIMPLER_ARG_OUT) {
      // Parts of an output the kernels leave alone keep the caller's values.
      if (Error e = device_->copy_in(h.device, reinterpret_cast<const void*>(h.host), h.bytes); !e.ok()) return e;
    }
  }
  std::sort(run.regions.begin(), run.regions.end(), [](const Region& x, const Region& y) { return x.base < y.base; });
  return {};
}

Error Worker::stage_out(RunState& run) {
  for (HostArg& h : run.host)
    if (h.direction == SIMPLER_ARG_OUT || h.direction == SIMPLER_ARG_INOUT)
      if (Error e = device_->copy_out(reinterpret_cast<void*>(h.host), h.device, h.bytes); !e.ok()) return e;
  return {};
}

void Worker::release_staging(RunState& run) {
  for (HostArg& h : run.host)
    if (h.device) device_->release(h.device, true), h.device = 0;
}

Error Worker::execute_inner(RunState& run, uint64_t* wall_ns) {
  const auto t_start = std::chrono::steady_clock::now();
  LoadedChip& chip = *run.chip;
  const Callable& c = *chip.callable;
  install_fault_handlers();  // again, in case someone replaced ours since

  if (Error e = executor_->health(); !e.ok()) return e;
  if (Error e = stage_in(run); !e.ok()) return e;
  ChipTaskArgs args{run.tensors.data(), run.scalars.data(), uint32_t(run.tensors.size()),
                    uint32_t(run.scalars.size())};

  // The orchestration's own expectations.
  if (chip.config) {
    ConfigCall call{chip.config, &args, {}};
    std::string what;
    if (!guarded_call(call_config, &call, &what))
      return make_error(TC_ERR_PIPELINE, "orchestration '%s': its config function failed: %s", c.func_name.c_str(),
                        what.c_str());
    const int32_t want = call.out.expected_arg_count;
    const int32_t have = int32_t(run.tensors.size() + run.scalars.size());
    if (want >= 0 && want != have)
      return make_error(TC_ERR_INVALID_ARG, "orchestration '%s' expects %d argument(s) (its %s_config), the call passes %d",
                        c.func_name.c_str(), want, c.func_name.c_str(), have);
  }

  RunSetup setup;
  setup.build = cfg_.build_graph;
  setup.kernels = &chip.table;
  setup.executor = executor_.get();
  setup.device = device_.get();
  setup.regions = run.regions;
  setup.cores = run.cfg.c.block_dim;
  setup.sched_threads = run.cfg.c.aicpu_thread_num;
  setup.heap_limit = cfg_.heap_ring_size;
  if (Error e = resolve_rings(run.cfg, cfg_.heap_ring_size, setup.rings); !e.ok()) return e;

  std::unique_ptr<Diagnostics> diag;
  if (run.cfg.any_diagnostic()) {
    DiagOptions o;
    o.swimlane = run.cfg.c.enable_chip_swimlane;
    o.dump_args = run.cfg.c.enable_dump_args != 0;
    o.pmu = run.cfg.c.enable_pmu;
    o.dep_gen = run.cfg.c.enable_dep_gen != 0;
    o.scope_stats = run.cfg.c.enable_scope_stats != 0;
    o.prefix = run.cfg.output_prefix;
    o.platform = platform_name(cfg_.platform);
    o.runtime = cfg_.build_graph ? "host_build_graph" : "tensormap_and_ringbuffer";
    o.callable = c.func_name;
    std::error_code ec;
    std::filesystem::create_directories(o.prefix, ec);
    if (ec)
      return make_error(TC_ERR_IO, "output_prefix '%s': cannot create the directory: %s", o.prefix.c_str(),
                        ec.message().c_str());
    diag = std::make_unique<Diagnostics>(o, device_.get(), executor_->num_cores());
    setup.diag = diag.get();
  }

  Engine& eng = *engine_;
  Error result;
  if (cfg_.build_graph) {
    // host_build_graph: record the graph once per (callable, arguments), replay it.
    const bool cacheable = !(diag && (diag->options().dep_gen || diag->options().scope_stats)) &&
                           read_switch("SIMPLER_HBG_CACHE").number;
    const std::string key = cacheable ? graph_key(run) : std::string();
    std::shared_ptr<Graph> graph, fresh;
    if (cacheable) {
      std::lock_guard<std::mutex> gl(graphs_mu_);
      for (auto it = graphs_.begin(); it != graphs_.end(); ++it)
        if (it->first == key) {
          graphs_.splice(graphs_.begin(), graphs_, it);  // most recent first
          graph = graphs_.front().second;
          break;
        }
    }
    if (graph) {
      if (Error e = eng.begin(setup, graph.get()); !e.ok()) return e;
      eng.end_orchestration();
      eng.run_graph(*graph, true);
      result = eng.finish();
      graph_replays_++;
    } else {
      fresh = std::make_shared<Graph>();
      if (Error e = eng.begin(setup, fresh.get()); !e.ok()) return e;
      set_current_engine(&eng);
      set_current_task_list(chip.task_list);
      OrchCall call{chip.entry, &args};
      std::string what;
      if (!guarded_call(call_orchestration, &call, &what))
        eng.report_fatal(make_error(TC_ERR_PIPELINE, "orchestration '%s' failed: %s", c.func_name.c_str(), what.c_str()));
      set_current_task_list(nullptr);
      set_current_engine(nullptr);
      eng.end_orchestration();
      eng.run_graph(*fresh, false);
      result = eng.finish();
      graph_builds_++;
      if (result.ok() && cacheable) {
        std::lock_guard<std::mutex> gl(graphs_mu_);
        graphs_.emplace_front(key, std::move(fresh));
        while (graphs_.size() > kMaxCachedGraphs) graphs_.pop_back();
      }
    }
  } else {
    if (Error e = eng.begin(setup); !e.ok()) return e;
    set_current_engine(&eng);
    set_current_task_list(chip.task_list);
    OrchCall call{chip.entry, &args};
    std::string what;
    if (!guarded_call(call_orchestration, &call, &what))
      eng.report_fatal(make_error(TC_ERR_PIPELINE, "orchestration '%s' failed: %s", c.func_name.c_str(), what.c_str()));
    set_current_task_list(nullptr);
    set_current_engine(nullptr);
    eng.end_orchestration();
    result = eng.finish();
  }
  *wall_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t_start)
                          .count());
  if (diag) {
    Error w = diag->write(result, *wall_ns);
    if (result.ok() && !w.ok()) result = w;
  }
  if (result.ok())
    if (Error e = stage_out(run); !e.ok()) return e;
  return result;
}

}  // namespace simpler
