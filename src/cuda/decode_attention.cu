// The decode attention on the GPU (core/backend.h, "model ops"; the CPU
// kernel is src/cpu/decode_attention.cpp and computes the same values):
//
//   decode_attention: one query row per head over the S cache rows
//                     [j0, *pos] (j0 = 0, or *pos + 1 - window), split over
//                     them (flash-decoding), in base 2 (t_j = log2(e) scale
//                     q . K_j, or log2(e) cap tanh(scale q . K_j / cap) with
//                     soft-capping); K and V rows f32, f16 or Q8_0 (widened
//                     exactly as they are loaded, the sums in f32 either way;
//                     a lane's 4 dims of a Q8_0 row are 4 codes of one block,
//                     two 2-byte loads and the block's f16 d, value q d):
//       piece s covers rows [s c, (s+1) c), c from S and the cache's size
//       (attn_piece: 16 positions or more, about S / 64 at depth, rounded up
//       to whole block iterations, 4 warps x keys per warp; mma_piece: S /
//       wave rounded up to 64), so the pieces in use, ceil(S / c) <= splits,
//       share the rows evenly whatever S is:
//         m_s = max_j t_j,  l_s = sum_j 2^(t_j - m_s),  u_s = sum_j 2^(t_j - m_s) V_j
//       combine: M = max_s m_s,  o = sum_s 2^(m_s - M) u_s / sum_s 2^(m_s - M) l_s,
//       by the last block of a head's pieces to finish (each counts itself
//       in `arrivals` after a fence; the last sees every piece's results):
//       one kernel, so no launch boundary in the step between the two. With
//       oq, o quantised per block of 32 as quantize_q8 would (8 lanes a
//       block: the wo product then needs no quantize_q8 launch)
//     Work split, an f16 cache of 64-, 128- or 256-dim rows (the default
//     cache of the LLaMA, Qwen and Gemma shapes): the tensor-core kernel
//     (decode_attention_mma), block
//     (piece, up to 4 query heads of one kv group), each warp 16 keys a step
//     as two chains of m16n8k16 products (scores, then P V), q and the
//     softmax weights each split into two f16 halves so that the products
//     keep f32-level accuracy; pieces of S / wave positions, wave pieces a
//     head group filling the GPU's resident blocks once. Otherwise (f32 or
//     Q8_0 caches, other head dims) block (piece, up to 8 query heads of one
//     kv group, so K/V are read once for them); a key row is spread over D/4
//     lanes (rounded up to a power of two, at most 32; float4 loads when D %
//     4 == 0, each lane holding its dims of q), so a warp takes 32 / lanes
//     keys at a time, several such steps' loads in flight, a short shuffle
//     tree per score and an online softmax per lane slot with V accumulated
//     in registers. Either way the warps' states merge once through shared
//     memory. partial holds u [H][splits][D]
//     then (m, l) [H][splits][2]. The grid covers the most pieces any S can
//     use (from C, fixed at load) and blocks past the pieces in use exit: the
//     launch does not depend on the position, so it can be recorded once in
//     a graph and replayed. Every sum runs in a fixed order (whichever block
//     combines): same inputs, same bits. A batch step's n rows (each its own
//     slot and position) are the grid's third dimension; partial then holds
//     u [n][H][splits][D] and (m, l) [n][H][splits][2].
// Every position comes from device memory, never from the host.
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/kv_cache.cuh"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q8_block.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {

using namespace tc::quant;

struct AttnParams {
  int64_t H, Hkv, D, C, splits, window;
  int64_t coarse;  // the cache's pieces of 64 positions, at most splits (attn_piece)
  float scale;  // scale * log2(e): scores in base 2; without log2(e) when cap > 0
  float cap;    // soft-capping: t = log2(e) cap tanh(scale q . k / cap); 0: none
  int lanes;    // lanes per key row (a power of two <= 32)
  int ks;       // keys per block iteration: pieces are multiples of it
  int heads;    // query heads a block (the tensor-core kernel: 1 to 4)
  int64_t wave;  // the tensor-core kernel: pieces a head group aims at (mma_piece)
  const int32_t* pos;
  const float* q;
  const void *k_cache, *v_cache;
  float *o, *partial;
  int64_t n;             // query rows (blockIdx.z)
  const int32_t* slots;  // [n]: row i at pos[i] of slot slots[i]; null: one row at *pos of slot 0
  int64_t slot_stride;
  int8_t* oq;  // or null: o also quantised per block of 32 (DecodeAttentionArgs::oq)
  float2* od;
  uint32_t* arrivals;  // [n][H]: pieces of a head group done (DecodeAttentionArgs::arrivals)
};

