// C entry points of the training kernels (tensorcore/training.h): argument
// validation, then the backend.
//
// Checks, in order: context and buffer handles (null, stale, foreign ->
// INVALID_ARG), dtype (UNSUPPORTED_DTYPE), dimensions (< 1 or a size that
// overflows 64 bits -> INVALID_SHAPE; odd head_dim too), buffer capacities
// (INVALID_ARG), memory overlap between an output and any other argument
// (INVALID_ARG unless the header allows that exact alias), then scalars
// (INVALID_ARG). Nothing is written unless every check passes.
#include "tensorcore/training.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "capi/api.h"
#include "core/half.h"

using namespace tc;
using namespace tc::capi;

namespace {

bool float_dtype(tc_dtype d) { return d == TC_DTYPE_F16 || d == TC_DTYPE_BF16 || d == TC_DTYPE_F32; }

// The tensor arguments of one call and the checks over them.
class Args {
 public:
  // Holds the caller's variables: handles() resolves them in place.
  Args(const char* fn, tc_context& ctx) : fn_(fn), ctx_(ctx) {}

  void input(const char* name, tc_buffer& b, bool optional = false) { list_.push_back({name, b, false, optional}); }
  void output(const char* name, tc_buffer& b, bool optional = false) { list_.push_back({name, b, true, optional}); }

  // Context, then every buffer: required ones non-null, all live and of ctx.
  tc_status handles() const {
    if (tc_status st = check_context(fn_, ctx_)) return st;
    for (const Arg& a : list_) {
      if (!a.buf && a.optional) continue;
      if (tc_status st = check_buffer(fn_, a.name, ctx_, a.buf)) return st;
    }
    return TC_OK;
  }

  tc_status dtype(const char* what, tc_dtype d) const {
    if (float_dtype(d)) return TC_OK;
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: %s %s is not supported (f16, bf16 or f32)", fn_, what,
                dtype_label(d).c_str());
  }

  // Every named dimension >= 1.
  tc_status dims(std::initializer_list<std::pair<const char*, int64_t>> dims) const {
    for (const auto& d : dims)
      if (d.second < 1)
        return fail(TC_ERR_INVALID_SHAPE, "%s: %s must be >= 1 (got %lld)", fn_, d.first, (long long)d.second);
    return TC_OK;
  }

  // Tensor `name` spans the product of `shape` elements of `elem` bytes; its
  // buffer (when given) must hold that many bytes. `desc` names the shape in
  // messages, e.g. "[N, D] = [3, 7]".
  tc_status size(const char* name, std::initializer_list<int64_t> shape, int64_t elem, const std::string& desc) {
    Arg& a = find(name);
    int64_t n = elem;
    for (int64_t d : shape)
      if (!mul_ok(n, d, &n))
        return fail(TC_ERR_INVALID_SHAPE, "%s: %s %s overflows 64 bits", fn_, name, desc.c_str());
    a.bytes = n;
    if (a.buf && uint64_t(n) > a.buf->size())
      return fail(TC_ERR_INVALID_ARG, "%s: %s %s needs %lld bytes but its buffer has %zu", fn_, name, desc.c_str(),
                  (long long)n, a.buf->size());
    return TC_OK;
  }

  // No output may share a byte with another argument, except the pairs
  // (output, other) in `exact`, which may be the very same range.
  tc_status overlaps(std::initializer_list<std::pair<const char*, const char*>> exact = {}) const {
    for (size_t i = 0; i < list_.size(); ++i) {
      const Arg& o = list_[i];
      if (!o.output || !o.buf || o.bytes == 0) continue;
      for (size_t j = 0; j < list_.size(); ++j) {
        const Arg& t = list_[j];
        if (j == i || !t.buf || t.bytes == 0) continue;
        if (t.output && j < i) continue;  // output pairs: report once
        const char *o0 = o.buf->bytes(), *t0 = t.buf->bytes();
        if (!(o0 < t0 + t.bytes && t0 < o0 + o.bytes)) continue;
        bool allowed = false;
        for (const auto& p : exact)
          if ((p.first == std::string(o.name) && p.second == std::string(t.name)) ||
              (t.output && p.first == std::string(t.name) && p.second == std::string(o.name)))
            allowed = true;
        if (allowed && o0 == t0 && o.bytes == t.bytes) continue;
        return fail(TC_ERR_INVALID_ARG, "%s: %s overlaps %s in memory%s", fn_, o.name, t.name,
                    allowed ? " (they may be the same memory, but not partly overlap)" : "");
      }
    }
    return TC_OK;
  }

