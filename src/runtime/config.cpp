#include "runtime/config.h"

#include <cstdlib>
#include <cstring>

#include "runtime/switches.h"

namespace simpler {

namespace {

bool pow2(uint64_t v) { return v && !(v & (v - 1)); }

constexpr uint64_t kMaxWindow = 1ull << 24;
constexpr uint64_t kMaxDepPool = 1ull << 28;

Error check_ring(const char* name, int i, uint64_t v) {
  if (v == 0) return {};
  if (!std::strcmp(name, "ring_task_window") && (!pow2(v) || v < 4 || v > kMaxWindow))
    return make_error(TC_ERR_INVALID_ARG, "runtime_env.ring_task_window[%d] = %llu: must be a power of two in [4, %llu]",
                      i, (unsigned long long)v, (unsigned long long)kMaxWindow);
  if (!std::strcmp(name, "ring_heap") && v < kHeapAlign)
    return make_error(TC_ERR_INVALID_ARG, "runtime_env.ring_heap[%d] = %llu: must be at least %llu bytes", i,
                      (unsigned long long)v, (unsigned long long)kHeapAlign);
  if (!std::strcmp(name, "ring_dep_pool") && (v < 4 || v > kMaxDepPool))
    return make_error(TC_ERR_INVALID_ARG, "runtime_env.ring_dep_pool[%d] = %llu: must be in [4, %llu]", i,
                      (unsigned long long)v, (unsigned long long)kMaxDepPool);
  return {};
}

// "N" or "a,b,c,d" -> four values.
Error parse_env(const char* var, const char* name, uint64_t out[kRings], bool* set) {
  *set = false;
  const Switch sw = read_switch(var);
  if (sw.text.empty()) return {};
  const char* text = sw.text.c_str();
  uint64_t v[kRings];
  int n = 0;
  const char* p = text;
  while (*p) {
    char* end = nullptr;
    unsigned long long x = std::strtoull(p, &end, 10);
    if (end == p || n == kRings)
      return make_error(TC_ERR_INVALID_ARG, "%s='%s': expected a number or four comma-separated numbers", var, text);
    v[n++] = x;
    p = end;
    if (*p == ',') p++;
    else if (*p) return make_error(TC_ERR_INVALID_ARG, "%s='%s': expected a number or four comma-separated numbers", var, text);
  }
  if (n != 1 && n != kRings)
    return make_error(TC_ERR_INVALID_ARG, "%s='%s': expected a number or four comma-separated numbers", var, text);
  for (int i = 0; i < kRings; i++) {
    out[i] = n == 1 ? v[0] : v[i];
    if (Error e = check_ring(name, i, out[i]); !e.ok()) return make_error(e.status, "%s: %s", var, e.message.c_str());
  }
  *set = true;
  return {};
}

}  // namespace

bool CallConfig::any_ring_override() const {
  for (int i = 0; i < kRings; i++)
    if (c.ring_task_window[i] || c.ring_heap[i] || c.ring_dep_pool[i]) return true;
  return false;
}

Error copy_call_config(const simpler_call_config* in, CallConfig* out) {
  std::memset(&out->c, 0, sizeof out->c);
  out->c.struct_size = sizeof out->c;
  out->output_prefix.clear();
  if (!in) return {};
  if (in->struct_size < offsetof(simpler_call_config, ring_task_window) || in->struct_size > sizeof(simpler_call_config))
    return make_error(TC_ERR_INVALID_ARG, "call config: struct_size %u is not a simpler_call_config size (%zu)",
                      in->struct_size, sizeof(simpler_call_config));
  std::memcpy(&out->c, in, in->struct_size);
  out->c.struct_size = sizeof out->c;
  if (in->output_prefix) out->output_prefix = in->output_prefix;
  out->c.output_prefix = nullptr;  // use output_prefix (owned)
  return {};
}

Error validate_call_config(const simpler_call_config& c) {
  if (c.aicpu_thread_num < 0 || c.aicpu_thread_num > 1024)
    return make_error(TC_ERR_INVALID_ARG, "aicpu_thread_num = %d: must be in [0, 1024] (0 = platform default)",
                      c.aicpu_thread_num);
  if (c.block_dim < 0) return make_error(TC_ERR_INVALID_ARG, "block_dim = %d: must be >= 0 (0 = all cores)", c.block_dim);
  if (c.enable_chip_swimlane < 0 || c.enable_chip_swimlane > 4)
    return make_error(TC_ERR_INVALID_ARG, "enable_chip_swimlane = %d: must be 0 (off) to 4", c.enable_chip_swimlane);
  if (c.enable_dump_args < 0 || c.enable_dump_args > 1)
    return make_error(TC_ERR_INVALID_ARG, "enable_dump_args = %d: must be 0 or 1", c.enable_dump_args);
  if (c.enable_pmu < 0 || c.enable_pmu > 2)
    return make_error(TC_ERR_INVALID_ARG, "enable_pmu = %d: 0 (off), 1 (execution counters) or 2 (memory counters)",
                      c.enable_pmu);
  if (c.enable_dep_gen < 0 || c.enable_dep_gen > 1)
    return make_error(TC_ERR_INVALID_ARG, "enable_dep_gen = %d: must be 0 or 1", c.enable_dep_gen);
  if (c.enable_scope_stats < 0 || c.enable_scope_stats > 1)
    return make_error(TC_ERR_INVALID_ARG, "enable_scope_stats = %d: must be 0 or 1", c.enable_scope_stats);
  const bool diag = c.enable_chip_swimlane || c.enable_dump_args || c.enable_pmu || c.enable_dep_gen ||
                    c.enable_scope_stats;
  if (diag && (!c.output_prefix || !*c.output_prefix)) {
    const char* which = c.enable_chip_swimlane ? "enable_chip_swimlane"
                        : c.enable_dump_args   ? "enable_dump_args"
                        : c.enable_pmu         ? "enable_pmu"
                        : c.enable_dep_gen     ? "enable_dep_gen"
                                               : "enable_scope_stats";
    return make_error(TC_ERR_INVALID_ARG, "%s is on but output_prefix is empty: diagnostics need a directory to write to",
                      which);
  }
  for (int i = 0; i < kRings; i++) {
    if (Error e = check_ring("ring_task_window", i, c.ring_task_window[i]); !e.ok()) return e;
    if (Error e = check_ring("ring_heap", i, c.ring_heap[i]); !e.ok()) return e;
    if (Error e = check_ring("ring_dep_pool", i, c.ring_dep_pool[i]); !e.ok()) return e;
  }
  return {};
}

Error resolve_rings(const CallConfig& cfg, uint64_t default_heap, RingSizes out[kRings]) {
  uint64_t env_w[kRings], env_h[kRings], env_d[kRings];
  bool has_w, has_h, has_d;
  if (Error e = parse_env("PTO2_RING_TASK_WINDOW", "ring_task_window", env_w, &has_w); !e.ok()) return e;
  if (Error e = parse_env("PTO2_RING_HEAP", "ring_heap", env_h, &has_h); !e.ok()) return e;
  if (Error e = parse_env("PTO2_RING_DEP_POOL", "ring_dep_pool", env_d, &has_d); !e.ok()) return e;
  for (int i = 0; i < kRings; i++) {
    out[i].task_window = cfg.c.ring_task_window[i]   ? cfg.c.ring_task_window[i]
                         : has_w && env_w[i]        ? env_w[i]
                                                    : kDefaultTaskWindow;
    out[i].heap = cfg.c.ring_heap[i] ? cfg.c.ring_heap[i] : has_h && env_h[i] ? env_h[i] : default_heap;
    out[i].dep_pool = cfg.c.ring_dep_pool[i] ? cfg.c.ring_dep_pool[i] : has_d && env_d[i] ? env_d[i] : kDefaultDepPool;
  }
  return {};
}

}  // namespace simpler
