// out[i] = a[i] * b[i]
#include "elementwise.cuh"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* a = SIMPLER_TENSOR_ARG(args, 0);
  const ChipTensor* b = SIMPLER_TENSOR_ARG(args, 1);
  const ChipTensor* out = SIMPLER_TENSOR_ARG(args, 2);
  const uint64_t n = simpler_tensor_numel(out);
  FOR_EACH_ELEMENT(i, n) *f32_at(out, i) = *f32_at(a, i) * *f32_at(b, i);
}
