// What a one-token decode step's reads cost on this GPU when reading is all
// the kernels do: the ceiling of a step made of one kernel per product.
//
// The step of a model is a chain of kernels, each reading its part (a
// product's weights, the attention's KV rows, an activation's quantisation)
// once, the next depending on the one before. A kernel of a few MB spends
// a large share of its time ramping up and draining, so the chain of plain
// reads of the step's sizes is slower than one read of all its bytes. Here
// every part is one kernel that reads its bytes (16-byte loads, four in
// flight a thread, a grid of 2 CTAs of 512 threads an SM, as the streaming
// products, each CTA holding --smem KiB of shared memory, by default as much as
// keeps a third CTA off the SM: the products' registers do so) and XORs them into a word it writes only if it is a value that
// never comes up (so that the loads stay), in one CUDA graph replayed:
//
//   serial   each kernel starts when the one before has finished;
//   pdl      programmatic launch, as the step runs: each kernel is scheduled
//            while the one before runs and reads `--early` KiB a CTA (a
//            product's first ring stages) before griddepcontrol.wait;
//   overlap  programmatic launch with the wait after all the reads: how far
//            kernels whose reads do not depend on each other overlap (the
//            bound of prefetching weights across kernel boundaries);
//   ahead    pdl, and each CTA, once its own loads are done, prefetches its
//            share of the next part's first `--ahead` MB into L2 (the drain
//            of one kernel filled with the ramp of the next);
//   ring     pdl, each kernel moving its part as the streaming products do
//            (gemv_q8_stream.cu): tiles of --tile KiB bulk-copied into a
//            ring of --stages stages of shared memory on mbarriers, the first
//            stages issued before the wait, every thread reading the tile
//            from shared memory, then a CTA barrier, then the refill; the
//            products' data movement without their arithmetic;
//   one      one kernel reading the step's bytes: the copy ceiling.
//
// Usage: decode_read_chain [--layers 32] [--parts qkv:28311552,attn:9437184,...]
//                          [--tail 73728000] [--early 64] [--smem 100] [--ahead 8] [--reps 20]
//                          [--tile 36] [--stages 2]
// The default parts are the 7B Q4_0 step (bench/llama_cuda.py's "7b" shape,
// f16 KV cache at 576 positions): per layer [q; k; v] 28.3 MB, the decode
// attention 9.4 MB, wo 9.4 MB, [gate; up] 50.7 MB, quantize_q8 of the
// down product's input (44 KB), down 25.4 MB; then the output matrix 73.7 MB.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/bulk_copy.cuh"
#include "cuda/pdl.cuh"

namespace bulk = tc::cuda::bulk;
using tc::cuda::pdl_trigger;
using tc::cuda::pdl_wait;

namespace {

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

constexpr int kThreads = 512, kUnroll = 4;
constexpr unsigned kNever = 0x9e3779b9u;  // never the XOR of words of the 0x5a fill

// Reads n16 16-byte words at p; the first `early` grid-stride rounds before
// griddepcontrol.wait (all of them when early < 0). Then this CTA's share
// of [next, next + next_bytes) into L2.
__global__ void __launch_bounds__(kThreads)
    read_part(const uint4* p, int64_t n16, int64_t early, unsigned* sink, const char* next, int64_t next_bytes) {
  pdl_trigger();
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  unsigned acc = 0;
  bool waited = false;
  int64_t round = 0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n16; i += kUnroll * stride, round += kUnroll) {
    if (!waited && early >= 0 && round >= early) {
      pdl_wait();
      waited = true;
    }
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + u * stride;
      v[u] = j < n16 ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (!waited) pdl_wait();
  if (acc == kNever) sink[0] = acc;
  const int64_t share = (next_bytes / 128 + gridDim.x - 1) / gridDim.x;
  for (int64_t line = blockIdx.x * share + threadIdx.x; line < (blockIdx.x + 1) * share && line < next_bytes / 128;
       line += kThreads)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(next + line * 128));
}

// ---- the ring mode: bulk copies into shared memory on mbarriers (sm_90) ----

