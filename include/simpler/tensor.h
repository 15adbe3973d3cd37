/* simpler: the tensor descriptor that kernels, orchestrations and the runtime
 * share. Plain C, so a kernel written in C, C++ or CUDA C++ sees the same
 * layout; the Python package mirrors it with ctypes.
 *
 * A ChipTensor is a strided view of one allocation:
 *
 *   element (i_0, ..., i_{n-1}) lives at
 *     (T*)t->buffer.addr + t->start_offset + sum_k i_k * t->strides[k]
 *
 * with 0 <= i_k < shapes[k]. start_offset and strides count elements of the
 * tensor's dtype; buffer.size counts bytes of the whole allocation, so a
 * view never reaches outside [buffer.addr, buffer.addr + buffer.size).
 *
 * A tensor the runtime allocated for a task's output (TensorCreateInfo) is
 * valid until the scope it was created in ends; scope_tag names that scope
 * so a later use is reported instead of reading recycled memory. */
#ifndef SIMPLER_TENSOR_H
#define SIMPLER_TENSOR_H

#include <stdint.h>

#define SIMPLER_MAX_TENSOR_DIMS 5

/* Element types. The numbers are part of the ABI and never change. */
#define SIMPLER_DT_FLOAT32 0
#define SIMPLER_DT_FLOAT16 1
#define SIMPLER_DT_BFLOAT16 2
#define SIMPLER_DT_INT8 3
#define SIMPLER_DT_INT16 4
#define SIMPLER_DT_INT32 5
#define SIMPLER_DT_INT64 6
#define SIMPLER_DT_UINT8 7
#define SIMPLER_DT_UINT16 8
#define SIMPLER_DT_UINT32 9
#define SIMPLER_DT_UINT64 10
#define SIMPLER_DT_FLOAT64 11
#define SIMPLER_DT_BOOL 12
#define SIMPLER_DT_COUNT 13

#ifdef __cplusplus
enum class DataType : int32_t {
  FLOAT32 = SIMPLER_DT_FLOAT32,
  FLOAT16 = SIMPLER_DT_FLOAT16,
  BFLOAT16 = SIMPLER_DT_BFLOAT16,
  INT8 = SIMPLER_DT_INT8,
  INT16 = SIMPLER_DT_INT16,
  INT32 = SIMPLER_DT_INT32,
  INT64 = SIMPLER_DT_INT64,
  UINT8 = SIMPLER_DT_UINT8,
  UINT16 = SIMPLER_DT_UINT16,
  UINT32 = SIMPLER_DT_UINT32,
  UINT64 = SIMPLER_DT_UINT64,
  FLOAT64 = SIMPLER_DT_FLOAT64,
  BOOL = SIMPLER_DT_BOOL,
};
#define SIMPLER_DTYPE_FIELD DataType
#else
#define SIMPLER_DTYPE_FIELD int32_t
#endif

/* Bytes per element; 0 for a value outside the table. */
#if defined(__CUDACC__)
__host__ __device__
#endif
static inline uint32_t simpler_dtype_size(int32_t dtype) {
  switch (dtype) {
    case SIMPLER_DT_FLOAT64: case SIMPLER_DT_INT64: case SIMPLER_DT_UINT64: return 8;
    case SIMPLER_DT_FLOAT32: case SIMPLER_DT_INT32: case SIMPLER_DT_UINT32: return 4;
    case SIMPLER_DT_FLOAT16: case SIMPLER_DT_BFLOAT16: case SIMPLER_DT_INT16: case SIMPLER_DT_UINT16: return 2;
    case SIMPLER_DT_INT8: case SIMPLER_DT_UINT8: case SIMPLER_DT_BOOL: return 1;
    default: return 0;
  }
}

typedef struct SimplerBuffer {
  uint64_t addr; /* device address of the allocation (host address on cpu) */
  uint64_t size; /* bytes of the allocation */
} SimplerBuffer;

typedef struct ChipTensor {
  SimplerBuffer buffer;
  uint64_t start_offset;                    /* elements from buffer.addr to element 0 */
  uint32_t ndims;                           /* 1..SIMPLER_MAX_TENSOR_DIMS */
  SIMPLER_DTYPE_FIELD dtype;
  uint32_t shapes[SIMPLER_MAX_TENSOR_DIMS]; /* elements per dimension */
  uint32_t scope_tag;                       /* 0; for a runtime-created tensor, the scope it lives in */
  int64_t strides[SIMPLER_MAX_TENSOR_DIMS]; /* elements between neighbours, >= 0 */
#ifdef __cplusplus
  /* Orchestration code spells a borrowed tensor `args.tensor(i).ref()`. */
#if defined(__CUDACC__)
  __host__ __device__
#endif
  const ChipTensor& ref() const { return *this; }
#endif
} ChipTensor;

#ifdef __cplusplus
static_assert(sizeof(ChipTensor) == 96, "ChipTensor is 96 bytes on every platform");
#endif

#endif /* SIMPLER_TENSOR_H */
