// One-row 8-bit products (GemvQ8Args with M = 1) on Q4_0 / Q8_0 / Q6_K in
// the split layout (wd set) or Q4_1 / Q5_1 blocks and Q4_K / Q5_K
// superblocks in place, W streamed through shared memory:
//
//   y[n] = sum of W[n]'s blocks against X's (q8_block.cuh: a Q4_0 / Q8_0 block
//          d_b (dx_b dot(q_b, xq_b) + c sx_b); a K-quant superblock quarter
//          its sub-scales' sum of the same), then the epilogue
//   with, when the call brings X in f32, xq / dx / sx made here as quantize_q8 makes them:
//   v = x, or v = x * rstd * gamma, rstd = 1 / sqrt(sum(x^2) / K + eps) (f64 sum);
//   per block of 32: dx = max|v| / 127, xq = rne(v / dx), sx = dx * sum(xq)
//
// Why: in a decode step each product but wo follows a quantize_q8 of its X,
// a kernel boundary on the critical path. Quantising X again in every CTA
// of the product pays only when CTAs are few and long-lived: this kernel
// runs one wave (2 CTAs of 16 warps an SM), each CTA taking tiles c,
// c + grid, ... of TR consecutive rows, and only for K <= 4096 (two groups
// of 4 values a thread; longer X, e.g. the 7B's down product at 11008, costs
// more to quantise in every CTA than the boundary: quantize_q8 does it).
// Measured on the H200 (kernel chains of the 7B's 128 products a step,
// bench/results/llama-batched.md): the streaming kernel alone 1338 us a
// step against 1348 for gemv_q8_row1. The K-quants' warp-per-row kernel
// (gemv_q8_row1: two quarters of a superblock in flight a lane) ran at
// 33-49% of the copy bandwidth; here their loads are bulk copies as Q4_0's.
//
// Data movement: a tile's rows are contiguous (their blocks, and apart
// their scales in the split layout), so one thread moves a whole tile into
// shared memory with one bulk copy a part (cp.async.bulk, TMA; two parts for
// SwiGLU: TR / 2 gate rows and the matching up rows), plus one for each
// part's scales, completing on the stage's mbarrier, L2 evict-first (W is
// read once). A ring of 2-4 stages of up to
// 40 KB: the first ones are issued before the kernel waits for its
// predecessor (pdl.cuh), so W streams in while the previous kernel ends and
// X is quantised; stage s is refilled once every warp is done with it.
// A row of the tile takes WPR warps, whose sums reduce in shared memory in
// a fixed order: the result is deterministic. Blocks of 32 (Q4_0, Q8_0):
// WPR = 16 / TR, a lane takes every 32nd block of its warp's share, reading
// X from shared memory (quantised here) or through L1 (given) each tile.
// K-quants: WPR is what one superblock quarter a lane needs (2 at K = 4096,
// 8 at 11008), a lane keeps its quarter in every tile and takes it in two
// rows (TR = 2 x 16 / WPR, or 16 / WPR where such a stage would pass
// kStageCap: Q4_K 16 rows at K = 4096, Q5_K and Q6_K 8), so the quarter's
// X is read once, into registers, and meets two rows a tile; read each
// tile it cost 4-way bank conflicts and held the K-quants below the
// warp-per-row kernel. What bounds both is the work between a tile's
// arrival and its stage's refill, not the ring (the ring alone moves the
// decode step's bytes at 0.91 of one plain read on an H100): so a tile's
// fixed work is kept out of the loop over tiles, and smaller or deeper
// rings, one block of 32 a lane, and warps refilling without the CTA
// barrier all measured slower or no faster (bench/results/llama-cuda.md).
//
// With a.rope (the decoder's [q | k | v] row of one token) the epilogue is
// rope_kv_append's work instead of the store: a tile's rows hold whole
// interleaved RoPE pairs, so warp 0 rotates them (a shuffle brings each
// lane its partner) and writes q, k and v where the attention reads them.
// One kernel a layer fewer in the decode step.
//
// Quantising X here: the f64 sum of squares in a fixed order (per thread,
// warp trees, the warps in order: the same rstd in every CTA; its order is
// not quantize_q8's, so rstd may differ from it in the last bit), then a
// block of 32 per 8 lanes (4 values a lane; max and integer sum by
// shuffles: quantize_block's dx, xq and sx for the same v).
#include "cuda/gemv_q8_stream.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "cuda/bulk_copy.cuh"
#include "cuda/device.h"
#include "cuda/kv_cache.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q8_block.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {
namespace q8stream {

constexpr int kWarps = 16, kThreads = kWarps * 32;
// The epilogue of a call with rope (kStore's rows rotated and appended to
// the KV cache, kv_cache.cuh's RopeRow, instead of stored in y): a value
// no GemvQ8Args epilogue takes.
constexpr int kRopeRow = 0x100;
static_assert(kRopeRow != GemvQ8Args::kStore && kRopeRow != GemvQ8Args::kAdd && kRopeRow != GemvQ8Args::kSwiglu &&
                  kRopeRow != GemvQ8Args::kGeglu,
              "the RoPE epilogue must not share a GemvQ8Args epilogue's value");
constexpr int kMaxStages = 4;
constexpr int64_t kStageCap = 40 * 1024;  // bytes of W a stage, at most
constexpr int64_t kRingBudget = 64 * 1024;

// ---- formats: a row of W as blocks (of 32 weights, or K-quant superblocks
// of 256) of kQB bytes each in shared memory, their f16 scales d apart when
// kD (the split layout's); a lane takes units (a block of 32, or kUnits = 4
// quarters of a superblock) ----

__device__ __forceinline__ float f16_bits(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// X's int8 values by 16-byte halves of its blocks of 32. Given X is in
// quantize_q8's layout (a block's two halves together, global memory);
// X quantised here is laid out in shared memory as every block's first
// half, then every second half, so that lanes taking consecutive blocks
// read consecutive 16 bytes: 4 shared-memory wavefronts a warp's load, not
// the 8 of a 32-byte stride.
struct XPairs {
  const int4* p;
  __device__ __forceinline__ int4 half(int b, int h) const { return p[2 * b + h]; }
};
struct XHalves {
  const int4* p;
  int nb;  // X's blocks of 32
  __device__ __forceinline__ int4 half(int b, int h) const { return p[h * nb + b]; }
  // Where quantize_x writes X's values 4g .. 4g + 3 (word g % 8 of block
  // g / 8) in this layout, X being `groups` such words (K / 4).
  __device__ __forceinline__ static int64_t word(int64_t g, int64_t groups) {
    return ((g & 4) ? groups / 2 : 0) + (g >> 3) * 4 + (g & 3);
  }
};

struct Q4_0 {
  static constexpr int kBlock = 32, kQB = 16, kUnits = 1;
  static constexpr bool kD = true;
  template <class XV>
  __device__ __forceinline__ static float unit_dot(const uint8_t* q, const uint16_t* d, int u, const XV& x,
                                                   const float2* xd) {
    const uint4 v = reinterpret_cast<const uint4*>(q)[u];
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    return q8act::q4_0_dot(w, f16_bits(d[u]), x.half(u, 0), x.half(u, 1), xd[u]);
  }
};

struct Q8_0 {
  static constexpr int kBlock = 32, kQB = 32, kUnits = 1;
  static constexpr bool kD = true;
  template <class XV>
  __device__ __forceinline__ static float unit_dot(const uint8_t* q, const uint16_t* d, int u, const XV& x,
                                                   const float2* xd) {
    const uint4 v0 = reinterpret_cast<const uint4*>(q)[2 * u], v1 = reinterpret_cast<const uint4*>(q)[2 * u + 1];
    const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    return q8act::q8_0_dot(w, f16_bits(d[u]), x.half(u, 0), x.half(u, 1), xd[u]);
  }
};

// GGUF's Q4_1 (QB = 20 bytes: d, m, 16 bytes of nibbles) or Q5_1 (24: d,
// m, the fifth bits, the nibbles) blocks in place: 4-byte multiples, so
// every block of a stage (16-byte aligned rows) is 4-byte aligned.
template <int QB>
struct Q_1 {
  static constexpr int kBlock = 32, kQB = QB, kUnits = 1;
  static constexpr bool kD = false;
  template <class XV>
  __device__ __forceinline__ static float unit_dot(const uint8_t* q, const uint16_t*, int u, const XV& x,
                                                   const float2* xd) {
    return q8act::q_1_block_dot<QB>(reinterpret_cast<const uint32_t*>(q + u * QB), x.half(u, 0), x.half(u, 1), xd[u]);
  }
};
using Q4_1 = Q_1<20>;
using Q5_1 = Q_1<24>;

// A K-quant unit's X, held in registers for the whole kernel (the plan
// gives a lane one unit of a row, the same in every tile): its 64 int8
// values and the (dx, sx) of their 2 (Q4_K, Q5_K) or 4 (Q6_K) blocks,
// and what a unit's arithmetic needs of them alone (Q6_K's group sums).
struct KX {
  int4 v[4];
  float2 d[4];
  int s[4];  // Q6_K: the sums of its 4 groups of 16 values (q8act::x16_sum)
};

// GGUF's Q4_K (QB = 144 bytes: d, dmin, 12 scale bytes, qs[128]) or Q5_K
// (176: the same header, qh[32], qs[128]) superblocks in place: quarter
// p = u % 4 of superblock s = u / 4 meets X's blocks 8s + 2p and 8s + 2p + 1.
template <int QB>
struct K45 {
  static constexpr int kBlock = 256, kQB = QB, kUnits = 4;
  static constexpr bool kD = false;
  template <class XV>
  __device__ __forceinline__ static void load_x(const XV& xq, const float2* xd, int u, KX& x) {
    const int b = (u >> 2) * 8 + 2 * (u & 3);
#pragma unroll
    for (int i = 0; i < 4; ++i) x.v[i] = xq.half(b + (i >> 1), i & 1);
    x.d[0] = xd[b], x.d[1] = xd[b + 1];
  }
  __device__ __forceinline__ static float unit_dot(const uint8_t* q, const uint16_t*, int u, const KX& x) {
    const int p = int(u & 3);
    const uint4* g = reinterpret_cast<const uint4*>(q + (u >> 2) * kQB);
    if constexpr (QB == 144) return q8act::q4_k_quarter_dot(g[0], p, g[1 + 2 * p], g[2 + 2 * p], x.v, x.d[0], x.d[1]);
    else return q8act::q5_k_quarter_dot(g[0], p, g[3 + 2 * p], g[4 + 2 * p], g[1], g[2], x.v, x.d[0], x.d[1]);
  }
};
using Q4_K = K45<144>;
using Q5_K = K45<176>;

// Q6_K in the split layout (208 bytes: ql[128], qh[64], int8 scales[16]; d
// apart): quarter p = 2h + i meets X's blocks 8s + 4h .. 8s + 4h + 3, 16
// values of each at 16i.
struct Q6_K {
  static constexpr int kBlock = 256, kQB = 208, kUnits = 4;
  static constexpr bool kD = true;
  template <class XV>
  __device__ __forceinline__ static void load_x(const XV& xq, const float2* xd, int u, KX& x) {
    const int p = int(u & 3);
    const int b = (u >> 2) * 8 + 4 * (p >> 1);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      x.v[k] = xq.half(b + k, p & 1), x.d[k] = xd[b + k];
      x.s[k] = q8act::x16_sum(x.v[k]);
    }
  }
  __device__ __forceinline__ static float unit_dot(const uint8_t* q, const uint16_t* d, int u, const KX& x) {
    const int p = int(u & 3), h = p >> 1, i = p & 1;
    const uint4* g = reinterpret_cast<const uint4*>(q + (u >> 2) * kQB);
    return q8act::q6_k_quarter_dot(g[4 * h + i], g[4 * h + 2 + i], g[8 + 2 * h + i], g[12], f16_bits(d[u >> 2]), p,
                                   x.v, x.s, x.d);
  }
};

// X (K f32 values, normalised when norm with gamma's values gv, which the
// kernel loads before it waits for X) quantised into xq (XHalves' layout) /
// xd (shared memory) by the whole CTA. Thread t holds groups t, t + kThreads, ... of 4
// values (at most G): every load of X is issued before any is used (one
// trip to L2; __ldcg, as X is the previous kernel's output: pdl.cuh), then the f64 sum of squares (per thread, per warp
// by a fixed tree, then the warps in order: the same rstd in every CTA),
// then a block of 32 per 8 lanes (max and integer sum by shuffles: exactly
// quantize_block's dx, xq and sx). `part` holds kWarps doubles.
template <int G>
__device__ __forceinline__ void quantize_x(const float* x, bool norm, const float4 (&gv)[G], float eps,
                                           int64_t K, int8_t* xq, float2* xd, double* part) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t groups = K / 4;  // a multiple of 8: lane groups of 8 are whole blocks
  float4 v[G];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const int64_t g = int64_t(j) * kThreads + tid;
    v[j] = g < groups ? __ldcg(reinterpret_cast<const float4*>(x + 4 * g)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  if (norm) {
    double ss = 0.0;
#pragma unroll
    for (int j = 0; j < G; ++j) {
      ss += double(v[j].x) * double(v[j].x) + double(v[j].y) * double(v[j].y);
      ss += double(v[j].z) * double(v[j].z) + double(v[j].w) * double(v[j].w);
    }
    const float rstd = q8act::cta_rstd<kWarps>(ss, part, K, eps);
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const float4 c = gv[j];
      {
        v[j].x = __fmul_rn(__fmul_rn(v[j].x, rstd), c.x), v[j].y = __fmul_rn(__fmul_rn(v[j].y, rstd), c.y);
        v[j].z = __fmul_rn(__fmul_rn(v[j].z, rstd), c.z), v[j].w = __fmul_rn(__fmul_rn(v[j].w, rstd), c.w);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < G; ++j) {
    const int64_t g = int64_t(j) * kThreads + tid;
    if (int64_t(j) * kThreads + warp * 32 >= groups) break;  // uniform over the warp
    float amax = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const int q0 = max(-128, min(127, __float2int_rn(__fmul_rn(v[j].x, id))));
    const int q1 = max(-128, min(127, __float2int_rn(__fmul_rn(v[j].y, id))));
    const int q2 = max(-128, min(127, __float2int_rn(__fmul_rn(v[j].z, id))));
    const int q3 = max(-128, min(127, __float2int_rn(__fmul_rn(v[j].w, id))));
    int sum = q0 + q1 + q2 + q3;
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (g < groups) {
      reinterpret_cast<uint32_t*>(xq)[XHalves::word(g, groups)] =
          (uint32_t(q0) & 0xFFu) | (uint32_t(q1) & 0xFFu) << 8 | (uint32_t(q2) & 0xFFu) << 16 | uint32_t(q3) << 24;
      if ((lane & 7) == 0) xd[g / 8] = make_float2(d, d * float(sum));
    }
  }
}

// Bytes of shared memory a stage gives one part's (gate's or up's) scales:
// TO rows of drow bytes, copied as the 16-byte aligned range around them
// (rows of Q6_K scales need not be 16-byte multiples: K = 11008 gives 86).
__host__ __device__ constexpr int64_t d_slot(int64_t TO, int64_t drow) {
  return drow == 0 ? 0 : (TO * drow + 15) / 16 * 16 + (drow % 16 != 0 ? 16 : 0);
}

// Tile t: output rows t TO .. t TO + TO - 1 (TO = TR, or TR / 2 for SwiGLU,
// whose tile holds those gate rows, then their up rows).
// Shared memory: `stages` stages of TR rows (their blocks, then a d slot
// a part), then, when X is quantised here, its K int8 values and K / 32 (dx, sx).
template <class F, int E, int G>
__global__ void __launch_bounds__(kThreads, 2) gemv_q8_stream(const uint8_t* __restrict__ qs,
                                                           const uint16_t* __restrict__ wd, int64_t N, int64_t K,
                                                           // X, given or to quantise, is an earlier kernel's
                                                           // output: no __restrict__ (pdl.cuh)
                                                           const int8_t* xq_in, const float2* xd_in, const float* x,
                                                           const float* __restrict__ gamma, float eps,
                                                           float* __restrict__ y, int TR, int WPR, int stages,
                                                           RopeRow rr) {
  constexpr int R = GemvQ8Args::gated(E) ? 2 : 1;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxStages];
  __shared__ float red[2][2 * kWarps];  // a sum per row and warp of it: TR x WPR <= 2 kWarps
  __shared__ double part[kWarps];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t rows = GemvQ8Args::gated(E) ? N / 2 : N;
  const int64_t nb = K / F::kBlock, qrow = nb * F::kQB, drow = F::kD ? nb * 2 : 0, units = nb * F::kUnits;
  const int TO = TR / R;
  const int64_t dslot = d_slot(TO, drow);
  // Tile i of this CTA: output rows o0 .. o0 + cnt - 1, tiles c, c + grid, ...
  const int64_t tiles = (rows + TO - 1) / TO;
  const int64_t mine = tiles > int64_t(blockIdx.x) ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : 0;
  auto tile_start = [&](int64_t i) { return (int64_t(blockIdx.x) + i * gridDim.x) * TO; };
  const int64_t stage_bytes = int64_t(TR) * qrow + R * dslot;
  const uint8_t* wdb = reinterpret_cast<const uint8_t*>(wd);
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) bulk::bar_init(&full[s]);
    bulk::fence_proxy_async();  // the barriers, as the bulk copies see them
  }
  __syncthreads();
  const uint64_t policy = bulk::evict_first();
  // Thread 0: the bulk copies of this CTA's i-th tile into stage i % stages.
  // A part's scales come as the 16-byte aligned range around them, starting
  // (n0 drow) % 16 bytes before them (the launcher checked N drow % 16 == 0,
  // so the range ends inside wd).
  auto issue = [&](int64_t i, int slot) {  // slot = i % stages
    const int64_t o0 = tile_start(i);
    const int64_t cnt = rows - o0 < TO ? rows - o0 : TO;
    uint8_t* st = smem + slot * stage_bytes;
    uint64_t* bar = &full[slot];
    int64_t dlen[R], dfrom[R], bytes = 0;
#pragma unroll
    for (int p = 0; p < R; ++p) {
      const int64_t f = (o0 + p * rows) * drow;
      dfrom[p] = f - (f & 15);
      dlen[p] = F::kD ? ((f & 15) + cnt * drow + 15) / 16 * 16 : 0;
      bytes += cnt * qrow + dlen[p];
    }
    bulk::bar_expect(bar, uint32_t(bytes));
#pragma unroll
    for (int p = 0; p < R; ++p) {
      bulk::copy(st + p * TO * qrow, qs + (o0 + p * rows) * qrow, uint32_t(cnt * qrow), bar, policy);
      if (F::kD) bulk::copy(st + TR * qrow + p * dslot, wdb + dfrom[p], uint32_t(dlen[p]), bar, policy);
    }
  };
  pdl_trigger();
  if (tid == 0)
    for (int i = 0; i < mine && i < stages; ++i) issue(i, i);
  float4 gv[G > 0 ? G : 1];  // gamma is a weight: loaded before the wait
  if constexpr (G > 0)
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const int64_t g = int64_t(j) * kThreads + tid;
      gv[j] = gamma && g < K / 4 ? *reinterpret_cast<const float4*>(gamma + 4 * g) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  pdl_wait();

  const int8_t* xq = xq_in;
  const float2* xd = xd_in;
  int64_t rope_pos = 0;  // the token's position, for the RoPE epilogue
  if constexpr (E == kRopeRow) rope_pos = *rr.pos;
  if constexpr (G > 0) {
    int8_t* sq = reinterpret_cast<int8_t*>(smem + stages * stage_bytes);
    float2* sd = reinterpret_cast<float2*>(sq + (K + 15) / 16 * 16);
    quantize_x<G>(x, gamma != nullptr, gv, eps, K, sq, sd, part);
    __syncthreads();
    xq = sq, xd = sd;
  }
  const auto xs = [&] {  // X's halves: quantised here (shared memory) or given
    if constexpr (G > 0) return XHalves{reinterpret_cast<const int4*>(xq), int(K / 32)};
    else return XPairs{reinterpret_cast<const int4*>(xq)};
  }();

  // WPR warps a row (the plan's). Warp w takes rows g and g + kWarps / WPR
  // of the tile, g = w / WPR (RPW = TR WPR / kWarps of them: 1 for the
  // blocks of 32, 1 or 2 for the K-quants, whose lane keeps one unit in
  // every tile, so that its X, read once into registers, meets both rows;
  // the blocks of 32 read X from shared memory or L1 each time, as their
  // lanes take several).
  const int groups = kWarps / WPR, RPW = TR / groups, slice = warp % WPR, rg = warp / WPR;
  const int ku = slice * 32 + lane, nu = int(units);
  // This warp's rows are the same in every tile: their part (gate / up),
  // output row and offsets in a stage are worked out once, here (in the
  // loop they cost about as many instructions as a tile's arithmetic: two
  // integer divisions and 64-bit products a row). A stage is < 2^31 bytes
  // (the plan's), and (o0 + p rows) drow mod 16 survives 32-bit wrap-around.
  int row[2], part_of[2], out_of[2];
  uint32_t q_at[2], d_at[2], d_lead[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    row[k] = rg + k * groups, part_of[k] = row[k] / TO, out_of[k] = row[k] % TO;
    q_at[k] = uint32_t(row[k]) * uint32_t(qrow);  // rows lie in the stage in tile order
    d_at[k] = uint32_t(TR) * uint32_t(qrow) + uint32_t(part_of[k]) * uint32_t(dslot) + uint32_t(out_of[k]) * uint32_t(drow);
    d_lead[k] = uint32_t(part_of[k]) * uint32_t(rows);  // (o0 + this) drow mod 16: the part's scales' lead-in
  }
  KX kx;
  if constexpr (F::kUnits > 1)
    if (ku < nu) F::load_x(xs, xd, ku, kx);
  int s = 0;
  uint32_t phase = 0;
  for (int64_t i = 0; i < mine; ++i) {
    bulk::bar_wait(&full[s], phase);
    const int64_t o0 = tile_start(i);
    const int cnt = int(rows - o0 < TO ? rows - o0 : TO);
    const uint8_t* st = smem + s * stage_bytes;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (k >= RPW) break;
      const int r = row[k];
      float acc = 0.0f;
      if (out_of[k] < cnt) {
        const uint8_t* q = st + q_at[k];
        const uint16_t* d = reinterpret_cast<const uint16_t*>(
            st + d_at[k] + (((uint32_t(o0) + d_lead[k]) * uint32_t(drow)) & 15u));
        if constexpr (F::kUnits > 1) {
          if (ku < nu) acc = F::unit_dot(q, d, ku, kx);
        } else {
          for (int u = ku; u < nu; u += 32 * WPR) acc += F::unit_dot(q, d, u, xs, xd);
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
      if (lane == 0) red[i & 1][r * WPR + slice] = acc;
    }
    __syncthreads();  // stage s is read by every warp; red[i & 1] is whole
    if (tid == 0 && i + stages < mine) {
      bulk::fence_proxy_async();
      issue(i + stages, s);
    }
    if (++s == stages) s = 0, phase ^= 1u;
    // The tile's rows are finished by the last warp, in its lanes (TO <= 32):
    // warp 0 has the refill to issue, and the next tile's barrier waits for
    // the slower of the two.
    if (warp == kWarps - 1) {
      float g = 0.0f, u = 0.0f;
      if (lane < cnt) {  // red[i & 1] is written again two tiles on, after this warp's next sync
        for (int k = 0; k < WPR; ++k) g += red[i & 1][lane * WPR + k];
        if constexpr (R == 2)
          for (int k = 0; k < WPR; ++k) u += red[i & 1][(TO + lane) * WPR + k];
      }
      if constexpr (E == kRopeRow) {
        // Each RoPE pair (2k, 2k + 1) in two neighbouring lanes (TO even, tiles start even).
        const float other = __shfl_xor_sync(0xffffffffu, g, 1);
        if (lane < cnt) rope_row_store(rr, rope_pos, o0 + lane, g, other);
      } else if (lane < cnt) {
        q8act::epilogue<E>(y + o0 + lane, g, u);
      }
    }
  }
}

