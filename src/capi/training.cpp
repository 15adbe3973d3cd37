// C entry points of the training kernels (tensorcore/training.h). Operands,
// shapes, aliases and the eps rule are declared in capi/entries.def and
// checked by OpCall; what is left here is each op's own rule (descriptors)
// and the translation into the backend's arguments.
#include "tensorcore/training.h"

#include <cmath>

#include "capi/op_call.h"
#include "core/half.h"

using namespace tc;
using namespace tc::capi;

namespace {

int64_t esize(tc_dtype d) { return int64_t(dtype_size(d)); }

// ---- RMSNorm / LayerNorm

tc_status rmsnorm_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer Y,
                               tc_buffer rstd_out, int64_t N, int64_t D, float eps, tc_dtype dtype) {
  OpCall c(EntryId::rmsnorm_forward, async, stream, {ctx, X, gamma, Y, rstd_out, N, D, eps, dtype});
  if (tc_status st = c.validate()) return st;
  RmsNormForwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype, a.eps = eps;
  a.x = c.data("X"), a.gamma = c.data("gamma"), a.y = c.data("Y"), a.rstd = c.ptr<float>("rstd_out");
  c.fill_info(&a.info);
  return c.run(&Backend::rmsnorm_forward, a);
}

tc_status rmsnorm_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma,
                                tc_buffer dY, tc_buffer rstd, tc_buffer dX, tc_buffer dgamma, int64_t N, int64_t D,
                                tc_dtype dtype) {
  OpCall c(EntryId::rmsnorm_backward, async, stream, {ctx, X, gamma, dY, rstd, dX, dgamma, N, D, dtype});
  if (tc_status st = c.validate()) return st;
  RmsNormBackwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.x = c.data("X"), a.gamma = c.data("gamma"), a.dy = c.data("dY"), a.rstd = c.ptr<const float>("rstd");
  a.dx = c.data("dX"), a.dgamma = c.ptr<float>("dgamma");
  c.fill_info(&a.info);
  return c.run(&Backend::rmsnorm_backward, a);
}

tc_status layernorm_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma,
                                 tc_buffer beta, tc_buffer Y, tc_buffer mean_out, tc_buffer rstd_out, int64_t N,
                                 int64_t D, float eps, tc_dtype dtype) {
  OpCall c(EntryId::layernorm_forward, async, stream, {ctx, X, gamma, beta, Y, mean_out, rstd_out, N, D, eps, dtype});
  if (tc_status st = c.validate()) return st;
  LayerNormForwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype, a.eps = eps;
  a.x = c.data("X"), a.gamma = c.data("gamma"), a.beta = c.data("beta"), a.y = c.data("Y");
  a.mean = c.ptr<float>("mean_out"), a.rstd = c.ptr<float>("rstd_out");
  c.fill_info(&a.info);
  return c.run(&Backend::layernorm_forward, a);
}

tc_status layernorm_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma,
                                  tc_buffer dY, tc_buffer mean, tc_buffer rstd, tc_buffer dX, tc_buffer dgamma,
                                  tc_buffer dbeta, int64_t N, int64_t D, tc_dtype dtype) {
  OpCall c(EntryId::layernorm_backward, async, stream, {ctx, X, gamma, dY, mean, rstd, dX, dgamma, dbeta, N, D, dtype});
  if (tc_status st = c.validate()) return st;
  LayerNormBackwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.x = c.data("X"), a.gamma = c.data("gamma"), a.dy = c.data("dY");
  a.mean = c.ptr<const float>("mean"), a.rstd = c.ptr<const float>("rstd");
  a.dx = c.data("dX"), a.dgamma = c.ptr<float>("dgamma"), a.dbeta = c.ptr<float>("dbeta");
  c.fill_info(&a.info);
  return c.run(&Backend::layernorm_backward, a);
}

// ---- RoPE: X [batch, heads, seq, head_dim] rotated in place by the tables
// cos_t, sin_t [seq, head_dim / 2] f32.

