// Helpers shared by the CUDA training kernels (norms, softmax, activations,
// RoPE, AdamW, fused norm + GEMV): element conversions, 16-byte packs,
// warp and row reductions, and the choice of a row kernel's shape.
//
// Row kernels keep a thread's slice of a row in registers: the row is split
// into "vectors" of E elements (16 bytes when the row length and every
// pointer allow it, else single elements); a row is handled by TPR threads
// (blockDim.x, a multiple of 32), thread t holding vectors t, t + TPR, ...,
// at most NV of them (a template parameter, so the slice is a register
// array). A block holds blockDim.y rows side by side (short rows) and loops
// over row groups with a grid stride: one group per block (all_blocks), or,
// for kernels that keep weight-gradient partial sums per block, as many
// groups as it takes with the resident blocks (resident_grid).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "core/backend.h"

namespace tc {
namespace cuda {

// ---- element conversions (f32 arithmetic, round to nearest even on store) ----

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }
// bf16 is the top half of an f32: widening is a shift of the bits, written
// as integer operations the compiler sees through (cuda_bf16.h's conversion
// is an asm block it cannot move or rematerialise, which keeps widened copies
// of a packed slice alive and costs registers).
__device__ __forceinline__ float to_f(__nv_bfloat16 v) {
  return __uint_as_float(uint32_t(static_cast<__nv_bfloat16_raw>(v).x) << 16);
}

template <class T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  // cvt.rn.bf16.f32 as __float2bfloat16_rn, into a plain register: the
  // header's version writes through a reinterpret_cast of the result, which
  // left packed bf16 slices in local memory (spilled) in the row kernels.
  __nv_bfloat16_raw r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
  return __nv_bfloat16(r);
}

// E consecutive elements, loaded and stored as one access (16 bytes when
// E * sizeof(T) == 16; the pointer must then be 16-byte aligned).
template <class T, int E, class = void>
struct alignas(sizeof(T) * E) Pack {
  T v[E];
  __device__ __forceinline__ float f(int e) const { return to_f(v[e]); }
  __device__ __forceinline__ void set(int e, float x) { v[e] = from_f<T>(x); }
};

// Bits of an f16 or bf16 value, and the value from its bits.
__device__ __forceinline__ uint32_t bits_of(__half h) { return static_cast<__half_raw>(h).x; }
__device__ __forceinline__ uint32_t bits_of(__nv_bfloat16 h) { return static_cast<__nv_bfloat16_raw>(h).x; }

// f16 and bf16 pairs held as 32-bit words (element 2k in the low half of
// word k, as in memory): held as 16-bit values, ptxas gives each its own
// 32-bit register, doubling a packed slice's registers (seen as spills of
// the bf16 row kernels at 64-80 registers).
template <class T, int E>
struct alignas(sizeof(T) * E) Pack<T, E, std::enable_if_t<sizeof(T) == 2 && E % 2 == 0>> {
  uint32_t w[E / 2];
  __device__ __forceinline__ float f(int e) const {
    const uint32_t x = w[e / 2];
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(e % 2 ? x & 0xffff0000u : x << 16);
    else return __half2float(__ushort_as_half((unsigned short)(e % 2 ? x >> 16 : x & 0xffffu)));
  }
  __device__ __forceinline__ void set(int e, float x) {
    const uint32_t b = bits_of(from_f<T>(x));
    w[e / 2] = e % 2 ? (w[e / 2] & 0xffffu) | (b << 16) : (w[e / 2] & 0xffff0000u) | b;
  }
};

template <class T, int E>
__device__ __forceinline__ Pack<T, E> load(const T* p) {
  return *reinterpret_cast<const Pack<T, E>*>(p);
}
template <class T, int E>
__device__ __forceinline__ void store(T* p, const Pack<T, E>& v) {
  *reinterpret_cast<Pack<T, E>*>(p) = v;
}
// +0 in every element (all bits clear, for each of f32, f16 and bf16),
// built from integers rather than converted: the conversion of bf16 is an
// asm block, opaque to the compiler, which then cannot fold the padding.
template <class T, int E>
__device__ __forceinline__ Pack<T, E> zero_pack() {
  Pack<T, E> p;
  memset(&p, 0, sizeof(p));
  return p;
}