// The tile and ring for a call: TR rows a tile and WPR warps a row (blocks
// of 32: TR the largest power of two up to kWarps whose stage fits
// kStageCap, WPR = kWarps / TR; K-quants: WPR what one unit a lane needs,
// TR = 2 kWarps / WPR, or kWarps / WPR where that stage would pass
// kStageCap), as many stages as kRingBudget holds (2 to kMaxStages).
struct Plan {
  int TR = 0, WPR = 0, stages = 0;
  int64_t stage_bytes = 0;
  size_t smem = 0;
};

template <class F>
Plan plan_for(const GemvQ8Args& a) {
  const int R = GemvQ8Args::gated(a.epilogue) ? 2 : 1;
  const int64_t nb = a.K / F::kBlock, qrow = nb * F::kQB, drow = F::kD ? nb * 2 : 0;
  auto stage = [&](int TR) { return int64_t(TR) * qrow + R * d_slot(TR / R, drow); };
  Plan p;
  p.TR = kWarps;
  if constexpr (F::kUnits > 1) {
    // K-quants: WPR warps a row for one unit a lane (none: K too long),
    // two rows a warp where a stage of them fits (the kernel's RPW).
    p.WPR = 1;
    while (32 * p.WPR < nb * F::kUnits) p.WPR *= 2;
    const int G = kWarps / p.WPR;
    if (p.WPR > kWarps || G < R) return Plan{};
    p.TR = stage(2 * G) <= kStageCap ? 2 * G : G;
  } else {
    while (p.TR > R && stage(p.TR) > kStageCap) p.TR /= 2;
    p.WPR = kWarps / p.TR;
  }
  p.stage_bytes = stage(p.TR);
  p.stages = int(std::min<int64_t>(kMaxStages, std::max<int64_t>(2, kRingBudget / p.stage_bytes)));
  p.smem = size_t(p.stages * p.stage_bytes);
  if (a.x) p.smem += size_t((a.K + 15) / 16 * 16 + a.K / 32 * 8);
  return p;
}

