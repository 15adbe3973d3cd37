// Validation of the quantized-weight entry points (include/tensorcore/quant.h).
#include "tensorcore/quant.h"

#include <cmath>
#include <cstdio>

#include "capi/op_call.h"
#include "core/half.h"
#include "quant/formats.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr int64_t kMaxDim = 0x7fffffff;

tc_status check_format(const char* fn, tc_quant_type fmt, const quant::FormatInfo** out) {
  *out = quant::format_info(fmt);
  if (!*out)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: unknown quantized format %d (TC_QUANT_Q4_0 .. TC_QUANT_Q5_1)", fn,
                int(fmt));
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

// `rows` x `cols` elements of `elem` bytes.
tc_status span_dense(OpCall& c, const char* name, int64_t rows, int64_t cols, int64_t elem) {
  int64_t n;
  if (!mul_ok(rows, cols, &n) || !mul_ok(n, elem, &n))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s of %lld x %lld overflows 64 bits", c.fn(), name, (long long)rows,
                (long long)cols);
  return c.span(name, n, fmt("(%lld x %lld)", (long long)rows, (long long)cols));
}

// Rows [first, first + rows) of a quantised matrix of K columns.
tc_status span_quant(OpCall& c, const char* name, const quant::FormatInfo& f, int64_t first, int64_t rows, int64_t K) {
  uint64_t end, skip = 0;
  int64_t last;
  if (!add_ok(first, rows, &last) || !quant::matrix_bytes(f, last, K, &end))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s of %lld x %lld %s overflows 64 bits", c.fn(), name, (long long)last,
                (long long)K, f.name);
  quant::matrix_bytes(f, first, K, &skip);  // <= end: cannot overflow
  return c.span(name, int64_t(end - skip),
                fmt("(%lld rows of %lld %s weights)", (long long)last, (long long)K, f.name), int64_t(skip));
}

std::string shapes(const quant::FormatInfo& f, int64_t M, int64_t N, int64_t K, tc_dtype dtype) {
  char s[160];
  std::snprintf(s, sizeof s, "fmt=%s,M=%lld,N=%lld,K=%lld,dtype=%s", f.name, (long long)M, (long long)N,
                (long long)K, dtype_label(dtype).c_str());
  return s;
}

tc_status gemv_impl(EntryId id, bool fused, bool async, tc_stream stream, std::initializer_list<Value> values,
                    tc_quant_type fmt, int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype) {
  OpCall c(id, async, stream, values);
  const quant::FormatInfo* f = nullptr;
  auto rule = [&]() -> tc_status {
    if (tc_status st = check_format(c.fn(), fmt, &f)) return st;
    if (tc_status st = check_dims(c.fn(), *f, M, N, K)) return st;
    const int64_t es = int64_t(dtype_size(dtype));
    if (tc_status st = span_dense(c, "X", M, K, es)) return st;
    if (tc_status st = span_quant(c, "W_quant", *f, 0, N, K)) return st;
    if (tc_status st = span_dense(c, "Y", M, N, es)) return st;
    return fused ? span_dense(c, "gamma", 1, K, es) : TC_OK;
  };
  if (tc_status st = c.validate(rule)) return st;
  GemvQuantizedArgs a;
  a.fmt = fmt;
  a.M = M, a.N = N, a.K = K;
  a.dtype = dtype;
  a.x = c.data("X"), a.w = c.data("W_quant"), a.y = c.data("Y");
  a.gamma = fused ? c.data("gamma") : nullptr;
  a.eps = eps;
  c.fill_info(&a.info, nullptr, [&] { return shapes(*f, M, N, K, dtype); });
  return c.run(fused ? &Backend::fused_rmsnorm_gemv_quantized : &Backend::gemv_quantized, a);
}

tc_status gemv_quantized_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer W_quant, tc_buffer Y,
                              tc_quant_type fmt, int64_t M, int64_t N, int64_t K, tc_dtype dtype) {
  return gemv_impl(EntryId::gemv_quantized, false, async, stream, {ctx, X, W_quant, Y, fmt, M, N, K, dtype}, fmt, M, N,
                   K, 0.0f, dtype);
}

tc_status fused_rmsnorm_gemv_quantized_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma,
                                            tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt, int64_t M, int64_t N,
                                            int64_t K, float eps, tc_dtype dtype) {
  return gemv_impl(EntryId::fused_rmsnorm_gemv_quantized, true, async, stream,
                   {ctx, X, gamma, W_quant, Y, fmt, M, N, K, eps, dtype}, fmt, M, N, K, eps, dtype);
}

