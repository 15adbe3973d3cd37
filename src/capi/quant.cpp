// Validation of the quantized-weight entry points (include/tensorcore/quant.h).
#include "tensorcore/quant.h"

#include <cmath>
#include <cstdio>

#include "capi/api.h"
#include "core/half.h"
#include "quant/formats.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr int64_t kMaxDim = 0x7fffffff;

tc_status check_format(const char* fn, tc_quant_type fmt, const quant::FormatInfo** out) {
  *out = quant::format_info(fmt);
  if (!*out)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: unknown quantized format %d (TC_QUANT_Q4_0 .. TC_QUANT_F32)", fn,
                int(fmt));
  return TC_OK;
}

tc_status check_dtype(const char* fn, const char* what, tc_dtype dtype) {
  if (dtype != TC_DTYPE_F16 && dtype != TC_DTYPE_BF16 && dtype != TC_DTYPE_F32)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: %s dtype %s is not supported (f16, bf16, f32)", fn, what,
                dtype_label(dtype).c_str());
  return TC_OK;
}

// Dims in (0, 2^31) and K whole blocks of the format.
tc_status check_dims(const char* fn, const quant::FormatInfo& f, int64_t M, int64_t N, int64_t K) {
  if (M <= 0 || N <= 0 || K <= 0)
    return fail(TC_ERR_INVALID_SHAPE, "%s: M, N, K must be > 0 (got M=%lld N=%lld K=%lld)", fn, (long long)M,
                (long long)N, (long long)K);
  if (M > kMaxDim || N > kMaxDim || K > kMaxDim)
    return fail(TC_ERR_INVALID_SHAPE, "%s: M, N, K must be below 2^31 (got M=%lld N=%lld K=%lld)", fn, (long long)M,
                (long long)N, (long long)K);
  if (K % f.block_elems)
    return fail(TC_ERR_INVALID_SHAPE, "%s: K = %lld is not a multiple of the %s block size %d", fn, (long long)K,
                f.name, f.block_elems);
  return TC_OK;
}

// `rows` x `cols` elements of `elem` bytes must fit the buffer.
tc_status check_dense(const char* fn, const char* name, tc_buffer b, int64_t rows, int64_t cols, int64_t elem,
                      uint64_t* bytes) {
  int64_t n;
  if (!mul_ok(rows, cols, &n) || !mul_ok(n, elem, &n))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s of %lld x %lld overflows 64 bits", fn, name, (long long)rows,
                (long long)cols);
  if (uint64_t(n) > b->size())
    return fail(TC_ERR_INVALID_ARG, "%s: %s needs %lld bytes (%lld x %lld) but its buffer has %zu", fn, name,
                (long long)n, (long long)rows, (long long)cols, b->size());
  *bytes = uint64_t(n);
  return TC_OK;
}

tc_status check_quant(const char* fn, const char* name, tc_buffer b, const quant::FormatInfo& f, int64_t rows,
                      int64_t K, uint64_t* bytes) {
  if (!quant::matrix_bytes(f, rows, K, bytes))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s of %lld x %lld %s overflows 64 bits", fn, name, (long long)rows,
                (long long)K, f.name);
  if (*bytes > b->size())
    return fail(TC_ERR_INVALID_ARG, "%s: %s needs %llu bytes (%lld rows of %lld %s weights) but its buffer has %zu",
                fn, name, (unsigned long long)*bytes, (long long)rows, (long long)K, f.name, b->size());
  return TC_OK;
}

bool overlaps(tc_buffer a, uint64_t a_off, uint64_t a_len, tc_buffer b, uint64_t b_off, uint64_t b_len) {
  if (!a_len || !b_len) return false;
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a->bytes()) + a_off;
  const uintptr_t b0 = reinterpret_cast<uintptr_t>(b->bytes()) + b_off;
  return a0 < b0 + b_len && b0 < a0 + a_len;
}

std::string shapes(const quant::FormatInfo& f, int64_t M, int64_t N, int64_t K, tc_dtype dtype) {
  char s[160];
  std::snprintf(s, sizeof s, "fmt=%s,M=%lld,N=%lld,K=%lld,dtype=%s", f.name, (long long)M, (long long)N,
                (long long)K, dtype_label(dtype).c_str());
  return s;
}