tc_status rope_impl(EntryId id, bool inverse, bool async, tc_stream stream, tc_context ctx, tc_buffer X,
                    tc_buffer cos_t, tc_buffer sin_t, const tc_rope_desc* desc) {
  const char* xname = inverse ? "dX" : "X";
  OpCall c(id, async, stream, {ctx, X, cos_t, sin_t, desc});
  tc_rope_desc d{};
  auto rule = [&]() -> tc_status {
    if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", c.fn());
    d = *desc;
    if (d.dtype != TC_DTYPE_F16 && d.dtype != TC_DTYPE_BF16 && d.dtype != TC_DTYPE_F32)
      return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s is not supported (f16, bf16 or f32)", c.fn(),
                  dtype_label(d.dtype).c_str());
    for (auto [name, v] : {std::pair{"batch", d.batch}, {"heads", d.heads}, {"seq", d.seq}, {"head_dim", d.head_dim}})
      if (v < 1) return fail(TC_ERR_INVALID_SHAPE, "%s: %s must be >= 1 (got %lld)", c.fn(), name, (long long)v);
    if (d.head_dim % 2 != 0)
      return fail(TC_ERR_INVALID_SHAPE, "%s: head_dim must be even (got %lld)", c.fn(), (long long)d.head_dim);
    if (d.interleaved != 0 && d.interleaved != 1)
      return fail(TC_ERR_INVALID_ARG, "%s: interleaved must be 0 or 1 (got %d)", c.fn(), d.interleaved);
    const std::string xs = fmt("[batch, heads, seq, head_dim] = [%lld, %lld, %lld, %lld]", (long long)d.batch,
                               (long long)d.heads, (long long)d.seq, (long long)d.head_dim);
    const std::string ts = fmt("[seq, head_dim / 2] = [%lld, %lld] f32", (long long)d.seq, (long long)d.head_dim / 2);
    if (tc_status st = c.span(xname, {d.batch, d.heads, d.seq, d.head_dim}, esize(d.dtype), xs)) return st;
    if (tc_status st = c.span("cos_t", {d.seq, d.head_dim / 2}, 4, ts)) return st;
    return c.span("sin_t", {d.seq, d.head_dim / 2}, 4, ts);
  };
  if (tc_status st = c.validate(rule)) return st;
  RopeArgs a;
  a.d = d;
  a.inverse = inverse;
  a.x = c.data(xname), a.cos_t = c.ptr<const float>("cos_t"), a.sin_t = c.ptr<const float>("sin_t");
  c.fill_info(&a.info, inverse ? "rope_backward" : "rope_forward", [&] {
    return fmt("batch=%lld,heads=%lld,seq=%lld,head_dim=%lld,dtype=%s,interleaved=%d", (long long)d.batch,
               (long long)d.heads, (long long)d.seq, (long long)d.head_dim, dtype_label(d.dtype).c_str(),
               d.interleaved);
  });
  return c.run(&Backend::rope, a);
}

tc_status rope_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer cos_t,
                            tc_buffer sin_t, const tc_rope_desc* desc) {
  return rope_impl(EntryId::rope_forward, false, async, stream, ctx, X, cos_t, sin_t, desc);
}
tc_status rope_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer dX, tc_buffer cos_t,
                             tc_buffer sin_t, const tc_rope_desc* desc) {
  return rope_impl(EntryId::rope_backward, true, async, stream, ctx, dX, cos_t, sin_t, desc);
}

// ---- Gated activations (SwiGLU, GEGLU) and softmax

template <class Args>
tc_status gated_forward(EntryId id, tc_status (Backend::*op)(const Args&, Queue*), bool async, tc_stream stream,
                        tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n, tc_dtype dtype) {
  OpCall c(id, async, stream, {ctx, gate, up, out, n, dtype});
  if (tc_status st = c.validate()) return st;
  Args a;
  a.n = n, a.dtype = dtype;
  a.gate = c.data("gate"), a.up = c.data("up"), a.out = c.data("out");
  c.fill_info(&a.info);
  return c.run(op, a);
}