constexpr int kAttnThreads = 128;
constexpr int kWarps = kAttnThreads / 32;
// Keys each lane slot loads at once: 4 with one head and one float4 per lane,
// 2 when the query heads and the accumulators take more registers.
__host__ __device__ constexpr int attn_unroll(int R, int GT) { return R * GT == 1 ? 4 : 2; }
// Blocks an SM must hold: 8 (64 registers a thread) for one float4 and one
// head a lane, whose key loop fits in them; without the bound the combine
// at the kernel's end lifted the Q8_0 kernel to 80 registers (6 blocks an
// SM) and it decoded 11% slower at depth 4096, its loads being what bounds it.
__host__ __device__ constexpr int attn_min_blocks(int R, int GT) { return R * GT == 1 ? 8 : 1; }
// Fewer split blocks than this (about two per SM of an H200) and a block
// takes fewer heads of a group: re-reading K/V from L2 costs less than idle SMs.
constexpr int64_t kAttnMinBlocks = 256;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The piece length for S positions: as long as a piece of one of `coarse`
// equal pieces (ceil(C / 64) for a cache of C rows, at most splits), but
// no longer than S / 64 and at least 16 positions: a short context comes in short pieces
// whatever the cache's size (each piece's key steps run one after the
// other, so there latency bounds the kernel, not bytes; on an H100 pieces
// of 16 instead of 64 at ~530 positions of a 648-row cache decoded 2.7-2.8%
// faster), and at depth the pieces are the 64-position ones. Never fewer
// positions than ceil(S / splits); rounded up to whole iterations of a
// block (ks positions), so every piece but the last is full and the pieces
// in use are ceil(S / piece) <= splits (the last block to finish counts
// them from the same *pos).
__device__ __forceinline__ int64_t attn_piece(int64_t S, int64_t coarse, int64_t splits, int ks) {
  int64_t per = (S + coarse - 1) / coarse;
  if (per > (S + 63) / 64) per = (S + 63) / 64;
  if (per < 16) per = 16;
  // Already so for S <= C; kept as the bound of the partial results' writes.
  if (per < (S + splits - 1) / splits) per = (S + splits - 1) / splits;
  return (per + ks - 1) / ks * ks;
}

// The tensor-core kernel's piece length for S positions: S / wave rounded up
// to whole block steps (16 keys for each of the 4 warps), where wave pieces
// a head group fill the GPU's resident blocks once (so a deep context is
// read in one wave of blocks, each several steps a warp, and the combine
// has few pieces); never fewer positions than ceil(S / splits), so the
// pieces in use fit the grid. A shorter piece would leave warps of its
// block idle and only add pieces to combine.
__device__ __forceinline__ int64_t mma_piece(int64_t S, int64_t wave, int64_t splits) {
  constexpr int64_t step = 16 * kWarps;
  int64_t per = (S + wave - 1) / wave;
  if (per < (S + splits - 1) / splits) per = (S + splits - 1) / splits;
  return (per + step - 1) / step * step;
}

// The first cache row a query at position pos sees (a sliding window keeps
// the last `window` rows).
__device__ __forceinline__ int64_t attn_first(int32_t pos, int64_t window) {
  return window > 0 && int64_t(pos) + 1 > window ? int64_t(pos) + 1 - window : 0;
}

// Dims 4v .. 4v + 3 of a row: one 16-byte load (f32) or 8-byte load (f16) on
// the vector path (D % 4 == 0, rows aligned), four guarded scalar loads
// otherwise (zero past D).
__device__ __forceinline__ float elem(const __half* row, int d) { return __half2float(row[d]); }
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* row, int v, int D) {
  if (kVec) return reinterpret_cast<const float4*>(row)[v];
  const int d = 4 * v;
  return make_float4(d < D ? row[d] : 0.0f, d + 1 < D ? row[d + 1] : 0.0f, d + 2 < D ? row[d + 2] : 0.0f,
                     d + 3 < D ? row[d + 3] : 0.0f);
}
template <bool kVec>
__device__ __forceinline__ float4 load4(const __half* row, int v, int D) {
  if (kVec) {
    const uint2 u = reinterpret_cast<const uint2*>(row)[v];
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
  const int d = 4 * v;
  return make_float4(d < D ? elem(row, d) : 0.0f, d + 1 < D ? elem(row, d + 1) : 0.0f,
                     d + 2 < D ? elem(row, d + 2) : 0.0f, d + 3 < D ? elem(row, d + 3) : 0.0f);
}
// Dims 4v .. 4v + 3 of a Q8_0 row: codes 4 (v % 8) .. +3 of block v / 8,
// at any 2-byte alignment (blocks are 34 bytes), times the block's d.
template <bool kVec>
__device__ __forceinline__ float4 load4(const Q8Cache* row, int v, int) {
  const uint8_t* blk = reinterpret_cast<const uint8_t*>(row) + (v / 8) * int(sizeof(BlockQ8_0));
  const unsigned short* qs = reinterpret_cast<const unsigned short*>(blk + 2 + 4 * (v % 8));
  const uint32_t biased = (uint32_t(qs[0]) | uint32_t(qs[1]) << 16) ^ 0x80808080u;
  const float d = h2f(*reinterpret_cast<const uint16_t*>(blk));
  return make_float4(__fmul_rn(q8_code(biased, 0), d), __fmul_rn(q8_code(biased, 1), d),
                     __fmul_rn(q8_code(biased, 2), d), __fmul_rn(q8_code(biased, 3), d));
}
__device__ __forceinline__ float dot4(float4 a, float4 b, float s) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, s))));
}
__device__ __forceinline__ float4 axpy4(float p, float4 x, float4 y) {
  return make_float4(fmaf(p, x.x, y.x), fmaf(p, x.y, y.y), fmaf(p, x.z, y.z), fmaf(p, x.w, y.w));
}
__device__ __forceinline__ float4 scale4(float c, float4 x) { return make_float4(c * x.x, c * x.y, c * x.z, c * x.w); }
__device__ __forceinline__ float comp(float4 x, int c) { return c == 0 ? x.x : c == 1 ? x.y : c == 2 ? x.z : x.w; }
__device__ __forceinline__ uint32_t comp(uint4 x, int c) { return c == 0 ? x.x : c == 1 ? x.y : c == 2 ? x.z : x.w; }