tc_status run_gemv(const char* fn, tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W, tc_buffer Y,
                   tc_quant_type fmt, int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype, bool fused,
                   tc_stream stream, bool async) {
  if (tc_status st = check_context(fn, ctx)) return st;
  if (async)
    if (tc_status st = check_stream(fn, ctx, stream)) return st;
  if (tc_status st = check_buffer(fn, "X", ctx, X)) return st;
  if (fused)
    if (tc_status st = check_buffer(fn, "gamma", ctx, gamma)) return st;
  if (tc_status st = check_buffer(fn, "W_quant", ctx, W)) return st;
  if (tc_status st = check_buffer(fn, "Y", ctx, Y)) return st;
  const quant::FormatInfo* f;
  if (tc_status st = check_format(fn, fmt, &f)) return st;
  if (tc_status st = check_dtype(fn, "X/Y", dtype)) return st;
  if (tc_status st = check_dims(fn, *f, M, N, K)) return st;
  if (fused && !(std::isfinite(eps) && eps >= 0.0f))
    return fail(TC_ERR_INVALID_ARG, "%s: eps = %g must be finite and >= 0", fn, double(eps));
  const int64_t es = int64_t(dtype_size(dtype));
  uint64_t xb = 0, wb = 0, yb = 0, gb = 0;
  if (tc_status st = check_dense(fn, "X", X, M, K, es, &xb)) return st;
  if (tc_status st = check_quant(fn, "W_quant", W, *f, N, K, &wb)) return st;
  if (tc_status st = check_dense(fn, "Y", Y, M, N, es, &yb)) return st;
  if (fused)
    if (tc_status st = check_dense(fn, "gamma", gamma, 1, K, es, &gb)) return st;
  if (overlaps(Y, 0, yb, X, 0, xb)) return fail(TC_ERR_INVALID_ARG, "%s: Y overlaps X", fn);
  if (overlaps(Y, 0, yb, W, 0, wb)) return fail(TC_ERR_INVALID_ARG, "%s: Y overlaps W_quant", fn);
  if (fused && overlaps(Y, 0, yb, gamma, 0, gb)) return fail(TC_ERR_INVALID_ARG, "%s: Y overlaps gamma", fn);
  GemvQuantizedArgs a;
  a.fmt = fmt;
  a.M = M, a.N = N, a.K = K;
  a.dtype = dtype;
  a.x = X->bytes();
  a.w = W->bytes();
  a.y = Y->bytes();
  a.gamma = fused ? gamma->bytes() : nullptr;
  a.eps = eps;
  a.info.name = fused ? "fused_rmsnorm_gemv_quantized" : "gemv_quantized";
  a.info.shapes = shapes(*f, M, N, K, dtype);
  a.info.keep = {X->storage, W->storage, Y->storage};
  if (fused) a.info.keep.push_back(gamma->storage);
  note_backend(ctx->backend->kind());
  Queue* q = async ? stream->queue.get() : nullptr;
  return fused ? ctx->backend->fused_rmsnorm_gemv_quantized(a, q) : ctx->backend->gemv_quantized(a, q);
}

}  // namespace

