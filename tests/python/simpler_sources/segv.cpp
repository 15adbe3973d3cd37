// Writes through a null pointer: the runtime must report it, not die.
#include "kernel.h"

SIMPLER_KERNEL_ENTRY {
  (void)args;
  volatile float* p = nullptr;
  *p = 1.0f;
}
