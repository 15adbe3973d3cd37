#include "tensorcore/cuda.h"

#include "capi/api.h"

using namespace tc;
using namespace tc::capi;

namespace {

// Replaces the context's backend with CUDA device `index`.
tc_status move_to_cuda(const char* fn, tc_context ctx, int32_t index) {
  if (ctx->live_buffers.load() || ctx->live_streams.load())
    return fail(TC_ERR_INVALID_ARG, "%s: the context still has live buffers or streams; free them first", fn);
  int count = cuda_device_count();
  if (index < 0 || index >= count)
    return fail(TC_ERR_NO_DEVICE, "%s: CUDA device %d requested, %d usable", fn, index, count);
  std::unique_ptr<Backend> backend = make_cuda_backend(index);
  if (!backend) return last_status();
  ctx->backend = std::move(backend);
  return TC_OK;
}

}  // namespace

extern "C" {

int32_t tc_cuda_device_count(void) { return cuda_device_count(); }

tc_status tc_cuda_device_at(int32_t index, struct tc_device_info* out) {
  return guarded("tc_cuda_device_at", [&] {
    if (tc_status st = check_out_ptr("tc_cuda_device_at", "out", out)) return st;
    int count = cuda_device_count();
    if (index < 0 || index >= count)
      return fail(TC_ERR_NO_DEVICE, "tc_cuda_device_at: device %d requested, %d usable", index, count);
    return cuda_device_info(index, out);
  });
}

tc_status tc_cuda_init(tc_context ctx) {
  return guarded("tc_cuda_init", [&] {
    if (tc_status st = check_context("tc_cuda_init", ctx)) return st;
    if (ctx->backend->kind() == TC_BACKEND_CUDA) return TC_OK;
    return move_to_cuda("tc_cuda_init", ctx, 0);
  });
}

tc_status tc_cuda_is_active(tc_context ctx, int32_t* out) {
  return guarded("tc_cuda_is_active", [&] {
    if (tc_status st = check_context("tc_cuda_is_active", ctx)) return st;
    if (tc_status st = check_out_ptr("tc_cuda_is_active", "out", out)) return st;
    *out = ctx->backend->kind() == TC_BACKEND_CUDA;
    return TC_OK;
  });
}

tc_status tc_cuda_select_device(tc_context ctx, int32_t index) {
  return guarded("tc_cuda_select_device", [&] {
    if (tc_status st = check_context("tc_cuda_select_device", ctx)) return st;
    return move_to_cuda("tc_cuda_select_device", ctx, index);
  });
}

const char* tc_cuda_last_kernel_name(void) { return last_cuda_kernel(); }

}  // extern "C"
