// SwiGLU, GEGLU and softmax, forward and backward, on the GPU. The maths (as
// the CPU kernels, src/cpu/activations.cpp):
//
// SwiGLU, elementwise over n:
//   s = sigmoid(g) = 1 / (1 + exp(min(87, -g))),   silu(g) = g s
//   out   = silu(g) * u
//   dgate = dout * u * s (1 + g (1 - s)),   dup = dout * silu(g)
// (exp's argument is capped at 87 as on the CPU, so s stays > 0 and
// silu(-inf) is -inf, not NaN.)
// GEGLU: the same with GELU's tanh form, gelu(g) = 0.5 g (1 + tanh(c (g + 0.044715 g^3))).
// Softmax over the last dimension D of N rows, shifted by the row maximum:
//   y_j = exp(x_j - m) / sum_k exp(x_k - m),   m = max_k x_k
//   backward: dx_j = y_j (dy_j - sum_k dy_k y_k)
//
// Memory: SwiGLU is a grid-stride loop over 16-byte vectors (read gate, up,
// write out; backward reads three, writes two), every element loaded before
// any is stored, so an output may be an input. Softmax keeps a row slice in
// registers (rows.cuh): one read of X and one write of Y (backward: read Y,
// dY, write dX); exp(x - m) stays in registers between the sum and the
// scaling, so f16/bf16 outputs are rounded once. Rows too long for registers
// loop over the row instead (three reads, from L2 after the first).
#include <cmath>

#include "core/error.h"
#include "core/gate.h"
#include "cuda/device.h"
#include "cuda/rows.cuh"

namespace tc {
namespace cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(fminf(87.0f, -g))); }

// exp(d) for softmax's d = x - max <= 0, as 2^(d log2 e): the multiply and
// exp2f (MUFU.EX2 with its subnormal fix-up) are about half of expf's
// instructions, which softmax's forward pass, one exp per element, spends
// most of its issue slots on. The product's rounding is a relative error of
// |d| 2^-24 in the result (under 6e-6 for any d whose exp is a normal f32),
// exp2f's 2 ulp add 2.4e-7: within the f32 tolerance of 1e-5. -inf (masked)
// gives 0 and NaN stays NaN, as with expf.
__device__ __forceinline__ float exp_shifted(float d) { return exp2f(d * 1.4426950408889634f); }

// ---- Gated activations: out = act(g) * u. Vectors of E elements over
// [0, n / E), then the tail one by one ----

// SiLU: act(g) = g s, act'(g) = s (1 + g (1 - s)), s = sigmoid(g).
struct Silu {
  __device__ static float2 value_and_grad(float g) {
    const float s = sigmoid(g);
    return {g * s, s * fmaf(g, 1.0f - s, 1.0f)};
  }
  __device__ static float value(float g) { return gate::silu(g); }
};

// GELU, tanh form: z = c (g + 0.044715 g^3), t = tanh(z), act(g) = 0.5 g (1 + t),
// act'(g) = 0.5 (1 + t) (1 + g (1 - t) c (1 + 3 * 0.044715 g^2)), with
// 1 + t = 2 e / (e + 1) and 1 - t = 2 / (e + 1), e = exp(min(87, 2z)): no
// cancellation where t is near -1 (as the CPU kernels).
struct GeluTanh {
  static constexpr float kC = gate::kGeluC, kA = gate::kGeluA;
  __device__ static float2 value_and_grad(float g) {
    const float z = kC * fmaf(kA * g, g * g, g), e = expf(fminf(87.0f, 2.0f * z));
    const float m = 2.0f / (e + 1.0f), p = e * m;
    return {0.5f * g * p, 0.5f * p * (1.0f + g * m * kC * fmaf(3.0f * kA, g * g, 1.0f))};
  }
  __device__ static float value(float g) { return gate::gelu_tanh(g); }
};

template <class Act, class T, int E>
__global__ void __launch_bounds__(kThreads) gated_forward_k(const T* gate, const T* up, T* out, int64_t n) {
  const int64_t nvec = n / E, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = t; i < nvec; i += stride) {
    const Pack<T, E> g = load<T, E>(gate + i * E), u = load<T, E>(up + i * E);
    Pack<T, E> o;
#pragma unroll
    for (int e = 0; e < E; ++e) o.set(e, Act::value(g.f(e)) * u.f(e));
    store(out + i * E, o);
  }
  for (int64_t j = nvec * E + t; j < n; j += stride) out[j] = from_f<T>(Act::value(to_f(gate[j])) * to_f(up[j]));
}