// Opts a kernel into all the dynamic shared memory a CTA may have, once a device.
template <class F, int E, int G>
cudaError_t allow_smem() {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  cudaFuncAttributes fa;
  if (cudaError_t e = cudaFuncGetAttributes(&fa, gemv_q8_stream<F, E, G>)) return e;
  const int bytes = max_smem_per_block() - int(fa.sharedSizeBytes);
  if (cudaError_t e = cudaFuncSetAttribute(gemv_q8_stream<F, E, G>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))
    return e;
  done.fetch_or(bit, std::memory_order_acq_rel);
  return cudaSuccess;
}

// The RoPE epilogue's arguments (empty without a.rope).
RopeRow rope_row(const GemvQ8Args& a) {
  RopeRow r{};
  const RopeKvAppendArgs& k = a.rope;
  if (k.n > 0) {
    r.pos = k.pos, r.cos_t = k.cos_t, r.sin_t = k.sin_t, r.qt = k.qt;
    r.k_cache = k.k_cache, r.v_cache = k.v_cache;
    r.D = k.D, r.C = k.C, r.Dq = k.H * k.D, r.Dkv = k.Hkv * k.D;
    r.f16 = k.cache == TC_DTYPE_F16;
  }
  return r;
}

template <class F, int E, int G>
cudaError_t launch_g(const GemvQ8Args& a, const Plan& p, cudaStream_t st) {
  if (cudaError_t e = allow_smem<F, E, G>()) return e;
  int per_sm = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gemv_q8_stream<F, E, G>, kThreads, p.smem))
    return e;
  const int64_t rows = GemvQ8Args::gated(E) ? a.N / 2 : a.N;
  const int64_t TO = GemvQ8Args::gated(E) ? p.TR / 2 : p.TR;
  const int64_t tiles = (rows + TO - 1) / TO;
  const unsigned grid = unsigned(std::min<int64_t>(tiles, int64_t(std::max(per_sm, 1)) * sm_count()));
  if (grid == 0) return cudaSuccess;
  return launch_pdl(gemv_q8_stream<F, E, G>, dim3(grid), dim3(kThreads), p.smem, st, static_cast<const uint8_t*>(a.w),
                    a.wd, a.N, a.K, a.xq, reinterpret_cast<const float2*>(a.xd), a.x, a.gamma, a.eps, a.y, p.TR,
                    p.WPR, p.stages, rope_row(a));
}

