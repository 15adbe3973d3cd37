#include "tensorcore/gemm.h"

#include <cmath>
#include <cstdio>

#include "capi/api.h"
#include "core/half.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr int64_t kMaxDim = 0x7fffffff;  // dims and pitches fit the BLAS int

bool supported_pair(tc_dtype dtype, tc_dtype accum) {
  switch (dtype) {
    case TC_DTYPE_F32: return accum == TC_DTYPE_F32;
    case TC_DTYPE_F16: return accum == TC_DTYPE_F32 || accum == TC_DTYPE_F16;
    case TC_DTYPE_BF16: return accum == TC_DTYPE_F32;
    case TC_DTYPE_I8: return accum == TC_DTYPE_I32;
    default: return false;
  }
}

struct Operand {
  const char* name;
  tc_buffer buf;
  int64_t rows, cols;  // as stored
  int64_t* ld;
  int64_t* stride;
  int64_t elem;
  int64_t first = 0, bytes = 0;  // byte range touched
};

// Fills in a packed pitch/stride and checks the operand fits its buffer.
tc_status check_operand(const char* fn, int64_t batch, Operand& op) {
  if (*op.ld < 0) return fail(TC_ERR_INVALID_SHAPE, "%s: ld%s = %lld is negative", fn, op.name, (long long)*op.ld);
  if (*op.ld == 0) *op.ld = op.cols;
  if (*op.ld < op.cols)
    return fail(TC_ERR_INVALID_SHAPE, "%s: ld%s = %lld is smaller than the %lld columns stored", fn, op.name,
                (long long)*op.ld, (long long)op.cols);
  if (*op.ld > kMaxDim) return fail(TC_ERR_INVALID_SHAPE, "%s: ld%s = %lld exceeds 2^31-1", fn, op.name, (long long)*op.ld);
  if (*op.stride < 0)
    return fail(TC_ERR_INVALID_SHAPE, "%s: stride_%s = %lld is negative", fn, op.name, (long long)*op.stride);
  if (*op.stride == 0 && !mul_ok(op.rows, *op.ld, op.stride))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s of %lld x %lld (ld %lld) overflows 64 bits", fn, op.name,
                (long long)op.rows, (long long)op.cols, (long long)*op.ld);
  if (!span_bytes(batch, *op.stride, op.rows, op.cols, *op.ld, op.elem, &op.bytes))
    return fail(TC_ERR_INVALID_SHAPE, "%s: size of %s overflows 64 bits (batch %lld, %lld x %lld, ld %lld)", fn,
                op.name, (long long)batch, (long long)op.rows, (long long)op.cols, (long long)*op.ld);
  if (uint64_t(op.bytes) > op.buf->size())
    return fail(TC_ERR_INVALID_ARG, "%s: %s needs %lld bytes (batch %lld, %lld x %lld, ld %lld) but its buffer has %zu",
                fn, op.name, (long long)op.bytes, (long long)batch, (long long)op.rows, (long long)op.cols,
                (long long)*op.ld, op.buf->size());
  return TC_OK;
}

