// Streaming quantized GEMV (included by gemv_quantized.cu only): the default
// kernel for Q4_0, Q8_0, Q4_K and Q6_K weights with exact (never quantised)
// activations, M <= 4 rows of X per pass over W.
//
//   Y[m, n] = sum_b sum_{runs g of block b} a_g * sum_{i<4} X[m, k_g + i] q_{g,i}  (+ b_g sum_i X[m, k_g + i])
//
// with the block decoders of quant_formats.cuh (q exact small integers as
// floats, a / b the run's scale / min), f32 FMAs and an f32 sum per thread,
// then a fixed-order tree over the CTA: the result differs from the float64
// product of the dequantised weights only by f32 rounding, as the other
// kernels of gemv_quantized.cu.
//
// Why a new kernel: at M = 1 the product reads every byte of W once and does
// two flops per weight, so it should run at HBM bandwidth (~4.2 TB/s on an
// H200). The warp-per-row kernels issue 2- and 4-byte loads from 18- to
// 210-byte blocks (blocks are only 2-byte aligned), a few per lane in
// flight: load-instruction and latency bound at 10-45% of bandwidth.
//
// Data movement:
//  - W moves global -> shared memory only by 16-byte cp.async.cg (L2 only,
//    no L1 allocation, L2 evict-first: W is read once and must not push X
//    out), every lane of the CTA copying consecutive 16-byte chunks: fully
//    coalesced, ~0.1 load instructions per 16 weights.
//  - A CTA owns tiles of R = 4 consecutive rows of W. A tile's rows are cut
//    into stages of kBlocks = 256 / kParts blocks: one decoder part (16
//    weights) per thread and row (Q6_K, whose parts are 32 weights: two
//    groups of 128 threads, 2 rows each, 16 blocks a stage). A stage is R
//    row slices of kBlocks * kBytes bytes (9 KB Q4_0 / Q4_K, 17 KB Q8_0,
//    13 KB Q6_K), contiguous in global memory per row. Rows need not be 16-byte aligned (Q6_K at K = 11008 is
//    9030 bytes a row): a slice is copied as the 16-byte chunks covering it,
//    the first chunk starting up to 15 bytes early, and lands in shared
//    memory at the same offset mod 16, so every block keeps its global
//    alignment (2 bytes, 16 for Q4_K). Chunks reaching past the end of W
//    read only the bytes of W (cp.async src-size), the rest zero-filled;
//    chunks starting before a slice read bytes of the previous row, inside W.
//  - kStages stages (4 of the 9 KB ones, 3 of Q6_K's and Q8_0's) form a
//    ring: while the CTA decodes stage j, the next kStages - 1 are in
//    flight, across tile boundaries (the sequence of (tile, stage) pairs of
//    a CTA is one stream), so short rows (K = 4096: one stage per tile) keep
//    the pipeline full too. Bytes in flight with 3 CTAs per SM at M = 1
//    (launch bounds hold the kernel to 80 registers; 2 CTAs at M > 1):
//    84 KB (Q4_0, Q4_K), 81 KB (Q6_K), 105 KB (Q8_0) per SM, well over the
//    ~25 KB per SM that 4.8 TB/s x ~700 ns of latency asks, while >= 92 KB
//    of the SM's 256 KB stay L1 for X.
//  - Grid: min(tiles, CTAs resident per SM x SMs), CTA c taking tiles c,
//    c + grid, ...: one wave, no tail of a second wave (N = 4096, R = 4:
//    1024 tiles over 396 CTAs, 2 or 3 each).
//  - X is read from global memory with __ldg (L1 / L2 resident: every CTA
//    reads the same X), converted to f32 as it is loaded; one load of X per
//    part serves the R rows of the tile (for MT = 1 it is loaded before the
//    rows are decoded; for MT = 4 the rows are decoded first), so L1
//    traffic of X is 1 byte (f32, MT = 1) per weight, not 4.
//  - Decoding reads shared memory with the decoders' 2- and 4-byte loads
//    (Q4_K, whose blocks are 16-byte aligned: one 16-byte load for the
//    scales, one 8-byte load for a part's quants).
//  - End of a tile: each thread's R x MT sums reduce by warp shuffles (for
//    MT = 1 a transposing tree: 6 shuffles for R = 4 sums, not 20), then
//    over the 8 warps in shared memory in warp order (deterministic); Y is
//    written by R x MT threads in its dtype.
// Shared memory: kStages x R x (kBlocks kBytes rounded to 16 + 32) bytes:
// 36.5 KB (Q4_0, Q4_K), 39.8 KB (Q6_K), 51.4 KB (Q8_0): above 48 KB the
// launcher raises cudaFuncAttributeMaxDynamicSharedMemorySize.
// Preconditions (the launcher falls back to the warp-per-row kernels
// otherwise): W 16-byte aligned, X rows aligned for 4-element loads
// (staged otherwise), M <= 4 per launch (larger M: passes of 4 rows).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/quant_formats.cuh"

