// The KV cache as the decoder's GPU ops address it (model_ops.cu writes it,
// decode_attention.cu reads it): element types, Q8_0 blocks by element
// offset, and where a batch row's position and slot are.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "quant/formats.h"

namespace tc {
namespace cuda {

__device__ __forceinline__ float h2f(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// A Q8_0 cache addressed by element offsets (multiples of 32, a row being
// whole blocks): element e starts block e / 32 of 34 bytes (quant::BlockQ8_0).
struct Q8Cache {
  uint8_t byte;
};
template <typename T>
__device__ __forceinline__ const T* cache_at(const T* base, int64_t elems) {
  return base + elems;
}
template <>
__device__ __forceinline__ const Q8Cache* cache_at(const Q8Cache* base, int64_t elems) {
  return base + elems / quant::QK8_0 * int64_t(sizeof(quant::BlockQ8_0));
}

// Block j's code c (signed) as an exact float without I2F: __byte_perm puts
// byte c ^ 0x80 = c + 128 into the mantissa of 2^23, and (2^23 + c + 128) -
// (2^23 + 128) = c.
__device__ __forceinline__ float q8_code(uint32_t biased, int j) {
  return __fsub_rn(__uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | unsigned(j))), 8388736.0f);
}

// A cache element from f32 (f16: round to nearest even).
__device__ __forceinline__ void store_cache(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_cache(__half* p, float x) { *p = __float2half_rn(x); }

// One element of a RoPE pair (x0, x1) rotated by theta (c = cos, s = sin):
// the first becomes x0 c - x1 s, the second x1 c + x0 s; `self` is the
// element, `other` its partner. Products and sums are rounded one by one
// (the CPU's operations).
__device__ __forceinline__ float rope_elem(float self, float other, float c, float s, bool first) {
  return first ? __fsub_rn(__fmul_rn(self, c), __fmul_rn(other, s)) : __fadd_rn(__fmul_rn(self, c), __fmul_rn(other, s));
}

// rope_kv_append for one token whose [q | k | v] row a product computes,
// element by element as the product's epilogue: interleaved pairs (2k, 2k +
// 1) rotated, q into qt [H][D] in f32, k and v into the cells at *pos of an
// f16 or f32 cache [Hkv][C][D].
struct RopeRow {
  const int32_t* pos;
  const float *cos_t, *sin_t;  // [C][D / 2]
  float* qt;
  void *k_cache, *v_cache;
  int64_t D, C, Dq, Dkv;  // Dq = H D, Dkv = Hkv D
  int f16;
};

// Element n of the row, `self`, with its pair partner `other` (n ^ 1), at
// position p (*r.pos, read once by the caller).
__device__ __forceinline__ void rope_row_store(const RopeRow& r, int64_t p, int64_t n, float self, float other) {
  const int part = n < r.Dq ? 0 : n < r.Dq + r.Dkv ? 1 : 2;
  const int64_t e = n - (part == 0 ? 0 : part == 1 ? r.Dq : r.Dq + r.Dkv), d = e % r.D;
  float x = self;
  if (part < 2) {
    const int64_t t = p * (r.D / 2) + d / 2;
    x = rope_elem(self, other, r.cos_t[t], r.sin_t[t], d % 2 == 0);
  }
  if (part == 0) {
    r.qt[e] = x;
    return;
  }
  const int64_t cell = (e / r.D * r.C + p) * r.D + d;
  void* base = part == 1 ? r.k_cache : r.v_cache;
  if (r.f16) store_cache(static_cast<__half*>(base) + cell, x);
  else store_cache(static_cast<float*>(base) + cell, x);
}

// Row i's position and the offset of its slot in the cache (elements).
__device__ __forceinline__ int32_t row_pos(const int32_t* pos, const int32_t* slots, int64_t i) {
  return slots ? pos[i] : *pos;
}
__device__ __forceinline__ int64_t row_slot(const int32_t* slots, int64_t stride, int64_t i) {
  return slots ? int64_t(slots[i]) * stride : 0;
}

}  // namespace cuda
}  // namespace tc
