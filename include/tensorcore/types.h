/* tensorcore: fundamental types shared by every area of the C ABI.
 * Every numeric value in this file is part of the ABI and never changes. */
#ifndef TENSORCORE_TYPES_H
#define TENSORCORE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define TC_API __declspec(dllexport)
#else
#define TC_API __attribute__((visibility("default")))
#endif

/* Status codes: every entry point returns one. */
typedef int32_t tc_status;
#define TC_OK 0
#define TC_ERR_NOT_INITIALIZED (-1)
#define TC_ERR_ALREADY_INITIALIZED (-2)
#define TC_ERR_NO_DEVICE (-3)
#define TC_ERR_UNSUPPORTED_FAMILY (-4)
#define TC_ERR_UNSUPPORTED_DTYPE (-5)
#define TC_ERR_INVALID_SHAPE (-6)
#define TC_ERR_INVALID_ARG (-7)
#define TC_ERR_ALLOC (-8)
#define TC_ERR_KERNEL_NOT_FOUND (-9)
#define TC_ERR_PIPELINE (-10)
#define TC_ERR_DISPATCH (-11)
/* Failure kinds beyond the original set. */
#define TC_ERR_IO (-12)          /* a file or OS call failed */
#define TC_ERR_CORRUPT (-13)     /* a file or blob is malformed or truncated */
#define TC_ERR_TIMEOUT (-14)     /* a blocking call ran past its deadline */
#define TC_ERR_AUTH (-15)        /* a peer failed authentication */
#define TC_ERR_UNSUPPORTED (-16) /* a feature or mode that is not built or not implemented */
#define TC_ERR_INTERNAL (-99)

/* Element types. 6..9 are reserved. */
typedef int32_t tc_dtype;
#define TC_DTYPE_F16 0
#define TC_DTYPE_BF16 1
#define TC_DTYPE_F32 2
#define TC_DTYPE_I8 3
#define TC_DTYPE_I32 4
#define TC_DTYPE_F64 5
/* A block type: GGUF's Q8_0, 32 values in 34 bytes (an f16 scale d, then 32
 * int8 q; value = q d). Accepted only where a call says so (the LLaMA KV
 * cache, tc_llama_set_kv_cache_type); it has no per-element size. */
#define TC_DTYPE_Q8_0 10

/* Backends, as reported by tc_last_backend(). 1-6 and 8 are reserved. */
typedef int32_t tc_backend;
#define TC_BACKEND_NONE 0
#define TC_BACKEND_PORTABLE_CPU 7
#define TC_BACKEND_CUDA 9
#define TC_BACKEND_HIP 10

/* Opaque handles. */
typedef struct tc_context_s* tc_context;
typedef struct tc_buffer_s* tc_buffer;
typedef struct tc_stream_s* tc_stream;

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_TYPES_H */
