// Helpers of the example CUDA kernels: element i of a 1-D view and a
// grid-wide loop (each CUDA block is one SPMD block of the task).
#pragma once

#include "kernel.h"

__device__ inline float* f32_at(const ChipTensor* t, uint64_t i) {
  return SIMPLER_TENSOR_DATA(float, t) + (int64_t)i * (t->ndims == 1 ? t->strides[0] : 1);
}

#define FOR_EACH_ELEMENT(i, n)                                                      \
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (uint64_t)gridDim.x * blockDim.x)
