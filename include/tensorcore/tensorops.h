/* tensorcore: the Metal 4 TensorOps GEMM kernel selector (Apple M5 GPUs).
 *
 * Only Apple builds have TensorOps kernels. Here the selector answers for
 * every descriptor: NULL, with *err = TC_ERR_UNSUPPORTED (and the detail
 * "Metal TensorOps GEMM kernels exist only in Apple builds"); a null
 * descriptor gives NULL with TC_ERR_INVALID_ARG. `err` may be null. */
#ifndef TENSORCORE_TENSOROPS_H
#define TENSORCORE_TENSOROPS_H

#include "tensorcore/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

TC_API const char* tc_tensorops_gemm_kernel_name(const tc_gemm_desc* desc, tc_status* err);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_TENSOROPS_H */
