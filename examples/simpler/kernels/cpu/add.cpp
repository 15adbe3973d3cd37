// out[i] = a[i] + b[i]   (1-D f32 views; SPMD blocks split i)
#include "elementwise.h"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* a = SIMPLER_TENSOR_ARG(args, 0);
  const ChipTensor* b = SIMPLER_TENSOR_ARG(args, 1);
  const ChipTensor* out = SIMPLER_TENSOR_ARG(args, 2);
  uint64_t lo, hi;
  block_slice(simpler_tensor_numel(out), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) *f32_at(out, i) = *f32_at(a, i) + *f32_at(b, i);
}