template <class Act, class T, int E>
__global__ void __launch_bounds__(kThreads)
    gated_backward_k(const T* gate, const T* up, const T* dout, T* dgate, T* dup, int64_t n) {
  const int64_t nvec = n / E, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = t; i < nvec; i += stride) {
    const Pack<T, E> g = load<T, E>(gate + i * E), u = load<T, E>(up + i * E), d = load<T, E>(dout + i * E);
    Pack<T, E> dg, du;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float2 v = Act::value_and_grad(g.f(e));
      dg.set(e, d.f(e) * u.f(e) * v.y);
      du.set(e, d.f(e) * v.x);
    }
    store(dgate + i * E, dg);
    store(dup + i * E, du);
  }
  for (int64_t j = nvec * E + t; j < n; j += stride) {
    const float u = to_f(up[j]), d = to_f(dout[j]);
    const float2 v = Act::value_and_grad(to_f(gate[j]));
    dgate[j] = from_f<T>(d * u * v.y);
    dup[j] = from_f<T>(d * v.x);
  }
}

// ---- softmax, rows in registers ----

// At least 5 resident blocks for slices of up to 4 vectors (at most 48
// registers; 62 before, 4 blocks): a block holds its row's
// loads in flight only until the row is in registers, then spends the
// maximum, the exponentials and the sum without any, so more rows an SM
// keep more bytes in flight. The slice of x stays packed across the maximum
// (keep_packed); the 32 exponentials are what must stay in f32.
template <class T, int E, int NV>
__global__ void __launch_bounds__(kRowThreads, NV <= 4 ? 5 : 1)
    softmax_forward_reg(const T* x, T* y, int64_t N, int64_t D) {
  __shared__ float red[32];
  const int V = int(D / E), tpr = blockDim.x;
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < N; r0 += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool ok = row < N;
    Pack<T, E> xv[NV];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      xv[i] = zero_pack<T, E>();
      if (ok && v < V) {
        xv[i] = load<T, E>(x + row * D + int64_t(v) * E);
#pragma unroll
        for (int e = 0; e < E; ++e) m = fmaxf(m, xv[i].f(e));
      }
    }
    m = row_max(m, red);
    float ev[NV][E], sum = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      keep_packed(xv[i]);
      const bool in = ok && threadIdx.x + i * tpr < V;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        ev[i][e] = in ? exp_shifted(xv[i].f(e) - m) : 0.0f;
        sum += ev[i][e];
      }
    }
    const float inv = 1.0f / row_sum(sum, red);
    if (!ok) continue;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      if (v >= V) continue;
      float o[E];
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] = ev[i][e] * inv;
      store(y + row * D + int64_t(v) * E, to_pack<T, E>(o));
    }
  }
}

// At least 3 resident blocks for slices of up to 4 vectors (at most 85
// registers): left alone, the compiler keeps y and dy widened to f32 and
// fits only 2 rows of D = 8192 bf16 on an SM.
template <class T, int E, int NV>
__global__ void __launch_bounds__(kRowThreads, NV <= 4 ? 3 : 1)
    softmax_backward_reg(const T* y, const T* dy, T* dx, int64_t N, int64_t D) {
  __shared__ float red[32];
  const int V = int(D / E), tpr = blockDim.x;
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < N; r0 += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool ok = row < N;
    Pack<T, E> yv[NV], dv[NV];
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      const bool in = ok && v < V;
      yv[i] = in ? load<T, E>(y + row * D + int64_t(v) * E) : zero_pack<T, E>();
      dv[i] = in ? load<T, E>(dy + row * D + int64_t(v) * E) : zero_pack<T, E>();
#pragma unroll
      for (int e = 0; e < E; ++e) dot = fmaf(yv[i].f(e), dv[i].f(e), dot);
    }
    const float s = row_sum(dot, red);
    if (!ok) continue;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      if (v >= V) continue;
      Pack<T, E> o;
#pragma unroll
      for (int e = 0; e < E; ++e) o.set(e, yv[i].f(e) * (dv[i].f(e) - s));
      store(dx + row * D + int64_t(v) * E, o);
    }
  }
}

// ---- softmax, rows too long for registers: one row per block, looping ----

template <class T>
__global__ void __launch_bounds__(kRowThreads) softmax_forward_loop(const T* x, T* y, int64_t N, int64_t D) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* xr = x + row * D;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) m = fmaxf(m, to_f(xr[j]));
    m = row_max(m, red);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) sum += exp_shifted(to_f(xr[j]) - m);
    // The barriers in row_sum order every read of the row before the first
    // write, so Y may be X.
    const float inv = 1.0f / row_sum(sum, red);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) y[row * D + j] = from_f<T>(exp_shifted(to_f(xr[j]) - m) * inv);
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_backward_loop(const T* y, const T* dy, T* dx, int64_t N, int64_t D) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* yr = y + row * D;
    const T* dr = dy + row * D;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) dot = fmaf(to_f(yr[j]), to_f(dr[j]), dot);
    const float s = row_sum(dot, red);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) dx[row * D + j] = from_f<T>(to_f(yr[j]) * (to_f(dr[j]) - s));
  }
}

// One vector (or element) per thread.
unsigned elementwise_grid(int64_t nvec) { return all_blocks((nvec + kThreads - 1) / kThreads); }

}  // namespace