// Tiles of tile_bytes (a multiple of 16; the last one shorter) of [p, p +
// bytes): CTA c takes tiles c, c + grid, ...; tile i lands in stage i % stages.
__global__ void __launch_bounds__(kThreads)
    ring_part(const uint8_t* p, int64_t bytes, int64_t tile_bytes, int stages, unsigned* sink) {
#if __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[8];
  pdl_trigger();
  const int64_t tiles = (bytes + tile_bytes - 1) / tile_bytes;
  const int64_t mine = tiles > int64_t(blockIdx.x) ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) bulk::bar_init(&full[s]);
    bulk::fence_proxy_async();
  }
  __syncthreads();
  const uint64_t policy = bulk::evict_first();  // as the products read W
  auto issue = [&](int64_t i) {
    const int64_t at = (int64_t(blockIdx.x) + i * gridDim.x) * tile_bytes;
    const uint32_t n = uint32_t(min(tile_bytes, bytes - at));
    uint64_t* bar = &full[i % stages];
    bulk::bar_expect(bar, n);
    bulk::copy(smem + (i % stages) * tile_bytes, p + at, n, bar, policy);
  };
  if (threadIdx.x == 0)
    for (int64_t i = 0; i < mine && i < stages; ++i) issue(i);
  pdl_wait();
  unsigned acc = 0;
  for (int64_t i = 0; i < mine; ++i) {
    const int s = int(i % stages);
    bulk::bar_wait(&full[s], uint32_t((i / stages) & 1));
    const int64_t at = (int64_t(blockIdx.x) + i * gridDim.x) * tile_bytes;
    const int64_t n16 = min(tile_bytes, bytes - at) / 16;
    const uint4* st = reinterpret_cast<const uint4*>(smem + s * tile_bytes);
    for (int64_t j = threadIdx.x; j < n16; j += kThreads) {
      const uint4 v = st[j];
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    __syncthreads();  // every thread is done with stage s
    if (threadIdx.x == 0 && i + stages < mine) {
      bulk::fence_proxy_async();
      issue(i + stages);
    }
  }
  if (acc == kNever) sink[0] = acc;
#endif
}

struct Part {
  std::string name;
  int64_t bytes;
};

std::vector<Part> parse_parts(const char* s) {
  std::vector<Part> out;
  std::string all(s);
  size_t at = 0;
  while (at < all.size()) {
    size_t comma = all.find(',', at);
    if (comma == std::string::npos) comma = all.size();
    const std::string item = all.substr(at, comma - at);
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      std::fprintf(stderr, "--parts: expected name:bytes, got '%s'\n", item.c_str());
      std::exit(2);
    }
    out.push_back({item.substr(0, colon), std::atoll(item.c_str() + colon + 1)});
    if (out.back().bytes <= 0 || out.back().bytes % 16) {
      std::fprintf(stderr, "--parts: %s needs a positive multiple of 16 bytes\n", item.c_str());
      std::exit(2);
    }
    at = comma + 1;
  }
  return out;
}