  void* data(const char* name) {
    Arg& a = find(name);
    return a.buf ? a.buf->storage->data : nullptr;
  }

  void fill_info(OpInfo* info, const char* op, std::string shapes) const {
    info->name = op;
    info->shapes = std::move(shapes);
    for (const Arg& a : list_)
      if (a.buf) info->keep.push_back(a.buf->storage);
  }

 private:
  struct Arg {
    const char* name;
    tc_buffer& buf;
    bool output, optional;
    int64_t bytes = 0;
  };
  Arg& find(const char* name) {
    for (Arg& a : list_)
      if (std::string(a.name) == name) return a;
    throw std::logic_error(std::string("unknown argument ") + name);
  }

  const char* fn_;
  tc_context& ctx_;
  std::vector<Arg> list_;
};

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

int64_t esize(tc_dtype d) { return int64_t(dtype_size(d)); }

tc_status check_eps(const char* fn, float eps) {
  if (std::isfinite(eps) && eps >= 0.0f) return TC_OK;
  return fail(TC_ERR_INVALID_ARG, "%s: eps must be finite and >= 0 (got %g)", fn, double(eps));
}

Backend& backend(tc_context ctx) {
  note_backend(ctx->backend->kind());
  return *ctx->backend;
}

// ---- RMSNorm / LayerNorm

