// SwiGLU and softmax, forward and backward, on the CPU.
//
// SwiGLU, elementwise over n:
//   s = sigmoid(g) = 1 / (1 + exp(-g)),   silu(g) = g s
//   out   = silu(g) * u
//   dgate = dout * u * silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
//   dup   = dout * silu(g)
// Softmax over the last dimension D of N rows, shifted by the row maximum so
// exp never overflows:
//   y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
//   backward: dx_j = y_j (dy_j - sum_k dy_k y_k)   (the Jacobian is diag(y) - y y^T)
// exp is a vector polynomial (cpu/simd.h, ~1 ulp).
//
// Memory: SwiGLU reads gate and up and writes out (backward: reads three,
// writes two), once each. Softmax reads X once and writes Y once: pass 1 finds
// the maximum, pass 2 writes exp(x - m) into an f32 row scratch (cache) and
// sums it, pass 3 scales the scratch into Y; the backward pass reads Y and dY
// (twice, the second time from cache) and writes dX.
#ifndef TC_SIMD_PASS

#include <algorithm>
#include <limits>
#include <vector>

#include "core/backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#define TC_SIMD_SELF "cpu/activations.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {
namespace {

constexpr int64_t kElemGrain = 16384;  // elements per parallel chunk, at least

int64_t row_grain(int64_t D) { return std::max<int64_t>(1, 32768 / D); }

}  // namespace

tc_status swiglu_forward(const SwigluForwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = TC_SIMD_PICK(swiglu_forward_range<T>);
    parallel_for(a.n, kElemGrain, [&](int64_t i0, int64_t i1) { kernel(a, i0, i1); });
  });
  return TC_OK;
}

tc_status swiglu_backward(const SwigluBackwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = TC_SIMD_PICK(swiglu_backward_range<T>);
    parallel_for(a.n, kElemGrain, [&](int64_t i0, int64_t i1) { kernel(a, i0, i1); });
  });
  return TC_OK;
}

tc_status softmax_forward(const SoftmaxForwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = TC_SIMD_PICK(softmax_forward_rows<T>);
    parallel_for(a.N, row_grain(a.D), [&](int64_t r0, int64_t r1) {
      std::vector<float> scratch(size_t(a.D));
      kernel(a, r0, r1, scratch.data());
    });
  });
  return TC_OK;
}

tc_status softmax_backward(const SoftmaxBackwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = TC_SIMD_PICK(softmax_backward_rows<T>);
    parallel_for(a.N, row_grain(a.D), [&](int64_t r0, int64_t r1) { kernel(a, r0, r1); });
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernels, compiled once per instruction set (V).

inline V sigmoid(V g) { return V::set1(1.0f) / (V::set1(1.0f) + V::exp(V::zero() - g)); }

template <class T>
void swiglu_forward_range(const SwigluForwardArgs& a, int64_t i0, int64_t i1) {
  const T* gate = static_cast<const T*>(a.gate);
  const T* up = static_cast<const T*>(a.up);
  T* out = static_cast<T*>(a.out);
  auto f = [&](int64_t i, int n) {
    V g = V::ld(gate + i, n), u = V::ld(up + i, n);
    V::st(out + i, g * sigmoid(g) * u, n);
  };
  int64_t i = i0;
  for (; i + V::W <= i1; i += V::W) f(i, V::W);
  if (i < i1) f(i, int(i1 - i));
}

template <class T>
void swiglu_backward_range(const SwigluBackwardArgs& a, int64_t i0, int64_t i1) {
  const T* gate = static_cast<const T*>(a.gate);
  const T* up = static_cast<const T*>(a.up);
  const T* dout = static_cast<const T*>(a.dout);
  T* dgate = static_cast<T*>(a.dgate);
  T* dup = static_cast<T*>(a.dup);
  const V one = V::set1(1.0f);
  // Everything is loaded before anything is stored, so an output may be the
  // same memory as an input.
  auto f = [&](int64_t i, int n) {
    V g = V::ld(gate + i, n), u = V::ld(up + i, n), d = V::ld(dout + i, n);
    V s = sigmoid(g);
    V silu = g * s;
    V dsilu = s * V::fma(g, one - s, one);
    V::st(dgate + i, d * u * dsilu, n);
    V::st(dup + i, d * silu, n);
  };
  int64_t i = i0;
  for (; i + V::W <= i1; i += V::W) f(i, V::W);
  if (i < i1) f(i, int(i1 - i));
}

// scratch: D floats.
template <class T>
void softmax_forward_rows(const SoftmaxForwardArgs& a, int64_t r0, int64_t r1, float* scratch) {
  const int64_t D = a.D;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    T* y = static_cast<T*>(a.y) + r * D;
    V mx = V::set1(ninf);
    auto pmax = [&](int64_t k, int n) { mx = V::max(mx, V::tail(V::ld(x + k, n), n, ninf)); };
    int64_t k = 0;
    for (; k + V::W <= D; k += V::W) pmax(k, V::W);
    if (k < D) pmax(k, int(D - k));
    const V m = V::set1(V::hmax(mx));
    V sum = V::zero();
    auto pexp = [&](int64_t k, int n) {
      V e = V::tail(V::exp(V::ld(x + k, n) - m), n, 0.0f);
      sum = sum + e;
      V::st(scratch + k, e, n);
    };
    for (k = 0; k + V::W <= D; k += V::W) pexp(k, V::W);
    if (k < D) pexp(k, int(D - k));
    const V inv = V::set1(1.0f / V::sum(sum));
    auto pscale = [&](int64_t k, int n) { V::st(y + k, V::ld(scratch + k, n) * inv, n); };
    for (k = 0; k + V::W <= D; k += V::W) pscale(k, V::W);
    if (k < D) pscale(k, int(D - k));
  }
}

template <class T>
void softmax_backward_rows(const SoftmaxBackwardArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.D;
  for (int64_t r = r0; r < r1; ++r) {
    const T* y = static_cast<const T*>(a.y) + r * D;
    const T* dy = static_cast<const T*>(a.dy) + r * D;
    T* dx = static_cast<T*>(a.dx) + r * D;
    V dot = V::zero();
    auto pdot = [&](int64_t k, int n) { dot = V::fma(V::ld(y + k, n), V::ld(dy + k, n), dot); };
    int64_t k = 0;
    for (; k + V::W <= D; k += V::W) pdot(k, V::W);
    if (k < D) pdot(k, int(D - k));
    const V s = V::set1(V::sum(dot));
    auto pgrad = [&](int64_t k, int n) {
      V yv = V::ld(y + k, n);
      V::st(dx + k, yv * (V::ld(dy + k, n) - s), n);
    };
    for (k = 0; k + V::W <= D; k += V::W) pgrad(k, V::W);
    if (k < D) pgrad(k, int(D - k));
  }
}

#endif  // TC_SIMD_PASS
