// RMSNorm and LayerNorm, forward and backward, over the last dimension D of
// N rows, on the GPU. The maths (as the CPU kernels, src/cpu/norms.cpp):
//
// RMSNorm forward:   rstd = 1 / sqrt(mean_j x_j^2 + eps),   y_j = x_j * rstd * g_j
// RMSNorm backward:  dx_i = r * (g_i dy_i - x_i * r^2 / D * sum_j dy_j g_j x_j)
//                    dg_j = sum over rows of dy_j x_j r
// LayerNorm forward: mu = mean_j x_j, rstd = 1 / sqrt(mean_j (x_j - mu)^2 + eps)
//                    y_j = (x_j - mu) rstd g_j + b_j          (variance in two passes)
// LayerNorm backward, with xhat_j = (x_j - mu) rstd and dxhat_j = dy_j g_j:
//                    dx_i = rstd * (dxhat_i - mean_j dxhat_j - xhat_i * mean_j dxhat_j xhat_j)
//                    dg_j = sum over rows of dy_j xhat_j,   db_j = sum over rows of dy_j
//
// Memory: a row is read once into registers (rows.cuh: 16-byte loads, the
// thread's slice of up to 8 vectors), reduced with warp shuffles and shared
// memory, and written once: forward = read X + write Y, backward = read X
// and dY + write dX (gamma and beta come from L1/L2).
// Weight gradients: the backward grid is the resident blocks, looping over
// rows; every row slot (a block's row position) sums its rows' terms in
// shared memory, writes them once to a partial-sum row in the stream's scratch,
// and sum_partials adds the slots in a fixed order: deterministic, f32
// throughout, no atomics. Without weight gradients a block takes one row
// group (rows.cuh, all_blocks). Rows too long for registers (more than 8 x 256
// vectors) take the looping kernels, which re-read the row (from L2).
#include <cmath>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/rows.cuh"

namespace tc {
namespace cuda {
namespace {

// out[j] = sum_p partial[p * D + j], p in order. Blocks of 32 x 16 threads:
// 32 columns, each summed by 16 threads over interleaved slots, whose sums
// are then added in thread order: the result is the same on every run.
__global__ void __launch_bounds__(512) sum_partials(const float* partial, int64_t P, int64_t D, float* out) {
  __shared__ float part[16][33];
  const int64_t j = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.0f;
  if (j < D)
    for (int64_t p = threadIdx.y; p < P; p += 16) s += partial[p * D + j];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < D) {
    float t = part[0][threadIdx.x];
    for (int i = 1; i < 16; ++i) t += part[i][threadIdx.x];
    out[j] = t;
  }
}

tc_status reduce_partials(StreamState* s, const float* partial, int64_t P, int64_t D, float* out) {
  s->last_kernel = "sum_partials";
  sum_partials<<<unsigned((D + 31) / 32), dim3(32, 16), 0, s->stream>>>(partial, P, D, out);
  return check(cudaGetLastError(), "weight-gradient reduction: launch");
}


// ---- registers: one row slice per thread --------------------------------------
// gamma (and beta) are loaded where they are used, from L1/L2 (every row
// reads the same D values), not held in registers, so that more rows fit on
// an SM. For the same reason the backward kernels keep their weight-gradient
// sums in shared memory, not registers: at D = 8192 bf16 a thread's slice
// is 32 elements each of x and dy, and the sums would add 32 (LayerNorm:
// 64) f32 registers. Each thread owns its columns' sums, read and written
// as float4 (one 16-byte access per 4 sums; single floats when a vector is
// 1 element), laid out [row slot][vector][group of 4][thread] so that a
// warp's accesses are consecutive words (conflict-free); nothing is shared,
// so no barrier is needed. The slices of x and dy stay packed across the
// row reduction (keep_packed, rows.cuh): 32 registers for 64 bf16 values
// instead of 64, which is what lets more rows fit. Register caps for slices
// of up to 4 vectors (256 threads): RMSNorm 64 (4 blocks an SM, with 4 x 32
// KB of sums), LayerNorm 80 (3 blocks: 3 x 64 KB of sums is what shared
// memory holds).
template <int NV, int Sums>
constexpr int kBackwardBlocks = NV <= 4 ? (Sums == 1 ? 4 : 3) : 1;

// Weight-gradient sums: L per shared-memory access (a float4 when a vector
// holds a multiple of 4 elements), E / L accesses per vector.
template <int E>
using SumVec = std::conditional_t<E % 4 == 0, float4, float>;
template <int E>
constexpr int kSumLanes = E % 4 == 0 ? 4 : 1;

// Bytes of shared memory for `sums` weight-gradient sums per column of a
// backward kernel's block (0 when no weight gradient is wanted).
inline size_t backward_smem(const RowShape& sh, int E, int sums) {
  return size_t(sums) * sh.rows * sh.tpr * sh.NV * E * sizeof(float);
}

// Lets kernel k use `smem` bytes of dynamic shared memory (above 48 KB it
// must ask; before the occupancy query, which otherwise counts 0 blocks).
template <class K>
tc_status allow_smem(K k, size_t smem, const char* what) {
  if (smem <= 48 * 1024) return TC_OK;
  return check(cudaFuncSetAttribute((const void*)k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)), what);
}

// y = x * rstd * g
template <class T, int E, int NV>
__global__ void __launch_bounds__(kRowThreads)
    rms_forward_reg(const T* x, const T* gamma, T* y, float* rstd, int64_t N, int64_t D, float eps) {
  __shared__ float red[32];
  const int V = int(D / E), tpr = blockDim.x;
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < N; r0 += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool ok = row < N;
    Pack<T, E> xv[NV];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      xv[i] = ok && v < V ? load<T, E>(x + row * D + int64_t(v) * E) : zero_pack<T, E>();
#pragma unroll
      for (int e = 0; e < E; ++e) ss = fmaf(xv[i].f(e), xv[i].f(e), ss);
    }
    const float rs = rstd_of(row_sum(ss, red), D, eps);
    if (!ok) continue;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      if (v >= V) continue;
      const Pack<T, E> g = load<T, E>(gamma + int64_t(v) * E);
      Pack<T, E> o;
#pragma unroll
      for (int e = 0; e < E; ++e) o.set(e, xv[i].f(e) * rs * g.f(e));
      store(y + row * D + int64_t(v) * E, o);
    }
    if (rstd && threadIdx.x == 0) rstd[row] = rs;
  }
}

