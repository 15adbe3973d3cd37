// One-row 8-bit products on W in the split layout (GemvQ8Args with M = 1,
// Q4_0 / Q8_0, wd set, X given in 8 bits) with X held in registers:
//
//   y[n] = sum_b d_b(W[n]) * (dx_b * dot(q_b, xq_b) + c * sx_b)      (gemv_q8.cu's maths)
//
// Why: the other one-row kernels read a block of X (32 int8 values and its
// (dx, sx), 40 bytes) from L1 or shared memory for every 18-byte Q4_0 block
// of W they decode, twice W's own bytes. Here a row of W is split into S
// slices of 32 B blocks (B blocks a lane), and lane l of slice s loads its
// B blocks of X once, after the wait for the kernel that wrote them, and
// keeps them for every row it takes. Measured on the H200 (a chain of the
// 7B's 32 down products, 4096 x 11008 Q4_0, programmatic launch, in one
// CUDA graph): 8.40 us a product against 10.51 for the streaming kernel
// (gemv_q8_stream.cu) and 11.90 for gemv_q8_row1, a bare read of the same
// bytes 5.96. At K = 4096 the streaming kernel stays (wo: 4.87 us against
// 5.04; [q; k; v] and [gate; up] quantise their own X there).
//
// Work split: a CTA is G groups of S warps (W = G S warps); group g takes
// output rows c G + g, + grid G, ... U at a time (two; SwiGLU: one, its
// gate and up rows), all their loads issued before any is used, the next
// rows' loads right after these rows' arithmetic. The S slices' sums of a
// row meet in shared memory and are added in slice order, the lanes' by a
// fixed shuffle tree: the result is deterministic. One wave of CTAs
// (occupancy times SMs) walks all the rows.
//
// Programmatic launch (pdl.cuh): the first rows' W (weights, unchanged by
// earlier kernels) are loaded before the wait; X, the previous kernel's
// output, after it with ordered L2 loads (__ldcg); Y after it.
#include "cuda/gemv_q8_xreg.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "core/config.h"
#include "cuda/device.h"
#include "cuda/pdl.cuh"
#include "cuda/q8_block.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {
namespace q8xreg {

constexpr int kMaxWarps = 16;    // a CTA, and the most slices a row
constexpr int kTargetWarps = 12;  // G = kTargetWarps / S groups a CTA
// U: output rows a group takes at once (SwiGLU's are two rows of W each:
// two would need more than the 128 registers a thread of 16 warps may have).
__host__ __device__ constexpr int rows_in_flight(int E) { return GemvQ8Args::gated(E) ? 1 : 2; }

// Each format: 16-byte vectors of quants a block, blocks a lane a slice,
// and the block's dot product (q8_block.cuh).
struct Q4_0 {
  static constexpr int kVecs = 1, kBlocks = 4;
  __device__ __forceinline__ static float dot(const uint4 (&q)[1], float d, int4 xl, int4 xh, float2 xd) {
    const uint32_t w[4] = {q[0].x, q[0].y, q[0].z, q[0].w};
    return q8act::q4_0_dot(w, d, xl, xh, xd);
  }
};
struct Q8_0 {
  static constexpr int kVecs = 2, kBlocks = 2;
  __device__ __forceinline__ static float dot(const uint4 (&q)[2], float d, int4 xl, int4 xh, float2 xd) {
    const uint32_t w[8] = {q[0].x, q[0].y, q[0].z, q[0].w, q[1].x, q[1].y, q[1].z, q[1].w};
    return q8act::q8_0_dot(w, d, xl, xh, xd);
  }
};

// W is read once: no L1 line for it.
__device__ __forceinline__ uint4 load_w(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint16_t load_d(const uint16_t* p) {
  uint16_t v;
  asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];\n" : "=h"(v) : "l"(p));
  return v;
}

template <class F, int B, int E>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_q8_xreg(const uint4* qs, const uint16_t* wd, int64_t N, int nb,
                                                               int S,
                                                               // X and Y: earlier kernels' data (pdl.cuh)
                                                               const int8_t* xq, const float2* xd, float* y) {
  constexpr int U = rows_in_flight(E), R = GemvQ8Args::gated(E) ? 2 : 1;
  __shared__ float red[2][U * R][kMaxWarps];  // [iteration parity][row][warp]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int G = int(blockDim.x >> 5) / S, s = warp % S, g = warp / S;
  const int64_t rows = R == 2 ? N / 2 : N;
  const int64_t groups = int64_t(gridDim.x) * G, group = int64_t(blockIdx.x) * G + g;
  const int64_t iters = (rows + U * groups - 1) / (U * groups);  // the same for every warp of the CTA
  int b[B];                                                          // this lane's blocks
#pragma unroll
  for (int j = 0; j < B; ++j) b[j] = (s * B + j) * 32 + lane;
  uint4 q[U][R][B][F::kVecs];
  uint16_t d[U][R][B];
  auto load = [&](int64_t it) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t row = group + (it * U + u) * groups;
#pragma unroll
      for (int p = 0; p < R; ++p) {
        const int64_t n = row + p * rows;
#pragma unroll
        for (int j = 0; j < B; ++j) {
          const bool live = row < rows && b[j] < nb;
#pragma unroll
          for (int v = 0; v < F::kVecs; ++v)
            q[u][p][j][v] = live ? load_w(qs + (n * nb + b[j]) * F::kVecs + v) : make_uint4(0, 0, 0, 0);
          d[u][p][j] = live ? load_d(wd + n * nb + b[j]) : uint16_t(0);
        }
      }
    }
  };
  pdl_trigger();
  if (iters > 0) load(0);
  pdl_wait();
  int4 xl[B], xh[B];
  float2 xs[B];