namespace tc {
namespace cuda {
namespace wstream {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxMT = 4;  // rows of X per pass over W

// The CTA's threads form kTG groups; group g takes rows g kRowsT .. of the
// tile, one decoder part per thread and row. Q6_K's parts are 32 weights
// (twice the others'), so its threads form two groups of 2 rows each: a stage
// is then 16 blocks a row, and K = 4096 (16 blocks) keeps every thread busy.
template <class F>
struct Cfg {
  static constexpr int kRows = 4;                                   // rows of W per tile
  static constexpr int kTG = F::kGroups == 8 ? 2 : 1;               // thread groups
  static constexpr int kRowsT = kRows / kTG;                        // rows per thread
  static constexpr int kBlocks = kThreads / kTG / F::kParts;        // blocks per row and stage
  static constexpr int kSpan = kBlocks * F::kBytes;                 // bytes per row and stage
  static constexpr int kSlot = (kSpan + 15) / 16 * 16 + 32;         // room for the head offset and tail
  static constexpr int kChunks = kSlot / 16;                        // >= 16-byte chunks of a slice
  static constexpr int kStageBytes = kRows * kSlot;
  // Ring depth: 4 stages of the 9 KB ones, 3 of the 13-17 KB ones (Q6_K,
  // Q8_0), so 3 CTAs leave an SM >= 90 KB of L1 for X.
  static constexpr int kStages = kStageBytes > 12 * 1024 ? 3 : 4;
  static constexpr int kSmem = kStages * kStageBytes;
  static_assert(kThreads % (kTG * F::kParts) == 0, "a stage is whole blocks");
};

// ---- cp.async ---------------------------------------------------------------------------

__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

// 16 bytes at g (16-byte aligned) into shared memory at s; only the first
// `bytes` (1..16) are read, the rest of the 16 zero-filled.
__device__ __forceinline__ void cp_async16(void* s, const void* g, int bytes, uint64_t policy) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(sa), "l"(g), "r"(bytes),
               "l"(policy)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ---- X and Y ----------------------------------------------------------------------------

// X elements k .. k+3 as f32 (x 4-element aligned: checked by the launcher).
template <class T>
__device__ __forceinline__ float4 ldx4(const T* x);
template <>
__device__ __forceinline__ float4 ldx4<float>(const float* x) {
  return __ldg(reinterpret_cast<const float4*>(x));
}
template <>
__device__ __forceinline__ float4 ldx4<__half>(const __half* x) {
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(x));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&v.x));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&v.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
template <>
__device__ __forceinline__ float4 ldx4<__nv_bfloat16>(const __nv_bfloat16* x) {
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(x));
  return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u), __uint_as_float(v.y << 16),
                     __uint_as_float(v.y & 0xFFFF0000u));
}

// Y element i in the dtype of the call (0 f32, 1 f16, 2 bf16).
__device__ __forceinline__ void store_y(void* y, int ydt, int64_t i, float v) {
  if (ydt == 0) static_cast<float*>(y)[i] = v;
  else if (ydt == 1) static_cast<__half*>(y)[i] = __float2half_rn(v);
  else static_cast<__nv_bfloat16*>(y)[i] = __float2bfloat16_rn(v);
}

// One run-dotted part: sum_g a_g sum_i v_g,i q_g,i (+ b_g sum_i v_g,i).
template <class F>
__device__ __forceinline__ float dot_part(const qdev::Part<F::kGroups>& pt, const float4 (&v)[F::kGroups]) {
  float s = 0.0f;
#pragma unroll
  for (int g = 0; g < F::kGroups; ++g) {
    float t = v[g].x * pt.q[4 * g];
    t = fmaf(v[g].y, pt.q[4 * g + 1], t);
    t = fmaf(v[g].z, pt.q[4 * g + 2], t);
    t = fmaf(v[g].w, pt.q[4 * g + 3], t);
    s = fmaf(pt.a[g], t, s);
    if constexpr (F::kMin) s = fmaf(pt.b[g], (v[g].x + v[g].y) + (v[g].z + v[g].w), s);
  }
  return s;
}

// ---- the kernel -------------------------------------------------------------------------

