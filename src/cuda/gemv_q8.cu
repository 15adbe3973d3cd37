// The decode step's one-row products on 8-bit activations (core/backend.h,
// QuantizeQ8Args / GemvQ8Args; the CPU reference is src/cpu/gemv_q8.cpp):
//
//   quantize_q8: v = x, or v = x * rstd * gamma with rstd = 1 / sqrt(sum(x^2) / K + eps)
//     (the sum in f64); per block b of 32: dx = max|v| / 127,
//     xq = rne(v * (1 / dx)) (int8), sx = dx * sum(xq)
//   gemv_q8: r[n] = sum_b d_b(W[n]) * (dx_b * dot(q_b, xq_b) + c * sx_b)
//     (Q4_0: q the 4-bit codes 0..15 and c = -8, since w = d (q - 8);
//      Q8_0: q the int8 codes and c = 0), the dot product of a block exact
//     in int32 (__dp4a, four int8 products per instruction); then the
//     epilogue: y[n] = r[n], y[n] += r[n], or y[n] = act(r[n]) r[n + N/2] (SwiGLU, GEGLU).
//
// Why: at one row of X the product reads every weight once, so it is bound
// by HBM bandwidth only if decoding costs few instructions per weight. With
// X in int8, a Q4_0 block of 32 weights is 8 dp4a, 8 masks or shifts and a
// few float operations, against ~100 instructions with f32 X (byte to float,
// subtract, FMA per weight), which held the exact kernels to 25-35% of
// bandwidth on the H200.
//
// Work split (gemv_q8_rows): one warp per row of W (per pair of rows gate n,
// up n + N/2 for SwiGLU), 8 warps a CTA; for one row of X with W split or
// in superblocks, gemv_q8_row1 issues the loads of a warp's rows together
// (split Q4_0 / Q8_0 / Q6_K rows and Q4_K / Q5_K superblocks take
// gemv_q8_stream.cu's kernel, or for split Q4_0 / Q8_0 with K > 4096 and X
// given in 8 bits gemv_q8_xreg.cu's, when the call fits them).
// Q4_1 / Q5_1 (w = d q + m: d dx dot(q, xq) + m sx a block) take this
// kernel with one row of X too where the streaming one does not fit them
// (K not whole superblocks), and their 20- / 24-byte blocks are 4-byte
// aligned words in the staged segment.
// GGUF blocks are 18 (Q4_0) or 34 (Q8_0) bytes, only 2-byte aligned, so a
// warp copies a segment of its row
// (128 or 64 blocks, ~2.2 KB) from global memory with 16-byte loads (all
// issued before any is used: ~2.3 KB in flight per warp) into its own
// shared-memory slot, then each lane decodes whole blocks from there: the
// 4-byte words covering a block (its start is 0 or 2 mod 4) and funnel
// shifts give the quant words and the scale. X (int8 and the per-block
// (dx, sx)) is read with __ldg: every warp reads the same few KB, from L1.
// The lane partial sums reduce by shuffles in a fixed order: results are
// deterministic.
//
// With W in the split layout (repack_q8: every block's quants 16-byte
// aligned, the scales apart) the staging goes: each lane loads whole blocks
// straight into registers, two at a time. A stand-alone test on the H200
// read Q4_0 that way at 61-83% of the copy bandwidth on 4096-14336 x 4096,
// against 31-46% for the staged GGUF blocks.
//
// K-quants (Q4_K, Q5_K, Q6_K: superblocks of 256 weights with 6- or 8-bit
// sub-scales) take four lanes a superblock, a lane a quarter of it (64
// weights, two blocks of X, four sub-scale groups for Q6_K) from whole
// 16-byte loads, two quarters in flight a lane (one row of X: two rows of W
// a warp, one quarter of each, gemv_q8_row1). Q4_K (144 bytes) and Q5_K
// (176) are 16-byte multiples and are read in GGUF's layout, in place;
// Q6_K's 210 bytes are not, so it needs the split layout: its 208 bytes of
// quants and scales (ql, qh, scales, in GGUF's order) 16-byte aligned, d
// apart. The arithmetic is the CPU's VNNI path (quant_dot_vnni.cpp):
//   Q4_K / Q5_K: d sc_j dx dot(q, xq) - dmin m_j sx  per sub-block j of 32
//   Q6_K:        d sc_g dx dot(q - 32, xq)            per group g of 16
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/gemv_q8_mma.h"
#include "cuda/gemv_q8_stream.h"
#include "cuda/gemv_q8_xreg.h"
#include "cuda/q8_block.cuh"
#include "cuda/pdl.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ float f16_bits(uint32_t h) { return __half2float(__ushort_as_half(uint16_t(h))); }

// The 4-byte words from the aligned word at or before p (p 2-byte aligned),
// and whether p sits 2 bytes into the first one.
template <int W>
__device__ __forceinline__ bool load_words(const uint8_t* p, uint32_t (&w)[W]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* base = reinterpret_cast<const uint32_t*>(a & ~uintptr_t(3));
#pragma unroll
  for (int i = 0; i < W; ++i) w[i] = base[i];
  return (a & 2) != 0;
}

// Word i of the bytes starting 2 bytes into w (the block's data after its
// 2-byte scale): bytes 2..5 of (w[i+1]:w[i]) when the block starts at a word,
// w[i+1] when it starts 2 bytes into one.
__device__ __forceinline__ uint32_t data_word(uint32_t lo, uint32_t hi, bool odd) {
  return __funnelshift_rc(lo, hi, odd ? 32 : 16);
}

// The block's f16 scale: its first 2 bytes.
__device__ __forceinline__ float block_scale(uint32_t w0, bool odd) { return f16_bits(odd ? w0 >> 16 : w0 & 0xFFFFu); }