#pragma unroll
  for (int j = 0; j < B; ++j) {
    const bool live = b[j] < nb;
    xl[j] = live ? __ldcg(reinterpret_cast<const int4*>(xq + b[j] * 32)) : make_int4(0, 0, 0, 0);
    xh[j] = live ? __ldcg(reinterpret_cast<const int4*>(xq + b[j] * 32 + 16)) : make_int4(0, 0, 0, 0);
    xs[j] = live ? __ldcg(xd + b[j]) : make_float2(0.0f, 0.0f);
  }
  for (int64_t it = 0; it < iters; ++it) {
    float acc[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int p = 0; p < R; ++p) {
        float a = 0.0f;  // a block beyond K: zero quants, scale and X, adds 0
#pragma unroll
        for (int j = 0; j < B; ++j)
          a += F::dot(q[u][p][j], __half2float(__ushort_as_half(d[u][p][j])), xl[j], xh[j], xs[j]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
        acc[u][p] = a;
      }
    if (it + 1 < iters) load(it + 1);
    const int par = int(it & 1);  // red[par] is written again two iterations on, after the next sync
    if (lane == 0)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int p = 0; p < R; ++p) red[par][u * R + p][warp] = acc[u][p];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < U * G) {
      const int u = t / G, gt = t % G;
      const int64_t row = int64_t(blockIdx.x) * G + gt + (it * U + u) * groups;
      float v[R];
#pragma unroll
      for (int p = 0; p < R; ++p) {
        v[p] = 0.0f;
        for (int k = 0; k < S; ++k) v[p] += red[par][u * R + p][gt * S + k];
      }
      if (row < rows) q8act::epilogue<E>(y + row, v[0], v[R - 1]);
    }
  }
}

// Slices a row for K (each 32 B blocks), and groups a CTA. A row over one
// warp is left to the other kernels: this one was measured against them
// only where rows split over two or more.
struct Plan {
  int S = 0, G = 0;
  bool fits() const { return S >= 2 && S * G <= kMaxWarps; }
};
Plan plan_of(int64_t K, int B) {
  Plan p;
  p.S = int((K / 32 + 32 * B - 1) / (32 * B));
  p.G = p.S > 0 ? std::max(1, kTargetWarps / p.S) : 0;
  return p;
}

template <class F, int E>
cudaError_t launch_e(const GemvQ8Args& a, cudaStream_t st) {
  constexpr int B = F::kBlocks, U = rows_in_flight(E);
  const Plan p = plan_of(a.K, B);
  const int threads = p.S * p.G * 32;
  int per_sm = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_q8_xreg<F, B, E>, threads, 0))
    return e;
  const int64_t rows = GemvQ8Args::gated(E) ? a.N / 2 : a.N;
  const int64_t ctas_needed = ((rows + U - 1) / U + p.G - 1) / p.G;
  const unsigned grid = unsigned(std::min<int64_t>(ctas_needed, int64_t(std::max(per_sm, 1)) * sm_count()));
  if (grid == 0) return cudaSuccess;
  return launch_pdl(gemv_q8_xreg<F, B, E>, dim3(grid), dim3(threads), 0, st, static_cast<const uint4*>(a.w), a.wd,
                    a.N, int(a.K / 32), p.S, a.xq, reinterpret_cast<const float2*>(a.xd), a.y);
}

template <class F>
cudaError_t launch_q(const GemvQ8Args& a, cudaStream_t st) {
  if (a.epilogue == GemvQ8Args::kSwiglu) return launch_e<F, GemvQ8Args::kSwiglu>(a, st);
  if (a.epilogue == GemvQ8Args::kGeglu) return launch_e<F, GemvQ8Args::kGeglu>(a, st);
  if (a.epilogue == GemvQ8Args::kAdd) return launch_e<F, GemvQ8Args::kAdd>(a, st);
  return launch_e<F, GemvQ8Args::kStore>(a, st);
}

bool aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace q8xreg
}  // namespace

bool gemv_q8_xreg_fits(const GemvQ8Args& a) {
  using namespace q8xreg;
  if (!config::on(config::Key::kCudaQ8Stream) || !config::on(config::Key::kCudaQ8Xreg)) return false;
  if (a.M != 1 || !a.wd || a.xh || (a.fmt != quant::Q4_0 && a.fmt != quant::Q8_0) || a.K % 32 != 0 || a.K <= 0)
    return false;
  if (GemvQ8Args::gated(a.epilogue) && a.N % 2 != 0) return false;
  // X given in 8 bits only, and K > 4096 (measured on an H100: with X
  // quantised in the kernel, [q; k; v] and [gate; up] at K = 4096 took
  // 2.1x and 1.5x the streaming kernel's time).
  if (a.x || a.K <= 4096) return false;
  if (!aligned(a.w, 16) || !aligned(a.wd, 2) || !aligned(a.xq, 16) || !aligned(a.xd, 8)) return false;
  return a.fmt == quant::Q4_0 ? plan_of(a.K, q8xreg::Q4_0::kBlocks).fits() : plan_of(a.K, q8xreg::Q8_0::kBlocks).fits();
}

cudaError_t launch_gemv_q8_xreg(const GemvQ8Args& a, cudaStream_t st) {
  using namespace q8xreg;
  return a.fmt == quant::Q4_0 ? launch_q<q8xreg::Q4_0>(a, st) : launch_q<q8xreg::Q8_0>(a, st);
}

}  // namespace cuda
}  // namespace tc
