// Quantized GEMV with 8-bit activations (included by gemv_quantized.cu only).
//
// For f16/bf16 activations against Q4_0, Q8_0, Q4_K and Q6_K weights, X is
// quantised to 8 bits per block of 32, as the CPU does on AVX512-VNNI
// processors (src/cpu/quant_dot_vnni.cpp) and llama.cpp's mmvq does on GPUs:
//   dx = max|x| / 127,  xq = round-to-nearest-even(x * (1 / dx)) (int8),
//   sx = dx * sum(xq)                                   (per block of 32)
// and a run of weights w = s * q + t (q small integers) then contributes
//   s * dx * sum(q * xq) + t * sx          (t the min of Q4_K, or s * -8 ...)
// where sum(q * xq) over four weights is one __dp4a (four int8 products
// added into an int32). Each activation moves by at most dx / 2, which is the
// error the tests bound (test_gemv_int8_activation_error_bound).
//
// Why: at small M the product streams W once, at 0.56 (Q4_0) to 1.06 (Q8_0)
// bytes per weight; the f32 kernel spends per weight a byte permute, a
// subtraction and an FMA, plus 4-16 bytes of f32 X read from L1, which keeps
// it instruction- and L1-bound far below HBM bandwidth. Here per 4 weights:
// one mask (or shift) and one dp4a, and X costs 1.25 bytes per weight.
//
// Launches: for M = 1 (decode) one kernel, gemv1, whose CTAs each quantise
// X into shared memory before their rows; for M > 1 a pre-kernel
// (launch_quantize_q8 of gemv_q8.cu) writes the int8 X to the stream's
// workspace, and gemv takes up to 8 rows of X per pass over W.
//
// Layout of the work: one warp per row of W (8 rows per CTA). kLanes
// consecutive lanes share a block of weights, each taking a fixed piece of
// it (a half block of Q4_0 / Q8_0, an eighth of a Q4_K / Q6_K super-block),
// so one warp step covers 32 / kLanes consecutive blocks: a contiguous span
// of the row. The loop is unrolled kUnroll times with every weight load of
// the unrolled steps issued before any is used, so each lane has 20-64 bytes
// of W in flight (enough, with 32+ warps per SM, to cover HBM latency at
// full bandwidth). Constant terms shared by several lanes (Q4_0's -8 q
// offset, Q4_K's mins) are split between them in equal parts: each lane adds
// its share of t * sx, and the shares sum to the exact term.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/quant_formats.cuh"