// X quantised here: two groups of 4 values a thread hold all of it. Longer
// rows of X are quantised by quantize_q8 first: on the H200, the 7B's down
// product (K = 11008) quantising its own X took 14.5 us against 12.7 for
// quantize_q8 and the product, where [gate; up] (K = 4096) took 17.7 against 20.0.
constexpr int kQuantGroups = 2;
constexpr int64_t kMaxQuantK = kQuantGroups * 4 * kThreads;

template <class F, int E>
cudaError_t launch_e(const GemvQ8Args& a, const Plan& p, cudaStream_t st) {
  return a.x ? launch_g<F, E, kQuantGroups>(a, p, st) : launch_g<F, E, 0>(a, p, st);
}

template <class F>
cudaError_t launch_f(const GemvQ8Args& a, const Plan& p, cudaStream_t st) {
  if (a.epilogue == GemvQ8Args::kSwiglu) return launch_e<F, GemvQ8Args::kSwiglu>(a, p, st);
  if (a.epilogue == GemvQ8Args::kGeglu) return launch_e<F, GemvQ8Args::kGeglu>(a, p, st);
  if (a.rope.n > 0) return launch_e<F, kRopeRow>(a, p, st);
  if (a.epilogue == GemvQ8Args::kAdd) return launch_e<F, GemvQ8Args::kAdd>(a, p, st);
  return launch_e<F, GemvQ8Args::kStore>(a, p, st);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Whether the RoPE epilogue takes a.rope: one token whose [q | k | v] row is
// this product's y, interleaved pairs (each inside a tile: TR and D even),
// no biases or Q/K norms, an f16 or f32 cache of one sequence.
bool rope_row_fits(const GemvQ8Args& a, const Plan& p) {
  const RopeKvAppendArgs& r = a.rope;
  const int64_t Dq = r.H * r.D, Dkv = r.Hkv * r.D;
  return r.n == 1 && !r.neox && !r.slots && r.pos && !r.bq && !r.bk && !r.bv && !r.q_norm && !r.k_norm &&
         (r.cache == TC_DTYPE_F16 || r.cache == TC_DTYPE_F32) &&
         r.D % 2 == 0 && p.TR % 2 == 0 && a.N == Dq + 2 * Dkv && r.q == a.y && r.k == a.y + Dq &&
         r.v == a.y + Dq + Dkv;
}

// fn(F{}) with the format's traits; false for a format the kernel does not take.
template <class Fn>
bool with_format(int32_t fmt, Fn&& fn) {
  switch (fmt) {
    case quant::Q4_0: fn(Q4_0{}); return true;
    case quant::Q8_0: fn(Q8_0{}); return true;
    case quant::Q4_1: fn(Q4_1{}); return true;
    case quant::Q5_1: fn(Q5_1{}); return true;
    case quant::Q4_K: fn(Q4_K{}); return true;
    case quant::Q5_K: fn(Q5_K{}); return true;
    case quant::Q6_K: fn(Q6_K{}); return true;
    default: return false;
  }
}

}  // namespace q8stream
}  // namespace

