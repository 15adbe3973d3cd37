// The CUDA driver API, loaded at run time (dlopen of libcuda.so.1), so a
// library built with CUDA still loads on a machine without an NVIDIA driver;
// there the cuda platform reports that no driver was found.
#pragma once

#include <cuda.h>

#include "runtime/error.h"

namespace simpler {
namespace cuda {

// Each entry is the versioned symbol cuda.h maps the name to
// (cuMemAlloc -> cuMemAlloc_v2, ...), so calls read as usual: cu().cuMemAlloc(...).
#define SIMPLER_CU_FUNCTIONS(X)                                                                                    \
  X(cuInit) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxGetCurrent)             \
  X(cuCtxSetCurrent) X(cuGetErrorName) X(cuGetErrorString) X(cuStreamCreate) X(cuStreamDestroy)                    \
  X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery)  \
  X(cuEventElapsedTime) X(cuMemAlloc) X(cuMemFree) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemcpyHtoD)              \
  X(cuMemcpyHtoDAsync) X(cuLaunchKernel) X(cuModuleLoadData) X(cuModuleGetFunction) X(cuModuleUnload)              \
  X(cuPointerGetAttribute) X(cuGraphCreate) X(cuGraphDestroy) X(cuGraphAddKernelNode) X(cuGraphAddEmptyNode)       \
  X(cuGraphInstantiate) X(cuGraphExecDestroy) X(cuGraphLaunch)

struct Driver {
#define SIMPLER_CU_MEMBER(f) decltype(&::f) f = nullptr;
  SIMPLER_CU_FUNCTIONS(SIMPLER_CU_MEMBER)
#undef SIMPLER_CU_MEMBER
};

// The loaded driver, or null with the reason in *err.
const Driver* load_driver(Error* err);
// The loaded driver; only after load_driver succeeded.
const Driver& cu();

}  // namespace cuda
}  // namespace simpler
