// x[i] += 1 over a 1-D f32 view (INOUT), grid-wide.
#include "kernel.h"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* x = SIMPLER_TENSOR_ARG(args, 0);
  float* p = SIMPLER_TENSOR_DATA(float, x);
  for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < x->shapes[0];
       i += (uint64_t)gridDim.x * blockDim.x)
    p[(int64_t)i * x->strides[0]] += 1.0f;
}
