// Sleeps args[1] milliseconds, then x[0] += 1.
#include <chrono>
#include <thread>

#include "kernel.h"

SIMPLER_KERNEL_ENTRY {
  const ChipTensor* x = SIMPLER_TENSOR_ARG(args, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(args[1]));
  SIMPLER_TENSOR_DATA(float, x)[0] += 1.0f;
}