// dx = r * (g dy - x c), c = r^2 / D * sum dy g x; dgamma partials (dy x r)
// into partial[slot * D + j] when partial is not null.
template <class T, int E, int NV>
__global__ void __launch_bounds__(kRowThreads, kBackwardBlocks<NV, 1>)
    rms_backward_reg(const T* x, const T* gamma, const T* dy, const float* rstd, T* dx, float* partial, int64_t N,
                     int64_t D) {
  using A = SumVec<E>;
  constexpr int L = kSumLanes<E>, Q = E / L;
  __shared__ float red[32];
  extern __shared__ float4 sums[];
  const int V = int(D / E), tpr = blockDim.x;
  // acc[(i * Q + q) * tpr]: this thread's sums for elements [q L, q L + L) of vector i.
  A* acc = reinterpret_cast<A*>(sums) + threadIdx.y * (NV * Q * tpr) + threadIdx.x;
  if (partial)
    for (int k = 0; k < NV * Q; ++k) acc[k * tpr] = A{};
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < N; r0 += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool ok = row < N;
    const float rs = ok ? rstd[row] : 0.0f;
    Pack<T, E> xv[NV], dv[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      const bool in = ok && v < V;
      xv[i] = in ? load<T, E>(x + row * D + int64_t(v) * E) : zero_pack<T, E>();
      dv[i] = in ? load<T, E>(dy + row * D + int64_t(v) * E) : zero_pack<T, E>();
    }
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      const Pack<T, E> g = ok && v < V ? load<T, E>(gamma + int64_t(v) * E) : zero_pack<T, E>();
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        A s = partial ? acc[(i * Q + q) * tpr] : A{};
#pragma unroll
        for (int l = 0; l < L; ++l) {  // padding has x = dy = 0: adds nothing
          const int e = q * L + l;
          const float dyx = dv[i].f(e) * xv[i].f(e);
          dot = fmaf(dyx, g.f(e), dot);
          lane(s, l) = fmaf(dyx, rs, lane(s, l));
        }
        if (partial) acc[(i * Q + q) * tpr] = s;
      }
    }
    const float c = float(double(rs) * rs * row_sum(dot, red) / double(D));
    if (!ok) continue;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      keep_packed(xv[i]);
      keep_packed(dv[i]);
      const int v = threadIdx.x + i * tpr;
      if (v >= V) continue;
      const Pack<T, E> g = load<T, E>(gamma + int64_t(v) * E);
      float o[E];
