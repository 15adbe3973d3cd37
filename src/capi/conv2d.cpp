// Validation of the conv2d entry points: shapes, overflow-safe sizes of every
// tensor and scratch, dtypes, buffer sizes and aliasing. The CPU kernels
// (src/cpu/conv2d.cpp) assume all of it.
#include "tensorcore/conv2d.h"

#include <cstdio>
#include <tuple>
#include <vector>

#include "capi/op_call.h"
#include "core/half.h"

using namespace tc;
using namespace tc::capi;

namespace {

constexpr int64_t kMaxGemmDim = 0x7fffffff;  // GEMM dims and pitches fit the BLAS int

// Output size along one axis; the kernel must fit the padded input.
tc_status axis(const char* fn, const char* name, int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t* out) {
  if (in <= 0 || k <= 0)
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s: input size %lld and kernel size %lld must be > 0", fn, name,
                (long long)in, (long long)k);
  if (pad < 0) return fail(TC_ERR_INVALID_SHAPE, "%s: pad_%s = %lld is negative", fn, name, (long long)pad);
  if (stride < 1) return fail(TC_ERR_INVALID_SHAPE, "%s: stride_%s = %lld must be >= 1", fn, name, (long long)stride);
  int64_t twice, padded;
  if (!mul_ok(pad, 2, &twice) || !add_ok(in, twice, &padded))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %s: input %lld + 2 * pad %lld overflows", fn, name, (long long)in,
                (long long)pad);
  if (k > padded)
    return fail(TC_ERR_INVALID_SHAPE, "%s: kernel %s = %lld is larger than the padded input (%lld + 2 * %lld = %lld)",
                fn, name, (long long)k, (long long)in, (long long)pad, (long long)padded);
  *out = (padded - k) / stride + 1;
  return TC_OK;
}

tc_status output_shape(const char* fn, int64_t H, int64_t W, int64_t kH, int64_t kW, int64_t ph, int64_t pw,
                       int64_t sh, int64_t sw, int64_t* oH, int64_t* oW) {
  if (tc_status st = axis(fn, "h", H, kH, ph, sh, oH)) return st;
  return axis(fn, "w", W, kW, pw, sw, oW);
}

// Element counts of every tensor of a normalised desc.
struct Sizes {
  int64_t ckk = 0, p = 0;                    // GEMM dims: C*kH*kW and out_H*out_W
  int64_t x = 0, w = 0, y = 0, bias = 0;     // elements
  int64_t col = 0, dx_f32 = 0;               // f32 elements of the scratches
};

bool product(std::initializer_list<int64_t> fs, int64_t* out) {
  int64_t r = 1;
  for (int64_t f : fs)
    if (!mul_ok(r, f, &r)) return false;
  *out = r;
  return true;
}

// Checks the shape fields of `in` and fills `d` (with out_H/out_W computed)
// and `s`. out_channels is checked only when `with_oc`.
tc_status check_shape(const char* fn, const tc_conv2d_desc& in, bool with_oc, tc_conv2d_desc* d, Sizes* s) {
  *d = in;
  if (d->batch <= 0 || d->in_channels <= 0 || (with_oc && d->out_channels <= 0))
    return fail(TC_ERR_INVALID_SHAPE, "%s: batch, in_channels%s must be > 0 (got %lld, %lld%s%lld)", fn,
                with_oc ? " and out_channels" : "", (long long)d->batch, (long long)d->in_channels,
                with_oc ? ", " : "", with_oc ? (long long)d->out_channels : 0LL);
  int64_t oH, oW;
  if (tc_status st = output_shape(fn, d->H, d->W, d->kH, d->kW, d->pad_h, d->pad_w, d->stride_h, d->stride_w, &oH, &oW))
    return st;
  // 0 means "computed"; anything else must be the computed value.
  if (d->out_H != 0 && d->out_H != oH)
    return fail(TC_ERR_INVALID_SHAPE, "%s: out_H = %lld given, but (H + 2*pad_h - kH) / stride_h + 1 = %lld", fn,
                (long long)d->out_H, (long long)oH);
  if (d->out_W != 0 && d->out_W != oW)
    return fail(TC_ERR_INVALID_SHAPE, "%s: out_W = %lld given, but (W + 2*pad_w - kW) / stride_w + 1 = %lld", fn,
                (long long)d->out_W, (long long)oW);
  d->out_H = oH;
  d->out_W = oW;
  const int64_t oc = with_oc ? d->out_channels : 1;
  int64_t col_bytes, dx_bytes;
  if (!product({d->in_channels, d->kH, d->kW}, &s->ckk) || !product({oH, oW}, &s->p) ||
      !product({d->batch, d->in_channels, d->H, d->W}, &s->x) || !product({oc, s->ckk}, &s->w) ||
      !product({d->batch, oc, s->p}, &s->y) || !product({d->batch, s->ckk, s->p}, &s->col) ||
      !product({s->col, 4}, &col_bytes) || !product({s->x, 4}, &dx_bytes))
    return fail(TC_ERR_INVALID_SHAPE, "%s: tensor sizes overflow 64 bits (batch %lld, channels %lld -> %lld, "
                "%lld x %lld, kernel %lld x %lld)", fn, (long long)d->batch, (long long)d->in_channels, (long long)oc,
                (long long)d->H, (long long)d->W, (long long)d->kH, (long long)d->kW);
  s->dx_f32 = s->x;
  s->bias = oc;
  if (s->ckk > kMaxGemmDim || s->p > kMaxGemmDim || oc > kMaxGemmDim)
    return fail(TC_ERR_INVALID_SHAPE, "%s: GEMM dimensions out_channels %lld, in_channels*kH*kW %lld and "
                "out_H*out_W %lld must be below 2^31", fn, (long long)oc, (long long)s->ckk, (long long)s->p);
  return TC_OK;
}

