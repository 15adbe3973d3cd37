// Writes to an address no allocation holds: an illegal address on the GPU.
#include "kernel.h"

SIMPLER_KERNEL_ENTRY {
  volatile uint64_t bad = 16;  // opaque to the compiler
  if (threadIdx.x == 0 && args) *reinterpret_cast<volatile float*>(bad) = 1.0f;
}
