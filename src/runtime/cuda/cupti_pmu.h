// Per-kernel hardware counters on cuda (enable_pmu) through CUPTI's range
// profiler, loaded at run time. Event type 1: execution (time, cycles,
// instructions, warps, DRAM and L2 bytes); 2: memory hierarchy and
// throughput (L1/L2 hit rates, DRAM and SM throughput, FP adds and FMAs).
#pragma once

#include <cuda.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace simpler {
namespace cuda {

const std::vector<std::string>& pmu_metric_names(int event_type);

struct PmuRange {
  std::string name;  // CUPTI's name of the range: in auto range mode its launch number ("0", "1", ...)
  std::array<double, 8> values{};
};

// Counts every kernel launched on `ctx` between open() and finish(); finish()
// returns one range per kernel, in launch order, or an error when CUPTI
// dropped ranges or did not complete every replay pass.
class PmuSession {
 public:
  PmuSession();
  ~PmuSession();
  Error open(CUcontext ctx, int device_index, int event_type, size_t max_ranges);
  Error finish(std::vector<PmuRange>* ranges);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuda
}  // namespace simpler