namespace tc {
namespace cuda {
namespace q8act {

__device__ __forceinline__ float f16(uint32_t bits) { return __half2float(__ushort_as_half(uint16_t(bits))); }

// X of the tile, quantised: row m's int8 values at xq + m K (16-byte
// aligned: 256-aligned in the workspace or shared memory, and K % 32 == 0),
// its (dx, sx) of block j at xd[m K / 32 + j].
struct XQ {
  const int8_t* xq;
  const float2* xd;
  int64_t K;
};

// X loads: generic (not __ldg), as X is in shared memory for M = 1.
__device__ __forceinline__ int2 ld_x8(const int8_t* p) { return *reinterpret_cast<const int2*>(p); }
__device__ __forceinline__ int4 ld_x16(const int8_t* p) { return *reinterpret_cast<const int4*>(p); }

constexpr uint32_t kLo = 0x0F0F0F0Fu;

// Q4_0: 18-byte blocks (2-byte aligned). Lane piece p (0, 1): quant bytes
// 8p .. 8p+7, whose low nibbles are weights 8p .. 8p+7 and high nibbles
// weights 16+8p .. 16+8p+7; w = d (q - 8), so the piece adds
// d (dx sum(q xq) - 4 sx): the -8 sx of the block, half per piece.
struct Q4_0 {
  static constexpr int kQK = 32, kBytes = 18, kLanes = 2, kUnroll = 4, kAlign = 2;
  struct Raw {
    uint32_t d, v0, v1;
  };
  template <int A>
  __device__ __forceinline__ static Raw load(const uint8_t* blk, int p) {
    constexpr int A2 = qdev::al(A, 2);
    return {qdev::ld16<A2>(blk), qdev::ld32<A2>(blk + 2 + 8 * p), qdev::ld32<A2>(blk + 6 + 8 * p)};
  }
  template <int MT>
  __device__ __forceinline__ static void dot(const Raw& r, int p, int64_t b, const XQ& x, int mt, float (&acc)[MT]) {
    const float d = f16(r.d);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= mt) break;
      const int8_t* xb = x.xq + m * x.K + 32 * b;
      const int2 lo = ld_x8(xb + 8 * p), hi = ld_x8(xb + 16 + 8 * p);
      const float2 ds = x.xd[m * (x.K / 32) + b];
      int s = __dp4a(int(r.v0 & kLo), lo.x, 0);
      s = __dp4a(int(r.v1 & kLo), lo.y, s);
      s = __dp4a(int((r.v0 >> 4) & kLo), hi.x, s);
      s = __dp4a(int((r.v1 >> 4) & kLo), hi.y, s);
      acc[m] = fmaf(d, fmaf(ds.x, float(s), -4.0f * ds.y), acc[m]);
    }
  }
};

// Q8_0: 34-byte blocks (2-byte aligned). Lane piece p: weights 16p .. 16p+15,
// w = d q with q int8.
struct Q8_0 {
  static constexpr int kQK = 32, kBytes = 34, kLanes = 2, kUnroll = 4, kAlign = 2;
  struct Raw {
    uint32_t d, v[4];
  };
  template <int A>
  __device__ __forceinline__ static Raw load(const uint8_t* blk, int p) {
    constexpr int A2 = qdev::al(A, 2);
    Raw r;
    r.d = qdev::ld16<A2>(blk);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = qdev::ld32<A2>(blk + 2 + 16 * p + 4 * i);
    return r;
  }
  template <int MT>
  __device__ __forceinline__ static void dot(const Raw& r, int p, int64_t b, const XQ& x, int mt, float (&acc)[MT]) {
    const float d = f16(r.d);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= mt) break;
      const int4 xv = ld_x16(x.xq + m * x.K + 32 * b + 16 * p);
      const float dx = x.xd[m * (x.K / 32) + b].x;
      int s = __dp4a(int(r.v[0]), xv.x, 0);
      s = __dp4a(int(r.v[1]), xv.y, s);
      s = __dp4a(int(r.v[2]), xv.z, s);
      s = __dp4a(int(r.v[3]), xv.w, s);
      acc[m] = fmaf(d * dx, float(s), acc[m]);
    }
  }
};

