/* simpler: what an in-core kernel needs besides its tensors.
 *
 * A kernel is one entry point,
 *
 *   cpu:  extern "C" void kernel_entry(int64_t* args)             (a shared object)
 *   cuda: extern "C" __global__ void kernel_entry(int64_t* args)  (a cubin)
 *
 * args[0 .. T-1] hold pointers to the task's ChipTensor descriptors in
 * signature order; args[T ..] hold the scalars as raw 64-bit values.
 * SIMPLER_KERNEL_ENTRY spells the right declaration on either platform.
 *
 * A task is launched SPMD over `block_num` blocks (CoreTaskArgs::
 * set_block_num in the orchestration; 1 by default). On cpu each block is one
 * call of kernel_entry on one core thread; on cuda the blocks are the CUDA
 * grid. get_block_idx() / get_block_num() tell a kernel which part is its own. */
#ifndef SIMPLER_KERNEL_H
#define SIMPLER_KERNEL_H

#include <stdint.h>

#include "tensor.h"

#if defined(__CUDACC__)

#define SIMPLER_KERNEL_ENTRY extern "C" __global__ void kernel_entry(int64_t* args)
__device__ static inline int64_t get_block_idx(void) { return (int64_t)blockIdx.x; }
__device__ static inline int64_t get_block_num(void) { return (int64_t)gridDim.x; }

#else

/* What the runtime tells a cpu kernel about the current call. */
typedef struct SimplerLaunch {
  int64_t block_idx;
  int64_t block_num;
  int64_t task_id;
  int32_t func_id;
  int32_t core; /* index of the core thread running this block */
} SimplerLaunch;

#ifdef __cplusplus
extern "C" {
#endif
/* Filled in by the runtime when it loads the kernel (weak, so every
 * translation unit of a kernel may include this header). */
__attribute__((weak, visibility("default"))) const SimplerLaunch* (*simpler_current_launch)(void) = 0;
#ifdef __cplusplus
}
#define SIMPLER_KERNEL_ENTRY extern "C" __attribute__((visibility("default"))) void kernel_entry(int64_t* args)
#else
#define SIMPLER_KERNEL_ENTRY __attribute__((visibility("default"))) void kernel_entry(int64_t* args)
#endif

static inline int64_t get_block_idx(void) { return simpler_current_launch ? simpler_current_launch()->block_idx : 0; }
static inline int64_t get_block_num(void) { return simpler_current_launch ? simpler_current_launch()->block_num : 1; }
static inline int32_t get_core_idx(void) { return simpler_current_launch ? simpler_current_launch()->core : 0; }

#endif

/* The i-th tensor argument and its first element. */
#define SIMPLER_TENSOR_ARG(args, i) ((const ChipTensor*)(uintptr_t)(args)[i])
#define SIMPLER_TENSOR_DATA(T, t) ((T*)(uintptr_t)(t)->buffer.addr + (t)->start_offset)

#if defined(__CUDACC__)
__host__ __device__
#endif
static inline uint64_t simpler_tensor_numel(const ChipTensor* t) {
  uint64_t n = 1;
  for (uint32_t k = 0; k < t->ndims; k++) n *= t->shapes[k];
  return n;
}

#endif /* SIMPLER_KERNEL_H */
