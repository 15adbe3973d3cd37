#include "core/trace.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tensorcore/diagnostics.h"

namespace tc {
namespace trace {

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TC_TRACE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

void emit(const OpInfo& info, tc_status status, tc_backend backend, double micros) {
  static std::mutex mu;  // keep lines from concurrent streams whole
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[tensorcore] op=%s shapes=%s status=%d(%s) backend=%s us=%.1f\n", info.name,
               info.shapes.c_str(), status, tc_status_string(status), tc_backend_name(backend), micros);
}

}  // namespace trace
}  // namespace tc