tc_status rmsnorm_forward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer Y, tc_buffer rstd, int64_t N,
                          int64_t D, float eps, tc_dtype dtype) {
  const char* fn = "tc_rmsnorm_forward";
  Args t(fn, ctx);
  t.input("X", X);
  t.input("gamma", gamma);
  t.output("Y", Y);
  t.output("rstd_out", rstd, true);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"N", N}, {"D", D}})) return st;
  const std::string nd = fmt("[N, D] = [%lld, %lld]", (long long)N, (long long)D);
  const int64_t es = esize(dtype);
  if (tc_status st = t.size("X", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("gamma", {D}, es, fmt("[D] = [%lld]", (long long)D))) return st;
  if (tc_status st = t.size("Y", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("rstd_out", {N}, 4, fmt("[N] = [%lld] f32", (long long)N))) return st;
  if (tc_status st = t.overlaps({{"Y", "X"}})) return st;
  if (tc_status st = check_eps(fn, eps)) return st;
  RmsNormForwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype, a.eps = eps;
  a.x = t.data("X"), a.gamma = t.data("gamma"), a.y = t.data("Y");
  a.rstd = static_cast<float*>(t.data("rstd_out"));
  t.fill_info(&a.info, "rmsnorm_forward", fmt("N=%lld,D=%lld,dtype=%s", (long long)N, (long long)D,
                                               dtype_label(dtype).c_str()));
  return backend(ctx).rmsnorm_forward(a, nullptr);
}

tc_status rmsnorm_backward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer rstd, tc_buffer dX,
                           tc_buffer dgamma, int64_t N, int64_t D, tc_dtype dtype) {
  const char* fn = "tc_rmsnorm_backward";
  Args t(fn, ctx);
  t.input("X", X);
  t.input("gamma", gamma);
  t.input("dY", dY);
  t.input("rstd", rstd);
  t.output("dX", dX);
  t.output("dgamma", dgamma, true);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"N", N}, {"D", D}})) return st;
  const std::string nd = fmt("[N, D] = [%lld, %lld]", (long long)N, (long long)D);
  const int64_t es = esize(dtype);
  if (tc_status st = t.size("X", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("gamma", {D}, es, fmt("[D] = [%lld]", (long long)D))) return st;
  if (tc_status st = t.size("dY", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("rstd", {N}, 4, fmt("[N] = [%lld] f32", (long long)N))) return st;
  if (tc_status st = t.size("dX", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("dgamma", {D}, 4, fmt("[D] = [%lld] f32", (long long)D))) return st;
  if (tc_status st = t.overlaps({{"dX", "X"}, {"dX", "dY"}})) return st;
  RmsNormBackwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.x = t.data("X"), a.gamma = t.data("gamma"), a.dy = t.data("dY");
  a.rstd = static_cast<const float*>(t.data("rstd"));
  a.dx = t.data("dX"), a.dgamma = static_cast<float*>(t.data("dgamma"));
  t.fill_info(&a.info, "rmsnorm_backward", fmt("N=%lld,D=%lld,dtype=%s", (long long)N, (long long)D,
                                                dtype_label(dtype).c_str()));
  return backend(ctx).rmsnorm_backward(a, nullptr);
}

tc_status layernorm_forward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer Y,
                            tc_buffer mean, tc_buffer rstd, int64_t N, int64_t D, float eps, tc_dtype dtype) {
  const char* fn = "tc_layernorm_forward";
  Args t(fn, ctx);
  t.input("X", X);
  t.input("gamma", gamma);
  t.input("beta", beta, true);
  t.output("Y", Y);
  t.output("mean_out", mean, true);
  t.output("rstd_out", rstd, true);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"N", N}, {"D", D}})) return st;
  const std::string nd = fmt("[N, D] = [%lld, %lld]", (long long)N, (long long)D);
  const std::string d1 = fmt("[D] = [%lld]", (long long)D), n1 = fmt("[N] = [%lld] f32", (long long)N);
  const int64_t es = esize(dtype);
  if (tc_status st = t.size("X", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("gamma", {D}, es, d1)) return st;
  if (tc_status st = t.size("beta", {D}, es, d1)) return st;
  if (tc_status st = t.size("Y", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("mean_out", {N}, 4, n1)) return st;
  if (tc_status st = t.size("rstd_out", {N}, 4, n1)) return st;
  if (tc_status st = t.overlaps({{"Y", "X"}})) return st;
  if (tc_status st = check_eps(fn, eps)) return st;
  LayerNormForwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype, a.eps = eps;
  a.x = t.data("X"), a.gamma = t.data("gamma"), a.beta = t.data("beta"), a.y = t.data("Y");
  a.mean = static_cast<float*>(t.data("mean_out"));
  a.rstd = static_cast<float*>(t.data("rstd_out"));
  t.fill_info(&a.info, "layernorm_forward", fmt("N=%lld,D=%lld,dtype=%s", (long long)N, (long long)D,
                                                 dtype_label(dtype).c_str()));
  return backend(ctx).layernorm_forward(a, nullptr);
}

tc_status layernorm_backward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer mean,
                             tc_buffer rstd, tc_buffer dX, tc_buffer dgamma, tc_buffer dbeta, int64_t N, int64_t D,
                             tc_dtype dtype) {
  const char* fn = "tc_layernorm_backward";
  Args t(fn, ctx);
  t.input("X", X);
  t.input("gamma", gamma);
  t.input("dY", dY);
  t.input("mean", mean);
  t.input("rstd", rstd);
  t.output("dX", dX);
  t.output("dgamma", dgamma, true);
  t.output("dbeta", dbeta, true);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"N", N}, {"D", D}})) return st;
  const std::string nd = fmt("[N, D] = [%lld, %lld]", (long long)N, (long long)D);
  const std::string n1 = fmt("[N] = [%lld] f32", (long long)N), d1 = fmt("[D] = [%lld] f32", (long long)D);
  const int64_t es = esize(dtype);
  if (tc_status st = t.size("X", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("gamma", {D}, es, fmt("[D] = [%lld]", (long long)D))) return st;
  if (tc_status st = t.size("dY", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("mean", {N}, 4, n1)) return st;
  if (tc_status st = t.size("rstd", {N}, 4, n1)) return st;
  if (tc_status st = t.size("dX", {N, D}, es, nd)) return st;
  if (tc_status st = t.size("dgamma", {D}, 4, d1)) return st;
  if (tc_status st = t.size("dbeta", {D}, 4, d1)) return st;
  if (tc_status st = t.overlaps({{"dX", "X"}, {"dX", "dY"}})) return st;
  LayerNormBackwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.x = t.data("X"), a.gamma = t.data("gamma"), a.dy = t.data("dY");
  a.mean = static_cast<const float*>(t.data("mean"));
  a.rstd = static_cast<const float*>(t.data("rstd"));
  a.dx = t.data("dX");
  a.dgamma = static_cast<float*>(t.data("dgamma"));
  a.dbeta = static_cast<float*>(t.data("dbeta"));
  t.fill_info(&a.info, "layernorm_backward", fmt("N=%lld,D=%lld,dtype=%s", (long long)N, (long long)D,
                                                  dtype_label(dtype).c_str()));
  return backend(ctx).layernorm_backward(a, nullptr);
}

// ---- RoPE

tc_status rope(const char* fn, const char* op, bool inverse, tc_context ctx, tc_buffer X, tc_buffer cos_t,
               tc_buffer sin_t, const tc_rope_desc* desc) {
  const char* xname = inverse ? "dX" : "X";
  Args t(fn, ctx);
  t.output(xname, X);
  t.input("cos_t", cos_t);
  t.input("sin_t", sin_t);
  if (tc_status st = t.handles()) return st;
  if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
  const tc_rope_desc d = *desc;
  if (tc_status st = t.dtype("dtype", d.dtype)) return st;
  if (tc_status st = t.dims({{"batch", d.batch}, {"heads", d.heads}, {"seq", d.seq}, {"head_dim", d.head_dim}}))
    return st;
  if (d.head_dim % 2 != 0)
    return fail(TC_ERR_INVALID_SHAPE, "%s: head_dim must be even (got %lld)", fn, (long long)d.head_dim);
  if (d.interleaved != 0 && d.interleaved != 1)
    return fail(TC_ERR_INVALID_ARG, "%s: interleaved must be 0 or 1 (got %d)", fn, d.interleaved);
  const std::string xs = fmt("[batch, heads, seq, head_dim] = [%lld, %lld, %lld, %lld]", (long long)d.batch,
                             (long long)d.heads, (long long)d.seq, (long long)d.head_dim);
  const std::string ts = fmt("[seq, head_dim / 2] = [%lld, %lld] f32", (long long)d.seq, (long long)d.head_dim / 2);
  if (tc_status st = t.size(xname, {d.batch, d.heads, d.seq, d.head_dim}, esize(d.dtype), xs)) return st;
  if (tc_status st = t.size("cos_t", {d.seq, d.head_dim / 2}, 4, ts)) return st;
  if (tc_status st = t.size("sin_t", {d.seq, d.head_dim / 2}, 4, ts)) return st;
  if (tc_status st = t.overlaps()) return st;
  RopeArgs a;
  a.d = d;
  a.inverse = inverse;
  a.x = t.data(xname);
  a.cos_t = static_cast<const float*>(t.data("cos_t"));
  a.sin_t = static_cast<const float*>(t.data("sin_t"));
  t.fill_info(&a.info, op, fmt("batch=%lld,heads=%lld,seq=%lld,head_dim=%lld,dtype=%s,interleaved=%d",
                               (long long)d.batch, (long long)d.heads, (long long)d.seq, (long long)d.head_dim,
                               dtype_label(d.dtype).c_str(), d.interleaved));
  return backend(ctx).rope(a, nullptr);
}

// ---- SwiGLU / softmax

tc_status swiglu_forward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n, tc_dtype dtype) {
  const char* fn = "tc_swiglu_forward";
  Args t(fn, ctx);
  t.input("gate", gate);
  t.input("up", up);
  t.output("out", out);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"n", n}})) return st;
  const std::string ns = fmt("[n] = [%lld]", (long long)n);
  for (const char* name : {"gate", "up", "out"})
    if (tc_status st = t.size(name, {n}, esize(dtype), ns)) return st;
  if (tc_status st = t.overlaps({{"out", "gate"}, {"out", "up"}})) return st;
  SwigluForwardArgs a;
  a.n = n, a.dtype = dtype;
  a.gate = t.data("gate"), a.up = t.data("up"), a.out = t.data("out");
  t.fill_info(&a.info, "swiglu_forward", fmt("n=%lld,dtype=%s", (long long)n, dtype_label(dtype).c_str()));
  return backend(ctx).swiglu_forward(a, nullptr);
}