bool gemv_q8_stream_fits(const GemvQ8Args& a) {
  using namespace q8stream;
  if (!config::on(config::Key::kCudaQ8Stream)) return false;
  if (a.M != 1 || a.xh || a.K % 256 != 0 || a.K <= 0 || !aligned16(a.w)) return false;
  bool split = false;
  int64_t drow = 0;
  Plan plan;
  const bool known = with_format(a.fmt, [&](auto f) {
    using F = decltype(f);
    split = F::kD, drow = F::kD ? a.K / F::kBlock * 2 : 0, plan = plan_for<F>(a);
  });
  // The split layout's scales (Q4_0, Q8_0, Q6_K) 16-byte aligned, and the
  // aligned range around a tile's ending inside them.
  if (!known || split != (a.wd != nullptr) || (split && (!aligned16(a.wd) || a.N * drow % 16 != 0))) return false;
  if (GemvQ8Args::gated(a.epilogue) && a.N % 2 != 0) return false;
  if (a.x) {
    // X apart from Y (every CTA reads all of X while others write Y): check_gemv_q8 refuses an overlap.
    if (a.K > kMaxQuantK || !aligned16(a.x) || (a.gamma && !aligned16(a.gamma))) return false;
  } else if (!aligned16(a.xq) || reinterpret_cast<uintptr_t>(a.xd) % 8 != 0) {
    return false;
  }
  if (a.rope.n > 0 && !rope_row_fits(a, plan)) return false;
  return plan.TR > 0 && int64_t(plan.smem) + 1024 <= max_smem_per_block();  // + the kernel's static shared memory
}

cudaError_t launch_gemv_q8_stream(const GemvQ8Args& a, cudaStream_t st) {
  using namespace q8stream;
  cudaError_t e = cudaErrorInvalidValue;
  with_format(a.fmt, [&](auto f) {
    using F = decltype(f);
    e = launch_f<F>(a, plan_for<F>(a), st);
  });
  return e;
}

}  // namespace cuda
}  // namespace tc