tc_status check_dtype(const char* fn, tc_dtype dtype) {
  if (dtype != TC_DTYPE_F16 && dtype != TC_DTYPE_F32)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported (f16 or f32)", fn, dtype_label(dtype).c_str());
  return TC_OK;
}

tc_status check_common(const char* fn, const tc_conv2d_desc* desc, tc_conv2d_desc* d, Sizes* s) {
  if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
  if (tc_status st = check_dtype(fn, desc->dtype)) return st;
  return check_shape(fn, *desc, true, d, s);
}

// The shapes string of TC_TRACE.
std::string shapes_of(const tc_conv2d_desc& d) {
  return fmt("N=%lld,C=%lld,K=%lld,H=%lld,W=%lld,kH=%lld,kW=%lld,pad=%lldx%lld,stride=%lldx%lld,out=%lldx%lld,dtype=%s",
             (long long)d.batch, (long long)d.in_channels, (long long)d.out_channels, (long long)d.H, (long long)d.W,
             (long long)d.kH, (long long)d.kW, (long long)d.pad_h, (long long)d.pad_w, (long long)d.stride_h,
             (long long)d.stride_w, (long long)d.out_H, (long long)d.out_W, dtype_label(d.dtype).c_str());
}

// The descriptor, then each operand's span: (name, elements, bytes each).
tc_status check_conv(OpCall& c, const tc_conv2d_desc* desc, tc_conv2d_desc* d, Sizes* s,
                     std::initializer_list<std::tuple<const char*, int64_t Sizes::*, bool>> operands) {
  if (tc_status st = check_common(c.fn(), desc, d, s)) return st;
  const int64_t es = int64_t(dtype_size(d->dtype));
  for (auto [name, field, f32] : operands) {
    int64_t bytes;
    if (!mul_ok(s->*field, f32 ? 4 : es, &bytes))
      return fail(TC_ERR_INVALID_SHAPE, "%s: size of %s (%lld elements) overflows 64 bits", c.fn(), name,
                  (long long)(s->*field));
    if (tc_status st = c.span(name, bytes)) return st;
  }
  return TC_OK;
}

tc_status conv2d_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer Wt,
                              tc_buffer bias, tc_buffer Y, tc_buffer col, const tc_conv2d_desc* desc) {
  OpCall c(EntryId::conv2d_forward, async, stream, {ctx, X, Wt, bias, Y, col, desc});
  tc_conv2d_desc d;
  Sizes s;
  if (tc_status st = c.validate([&] {
        return check_conv(c, desc, &d, &s, {{"X", &Sizes::x, false}, {"weight", &Sizes::w, false},
                                            {"bias", &Sizes::bias, false}, {"Y", &Sizes::y, false},
                                            {"scratch_col", &Sizes::col, true}});
      }))
    return st;
  Conv2dForwardArgs a;
  a.d = d;
  a.x = c.data("X"), a.w = c.data("weight"), a.bias = c.data("bias"), a.y = c.data("Y");
  a.col = c.ptr<float>("scratch_col");
  c.fill_info(&a.info, "conv2d_forward", [&] { return shapes_of(d); });
  return c.run(&Backend::conv2d_forward, a);
}

tc_status conv2d_backward_input_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer dY, tc_buffer Wt,
                                     tc_buffer dX, tc_buffer col, tc_buffer dx32, const tc_conv2d_desc* desc) {
  OpCall c(EntryId::conv2d_backward_input, async, stream, {ctx, dY, Wt, dX, col, dx32, desc});
  tc_conv2d_desc d;
  Sizes s;
  if (tc_status st = c.validate([&] {
        return check_conv(c, desc, &d, &s, {{"dY", &Sizes::y, false}, {"weight", &Sizes::w, false},
                                            {"dX", &Sizes::x, false}, {"scratch_col", &Sizes::col, true},
                                            {"scratch_dX_f32", &Sizes::dx_f32, true}});
      }))
    return st;
  Conv2dBackwardInputArgs a;
  a.d = d;
  a.dy = c.data("dY"), a.w = c.data("weight"), a.dx = c.data("dX");
  a.col = c.ptr<float>("scratch_col"), a.dx_f32 = c.ptr<float>("scratch_dX_f32");
  c.fill_info(&a.info, "conv2d_backward_input", [&] { return shapes_of(d); });
  return c.run(&Backend::conv2d_backward_input, a);
}

