// A hand-built CUDA Graph of n empty kernels in a dependent chain: the
// baseline host_build_graph replays are compared with.
//
//   cuda_graph_baseline KERNEL.cubin N REPEATS     prints "replay <seconds>" per repeat
#include <cuda.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#define CHECK(x)                                                      \
  do {                                                                \
    CUresult r_ = (x);                                                \
    if (r_ != CUDA_SUCCESS) {                                         \
      const char* s_ = nullptr;                                       \
      cuGetErrorName(r_, &s_);                                        \
      std::fprintf(stderr, "%s failed: %s\n", #x, s_ ? s_ : "?");    \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s KERNEL.cubin N REPEATS\n", argv[0]);
    return 2;
  }
  std::ifstream f(argv[1], std::ios::binary);
  std::string cubin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const long n = std::atol(argv[2]);
  const int reps = std::atoi(argv[3]);
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoadData(&mod, cubin.data()));
  CUfunction fn;
  CHECK(cuModuleGetFunction(&fn, mod, "kernel_entry"));
  CUdeviceptr args;  // one argument block, as the runtime gives each task
  CHECK(cuMemAlloc(&args, 256));
  CHECK(cuMemsetD8(args, 0, 256));
  CUgraph g;
  CHECK(cuGraphCreate(&g, 0));
  CUgraphNode prev = nullptr;
  for (long i = 0; i < n; i++) {
    void* params[] = {&args};
    CUDA_KERNEL_NODE_PARAMS kp = {};
    kp.func = fn;
    kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 256, kp.blockDimY = kp.blockDimZ = 1;
    kp.kernelParams = params;
    CUgraphNode node;
    CHECK(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &kp));
    prev = node;
  }
  CUgraphExec exec;
  CHECK(cuGraphInstantiate(&exec, g, 0));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuGraphLaunch(exec, s));  // warm-up
  CHECK(cuStreamSynchronize(s));
  for (int r = 0; r < reps; r++) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cuGraphLaunch(exec, s));
    CHECK(cuStreamSynchronize(s));
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("replay %.6f\n", sec);
  }
  return 0;
}
