// Does nothing: for per-task overhead measurements.
#include "kernel.h"

SIMPLER_KERNEL_ENTRY { (void)args; }