#pragma unroll
      for (int e = 0; e < E; ++e) o[e] = (g.f(e) * dv[i].f(e) - xv[i].f(e) * c) * rs;
      store(dx + row * D + int64_t(v) * E, to_pack<T, E>(o));
    }
  }
  if (!partial) return;
  float* p = partial + (int64_t(blockIdx.x) * blockDim.y + threadIdx.y) * D;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int v = threadIdx.x + i * tpr;
    if (v < V)
#pragma unroll
      for (int q = 0; q < Q; ++q) *reinterpret_cast<A*>(p + int64_t(v) * E + q * L) = acc[(i * Q + q) * tpr];
  }
}

// y = (x - mu) rstd g + b (b optional)
template <class T, int E, int NV>
__global__ void __launch_bounds__(kRowThreads)
    ln_forward_reg(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, int64_t N, int64_t D,
                   float eps) {
  __shared__ float red[32];
  const int V = int(D / E), tpr = blockDim.x;
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < N; r0 += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool ok = row < N;
    Pack<T, E> xv[NV];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      xv[i] = ok && v < V ? load<T, E>(x + row * D + int64_t(v) * E) : zero_pack<T, E>();
#pragma unroll
      for (int e = 0; e < E; ++e) s += xv[i].f(e);
    }
    const float mu = float(double(row_sum(s, red)) / double(D));
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (threadIdx.x + i * tpr >= V) continue;  // padding would add mu^2
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float d = xv[i].f(e) - mu;
        var = fmaf(d, d, var);
      }
    }
    const float rs = rstd_of(row_sum(var, red), D, eps);
    if (!ok) continue;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      if (v >= V) continue;
      const Pack<T, E> g = load<T, E>(gamma + int64_t(v) * E);
      const Pack<T, E> b = beta ? load<T, E>(beta + int64_t(v) * E) : zero_pack<T, E>();
      Pack<T, E> o;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float xhat = (xv[i].f(e) - mu) * rs;
        o.set(e, beta ? fmaf(xhat, g.f(e), b.f(e)) : xhat * g.f(e));
      }
      store(y + row * D + int64_t(v) * E, o);
    }
    if (threadIdx.x == 0) {
      if (mean) mean[row] = mu;
      if (rstd) rstd[row] = rs;
    }
  }
}

// dx = rstd (dxhat - m1 - xhat m2); partials: dgamma rows in [0, P D),
// dbeta rows in [P D, 2 P D), P = gridDim.x * blockDim.y slots.
template <class T, int E, int NV>
__global__ void __launch_bounds__(kRowThreads, kBackwardBlocks<NV, 2>)
    ln_backward_reg(const T* x, const T* gamma, const T* dy, const float* mean, const float* rstd, T* dx,
                    float* partial, int64_t N, int64_t D) {
  using A = SumVec<E>;
  constexpr int L = kSumLanes<E>, Q = E / L;
  __shared__ float red[32];
  extern __shared__ float4 sums[];
  const int V = int(D / E), tpr = blockDim.x;
  // accg / accb[(i * Q + q) * tpr]: this thread's dgamma / dbeta sums for
  // elements [q L, q L + L) of vector i.
  A* accg = reinterpret_cast<A*>(sums) + threadIdx.y * (2 * NV * Q * tpr) + threadIdx.x;
  A* accb = accg + NV * Q * tpr;
  if (partial)
    for (int k = 0; k < NV * Q; ++k) accg[k * tpr] = accb[k * tpr] = A{};
  for (int64_t r0 = int64_t(blockIdx.x) * blockDim.y; r0 < N; r0 += int64_t(gridDim.x) * blockDim.y) {
    const int64_t row = r0 + threadIdx.y;
    const bool ok = row < N;
    const float mu = ok ? mean[row] : 0.0f, rs = ok ? rstd[row] : 0.0f;
    Pack<T, E> xv[NV], dv[NV];
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      const bool in = ok && v < V;
      xv[i] = in ? load<T, E>(x + row * D + int64_t(v) * E) : zero_pack<T, E>();
      dv[i] = in ? load<T, E>(dy + row * D + int64_t(v) * E) : zero_pack<T, E>();
    }
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      const int v = threadIdx.x + i * tpr;
      const Pack<T, E> g = ok && v < V ? load<T, E>(gamma + int64_t(v) * E) : zero_pack<T, E>();
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        A sg = partial ? accg[(i * Q + q) * tpr] : A{};
        A sb = partial ? accb[(i * Q + q) * tpr] : A{};
#pragma unroll
        for (int l = 0; l < L; ++l) {  // padding has dy = 0: adds nothing
          const int e = q * L + l;
          const float d = dv[i].f(e), xhat = (xv[i].f(e) - mu) * rs, dxhat = d * g.f(e);
          s1 += dxhat;
          s2 = fmaf(dxhat, xhat, s2);
          lane(sg, l) = fmaf(d, xhat, lane(sg, l));
          lane(sb, l) += d;
        }
        if (partial) {
          accg[(i * Q + q) * tpr] = sg;
          accb[(i * Q + q) * tpr] = sb;
        }
      }
    }
    const float m1 = float(row_sum(s1, red) / double(D));
    const float m2 = float(row_sum(s2, red) / double(D));
    if (!ok) continue;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      keep_packed(xv[i]);
      keep_packed(dv[i]);
      const int v = threadIdx.x + i * tpr;
      if (v >= V) continue;
      const Pack<T, E> g = load<T, E>(gamma + int64_t(v) * E);
      float o[E];
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float xhat = (xv[i].f(e) - mu) * rs, dxhat = dv[i].f(e) * g.f(e);
        o[e] = (dxhat - m1 - xhat * m2) * rs;
      }
      store(dx + row * D + int64_t(v) * E, to_pack<T, E>(o));
    }
  }
  if (!partial) return;
  const int64_t P = int64_t(gridDim.x) * blockDim.y;
  float* p = partial + (int64_t(blockIdx.x) * blockDim.y + threadIdx.y) * D;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int v = threadIdx.x + i * tpr;
    if (v < V)
