// Helpers of the example kernels: element i of a 1-D view (any stride) and
// the slice of [0, n) that this SPMD block owns.
#pragma once

#include "kernel.h"

static inline float* f32_at(const ChipTensor* t, uint64_t i) {
  return SIMPLER_TENSOR_DATA(float, t) + (int64_t)i * (t->ndims == 1 ? t->strides[0] : 1);
}

static inline void block_slice(uint64_t n, uint64_t* lo, uint64_t* hi) {
  const uint64_t b = (uint64_t)get_block_idx(), nb = (uint64_t)get_block_num();
  *lo = n * b / nb;
  *hi = n * (b + 1) / nb;
}
