/* tensorcore: CUDA device management and diagnostics. These work in every
 * build: without CUDA (or without a GPU) they report zero devices and
 * TC_ERR_NO_DEVICE with a detail saying why. */
#ifndef TENSORCORE_CUDA_H
#define TENSORCORE_CUDA_H

#include "tensorcore/context.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when not built with CUDA or no GPU). */
TC_API int32_t tc_cuda_device_count(void);

/* Information about CUDA device `index` without creating a context. */
TC_API tc_status tc_cuda_device_at(int32_t index, struct tc_device_info* out);

/* Makes `ctx` run on CUDA: already a CUDA context -> TC_OK; a CPU context
 * with no live buffers or streams moves to CUDA device 0. */
TC_API tc_status tc_cuda_init(tc_context ctx);

/* *out = 1 when the context's ops run on CUDA. */
TC_API tc_status tc_cuda_is_active(tc_context ctx, int32_t* out);

/* Moves a context with no live buffers or streams to CUDA device `index`. */
TC_API tc_status tc_cuda_select_device(tc_context ctx, int32_t index);

/* Name of the last CUDA kernel (or library call) the calling thread
 * launched; "" before any. */
TC_API const char* tc_cuda_last_kernel_name(void);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_CUDA_H */