template <class Args>
tc_status gated_backward(EntryId id, tc_status (Backend::*op)(const Args&, Queue*), bool async, tc_stream stream,
                         tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate, tc_buffer dup,
                         int64_t n, tc_dtype dtype) {
  OpCall c(id, async, stream, {ctx, gate, up, dout, dgate, dup, n, dtype});
  if (tc_status st = c.validate()) return st;
  Args a;
  a.n = n, a.dtype = dtype;
  a.gate = c.data("gate"), a.up = c.data("up"), a.dout = c.data("dout");
  a.dgate = c.data("dgate"), a.dup = c.data("dup");
  c.fill_info(&a.info);
  return c.run(op, a);
}

tc_status swiglu_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer gate, tc_buffer up,
                              tc_buffer out, int64_t n, tc_dtype dtype) {
  return gated_forward(EntryId::swiglu_forward, &Backend::swiglu_forward, async, stream, ctx, gate, up, out, n, dtype);
}
tc_status swiglu_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer gate, tc_buffer up,
                               tc_buffer dout, tc_buffer dgate, tc_buffer dup, int64_t n, tc_dtype dtype) {
  return gated_backward(EntryId::swiglu_backward, &Backend::swiglu_backward, async, stream, ctx, gate, up, dout, dgate,
                        dup, n, dtype);
}
tc_status geglu_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer gate, tc_buffer up,
                             tc_buffer out, int64_t n, tc_dtype dtype) {
  return gated_forward(EntryId::geglu_forward, &Backend::geglu_forward, async, stream, ctx, gate, up, out, n, dtype);
}
tc_status geglu_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer gate, tc_buffer up,
                              tc_buffer dout, tc_buffer dgate, tc_buffer dup, int64_t n, tc_dtype dtype) {
  return gated_backward(EntryId::geglu_backward, &Backend::geglu_backward, async, stream, ctx, gate, up, dout, dgate,
                        dup, n, dtype);
}

tc_status softmax_forward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer Y, int64_t N,
                               int64_t D, tc_dtype dtype) {
  OpCall c(EntryId::softmax_forward, async, stream, {ctx, X, Y, N, D, dtype});
  if (tc_status st = c.validate()) return st;
  SoftmaxForwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.x = c.data("X"), a.y = c.data("Y");
  c.fill_info(&a.info);
  return c.run(&Backend::softmax_forward, a);
}

tc_status softmax_backward_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer Y, tc_buffer dY, tc_buffer dX,
                                int64_t N, int64_t D, tc_dtype dtype) {
  OpCall c(EntryId::softmax_backward, async, stream, {ctx, Y, dY, dX, N, D, dtype});
  if (tc_status st = c.validate()) return st;
  SoftmaxBackwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.y = c.data("Y"), a.dy = c.data("dY"), a.dx = c.data("dX");
  c.fill_info(&a.info);
  return c.run(&Backend::softmax_backward, a);
}

// ---- AdamW: params, m, v [n] f32; grads [n] in grad_dtype.