// A pack from E floats, rounded to nearest even; f16 and bf16 two at a
// time (one cvt.rn.{f16,bf16}x2.f32 per pair, straight into the 32-bit
// register the 16-byte store takes).
template <class T, int E>
__device__ __forceinline__ Pack<T, E> to_pack(const float (&f)[E]) {
  Pack<T, E> p;
  if constexpr (!std::is_same_v<T, float> && E % 2 == 0) {
    uint32_t w[E / 2];
#pragma unroll
    for (int k = 0; k < E / 2; ++k) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[k]) : "f"(f[2 * k + 1]), "f"(f[2 * k]));
      else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w[k]) : "f"(f[2 * k + 1]), "f"(f[2 * k]));
    }
    memcpy(&p, w, sizeof(w));
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) p.set(e, f[e]);
  }
  return p;
}

// Makes the compiler treat the pack's bits as values it cannot see through:
// element conversions made before this point cannot be reused after it, so
// a row slice stays packed (16 bytes = 4 registers for 8 f16/bf16 elements)
// across a row reduction and is widened again where it is used, instead of
// being held widened to f32 (twice the registers: fewer rows per SM, or
// spills). Costs no instruction (an empty asm with the words as in/out).
template <class T, int E>
__device__ __forceinline__ void keep_packed(Pack<T, E>& p) {
  if constexpr (sizeof(Pack<T, E>) % 4 == 0) {
    uint32_t w[sizeof(Pack<T, E>) / 4];
    memcpy(w, &p, sizeof(w));
#pragma unroll
    for (int k = 0; k < int(sizeof(w) / 4); ++k) asm volatile("" : "+r"(w[k]));
    memcpy(&p, w, sizeof(w));
  }
}

// Element l (a compile-time constant after unrolling) of a float4, or the float itself.
__device__ __forceinline__ float& lane(float4& v, int l) { return l == 0 ? v.x : l == 1 ? v.y : l == 2 ? v.z : v.w; }
__device__ __forceinline__ float& lane(float& v, int) { return v; }

// ---- reductions ----

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum (or maximum) over the blockDim.x threads of this thread's row; every
// thread of the row gets the result. `red` is 32 floats of shared memory.
// Every thread of the block must call it (it synchronises the block when a
// row spans several warps). The warps' values are added in warp order, so
// the result does not depend on scheduling.
template <bool Max>
__device__ __forceinline__ float row_reduce(float v, float* red) {
  v = Max ? warp_max(v) : warp_sum(v);
  const int wpr = blockDim.x >> 5;
  if (wpr == 1) return v;
  const int warp = (threadIdx.y * blockDim.x + threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) red[warp] = v;
  __syncthreads();
  const float* r = red + threadIdx.y * wpr;
  float s = r[0];
  for (int i = 1; i < wpr; ++i) s = Max ? fmaxf(s, r[i]) : s + r[i];
  __syncthreads();  // `red` may be reused by the next reduction
  return s;
}
__device__ __forceinline__ float row_sum(float v, float* red) { return row_reduce<false>(v, red); }
// 1 / sqrt(sum / D + eps): a norm's rstd from its row's sum of squares (or of squared deviations).
__device__ __forceinline__ float rstd_of(float sum, int64_t D, float eps) {
  return float(1.0 / sqrt(double(sum) / double(D) + double(eps)));
}
__device__ __forceinline__ float row_max(float v, float* red) { return row_reduce<true>(v, red); }

// ---- launch shapes ----

