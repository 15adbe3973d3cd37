// TC_TRACE=1: one line per op on stderr with its shapes, status, backend and
// microseconds, after the resolved settings (config::describe) once.
// Backends wrap the execution of every op in trace::run.
#pragma once

#include <chrono>
#include <functional>

#include "core/backend.h"

namespace tc {
namespace trace {

bool enabled();
void emit(const OpInfo& info, tc_status status, tc_backend backend, double micros);

// Runs `fn` (returning a tc_status) and traces it when tracing is on.
template <class F>
tc_status run(const OpInfo& info, tc_backend backend, F&& fn) {
  if (!enabled()) return fn();
  auto t0 = std::chrono::steady_clock::now();
  tc_status st = fn();
  auto t1 = std::chrono::steady_clock::now();
  emit(info, st, backend, std::chrono::duration<double, std::micro>(t1 - t0).count());
  return st;
}

}  // namespace trace
}  // namespace tc
