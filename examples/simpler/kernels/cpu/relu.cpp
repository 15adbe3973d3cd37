// out[i] = max(a[i], 0)   (1-D f32 views; SPMD blocks split i)
#include "elementwise.h"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* a = SIMPLER_TENSOR_ARG(args, 0);
  const ChipTensor* out = SIMPLER_TENSOR_ARG(args, 1);
  uint64_t lo, hi;
  block_slice(simpler_tensor_numel(out), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) {
    const float v = *f32_at(a, i);
    *f32_at(out, i) = v > 0.0f ? v : 0.0f;
  }
}
