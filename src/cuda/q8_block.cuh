// Device helpers of the 8-bit activation path (gemv_q8.cu,
// gemv_q8_stream.cu): quantising X per block of 32 as the CPU does
// (src/cpu/gemv_q8.cpp), the Q4_0 / Q8_0 block dot products, and loading
// and storing the element types.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "core/backend.h"

namespace tc {
namespace cuda {
namespace q8act {

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

// One block of 32 weights against X's block (xl, xh: its 32 int8 values,
// (dx, sx) = xd), the dot product exact in int32 (__dp4a).
// Q4_0, q the 16 bytes of 4-bit codes (byte j: weight j in the low nibble,
// j + 16 in the high one), w = d (q - 8):  d (dx dot(q, xq) - 8 sx).
__device__ __forceinline__ float q4_0_dot(const uint32_t (&q)[4], float d, int4 xl, int4 xh, float2 xd) {
  const int lo[4] = {xl.x, xl.y, xl.z, xl.w}, hi[4] = {xh.x, xh.y, xh.z, xh.w};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s = __dp4a(int(q[i] & 0x0F0F0F0Fu), lo[i], s);
    s = __dp4a(int((q[i] >> 4) & 0x0F0F0F0Fu), hi[i], s);
  }
  return d * fmaf(xd.x, float(s), -8.0f * xd.y);
}
// Q8_0, q the 32 int8 codes:  d dx dot(q, xq).
__device__ __forceinline__ float q8_0_dot(const uint32_t (&q)[8], float d, int4 xl, int4 xh, float2 xd) {
  const int x[8] = {xl.x, xl.y, xl.z, xl.w, xh.x, xh.y, xh.z, xh.w};
  int s = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = __dp4a(int(q[i]), x[i], s);
  return d * (xd.x * float(s));
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

// Output element y of product r (u: the up row's product for SwiGLU), E
// one of GemvQ8Args' epilogues.
template <int E, class TY>
__device__ __forceinline__ void epilogue(TY* y, float r, float u) {
  if constexpr (E == GemvQ8Args::kSwiglu) {
    // silu as the CPU's swiglu: g / (1 + exp(min(87, -g))).
    store(y, r * (1.0f / (1.0f + expf(fminf(87.0f, -r)))) * u);
  } else if constexpr (E == GemvQ8Args::kAdd) {
    *y += r;
  } else {
    store(y, r);
  }
}

}  // namespace q8act
}  // namespace cuda
}  // namespace tc