// Heads h0 .. h0 + gt - 1 of row `row`: o = sum_s 2^(m_s - M) u_s / sum_s
// 2^(m_s - M) l_s over the `used` pieces (base 2, as the pieces wrote them),
// by the whole block. Warp w weighs heads w, w + 4, ... (wgt [gt][used],
// then 1 / l [gt], in shared memory); then each thread takes four dims of a
// head (float4 loads of the pieces, eight in flight) where D % 4 == 0, one
// otherwise; the sums run in piece order. The partial results were written
// by other blocks: read from L2 (__ldcg), never from this SM's L1.
__device__ void combine_heads(const AttnParams& a, int64_t row, int64_t h0, int gt, int64_t used, float* smem) {
  const int64_t D = a.D, splits = a.splits;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* wgt = smem;
  float* inv = smem + gt * used;
  for (int gi = w; gi < gt; gi += kWarps) {
    const float* pml = a.partial + a.n * a.H * splits * D + (row * a.H + h0 + gi) * splits * 2;
    float M = -FLT_MAX;
    for (int64_t s = lane; s < used; s += 32) M = fmaxf(M, __ldcg(pml + 2 * s));
    M = warp_max(M);
    float lsum = 0.0f;
    for (int64_t s = lane; s < used; s += 32) {
      const float f = exp2f(__ldcg(pml + 2 * s) - M);
      wgt[gi * used + s] = f;
      lsum = fmaf(f, __ldcg(pml + 2 * s + 1), lsum);
    }
    lsum = warp_sum(lsum);
    if (lane == 0) inv[gi] = 1.0f / lsum;
  }
  __syncthreads();
  if (D % 4 == 0 && reinterpret_cast<uintptr_t>(a.partial) % 16 == 0) {
    // With oq (D a multiple of 32) 8 lanes hold a block of 32 of o and
    // quantise it as quantize_q8 would (q8act): e's groups of 8 are whole.
    const int64_t quads = D / 4;
    for (int64_t e = threadIdx.x; e < gt * quads; e += kAttnThreads) {
      const int gi = int(e / quads);
      const int64_t d = 4 * (e % quads), hr = row * a.H + h0 + gi;
      const float* pu = a.partial + hr * splits * D + d;
      const float* f = wgt + gi * used;
      float4 acc = make_float4(0, 0, 0, 0);
      int64_t s = 0;
      for (; s + 8 <= used; s += 8) {
        float4 u[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) u[k] = __ldcg(reinterpret_cast<const float4*>(pu + (s + k) * D));
#pragma unroll
        for (int k = 0; k < 8; ++k) acc = axpy4(f[s + k], u[k], acc);
      }
      for (; s < used; ++s) acc = axpy4(f[s], __ldcg(reinterpret_cast<const float4*>(pu + s * D)), acc);
      const float4 o = scale4(inv[gi], acc);
      *reinterpret_cast<float4*>(a.o + hr * D + d) = o;
      if (a.oq) {
        const float x[4] = {o.x, o.y, o.z, o.w};
        q8act::quantize_block_lanes<4>(x, lane & 7, 0xffu << (lane & 24), a.oq + hr * D + (d & ~int64_t(31)),
                                       a.od + (hr * D + d) / 32);
      }
    }
    return;
  }
  for (int gi = 0; gi < gt; ++gi) {
    const int64_t hr = row * a.H + h0 + gi;
    const float* pu = a.partial + hr * splits * D;
    const float* f = wgt + gi * used;
    // Whole warps per pass: with oq (D a multiple of 32) warp w's 32 dims
    // are one block of 32 of o.
    for (int64_t d0 = 0; d0 < D; d0 += kAttnThreads) {
      const int64_t d = d0 + threadIdx.x;
      float o = 0.0f;
      if (d < D) {
        for (int64_t s = 0; s < used; ++s) o = fmaf(f[s], __ldcg(pu + s * D + d), o);
        o *= inv[gi];
        a.o[hr * D + d] = o;
      }
      const int64_t b0 = d0 + (threadIdx.x & ~31);  // the warp's first dim
      if (a.oq && b0 < D) q8act::quantize_block(o, lane, a.oq + hr * D + b0, a.od + (hr * D + b0) / 32);
    }
  }
}

// The end of a piece (blocks of either kernel): the block's NS slot states,
// ml [NS][gt][2] then u [NS][gt][D] in shared memory (written before the
// caller's barrier), merge in a fixed order into the piece's partial result,
// one output element per thread:
//   M = max m_s,  l = sum l_s e^(m_s - M),  u = sum u_s e^(m_s - M).
// Then the last of the `used` pieces to get here combines the heads h0 ..
// h0 + gt - 1: each block publishes its results (fence) before it counts
// itself in, so the one that counts `used` sees them all. It also sets the
// count back to 0 for the next call (every piece of this one has counted).
__device__ __forceinline__ void finish_piece(const AttnParams& a, int NS, int gt, int64_t row, int64_t h0,
                                             int64_t piece, int64_t used, float* smem) {
  const int64_t splits = a.splits, D = a.D;
  const float* sm_ml = smem;
  const float* sm_u = smem + NS * gt * 2;
  float* pu = a.partial;
  float* pml = a.partial + a.n * a.H * splits * D;
  for (int e = threadIdx.x; e < gt * D; e += kAttnThreads) {
    const int gi = e / int(D), d = e % int(D);
    float M = -FLT_MAX;
    for (int i = 0; i < NS; ++i) M = fmaxf(M, sm_ml[(i * gt + gi) * 2]);
    float lsum = 0.0f, usum = 0.0f;
    for (int i = 0; i < NS; ++i) {
      const float f = exp2f(sm_ml[(i * gt + gi) * 2] - M);
      lsum = fmaf(sm_ml[(i * gt + gi) * 2 + 1], f, lsum);
      usum = fmaf(sm_u[(i * gt + gi) * D + d], f, usum);
    }
    const int64_t at = (row * a.H + h0 + gi) * splits + piece;
    pu[at * D + d] = usum;
    if (d == 0) pml[at * 2] = M, pml[at * 2 + 1] = lsum;
  }
  __shared__ uint32_t arrived;
  __syncthreads();  // every thread's results are written
  if (threadIdx.x == 0) {
    __threadfence();
    uint32_t* count = a.arrivals + row * a.H + h0;
    arrived = atomicAdd(count, 1u) + 1u;
    if (arrived == uint32_t(used)) *count = 0u;
  }
  __syncthreads();
  if (arrived != uint32_t(used)) return;
  __threadfence();
  combine_heads(a, row, h0, gt, used, smem);
}

