/* A C kernel that calls abort() (a failed assertion does the same). */
#include <stdlib.h>

#include "kernel.h"

SIMPLER_KERNEL_ENTRY {
  (void)args;
  abort();
}