// Each format: the dot product of one block from its quant words (the
// block's bytes after the scale, little-endian) and its scale d.
struct Q4_0 {
  static constexpr int kBytes = 18, kSegBlocks = 128, kQuantWords = 4;
  static constexpr bool kMin = false;
  __device__ __forceinline__ static float dot_words(const uint32_t (&q)[kQuantWords], float d, const int8_t* xq,
                                                    float2 xd) {
    return q8act::q4_0_dot(q, d, __ldg(reinterpret_cast<const int4*>(xq)),
                           __ldg(reinterpret_cast<const int4*>(xq + 16)), xd);
  }
};

struct Q8_0 {
  static constexpr int kBytes = 34, kSegBlocks = 64, kQuantWords = 8;
  static constexpr bool kMin = false;
  __device__ __forceinline__ static float dot_words(const uint32_t (&q)[kQuantWords], float d, const int8_t* xq,
                                                    float2 xd) {
    return q8act::q8_0_dot(q, d, __ldg(reinterpret_cast<const int4*>(xq)),
                           __ldg(reinterpret_cast<const int4*>(xq + 16)), xd);
  }
};

// Q4_1 (20 bytes: d, m, 16 bytes of nibbles) and Q5_1 (24: d, m, the
// fifth bits, the nibbles): 4-byte multiples, so in a row that starts
// 4-byte aligned every block does, and its words are read as they are.
template <int B, int S>
struct Q_1 {
  static constexpr int kBytes = B, kSegBlocks = S;
  static constexpr bool kMin = true;
  // The block at p (4-byte aligned).
  __device__ __forceinline__ static float dot_block(const uint8_t* p, const int8_t* xq, float2 xd) {
    return q8act::q_1_block_dot<B>(reinterpret_cast<const uint32_t*>(p), __ldg(reinterpret_cast<const int4*>(xq)),
                                   __ldg(reinterpret_cast<const int4*>(xq + 16)), xd);
  }
};
using Q4_1 = Q_1<20, 112>;  // segments of ~2.2 KB, as Q4_0's
using Q5_1 = Q_1<24, 96>;

// The rows of X a CTA takes (MT at most, `rows` of them valid): row m's
// int8 values at xq + m K, its (dx, sx) at xd + m K / 32. Each weight is
// loaded and decoded once and meets every row.
struct XRows {
  const int8_t* xq;
  const float2* xd;
  int64_t K;
  int rows;
};

