// out[i] = max(a[i], 0)
#include "elementwise.cuh"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* a = SIMPLER_TENSOR_ARG(args, 0);
  const ChipTensor* out = SIMPLER_TENSOR_ARG(args, 1);
  const uint64_t n = simpler_tensor_numel(out);
  FOR_EACH_ELEMENT(i, n) {
    const float v = *f32_at(a, i);
    *f32_at(out, i) = v > 0.0f ? v : 0.0f;
  }
}