#pragma unroll
      for (int q = 0; q < Q; ++q) {
        *reinterpret_cast<A*>(p + int64_t(v) * E + q * L) = accg[(i * Q + q) * tpr];
        *reinterpret_cast<A*>(p + P * D + int64_t(v) * E + q * L) = accb[(i * Q + q) * tpr];
      }
  }
}

// ---- rows too long for registers: the same maths, looping over the row ----------
// One row per block at a time (1-D blocks of kRowThreads); thread t owns
// elements t, t + blockDim.x, ... of every row, so a partial-sum row slot
// (one per block) is only ever touched by the thread that owns the column.

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    rms_forward_loop(const T* x, const T* gamma, T* y, float* rstd, int64_t N, int64_t D, float eps) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* xr = x + row * D;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) ss = fmaf(to_f(xr[j]), to_f(xr[j]), ss);
    const float rs = rstd_of(row_sum(ss, red), D, eps);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) y[row * D + j] = from_f<T>(to_f(xr[j]) * rs * to_f(gamma[j]));
    if (rstd && threadIdx.x == 0) rstd[row] = rs;
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    rms_backward_loop(const T* x, const T* gamma, const T* dy, const float* rstd, T* dx, float* partial, int64_t N,
                      int64_t D) {
  __shared__ float red[32];
  float* p = partial ? partial + int64_t(blockIdx.x) * D : nullptr;
  if (p)
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) p[j] = 0.0f;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* xr = x + row * D;
    const T* dr = dy + row * D;
    const float rs = rstd[row];
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const float dyx = to_f(dr[j]) * to_f(xr[j]);
      dot = fmaf(dyx, to_f(gamma[j]), dot);
      if (p) p[j] = fmaf(dyx, rs, p[j]);
    }
    // Every read of the row is done before the barrier inside row_sum, so dx
    // may be x or dy.
    const float c = float(double(rs) * rs * row_sum(dot, red) / double(D));
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x)
      dx[row * D + j] = from_f<T>((to_f(gamma[j]) * to_f(dr[j]) - to_f(xr[j]) * c) * rs);
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    ln_forward_loop(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, int64_t N, int64_t D,
                    float eps) {
  __shared__ float red[32];
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* xr = x + row * D;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) s += to_f(xr[j]);
    const float mu = float(double(row_sum(s, red)) / double(D));
    float var = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const float d = to_f(xr[j]) - mu;
      var = fmaf(d, d, var);
    }
    const float rs = rstd_of(row_sum(var, red), D, eps);
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const float xhat = (to_f(xr[j]) - mu) * rs;
      y[row * D + j] = from_f<T>(beta ? fmaf(xhat, to_f(gamma[j]), to_f(beta[j])) : xhat * to_f(gamma[j]));
    }
    if (threadIdx.x == 0) {
      if (mean) mean[row] = mu;
      if (rstd) rstd[row] = rs;
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kRowThreads)
    ln_backward_loop(const T* x, const T* gamma, const T* dy, const float* mean, const float* rstd, T* dx,
                     float* partial, int64_t N, int64_t D) {
  __shared__ float red[32];
  const int64_t P = gridDim.x;
  float* pg = partial ? partial + int64_t(blockIdx.x) * D : nullptr;
  float* pb = partial ? pg + P * D : nullptr;
  if (pg)
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) pg[j] = pb[j] = 0.0f;
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const T* xr = x + row * D;
    const T* dr = dy + row * D;
    const float mu = mean[row], rs = rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const float d = to_f(dr[j]), xhat = (to_f(xr[j]) - mu) * rs, dxhat = d * to_f(gamma[j]);
      s1 += dxhat;
      s2 = fmaf(dxhat, xhat, s2);
      if (pg) {
        pg[j] = fmaf(d, xhat, pg[j]);
        pb[j] += d;
      }
    }
    const float m1 = float(row_sum(s1, red) / double(D));
    const float m2 = float(row_sum(s2, red) / double(D));
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const float xhat = (to_f(xr[j]) - mu) * rs, dxhat = to_f(dr[j]) * to_f(gamma[j]);
      dx[row * D + j] = from_f<T>((dxhat - m1 - xhat * m2) * rs);
    }
  }
}

}  // namespace