// The lanes' sums of each row, over the warp (every lane gets them).
template <int MT>
__device__ __forceinline__ void warp_sum(float (&acc)[MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
}

// The block whose GGUF bytes are at p (shared memory), X's block b of each row.
template <class F, int MT>
__device__ __forceinline__ void gguf_dot(const uint8_t* p, const XRows& x, int64_t b, float (&acc)[MT]) {
  if constexpr (F::kMin) {
#pragma unroll
    for (int m = 0; m < MT; ++m)
      if (m < x.rows) acc[m] += F::dot_block(p, x.xq + m * x.K + b * 32, __ldg(x.xd + m * (x.K / 32) + b));
  } else {
    uint32_t w[F::kQuantWords + 1], q[F::kQuantWords];
    const bool odd = load_words(p, w);
#pragma unroll
    for (int i = 0; i < F::kQuantWords; ++i) q[i] = data_word(w[i], w[i + 1], odd);
    const float d = block_scale(w[0], odd);
#pragma unroll
    for (int m = 0; m < MT; ++m)
      if (m < x.rows) acc[m] += F::dot_words(q, d, x.xq + m * x.K + b * 32, __ldg(x.xd + m * (x.K / 32) + b));
  }
}

// Chunks of 16 bytes a lane copies per segment (a segment plus up to 15
// bytes of head offset, over 32 lanes), and a warp's shared-memory slot
// (+ room for the last block's trailing word).
template <class F>
struct Seg {
  static constexpr int kChunksPerLane = ((F::kSegBlocks * F::kBytes + 15) / 16 + 1 + 31) / 32;
  static constexpr int kSlotBytes = kChunksPerLane * 32 * 16 + 16;
};

// r of row n for each row of X, summed over the warp (every lane gets them).
template <class F, int MT>
__device__ void row_dot(const uint8_t* __restrict__ w, const uint8_t* wend, int64_t n, const XRows& x,
                        uint8_t* slot, int lane, float (&acc)[MT]) {
  constexpr int CPL = Seg<F>::kChunksPerLane;
  const int64_t nb = x.K / 32;
  const uint8_t* row = w + n * nb * F::kBytes;
  for (int64_t b0 = 0; b0 < nb; b0 += F::kSegBlocks) {
    const int blocks = int(nb - b0 < F::kSegBlocks ? nb - b0 : F::kSegBlocks);
    const uint8_t* src = row + b0 * F::kBytes;
    const int head = int(reinterpret_cast<uintptr_t>(src) & 15);
    const uint4* g = reinterpret_cast<const uint4*>(src - head);
    const int chunks = (head + blocks * F::kBytes + 15) >> 4;
    uint4 c[CPL];
#pragma unroll
    for (int j = 0; j < CPL; ++j) {
      const int i = lane + 32 * j;
      if (i < chunks) {
        const uint8_t* cp = reinterpret_cast<const uint8_t*>(g + i);
        if (cp + 16 <= wend) {
          c[j] = __ldcs(g + i);  // streamed once: do not keep it in L1 / L2
        } else {
          // The last chunk of W may end past it (rows not 16-byte multiples).
          uint32_t t[4] = {0u, 0u, 0u, 0u};
          for (int k = 0; k < 16 && cp + k < wend; ++k) t[k >> 2] |= uint32_t(cp[k]) << (8 * (k & 3));
          c[j] = make_uint4(t[0], t[1], t[2], t[3]);
        }
      }
    }
    __syncwarp();  // the previous segment's blocks are decoded
#pragma unroll
    for (int j = 0; j < CPL; ++j)
      if (lane + 32 * j < chunks) reinterpret_cast<uint4*>(slot)[lane + 32 * j] = c[j];
    __syncwarp();
    for (int b = lane; b < blocks; b += 32) gguf_dot<F, MT>(slot + head + b * F::kBytes, x, b0 + b, acc);
  }
  warp_sum(acc);
}

// r of rows n[0..R) from the split layout (RepackQ8Args) for each row of
// X: each lane takes whole blocks, U of them a row with every load of all R
// rows issued before any is used; no staging, every load a whole 16 bytes.
// Not reduced over the warp (warp_sum).
constexpr int kSplitUnroll = 2;
template <class F, int R, int MT, int U>
__device__ __forceinline__ void rows_dot_split(const uint4* __restrict__ qs, const uint16_t* __restrict__ d,
                                               const int64_t (&n)[R], const XRows& x, int lane,
                                               float (&acc)[R][MT]) {
  constexpr int V = F::kQuantWords / 4;  // 16-byte vectors a block
  const int64_t nb = x.K / 32;
  for (int64_t b0 = lane; b0 < nb; b0 += 32 * U) {
    uint4 q[R][U][V];
    uint16_t h[R][U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t b = b0 + 32 * u;
      if (b < nb)
#pragma unroll
        for (int r = 0; r < R; ++r) {
#pragma unroll
          for (int v = 0; v < V; ++v) q[r][u][v] = __ldcs(qs + (n[r] * nb + b) * V + v);  // streamed once
          h[r][u] = __ldcs(d + n[r] * nb + b);
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t b = b0 + 32 * u;
      if (b < nb)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          uint32_t w[F::kQuantWords];
#pragma unroll
          for (int v = 0; v < V; ++v)
            w[4 * v] = q[r][u][v].x, w[4 * v + 1] = q[r][u][v].y, w[4 * v + 2] = q[r][u][v].z, w[4 * v + 3] = q[r][u][v].w;
          const float db = f16_bits(h[r][u]);
#pragma unroll
          for (int m = 0; m < MT; ++m)
            if (m < x.rows) acc[r][m] += F::dot_words(w, db, x.xq + m * x.K + b * 32, __ldg(x.xd + m * nb + b));
        }
    }
  }
}

// ---- K-quants: a lane takes quarter p of superblock s (q8_block.cuh's arithmetic) ----

// X's 64 int8 values at xq (two blocks) and their (dx, sx).
__device__ __forceinline__ void x_pair(const int8_t* xq, const float2* xd, int4 (&x)[4], float2* x0, float2* x1) {
  const int4* v = reinterpret_cast<const int4*>(xq);
  x[0] = __ldg(v), x[1] = __ldg(v + 1), x[2] = __ldg(v + 2), x[3] = __ldg(v + 3);
  *x0 = __ldg(xd), *x1 = __ldg(xd + 1);
}

// Quarter p of a Q4_K superblock: weights 64p .. 64p + 63, sub-blocks 2p
// (low nibbles of qs[32p, 32p + 32)) and 2p + 1 (high nibbles).
struct Q4_K {
  static constexpr int kSuperBytes = 144, kLoads = 3;
  static constexpr bool kSplitD = false;
  __device__ __forceinline__ static void load(const uint8_t* sb, int p, uint4 (&v)[kLoads]) {
    const uint4* g = reinterpret_cast<const uint4*>(sb);
    v[0] = __ldcs(g), v[1] = __ldcs(g + 1 + 2 * p), v[2] = __ldcs(g + 2 + 2 * p);
  }
  // xq, xd: X's two blocks of the quarter.
  __device__ __forceinline__ static float dot(const uint4 (&v)[kLoads], uint16_t, int p, const int8_t* xq,
                                              const float2* xd) {
    int4 x[4];
    float2 x0, x1;
    x_pair(xq, xd, x, &x0, &x1);
    return q8act::q4_k_quarter_dot(v[0], p, v[1], v[2], x, x0, x1);
  }
};

// Q5_K: Q4_K's layout with the 32 bytes of fifth bits between the scales
// and the quants.
struct Q5_K {
  static constexpr int kSuperBytes = 176, kLoads = 5;
  static constexpr bool kSplitD = false;
  __device__ __forceinline__ static void load(const uint8_t* sb, int p, uint4 (&v)[kLoads]) {
    const uint4* g = reinterpret_cast<const uint4*>(sb);
    v[0] = __ldcs(g), v[1] = __ldcs(g + 1), v[2] = __ldcs(g + 2);
    v[3] = __ldcs(g + 3 + 2 * p), v[4] = __ldcs(g + 4 + 2 * p);
  }
  __device__ __forceinline__ static float dot(const uint4 (&v)[kLoads], uint16_t, int p, const int8_t* xq,
                                              const float2* xd) {
    int4 x[4];
    float2 x0, x1;
    x_pair(xq, xd, x, &x0, &x1);
    return q8act::q5_k_quarter_dot(v[0], p, v[3], v[4], v[1], v[2], x, x0, x1);
  }
};

// Quarter p = 2h + i of a Q6_K superblock (split layout: ql, qh, scales,
// 208 bytes; d apart; q8act::q6_k_quarter_dot).
struct Q6_K {
  static constexpr int kSuperBytes = 208, kLoads = 4;
  static constexpr bool kSplitD = true;
  __device__ __forceinline__ static void load(const uint8_t* sb, int p, uint4 (&v)[kLoads]) {
    const uint4* g = reinterpret_cast<const uint4*>(sb);
    const int h = p >> 1, i = p & 1;
    v[0] = __ldcs(g + 4 * h + i), v[1] = __ldcs(g + 4 * h + 2 + i), v[2] = __ldcs(g + 8 + 2 * h + i);
    v[3] = __ldcs(g + 12);
  }
  // xq, xd: X's blocks of the quarter's half (4 blocks).
  __device__ __forceinline__ static float dot(const uint4 (&v)[kLoads], uint16_t dbits, int p, const int8_t* xq,
                                              const float2* xd) {
    const int i = p & 1;
    int4 x[4];
    int xs[4];
    float2 d[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      x[g] = __ldg(reinterpret_cast<const int4*>(xq + 32 * g + 16 * i)), d[g] = __ldg(xd + g);
      xs[g] = q8act::x16_sum(x[g]);
    }
    return q8act::q6_k_quarter_dot(v[0], v[1], v[2], v[3], f16_bits(dbits), p, x, xs, d);
  }
};

// r of rows n[0..R) from superblocks for each row of X: lane unit u = 4 s + p
// (superblock s, quarter p); U units a lane and row with every load of all R
// rows issued before any is used. Not reduced over the warp (warp_sum).
constexpr int kKUnroll = 2;
template <class F>
__device__ __forceinline__ int x_block_of(int p) {
  if constexpr (std::is_same<F, Q6_K>::value) return 4 * (p >> 1);
  else return 2 * p;
}
template <class F, int R, int MT, int U>
__device__ __forceinline__ void rows_dot_k(const uint8_t* __restrict__ w, const uint16_t* __restrict__ wd,
                                           const int64_t (&n)[R], const XRows& x, int lane, float (&acc)[R][MT]) {
  const int64_t ns = x.K / 256, units = 4 * ns;
  for (int64_t u0 = lane; u0 < units; u0 += 32 * U) {
    uint4 v[R][U][F::kLoads];
    uint16_t dd[R][U] = {};
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t u = u0 + 32 * k;
      if (u < units)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          F::load(w + (n[r] * ns + (u >> 2)) * F::kSuperBytes, int(u & 3), v[r][k]);
          if (F::kSplitD) dd[r][k] = __ldcs(wd + n[r] * ns + (u >> 2));
        }
    }
#pragma unroll
    for (int k = 0; k < U; ++k) {
      const int64_t u = u0 + 32 * k;
      if (u < units) {
        const int p = int(u & 3);
        const int64_t xb = (u >> 2) * 8 + x_block_of<F>(p);
#pragma unroll
        for (int r = 0; r < R; ++r)
#pragma unroll
          for (int m = 0; m < MT; ++m)
            if (m < x.rows)
              acc[r][m] += F::dot(v[r][k], dd[r][k], p, x.xq + m * x.K + xb * 32, x.xd + m * (x.K / 32) + xb);
      }
    }
  }
}

