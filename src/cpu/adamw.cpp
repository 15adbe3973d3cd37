// One AdamW step (Loshchilov & Hutter, decoupled weight decay) on the CPU.
//
//   m = b1 m + (1 - b1) g
//   v = b2 v + (1 - b2) g^2
//   p = p - lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + wd * p )
//
// with bc1 = 1 - b1^t and bc2 = 1 - b2^t supplied by the caller (so the step
// count lives with the optimizer, not here). p, m, v are f32; g is f32, f16
// or bf16 and widened in registers. The division by the bias corrections is
// a multiplication by their reciprocals. Elementwise: one read of p, m, v, g
// and one write of p, m, v, in parallel chunks.
#ifndef TC_SIMD_PASS

#include "core/backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#define TC_SIMD_SELF "cpu/adamw.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {

tc_status adamw_step(const AdamwArgs& a) {
  simd::with_float_type(a.d.grad_dtype, [&](auto t) {
    using T = decltype(t);
    auto kernel = TC_SIMD_PICK(adamw_range<T>);
    parallel_for(a.d.n, 16384, [&](int64_t i0, int64_t i1) { kernel(a, i0, i1); });
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernel, compiled once per instruction set (V).

template <class T>
void adamw_range(const AdamwArgs& a, int64_t i0, int64_t i1) {
  const tc_adamw_desc& d = a.d;
  const T* grads = static_cast<const T*>(a.grads);
  const V b1 = V::set1(float(d.beta1)), c1 = V::set1(float(1.0 - d.beta1));
  const V b2 = V::set1(float(d.beta2)), c2 = V::set1(float(1.0 - d.beta2));
  const V inv_bc1 = V::set1(float(1.0 / d.bias_correction1));
  const V inv_bc2 = V::set1(float(1.0 / d.bias_correction2));
  const V eps = V::set1(float(d.eps)), wd = V::set1(float(d.weight_decay)), lr = V::set1(float(d.lr));
  sweep(i1 - i0, [&](int64_t j, int n) {
    const int64_t i = i0 + j;
    V g = V::ld(grads + i, n);
    V p = V::ld(a.params + i, n);
    V m = V::fma(b1, V::ld(a.m + i, n), c1 * g);
    V v = V::fma(b2, V::ld(a.v + i, n), c2 * g * g);
    V update = V::fma(wd, p, (m * inv_bc1) / (V::sqrt(v * inv_bc2) + eps));
    V::st(a.m + i, m, n);
    V::st(a.v + i, v, n);
    V::st(a.params + i, p - lr * update, n);
  });
}

#endif  // TC_SIMD_PASS
