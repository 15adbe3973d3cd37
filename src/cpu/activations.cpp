// SwiGLU and softmax, forward and backward, on the CPU.
//
// SwiGLU, elementwise over n:
//   s = sigmoid(g) = 1 / (1 + exp(-g)),   silu(g) = g s
//   out   = silu(g) * u
//   dgate = dout * u * silu'(g),  silu'(g) = s + g s (1 - s) = s (1 + g (1 - s))
//   dup   = dout * silu(g)
// GEGLU (tanh form of GELU), elementwise over n:
//   z = c (g + 0.044715 g^3),  c = sqrt(2 / pi),  t = tanh(z)
//   gelu(g) = 0.5 g (1 + t),   out = gelu(g) * u
//   gelu'(g) = 0.5 (1 + t) + 0.5 g (1 - t^2) c (1 + 3 * 0.044715 g^2)
//            = 0.5 (1 + t) (1 + g (1 - t) c (1 + 3 * 0.044715 g^2))
//   dgate = dout * u * gelu'(g),   dup = dout * gelu(g)
// Softmax over the last dimension D of N rows, shifted by the row maximum so
// exp never overflows:
//   y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
//   backward: dx_j = y_j (dy_j - sum_k dy_k y_k)   (the Jacobian is diag(y) - y y^T)
// exp is a vector polynomial (cpu/simd.h, ~1 ulp).
//
// Memory: SwiGLU reads gate and up and writes out (backward: reads three,
// writes two), once each. Softmax reads X once and writes Y once: pass 1 finds
// the maximum, pass 2 writes exp(x - m) into the row of Y (in cache) and sums
// it, pass 3 scales that row in place, while the next row is prefetched. For
// f16/bf16 outputs exp(x - m) is thus rounded to the output type before the
// scaling: two roundings, at most one unit in the last place instead of half,
// for a row that stays in L1 (an f32 scratch row did not fit beside it). The
// backward pass reads Y and dY (twice, the second time from cache) and writes
// dX.
#ifndef TC_SIMD_PASS

#include <algorithm>
#include <limits>

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

// The gated activations: elementwise over n, in chunks on the pool.
#define TC_GATED_OP(op, Args, range)                                                    \
  tc_status op(const Args& a) {                                                         \
    simd::with_float_type(a.dtype, [&](auto t) {                                        \
      using T = decltype(t);                                                            \
      auto kernel = TC_SIMD_PICK(range<T>);                                             \
      parallel_for(a.n, kElemGrain, [&](int64_t i0, int64_t i1) { kernel(a, i0, i1); }); \
    });                                                                                 \
    return TC_OK;                                                                       \
  }
TC_GATED_OP(swiglu_forward, SwigluForwardArgs, swiglu_forward_range)
TC_GATED_OP(swiglu_backward, SwigluBackwardArgs, swiglu_backward_range)
TC_GATED_OP(geglu_forward, GegluForwardArgs, geglu_forward_range)
TC_GATED_OP(geglu_backward, GegluBackwardArgs, geglu_backward_range)

void glu_row(bool gelu, const float* g, const float* u, float* out, int64_t n) {
  SwigluForwardArgs a;
  a.n = n, a.dtype = TC_DTYPE_F32, a.gate = g, a.up = u, a.out = out;
  if (gelu) TC_SIMD_PICK(geglu_forward_range<float>)(a, 0, n);
  else TC_SIMD_PICK(swiglu_forward_range<float>)(a, 0, n);
}
#undef TC_GATED_OP