// Q4_K: 144-byte super-blocks of 256 (4-byte aligned). Lane piece l (< 8):
// chunk c = l / 2 of 64 weights, bytes 16 (l % 2) .. +15 of its 32 quant
// bytes: low nibbles are weights 16 (l % 2) .. +15 of sub-block 2c, high
// nibbles the same of sub-block 2c + 1. w = (d sc) q - (dmin m) per
// sub-block of 32 (= one block of X): the piece adds
// d sc dx sum(q xq) - dmin m sx / 2 for each of its two sub-blocks.
struct Q4_K {
  static constexpr int kQK = 256, kBytes = 144, kLanes = 8, kUnroll = 2, kAlign = 4;
  struct Raw {
    uint32_t dm, s0, s1, s2, v[4];
  };
  template <int A>
  __device__ __forceinline__ static Raw load(const uint8_t* blk, int l) {
    constexpr int A4 = qdev::al(A, 4);
    Raw r;
    r.dm = qdev::ld32<A4>(blk);
    r.s0 = qdev::ld32<A4>(blk + 4), r.s1 = qdev::ld32<A4>(blk + 8), r.s2 = qdev::ld32<A4>(blk + 12);
    const uint8_t* q = blk + 16 + 32 * (l >> 1) + 16 * (l & 1);
#pragma unroll
    for (int i = 0; i < 4; ++i) r.v[i] = qdev::ld32<A4>(q + 4 * i);
    return r;
  }
  template <int MT>
  __device__ __forceinline__ static void dot(const Raw& r, int l, int64_t b, const XQ& x, int mt, float (&acc)[MT]) {
    const int c = l >> 1;
    float sc0, m0, sc1, m1;
    qdev::scale_min_k4(2 * c, r.s0, r.s1, r.s2, &sc0, &m0);
    qdev::scale_min_k4(2 * c + 1, r.s0, r.s1, r.s2, &sc1, &m1);
    const float d = f16(r.dm), dmin = f16(r.dm >> 16);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= mt) break;
      const int8_t* xb = x.xq + m * x.K + 256 * b + 64 * c + 16 * (l & 1);
      const int4 xl = ld_x16(xb), xh = ld_x16(xb + 32);
      const float2* xd = x.xd + m * (x.K / 32) + 8 * b + 2 * c;
      const float2 d0 = xd[0], d1 = xd[1];
      int sl = __dp4a(int(r.v[0] & kLo), xl.x, 0), sh = __dp4a(int((r.v[0] >> 4) & kLo), xh.x, 0);
      sl = __dp4a(int(r.v[1] & kLo), xl.y, sl), sh = __dp4a(int((r.v[1] >> 4) & kLo), xh.y, sh);
      sl = __dp4a(int(r.v[2] & kLo), xl.z, sl), sh = __dp4a(int((r.v[2] >> 4) & kLo), xh.z, sh);
      sl = __dp4a(int(r.v[3] & kLo), xl.w, sl), sh = __dp4a(int((r.v[3] >> 4) & kLo), xh.w, sh);
      const float dots = fmaf(sc0 * d0.x, float(sl), sc1 * d1.x * float(sh));
      const float mins = fmaf(m0, d0.y, m1 * d1.y);
      acc[m] = fmaf(d, dots, fmaf(-0.5f * dmin, mins, acc[m]));
    }
  }
};

