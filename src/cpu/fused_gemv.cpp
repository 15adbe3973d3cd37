// Normalisation fused with a matrix-vector product, on the CPU:
//
//   Y[i, n] = sum_k xn[i, k] * W[n, k]        X [M, K], W [N, K], Y [M, N]
//
//   RMSNorm:   xn[i, k] = x[i, k] * r_i * g_k,               r_i = 1 / sqrt(mean_k x[i,k]^2 + eps)
//   LayerNorm: xn[i, k] = (x[i, k] - mu_i) * r_i * g_k + b_k, r_i = 1 / sqrt(var_i + eps)
//
// The normalised X is never materialised. The per-row scalars come out of
// the sum, so with gw_k = g_k W[n, k] (formed in registers):
//   RMSNorm:   Y[i, n] = r_i * sum_k x[i, k] gw_k
//   LayerNorm: Y[i, n] = r_i * sum_k (x[i, k] - mu_i) gw_k + sum_k b_k W[n, k]
// (subtracting mu_i inside the sum, not as mu_i * sum_k gw_k afterwards,
// avoids cancellation when |mu| >> the spread of x).
//
// Order of work: first the statistics of all M rows (one read of X), then
// W streamed once: a tile of NB rows of W is loaded k-vector by k-vector and
// each vector of W, times gamma, is used against MB rows of X (held in cache)
// with NB x MB accumulators in registers. For M > MB the tile's rows of W are
// re-read from cache for the next MB rows of X, never from memory again.
// Threads split the rows of W.
#ifndef TC_SIMD_PASS

#include <algorithm>
#include <vector>

#include "core/backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#define TC_SIMD_SELF "cpu/fused_gemv.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {

// Rows of W per unit of parallel work: a multiple of every register tile's NB.
constexpr int64_t kRowsPerTile = 4;

tc_status fused_norm_gemv(const FusedNormGemvArgs& a) {
  std::vector<float> mean(size_t(a.M), 0.0f), rstd(size_t(a.M));
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto stats = a.layernorm ? TC_SIMD_PICK(row_stats<T, true>) : TC_SIMD_PICK(row_stats<T, false>);
    parallel_for(a.M, std::max<int64_t>(1, 32768 / a.K),
                 [&](int64_t m0, int64_t m1) { stats(a, m0, m1, mean.data(), rstd.data()); });
    auto gemv = a.layernorm ? TC_SIMD_PICK(gemv_rows<T, true>) : TC_SIMD_PICK(gemv_rows<T, false>);
    const int64_t blocks = (a.N + kRowsPerTile - 1) / kRowsPerTile;  // tiles of W rows
    parallel_for(blocks, std::max<int64_t>(1, 65536 / (a.K * kRowsPerTile)), [&](int64_t b0, int64_t b1) {
      gemv(a, mean.data(), rstd.data(), b0 * kRowsPerTile, std::min(a.N, b1 * kRowsPerTile));
    });
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernels, compiled once per instruction set (V).

// Mean (LayerNorm only) and rstd of rows [m0, m1) of X.
template <class T, bool LN>
void row_stats(const FusedNormGemvArgs& a, int64_t m0, int64_t m1, float* mean, float* rstd) {
  const int64_t K = a.K;
  for (int64_t m = m0; m < m1; ++m) {
    const T* x = static_cast<const T*>(a.x) + m * K;
    float mu = 0.0f;
    if (LN) {
      V s[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
      sweep4(K, [&](int u, int64_t k, int n) { s[u] = s[u] + V::ld(x + k, n); });
      mu = float(double(V::sum((s[0] + s[1]) + (s[2] + s[3]))) / double(K));
    }
    const V vmu = V::set1(mu);
    V ss[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(K, [&](int u, int64_t k, int n) {
      V d = V::tail(V::ld(x + k, n) - vmu, n, 0.0f);
      ss[u] = V::fma(d, d, ss[u]);
    });
    mean[m] = mu;
    rstd[m] = float(1.0 / std::sqrt(double(V::sum((ss[0] + ss[1]) + (ss[2] + ss[3]))) / double(K) + double(a.eps)));
  }
}

// One tile: rows [n, n + NB) of W against rows [m, m + MB) of X. bsum holds
// sum_k b_k W[n + i, k] for LayerNorm with beta; it is computed when
// `with_beta` (the tile's first pass over these rows of W) and reused after.
template <class T, bool LN, int NB, int MB>
void tile(const FusedNormGemvArgs& a, const float* mean, const float* rstd, int64_t n, int64_t m, bool with_beta,
          float* bsum) {
  const int64_t K = a.K, N = a.N;
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  const T* w = static_cast<const T*>(a.w) + n * K;
  const T* x = static_cast<const T*>(a.x) + m * K;
  V acc[NB][MB], bacc[NB];
  for (int i = 0; i < NB; ++i) {
    bacc[i] = V::zero();
    for (int j = 0; j < MB; ++j) acc[i][j] = V::zero();
  }
  sweep(K, [&](int64_t k, int cnt) {
    const V g = V::ld(gamma + k, cnt);
    V gw[NB];
#pragma GCC unroll 4
    for (int i = 0; i < NB; ++i) {
      const V wv = V::ld(w + i * K + k, cnt);
      gw[i] = wv * g;
      if (LN && with_beta) bacc[i] = V::fma(V::ld(beta + k, cnt), wv, bacc[i]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < MB; ++j) {
      V xv = V::ld(x + j * K + k, cnt);
      if (LN) xv = xv - V::set1(mean[m + j]);  // padded lanes meet gw = 0
#pragma GCC unroll 4
      for (int i = 0; i < NB; ++i) acc[i][j] = V::fma(xv, gw[i], acc[i][j]);
    }
  });
  T* y = static_cast<T*>(a.y);
  for (int i = 0; i < NB; ++i) {
    if (LN && with_beta) bsum[i] = V::sum(bacc[i]);
    for (int j = 0; j < MB; ++j) {
      float r = rstd[m + j] * V::sum(acc[i][j]);
      if (LN && beta) r += bsum[i];
      simd::from_f32(r, y + (m + j) * N + n + i);
    }
  }
}

// Register tile: NB rows of W by MB rows of X, NB * MB accumulators (16 on
// AVX-512's 32 registers, 8 on AVX2's 16).
constexpr int kNB = V::W >= 16 ? 4 : 2;
constexpr int kMB = 4;

template <class T, bool LN, int NB>
void tile_rows(const FusedNormGemvArgs& a, const float* mean, const float* rstd, int64_t n) {
  const bool has_beta = LN && a.beta;
  float bsum[NB] = {};
  int64_t m = 0;
  for (; m + kMB <= a.M; m += kMB) tile<T, LN, NB, kMB>(a, mean, rstd, n, m, has_beta && m == 0, bsum);
  const bool first = has_beta && m == 0;
  switch (a.M - m) {
    case 1: tile<T, LN, NB, 1>(a, mean, rstd, n, m, first, bsum); break;
    case 2: tile<T, LN, NB, 2>(a, mean, rstd, n, m, first, bsum); break;
    case 3: tile<T, LN, NB, 3>(a, mean, rstd, n, m, first, bsum); break;
    default: break;
  }
}

// Rows [n0, n1) of W (and so columns [n0, n1) of Y).
template <class T, bool LN>
void gemv_rows(const FusedNormGemvArgs& a, const float* mean, const float* rstd, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + kNB <= n1; n += kNB) tile_rows<T, LN, kNB>(a, mean, rstd, n);
  for (; n < n1; ++n) tile_rows<T, LN, 1>(a, mean, rstd, n);
}

#endif  // TC_SIMD_PASS