// How a kernel reads W: GGUF's blocks of 32 staged through shared memory,
// the split layout of Q4_0 / Q8_0 (w the quants, wd the scales), or
// K-quant superblocks (wd Q6_K's scales).
enum Layout { kStaged, kSplit, kSuper };

template <class F, int L, int MT>
__device__ __forceinline__ void row_of(const uint8_t* w, const uint16_t* wd, const uint8_t* wend, int64_t n,
                                       const XRows& x, uint8_t* slot, int lane, float (&acc)[MT]) {
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  if constexpr (L == kStaged) {
    row_dot<F, MT>(w, wend, n, x, slot, lane, acc);
  } else {
    const int64_t rows[1] = {n};
    float a1[1][MT] = {};
    if constexpr (L == kSuper) rows_dot_k<F, 1, MT, kKUnroll>(w, wd, rows, x, lane, a1);
    else rows_dot_split<F, 1, MT, kSplitUnroll>(reinterpret_cast<const uint4*>(w), wd, rows, x, lane, a1);
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = a1[0][m];
    warp_sum(acc);
  }
}

// Bytes of a row of W, and of its scales when apart.
template <class F, int L>
__host__ __device__ constexpr int64_t row_bytes_of(int64_t K) {
  if constexpr (L == kSuper) return K / 256 * F::kSuperBytes;
  else if constexpr (L == kSplit) return K / 32 * 4 * F::kQuantWords;
  else return K / 32 * F::kBytes;
}
template <class F, int L>
__host__ __device__ constexpr int64_t row_scale_bytes_of(int64_t K) {
  if constexpr (L == kSuper) return F::kSplitD ? K / 256 * 2 : 0;
  else if constexpr (L == kSplit) return K / 32 * 2;
  else return 0;
}

// A warp's staging slot (only the staged layout has one).
template <class F, int L>
__host__ __device__ constexpr int slot_bytes_of() {
  if constexpr (L == kStaged) return Seg<F>::kSlotBytes;
  else return 16;
}