// Block (piece blockIdx.x, heads h0 .. h0 + GT - 1 of one kv group, h0 =
// blockIdx.y GT), four warps. A key row is held by L lanes (L = lanes, a
// power of two), lane t owning dims 4 (t + L r) .. +3 for r < R, so a warp
// takes 32 / L keys side by side and U such steps at once (all 2 U R loads
// issued before any is used). Per key: R float4 dot products per head, a
// log2(L) shuffle tree, then the online softmax of the lane's key slot:
//   m' = max(m, t_u),  l = l e^(m - m') + sum_u e^(t_u - m'),
//   acc = acc e^(m - m') + sum_u e^(t_u - m') V_u        (t = scale q . K)
// in base 2 (q is prescaled by scale log2 e). The 4 (32 / L) slot states meet
// once, in shared memory, at the end of the piece. Masked keys (past the
// piece) load nothing and weigh 0; a slot that saw none keeps m = -FLT_MAX,
// l = 0, acc = 0 and drops out of the merge (its weight e^(-FLT_MAX - M) = 0).
template <typename T, int R, int GT, bool kVec>
__global__ void __launch_bounds__(kAttnThreads, attn_min_blocks(R, GT)) decode_attention_split(AttnParams a) {
  constexpr int U = attn_unroll(R, GT);
  extern __shared__ float smem[];
  pdl_trigger();
  pdl_wait();
  const int D = int(a.D), NV = (D + 3) / 4, L = a.lanes, KPW = 32 / L;
  const int64_t row = blockIdx.z;
  const int32_t pos = row_pos(a.pos, a.slots, row);
  const int64_t first = attn_first(pos, a.window), S = int64_t(pos) + 1 - first, piece = blockIdx.x,
                chunk = attn_piece(S, a.coarse, a.splits, a.ks);
  const int64_t j0 = piece * chunk;
  if (j0 >= S) return;  // beyond the pieces in use: the combine reads none of it
  const int64_t j1 = min(j0 + chunk, S);
  const int64_t h0 = int64_t(blockIdx.y) * GT, g = h0 / (a.H / a.Hkv);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / L, t = lane % L;
  const int64_t slot = row_slot(a.slots, a.slot_stride, row);
  const T* K = cache_at(static_cast<const T*>(a.k_cache), slot + (g * a.C + first) * D);
  const T* V = cache_at(static_cast<const T*>(a.v_cache), slot + (g * a.C + first) * D);

  float4 q[GT][R], acc[GT][R];
  float m[GT], l[GT];
#pragma unroll
  for (int gi = 0; gi < GT; ++gi) {
    m[gi] = -FLT_MAX, l[gi] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int v = t + L * r;
      q[gi][r] = v < NV ? scale4(a.scale, load4<kVec>(a.q + ((h0 + gi) * a.n + row) * D, v, D))
                        : make_float4(0, 0, 0, 0);
      acc[gi][r] = make_float4(0, 0, 0, 0);
    }
  }

  const int step = KPW * U;  // keys per warp iteration
  for (int64_t jb = j0 + int64_t(w) * step; jb < j1; jb += int64_t(kWarps) * step) {  // warp-uniform
    float4 kr[U][R], vr[U][R];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = jb + u * KPW + sub;
      ok[u] = j < j1;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int v = t + L * r;
        const bool in = ok[u] && v < NV;
        kr[u][r] = in ? load4<kVec>(cache_at(K, j * D), v, D) : make_float4(0, 0, 0, 0);
        vr[u][r] = in ? load4<kVec>(cache_at(V, j * D), v, D) : make_float4(0, 0, 0, 0);
      }
    }
    float s[U][GT];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int gi = 0; gi < GT; ++gi) {
        float x = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) x = dot4(q[gi][r], kr[u][r], x);
        s[u][gi] = x;
      }
    // Sum over the L lanes of each key (xor below L stays inside the slot).
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < L)
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int gi = 0; gi < GT; ++gi) s[u][gi] += __shfl_xor_sync(0xffffffffu, s[u][gi], o);
    if (a.cap > 0.0f)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int gi = 0; gi < GT; ++gi) s[u][gi] = a.cap * tanhf(s[u][gi] / a.cap) * 1.4426950408889634f;