tc_status quantize_weights_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer W_src, tc_buffer W_quant,
                                tc_quant_type fmt, int64_t N, int64_t K, tc_dtype src_dtype) {
  OpCall c(EntryId::quantize_weights, async, stream, {ctx, W_src, W_quant, fmt, N, K, src_dtype});
  const quant::FormatInfo* f = nullptr;
  auto rule = [&]() -> tc_status {
    if (tc_status st = check_format(c.fn(), fmt, &f)) return st;
    if (!quant::can_quantize(fmt)) {
      std::string have;  // the formats with a quantiser, from the same test
      for (const quant::FormatInfo& q : quant::kFormats)
        if (quant::can_quantize(q.format)) have += std::string(have.empty() ? "" : ", ") + q.name;
      return fail(TC_ERR_UNSUPPORTED, "%s: quantising to %s is not implemented (%s)", c.fn(), f->name, have.c_str());
    }
    if (tc_status st = check_dims(c.fn(), *f, 1, N, K)) return st;
    if (tc_status st = span_dense(c, "W_src", N, K, int64_t(dtype_size(src_dtype)))) return st;
    return span_quant(c, "W_quant", *f, 0, N, K);
  };
  if (tc_status st = c.validate(rule)) return st;
  QuantizeWeightsArgs a;
  a.fmt = fmt;
  a.N = N, a.K = K;
  a.src_dtype = src_dtype;
  a.src = c.data("W_src"), a.dst = c.data("W_quant");
  c.fill_info(&a.info, nullptr, [&] { return shapes(*f, 1, N, K, src_dtype); });
  return c.run(&Backend::quantize_weights, a);
}

tc_status dequantize_weights_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer W_quant, tc_buffer Y,
                                  tc_quant_type fmt, int64_t row_offset, int64_t N, int64_t K, tc_dtype dtype) {
  OpCall c(EntryId::dequantize_weights, async, stream, {ctx, W_quant, Y, fmt, row_offset, N, K, dtype});
  const quant::FormatInfo* f = nullptr;
  auto rule = [&]() -> tc_status {
    if (tc_status st = check_format(c.fn(), fmt, &f)) return st;
    if (tc_status st = check_dims(c.fn(), *f, 1, N, K)) return st;
    int64_t rows;
    if (row_offset < 0 || !add_ok(row_offset, N, &rows))
      return fail(TC_ERR_INVALID_SHAPE, "%s: row_offset = %lld must be >= 0 and row_offset + N must not overflow",
                  c.fn(), (long long)row_offset);
    if (tc_status st = span_quant(c, "W_quant", *f, row_offset, N, K)) return st;
    return span_dense(c, "Y", N, K, int64_t(dtype_size(dtype)));
  };
  if (tc_status st = c.validate(rule)) return st;
  DequantizeWeightsArgs a;
  a.fmt = fmt;
  a.N = N, a.K = K;
  a.dtype = dtype;
  a.src = c.data("W_quant"), a.dst = c.data("Y");  // W_quant's span starts at row_offset
  c.fill_info(&a.info, nullptr, [&] { return shapes(*f, 1, N, K, dtype); });
  return c.run(&Backend::dequantize_weights, a);
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

}  // extern "C"

TC_DEFINE_ENTRY(quantize_weights,
                (tc_context ctx, tc_buffer W_src, tc_buffer W_quant, tc_quant_type fmt, int64_t N, int64_t K,
                 tc_dtype src_dtype),
                ctx, W_src, W_quant, fmt, N, K, src_dtype)
TC_DEFINE_ENTRY(dequantize_weights,
                (tc_context ctx, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt, int64_t row_offset, int64_t N,
                 int64_t K, tc_dtype dtype),
                ctx, W_quant, Y, fmt, row_offset, N, K, dtype)
TC_DEFINE_ENTRY(gemv_quantized,
                (tc_context ctx, tc_buffer X, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt, int64_t M, int64_t N,
                 int64_t K, tc_dtype dtype),
                ctx, X, W_quant, Y, fmt, M, N, K, dtype)
TC_DEFINE_ENTRY(fused_rmsnorm_gemv_quantized,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W_quant, tc_buffer Y, tc_quant_type fmt,
                 int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype),
                ctx, X, gamma, W_quant, Y, fmt, M, N, K, eps, dtype)
