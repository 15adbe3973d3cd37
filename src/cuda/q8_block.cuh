// Device helpers of the 8-bit activation path (gemv_q8.cu,
// gemv_q8_stream.cu): quantising X per block of 32 as the CPU does
// (src/cpu/gemv_q8.cpp), the block dot products of every 8-bit product
// format (Q4_0 / Q8_0 / Q4_1 / Q5_1 blocks, K-quant superblock quarters), and loading
// and storing the element types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/backend.h"
#include "core/gate.h"

namespace tc {
namespace cuda {
namespace q8act {

// One block of 32 activations quantised by 32 / N lanes of a warp, each
// holding N consecutive values (lane `sub` of the group holds x[N sub ..
// N sub + N - 1]; mask: the group's lanes): dx = max|x| / 127, xq =
// round-to-nearest-even(x * (1 / dx)), sx = dx sum(xq): the CPU's
// quantize_block, operation for operation.
template <int N>
__device__ __forceinline__ void quantize_block_lanes(const float (&v)[N], int sub, unsigned mask, int8_t* xq,
                                                     float2* xd) {
  float amax = fabsf(v[0]);
#pragma unroll
  for (int k = 1; k < N; ++k) amax = fmaxf(amax, fabsf(v[k]));
#pragma unroll
  for (int o = 16 / N; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  int sum = 0;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const int q = max(-128, min(127, __float2int_rn(__fmul_rn(v[k], id))));
    xq[N * sub + k] = int8_t(q);
    sum += q;
  }
#pragma unroll
  for (int o = 16 / N; o > 0; o >>= 1) sum += __shfl_xor_sync(mask, sum, o);
  if (sub == 0) *xd = make_float2(d, d * float(sum));
}
// Lane i of a warp holding x[i].
__device__ __forceinline__ void quantize_block(float v, int lane, int8_t* xq, float2* xd) {
  const float x[1] = {v};
  quantize_block_lanes<1>(x, lane, 0xffffffffu, xq, xd);
}

// RMS norm's 1 / sqrt(sum(x^2) / K + eps) from each thread's part ss of
// the f64 sum of squares, over a CTA of W warps (warp trees, then the warps
// in order: the same value in every CTA); part holds W doubles.
template <int W>
__device__ __forceinline__ float cta_rstd(double ss, double* part, int64_t K, float eps) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  double t = 0.0;
#pragma unroll
  for (int i = 0; i < W; ++i) t += part[i];
  return float(1.0 / sqrt(t / double(K) + double(eps)));
}

// dp4a of unsigned bytes a with signed bytes b, plus c.
__device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
  int d;
  asm("dp4a.u32.s32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// One block of 32 weights against X's block (xl, xh: its 32 int8 values,
// (dx, sx) = xd), the dot product exact in int32 (__dp4a).
// Q4_0, q the 16 bytes of 4-bit codes (byte j: weight j in the low nibble,
// j + 16 in the high one), w = d (q - 8):  d (dx dot(q, xq) - 8 sx).
// The high nibbles are dotted in place (as unsigned bytes 16 q) and their
// sum, a multiple of 16, shifted back: no shift a word, and two independent
// chains of four dp4a instead of one of eight.
__device__ __forceinline__ float q4_0_dot(const uint32_t (&q)[4], float d, int4 xl, int4 xh, float2 xd) {
  const int lo[4] = {xl.x, xl.y, xl.z, xl.w}, hi[4] = {xh.x, xh.y, xh.z, xh.w};
  int s0 = 0, s1 = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) s0 = dp4a_us(q[i] & 0x0F0F0F0Fu, lo[i], s0), s1 = dp4a_us(q[i] & 0xF0F0F0F0u, hi[i], s1);
  return d * fmaf(xd.x, float(s0 + (s1 >> 4)), -8.0f * xd.y);
}
// Q8_0, q the 32 int8 codes:  d dx dot(q, xq).
__device__ __forceinline__ float q8_0_dot(const uint32_t (&q)[8], float d, int4 xl, int4 xh, float2 xd) {
  const int x[8] = {xl.x, xl.y, xl.z, xl.w, xh.x, xh.y, xh.z, xh.w};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = __dp4a(int(q[i]), x[i], s);
  return d * (xd.x * float(s));
}

// The fifth bits of 4 weights (bits 0..3 of b) as bit 4 of 4 bytes: each
// multiplier term moves bit j of b to bit 8j, the sums never carry.
__device__ __forceinline__ uint32_t fifth_bits(uint32_t b) { return ((b & 15u) * 0x00204081u & 0x01010101u) << 4; }

// Q4_1 / Q5_1, q the 16 bytes of 4-bit codes (as Q4_0's), qh the fifth bits
// (bit i for weight i; 0 for Q4_1), w = d q + m:  d dx dot(q, xq) + m sx.
__device__ __forceinline__ float q4_1_dot(const uint32_t (&q)[4], uint32_t qh, float d, float m, int4 xl, int4 xh,
                                          float2 xd) {
  const int lo[4] = {xl.x, xl.y, xl.z, xl.w}, hi[4] = {xh.x, xh.y, xh.z, xh.w};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = __dp4a(int((q[i] & 0x0F0F0F0Fu) | fifth_bits(qh >> (4 * i))), lo[i], s);
    s = __dp4a(int(((q[i] >> 4) & 0x0F0F0F0Fu) | fifth_bits(qh >> (16 + 4 * i))), hi[i], s);
  }
  return fmaf(d * xd.x, float(s), m * xd.y);
}
// A Q4_1 (QB = 20) or Q5_1 (24) block in GGUF's layout from its words b
// (4-byte aligned: d and m, Q5_1's fifth bits, then the nibbles).
template <int QB>
__device__ __forceinline__ float q_1_block_dot(const uint32_t* b, int4 xl, int4 xh, float2 xd) {
  constexpr int at = QB == 24 ? 2 : 1;  // the nibbles' first word
  const uint32_t q[4] = {b[at], b[at + 1], b[at + 2], b[at + 3]};
  return q4_1_dot(q, QB == 24 ? b[1] : 0u, __half2float(__ushort_as_half(uint16_t(b[0]))),
                  __half2float(__ushort_as_half(uint16_t(b[0] >> 16))), xl, xh, xd);
}

// ---- K-quant superblocks of 256 weights, a quarter (64 weights) at a time ----

// The 6-bit scales and mins of sub-blocks 2p and 2p + 1 of a Q4_K / Q5_K
// superblock from its 12 scale bytes (words a, b, c; quant/formats.h,
// scale_min_k4) as the bytes sc0, sc1, m0, m1 of one word: bytes 2t, 2t + 1
// (t = p % 2) of a and b are the scales and mins themselves (p < 2), or
// their top two bits, under c's nibbles (p >= 2).
__device__ __forceinline__ uint32_t k4_scale_bytes(int p, uint32_t a, uint32_t b, uint32_t c) {
  const int t = p & 1;
  const uint32_t sel = uint32_t(2 * t) | uint32_t(2 * t + 1) << 4 | uint32_t(4 + 2 * t) << 8 | uint32_t(5 + 2 * t) << 12;
  const uint32_t ab = __byte_perm(a, b, sel);
  const uint32_t cc = __byte_perm(c, c, sel);
  const uint32_t high = (cc & 0x00000F0Fu) | ((cc >> 4) & 0x0F0F0000u) | ((ab >> 2) & 0x30303030u);
  return p < 2 ? ab & 0x3F3F3F3Fu : high;
}

// Quarter p of a Q4_K / Q5_K superblock whose first 16 bytes (d, dmin, 12
// scale bytes) are h, from the exact int32 dot products s0, s1 of its two
// sub-blocks with X's two blocks there ((dx, sx): x0, x1):
//   d (sc0 dx0 s0 + sc1 dx1 s1) - dmin (m0 sx0 + m1 sx1)
__device__ __forceinline__ float k4_quarter_sum(const uint4& h, int p, int s0, int s1, float2 x0, float2 x1) {
  const uint32_t w = k4_scale_bytes(p, h.y, h.z, h.w);
  const float sc0 = float(w & 0xFFu), sc1 = float((w >> 8) & 0xFFu);
  const float m0 = float((w >> 16) & 0xFFu), m1 = float(w >> 24);
  const float d = __half2float(__ushort_as_half(uint16_t(h.x))), dmin = __half2float(__ushort_as_half(uint16_t(h.x >> 16)));
  return d * fmaf(sc0 * x0.x, float(s0), sc1 * x1.x * float(s1)) - dmin * fmaf(m0, x0.y, m1 * x1.y);
}

// A Q4_K quarter from its 32 quant bytes (q0, q1: sub-block 2p in the low
// nibbles, 2p + 1 in the high ones) against X's 64 values x: the high
// nibbles are dotted in place (16 times their value) and the sum shifted
// back, exact.
__device__ __forceinline__ float q4_k_quarter_dot(const uint4& h, int p, const uint4& q0, const uint4& q1,
                                                  const int4 (&x)[4], float2 x0, float2 x1) {
  const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  const int xa[8] = {x[0].x, x[0].y, x[0].z, x[0].w, x[1].x, x[1].y, x[1].z, x[1].w};
  const int xb[8] = {x[2].x, x[2].y, x[2].z, x[2].w, x[3].x, x[3].y, x[3].z, x[3].w};
  int s0 = 0, s1 = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s0 = dp4a_us(q[i] & 0x0F0F0F0Fu, xa[i], s0), s1 = dp4a_us(q[i] & 0xF0F0F0F0u, xb[i], s1);
  return k4_quarter_sum(h, p, s0, s1 >> 4, x0, x1);
}

// A Q5_K quarter: Q4_K's nibbles with the fifth bits of quarter p from the
// 32 bytes qh (h0, h1): byte l, bit 2p for weight 64p + l, bit 2p + 1 for
// 64p + 32 + l.
__device__ __forceinline__ float q5_k_quarter_dot(const uint4& h, int p, const uint4& q0, const uint4& q1,
                                                  const uint4& h0, const uint4& h1, const int4 (&x)[4], float2 x0,
                                                  float2 x1) {
  const uint32_t q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  const uint32_t qh[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
  const int xa[8] = {x[0].x, x[0].y, x[0].z, x[0].w, x[1].x, x[1].y, x[1].z, x[1].w};
  const int xb[8] = {x[2].x, x[2].y, x[2].z, x[2].w, x[3].x, x[3].y, x[3].z, x[3].w};
  int s0 = 0, s1 = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t lo = (q[i] & 0x0F0F0F0Fu) | ((qh[i] >> (2 * p)) & 0x01010101u) << 4;
    const uint32_t hi = ((q[i] >> 4) & 0x0F0F0F0Fu) | ((qh[i] >> (2 * p + 1)) & 0x01010101u) << 4;
    s0 = dp4a_us(lo, xa[i], s0), s1 = dp4a_us(hi, xb[i], s1);
  }
  return k4_quarter_sum(h, p, s0, s1, x0, x1);
}

// The sum of 16 int8 values of X (Q6_K's codes are offset by 32:
// dot(q - 32, x) = dot(q, x) - 32 sum(x), exact).
__device__ __forceinline__ int x16_sum(const int4& x) {
  return __dp4a(x.w, 0x01010101, __dp4a(x.z, 0x01010101, __dp4a(x.y, 0x01010101, __dp4a(x.x, 0x01010101, 0))));
}

// Quarter p = 2h + i of a Q6_K superblock in the split layout (ql[128],
// qh[64], int8 scales[16]; d apart): l in [16i, 16i + 16) of half h, i.e.
// the groups of 16 weights 128h + 32g + 16i + l' (g < 4) with quants
//   g 0: ql[64h + l] low nibble  | qh[32h + l] bits 0-1     scale sc[8h + i]
//   g 1: ql[64h + 32 + l] low    | bits 2-3                 sc[8h + 2 + i]
//   g 2: ql[64h + l] high nibble | bits 4-5                 sc[8h + 4 + i]
//   g 3: ql[64h + 32 + l] high   | bits 6-7                 sc[8h + 6 + i]
// and q - 32 a signed byte; group g sits in X's block 4h + g at offset 16i.
// a, b: ql's 16 bytes at 64h + 16i and 64h + 32 + 16i; c: qh's at 32h + 16i;
// sw: the 16 scales; x[g], xs[g], xd[g]: X's 16 values, their sum
// (x16_sum) and their block's (dx, sx).
//   d sum_g sc_g dx_g (dot(q_g, xq_g) - 32 xs_g)
__device__ __forceinline__ float q6_k_quarter_dot(const uint4& a, const uint4& b, const uint4& c, const uint4& sw,
                                                  float d, int p, const int4 (&x)[4], const int (&xs)[4],
                                                  const float2 (&xd)[4]) {
  const int h = p >> 1, i = p & 1;
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w}, cw[4] = {c.x, c.y, c.z, c.w};
  const uint32_t sc[4] = {sw.x, sw.y, sw.z, sw.w};
  float r = 0.0f;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const int xw[4] = {x[g].x, x[g].y, x[g].z, x[g].w};
    int s = -32 * xs[g];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo4 = g & 2 ? (g & 1 ? bw[j] : aw[j]) >> 4 : (g & 1 ? bw[j] : aw[j]);
      const uint32_t hb = g == 0 ? cw[j] << 4 : g == 1 ? cw[j] << 2 : g == 2 ? cw[j] : cw[j] >> 2;
      s = dp4a_us((lo4 & 0x0F0F0F0Fu) | (hb & 0x30303030u), xw[j], s);
    }
    const int k = 8 * h + 2 * g + i;  // the int8 scale's byte
    r = fmaf(float(int8_t(sc[k >> 2] >> (8 * (k & 3)))) * xd[g].x, float(s), r);
  }
  return d * r;
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

// Output element y of product r (u: the up row's product for the gated
// epilogues), E one of GemvQ8Args' epilogues.
template <int E, class TY>
__device__ __forceinline__ void epilogue(TY* y, float r, float u) {
  if constexpr (GemvQ8Args::gated(E)) {
    store(y, gate::glu(E == GemvQ8Args::kGeglu, r, u));
  } else if constexpr (E == GemvQ8Args::kAdd) {
    *y += r;
  } else {
    store(y, r);
  }
}

}  // namespace q8act
}  // namespace cuda
}  // namespace tc