#pragma unroll
    for (int gi = 0; gi < GT; ++gi) {
      float mn = m[gi];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ok[u]) mn = fmaxf(mn, s[u][gi]);
      const float corr = exp2f(m[gi] - mn);
      m[gi] = mn;
      l[gi] *= corr;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[gi][r] = scale4(corr, acc[gi][r]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = ok[u] ? exp2f(s[u][gi] - mn) : 0.0f;
        l[gi] += p;
#pragma unroll
        for (int r = 0; r < R; ++r) acc[gi][r] = axpy4(p, vr[u][r], acc[gi][r]);
      }
    }
  }

  // Slot states to shared memory: ml [NS][GT][2], then u [NS][GT][D].
  const int NS = kWarps * KPW, st = w * KPW + sub;
  float* sm_ml = smem;
  float* sm_u = smem + NS * GT * 2;
#pragma unroll
  for (int gi = 0; gi < GT; ++gi) {
    if (t == 0) sm_ml[(st * GT + gi) * 2] = m[gi], sm_ml[(st * GT + gi) * 2 + 1] = l[gi];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int v = t + L * r;
      if (v < NV)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (4 * v + c < D) sm_u[(st * GT + gi) * D + 4 * v + c] = comp(acc[gi][r], c);
    }
  }
  __syncthreads();
  finish_piece(a, NS, GT, row, h0, piece, (S + chunk - 1) / chunk, smem);
}

// The tensor-core kernel for an f16 cache (D = 64 or 128, up to 4 query
// heads of one kv group a block): block (piece, heads h0 .. h0 + heads - 1),
// four warps, warp w taking steps of 16 keys (w, w + 4, ... of the piece).
// A step is two chains of m16n8k16 products, the heads in the 8 columns:
//   S^T (16 keys x 8) = K (16 x D) Q^T (D x 8),   O^T (D x 8) += V^T (D x 16) P^T (16 x 8),
// column 2c holding head c's f16 high part and 2c + 1 its low part: for q
// (prescaled by scale log2 e) times s, a power of two putting s max|q| in
// [2^14, 2^15), hi = f16(q s), lo = f16(q s - hi), so t = (S[.][2c] +
// S[.][2c+1]) / s carries ~22 bits of q against K's exact f16 values,
// summed in f32; P =
// 2^(t - m) likewise, 2^12 P = hi + lo, so O keeps f32-level weights. The
// online softmax per head: m' = max(m, max_step t), l = l 2^(m - m') +
// sum 2^(t - m'), O = O 2^(m - m') + V^T P^T. The four warps' states meet
// in shared memory (finish_piece), as the other kernel's slots do.
//
// A product may take its inner dimension in any order both factors agree
// on, which puts each lane's loads on whole 16-byte chunks of a row:
//   K: lane (g, c) holds keys g and g + 8 of the step, chunks c + 4i of each
//      (words 4i .. 4i + 3 of the lane; the k-step j takes words 2j, 2j + 1);
//      its q fragment (column g) holds the same dims of head g / 2.
//   V: lane (g, c) holds keys 2c, 2c + 1, 2c + 8, 2c + 9, chunks g + 8i; the
//      output row g of tile t (i = t / 4, word k = t % 4) is dim 8 (g + 8i)
//      + 2k and row g + 8 the next dim, so the A fragments are two keys'
//      halves of a word paired (byte_perm) and O^T's fragment in lane (g, c)
//      is head c at dims 8 (g + 8i) .. + 7.
//   P^T: lane (g, c) needs column g (head g / 2's hi or lo) at keys 2c, 2c +
//      1, 2c + 8, 2c + 9; after S^T lane (g', c') holds head c' at keys g',
//      g' + 8, so four shuffles bring them.
// Keys past the piece load the piece's last row and weigh 0.
// Blocks an SM must hold: 4 (128 registers a thread) up to 128 dims; a
// 256-dim row's fragments and accumulators need two blocks' worth (255).
__host__ __device__ constexpr int mma_min_blocks(int D) { return D <= 128 ? 4 : 2; }