// ---- One row of X (the decode step): R rows of W a warp, in flight together ----
// A warp's life is a few dependent trips to HBM (load, decode, reduce); the
// next rows' loads are not issued until they end. Taking R rows at once
// (SwiGLU's gate and up rows, or RW neighbouring rows) with every load of
// all of them issued before the first is used makes those trips overlap.
// CTA c, warp w: rows (c kWarps + w) RW + r (r < RW) of the output, with
// their up rows for SwiGLU: RW or 2 RW rows of W in flight a warp.
template <class F, int E, class TY, int L, int RW, int U>
__global__ void __launch_bounds__(kWarps * 32) gemv_q8_row1(const uint8_t* __restrict__ w,
                                                            const uint16_t* __restrict__ wd, int64_t N, int64_t K,
                                                            const int8_t* __restrict__ xq,
                                                            const float2* __restrict__ xd, TY* __restrict__ y) {
  static_assert(L == kSplit || L == kSuper, "the staged layout takes gemv_q8_rows");
  constexpr int R = GemvQ8Args::gated(E) ? 2 * RW : RW;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t rows = GemvQ8Args::gated(E) ? N / 2 : N;
  const int64_t n0 = (int64_t(blockIdx.x) * kWarps + warp) * RW;
  const int64_t row_bytes = row_bytes_of<F, L>(K), scale_bytes = row_scale_bytes_of<F, L>(K);
  int64_t n[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int64_t r = n0 + i % RW < rows ? n0 + i % RW : rows - 1;  // a short last group repeats a row
    n[i] = i < RW ? r : r + rows;
  }
  pdl_trigger();  // W does not depend on the kernels before this one: see gemv_q8_rows
  if (n0 < rows)
#pragma unroll
    for (int i = 0; i < R; ++i) {
      prefetch_l2(w + n[i] * row_bytes, row_bytes, lane);
      if (scale_bytes) prefetch_l2(reinterpret_cast<const uint8_t*>(wd) + n[i] * scale_bytes, scale_bytes, lane);
    }
  pdl_wait();
  if (n0 >= rows) return;
  const XRows x{xq, xd, K, 1};
  float part[R][1] = {}, acc[R];
  if constexpr (L == kSuper) rows_dot_k<F, R, 1, U>(w, wd, n, x, lane, part);
  else rows_dot_split<F, R, 1, U>(reinterpret_cast<const uint4*>(w), wd, n, x, lane, part);
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = part[i][0];
  warp_sum(acc);
  if (lane != 0) return;
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    if (n0 + r >= rows) break;
    q8act::epilogue<E>(y + n0 + r, acc[r], GemvQ8Args::gated(E) ? acc[(RW + r) % R] : 0.0f);
  }
}

// Y in TY: f32 for the decode step, f16 / bf16 when serving gemv_quantized.
// CTA c takes rows (c / passes) * kWarps ... of W, one a warp, against the
// MT rows of X from (c % passes) * MT: the passes over the same rows of W
// are neighbours, so all but the first find them in L2.
template <class F, int E, class TY, int L, int MT>
__global__ void __launch_bounds__(kWarps * 32) gemv_q8_rows(const uint8_t* __restrict__ w,
                                                            const uint16_t* __restrict__ wd, int64_t N, int64_t K,
                                                            int64_t M, const int8_t* __restrict__ xq,
                                                            const float2* __restrict__ xd, TY* __restrict__ y) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t passes = (M + MT - 1) / MT, pass = blockIdx.x % passes;
  const int64_t n = int64_t(blockIdx.x / passes) * kWarps + warp;
  const int64_t rows = GemvQ8Args::gated(E) ? N / 2 : N;
  const int64_t row_bytes = row_bytes_of<F, L>(K), scale_bytes = row_scale_bytes_of<F, L>(K);
  // W does not depend on the kernels before this one (pdl.cuh): its rows
  // start moving into L2 while they finish.
  pdl_trigger();
  if (n < rows && pass == 0) {
    for (int64_t m = n; m < N; m += rows) {  // row n, and its up row for SwiGLU
      prefetch_l2(w + m * row_bytes, row_bytes, lane);
      if (scale_bytes) prefetch_l2(reinterpret_cast<const uint8_t*>(wd) + m * scale_bytes, scale_bytes, lane);
    }
  }
  pdl_wait();
  if (n >= rows) return;  // whole warps leave
  __shared__ __align__(16) uint8_t slots[L == kStaged ? kWarps : 1][slot_bytes_of<F, L>()];
  const uint8_t* wend = w + N * row_bytes;
  uint8_t* slot = slots[L == kStaged ? warp : 0];
  const int64_t m0 = pass * MT;
  const XRows x{xq + m0 * K, xd + m0 * (K / 32), K, int(M - m0 < MT ? M - m0 : MT)};
  float r[MT], u[MT] = {};
  row_of<F, L, MT>(w, wd, wend, n, x, slot, lane, r);
  if (GemvQ8Args::gated(E)) row_of<F, L, MT>(w, wd, wend, n + rows, x, slot, lane, u);
  if (lane != 0) return;
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    if (m >= x.rows) break;
    q8act::epilogue<E>(y + (m0 + m) * rows + n, r[m], u[m]);
  }
}

template <class F, class TY, int L, int MT>
cudaError_t launch_rows(const GemvQ8Args& a, TY* y, cudaStream_t st) {
  const int64_t rows = GemvQ8Args::gated(a.epilogue) ? a.N / 2 : a.N;
  const int64_t passes = (a.M + MT - 1) / MT;
  const unsigned grid = unsigned((rows + kWarps - 1) / kWarps * passes);
  if (grid == 0) return cudaSuccess;
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  const float2* xd = reinterpret_cast<const float2*>(a.xd);
  void (*kernel)(const uint8_t*, const uint16_t*, int64_t, int64_t, int64_t, const int8_t*, const float2*, TY*) =
      a.epilogue == GemvQ8Args::kSwiglu  ? gemv_q8_rows<F, GemvQ8Args::kSwiglu, TY, L, MT>
      : a.epilogue == GemvQ8Args::kGeglu ? gemv_q8_rows<F, GemvQ8Args::kGeglu, TY, L, MT>
                                         : gemv_q8_rows<F, GemvQ8Args::kStore, TY, L, MT>;
  if constexpr (std::is_same<TY, float>::value)
    if (a.epilogue == GemvQ8Args::kAdd) kernel = gemv_q8_rows<F, GemvQ8Args::kAdd, float, L, MT>;
  return launch_pdl(kernel, dim3(grid), dim3(kWarps * 32), 0, st, w, a.wd, a.N, a.K, a.M, a.xq, xd, y);
}

