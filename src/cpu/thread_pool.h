// A persistent pool of worker threads for the CPU kernels. parallel_for splits
// [0, n) into chunks that the workers and the calling thread take in turn.
// Size: TC_NUM_THREADS, else the number of hardware threads.
#pragma once

#include <cstdint>
#include <functional>

namespace tc {
namespace cpu {

int num_threads();

// Calls fn(begin, end) over disjoint chunks covering [0, n), each at least
// `grain` wide except the last. Runs inline when n is small,
// when there is one thread, or when called from inside a pool worker.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Whether CPU work called from this thread stays on it (tc_cpu_run_inline):
// no pool fan-out, and no BLAS with threads of its own.
bool runs_inline();
void set_run_inline(bool on);

// Calls fn(t, nthreads) once on each of `nthreads` participants (the caller is
// participant 0); for kernels that partition work themselves.
void parallel_run(const std::function<void(int, int)>& fn);
// The same with at most `most` participants: fn(t, n) with n = min(most,
// threads); with one it runs on the caller alone and wakes no worker (a
// decode step's attention over one kv head is one task).
void parallel_run(int most, const std::function<void(int, int)>& fn);

}  // namespace cpu
}  // namespace tc
