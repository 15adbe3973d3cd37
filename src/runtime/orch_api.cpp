// The table of function pointers an orchestration calls through
// (SimplerOrchOps in orchestration.h). Each entry forwards to the engine the
// calling thread is orchestrating for.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/engine.h"
#include "runtime/kernel_ref.h"
#include "runtime/switches.h"

namespace simpler {
namespace {

void op_submit(int32_t func_id, int32_t core_type, const SimplerCoreArgs* a, TaskOutputTensors* out) {
  Engine* e = current_engine();
  if (!e || !a || !out) return;
  e->submit(func_id, core_type, *a, out);
}

void op_scope_begin(int32_t mode) {
  if (Engine* e = current_engine()) e->scope_begin(mode);
}

void op_scope_end() {
  if (Engine* e = current_engine()) e->scope_end();
}

int32_t op_is_fatal() {
  Engine* e = current_engine();
  return !e || e->fatal();
}

void op_report_fatal(int32_t code, const char* func, const char* message) {
  Engine* e = current_engine();
  if (!e) return;
  // Codes of the tensorcore status table keep their meaning; others (the
  // original's PTO2_ERROR_* numbers) report as a pipeline failure.
  tc_status st = code <= TC_ERR_NOT_INITIALIZED && code >= TC_ERR_UNSUPPORTED ? code : TC_ERR_PIPELINE;
  e->report_fatal(Error{st, format("the orchestration reported an error in %s: %s", func ? func : "?",
                                   message ? message : "")});
}

int log_threshold() {
  static int level = [] {
    // The registry's order (error|warn|info|debug) is the levels' order.
    static_assert(SIMPLER_LOG_ERROR == 0 && SIMPLER_LOG_WARN == 1 && SIMPLER_LOG_INFO == 2 && SIMPLER_LOG_DEBUG == 3,
                  "log levels");
    return int(read_switch("SIMPLER_LOG_LEVEL").number);
  }();
  return level;
}

void op_log(int32_t level, const char* func, const char* message) {
  if (level > log_threshold()) return;
  static const char* names[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "[simpler orchestration %s] %s: %s\n", level >= 0 && level <= 3 ? names[level] : "log",
               func ? func : "?", message ? message : "");
}

const SimplerOrchOps kOps = {sizeof(SimplerOrchOps), op_submit,       op_scope_begin, op_scope_end,
                             op_is_fatal,            op_report_fatal, op_log};

}  // namespace

const SimplerOrchOps* orch_ops_table() { return &kOps; }

}  // namespace simpler

// The runtime's own copies of the weak pointers from orchestration.h and
// kernel.h. A user object loaded so that its references bind to these
// (rather than to its own copies) must still find them filled in.
namespace {
const SimplerLaunch* runtime_current_launch() { return simpler::current_launch(); }
struct FillWeakPointers {
  FillWeakPointers() {
    simpler_orch_ops = simpler::orch_ops_table();
    simpler_current_launch = runtime_current_launch;
  }
} fill_weak_pointers;
}  // namespace