enum Mode { kSerial, kPdl, kOverlap, kAhead, kRing, kOne };
const char* mode_name(Mode m) {
  return m == kSerial ? "serial" : m == kPdl ? "pdl" : m == kOverlap ? "overlap" : m == kAhead ? "ahead"
         : m == kRing ? "ring" : "one";
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 32, reps = 20;
  int64_t tail = 73728000, early_kib = 64, smem_kib = 100;
  double ahead_mb = 8.0;
  int64_t tile_kib = 36;
  int stages = 2;
  std::vector<Part> parts = parse_parts(
      "qkv:28311552,attn:9437184,wo:9437184,gateup:50724864,quant:45056,down:25362432");
  for (int i = 1; i < argc; ++i) {
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--layers")) layers = std::atoi(next());
    else if (!std::strcmp(argv[i], "--parts")) parts = parse_parts(next());
    else if (!std::strcmp(argv[i], "--tail")) tail = std::atoll(next());
    else if (!std::strcmp(argv[i], "--early")) early_kib = std::atoll(next());
    else if (!std::strcmp(argv[i], "--smem")) smem_kib = std::atoll(next());
    else if (!std::strcmp(argv[i], "--ahead")) ahead_mb = std::atof(next());
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(next());
    else if (!std::strcmp(argv[i], "--tile")) tile_kib = std::atoll(next());
    else if (!std::strcmp(argv[i], "--stages")) stages = std::atoi(next());
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (layers < 1 || reps < 1 || tail < 0 || tail % 16 || early_kib < 0 || smem_kib < 0 || smem_kib > 200 || ahead_mb < 0 ||
      tile_kib < 1 || stages < 1 || stages > 8 || tile_kib * stages > 200) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  // Every part of every layer its own bytes, as the step's weights are.
  std::vector<Part> chain;
  for (int l = 0; l < layers; ++l) chain.insert(chain.end(), parts.begin(), parts.end());
  if (tail) chain.push_back({"tail", tail});
  int64_t total = 0;
  for (const Part& p : chain) total += p.bytes;

  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaGetDeviceProperties(&prop, dev));
  sms = prop.multiProcessorCount;
  char* base = nullptr;
  unsigned* sink = nullptr;
  CHECK(cudaMalloc(&base, size_t(total)));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK(cudaMemset(base, 0x5a, size_t(total)));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const unsigned grid = unsigned(2 * sms);
  const size_t smem = size_t(smem_kib) * 1024;
  CHECK(cudaFuncSetAttribute(read_part, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t tile = tile_kib * 1024;
  const size_t ring_smem = std::max(size_t(tile * stages), smem);  // --smem keeps a third CTA off as well
  CHECK(cudaFuncSetAttribute(ring_part, cudaFuncAttributeMaxDynamicSharedMemorySize, int(ring_smem)));
  const int64_t early_rounds = early_kib * 1024 / (int64_t(kThreads) * 16);

  std::printf("device %s, %d SMs; %d layers x %zu parts + tail: %zu kernels, %.1f MB a step; early %lld KiB a CTA, %lld KiB of shared memory a CTA, ahead %.1f MB; ring %d x %lld KiB\n",
              prop.name, sms, layers, parts.size(), chain.size(), total / 1e6, (long long)early_kib, (long long)smem_kib, ahead_mb,
              stages, (long long)tile_kib);
  double one_us = 0.0;
  for (Mode mode : {kOne, kSerial, kPdl, kOverlap, kAhead, kRing}) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    auto launch = [&](const char* p, int64_t bytes, const char* next, int64_t next_bytes) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(grid);
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = stream;
      cfg.attrs = mode == kPdl || mode == kOverlap || mode == kAhead || mode == kRing ? &attr : nullptr;
      cfg.numAttrs = cfg.attrs ? 1 : 0;
      if (mode == kRing) {
        cfg.dynamicSmemBytes = ring_smem;
        CHECK(cudaLaunchKernelEx(&cfg, ring_part, reinterpret_cast<const uint8_t*>(p), bytes, tile, stages, sink));
        return;
      }
      const int64_t early = mode == kPdl || mode == kAhead ? early_rounds : -1;
      if (mode != kAhead) next_bytes = 0;
      CHECK(cudaLaunchKernelEx(&cfg, read_part, reinterpret_cast<const uint4*>(p), bytes / 16, early, sink, next,
                               next_bytes));
    };
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    if (mode == kOne) {
      launch(base, total, nullptr, 0);
    } else {
      int64_t at = 0;
      const int64_t ahead = int64_t(ahead_mb * 1e6) / 128 * 128;
      for (size_t k = 0; k < chain.size(); ++k) {
        const int64_t next_bytes = k + 1 < chain.size() ? std::min(ahead, chain[k + 1].bytes) : 0;
        launch(base + at, chain[k].bytes, base + at + chain[k].bytes, next_bytes);
        at += chain[k].bytes;
      }
    }
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int w = 0; w < 3; ++w) CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    std::vector<float> ms(static_cast<size_t>(reps));
    for (int r = 0; r < reps; ++r) {
      CHECK(cudaEventRecord(t0, stream));
      CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaEventRecord(t1, stream));
      CHECK(cudaEventSynchronize(t1));
      CHECK(cudaEventElapsedTime(&ms[size_t(r)], t0, t1));
    }
    std::sort(ms.begin(), ms.end());
    const double us = 1e3 * ms[ms.size() / 2], best = 1e3 * ms[0];
    if (mode == kOne) one_us = us;
    std::printf("%-8s %9.1f us a step (best %9.1f)  %7.1f GB/s  %6.1f steps/s  %.2f of one kernel's\n",
                mode_name(mode), us, best, total / us / 1e3, 1e6 / us, one_us / us);
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
  }
  // Each part alone: one launch between two events, synchronised (launch latency included).
  std::printf("parts alone (each launch timed by itself, its launch latency included; median of 20):\n");
  int64_t at = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Part& p = parts[k];
    cudaEvent_t t0, t1;
    CHECK(cudaEventCreate(&t0));
    CHECK(cudaEventCreate(&t1));
    std::vector<float> ms(20);
    for (int r = 0; r < 20; ++r) {
      CHECK(cudaEventRecord(t0, stream));
      read_part<<<grid, kThreads, smem, stream>>>(reinterpret_cast<const uint4*>(base + at), p.bytes / 16, -1, sink, nullptr, 0);
      CHECK(cudaEventRecord(t1, stream));
      CHECK(cudaEventSynchronize(t1));
      CHECK(cudaEventElapsedTime(&ms[size_t(r)], t0, t1));
    }
    std::sort(ms.begin(), ms.end());
    std::printf("  %-8s %10.1f KB %8.2f us %8.1f GB/s\n", p.name.c_str(), p.bytes / 1e3, 1e3 * ms[10],
                p.bytes / (1e3 * ms[10]) / 1e3);
    at += p.bytes;
    CHECK(cudaEventDestroy(t0));
    CHECK(cudaEventDestroy(t1));
  }
  CHECK(cudaFree(base));
  CHECK(cudaFree(sink));
  return 0;
}