tc_status rmsnorm_forward(Device&, StreamState* s, const RmsNormForwardArgs& a) {
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* x = static_cast<const T*>(a.x);
    const T* g = static_cast<const T*>(a.gamma);
    T* y = static_cast<T*>(a.y);
    const RowShape sh = row_shape(a.D, sizeof(T), aligned16(x) && aligned16(g) && aligned16(y));
    if (!sh.in_registers) {
      auto k = rms_forward_loop<T>;
      s->last_kernel = "rmsnorm_forward_loop";
      k<<<all_blocks(a.N), kRowThreads, 0, s->stream>>>(x, g, y, a.rstd, a.N, a.D, a.eps);
      return;
    }
    with_shape<T>(sh, [&](auto e, auto nv) {
      auto k = rms_forward_reg<T, decltype(e)::value, decltype(nv)::value>;
      const unsigned grid = all_blocks((a.N + sh.rows - 1) / sh.rows);
      s->last_kernel = "rmsnorm_forward";
      k<<<grid, dim3(sh.tpr, sh.rows), 0, s->stream>>>(x, g, y, a.rstd, a.N, a.D, a.eps);
    });
  });
  return check(cudaGetLastError(), "rmsnorm_forward: launch");
}

tc_status rmsnorm_backward(Device&, StreamState* s, const RmsNormBackwardArgs& a) {
  tc_status st = TC_OK;
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* x = static_cast<const T*>(a.x);
    const T* g = static_cast<const T*>(a.gamma);
    const T* dy = static_cast<const T*>(a.dy);
    T* dx = static_cast<T*>(a.dx);
    const RowShape sh =
        row_shape(a.D, sizeof(T), aligned16(x) && aligned16(g) && aligned16(dy) && aligned16(dx));
    // Partial sums: one row of D floats per row slot of the grid.
    auto run = [&](auto k, dim3 block, unsigned grid, size_t smem, const char* name) {
      float* partial = nullptr;
      const int64_t P = int64_t(grid) * block.y;
      if (a.dgamma) {
        void* p = nullptr;
        if ((st = stream_scratch(s, size_t(P) * size_t(a.D) * sizeof(float), "norm backward scratch", &p))) return;
        partial = static_cast<float*>(p);
      }
      s->last_kernel = name;
      k<<<grid, block, smem, s->stream>>>(x, g, dy, a.rstd, dx, partial, a.N, a.D);
      if ((st = check(cudaGetLastError(), "rmsnorm_backward: launch"))) return;
      if (a.dgamma) st = reduce_partials(s, partial, P, a.D, a.dgamma);
    };
    if (!sh.in_registers) {
      auto k = rms_backward_loop<T>;
      run(k, dim3(kRowThreads), a.dgamma ? resident_grid((const void*)k, kRowThreads, a.N) : all_blocks(a.N), 0,
          "rmsnorm_backward_loop");
      return;
    }
    with_shape<T>(sh, [&](auto e, auto nv) {
      auto k = rms_backward_reg<T, decltype(e)::value, decltype(nv)::value>;
      const int64_t groups = (a.N + sh.rows - 1) / sh.rows;
      const size_t smem = a.dgamma ? backward_smem(sh, decltype(e)::value, 1) : 0;
      if ((st = allow_smem(k, smem, "rmsnorm_backward: shared memory"))) return;
      run(k, dim3(sh.tpr, sh.rows),
          a.dgamma ? resident_grid((const void*)k, sh.tpr * sh.rows, groups, smem) : all_blocks(groups), smem,
          "rmsnorm_backward");
    });
  });
  return st;
}