tc_status swiglu_backward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate,
                          tc_buffer dup, int64_t n, tc_dtype dtype) {
  const char* fn = "tc_swiglu_backward";
  Args t(fn, ctx);
  t.input("gate", gate);
  t.input("up", up);
  t.input("dout", dout);
  t.output("dgate", dgate);
  t.output("dup", dup);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"n", n}})) return st;
  const std::string ns = fmt("[n] = [%lld]", (long long)n);
  for (const char* name : {"gate", "up", "dout", "dgate", "dup"})
    if (tc_status st = t.size(name, {n}, esize(dtype), ns)) return st;
  if (tc_status st = t.overlaps({{"dgate", "gate"}, {"dgate", "up"}, {"dgate", "dout"}, {"dup", "gate"},
                                 {"dup", "up"}, {"dup", "dout"}}))
    return st;
  SwigluBackwardArgs a;
  a.n = n, a.dtype = dtype;
  a.gate = t.data("gate"), a.up = t.data("up"), a.dout = t.data("dout");
  a.dgate = t.data("dgate"), a.dup = t.data("dup");
  t.fill_info(&a.info, "swiglu_backward", fmt("n=%lld,dtype=%s", (long long)n, dtype_label(dtype).c_str()));
  return backend(ctx).swiglu_backward(a, nullptr);
}