constexpr int kRowThreads = 256;  // threads per block of the row kernels
constexpr int kMaxNV = 8;          // register slice: up to 8 vectors per thread

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

struct RowShape {
  bool in_registers = false;  // else the looping kernel (very long rows)
  int E = 1;                  // elements per vector
  int NV = 1;                 // vectors per thread
  int tpr = 32;               // threads per row (blockDim.x)
  int rows = 1;               // rows per block (blockDim.y)
};

// `vec_ok`: every row pointer is 16-byte aligned (the row length is checked here).
inline RowShape row_shape(int64_t D, size_t elem, bool vec_ok) {
  RowShape r;
  r.E = (vec_ok && (D * int64_t(elem)) % 16 == 0) ? int(16 / elem) : 1;
  const int64_t V = D / r.E;
  for (int nv = 1; nv <= kMaxNV; nv *= 2) {
    if (V <= int64_t(nv) * kRowThreads) {
      r.in_registers = true;
      r.NV = nv;
      r.tpr = int((V + nv - 1) / nv + 31) / 32 * 32;
      r.rows = std::max(1, kRowThreads / r.tpr);
      return r;
    }
  }
  r.tpr = kRowThreads;
  return r;
}

// Calls f(integral_constant<E>, integral_constant<NV>) for the shape's template arguments.
template <class T, int E, class F>
void with_nv(int nv, F&& f) {
  switch (nv) {
    case 1: f(std::integral_constant<int, E>{}, std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, E>{}, std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, E>{}, std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, E>{}, std::integral_constant<int, 8>{}); break;
  }
}
template <class T, class F>
void with_shape(const RowShape& r, F&& f) {
  if (r.E == 1) with_nv<T, 1>(r.NV, f);
  else with_nv<T, int(16 / sizeof(T))>(r.NV, f);
}

// Blocks for a grid-stride kernel: as many as are resident at once (so every
// block stays busy to the end), at most `needed`; `smem` is the dynamic
// shared memory a block uses. The occupancy query is cached per (device,
// kernel, block size, smem): it costs microseconds, a noticeable part of a
// small op.
inline unsigned resident_grid(const void* kernel, int threads, int64_t needed, size_t smem = 0) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, size_t>, int> cache;  // -> resident blocks per device
  int dev = 0;
  cudaGetDevice(&dev);
  const auto key = std::make_tuple(dev, kernel, threads, smem);
  int blocks = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) blocks = it->second;
  }
  if (!blocks) {
    int sms = 1, per_sm = 1;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem) != cudaSuccess || per_sm < 1) {
      cudaGetLastError();
      per_sm = 1;
    }
    blocks = std::max(1, sms * per_sm);
    std::lock_guard<std::mutex> lock(mu);
    cache[key] = blocks;
  }
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(needed, blocks)));
}

// Blocks for `needed` units of work, one unit each: the hardware hands
// blocks to SMs as they free up, so the last wave is at most one unit long
// (a resident-sized grid-stride grid leaves up to one unit per block, a few
// per cent, idle at the end). The kernels' grid-stride loops cover a
// `needed` beyond the grid limit. Kernels with per-block state written at
// the end (weight-gradient partial sums) use resident_grid instead.
inline unsigned all_blocks(int64_t needed) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(needed, 0x7fffffff)));
}

// Blocks of `threads` covering n elements, at most 65535 (elementwise
// kernels with a grid-stride loop over the rest).
inline unsigned blocks_for(int64_t n, int threads) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65535)));
}

// Calls f(T{}) with T the CUDA element type of `d` (F32, F16 or BF16).
template <class F>
void with_type(tc_dtype d, F&& f) {
  if (d == TC_DTYPE_F16) f(__half{});
  else if (d == TC_DTYPE_BF16) f(__nv_bfloat16{});
  else f(float{});
}

inline size_t elem_size(tc_dtype d) { return d == TC_DTYPE_F32 ? 4 : 2; }

}  // namespace cuda
}  // namespace tc