// The one-row kernel's shape per format (gemv_q8_row1): rows of W a warp
// (SwiGLU's gate and up rows count as two) and loads in flight per row and
// lane. From kernel times on the H200 (the 7B's four product shapes,
// back-to-back launches, against the one-row gemv_q8_rows before it): blocks
// of 32 keep one row a warp and two blocks a lane, SwiGLU's two rows now in
// flight together (Q4_0: gate/up 12% faster, the rest unchanged; two rows a
// warp or four blocks a lane measured 1-13% slower); the K-quants take two
// rows a warp and one superblock quarter of each a lane (Q4_K 4-25%, Q6_K
// 38-41% faster than one row with two quarters: fewer registers, more warps
// an SM, the same bytes in flight a warp).
template <class F>
struct Row1Shape {
  static constexpr int kRows = 2, kUnroll = 1;  // K-quants
};
template <>
struct Row1Shape<Q4_0> {
  static constexpr int kRows = 1, kUnroll = 2;
};
template <>
struct Row1Shape<Q8_0> {
  static constexpr int kRows = 1, kUnroll = 2;
};

template <class F, int E, class TY, int L>
cudaError_t launch_row1_e(const GemvQ8Args& a, TY* y, cudaStream_t st) {
  constexpr int U = Row1Shape<F>::kUnroll;
  constexpr int RW = GemvQ8Args::gated(E) && Row1Shape<F>::kRows > 1 ? Row1Shape<F>::kRows / 2
                                                                         : Row1Shape<F>::kRows;
  const int64_t rows = GemvQ8Args::gated(E) ? a.N / 2 : a.N;
  const unsigned grid = unsigned((rows + kWarps * RW - 1) / (kWarps * RW));
  if (grid == 0) return cudaSuccess;
  return launch_pdl(gemv_q8_row1<F, E, TY, L, RW, U>, dim3(grid), dim3(kWarps * 32), 0, st,
                    static_cast<const uint8_t*>(a.w), a.wd, a.N, a.K, a.xq, reinterpret_cast<const float2*>(a.xd), y);
}

template <class F, class TY, int L>
cudaError_t launch_row1(const GemvQ8Args& a, TY* y, cudaStream_t st) {
  if (a.epilogue == GemvQ8Args::kSwiglu) return launch_row1_e<F, GemvQ8Args::kSwiglu, TY, L>(a, y, st);
  if (a.epilogue == GemvQ8Args::kGeglu) return launch_row1_e<F, GemvQ8Args::kGeglu, TY, L>(a, y, st);
  if constexpr (std::is_same<TY, float>::value)
    if (a.epilogue == GemvQ8Args::kAdd) return launch_row1_e<F, GemvQ8Args::kAdd, float, L>(a, y, st);
  return launch_row1_e<F, GemvQ8Args::kStore, TY, L>(a, y, st);
}

// Rows of X a CTA takes: one for one token (the decode step; gemv_q8_row1
// where W is split or in superblocks), else 4 or 8 (one load of each weight
// serves them all; more passes re-read W from L2). K-quants take 4 at most:
// at 8 their kernels need ~210 registers a thread (one CTA an SM), and on
// the H200 Q4_K at 14336 x 4096 took 2.2x as long for 8 rows as for 4.
template <class F, class TY, int L>
cudaError_t launch_rows_m(const GemvQ8Args& a, TY* y, cudaStream_t st) {
  if constexpr (L == kStaged) {
    if (a.M == 1) return launch_rows<F, TY, L, 1>(a, y, st);
  } else {
    if (a.M == 1) return launch_row1<F, TY, L>(a, y, st);
  }
  if (a.M <= 4 || L == kSuper) return launch_rows<F, TY, L, 4>(a, y, st);
  return launch_rows<F, TY, L, 8>(a, y, st);
}

template <class TY>
cudaError_t launch_fmt(const GemvQ8Args& a, TY* y, cudaStream_t st) {
  if (gemv_q8_mma_fits(a, false)) {  // 8 rows and more: the int8 tensor cores (gemv_q8_mma.cu)
    const tc_dtype t = std::is_same<TY, float>::value ? TC_DTYPE_F32
                       : std::is_same<TY, __half>::value ? TC_DTYPE_F16 : TC_DTYPE_BF16;
    return launch_gemv_q8_mma(a, y, t, st);
  }
  switch (a.fmt) {
    case quant::Q4_K: return launch_rows_m<Q4_K, TY, kSuper>(a, y, st);
    case quant::Q5_K: return launch_rows_m<Q5_K, TY, kSuper>(a, y, st);
    case quant::Q6_K: return launch_rows_m<Q6_K, TY, kSuper>(a, y, st);
    case quant::Q4_0:
      return a.wd ? launch_rows_m<Q4_0, TY, kSplit>(a, y, st) : launch_rows_m<Q4_0, TY, kStaged>(a, y, st);
    case quant::Q4_1: return launch_rows_m<Q4_1, TY, kStaged>(a, y, st);
    case quant::Q5_1: return launch_rows_m<Q5_1, TY, kStaged>(a, y, st);
    case quant::Q8_0:
      return a.wd ? launch_rows_m<Q8_0, TY, kSplit>(a, y, st) : launch_rows_m<Q8_0, TY, kStaged>(a, y, st);
    default: return cudaErrorInvalidValue;  // check_gemv_q8 let no other format through
  }
}