tc_status softmax_forward(tc_context ctx, tc_buffer X, tc_buffer Y, int64_t N, int64_t D, tc_dtype dtype) {
  const char* fn = "tc_softmax_forward";
  Args t(fn, ctx);
  t.input("X", X);
  t.output("Y", Y);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"N", N}, {"D", D}})) return st;
  const std::string nd = fmt("[N, D] = [%lld, %lld]", (long long)N, (long long)D);
  if (tc_status st = t.size("X", {N, D}, esize(dtype), nd)) return st;
  if (tc_status st = t.size("Y", {N, D}, esize(dtype), nd)) return st;
  if (tc_status st = t.overlaps({{"Y", "X"}})) return st;
  SoftmaxForwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.x = t.data("X"), a.y = t.data("Y");
  t.fill_info(&a.info, "softmax_forward", fmt("N=%lld,D=%lld,dtype=%s", (long long)N, (long long)D,
                                               dtype_label(dtype).c_str()));
  return backend(ctx).softmax_forward(a, nullptr);
}

tc_status softmax_backward(tc_context ctx, tc_buffer Y, tc_buffer dY, tc_buffer dX, int64_t N, int64_t D,
                           tc_dtype dtype) {
  const char* fn = "tc_softmax_backward";
  Args t(fn, ctx);
  t.input("Y", Y);
  t.input("dY", dY);
  t.output("dX", dX);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"N", N}, {"D", D}})) return st;
  const std::string nd = fmt("[N, D] = [%lld, %lld]", (long long)N, (long long)D);
  for (const char* name : {"Y", "dY", "dX"})
    if (tc_status st = t.size(name, {N, D}, esize(dtype), nd)) return st;
  if (tc_status st = t.overlaps({{"dX", "Y"}, {"dX", "dY"}})) return st;
  SoftmaxBackwardArgs a;
  a.N = N, a.D = D, a.dtype = dtype;
  a.y = t.data("Y"), a.dy = t.data("dY"), a.dx = t.data("dX");
  t.fill_info(&a.info, "softmax_backward", fmt("N=%lld,D=%lld,dtype=%s", (long long)N, (long long)D,
                                                dtype_label(dtype).c_str()));
  return backend(ctx).softmax_backward(a, nullptr);
}

// ---- AdamW