namespace {

template <class Act>
tc_status gated_forward(StreamState* s, const SwigluForwardArgs& a, const char* name) {
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int EV = int(16 / sizeof(T));
    const T* g = static_cast<const T*>(a.gate);
    const T* u = static_cast<const T*>(a.up);
    T* o = static_cast<T*>(a.out);
    s->last_kernel = name;
    if (aligned16(g) && aligned16(u) && aligned16(o)) {
      auto k = gated_forward_k<Act, T, EV>;
      k<<<elementwise_grid(a.n / EV + 1), kThreads, 0, s->stream>>>(g, u, o, a.n);
    } else {
      auto k = gated_forward_k<Act, T, 1>;
      k<<<elementwise_grid(a.n), kThreads, 0, s->stream>>>(g, u, o, a.n);
    }
  });
  return check(cudaGetLastError(), name);
}

template <class Act>
tc_status gated_backward(StreamState* s, const SwigluBackwardArgs& a, const char* name) {
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    constexpr int EV = int(16 / sizeof(T));
    const T* g = static_cast<const T*>(a.gate);
    const T* u = static_cast<const T*>(a.up);
    const T* d = static_cast<const T*>(a.dout);
    T* dg = static_cast<T*>(a.dgate);
    T* du = static_cast<T*>(a.dup);
    s->last_kernel = name;
    if (aligned16(g) && aligned16(u) && aligned16(d) && aligned16(dg) && aligned16(du)) {
      auto k = gated_backward_k<Act, T, EV>;
      k<<<elementwise_grid(a.n / EV + 1), kThreads, 0, s->stream>>>(g, u, d, dg, du, a.n);
    } else {
      auto k = gated_backward_k<Act, T, 1>;
      k<<<elementwise_grid(a.n), kThreads, 0, s->stream>>>(g, u, d, dg, du, a.n);
    }
  });
  return check(cudaGetLastError(), name);
}

}  // namespace

tc_status swiglu_forward(Device&, StreamState* s, const SwigluForwardArgs& a) {
  return gated_forward<Silu>(s, a, "swiglu_forward");
}
tc_status swiglu_backward(Device&, StreamState* s, const SwigluBackwardArgs& a) {
  return gated_backward<Silu>(s, a, "swiglu_backward");
}
tc_status geglu_forward(Device&, StreamState* s, const GegluForwardArgs& a) {
  return gated_forward<GeluTanh>(s, a, "geglu_forward");
}
tc_status geglu_backward(Device&, StreamState* s, const GegluBackwardArgs& a) {
  return gated_backward<GeluTanh>(s, a, "geglu_backward");
}

tc_status softmax_forward(Device&, StreamState* s, const SoftmaxForwardArgs& a) {
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* x = static_cast<const T*>(a.x);
    T* y = static_cast<T*>(a.y);
    const RowShape sh = row_shape(a.D, sizeof(T), aligned16(x) && aligned16(y));
    if (!sh.in_registers) {
      auto k = softmax_forward_loop<T>;
      s->last_kernel = "softmax_forward_loop";
      k<<<all_blocks(a.N), kRowThreads, 0, s->stream>>>(x, y, a.N, a.D);
      return;
    }
    with_shape<T>(sh, [&](auto e, auto nv) {
      auto k = softmax_forward_reg<T, decltype(e)::value, decltype(nv)::value>;
      const unsigned grid = all_blocks((a.N + sh.rows - 1) / sh.rows);
      s->last_kernel = "softmax_forward";
      k<<<grid, dim3(sh.tpr, sh.rows), 0, s->stream>>>(x, y, a.N, a.D);
    });
  });
  return check(cudaGetLastError(), "softmax_forward: launch");
}

tc_status softmax_backward(Device&, StreamState* s, const SoftmaxBackwardArgs& a) {
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* y = static_cast<const T*>(a.y);
    const T* dy = static_cast<const T*>(a.dy);
    T* dx = static_cast<T*>(a.dx);
    const RowShape sh = row_shape(a.D, sizeof(T), aligned16(y) && aligned16(dy) && aligned16(dx));
    if (!sh.in_registers) {
      auto k = softmax_backward_loop<T>;
      s->last_kernel = "softmax_backward_loop";
      k<<<all_blocks(a.N), kRowThreads, 0, s->stream>>>(y, dy, dx, a.N, a.D);
      return;
    }
    with_shape<T>(sh, [&](auto e, auto nv) {
      auto k = softmax_backward_reg<T, decltype(e)::value, decltype(nv)::value>;
      const unsigned grid = all_blocks((a.N + sh.rows - 1) / sh.rows);
      s->last_kernel = "softmax_backward";
      k<<<grid, dim3(sh.tpr, sh.rows), 0, s->stream>>>(y, dy, dx, a.N, a.D);
    });
  });
  return check(cudaGetLastError(), "softmax_backward: launch");
}

}  // namespace cuda
}  // namespace tc