// Block b of W (`halves` 2-byte words: its f16 scale d first for Q4_0 /
// Q8_0, last for Q6_K) to the split layout: d to d[b], the quants' words to
// qs (one thread a block; a one-time copy at load).
__global__ void repack_q8_kernel(const uint16_t* __restrict__ w, int64_t blocks, int halves, bool d_last,
                                 uint32_t* __restrict__ qs, uint16_t* __restrict__ d) {
  const int words = (halves - 1) / 2;  // 4-byte words of quants a block
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const uint16_t* src = w + b * halves;
    d[b] = src[d_last ? halves - 1 : 0];
    const uint16_t* q = src + (d_last ? 0 : 1);
    for (int i = 0; i < words; ++i) qs[b * words + i] = uint32_t(q[2 * i]) | uint32_t(q[2 * i + 1]) << 16;
  }
}

// Q5_0 block b to Q8_0's split layout, exact: code i minus 16 as an int8
// (quant::nibble_code), d kept (one thread a block; a one-time copy at load).
__global__ void repack_q5_0_kernel(const quant::BlockQ5_0* __restrict__ w, int64_t blocks, uint32_t* __restrict__ qs,
                                   uint16_t* __restrict__ d) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const quant::BlockQ5_0& blk = w[b];
    d[b] = blk.d;
    const uint32_t qh = quant::q5_high_bits(blk.qh);
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // output word j: codes 4j .. 4j + 3
      uint32_t word = 0;
#pragma unroll
      for (int t = 0; t < 4; ++t) word |= uint32_t(uint8_t(quant::nibble_code(blk.qs, qh, 4 * j + t) - 16)) << (8 * t);
      qs[b * 8 + j] = word;
    }
  }
}

// CTA (c, m) quantises blocks 8c .. 8c + 7 of row m of X, one per warp
// (q8act::quantize_block: the CPU's operations); when normalising, every CTA
// first sums the squares of the whole row (f64, the same fixed order in
// each), which for the K of a decode step (a few thousand) costs less than
// a second launch.
constexpr int kQuantWarps = 8;
template <class T>
__global__ void __launch_bounds__(kQuantWarps * 32) quantize_q8_kernel(const T* __restrict__ x,
                                                                       const T* __restrict__ gamma, float eps,
                                                                       int64_t K, int8_t* __restrict__ xq,
                                                                       float2* __restrict__ xd,
                                                                       __half* __restrict__ xh) {
  __shared__ double part[kQuantWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  x += blockIdx.y * K;  // row blockIdx.y of X
  if (xh) xh += blockIdx.y * K;
  else xq += blockIdx.y * K, xd += blockIdx.y * (K / 32);
  pdl_trigger();
  pdl_wait();
  // This thread's element of the blocks it quantises: the sum of squares
  // below reads it too (its iteration blockIdx.x), so it is kept from there
  // and X is read once.
  const int64_t b = int64_t(blockIdx.x) * kQuantWarps + warp, mine = b * 32 + lane;
  float xk = 0.0f, rstd = 1.0f;
  if (gamma) {
    const float gk = b < K / 32 ? q8act::x_at(gamma + mine) : 0.0f;
    double ss = 0.0;
#pragma unroll 4
    for (int64_t k = threadIdx.x; k < K; k += kQuantWarps * 32) {
      const float f = q8act::x_at(x + k);
      if (k == mine) xk = f;
      const double v = double(f);
      ss += v * v;
    }
    rstd = q8act::cta_rstd<kQuantWarps>(ss, part, K, eps);
    xk = __fmul_rn(__fmul_rn(xk, rstd), gk);
  } else if (b < K / 32) {
    xk = q8act::x_at(x + mine);
  }
  if (b < K / 32) {
    if (xh) xh[mine] = __float2half_rn(xk);  // the f16 products' X: normalised only
    else q8act::quantize_block(xk, lane, xq + b * 32, xd + b);
  }
}

template <class T>
cudaError_t launch_quantize(const void* x, const void* gamma, float eps, int64_t M, int64_t K, int8_t* xq,
                            float2* xd, __half* xh, cudaStream_t st) {
  const unsigned grid = unsigned((K / 32 + kQuantWarps - 1) / kQuantWarps);
  if (grid == 0 || M == 0) return cudaSuccess;
  return launch_pdl(quantize_q8_kernel<T>, dim3(grid, unsigned(M)), dim3(kQuantWarps * 32), 0, st,
                    static_cast<const T*>(x), static_cast<const T*>(gamma), eps, K, xq, xd, xh);
}

// The int8 X's bytes, rounded up so that its (dx, sx) start 256-byte aligned.
size_t xq_bytes(int64_t K) { return (size_t(K) + 255) / 256 * 256; }

}  // namespace

cudaError_t launch_quantize_q8(tc_dtype dtype, const void* x, const void* gamma, float eps, int64_t M, int64_t K,
                               int8_t* xq, float2* xd, cudaStream_t st, void* xh) {
  __half* h = static_cast<__half*>(xh);
  if (dtype == TC_DTYPE_F16) return launch_quantize<__half>(x, gamma, eps, M, K, xq, xd, h, st);
  if (dtype == TC_DTYPE_BF16) return launch_quantize<__nv_bfloat16>(x, gamma, eps, M, K, xq, xd, h, st);
  return launch_quantize<float>(x, gamma, eps, M, K, xq, xd, h, st);
}