template <int D>
__global__ void __launch_bounds__(kAttnThreads, mma_min_blocks(D)) decode_attention_mma(AttnParams a) {
  constexpr int KC = D / 32, VC = D / 64, KSTEPS = D / 16, MT = D / 16;
  // 256-dim rows: a step's V rows are loaded once its scores are made (K's
  // fragments dead by then), from L2 where the step's start prefetched
  // them; K, V, q and O fragments live at once would be 224 registers.
  constexpr bool kLateV = D > 128;
  extern __shared__ float smem[];
  pdl_trigger();
  // Positions and slots are the step's parameters (the host's copy before
  // the step's first kernel), not an earlier kernel's output.
  const int64_t row = blockIdx.z;
  const int32_t pos = row_pos(a.pos, a.slots, row);
  const int64_t first = attn_first(pos, a.window), S = int64_t(pos) + 1 - first, piece = blockIdx.x,
                chunk = mma_piece(S, a.wave, a.splits);
  const int64_t j0 = piece * chunk;
  if (j0 >= S) {  // beyond the pieces in use
    pdl_wait();
    return;
  }
  const int64_t j1 = min(j0 + chunk, S);
  const int heads = a.heads;
  const int64_t h0 = int64_t(blockIdx.y) * heads, kvg = h0 / (a.H / a.Hkv);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4, hn = g / 2;
  const int64_t slot = row_slot(a.slots, a.slot_stride, row);
  const __half* K = static_cast<const __half*>(a.k_cache) + slot + (kvg * a.C + first) * D;
  const __half* V = static_cast<const __half*>(a.v_cache) + slot + (kvg * a.C + first) * D;

  // Step jb's rows: K rows jb + g, jb + g + 8; V rows jb + 2c, +1, +8, +9.
  uint4 ka[KC], kb[KC], vr[4][VC];
  auto load_k = [&](int64_t jb) {
    const __half* ra = K + min(jb + g, j1 - 1) * D;
    const __half* rb = K + min(jb + g + 8, j1 - 1) * D;
#pragma unroll
    for (int i = 0; i < KC; ++i) {
      ka[i] = reinterpret_cast<const uint4*>(ra)[c + 4 * i];
      kb[i] = reinterpret_cast<const uint4*>(rb)[c + 4 * i];
    }
  };
  auto load_v = [&](int64_t jb) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const __half* rv = V + min(jb + 2 * c + (r & 1) + 8 * (r >> 1), j1 - 1) * D;
#pragma unroll
      for (int i = 0; i < VC; ++i) vr[r][i] = reinterpret_cast<const uint4*>(rv)[g + 8 * i];
    }
  };

  // The warp's first step comes into L2 before the wait when its rows are
  // all older than this step's (row S - 1, which the kernel before
  // appends): earlier steps wrote them, so their reads may overlap the
  // previous kernel's tail (pdl.cuh). Into L2 rather than registers: held
  // across q's preparation they made the 128-dim kernel spill.
  const int64_t jb0 = j0 + 16 * w;
  if (jb0 < j1 && (j1 < S || jb0 + 16 < S)) {
    const int64_t bytes = min(int64_t(16), j1 - jb0) * D * int64_t(sizeof(__half));
    prefetch_l2(K + jb0 * D, bytes, lane);
    prefetch_l2(V + jb0 * D, bytes, lane);
  }
  pdl_wait();

  // q's fragment: column g, head hn's high (g even) or low part. Two passes
  // over the lane's 32 dims (both from L2: the kernel before wrote q), so
  // that its 32 floats need not be live at once.
  const float4* qrow = reinterpret_cast<const float4*>(a.q + ((h0 + hn) * a.n + row) * D);
  auto q_at = [&](int i, int k) {  // dims 8 (c + 4i) + 4k .. + 3, times scale
    const float4 x = hn < heads ? __ldcg(qrow + 2 * (c + 4 * i) + k) : make_float4(0, 0, 0, 0);
    return scale4(a.scale, x);
  };
  float qmax = 0.0f;
#pragma unroll
  for (int i = 0; i < KC; ++i)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float4 x = q_at(i, k);
      qmax = fmaxf(qmax, fmaxf(fmaxf(fabsf(x.x), fabsf(x.y)), fmaxf(fabsf(x.z), fabsf(x.w))));
    }
  // Head hn's max over its 8 lanes (g = 2 hn, 2 hn + 1; every c).
  qmax = fmaxf(qmax, __shfl_xor_sync(0xffffffffu, qmax, 1));
  qmax = fmaxf(qmax, __shfl_xor_sync(0xffffffffu, qmax, 2));
  qmax = fmaxf(qmax, __shfl_xor_sync(0xffffffffu, qmax, 4));
  int e;
  frexpf(qmax, &e);  // qmax = f 2^e, f in [0.5, 1) (e = 0 for 0)
  e = max(e, -100);
  const float qs = ldexpf(1.0f, 15 - e);  // s
  // Word 4i + 2k + h of the lane: dims 8 (c + 4i) + 4k + 2h, + 1.
  auto half_pair = [&](float x0, float x1) {
    x0 *= qs, x1 *= qs;
    __half2 h = __floats2half2_rn(x0, x1);
    if (g & 1) {
      const float2 hf = __half22float2(h);
      h = __floats2half2_rn(x0 - hf.x, x1 - hf.y);
    }
    return *reinterpret_cast<const uint32_t*>(&h);
  };
  uint32_t qb[KSTEPS][2];
#pragma unroll
  for (int i = 0; i < KC; ++i)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float4 x = q_at(i, k);
      const int word = 4 * i + 2 * k;
      qb[word / 2][0] = half_pair(x.x, x.y);
      qb[word / 2][1] = half_pair(x.z, x.w);
    }
  // Score columns 2c, 2c + 1 are head c's: its 1 / s from lane 8c (g = 2c).
  const float tinv = __shfl_sync(0xffffffffu, ldexpf(1.0f, e - 15), 8 * c);

  float o[MT][4];
#pragma unroll
  for (int t = 0; t < MT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t jb = jb0; jb < j1; jb += 16 * kWarps) {  // warp-uniform
    load_k(jb);
    if constexpr (kLateV) {
      prefetch_l2(V + jb * D, min(int64_t(16), j1 - jb) * D * int64_t(sizeof(__half)), lane);
    } else {
      load_v(jb);
    }
    float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < KSTEPS; ++j) {
      const uint4 A = ka[j / 2], B = kb[j / 2];
      const uint32_t fa[4] = {j % 2 ? A.z : A.x, j % 2 ? B.z : B.x, j % 2 ? A.w : A.y, j % 2 ? B.w : B.y};
      hmma_k16(sc, fa, qb[j][0], qb[j][1]);
    }
    float t0 = (sc[0] + sc[1]) * tinv, t1 = (sc[2] + sc[3]) * tinv;  // keys jb + g, jb + g + 8
    if (a.cap > 0.0f) {
      t0 = a.cap * tanhf(t0 / a.cap) * 1.4426950408889634f;
      t1 = a.cap * tanhf(t1 / a.cap) * 1.4426950408889634f;
    }
    if (jb + g >= j1) t0 = -INFINITY;
    if (jb + g + 8 >= j1) t1 = -INFINITY;
    float mx = fmaxf(t0, t1);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float mn = fmaxf(m, mx), corr = exp2f(m - mn);
    m = mn;
    const float p0 = exp2f(t0 - mn), p1 = exp2f(t1 - mn);
    l = fmaf(l, corr, p0 + p1);