tc_status adamw_step_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer params, tc_buffer m, tc_buffer v,
                          tc_buffer grads, const tc_adamw_desc* desc) {
  OpCall c(EntryId::adamw_step, async, stream, {ctx, params, m, v, grads, desc});
  tc_adamw_desc d{};
  auto rule = [&]() -> tc_status {
    if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", c.fn());
    d = *desc;
    if (d.grad_dtype != TC_DTYPE_F16 && d.grad_dtype != TC_DTYPE_BF16 && d.grad_dtype != TC_DTYPE_F32)
      return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: grad_dtype %s is not supported (f16, bf16 or f32)", c.fn(),
                  dtype_label(d.grad_dtype).c_str());
    if (d.n < 1) return fail(TC_ERR_INVALID_SHAPE, "%s: n must be >= 1 (got %lld)", c.fn(), (long long)d.n);
    const std::string f32s = fmt("[n] = [%lld] f32", (long long)d.n);
    for (const char* name : {"params", "m", "v"})
      if (tc_status st = c.span(name, {d.n}, 4, f32s)) return st;
    return c.span("grads", {d.n}, esize(d.grad_dtype),
                  fmt("[n] = [%lld] %s", (long long)d.n, dtype_label(d.grad_dtype).c_str()));
  };
  if (tc_status st = c.validate(rule)) return st;
  struct Scalar {
    const char* name;
    double value;
    bool ok;
    const char* rule;
  };
  const Scalar scalars[] = {
      {"lr", d.lr, d.lr >= 0.0, ">= 0"},
      {"beta1", d.beta1, d.beta1 >= 0.0 && d.beta1 < 1.0, "in [0, 1)"},
      {"beta2", d.beta2, d.beta2 >= 0.0 && d.beta2 < 1.0, "in [0, 1)"},
      {"eps", d.eps, d.eps >= 0.0, ">= 0"},
      {"weight_decay", d.weight_decay, d.weight_decay >= 0.0, ">= 0"},
      {"bias_correction1", d.bias_correction1, d.bias_correction1 > 0.0 && d.bias_correction1 <= 1.0, "in (0, 1]"},
      {"bias_correction2", d.bias_correction2, d.bias_correction2 > 0.0 && d.bias_correction2 <= 1.0, "in (0, 1]"},
  };
  for (const Scalar& s : scalars)
    if (!s.ok || !std::isfinite(s.value))
      return fail(TC_ERR_INVALID_ARG, "%s: %s must be finite and %s (got %g)", c.fn(), s.name, s.rule, s.value);
  AdamwArgs a;
  a.d = d;
  a.params = c.ptr<float>("params"), a.m = c.ptr<float>("m"), a.v = c.ptr<float>("v"), a.grads = c.data("grads");
  c.fill_info(&a.info, "adamw_step",
              [&] { return fmt("n=%lld,grad_dtype=%s", (long long)d.n, dtype_label(d.grad_dtype).c_str()); });
  return c.run(&Backend::adamw_step, a);
}

// ---- Fused norm + GEMV

tc_status fused_rmsnorm_gemv_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma,
                                  tc_buffer W, tc_buffer Y, int64_t M, int64_t N, int64_t K, float eps,
                                  tc_dtype dtype) {
  OpCall c(EntryId::fused_rmsnorm_gemv, async, stream, {ctx, X, gamma, W, Y, M, N, K, eps, dtype});
  if (tc_status st = c.validate()) return st;
  FusedNormGemvArgs a;
  a.M = M, a.N = N, a.K = K, a.dtype = dtype, a.eps = eps, a.layernorm = false;
  a.x = c.data("X"), a.gamma = c.data("gamma"), a.w = c.data("W"), a.y = c.data("Y");
  c.fill_info(&a.info, "fused_rmsnorm_gemv");
  return c.run(&Backend::fused_norm_gemv, a);
}

tc_status fused_layernorm_gemv_impl(bool async, tc_stream stream, tc_context ctx, tc_buffer X, tc_buffer gamma,
                                    tc_buffer beta, tc_buffer W, tc_buffer Y, int64_t M, int64_t N, int64_t K,
                                    float eps, tc_dtype dtype) {
  OpCall c(EntryId::fused_layernorm_gemv, async, stream, {ctx, X, gamma, beta, W, Y, M, N, K, eps, dtype});
  if (tc_status st = c.validate()) return st;
  FusedNormGemvArgs a;
  a.M = M, a.N = N, a.K = K, a.dtype = dtype, a.eps = eps, a.layernorm = true;
  a.x = c.data("X"), a.gamma = c.data("gamma"), a.beta = c.data("beta"), a.w = c.data("W"), a.y = c.data("Y");
  c.fill_info(&a.info, "fused_layernorm_gemv");
  return c.run(&Backend::fused_norm_gemv, a);
}

}  // namespace

