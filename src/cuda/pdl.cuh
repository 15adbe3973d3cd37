// Programmatic dependent launch (Hopper): a kernel launched with
// launch_pdl may be scheduled while the kernel before it on the stream is
// still running, so its launch latency and anything it does before
// pdl_wait() (address arithmetic, L2 prefetches of weights it alone reads)
// overlap the previous kernel's tail (the decode attention also loads its
// first KV-cache rows there: rows earlier steps wrote). A decode step is a
// chain of small dependent kernels in one CUDA graph (the 7B's: six a layer,
// about 200), where each boundary otherwise costs a drain and a ramp (~2-3 us
// on the H200).
//
// Contract for a kernel launched with launch_pdl: every CTA calls
// pdl_wait() before it reads anything the previous kernels wrote or writes
// anything they may read, and before it exits (so the kernel completes only
// after its predecessor: the next kernel's wait then covers the whole
// chain). pdl_trigger() lets the next kernel be scheduled once every CTA of
// this one has called it; without it that happens at completion. Both are
// no-ops on a kernel launched normally. TC_CUDA_PDL=0 (read at every
// launch: a recorded graph keeps what it was captured with) launches normally.
//
// Reading what the previous kernels wrote: the non-coherent path (__ldg,
// or a `const T* __restrict__` parameter, which the compiler may turn into
// ld.global.nc) promises only data that stays unchanged while the kernel
// is resident, and such loads are invariant to the compiler (free to move);
// a kernel launched early is resident while its predecessor writes. The
// one-row streaming product read stale X that way in the LLaMA step on the
// H200 (its f32 X, which the kernel before had just written; the op tests,
// one kernel at a time, passed): it now reads X from L2 with __ldcg (an
// asm volatile load: kept after the wait; no L1 line an earlier reader
// left), as the decode attention's combine reads its pieces, and takes X
// through plain pointers. Kernels that still read an earlier kernel's
// output through that path (quantize_q8's X, the warp-per-row products'
// 8-bit X) are covered by the model tests against the reference on a GPU;
// new code should not add more.
#pragma once

#include <cuda_runtime.h>

#include "core/config.h"

namespace tc {
namespace cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The 128-byte lines of [p, p + bytes) into L2 (one per lane step).
__device__ __forceinline__ void prefetch_l2(const void* p, int64_t bytes, int lane) {
  const char* c = static_cast<const char*>(p);
  for (int64_t o = int64_t(lane) * 128; o < bytes; o += 32 * 128)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(c + o));
}

inline bool pdl_enabled() { return config::on(config::Key::kCudaPdl); }

template <class... KArgs, class... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

}  // namespace cuda
}  // namespace tc