tc_status validate(const char* fn, tc_context& ctx, tc_buffer& A, tc_buffer& B, tc_buffer& C, const tc_gemm_desc* desc,
                   bool batched, GemmArgs* out) {
  if (tc_status st = check_context(fn, ctx)) return st;
  if (tc_status st = check_buffer(fn, "A", ctx, A)) return st;
  if (tc_status st = check_buffer(fn, "B", ctx, B)) return st;
  if (tc_status st = check_buffer(fn, "C", ctx, C)) return st;
  if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
  tc_gemm_desc d = *desc;
  if (!supported_pair(d.dtype, d.accum))
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s with accum %s is not supported (f32/f32, f16/f32, f16/f16, "
                "bf16/f32, i8/i32)", fn, dtype_label(d.dtype).c_str(), dtype_label(d.accum).c_str());
  if (!batched) {
    d.batch = 1;
    d.stride_a = d.stride_b = d.stride_c = 0;
  }
  if (d.M <= 0 || d.N <= 0 || d.K < 0)
    return fail(TC_ERR_INVALID_SHAPE, "%s: M, N must be > 0 and K >= 0 (got M=%lld N=%lld K=%lld)", fn,
                (long long)d.M, (long long)d.N, (long long)d.K);
  if (d.M > kMaxDim || d.N > kMaxDim || d.K > kMaxDim)
    return fail(TC_ERR_INVALID_SHAPE, "%s: M, N, K must be below 2^31 (got M=%lld N=%lld K=%lld)", fn,
                (long long)d.M, (long long)d.N, (long long)d.K);
  if (d.batch <= 0) return fail(TC_ERR_INVALID_SHAPE, "%s: batch must be > 0 (got %lld)", fn, (long long)d.batch);
  if (d.dtype == TC_DTYPE_I8) {
    for (double v : {d.alpha, d.beta})
      if (!(std::isfinite(v) && v == std::floor(v) && std::fabs(v) <= 2147483647.0))
        return fail(TC_ERR_INVALID_ARG, "%s: i8 GEMM needs integer alpha and beta in int32 range (got %g, %g)", fn,
                    d.alpha, d.beta);
  }
  d.transpose_a = d.transpose_a != 0;
  d.transpose_b = d.transpose_b != 0;
  const int64_t es = int64_t(dtype_size(d.dtype)), cs = d.dtype == TC_DTYPE_I8 ? 4 : es;
  Operand a{"A", A, d.transpose_a ? d.K : d.M, d.transpose_a ? d.M : d.K, &d.lda, &d.stride_a, es};
  Operand b{"B", B, d.transpose_b ? d.N : d.K, d.transpose_b ? d.K : d.N, &d.ldb, &d.stride_b, es};
  Operand c{"C", C, d.M, d.N, &d.ldc, &d.stride_c, cs};
  if (d.K == 0) {  // A and B are not read: no size requirements, pitches still sane
    a.rows = a.cols = b.rows = b.cols = 0;
  }
  for (Operand* op : {&a, &b, &c})
    if (tc_status st = check_operand(fn, d.batch, *op)) return st;
  // Batches of C must not overlap, or results would depend on the order.
  if (d.batch > 1 && d.stride_c < (d.M - 1) * d.ldc + d.N)
    return fail(TC_ERR_INVALID_ARG, "%s: stride_c = %lld makes batches of C overlap (each spans %lld elements)", fn,
                (long long)d.stride_c, (long long)((d.M - 1) * d.ldc + d.N));
  // C may not share bytes with an input. Compare the byte spans touched, not
  // the buffers: two buffers may wrap the same caller memory (tc_buffer_from_ptr).
  const auto start = [](tc_buffer b) { return reinterpret_cast<uintptr_t>(b->storage->data); };
  for (Operand* in : {&a, &b})
    if (in->bytes > 0 && c.bytes > 0 && start(in->buf) < start(C) + uint64_t(c.bytes) &&
        start(C) < start(in->buf) + uint64_t(in->bytes))
      return fail(TC_ERR_INVALID_ARG, "%s: C overlaps %s (%s)", fn, in->name,
                  in->buf->storage == C->storage ? "the same buffer" : "buffers over the same memory");
  out->d = d;
  out->a = A->storage->data;
  out->b = B->storage->data;
  out->c = C->storage->data;
  out->info.name = batched ? "gemm_batched" : "gemm";
  char shapes[256];
  std::snprintf(shapes, sizeof shapes, "M=%lld,N=%lld,K=%lld,batch=%lld,dtype=%s,accum=%s,ta=%d,tb=%d",
                (long long)d.M, (long long)d.N, (long long)d.K, (long long)d.batch, dtype_label(d.dtype).c_str(),
                dtype_label(d.accum).c_str(), d.transpose_a, d.transpose_b);
  out->info.shapes = shapes;
  out->info.keep = {A->storage, B->storage, C->storage};
  return TC_OK;
}

tc_status run(const char* fn, tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc,
              bool batched, tc_stream stream, bool async) {
  if (async) {
    if (tc_status st = check_stream(fn, ctx, stream)) return st;
  }
  GemmArgs args;
  if (tc_status st = validate(fn, ctx, A, B, C, desc, batched, &args)) return st;
  note_backend(ctx->backend->kind());
  return ctx->backend->gemm(args, async ? stream->queue.get() : nullptr);
}

}  // namespace

extern "C" {

tc_status tc_gemm(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc) {
  return guarded("tc_gemm", [&] { return run("tc_gemm", ctx, A, B, C, desc, false, nullptr, false); });
}

tc_status tc_gemm_async(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc,
                        tc_stream stream) {
  return guarded("tc_gemm_async", [&] { return run("tc_gemm_async", ctx, A, B, C, desc, false, stream, true); });
}

tc_status tc_gemm_batched(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc) {
  return guarded("tc_gemm_batched", [&] { return run("tc_gemm_batched", ctx, A, B, C, desc, true, nullptr, false); });
}

tc_status tc_gemm_batched_async(tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc,
                                tc_stream stream) {
  return guarded("tc_gemm_batched_async",
                 [&] { return run("tc_gemm_batched_async", ctx, A, B, C, desc, true, stream, true); });
}

}  // extern "C"