// Q6_K: 210-byte super-blocks of 256 (2-byte aligned). Lane piece l (< 8):
// half h = l / 4 (128 weights), positions l0 .. l0+7 with l0 = 8 (l % 4):
// quarter t (< 4) holds weights 128h + 32t + l0 .. +7, low 4 bits from
// ql[64h + 32 (t % 2) + l] (nibble t / 2), top 2 bits bits 2t, 2t+1 of
// qh[32h + l], scale scales[8h + l0 / 16 + 2t]; w = (d sc) (q - 32). Quarter
// t is block 8b + 4h + t of X; the piece adds d sc dx sum((q - 32) xq) per
// quarter, q - 32 formed bytewise by __vsub4 (no borrows: q < 64).
struct Q6_K {
  static constexpr int kQK = 256, kBytes = 210, kLanes = 8, kUnroll = 2, kAlign = 2;
  struct Raw {
    uint32_t d, sc, a[2], b[2], c[2];  // sc: the four int8 scales, quarter t in byte t
  };
  template <int A>
  __device__ __forceinline__ static Raw load(const uint8_t* blk, int l) {
    constexpr int A2 = qdev::al(A, 2);
    const int h = l >> 2, l0 = 8 * (l & 3);
    Raw r;
    r.d = qdev::ld16<A2>(blk + 208);
    const uint8_t* s = blk + 192 + 8 * h + l0 / 16;
    r.sc = qdev::ld8(s) | (qdev::ld8(s + 2) << 8) | (qdev::ld8(s + 4) << 16) | (qdev::ld8(s + 6) << 24);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      r.a[i] = qdev::ld32<A2>(blk + 64 * h + l0 + 4 * i);
      r.b[i] = qdev::ld32<A2>(blk + 64 * h + 32 + l0 + 4 * i);
      r.c[i] = qdev::ld32<A2>(blk + 128 + 32 * h + l0 + 4 * i);
    }
    return r;
  }
  template <int MT>
  __device__ __forceinline__ static void dot(const Raw& r, int l, int64_t b, const XQ& x, int mt, float (&acc)[MT]) {
    const int h = l >> 2, l0 = 8 * (l & 3);
    const float d = f16(r.d);
    int q[4][2];  // quarter t, word i: four (q - 32) as int8
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t a = r.a[i], bb = r.b[i], c = r.c[i];
      q[0][i] = int(__vsub4((a & kLo) | ((c << 4) & 0x30303030u), 0x20202020u));
      q[1][i] = int(__vsub4((bb & kLo) | ((c << 2) & 0x30303030u), 0x20202020u));
      q[2][i] = int(__vsub4(((a >> 4) & kLo) | (c & 0x30303030u), 0x20202020u));
      q[3][i] = int(__vsub4(((bb >> 4) & kLo) | ((c >> 2) & 0x30303030u), 0x20202020u));
    }
    float sc[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) sc[t] = float(int8_t(uint8_t(r.sc >> (8 * t))));
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= mt) break;
      const int8_t* xb = x.xq + m * x.K + 256 * b + 128 * h + l0;
      const float2* xd = x.xd + m * (x.K / 32) + 8 * b + 4 * h;
      float s = 0.0f;
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int2 xv = ld_x8(xb + 32 * t);
        const int si = __dp4a(q[t][1], xv.y, __dp4a(q[t][0], xv.x, 0));
        s = fmaf(sc[t] * xd[t].x, float(si), s);
      }
      acc[m] = fmaf(d, s, acc[m]);
    }
  }
};

// One block of 32 activations quantised by the 32 lanes of a warp (lane i
// holds x[i]): dx = max|x| / 127, xq = round-to-nearest-even(x * (1 / dx)),
// sx = dx sum(xq): the CPU's quantize_block, operation for operation.
__device__ __forceinline__ void quantize_block(float v, int lane, int8_t* xq, float2* xd) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  const int q = max(-128, min(127, __float2int_rn(__fmul_rn(v, id))));
  xq[lane] = int8_t(q);
  int sum = q;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) *xd = make_float2(d, d * float(sum));
}

__device__ __forceinline__ float x_at(const float* p) { return __ldg(p); }
__device__ __forceinline__ float x_at(const __half* p) { return __half2float(__ldg(p)); }
__device__ __forceinline__ float x_at(const __nv_bfloat16* p) {
  return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}

template <class TY>
__device__ __forceinline__ void store(TY* y, float s) {
  if constexpr (std::is_same<TY, float>::value) *y = s;
  else if constexpr (std::is_same<TY, __half>::value) *y = __float2half_rn(s);
  else *y = __float2bfloat16_rn(s);
}

// Row n of W (at wr) against the tile's mt <= MT rows of X, into the
// lane's partial sums acc[m], from the lane's block b on.
template <class F, int A, int MT>
__device__ __forceinline__ void row_dot(const uint8_t* wr, const XQ& x, int mt, int lane, float (&acc)[MT],
                                        int64_t b) {
  constexpr int kStep = 32 / F::kLanes, U = F::kUnroll;  // blocks per warp step; steps per round
  const int piece = lane % F::kLanes;
  const int64_t nb = x.K / F::kQK;
  // Full rounds: all U loads first, then the arithmetic.
  for (; b + (U - 1) * kStep < nb; b += U * kStep) {
    typename F::Raw r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) r[u] = F::template load<A>(wr + (b + u * kStep) * F::kBytes, piece);
#pragma unroll
    for (int u = 0; u < U; ++u) F::template dot<MT>(r[u], piece, b + u * kStep, x, mt, acc);
  }
  for (; b < nb; b += kStep) F::template dot<MT>(F::template load<A>(wr + b * F::kBytes, piece), piece, b, x, mt, acc);
}

