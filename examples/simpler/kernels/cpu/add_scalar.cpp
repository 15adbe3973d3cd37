// out[i] = in[i] + s   (s: a float scalar, its bits in the low half of args[2])
#include <string.h>

#include "elementwise.h"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* in = SIMPLER_TENSOR_ARG(args, 0);
  const ChipTensor* out = SIMPLER_TENSOR_ARG(args, 1);
  uint32_t bits = (uint32_t)args[2];
  float s;
  memcpy(&s, &bits, 4);
  uint64_t lo, hi;
  block_slice(simpler_tensor_numel(out), &lo, &hi);
  for (uint64_t i = lo; i < hi; i++) *f32_at(out, i) = *f32_at(in, i) + s;
}
