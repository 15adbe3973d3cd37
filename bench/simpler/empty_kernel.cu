// Does nothing: for per-task overhead measurements (cuda).
#include "kernel.h"

SIMPLER_KERNEL_ENTRY { (void)args; }
