// x[i] += 1 over a 1-D f32 view (INOUT).
#include "kernel.h"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* x = SIMPLER_TENSOR_ARG(args, 0);
  float* p = SIMPLER_TENSOR_DATA(float, x);
  for (uint32_t i = 0; i < x->shapes[0]; i++) p[(int64_t)i * x->strides[0]] += 1.0f;
}