tc_status adamw_step(tc_context ctx, tc_buffer params, tc_buffer m, tc_buffer v, tc_buffer grads,
                     const tc_adamw_desc* desc) {
  const char* fn = "tc_adamw_step";
  Args t(fn, ctx);
  t.output("params", params);
  t.output("m", m);
  t.output("v", v);
  t.input("grads", grads);
  if (tc_status st = t.handles()) return st;
  if (!desc) return fail(TC_ERR_INVALID_ARG, "%s: desc is null", fn);
  const tc_adamw_desc d = *desc;
  if (tc_status st = t.dtype("grad_dtype", d.grad_dtype)) return st;
  if (tc_status st = t.dims({{"n", d.n}})) return st;
  const std::string f32s = fmt("[n] = [%lld] f32", (long long)d.n);
  for (const char* name : {"params", "m", "v"})
    if (tc_status st = t.size(name, {d.n}, 4, f32s)) return st;
  if (tc_status st = t.size("grads", {d.n}, esize(d.grad_dtype),
                            fmt("[n] = [%lld] %s", (long long)d.n, dtype_label(d.grad_dtype).c_str())))
    return st;
  if (tc_status st = t.overlaps()) return st;
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
      return fail(TC_ERR_INVALID_ARG, "%s: %s must be finite and %s (got %g)", fn, s.name, s.rule, s.value);
  AdamwArgs a;
  a.d = d;
  a.params = static_cast<float*>(t.data("params"));
  a.m = static_cast<float*>(t.data("m"));
  a.v = static_cast<float*>(t.data("v"));
  a.grads = t.data("grads");
  t.fill_info(&a.info, "adamw_step", fmt("n=%lld,grad_dtype=%s", (long long)d.n, dtype_label(d.grad_dtype).c_str()));
  return backend(ctx).adamw_step(a, nullptr);
}

// ---- Fused norm + GEMV

tc_status fused_norm_gemv(const char* fn, const char* op, bool layernorm, tc_context ctx, tc_buffer X,
                          tc_buffer gamma, tc_buffer beta, tc_buffer W, tc_buffer Y, int64_t M, int64_t N, int64_t K,
                          float eps, tc_dtype dtype) {
  Args t(fn, ctx);
  t.input("X", X);
  t.input("gamma", gamma);
  if (layernorm) t.input("beta", beta, true);
  t.input("W", W);
  t.output("Y", Y);
  if (tc_status st = t.handles()) return st;
  if (tc_status st = t.dtype("dtype", dtype)) return st;
  if (tc_status st = t.dims({{"M", M}, {"N", N}, {"K", K}})) return st;
  const int64_t es = esize(dtype);
  const std::string k1 = fmt("[K] = [%lld]", (long long)K);
  if (tc_status st = t.size("X", {M, K}, es, fmt("[M, K] = [%lld, %lld]", (long long)M, (long long)K))) return st;
  if (tc_status st = t.size("gamma", {K}, es, k1)) return st;
  if (layernorm)
    if (tc_status st = t.size("beta", {K}, es, k1)) return st;
  if (tc_status st = t.size("W", {N, K}, es, fmt("[N, K] = [%lld, %lld]", (long long)N, (long long)K))) return st;
  if (tc_status st = t.size("Y", {M, N}, es, fmt("[M, N] = [%lld, %lld]", (long long)M, (long long)N))) return st;
  if (tc_status st = t.overlaps()) return st;
  if (tc_status st = check_eps(fn, eps)) return st;
  FusedNormGemvArgs a;
  a.M = M, a.N = N, a.K = K, a.dtype = dtype, a.eps = eps, a.layernorm = layernorm;
  a.x = t.data("X"), a.gamma = t.data("gamma"), a.w = t.data("W"), a.y = t.data("Y");
  a.beta = layernorm ? t.data("beta") : nullptr;
  t.fill_info(&a.info, op, fmt("M=%lld,N=%lld,K=%lld,dtype=%s", (long long)M, (long long)N, (long long)K,
                               dtype_label(dtype).c_str()));
  return backend(ctx).fused_norm_gemv(a, nullptr);
}

}  // namespace

extern "C" {

tc_status tc_rmsnorm_forward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer Y, tc_buffer rstd_out, int64_t N,
                             int64_t D, float eps, tc_dtype dtype) {
  return guarded("tc_rmsnorm_forward", [&] { return rmsnorm_forward(ctx, X, gamma, Y, rstd_out, N, D, eps, dtype); });
}

tc_status tc_rmsnorm_backward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer rstd,
                              tc_buffer dX, tc_buffer dgamma, int64_t N, int64_t D, tc_dtype dtype) {
  return guarded("tc_rmsnorm_backward",
                 [&] { return rmsnorm_backward(ctx, X, gamma, dY, rstd, dX, dgamma, N, D, dtype); });
}