tc_status softmax_forward(const SoftmaxForwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = TC_SIMD_PICK(softmax_forward_rows<T>);
    parallel_for(a.N, row_grain(a.D), [&](int64_t r0, int64_t r1) { kernel(a, r0, r1); });
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

// 1 / (1 + exp(-g)), with exp's argument capped at 87 so the denominator
// stays finite for the reciprocal (sigmoid(g < -87) < 2e-38 comes out as that
// bound, an absolute error below 2e-38).
inline V sigmoid(V g) {
  return V::rcp(V::set1(1.0f) + V::exp(V::min(V::set1(87.0f), V::zero() - g)));
}

template <class T>
void swiglu_forward_range(const SwigluForwardArgs& a, int64_t i0, int64_t i1) {
  const T* gate = static_cast<const T*>(a.gate) + i0;
  const T* up = static_cast<const T*>(a.up) + i0;
  T* out = static_cast<T*>(a.out) + i0;
  sweep(i1 - i0, [&](int64_t i, int n) {
    V g = V::ld(gate + i, n), u = V::ld(up + i, n);
    V::st(out + i, g * sigmoid(g) * u, n);
  });
}

template <class T>
void swiglu_backward_range(const SwigluBackwardArgs& a, int64_t i0, int64_t i1) {
  const T* gate = static_cast<const T*>(a.gate) + i0;
  const T* up = static_cast<const T*>(a.up) + i0;
  const T* dout = static_cast<const T*>(a.dout) + i0;
  T* dgate = static_cast<T*>(a.dgate) + i0;
  T* dup = static_cast<T*>(a.dup) + i0;
  const V one = V::set1(1.0f);
  // Everything is loaded before anything is stored, so an output may be the
  // same memory as an input.
  sweep(i1 - i0, [&](int64_t i, int n) {
    V g = V::ld(gate + i, n), u = V::ld(up + i, n), d = V::ld(dout + i, n);
    V s = sigmoid(g);
    V silu = g * s;
    V dsilu = s * V::fma(g, one - s, one);
    V::st(dgate + i, d * u * dsilu, n);
    V::st(dup + i, d * silu, n);
  });
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

// 1 + t and 1 - t for t = tanh(z), z = c (g + a g^3), as 2 e / (e + 1) and
// 2 / (e + 1) with e = exp(2z): no cancellation where t is near -1 or 1
// (1 + tanh computed as such loses every digit for g below about -4).
// exp's argument is capped at 87 (t is 1 to float precision long before).
inline void gelu_tanh_parts(V g, V* one_plus_t, V* one_minus_t) {
  const V z = V::set1(kGeluC) * V::fma(V::set1(kGeluA) * g, g * g, g);
  const V e = V::exp(V::min(V::set1(87.0f), z + z));
  const V r2 = V::set1(2.0f) * V::rcp(e + V::set1(1.0f));
  *one_minus_t = r2;
  *one_plus_t = e * r2;
}

template <class T>
void geglu_forward_range(const GegluForwardArgs& a, int64_t i0, int64_t i1) {
  const T* gate = static_cast<const T*>(a.gate) + i0;
  const T* up = static_cast<const T*>(a.up) + i0;
  T* out = static_cast<T*>(a.out) + i0;
  const V half = V::set1(0.5f);
  sweep(i1 - i0, [&](int64_t i, int n) {
    V g = V::ld(gate + i, n), u = V::ld(up + i, n), p, m;
    gelu_tanh_parts(g, &p, &m);
    V::st(out + i, half * g * p * u, n);
  });
}

template <class T>
void geglu_backward_range(const GegluBackwardArgs& a, int64_t i0, int64_t i1) {
  const T* gate = static_cast<const T*>(a.gate) + i0;
  const T* up = static_cast<const T*>(a.up) + i0;
  const T* dout = static_cast<const T*>(a.dout) + i0;
  T* dgate = static_cast<T*>(a.dgate) + i0;
  T* dup = static_cast<T*>(a.dup) + i0;
  const V half = V::set1(0.5f), one = V::set1(1.0f), c = V::set1(kGeluC), a3 = V::set1(3.0f * kGeluA);
  // Loads before stores: an output may be the same memory as an input.
  sweep(i1 - i0, [&](int64_t i, int n) {
    V g = V::ld(gate + i, n), u = V::ld(up + i, n), d = V::ld(dout + i, n), p, m;
    gelu_tanh_parts(g, &p, &m);
    V gelu = half * g * p;
    V dgelu = half * p * (one + g * m * c * V::fma(a3, g * g, one));
    V::st(dgate + i, d * u * dgelu, n);
    V::st(dup + i, d * gelu, n);
  });
}

template <class T>
void softmax_forward_rows(const SoftmaxForwardArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.D;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    T* y = static_cast<T*>(a.y) + r * D;
    V mx[4] = {V::set1(ninf), V::set1(ninf), V::set1(ninf), V::set1(ninf)};
    sweep4(D, [&](int u, int64_t k, int n) { mx[u] = V::max(mx[u], V::tail(V::ld(x + k, n), n, ninf)); });
    const V m = V::set1(V::hmax(V::max(V::max(mx[0], mx[1]), V::max(mx[2], mx[3]))));
    V sum[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    const bool more = r + 1 < r1;
    sweep4(D, [&](int u, int64_t k, int n) {
      // The exp pass is compute-bound: overlap it with the next row's reads.
      if (u == 0 && more) simd::prefetch(x + D + k, 4 * V::W * sizeof(T));
      V e = V::tail(V::exp(V::ld(x + k, n) - m), n, 0.0f);
      sum[u] = sum[u] + e;
      V::st(y + k, e, n);  // Y doubles as the scratch row (x is read already)
    });
    const V inv = V::set1(1.0f / V::sum((sum[0] + sum[1]) + (sum[2] + sum[3])));
    sweep(D, [&](int64_t k, int n) { V::st(y + k, V::ld(y + k, n) * inv, n); });
  }
}

template <class T>
void softmax_backward_rows(const SoftmaxBackwardArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.D;
  for (int64_t r = r0; r < r1; ++r) {
    const T* y = static_cast<const T*>(a.y) + r * D;
    const T* dy = static_cast<const T*>(a.dy) + r * D;
    T* dx = static_cast<T*>(a.dx) + r * D;
    V dot[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(D, [&](int u, int64_t k, int n) { dot[u] = V::fma(V::ld(y + k, n), V::ld(dy + k, n), dot[u]); });
    const V s = V::set1(V::sum((dot[0] + dot[1]) + (dot[2] + dot[3])));
    sweep(D, [&](int64_t k, int n) { V::st(dx + k, V::ld(y + k, n) * (V::ld(dy + k, n) - s), n); });
  }
}

#endif  // TC_SIMD_PASS