#pragma unroll
    for (int t = 0; t < MT; ++t) o[t][0] *= corr, o[t][1] *= corr, o[t][2] *= corr, o[t][3] *= corr;
    // 2^12 P's halves for keys (g, g + 8), then P^T's fragment.
    const float s0 = p0 * 4096.0f, s1 = p1 * 4096.0f;
    const __half2 ph = __floats2half2_rn(s0, s1);
    const float2 phf = __half22float2(ph);
    const __half2 pl = __floats2half2_rn(s0 - phf.x, s1 - phf.y);
    const uint32_t phw = *reinterpret_cast<const uint32_t*>(&ph), plw = *reinterpret_cast<const uint32_t*>(&pl);
    const int sa = 8 * c + hn, sb = sa + 4;  // holders of keys (2c, 2c + 8) and (2c + 1, 2c + 9)
    const uint32_t ha = __shfl_sync(0xffffffffu, phw, sa), la = __shfl_sync(0xffffffffu, plw, sa);
    const uint32_t hb = __shfl_sync(0xffffffffu, phw, sb), lb = __shfl_sync(0xffffffffu, plw, sb);
    const uint32_t x = g & 1 ? la : ha, y = g & 1 ? lb : hb;
    const uint32_t b0 = __byte_perm(x, y, 0x5410), b1 = __byte_perm(x, y, 0x7632);
    if constexpr (kLateV) load_v(jb);
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      const int i = t / 4;
      const uint32_t w0 = comp(vr[0][i], t % 4), w1 = comp(vr[1][i], t % 4);
      const uint32_t w2 = comp(vr[2][i], t % 4), w3 = comp(vr[3][i], t % 4);
      const uint32_t fa[4] = {__byte_perm(w0, w1, 0x5410), __byte_perm(w0, w1, 0x7632), __byte_perm(w2, w3, 0x5410),
                              __byte_perm(w2, w3, 0x7632)};
      hmma_k16(o[t], fa, b0, b1);
    }
  }
  l += __shfl_xor_sync(0xffffffffu, l, 4);
  l += __shfl_xor_sync(0xffffffffu, l, 8);
  l += __shfl_xor_sync(0xffffffffu, l, 16);

  // Warp w's state is slot w: ml [4][heads][2], then u [4][heads][D].
  float* sm_ml = smem;
  float* sm_u = smem + kWarps * heads * 2;
  if (c < heads) {
    if (g == 0) sm_ml[(w * heads + c) * 2] = m, sm_ml[(w * heads + c) * 2 + 1] = l;
    float* u = sm_u + (w * heads + c) * D;
#pragma unroll
    for (int t = 0; t < MT; ++t) {
      const int d = 8 * (g + 8 * (t / 4)) + 2 * (t % 4);
      u[d] = (o[t][0] + o[t][1]) * (1.0f / 4096.0f);
      u[d + 1] = (o[t][2] + o[t][3]) * (1.0f / 4096.0f);
    }
  }
  __syncthreads();
  finish_piece(a, kWarps, heads, row, h0, piece, (S + chunk - 1) / chunk, smem);
}

// The split kernel for a cache of T, R float4s per lane, gt heads per block.
template <typename T>
void (*split_kernel(bool vec, int R, int gt))(AttnParams) {
  if (!vec)
    return R == 1 ? decode_attention_split<T, 1, 1, false>
                  : R == 2 ? decode_attention_split<T, 2, 1, false> : decode_attention_split<T, 4, 1, false>;
  if (R == 1)
    return gt == 1   ? decode_attention_split<T, 1, 1, true>
           : gt == 2 ? decode_attention_split<T, 1, 2, true>
           : gt == 4 ? decode_attention_split<T, 1, 4, true>
                     : decode_attention_split<T, 1, 8, true>;
  if (R == 2)
    return gt == 1 ? decode_attention_split<T, 2, 1, true>
                   : gt == 2 ? decode_attention_split<T, 2, 2, true> : decode_attention_split<T, 2, 4, true>;
  return decode_attention_split<T, 4, 1, true>;
}

// Blocks of the tensor-core kernel `k` an SM of the current device holds
// with `smem` bytes of shared memory; the last answer a thread got is kept
// (a model asks once a layer with the same arguments, eagerly in some steps).
cudaError_t mma_blocks_per_sm(void (*k)(AttnParams), size_t smem, int* per_sm) {
  thread_local void (*last_k)(AttnParams) = nullptr;
  thread_local size_t last_smem = 0;
  thread_local int last_device = -1, last = 0;
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device)) return e;
  if (k != last_k || smem != last_smem || device != last_device) {
    int n = 0;
    if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, kAttnThreads, smem)) return e;
    last_k = k, last_smem = smem, last_device = device, last = n;
  }
  *per_sm = last;
  return cudaSuccess;
}

}  // namespace