tc_status layernorm_forward(Device&, StreamState* s, const LayerNormForwardArgs& a) {
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* x = static_cast<const T*>(a.x);
    const T* g = static_cast<const T*>(a.gamma);
    const T* b = static_cast<const T*>(a.beta);
    T* y = static_cast<T*>(a.y);
    const RowShape sh = row_shape(a.D, sizeof(T), aligned16(x) && aligned16(g) && aligned16(b) && aligned16(y));
    if (!sh.in_registers) {
      auto k = ln_forward_loop<T>;
      s->last_kernel = "layernorm_forward_loop";
      k<<<all_blocks(a.N), kRowThreads, 0, s->stream>>>(x, g, b, y, a.mean, a.rstd, a.N, a.D, a.eps);
      return;
    }
    with_shape<T>(sh, [&](auto e, auto nv) {
      auto k = ln_forward_reg<T, decltype(e)::value, decltype(nv)::value>;
      const unsigned grid = all_blocks((a.N + sh.rows - 1) / sh.rows);
      s->last_kernel = "layernorm_forward";
      k<<<grid, dim3(sh.tpr, sh.rows), 0, s->stream>>>(x, g, b, y, a.mean, a.rstd, a.N, a.D, a.eps);
    });
  });
  return check(cudaGetLastError(), "layernorm_forward: launch");
}

tc_status layernorm_backward(Device&, StreamState* s, const LayerNormBackwardArgs& a) {
  tc_status st = TC_OK;
  const bool want = a.dgamma || a.dbeta;
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    const T* x = static_cast<const T*>(a.x);
    const T* g = static_cast<const T*>(a.gamma);
    const T* dy = static_cast<const T*>(a.dy);
    T* dx = static_cast<T*>(a.dx);
    const RowShape sh =
        row_shape(a.D, sizeof(T), aligned16(x) && aligned16(g) && aligned16(dy) && aligned16(dx));
    // Partial sums: dgamma rows then dbeta rows, D floats per row slot.
    auto run = [&](auto k, dim3 block, unsigned grid, size_t smem, const char* name) {
      float* partial = nullptr;
      const int64_t P = int64_t(grid) * block.y;
      if (want) {
        void* p = nullptr;
        if ((st = stream_scratch(s, 2 * size_t(P) * size_t(a.D) * sizeof(float), "norm backward scratch", &p))) return;
        partial = static_cast<float*>(p);
      }
      s->last_kernel = name;
      k<<<grid, block, smem, s->stream>>>(x, g, dy, a.mean, a.rstd, dx, partial, a.N, a.D);
      if ((st = check(cudaGetLastError(), "layernorm_backward: launch"))) return;
      if (a.dgamma && (st = reduce_partials(s, partial, P, a.D, a.dgamma))) return;
      if (a.dbeta) st = reduce_partials(s, partial + P * a.D, P, a.D, a.dbeta);
    };
    if (!sh.in_registers) {
      auto k = ln_backward_loop<T>;
      run(k, dim3(kRowThreads), want ? resident_grid((const void*)k, kRowThreads, a.N) : all_blocks(a.N), 0,
          "layernorm_backward_loop");
      return;
    }
    with_shape<T>(sh, [&](auto e, auto nv) {
      auto k = ln_backward_reg<T, decltype(e)::value, decltype(nv)::value>;
      const int64_t groups = (a.N + sh.rows - 1) / sh.rows;
      const size_t smem = want ? backward_smem(sh, decltype(e)::value, 2) : 0;
      if ((st = allow_smem(k, smem, "layernorm_backward: shared memory"))) return;
      run(k, dim3(sh.tpr, sh.rows),
          want ? resident_grid((const void*)k, sh.tpr * sh.rows, groups, smem) : all_blocks(groups), smem,
          "layernorm_backward");
    });
  });
  return st;
}

}  // namespace cuda
}  // namespace tc