tc_status tc_layernorm_forward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer Y,
                               tc_buffer mean_out, tc_buffer rstd_out, int64_t N, int64_t D, float eps,
                               tc_dtype dtype) {
  return guarded("tc_layernorm_forward", [&] {
    return layernorm_forward(ctx, X, gamma, beta, Y, mean_out, rstd_out, N, D, eps, dtype);
  });
}

tc_status tc_layernorm_backward(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer dY, tc_buffer mean,
                                tc_buffer rstd, tc_buffer dX, tc_buffer dgamma, tc_buffer dbeta, int64_t N, int64_t D,
                                tc_dtype dtype) {
  return guarded("tc_layernorm_backward", [&] {
    return layernorm_backward(ctx, X, gamma, dY, mean, rstd, dX, dgamma, dbeta, N, D, dtype);
  });
}

tc_status tc_rope_forward(tc_context ctx, tc_buffer X, tc_buffer cos_t, tc_buffer sin_t, const tc_rope_desc* desc) {
  return guarded("tc_rope_forward",
                 [&] { return rope("tc_rope_forward", "rope_forward", false, ctx, X, cos_t, sin_t, desc); });
}

tc_status tc_rope_backward(tc_context ctx, tc_buffer dX, tc_buffer cos_t, tc_buffer sin_t, const tc_rope_desc* desc) {
  return guarded("tc_rope_backward",
                 [&] { return rope("tc_rope_backward", "rope_backward", true, ctx, dX, cos_t, sin_t, desc); });
}

tc_status tc_swiglu_forward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer out, int64_t n, tc_dtype dtype) {
  return guarded("tc_swiglu_forward", [&] { return swiglu_forward(ctx, gate, up, out, n, dtype); });
}

tc_status tc_swiglu_backward(tc_context ctx, tc_buffer gate, tc_buffer up, tc_buffer dout, tc_buffer dgate,
                             tc_buffer dup, int64_t n, tc_dtype dtype) {
  return guarded("tc_swiglu_backward", [&] { return swiglu_backward(ctx, gate, up, dout, dgate, dup, n, dtype); });
}

tc_status tc_softmax_forward(tc_context ctx, tc_buffer X, tc_buffer Y, int64_t N, int64_t D, tc_dtype dtype) {
  return guarded("tc_softmax_forward", [&] { return softmax_forward(ctx, X, Y, N, D, dtype); });
}

tc_status tc_softmax_backward(tc_context ctx, tc_buffer Y, tc_buffer dY, tc_buffer dX, int64_t N, int64_t D,
                              tc_dtype dtype) {
  return guarded("tc_softmax_backward", [&] { return softmax_backward(ctx, Y, dY, dX, N, D, dtype); });
}

tc_status tc_adamw_step(tc_context ctx, tc_buffer params, tc_buffer m, tc_buffer v, tc_buffer grads,
                        const tc_adamw_desc* desc) {
  return guarded("tc_adamw_step", [&] { return adamw_step(ctx, params, m, v, grads, desc); });
}

tc_status tc_fused_rmsnorm_gemv(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer W, tc_buffer Y, int64_t M,
                                int64_t N, int64_t K, float eps, tc_dtype dtype) {
  return guarded("tc_fused_rmsnorm_gemv", [&] {
    return fused_norm_gemv("tc_fused_rmsnorm_gemv", "fused_rmsnorm_gemv", false, ctx, X, gamma, nullptr, W, Y, M, N,
                           K, eps, dtype);
  });
}

tc_status tc_fused_layernorm_gemv(tc_context ctx, tc_buffer X, tc_buffer gamma, tc_buffer beta, tc_buffer W,
                                  tc_buffer Y, int64_t M, int64_t N, int64_t K, float eps, tc_dtype dtype) {
  return guarded("tc_fused_layernorm_gemv", [&] {
    return fused_norm_gemv("tc_fused_layernorm_gemv", "fused_layernorm_gemv", true, ctx, X, gamma, beta, W, Y, M, N,
                           K, eps, dtype);
  });
}

}  // extern "C"
