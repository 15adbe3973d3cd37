#include "core/trace.h"

#include <cstdio>
#include <mutex>

#include "core/config.h"
#include "tensorcore/diagnostics.h"

namespace tc {
namespace trace {

bool enabled() {
  static const bool on = config::on(config::Key::kTrace);
  return on;
}

void emit(const OpInfo& info, tc_status status, tc_backend backend, double micros) {
  static std::mutex mu;  // keep lines from concurrent streams whole
  std::lock_guard<std::mutex> lock(mu);
  // The settings first, so that a trace says what produced it.
  static bool settings_shown = false;
  if (!settings_shown) {
    settings_shown = true;
    std::fprintf(stderr, "[tensorcore] settings:\n%s", config::describe().c_str());
  }
  std::fprintf(stderr, "[tensorcore] op=%s shapes=%s status=%d(%s) backend=%s us=%.1f\n", info.name,
               info.shapes.c_str(), status, tc_status_string(status), tc_backend_name(backend), micros);
}

}  // namespace trace
}  // namespace tc
