#include "tensorcore/buffer.h"

#include "capi/api.h"
#include "core/checkpoint.h"
#include "core/tiers.h"

using namespace tc;
using namespace tc::capi;

namespace {

tc_status check_range(const char* fn, tc_buffer& buf, size_t offset, size_t nbytes, const void* host) {
  if (tc_status st = check_buffer(fn, "buf", nullptr, buf)) return st;
  if (nbytes && !host) return fail(TC_ERR_INVALID_ARG, "%s: host pointer is null", fn);
  if (offset > buf->size() || nbytes > buf->size() - offset)
    return fail(TC_ERR_INVALID_ARG, "%s: range [%zu, %zu + %zu) is outside the buffer of %zu bytes", fn, offset,
                offset, nbytes, buf->size());
  return TC_OK;
}

}  // namespace

extern "C" {

tc_status tc_buffer_alloc(tc_context ctx, size_t nbytes, tc_buffer* out) {
  return guarded("tc_buffer_alloc", [&] {
    if (tc_status st = check_context("tc_buffer_alloc", ctx)) return st;
    if (tc_status st = check_out_ptr("tc_buffer_alloc", "out", out)) return st;
    if (nbytes == 0) return fail(TC_ERR_INVALID_ARG, "tc_buffer_alloc: nbytes must be > 0");
    if (nbytes > (size_t(1) << 62)) return fail(TC_ERR_ALLOC, "tc_buffer_alloc: %zu bytes is beyond any device", nbytes);
    // Device memory under the context's budget (core/tiers.h), counted in L0.
    tc_buffer b = nullptr;
    if (tc_status st = allocate_buffer(ctx, nbytes, nullptr, &b))
      return fail_with(st, std::string("tc_buffer_alloc: ") + last_detail());
    *out = handle_of(b);
    return TC_OK;
  });
}

tc_status tc_buffer_from_ptr(tc_context ctx, void* ptr, size_t nbytes, tc_buffer* out) {
  return guarded("tc_buffer_from_ptr", [&] {
    if (tc_status st = check_context("tc_buffer_from_ptr", ctx)) return st;
    if (tc_status st = check_out_ptr("tc_buffer_from_ptr", "out", out)) return st;
    if (!ptr) return fail(TC_ERR_INVALID_ARG, "tc_buffer_from_ptr: ptr is null");
    if (nbytes == 0) return fail(TC_ERR_INVALID_ARG, "tc_buffer_from_ptr: nbytes must be > 0");
    if (!ctx->backend->accepts_pointer(ptr, nbytes)) return last_status();
    auto storage = std::make_shared<Storage>();
    storage->backend = ctx->backend.get();
    storage->data = ptr;
    storage->size = nbytes;
    storage->owned = false;
    *out = handle_of(new_buffer(ctx, std::move(storage)));
    return TC_OK;
  });
}

tc_status tc_buffer_free(tc_buffer buf) {
  return guarded("tc_buffer_free", [&] {
    if (tc_status st = check_buffer_handle("tc_buffer_free", "buf", nullptr, buf)) return st;
    // gguf
    if (buf->owner)
      return fail(TC_ERR_INVALID_ARG, "tc_buffer_free: the buffer belongs to a loaded model; free the model instead");
    // end gguf
    return delete_buffer(buf);
  });
}

tc_status tc_buffer_map(tc_buffer buf, void** out) {
  return guarded("tc_buffer_map", [&] {
    if (tc_status st = check_buffer("tc_buffer_map", "buf", nullptr, buf)) return st;
    if (tc_status st = check_out_ptr("tc_buffer_map", "out", out)) return st;
    if (!buf->ctx->backend->host_accessible())
      return fail(TC_ERR_UNSUPPORTED, "tc_buffer_map: buffer lives in device memory; use read/write or device_ptr");
    *out = buf->storage->data;
    return TC_OK;
  });
}

tc_status tc_buffer_device_ptr(tc_buffer buf, void** out) {
  return guarded("tc_buffer_device_ptr", [&] {
    if (tc_status st = check_buffer("tc_buffer_device_ptr", "buf", nullptr, buf)) return st;
    if (tc_status st = check_out_ptr("tc_buffer_device_ptr", "out", out)) return st;
    *out = buf->storage->data;
    return TC_OK;
  });
}

tc_status tc_buffer_size(tc_buffer buf, size_t* out) {
  return guarded("tc_buffer_size", [&] {
    if (tc_status st = check_buffer_handle("tc_buffer_size", "buf", nullptr, buf)) return st;
    if (tc_status st = check_out_ptr("tc_buffer_size", "out", out)) return st;
    *out = buf->size();
    return TC_OK;
  });
}

tc_status tc_buffer_write(tc_buffer buf, size_t offset, const void* src, size_t nbytes) {
  return guarded("tc_buffer_write", [&] {
    if (tc_status st = check_range("tc_buffer_write", buf, offset, nbytes, src)) return st;
    if (nbytes == 0) return TC_OK;
    return buf->ctx->backend->copy_in(buf->bytes() + offset, src, nbytes);
  });
}

tc_status tc_buffer_read(tc_buffer buf, size_t offset, void* dst, size_t nbytes) {
  return guarded("tc_buffer_read", [&] {
    if (tc_status st = check_range("tc_buffer_read", buf, offset, nbytes, dst)) return st;
    if (nbytes == 0) return TC_OK;
    return buf->ctx->backend->copy_out(dst, buf->bytes() + offset, nbytes);
  });
}

}  // extern "C"
