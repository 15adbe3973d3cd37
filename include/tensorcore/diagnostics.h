/* tensorcore: version, names of codes, the last failure's detail, the last backend. */
#ifndef TENSORCORE_DIAGNOSTICS_H
#define TENSORCORE_DIAGNOSTICS_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "tensorcore X.Y.Z (<build detail>)"; static storage. */
TC_API const char* tc_version(void);

/* Message for a status code; "unknown status" for codes not in the ABI. */
TC_API const char* tc_status_string(tc_status status);

/* "f16", "bf16", "f32", "i8", "i32", "f64"; "unknown" otherwise. */
TC_API const char* tc_dtype_name(tc_dtype dtype);

/* "none", "portable_cpu", "cuda", "hip"; "unknown" otherwise. */
TC_API const char* tc_backend_name(tc_backend backend);

/* Backend that ran (or was enqueued to run) the calling thread's last kernel;
 * TC_BACKEND_NONE before any kernel ran on this thread. */
TC_API tc_backend tc_last_backend(void);

/* Human-readable detail of the calling thread's last failing call (which
 * argument, which sizes); "" when the last call succeeded. Valid until the
 * thread's next tensorcore call. */
TC_API const char* tc_last_error_detail(void);

/* Status of the calling thread's last call. */
TC_API tc_status tc_last_error(void);

/* The op entry points this library has, for bindings and tools: entry i
 * (0 <= i < tc_op_entry_count()) is "c_name|backend op|capability bits|
 * signature", the signature in the notation of src/capi/entries.def, e.g.
 * "tc_softmax_forward|softmax_forward|512|ctx, in X[N,D]:dtype, out Y[N,D]:dtype ~X,
 * i64 N, i64 D, dtype dtype". Every entry also exists as <c_name>_async with a
 * trailing tc_stream. NULL outside the range. */
TC_API int32_t tc_op_entry_count(void);
TC_API const char* tc_op_entry(int32_t index);

/* One argument of tc_op_call, in the slot its signature's kind reads:
 * `handle` for ctx, buffers (NULL for an optional one left out) and a
 * descriptor's address; `i` for i64, i32, dtype and quant; `f` for f32 and f64. */
struct tc_op_value {
  void* handle;
  int64_t i;
  double f;
};

/* Calls the entry point `c_name` (e.g. "tc_rmsnorm_forward") with `nargs`
 * arguments in its signature's order (tc_op_entry), synchronously, or as
 * its _async twin on `stream` when that is not NULL; validated exactly as the
 * direct call. For runtimes and bindings that call ops by name.
 * TC_ERR_INVALID_ARG for an unknown name or a count that is not the
 * signature's. */
TC_API tc_status tc_op_call(const char* c_name, const struct tc_op_value* args, int32_t nargs, tc_stream stream);

/* The kernel family that the CPU backend's last op in this process
 * dispatched to, as "<family>/<level>" with the level in TC_CPU_ISA's
 * vocabulary ("sgemm/avx512", "gemm_i8/amx", "attention/portable",
 * "gemv_quantized/avx512_vnni", "simd/avx2" for the norm, RoPE, activation
 * and AdamW kernels) or "sgemm/blas"; "" before any. Static storage. */
TC_API const char* tc_cpu_last_kernel_name(void);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_DIAGNOSTICS_H */
