// CallConfig rules (validate) and the ring sizes a run ends up with:
// per-call value > environment variable > built-in default.
#pragma once

#include <string>

#include "runtime/engine.h"
#include "runtime/error.h"
#include "simpler/simpler.h"

namespace simpler {

// A private copy of a caller's config (the prefix string included).
struct CallConfig {
  simpler_call_config c{};
  std::string output_prefix;
  bool any_diagnostic() const {
    return c.enable_chip_swimlane || c.enable_dump_args || c.enable_pmu || c.enable_dep_gen || c.enable_scope_stats;
  }
  bool any_ring_override() const;
};

// Copies a caller's config, filling defaults for a null pointer or an older,
// shorter struct.
Error copy_call_config(const simpler_call_config* in, CallConfig* out);
Error validate_call_config(const simpler_call_config& c);

// Ring sizes for a run: cfg > PTO2_RING_TASK_WINDOW / PTO2_RING_HEAP /
// PTO2_RING_DEP_POOL ("N" for every ring or "a,b,c,d") > defaults.
Error resolve_rings(const CallConfig& cfg, uint64_t default_heap, RingSizes out[kRings]);

}  // namespace simpler
