// Entry points of backends this build does not include: HIP (tensorcore/hip.h)
// and the Apple-only Metal TensorOps GEMM selector (tensorcore/tensorops.h).
// Each answers with a fixed unsupported status after checking its arguments,
// so callers can probe for them without special cases.
#include <cstring>

#include "capi/api.h"
#include "tensorcore/hip.h"
#include "tensorcore/tensorops.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr const char* kNoHip = "tensorcore was built without HIP";

tc_status no_hip(const char* fn) { return fail(TC_ERR_UNSUPPORTED, "%s: %s", fn, kNoHip); }

}  // namespace

extern "C" {

tc_status tc_hip_init(tc_context ctx) {
  return guarded("tc_hip_init", [&] {
    if (tc_status st = check_context("tc_hip_init", ctx)) return st;
    return no_hip("tc_hip_init");
  });
}

tc_status tc_hip_device_info_get(tc_context ctx, tc_hip_device_info* out_info) {
  return guarded("tc_hip_device_info_get", [&] {
    const char* fn = "tc_hip_device_info_get";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (tc_status st = check_out_ptr(fn, "out_info", out_info)) return st;
    std::memset(out_info, 0, sizeof *out_info);
    return no_hip(fn);
  });
}

int32_t tc_hip_device_count(void) { return 0; }

tc_status tc_hip_device_at(int32_t index, tc_hip_device_info* out_info) {
  return guarded("tc_hip_device_at", [&] {
    const char* fn = "tc_hip_device_at";
    if (index < 0) return fail(TC_ERR_INVALID_ARG, "%s: index %d is negative", fn, index);
    if (tc_status st = check_out_ptr(fn, "out_info", out_info)) return st;
    std::memset(out_info, 0, sizeof *out_info);
    return no_hip(fn);
  });
}

tc_status tc_hip_select_device(tc_context ctx, int32_t index) {
  return guarded("tc_hip_select_device", [&] {
    const char* fn = "tc_hip_select_device";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (index < 0) return fail(TC_ERR_INVALID_ARG, "%s: index %d is negative", fn, index);
    return no_hip(fn);
  });
}

// No HIP kernel ever runs in this build: "", as tc_cuda_last_kernel_name before any kernel.
const char* tc_hip_last_kernel_name(void) { return ""; }

const char* tc_tensorops_gemm_kernel_name(const tc_gemm_desc* desc, tc_status* err) {
  tc_status st;
  if (!desc) st = fail(TC_ERR_INVALID_ARG, "tc_tensorops_gemm_kernel_name: desc is null");
  else st = fail(TC_ERR_UNSUPPORTED, "tc_tensorops_gemm_kernel_name: Metal TensorOps GEMM kernels exist only in Apple "
                 "builds");
  if (err) *err = st;
  return nullptr;
}

}  // extern "C"
