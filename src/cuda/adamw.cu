// One AdamW step (decoupled weight decay) on the GPU. The maths (as the CPU
// kernel, src/cpu/adamw.cpp, with the same f32 operations in the same order):
//
//   m = b1 m + (1 - b1) g
//   v = b2 v + (1 - b2) g^2
//   p = p - lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + wd * p )
//
// bc1 = 1 - b1^t and bc2 = 1 - b2^t come from the caller; dividing by them is
// multiplying by their reciprocals. p, m, v are f32, g is f32, f16 or bf16.
// Memory: elementwise, one read of p, m, v, g and one write of p, m, v, in a
// grid-stride loop over groups of 4 elements (16-byte accesses of p, m, v),
// then the tail element by element.
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/rows.cuh"

namespace tc {
namespace cuda {
namespace {

constexpr int kThreads = 256;

struct AdamwConsts {
  float b1, c1, b2, c2, inv_bc1, inv_bc2, eps, wd, lr;
};

__device__ __forceinline__ void adamw_one(const AdamwConsts& k, float g, float& p, float& m, float& v) {
  // Explicit roundings (__f*_rn) keep the compiler from fusing what the CPU
  // rounds separately.
  m = fmaf(k.b1, m, __fmul_rn(k.c1, g));
  v = fmaf(k.b2, v, __fmul_rn(__fmul_rn(k.c2, g), g));
  const float update =
      fmaf(k.wd, p, __fdiv_rn(__fmul_rn(m, k.inv_bc1), __fadd_rn(__fsqrt_rn(__fmul_rn(v, k.inv_bc2)), k.eps)));
  p = __fsub_rn(p, __fmul_rn(k.lr, update));
}

// Vec: groups of 4 with 16-byte accesses (p, m, v 16-byte aligned, grads
// aligned to 4 elements); else one element at a time.
template <class T, bool Vec>
__global__ void __launch_bounds__(kThreads)
    adamw_k(float* params, float* m, float* v, const T* grads, int64_t n, AdamwConsts k) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if constexpr (Vec) {
    const int64_t groups = n / 4;
    for (int64_t i = t; i < groups; i += stride) {
      Pack<float, 4> p = load<float, 4>(params + 4 * i), mm = load<float, 4>(m + 4 * i),
                     vv = load<float, 4>(v + 4 * i);
      const Pack<T, 4> g = load<T, 4>(grads + 4 * i);
#pragma unroll
      for (int e = 0; e < 4; ++e) adamw_one(k, g.f(e), p.v[e], mm.v[e], vv.v[e]);
      store(m + 4 * i, mm);
      store(v + 4 * i, vv);
      store(params + 4 * i, p);
    }
    done = groups * 4;
  }
  for (int64_t i = done + t; i < n; i += stride) {
    float p = params[i], mm = m[i], vv = v[i];
    adamw_one(k, to_f(grads[i]), p, mm, vv);
    m[i] = mm;
    v[i] = vv;
    params[i] = p;
  }
}

bool aligned_to(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

}  // namespace

tc_status adamw_step(Device&, StreamState* s, const AdamwArgs& a) {
  const tc_adamw_desc& d = a.d;
  const AdamwConsts k{float(d.beta1),
                      float(1.0 - d.beta1),
                      float(d.beta2),
                      float(1.0 - d.beta2),
                      float(1.0 / d.bias_correction1),
                      float(1.0 / d.bias_correction2),
                      float(d.eps),
                      float(d.weight_decay),
                      float(d.lr)};
  with_type(d.grad_dtype, [&](auto t) {
    using T = decltype(t);
    const T* g = static_cast<const T*>(a.grads);
    const bool vec = aligned16(a.params) && aligned16(a.m) && aligned16(a.v) && aligned_to(g, 4 * sizeof(T));
    auto kern = vec ? adamw_k<T, true> : adamw_k<T, false>;
    const int64_t work = vec ? d.n / 4 + 1 : d.n;
    const unsigned grid = all_blocks((work + kThreads - 1) / kThreads);  // one group per thread
    s->last_kernel = "adamw_step";
    kern<<<grid, kThreads, 0, s->stream>>>(a.params, a.m, a.v, g, d.n, k);
  });
  return check(cudaGetLastError(), "adamw_step: launch");
}

}  // namespace cuda
}  // namespace tc
