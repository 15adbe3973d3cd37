/* tensorcore: the HIP (AMD GPUs, chipStar) backend's entry points.
 *
 * This build has no HIP runtime, so the calls are deterministic unsupported
 * diagnostics:
 *   tc_hip_device_count()      0
 *   tc_hip_init(ctx)           TC_ERR_UNSUPPORTED, detail "tensorcore was built without HIP"
 *   tc_hip_device_info_get     TC_ERR_UNSUPPORTED, *out_info zeroed
 *   tc_hip_device_at(i, ...)   TC_ERR_UNSUPPORTED, *out_info zeroed
 *   tc_hip_select_device       TC_ERR_UNSUPPORTED
 *   tc_hip_last_kernel_name()  "" (no HIP kernel has run; as tc_cuda_last_kernel_name)
 * Arguments are still checked first: a null or stale context, a null output
 * pointer or a negative index is TC_ERR_INVALID_ARG. */
#ifndef TENSORCORE_HIP_H
#define TENSORCORE_HIP_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t tc_hip_vendor;
#define TC_HIP_VENDOR_UNKNOWN 0
#define TC_HIP_VENDOR_INTEL 1
#define TC_HIP_VENDOR_NVIDIA 2
#define TC_HIP_VENDOR_AMD 3
#define TC_HIP_VENDOR_ARM_MALI 4

/* The original's layout; the flags are one byte each (C bool). */
typedef struct tc_hip_device_info {
  tc_hip_vendor vendor;
  char device_name[128];
  char driver_version[64];
  char opencl_version[64];
  uint64_t global_memory_bytes;
  uint64_t local_memory_bytes;
  uint32_t compute_units;
  uint32_t max_workgroup_size;
  uint32_t preferred_subgroup_size;
  uint8_t supports_fp16;
  uint8_t supports_fp64;
  uint8_t supports_int8_dot;
  uint8_t unified_memory;
} tc_hip_device_info;

TC_API tc_status tc_hip_init(tc_context ctx);
TC_API tc_status tc_hip_device_info_get(tc_context ctx, tc_hip_device_info* out_info);
TC_API int32_t tc_hip_device_count(void);
TC_API tc_status tc_hip_device_at(int32_t index, tc_hip_device_info* out_info);
TC_API tc_status tc_hip_select_device(tc_context ctx, int32_t index);
TC_API const char* tc_hip_last_kernel_name(void);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_HIP_H */
