// out[i] = in[i] + s   (s: a float scalar, its bits in the low half of args[2])
#include "elementwise.cuh"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* in = SIMPLER_TENSOR_ARG(args, 0);
  const ChipTensor* out = SIMPLER_TENSOR_ARG(args, 1);
  const float s = __uint_as_float((unsigned)args[2]);
  const uint64_t n = simpler_tensor_numel(out);
  FOR_EACH_ELEMENT(i, n) *f32_at(out, i) = *f32_at(in, i) + s;
}
