#include "tensorcore/gemm.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "capi/op_call.h"
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
  int64_t bytes = 0;  // bytes touched from the buffer's start
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

// The descriptor and the operands' spans (GemmArgs normalised into *out).
tc_status check_gemm(OpCall& c, const tc_gemm_desc* desc, bool batched, GemmArgs* out) {
  const char* fn = c.fn();
  tc_buffer A = c.buffer("A"), B = c.buffer("B"), C = c.buffer("C");
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
  Operand cc{"C", C, d.M, d.N, &d.ldc, &d.stride_c, cs};
  if (d.K == 0) {  // A and B are not read: no size requirements, pitches still sane
    a.rows = a.cols = b.rows = b.cols = 0;
  }
  for (Operand* op : {&a, &b, &cc}) {
    if (tc_status st = check_operand(fn, d.batch, *op)) return st;
    if (tc_status st = c.span(op->name, op->bytes)) return st;
  }
  // Batches of C must not overlap, or results would depend on the order.
  if (d.batch > 1 && d.stride_c < (d.M - 1) * d.ldc + d.N)
    return fail(TC_ERR_INVALID_ARG, "%s: stride_c = %lld makes batches of C overlap (each spans %lld elements)", fn,
                (long long)d.stride_c, (long long)((d.M - 1) * d.ldc + d.N));
  out->d = d;
  return TC_OK;
}

// GEMMs of a context whose device GEMM is switched off (tc_context_s::
// gemm_on_host): the operands' storage is copied to host memory, the CPU
// backend's GEMM runs on the copies and C is copied back; last_backend()
// says portable_cpu. An _async call first waits for the work already on its
// stream, then runs synchronously.
tc_status gemm_on_host(OpCall& c, const GemmArgs& a) {
  if (tc_stream s = c.stream()) {
    std::string detail;
    if (tc_status st = s->queue->sync(&detail))
      return fail(st, "%s: earlier work on the stream failed: %s", c.fn(), detail.c_str());
  }
  static const std::unique_ptr<Backend> host = make_cpu_backend();
  Backend& dev = *c.context()->backend;
  const StorageRef sa = a.info.keep[0], sb = a.info.keep[1], sc = a.info.keep[2];
  std::vector<char> ha(sa->size), hb(sb->size), hc(sc->size);
  for (auto [h, st] : {std::pair{&ha, &sa}, {&hb, &sb}, {&hc, &sc}})
    if (tc_status e = dev.copy_out(h->data(), (*st)->data, (*st)->size)) return e;
  GemmArgs h = a;
  h.info.keep.clear();
  h.a = ha.data() + (static_cast<const char*>(a.a) - static_cast<const char*>(sa->data));
  h.b = hb.data() + (static_cast<const char*>(a.b) - static_cast<const char*>(sb->data));
  h.c = hc.data() + (static_cast<char*>(a.c) - static_cast<char*>(sc->data));
  note_backend(host->kind());
  if (tc_status st = host->gemm(h, nullptr)) return st;
  return dev.copy_in(sc->data, hc.data(), sc->size);
}

tc_status run(EntryId id, bool batched, bool async, tc_stream stream, tc_context ctx, tc_buffer A, tc_buffer B,
              tc_buffer C, const tc_gemm_desc* desc) {
  OpCall c(id, async, stream, {ctx, A, B, C, desc});
  GemmArgs args;
  if (tc_status st = c.validate([&] { return check_gemm(c, desc, batched, &args); })) return st;
  const tc_gemm_desc& d = args.d;
  args.a = c.data("A"), args.b = c.data("B"), args.c = c.data("C");
  c.fill_info(&args.info, batched ? "gemm_batched" : "gemm", [&] {
    return fmt("M=%lld,N=%lld,K=%lld,batch=%lld,dtype=%s,accum=%s,ta=%d,tb=%d", (long long)d.M, (long long)d.N,
               (long long)d.K, (long long)d.batch, dtype_label(d.dtype).c_str(), dtype_label(d.accum).c_str(),
               d.transpose_a, d.transpose_b);
  });
  if (c.context()->gemm_on_host) return gemm_on_host(c, args);
  return c.run(&Backend::gemm, args);
}

tc_status gemm_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C,
                    const tc_gemm_desc* desc) {
  return run(EntryId::gemm, false, async, stream, ctx, A, B, C, desc);
}
tc_status gemm_batched_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C,
                            const tc_gemm_desc* desc) {
  return run(EntryId::gemm_batched, true, async, stream, ctx, A, B, C, desc);
}

}  // namespace

TC_DEFINE_ENTRY(gemm, (tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc), ctx, A, B, C,
                desc)
TC_DEFINE_ENTRY(gemm_batched, (tc_context ctx, tc_buffer A, tc_buffer B, tc_buffer C, const tc_gemm_desc* desc), ctx,
                A, B, C, desc)