// x: the pass's first row of X (rows of K), y: Y[m0, 0] (rows of N, dtype
// ydt), mt (1..MT) live rows of X. W 16-byte aligned.
template <class F, int MT, class T>
__global__ void __launch_bounds__(kThreads, MT == 1 ? 3 : 2)
    gemv_stream(const uint8_t* __restrict__ w, const T* __restrict__ x, void* __restrict__ y, int ydt, int mt,
                int64_t N, int64_t K) {
  using C = Cfg<F>;
  constexpr int R = C::kRows, RT = C::kRowsT, G = F::kGroups;
  // Blocks keep their global alignment in the ring; with W 16-byte aligned,
  // blocks of a multiple of 16 bytes (Q4_K's 144) are 16-byte aligned.
  constexpr int A = (F::kBytes % 16 == 0 ? 16 : F::kAlign) | qdev::kSmem;
  constexpr int TPG = kThreads / C::kTG, WPG = kWarps / C::kTG;  // threads, warps per group
  extern __shared__ __align__(16) uint8_t ring[];
  __shared__ float red[kWarps][RT * MT];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t nb = K / F::kQK;  // blocks per row
  const int64_t row_bytes = nb * F::kBytes;
  const int steps = int((nb + C::kBlocks - 1) / C::kBlocks);  // stages per tile
  const int64_t tiles = (N + R - 1) / R;
  const int64_t mine = tiles > int64_t(blockIdx.x) ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  const int64_t total = mine * steps;  // stages this CTA streams
  const uint8_t* const wend = w + N * row_bytes;
  const uint64_t policy = evict_first_policy();

  // The CTA's stages in order: tile blockIdx.x + i gridDim.x for i = 0, 1, ...,
  // each cut into `steps` stages of kBlocks blocks of its R rows. Rows past N
  // repeat row N - 1 (loaded and decoded, never stored). The loader runs
  // C::kStages - 1 stages ahead of the consumer; each keeps its own position
  // (no 64-bit divisions in the loop).
  int64_t ld_tile = blockIdx.x;
  int ld_step = 0;
  // Loader: kThreads / R consecutive threads per row, taking its slice's
  // 16-byte chunks in turn (coalesced: a warp copies 512 contiguous bytes).
  constexpr int TPR = kThreads / R;
  const int lr = tid / TPR, lc = tid % TPR;
  auto load = [&](int64_t j) {
    const int64_t b0 = int64_t(ld_step) * C::kBlocks;
    const int len = int(nb - b0 < C::kBlocks ? nb - b0 : C::kBlocks) * F::kBytes;
    const int64_t n = ld_tile * R + lr < N ? ld_tile * R + lr : N - 1;
    const uint8_t* src = w + n * row_bytes + b0 * F::kBytes;
    const int head = int(reinterpret_cast<uintptr_t>(src) & 15);
    const uint8_t* g0 = src - head;  // >= w: w is 16-byte aligned
    const int64_t room64 = wend - g0;  // bytes of W from g0 on (> 0)
    const int room = room64 < (1 << 30) ? int(room64) : (1 << 30);
    const int chunks = (head + len + 15) >> 4;
    uint8_t* dst = ring + (j % C::kStages) * C::kStageBytes + lr * C::kSlot;
    for (int c = lc; c < chunks; c += TPR) {
      const int valid = room - 16 * c;  // >= 1: chunk c starts before src + len <= wend
      cp_async16(dst + 16 * c, g0 + 16 * c, valid < 16 ? valid : 16, policy);
    }
    if (++ld_step == steps) ld_step = 0, ld_tile += gridDim.x;
  };

  float acc[RT][MT];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[r][m] = 0.0f;

#pragma unroll
  for (int j = 0; j < C::kStages - 1; ++j) {
    if (j < total) load(j);
    cp_async_commit();  // empty groups keep the count of groups uniform
  }

  // This thread's rows of the tile (grp RT + i, i < RT), block of the stage and part of it.
  const int grp = tid / TPG, b = (tid % TPG) / F::kParts, p = tid % F::kParts;
  int64_t tile = blockIdx.x;
  int s = 0;
  for (int64_t j = 0; j < total; ++j) {
    cp_async_wait<C::kStages - 2>();  // stage j has landed (this thread's copies) ...
    __syncthreads();               // ... everyone's, and stage j - 1's slot is free
    if (j + C::kStages - 1 < total) load(j + C::kStages - 1);
    cp_async_commit();

    const int64_t b0 = int64_t(s) * C::kBlocks;
    const uint8_t* stage = ring + (j % C::kStages) * C::kStageBytes;
    if (b0 + b < nb) {
      const T* xb = x + (b0 + b) * F::kQK;
      // Row r's block in the stage: its slice starts (n row_bytes + b0 kBytes)
      // mod 16 into the slot (mod 16 survives 32-bit wrap-around: no 64-bit
      // products per row and stage).
      const uint32_t rb32 = uint32_t(row_bytes), off32 = uint32_t(b0) * uint32_t(F::kBytes);
      const int64_t n0 = tile * R + grp * RT;
      auto blk = [&](int i) {
        const int r = grp * RT + i;
        const uint32_t n = uint32_t(n0 + i < N ? n0 + i : N - 1);
        const uint32_t head = (n * rb32 + off32) & 15u;
        return stage + r * C::kSlot + head + b * F::kBytes;
      };
      if constexpr (MT == 1) {
        // Positions depend on the part only: decode row 0, load X once, then the other rows.
        qdev::Part<G> pt;
        F::template decode<A>(blk(0), p, pt);
        float4 v[G];
#pragma unroll
        for (int g = 0; g < G; ++g) v[g] = ldx4<T>(xb + pt.pos[g]);
        acc[0][0] += dot_part<F>(pt, v);
#pragma unroll
        for (int r = 1; r < RT; ++r) {
          F::template decode<A>(blk(r), p, pt);
          acc[r][0] += dot_part<F>(pt, v);
        }
      } else {
        qdev::Part<G> pt[RT];
#pragma unroll
        for (int r = 0; r < RT; ++r) F::template decode<A>(blk(r), p, pt[r]);
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m < mt) {
            float4 v[G];
#pragma unroll
            for (int g = 0; g < G; ++g) v[g] = ldx4<T>(xb + int64_t(m) * K + pt[0].pos[g]);
#pragma unroll
            for (int r = 0; r < RT; ++r) acc[r][m] += dot_part<F>(pt[r], v);
          }
        }
      }
    }

    if (s == steps - 1) {  // the tile's last stage (uniform over the CTA): reduce and store
      if constexpr (MT == 1) {
        // RT sums per lane to one warp sum per row, halving the live values
        // at each of the first log2(RT) shuffle steps (RT = 4: 6 shuffles,
        // not 20); lanes 0, 8, 16, 24 (RT = 4) or 0, 16 (RT = 2) end with the
        // warp's sums of rows 0, 1, 2, 3 (0, 1) of the thread.
        float v0, v1 = 0.0f;
        const bool up = lane & 16;
        if constexpr (RT == 4) {
          v0 = (up ? acc[2][0] : acc[0][0]) + __shfl_xor_sync(0xffffffffu, up ? acc[0][0] : acc[2][0], 16);
          v1 = (up ? acc[3][0] : acc[1][0]) + __shfl_xor_sync(0xffffffffu, up ? acc[1][0] : acc[3][0], 16);
          const bool hi = lane & 8;
          v0 = (hi ? v1 : v0) + __shfl_xor_sync(0xffffffffu, hi ? v0 : v1, 8);
#pragma unroll
          for (int o = 4; o > 0; o >>= 1) v0 += __shfl_xor_sync(0xffffffffu, v0, o);
          if ((lane & 7) == 0) red[warp][2 * (lane >> 4) + ((lane >> 3) & 1)] = v0;
        } else {
          static_assert(RT == 2, "rows per thread");
          v0 = (up ? acc[1][0] : acc[0][0]) + __shfl_xor_sync(0xffffffffu, up ? acc[0][0] : acc[1][0], 16);
#pragma unroll
          for (int o = 8; o > 0; o >>= 1) v0 += __shfl_xor_sync(0xffffffffu, v0, o);
          if ((lane & 15) == 0) red[warp][lane >> 4] = v0;
        }
        (void)v1;
#pragma unroll
        for (int r = 0; r < RT; ++r) acc[r][0] = 0.0f;
      } else {
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int m = 0; m < MT; ++m) {
            float v = acc[r][m];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0) red[warp][r * MT + m] = v;
            acc[r][m] = 0.0f;
          }
      }
      __syncthreads();
      if (tid < R * MT) {  // row r of the tile: the warps of its thread group, in order
        const int r = tid / MT, m = tid % MT, w0 = r / RT * WPG, e = r % RT * MT + m;
        const int64_t n = tile * R + r;
        if (n < N && m < mt) {
          float v = red[w0][e];
#pragma unroll
          for (int q = 1; q < WPG; ++q) v += red[w0 + q][e];
          store_y(y, ydt, int64_t(m) * N + n, v);
        }
      }
      // red is written again only after the next stage's __syncthreads.
    }
    if (++s == steps) s = 0, tile += gridDim.x;
  }
  cp_async_wait<0>();
}

}  // namespace wstream
}  // namespace cuda
}  // namespace tc
