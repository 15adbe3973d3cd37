// Normalisation fused with a matrix-vector product, on the GPU. The maths
// (as the CPU kernel, src/cpu/fused_gemv.cpp):
//
//   Y[i, n] = sum_k xn[i, k] * W[n, k]        X [M, K], W [N, K], Y [M, N]
//   RMSNorm:   xn[i, k] = x[i, k] r_i g_k,                 r_i = 1 / sqrt(mean_k x[i,k]^2 + eps)
//   LayerNorm: xn[i, k] = (x[i, k] - mu_i) r_i g_k + b_k,   r_i = 1 / sqrt(var_i + eps)
// The per-row scalars come out of the sum (gw_k = g_k W[n, k]):
//   RMSNorm:   Y[i, n] = r_i * sum_k x[i, k] gw_k
//   LayerNorm: Y[i, n] = r_i * sum_k (x[i, k] - mu_i) gw_k + sum_k b_k W[n, k]
// (mu_i subtracted inside the sum, against cancellation when |mu| is large).
//
// Two kernels: row_stats writes mu_i and r_i of every row of X to the
// stream's scratch (one block per row, two passes for the variance), then
// norm_gemv gives each warp one row n of W and a chunk of up to kMB rows of
// X: the warp streams W[n, :] once in 16-byte vectors (with gamma, and beta
// for LayerNorm) and accumulates kMB dot products, reduced by shuffles. The
// normalised X is never written. Chunks of X vary fastest in the grid, so for
// M > kMB a row of W is re-read from L2, not from memory. The op is bound by
// the read of W (N K elements) for small M.
#include <cmath>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/rows.cuh"

namespace tc {
namespace cuda {
namespace {

constexpr int kThreads = 256;     // 8 warps: 8 rows of W per block
constexpr int kWarps = kThreads / 32;
constexpr int kMB = 8;            // rows of X per warp

template <class T, bool LN>
__global__ void __launch_bounds__(kThreads) row_stats(const T* x, int64_t M, int64_t K, float eps, float* stats) {
  __shared__ float red[32];
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const T* xr = x + m * K;
    float mu = 0.0f;
    if (LN) {
      float s = 0.0f;
      for (int64_t k = threadIdx.x; k < K; k += blockDim.x) s += to_f(xr[k]);
      mu = float(double(row_sum(s, red)) / double(K));
    }
    float ss = 0.0f;
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const float d = to_f(xr[k]) - mu;
      ss = fmaf(d, d, ss);
    }
    const float r = float(1.0 / sqrt(double(row_sum(ss, red)) / double(K) + double(eps)));
    if (threadIdx.x == 0) {
      stats[2 * m] = mu;
      stats[2 * m + 1] = r;
    }
  }
}

// E elements per access (16 bytes, or 1 when K or a pointer does not allow it).
template <class T, int E, bool LN>
__global__ void __launch_bounds__(kThreads)
    norm_gemv(const T* x, const T* gamma, const T* beta, const T* w, const float* stats, T* y, int64_t M, int64_t N,
              int64_t K) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t m0 = int64_t(blockIdx.x) * kMB;
  const int mb = int(M - m0 < kMB ? M - m0 : kMB);
  const int64_t groups = (N + kWarps - 1) / kWarps;
  for (int64_t grp = blockIdx.y; grp < groups; grp += gridDim.y) {
    const int64_t n = grp * kWarps + warp;
    if (n >= N) continue;  // no block-wide barrier below
    const T* wr = w + n * K;
    float acc[kMB], bacc = 0.0f, mu[kMB];
#pragma unroll
    for (int j = 0; j < kMB; ++j) {
      acc[j] = 0.0f;
      mu[j] = LN && j < mb ? stats[2 * (m0 + j)] : 0.0f;
    }
    // Unrolled: several loads of W in flight per warp.
#pragma unroll 4
    for (int64_t k = int64_t(lane) * E; k < K; k += 32 * E) {
      const Pack<T, E> wv = load<T, E>(wr + k), gv = load<T, E>(gamma + k);
      float gw[E];
#pragma unroll
      for (int e = 0; e < E; ++e) gw[e] = wv.f(e) * gv.f(e);
      if (LN && beta) {
        const Pack<T, E> bv = load<T, E>(beta + k);
#pragma unroll
        for (int e = 0; e < E; ++e) bacc = fmaf(bv.f(e), wv.f(e), bacc);
      }
#pragma unroll
      for (int j = 0; j < kMB; ++j) {
        if (j >= mb) break;
        const Pack<T, E> xv = load<T, E>(x + (m0 + j) * K + k);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[j] = fmaf(xv.f(e) - mu[j], gw[e], acc[j]);
      }
    }
    const float bsum = LN && beta ? warp_sum(bacc) : 0.0f;
#pragma unroll
    for (int j = 0; j < kMB; ++j) {
      if (j >= mb) break;
      const float dot = warp_sum(acc[j]);
      if (lane == 0) y[(m0 + j) * N + n] = from_f<T>(stats[2 * (m0 + j) + 1] * dot + bsum);
    }
  }
}

template <class T, bool LN>
tc_status run(StreamState* s, const FusedNormGemvArgs& a) {
  constexpr int EV = int(16 / sizeof(T));
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.gamma);
  const T* b = LN ? static_cast<const T*>(a.beta) : nullptr;
  const T* w = static_cast<const T*>(a.w);
  T* y = static_cast<T*>(a.y);
  void* p = nullptr;
  if (tc_status st = stream_scratch(s, 2 * size_t(a.M) * sizeof(float), "fused_norm_gemv scratch", &p)) return st;
  float* stats = static_cast<float*>(p);
  auto sk = row_stats<T, LN>;
  s->last_kernel = "fused_norm_gemv_stats";
  sk<<<all_blocks(a.M), kThreads, 0, s->stream>>>(x, a.M, a.K, a.eps, stats);
  if (tc_status st = check(cudaGetLastError(), "fused_norm_gemv: stats launch")) return st;
  const bool vec = a.K % EV == 0 && aligned16(x) && aligned16(g) && aligned16(b) && aligned16(w);
  auto gk = vec ? norm_gemv<T, EV, LN> : norm_gemv<T, 1, LN>;
  const int64_t chunks = (a.M + kMB - 1) / kMB, groups = (a.N + kWarps - 1) / kWarps;
  if (chunks > 0x7fffffff) return fail(TC_ERR_UNSUPPORTED, "fused_norm_gemv: M = %lld is too large", (long long)a.M);
  const dim3 grid(unsigned(chunks), unsigned(std::min<int64_t>(groups, 65535)));
  s->last_kernel = "fused_norm_gemv";
  gk<<<grid, kThreads, 0, s->stream>>>(x, g, b, w, stats, y, a.M, a.N, a.K);
  return check(cudaGetLastError(), "fused_norm_gemv: launch");
}

}  // namespace

tc_status fused_norm_gemv(Device&, StreamState* s, const FusedNormGemvArgs& a) {
  tc_status st = TC_OK;
  with_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    st = a.layernorm ? run<T, true>(s, a) : run<T, false>(s, a);
  });
  return st;
}

}  // namespace cuda
}  // namespace tc
