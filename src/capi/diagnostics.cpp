#include "tensorcore/diagnostics.h"

#include "core/dtypes.h"
#include "core/error.h"
#include "core/objects.h"
#include "cpu/cpu_features.h"

#ifndef TC_VERSION_STRING
#define TC_VERSION_STRING "0.0.0"
#endif
#ifndef TC_BUILD_DETAIL
#define TC_BUILD_DETAIL "portable_cpu"
#endif

extern "C" {

const char* tc_version(void) { return "tensorcore " TC_VERSION_STRING " (" TC_BUILD_DETAIL ")"; }

const char* tc_status_string(tc_status status) {
  switch (status) {
    case TC_OK: return "ok";
    case TC_ERR_NOT_INITIALIZED: return "context not initialized";
    case TC_ERR_ALREADY_INITIALIZED: return "context already initialized";
    case TC_ERR_NO_DEVICE: return "no device available";
    case TC_ERR_UNSUPPORTED_FAMILY: return "operation unsupported on this device";
    case TC_ERR_UNSUPPORTED_DTYPE: return "dtype unsupported";
    case TC_ERR_INVALID_SHAPE: return "invalid_shape";
    case TC_ERR_INVALID_ARG: return "invalid argument";
    case TC_ERR_ALLOC: return "allocation failure";
    case TC_ERR_KERNEL_NOT_FOUND: return "kernel not found";
    case TC_ERR_PIPELINE: return "kernel pipeline creation failed";
    case TC_ERR_DISPATCH: return "dispatch failed";
    case TC_ERR_IO: return "i/o error";
    case TC_ERR_CORRUPT: return "corrupt or truncated data";
    case TC_ERR_TIMEOUT: return "timed out";
    case TC_ERR_AUTH: return "authentication failed";
    case TC_ERR_UNSUPPORTED: return "unsupported feature";
    case TC_ERR_INTERNAL: return "internal error";
    default: return "unknown status";
  }
}

const char* tc_dtype_name(tc_dtype dtype) {
  const tc::DtypeInfo* d = tc::dtype_of_tc(dtype);
  return d ? d->name : "unknown";
}

const char* tc_backend_name(tc_backend backend) {
  switch (backend) {
    case TC_BACKEND_NONE: return "none";
    case TC_BACKEND_PORTABLE_CPU: return "portable_cpu";
    case TC_BACKEND_CUDA: return "cuda";
    case TC_BACKEND_HIP: return "hip";
    default: return "unknown";
  }
}

tc_backend tc_last_backend(void) { return tc::last_backend(); }

const char* tc_last_error_detail(void) { return tc::last_detail().c_str(); }

tc_status tc_last_error(void) { return tc::last_status(); }

const char* tc_cpu_last_kernel_name(void) { return tc::cpu::last_kernel(); }

}  // extern "C"