extern "C" {

const char* tc_quant_name(tc_quant_type fmt) {
  const quant::FormatInfo* f = quant::format_info(fmt);
  return f ? f->name : "unknown";
}

tc_status tc_quant_block_info(tc_quant_type fmt, int64_t* block_elems, int64_t* block_bytes) {
  return guarded("tc_quant_block_info", [&] {
    const quant::FormatInfo* f;
    if (tc_status st = check_format("tc_quant_block_info", fmt, &f)) return st;
    if (block_elems) *block_elems = f->block_elems;
    if (block_bytes) *block_bytes = f->block_bytes;
    return TC_OK;
  });
}

tc_status tc_quantized_size(tc_quant_type fmt, int64_t N, int64_t K, size_t* out) {
  return guarded("tc_quantized_size", [&] {
    const char* fn = "tc_quantized_size";
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    const quant::FormatInfo* f;
    if (tc_status st = check_format(fn, fmt, &f)) return st;
    if (N <= 0 || K <= 0)
      return fail(TC_ERR_INVALID_SHAPE, "%s: N and K must be > 0 (got N=%lld K=%lld)", fn, (long long)N,
                  (long long)K);
    if (K % f->block_elems)
      return fail(TC_ERR_INVALID_SHAPE, "%s: K = %lld is not a multiple of the %s block size %d", fn, (long long)K,
                  f->name, f->block_elems);
    uint64_t bytes;
    if (!quant::matrix_bytes(*f, N, K, &bytes) || bytes > uint64_t(INT64_MAX))
      return fail(TC_ERR_INVALID_SHAPE, "%s: %lld x %lld %s overflows 64 bits", fn, (long long)N, (long long)K,
                  f->name);
    *out = size_t(bytes);
    return TC_OK;
  });
}

tc_status tc_quantize_weights(tc_context ctx, tc_buffer W_src, tc_buffer W_quant, tc_quant_type fmt, int64_t N,
                              int64_t K, tc_dtype src_dtype) {
  return guarded("tc_quantize_weights", [&] {
    const char* fn = "tc_quantize_weights";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (tc_status st = check_buffer(fn, "W_src", ctx, W_src)) return st;
    if (tc_status st = check_buffer(fn, "W_quant", ctx, W_quant)) return st;
    const quant::FormatInfo* f;
    if (tc_status st = check_format(fn, fmt, &f)) return st;
    if (!quant::can_quantize(fmt))
      return fail(TC_ERR_UNSUPPORTED, "%s: quantising to %s is not implemented (q4_0, q4_1, q8_0, q8_k, f16, bf16, f32)",
                  fn, f->name);
    if (tc_status st = check_dtype(fn, "W_src", src_dtype)) return st;
    if (tc_status st = check_dims(fn, *f, 1, N, K)) return st;
    uint64_t sb = 0, qb = 0;
    if (tc_status st = check_dense(fn, "W_src", W_src, N, K, int64_t(dtype_size(src_dtype)), &sb)) return st;
    if (tc_status st = check_quant(fn, "W_quant", W_quant, *f, N, K, &qb)) return st;
    if (overlaps(W_quant, 0, qb, W_src, 0, sb)) return fail(TC_ERR_INVALID_ARG, "%s: W_quant overlaps W_src", fn);
    QuantizeWeightsArgs a;
    a.fmt = fmt;
    a.N = N, a.K = K;
    a.src_dtype = src_dtype;
    a.src = W_src->bytes();
    a.dst = W_quant->bytes();
    a.info.name = "quantize_weights";
    a.info.shapes = shapes(*f, 1, N, K, src_dtype);
    a.info.keep = {W_src->storage, W_quant->storage};
    note_backend(ctx->backend->kind());
    return ctx->backend->quantize_weights(a, nullptr);
  });
}

tc_status tc_dequantize_weights(tc_context ctx, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt, int64_t row_offset,
                                int64_t N, int64_t K, tc_dtype dtype) {
  return guarded("tc_dequantize_weights", [&] {
    const char* fn = "tc_dequantize_weights";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (tc_status st = check_buffer(fn, "W_quant", ctx, W_quant)) return st;
    if (tc_status st = check_buffer(fn, "Y", ctx, Y)) return st;
    const quant::FormatInfo* f;
    if (tc_status st = check_format(fn, fmt, &f)) return st;
    if (tc_status st = check_dtype(fn, "Y", dtype)) return st;
    if (tc_status st = check_dims(fn, *f, 1, N, K)) return st;
    int64_t rows;
    if (row_offset < 0 || !add_ok(row_offset, N, &rows))
      return fail(TC_ERR_INVALID_SHAPE, "%s: row_offset = %lld must be >= 0 and row_offset + N must not overflow", fn,
                  (long long)row_offset);
    uint64_t wb = 0, skip = 0, yb = 0;
    if (tc_status st = check_quant(fn, "W_quant", W_quant, *f, rows, K, &wb)) return st;
    quant::matrix_bytes(*f, row_offset, K, &skip);  // <= wb: cannot overflow
    if (tc_status st = check_dense(fn, "Y", Y, N, K, int64_t(dtype_size(dtype)), &yb)) return st;
    if (overlaps(Y, 0, yb, W_quant, skip, wb - skip)) return fail(TC_ERR_INVALID_ARG, "%s: Y overlaps W_quant", fn);
    DequantizeWeightsArgs a;
    a.fmt = fmt;
    a.N = N, a.K = K;
    a.dtype = dtype;
    a.src = W_quant->bytes() + skip;
    a.dst = Y->bytes();
    a.info.name = "dequantize_weights";
    a.info.shapes = shapes(*f, 1, N, K, dtype);
    a.info.keep = {W_quant->storage, Y->storage};
    note_backend(ctx->backend->kind());
    return ctx->backend->dequantize_weights(a, nullptr);
  });
}

tc_status tc_gemv_quantized(tc_context ctx, tc_buffer X, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt, int64_t M,
                            int64_t N, int64_t K, tc_dtype dtype) {
  return guarded("tc_gemv_quantized", [&] {
    return run_gemv("tc_gemv_quantized", ctx, X, nullptr, W_quant, Y, fmt, M, N, K, 0.0f, dtype, false, nullptr, false);
  });
}

tc_status tc_gemv_quantized_async(tc_context ctx, tc_buffer X, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt,
                                  int64_t M, int64_t N, int64_t K, tc_dtype dtype, tc_stream stream) {
  return guarded("tc_gemv_quantized_async", [&] {
    return run_gemv("tc_gemv_quantized_async", ctx, X, nullptr, W_quant, Y, fmt, M, N, K, 0.0f, dtype, false, stream,
                    true);
  });
}

tc_status tc_fused_rmsnorm_gemv_quantized(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W_quant, tc_buffer Y,
                                          tc_quant_type fmt, int64_t M, int64_t N, int64_t K, float eps,
                                          tc_dtype dtype) {
  return guarded("tc_fused_rmsnorm_gemv_quantized", [&] {
    return run_gemv("tc_fused_rmsnorm_gemv_quantized", ctx, X, gamma, W_quant, Y, fmt, M, N, K, eps, dtype, true,
                    nullptr, false);
  });
}

}  // extern "C"