TC_DEFINE_ENTRY(rmsnorm_forward,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer Y, tc_buffer rstd_out, int64_t N, int64_t D,
                 float eps, tc_dtype dtype),
                ctx, X, gamma, Y, rstd_out, N, D, eps, dtype)
TC_DEFINE_ENTRY(rmsnorm_backward,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer rstd, tc_buffer dX,
                 tc_buffer dgamma, int64_t N, int64_t D, tc_dtype dtype),
                ctx, X, gamma, dY, rstd, dX, dgamma, N, D, dtype)
TC_DEFINE_ENTRY(layernorm_forward,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer Y, tc_buffer mean_out,
                 tc_buffer rstd_out, int64_t N, int64_t D, float eps, tc_dtype dtype),
                ctx, X, gamma, beta, Y, mean_out, rstd_out, N, D, eps, dtype)
TC_DEFINE_ENTRY(layernorm_backward,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer mean, tc_buffer rstd,
                 tc_buffer dX, tc_buffer dgamma, tc_buffer dbeta, int64_t N, int64_t D, tc_dtype dtype),
                ctx, X, gamma, dY, mean, rstd, dX, dgamma, dbeta, N, D, dtype)
TC_DEFINE_ENTRY(rope_forward, (tc_context ctx, tc_buffer X, tc_buffer cos_t, tc_buffer sin_t, const tc_rope_desc* desc),
                ctx, X, cos_t, sin_t, desc)
TC_DEFINE_ENTRY(rope_backward,
                (tc_context ctx, tc_buffer dX, tc_buffer cos_t, tc_buffer sin_t, const tc_rope_desc* desc), ctx, dX,
                cos_t, sin_t, desc)
TC_DEFINE_ENTRY(swiglu_forward, (tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n, tc_dtype dtype),
                ctx, gate, up, out, n, dtype)
TC_DEFINE_ENTRY(swiglu_backward,
                (tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate, tc_buffer dup,
                 int64_t n, tc_dtype dtype),
                ctx, gate, up, dout, dgate, dup, n, dtype)
TC_DEFINE_ENTRY(geglu_forward, (tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n, tc_dtype dtype),
                ctx, gate, up, out, n, dtype)
TC_DEFINE_ENTRY(geglu_backward,
                (tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate, tc_buffer dup,
                 int64_t n, tc_dtype dtype),
                ctx, gate, up, dout, dgate, dup, n, dtype)
TC_DEFINE_ENTRY(softmax_forward, (tc_context ctx, tc_buffer X, tc_buffer Y, int64_t N, int64_t D, tc_dtype dtype), ctx,
                X, Y, N, D, dtype)
TC_DEFINE_ENTRY(softmax_backward,
                (tc_context ctx, tc_buffer Y, tc_buffer dY, tc_buffer dX, int64_t N, int64_t D, tc_dtype dtype), ctx,
                Y, dY, dX, N, D, dtype)
TC_DEFINE_ENTRY(adamw_step,
                (tc_context ctx, tc_buffer params, tc_buffer m, tc_buffer v, tc_buffer grads,
                 const tc_adamw_desc* desc),
                ctx, params, m, v, grads, desc)
TC_DEFINE_ENTRY(fused_rmsnorm_gemv,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W, tc_buffer Y, int64_t M, int64_t N,
                 int64_t K, float eps, tc_dtype dtype),
                ctx, X, gamma, W, Y, M, N, K, eps, dtype)
TC_DEFINE_ENTRY(fused_layernorm_gemv,
                (tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer W, tc_buffer Y, int64_t M,
                 int64_t N, int64_t K, float eps, tc_dtype dtype),
                ctx, X, gamma, beta, W, Y, M, N, K, eps, dtype)