tc_status quantize_q8(Device&, StreamState* s, const QuantizeQ8Args& a) {
  if (tc_status st = check_quantize_q8(a)) return st;
  s->last_kernel = "quantize_q8";
  if (a.xh && reinterpret_cast<uintptr_t>(a.xh) % 16 != 0)
    return fail(TC_ERR_UNSUPPORTED, "%s: quantize_q8 needs its f16 X 16-byte aligned", a.info.name);
  return check(launch_quantize_q8(TC_DTYPE_F32, a.x, a.gamma, a.eps, a.M, a.K, a.xq, reinterpret_cast<float2*>(a.xd),
                                  s->stream, a.xh),
               "quantize_q8: launch");
}

tc_status gemv_q8(Device& dev, StreamState* s, const GemvQ8Args& a) {
  if (tc_status st = check_gemv_q8(a)) return st;
  const bool rope = a.rope.n > 0;
  if (rope && !gemv_q8_stream_fits(a)) {  // the rows, then RoPE and the cache append by their own kernel
    if (tc_status st = gemv_q8(dev, s, without_rope(a))) return st;
    return rope_kv_append(dev, s, a.rope);
  }
  if (!rope && gemv_q8_xreg_fits(a)) {  // one row of 8-bit X on split Q4_0 / Q8_0 rows longer than 4096
    s->last_kernel = "gemv_q8_xreg";
    return check(launch_gemv_q8_xreg(a, s->stream), "gemv_q8: launch");
  }
  // One row, W through shared memory, X quantised inside when given in f32 (a rope call that gets here fits).
  if (rope || gemv_q8_stream_fits(a)) {
    s->last_kernel = rope ? "gemv_q8_stream (RoPE rows)" : a.x ? "gemv_q8_stream (quantising X)" : "gemv_q8_stream";
    return check(launch_gemv_q8_stream(a, s->stream), "gemv_q8: launch");
  }
  if (a.x) {  // X to quantise by a kernel of its own
    if (tc_status st = quantize_q8(dev, s, quantize_of(a))) return st;
    return gemv_q8(dev, s, product_of(a));
  }
  if (a.xh) {  // f16 X: the tensor-core kernels only
    if (!gemv_q8_mma_fits(a, true))
      return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 of f16 X on a GPU needs K a multiple of 256 and W, X 16-byte aligned",
                  a.info.name);
    s->last_kernel = "gemv_q8_mma (f16 X)";
    return check(launch_gemv_q8_mma(a, a.y, TC_DTYPE_F32, s->stream), "gemv_q8: launch");
  }
  if (reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || reinterpret_cast<uintptr_t>(a.wd) % 2 != 0)
    return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 needs W 16-byte and its scales 2-byte aligned", a.info.name);
  s->last_kernel = gemv_q8_mma_fits(a, false) ? "gemv_q8_mma" : a.wd ? "gemv_q8_rows (split)" : "gemv_q8_rows";
  return check(launch_fmt(a, a.y, s->stream), "gemv_q8: launch");
}

tc_status repack_q8(Device&, StreamState* s, const RepackQ8Args& a) {
  if (tc_status st = check_repack_q8(a)) return st;
  if (reinterpret_cast<uintptr_t>(a.w) % 2 != 0 || reinterpret_cast<uintptr_t>(a.qs) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(a.d) % 2 != 0)
    return fail(TC_ERR_UNSUPPORTED, "%s: repack_q8 needs W and the scales 2-byte, the quants 16-byte aligned",
                a.info.name);
  const int64_t blocks = a.N * (a.K / quant::q8_block_elems(a.fmt));
  if (blocks == 0) return TC_OK;
  const unsigned grid = unsigned(std::min<int64_t>((blocks + 255) / 256, 8192));
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  uint32_t* qs = static_cast<uint32_t*>(a.qs);
  s->last_kernel = "repack_q8";
  if (a.fmt == quant::Q5_0) {
    repack_q5_0_kernel<<<grid, 256, 0, s->stream>>>(static_cast<const quant::BlockQ5_0*>(a.w), blocks, qs, a.d);
    return check(cudaGetLastError(), "repack_q8: launch");
  }
  const int halves = int(quant::split_quant_bytes(a.fmt) / 2 + 1);
  repack_q8_kernel<<<grid, 256, 0, s->stream>>>(w, blocks, halves, quant::q8_split_only(a.fmt), qs, a.d);
  return check(cudaGetLastError(), "repack_q8: launch");
}

size_t gemv_q8_scratch_bytes(int64_t M, int64_t K) {
  return xq_bytes(M * K) + size_t(M * (K / 32)) * sizeof(float2);
}

tc_status gemv_q8_x_rows(StreamState* s, int32_t fmt, tc_dtype dtype, const void* x, const void* gamma, float eps,
                         const void* w, int64_t M, int64_t N, int64_t K, void* y, void* scratch) {
  int8_t* xq = static_cast<int8_t*>(scratch);
  float2* xd = reinterpret_cast<float2*>(static_cast<char*>(scratch) + xq_bytes(M * K));
  s->last_kernel = "quantize_q8";
  if (tc_status st =
          check(launch_quantize_q8(dtype, x, gamma, eps, M, K, xq, xd, s->stream), "gemv_quantized: quantize X"))
    return st;
  GemvQ8Args a;
  a.fmt = fmt, a.M = M, a.N = N, a.K = K;
  a.w = w, a.xq = xq, a.xd = reinterpret_cast<const float*>(xd);
  s->last_kernel = "gemv_q8_rows";
  const cudaError_t e = dtype == TC_DTYPE_F16 ? launch_fmt(a, static_cast<__half*>(y), s->stream)
                                              : launch_fmt(a, static_cast<__nv_bfloat16*>(y), s->stream);
  return check(e, "gemv_quantized: launch");
}

}  // namespace cuda
}  // namespace tc
