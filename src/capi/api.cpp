#include "capi/api.h"

#include "tensorcore/diagnostics.h"

namespace tc {
namespace capi {

tc_status check_handle(const char* fn, const char* what, void*& h, const HandleKind& kind) {
  std::string why;
  void* obj = lookup_handle(h, kind, &why);
  if (!obj)
    return fail(TC_ERR_INVALID_ARG, "%s: %s (%p) is not a live tensorcore %s: %s", fn, what, h, kind.name,
                why.c_str());
  h = obj;
  return TC_OK;
}

tc_status check_context(const char* fn, tc_context& ctx) {
  if (!ctx) return fail(TC_ERR_INVALID_ARG, "%s: context is null", fn);
  return check_handle(fn, "context", ctx, context_kind());
}

tc_status check_stream(const char* fn, tc_context ctx, tc_stream& s) {
  if (!s) return fail(TC_ERR_INVALID_ARG, "%s: stream is null", fn);
  if (tc_status st = check_handle(fn, "stream", s, stream_kind())) return st;
  if (ctx && s->ctx != handle_address(ctx)) return fail(TC_ERR_INVALID_ARG, "%s: stream belongs to another context", fn);
  return TC_OK;
}

tc_status check_buffer_handle(const char* fn, const char* arg, tc_context ctx, tc_buffer& b) {
  if (!b) return fail(TC_ERR_INVALID_ARG, "%s: buffer %s is null", fn, arg);
  if (tc_status st = check_handle(fn, (std::string("buffer ") + arg).c_str(), b, buffer_kind())) return st;
  if (ctx && b->ctx != handle_address(ctx))
    return fail(TC_ERR_INVALID_ARG, "%s: buffer %s belongs to another context", fn, arg);
  return TC_OK;
}

tc_status check_buffer(const char* fn, const char* arg, tc_context ctx, tc_buffer& b) {
  if (tc_status st = check_buffer_handle(fn, arg, ctx, b)) return st;
  return tiers::check_usable(fn, arg, b);  // memory tiers and checkpointing (core/tiers.h)
}

tc_status check_out_ptr(const char* fn, const char* arg, const void* p) {
  if (!p) return fail(TC_ERR_INVALID_ARG, "%s: output pointer %s is null", fn, arg);
  return TC_OK;
}

bool mul_ok(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, out);
}

bool add_ok(int64_t a, int64_t b, int64_t* out) {
  if (a < 0 || b < 0) return false;
  return !__builtin_add_overflow(a, b, out);
}

bool span_bytes(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld, int64_t elem, int64_t* out) {
  if (rows == 0 || cols == 0 || batch == 0) {
    *out = 0;
    return true;
  }
  int64_t last_batch, last_row, elems;
  if (!mul_ok(batch - 1, stride, &last_batch) || !mul_ok(rows - 1, ld, &last_row)) return false;
  if (!add_ok(last_batch, last_row, &elems) || !add_ok(elems, cols, &elems)) return false;
  return mul_ok(elems, elem, out);
}

std::string dtype_label(int32_t dtype) {
  const char* n = tc_dtype_name(dtype);
  if (std::string(n) != "unknown") return n;
  return "dtype " + std::to_string(dtype);
}

}  // namespace capi
}  // namespace tc
