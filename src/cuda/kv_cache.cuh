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

// Row i's position and the offset of its slot in the cache (elements).
__device__ __forceinline__ int32_t row_pos(const int32_t* pos, const int32_t* slots, int64_t i) {
  return slots ? pos[i] : *pos;
}
__device__ __forceinline__ int64_t row_slot(const int32_t* slots, int64_t stride, int64_t i) {
  return slots ? int64_t(slots[i]) * stride : 0;
}

}  // namespace cuda
}  // namespace tc