// Y[m, n] for the tile's rows m < mt <= MT, X quantised beforehand (by
// launch_quantize_q8 of gemv_q8.cu); one warp per row n of W.
template <class F, int A, int MT, class TY, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) gemv(const uint8_t* __restrict__ w, XQ x, TY* __restrict__ y, int mt,
                                                    int64_t N) {
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp leaves together
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
  row_dot<F, A, MT>(w + n * (x.K / F::kQK) * F::kBytes, x, mt, lane, acc, lane / F::kLanes);
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    float s = acc[m];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (m < mt && lane == 0) store(y + int64_t(m) * N + n, s);
  }
}

// M = 1 in one launch: each CTA first quantises the row of X (xs, K elements
// of T) into its shared memory (K + K / 4 bytes, dynamic), then its warps
// take one row of W each. X is re-read by every CTA, from L2: K (f16) bytes
// against the 8 rows' 8 x 0.56 K (Q4_0) or more bytes of W, and it saves the
// separate quantisation launch and its dependency wait, which at 4096 x 4096
// Q4_0 (2 us of W at full bandwidth) would cost as much as the product. The
// X loads of a warp are all issued before any block is quantised, and the
// first round of W loads before that, so the prologue overlaps the stream
// of W instead of preceding it.
template <class F, int A, class T, class TY, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) gemv1(const uint8_t* __restrict__ w, const T* __restrict__ xs,
                                                     TY* __restrict__ y, int64_t N, int64_t K) {
  constexpr int kStep = 32 / F::kLanes, U = F::kUnroll, kQ = 16;
  extern __shared__ int4 smem[];  // int4: 16-byte aligned
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float2* xd = reinterpret_cast<float2*>(xq + K);  // K % 32 == 0: 8-byte aligned
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, piece = lane % F::kLanes;
  const int64_t n = int64_t(blockIdx.x) * kWarps + warp;
  const int64_t nb = K / F::kQK, nbx = K / 32;
  // The first round of W (rows past N load row N - 1 and store nothing).
  const uint8_t* wr = w + (n < N ? n : N - 1) * nb * F::kBytes;
  int64_t b = lane / F::kLanes;
  const bool first = b + (U - 1) * kStep < nb;
  typename F::Raw r[U];
  if (first) {
#pragma unroll
    for (int u = 0; u < U; ++u) r[u] = F::template load<A>(wr + (b + u * kStep) * F::kBytes, piece);
  }
  // X, kQ blocks of 32 per warp at a time, loads first.
  for (int64_t j0 = warp; j0 < nbx; j0 += int64_t(kWarps) * kQ) {
    float v[kQ];
#pragma unroll
    for (int i = 0; i < kQ; ++i) {
      const int64_t j = j0 + int64_t(i) * kWarps;
      v[i] = j < nbx ? x_at(xs + 32 * j + lane) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kQ; ++i) {
      const int64_t j = j0 + int64_t(i) * kWarps;
      if (j < nbx) quantize_block(v[i], lane, xq + 32 * j, xd + j);  // j is the same for the whole warp
    }
  }
  __syncthreads();
  if (n >= N) return;  // the whole warp leaves together
  const XQ x{xq, xd, K};
  float acc[1] = {0.0f};
  if (first) {
#pragma unroll
    for (int u = 0; u < U; ++u) F::template dot<1>(r[u], piece, b + u * kStep, x, 1, acc);
    b += U * kStep;
  }
  row_dot<F, A, 1>(wr, x, 1, lane, acc, b);
  float s = acc[0];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) store(y + n, s);
}

}  // namespace q8act
}  // namespace cuda
}  // namespace tc