tc_status decode_attention(Device&, StreamState* s, const DecodeAttentionArgs& a) {
  if (tc_status st = check_decode_attention(a)) return st;
  if (!a.arrivals)
    return fail(TC_ERR_INVALID_ARG, "%s: decode_attention on a GPU needs its arrival counters (arrivals)",
                a.info.name);
  // Lanes per key: the float4s of a row (NV) spread over L lanes, R each.
  const int64_t NV = (a.D + 3) / 4;
  int R = 1, L = 32;
  if (NV <= 32)
    for (L = 1; L < NV; L *= 2) {}
  else
    R = NV <= 64 ? 2 : NV <= 128 ? 4 : 0;
  if (R == 0) return fail(TC_ERR_UNSUPPORTED, "decode_attention: head dim %lld above 512", (long long)a.D);
  // Vector loads: 16 bytes of q, 4 cache elements (16 or 8 bytes, or a Q8_0
  // block's 4 codes as two 2-byte loads) at a time.
  const uintptr_t cache_align = a.cache == TC_DTYPE_F16 ? 8 : a.cache == TC_DTYPE_Q8_0 ? 2 : 16;
  auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  const bool vec = a.D % 4 == 0 && aligned(a.q, 16) && aligned(a.k_cache, cache_align) &&
                   aligned(a.v_cache, cache_align);
  const int64_t splits = decode_attention_splits(a.C), G = a.H / a.Hkv;
  const int64_t coarse = std::min<int64_t>(splits, (a.C + 63) / 64);
  if (a.n > 65535) return fail(TC_ERR_UNSUPPORTED, "decode_attention: %lld rows in one call", (long long)a.n);
  // With soft-capping the scores are capped in natural units, then moved to base 2.
  const float scale = a.softcap > 0.0f ? a.scale : float(double(a.scale) * 1.4426950408889634);
  // The tensor-core kernel: an f16 cache of 64-, 128- or 256-dim rows on
  // 16-byte boundaries, a kv group's heads in blocks of up to 4.
  const bool mma = a.cache == TC_DTYPE_F16 && vec && (a.D == 64 || a.D == 128 || a.D == 256) &&
                   (G <= 4 || G % 4 == 0) && aligned(a.k_cache, 16) && aligned(a.v_cache, 16) &&
                   (!a.slots || a.slot_stride % 8 == 0);
  // Query heads per block: with mma up to 4; otherwise as many of the
  // group's heads as registers allow (K/V then read once for them), fewer
  // while that leaves too few blocks.
  int gt = 1;
  if (mma) {
    gt = int(std::min<int64_t>(G, 4));
  } else if (vec) {
    const int gmax = R == 1 ? 8 : R == 2 ? 4 : 1;
    while (gt * 2 <= gmax && G % (gt * 2) == 0) gt *= 2;
    // Blocks counted as the coarse pieces (attn_piece) make them, so that the
    // short pieces of a short context do not put more heads in a block (four
    // heads a block there took the 8B-shaped model's attention from 0.34 to
    // 0.57 ms a token on an H100).
    while (gt > 1 && coarse * (a.H / gt) * a.n < kAttnMinBlocks) gt /= 2;
  }
  const int ks = kWarps * (32 / L) * attn_unroll(R, gt);  // the CUDA-core kernel's
  void (*split)(AttnParams) = mma                        ? (a.D == 64    ? decode_attention_mma<64>
                                                            : a.D == 128 ? decode_attention_mma<128>
                                                                         : decode_attention_mma<256>)
                              : a.cache == TC_DTYPE_F16  ? split_kernel<__half>(vec, R, gt)
                              : a.cache == TC_DTYPE_Q8_0 ? split_kernel<Q8Cache>(vec, R, gt)
                                                         : split_kernel<float>(vec, R, gt);
  // Slot states: 4 (32 / L) slots (4 with mma) of gt (D + 2) floats; at most
  // 24.6 KB (D <= 4, gt 8), under the 48 KB default; then the combine's
  // weights (gt (splits + 1) floats) in the same space.
  const size_t slots = mma ? kWarps : size_t(kWarps * (32 / L));
  const size_t smem = std::max(slots * gt * size_t(a.D + 2), size_t(gt) * size_t(splits + 1)) * sizeof(float);
  int64_t wave = 1;
  if (mma) {
    int per_sm = 0;
    if (cudaError_t e = mma_blocks_per_sm(split, smem, &per_sm)) return check(e, "decode_attention: occupancy");
    wave = std::max<int64_t>(1, int64_t(std::max(per_sm, 1)) * sm_count() / ((a.H / gt) * a.n));
  }
  const AttnParams p{a.H, a.Hkv, a.D, a.C, splits, a.window, coarse, scale, a.softcap, L, ks, gt, wave,
                     a.pos, a.q, a.k_cache, a.v_cache, a.o, a.partial, a.n, a.slots, a.slot_stride,
                     a.oq, reinterpret_cast<float2*>(a.od), a.arrivals};
  // The tensor-core kernel uses at most `wave` pieces (mma_piece): no grid
  // of blocks that would only exit (at depth they outnumbered the working
  // ones seven to one and their scheduling alone cost ~10 us a layer).
  const int64_t pieces = mma ? std::min(splits, wave) : splits;
  s->last_kernel = mma ? "decode_attention_mma" : "decode_attention_split";
  return check(launch_pdl(split, dim3(unsigned(pieces), unsigned(a.H / gt), unsigned(a.n)), dim3(kAttnThreads), smem,
                          s->stream, p),
               "decode_attention: launch");
}

}  // namespace cuda
}  // namespace tc
