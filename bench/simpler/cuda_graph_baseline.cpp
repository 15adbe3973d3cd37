// A hand-built CUDA Graph of n empty kernels in a dependent chain: the
// baseline host_build_graph replays are compared with. Built twice: every
// node passed the same argument block ("replay"), and each node its own
// block 256 bytes apart in one allocation, as the runtime's recorded graphs
// do ("replay_distinct"), to tell whether that alone costs per node. The
// second graph is also replayed the way the runtime waits for it
// ("replay_watched"): an event recorded after the launch, polled by another
// thread (yield 200 times, then every 20 us, as the CUDA executor's
// completion watcher), which wakes the launching thread by a condition
// variable. Then the same graph after three histories of 400 launches,
// each waiting on the one before through an event, on other streams
// destroyed afterwards: kernels on one stream ("replay_after_one_stream"),
// 16-node graphs on four ("replay_after_stream_graphs"), and kernels on four
// ("replay_after_streams", as the dynamic runtime's executor launches). The
// driver makes every later graph launch of the context slower once kernels
// were launched on two or more of its streams (bench/results/simpler.md,
// 2026-12-04): these lines show which history does it.
//
//   cuda_graph_baseline KERNEL.cubin N REPEATS     prints "<name> <seconds>" per repeat for
//                                                   replay, replay_distinct, replay_watched,
//                                                   replay_after_one_stream,
//                                                   replay_after_stream_graphs, replay_after_streams
#include <cuda.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
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
  // One argument block a node (256-byte stride, as the runtime lays them out);
  // the shared graph passes the first to every node.
  CUdeviceptr args;
  CHECK(cuMemAlloc(&args, size_t(n) * 256));
  CHECK(cuMemsetD8(args, 0, size_t(n) * 256));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  // A chain of `nodes` empty kernels, instantiated; node i is passed the
  // argument block at args + i * stride (stride 0: all the same block).
  auto chain = [&](long nodes, CUdeviceptr stride, CUgraphExec* exec) -> int {
    CUgraph g;
    CHECK(cuGraphCreate(&g, 0));
    CUgraphNode prev = nullptr;
    for (long i = 0; i < nodes; i++) {
      CUdeviceptr a = args + CUdeviceptr(i) * stride;
      void* params[] = {&a};
      CUDA_KERNEL_NODE_PARAMS kp = {};
      kp.func = fn;
      kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
      kp.blockDimX = 256, kp.blockDimY = kp.blockDimZ = 1;
      kp.kernelParams = params;
      CUgraphNode node;
      CHECK(cuGraphAddKernelNode(&node, g, prev ? &prev : nullptr, prev ? 1 : 0, &kp));
      prev = node;
    }
    CHECK(cuGraphInstantiate(exec, g, 0));
    CHECK(cuGraphDestroy(g));  // the exec is independent of it
    return 0;
  };
  // 400 launches on `nstreams` other streams, each waiting on the one before
  // through an event: kernels (cuLaunchKernel), or a 16-node chain graph a
  // launch; the streams are destroyed afterwards.
  auto history = [&](int nstreams, bool graphs) -> int {
    CUgraphExec seg = nullptr;
    if (graphs && chain(16, 0, &seg)) return 1;
    std::vector<CUstream> other(size_t(nstreams), nullptr);
    CUevent hop;
    CHECK(cuEventCreate(&hop, CU_EVENT_DISABLE_TIMING));
    for (CUstream& o : other) CHECK(cuStreamCreate(&o, CU_STREAM_NON_BLOCKING));
    for (int k = 0; k < 400; k++) {
      CUstream o = other[size_t(k % nstreams)];
      if (k > 0) CHECK(cuStreamWaitEvent(o, hop, 0));
      if (graphs) {
        CHECK(cuGraphLaunch(seg, o));
      } else {
        void* params[] = {&args};
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 256, 1, 1, 0, o, params, nullptr));
      }
      CHECK(cuEventRecord(hop, o));
    }
    CHECK(cuCtxSynchronize());
    for (CUstream o : other) CHECK(cuStreamDestroy(o));
    CHECK(cuEventDestroy(hop));
    if (seg) CHECK(cuGraphExecDestroy(seg));
    return 0;
  };
  for (int distinct = 0; distinct < 2; distinct++) {
    CUgraphExec exec;
    if (chain(n, distinct ? 256 : 0, &exec)) return 1;
    // `reps` timed replays, launch to synchronised, printed as "name seconds".
    auto timed_replays = [&](const char* name) -> int {
      for (int r = 0; r < reps; r++) {
        auto t0 = std::chrono::steady_clock::now();
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuStreamSynchronize(s));
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s %.6f\n", name, sec);
      }
      return 0;
    };
    CHECK(cuGraphLaunch(exec, s));  // warm-up
    CHECK(cuStreamSynchronize(s));
    if (timed_replays(distinct ? "replay_distinct" : "replay")) return 1;
    if (distinct) {
      CUevent done;
      CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
      for (int r = 0; r < reps; r++) {
        std::mutex mu;
        std::condition_variable cv;
        bool finished = false;
        auto t0 = std::chrono::steady_clock::now();
        CHECK(cuGraphLaunch(exec, s));
        CHECK(cuEventRecord(done, s));
        std::thread watcher([&] {
          cuCtxSetCurrent(ctx);
          for (int idle = 0; cuEventQuery(done) == CUDA_ERROR_NOT_READY;)
            if (++idle < 200) std::this_thread::yield();
            else std::this_thread::sleep_for(std::chrono::microseconds(20));
          std::lock_guard<std::mutex> lk(mu);
          finished = true;
          cv.notify_all();
        });
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return finished; });
        }
        double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        watcher.join();
        std::printf("replay_watched %.6f\n", sec);
      }
      CHECK(cuEventDestroy(done));
      // Histories, mildest first: the driver's slowdown lasts as long as the
      // context, so the one that causes it runs last.
      if (history(1, false)) return 1;
      if (timed_replays("replay_after_one_stream")) return 1;
      if (history(4, true)) return 1;
      if (timed_replays("replay_after_stream_graphs")) return 1;
      if (history(4, false)) return 1;
      if (timed_replays("replay_after_streams")) return 1;
    }
    CHECK(cuGraphExecDestroy(exec));
  }
  return 0;
}