tc_status conv2d_backward_weight_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer dY,
                                      tc_buffer dW, tc_buffer col, const tc_conv2d_desc* desc) {
  OpCall c(EntryId::conv2d_backward_weight, async, stream, {ctx, X, dY, dW, col, desc});
  tc_conv2d_desc d;
  Sizes s;
  if (tc_status st = c.validate([&] {
        return check_conv(c, desc, &d, &s, {{"X", &Sizes::x, false}, {"dY", &Sizes::y, false},
                                            {"dW", &Sizes::w, false}, {"scratch_col", &Sizes::col, true}});
      }))
    return st;
  Conv2dBackwardWeightArgs a;
  a.d = d;
  a.x = c.data("X"), a.dy = c.data("dY"), a.dw = c.data("dW"), a.col = c.ptr<float>("scratch_col");
  c.fill_info(&a.info, "conv2d_backward_weight", [&] { return shapes_of(d); });
  return c.run(&Backend::conv2d_backward_weight, a);
}

}  // namespace

extern "C" {

tc_status tc_conv2d_output_shape(int64_t H, int64_t W, int64_t kH, int64_t kW, int64_t pad_h, int64_t pad_w,
                                 int64_t stride_h, int64_t stride_w, int64_t* out_H, int64_t* out_W) {
  const char* fn = "tc_conv2d_output_shape";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "out_H", out_H)) return st;
    if (tc_status st = check_out_ptr(fn, "out_W", out_W)) return st;
    int64_t oH, oW;
    if (tc_status st = output_shape(fn, H, W, kH, kW, pad_h, pad_w, stride_h, stride_w, &oH, &oW)) return st;
    *out_H = oH;
    *out_W = oW;
    return TC_OK;
  });
}

tc_status tc_conv2d_scratch_bytes(const tc_conv2d_desc* desc, uint64_t* out_bytes) {
  const char* fn = "tc_conv2d_scratch_bytes";
  return guarded(fn, [&] {
    if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
    if (tc_status st = check_out_ptr(fn, "out_bytes", out_bytes)) return st;
    tc_conv2d_desc d;
    Sizes s;
    if (tc_status st = check_shape(fn, *desc, false, &d, &s)) return st;
    *out_bytes = uint64_t(s.col) * 4;
    return TC_OK;
  });
}

tc_status tc_conv2d_backward_input_scratch_bytes(const tc_conv2d_desc* desc, uint64_t* out_bytes) {
  const char* fn = "tc_conv2d_backward_input_scratch_bytes";
  return guarded(fn, [&] {
    if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
    if (tc_status st = check_out_ptr(fn, "out_bytes", out_bytes)) return st;
    const tc_conv2d_desc& d = *desc;
    if (d.batch <= 0 || d.in_channels <= 0 || d.H <= 0 || d.W <= 0)
      return fail(TC_ERR_INVALID_SHAPE, "%s: batch, in_channels, H and W must be > 0 (got %lld, %lld, %lld, %lld)", fn,
                  (long long)d.batch, (long long)d.in_channels, (long long)d.H, (long long)d.W);
    int64_t bytes;
    if (!product({d.batch, d.in_channels, d.H, d.W, 4}, &bytes))
      return fail(TC_ERR_INVALID_SHAPE, "%s: %lld x %lld x %lld x %lld f32 overflows 64 bits", fn, (long long)d.batch,
                  (long long)d.in_channels, (long long)d.H, (long long)d.W);
    *out_bytes = uint64_t(bytes);
    return TC_OK;
  });
}

}  // extern "C"

TC_DEFINE_ENTRY(conv2d_forward,
                (tc_context ctx, tc_buffer X, tc_buffer weight, tc_buffer bias, tc_buffer Y, tc_buffer scratch_col,
                 const tc_conv2d_desc* desc),
                ctx, X, weight, bias, Y, scratch_col, desc)
TC_DEFINE_ENTRY(conv2d_backward_input,
                (tc_context ctx, tc_buffer dY, tc_buffer weight, tc_buffer dX, tc_buffer scratch_col,
                 tc_buffer scratch_dX_f32, const tc_conv2d_desc* desc),
                ctx, dY, weight, dX, scratch_col, scratch_dX_f32, desc)
TC_DEFINE_ENTRY(conv2d_backward_weight,
                (tc_context ctx, tc_buffer X, tc_buffer dY, tc_buffer dW, tc_buffer scratch_col,
                 const tc_conv2d_desc* desc),
                ctx, X, dY, dW, scratch_col, desc)
