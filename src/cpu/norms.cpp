// RMSNorm and LayerNorm, forward and backward, over the last dimension D of
// N rows, on the CPU.
//
// RMSNorm forward:
//   rstd = 1 / sqrt(mean_j x_j^2 + eps),   y_j = x_j * rstd * g_j
// RMSNorm backward (r = rstd, from the forward pass):
//   dy/dx: y_j = x_j r g_j with dr/dx_i = -r^3 x_i / D, so
//   dx_i = r * (g_i dy_i - x_i * r^2 / D * sum_j dy_j g_j x_j)
//   dg_j = sum over rows of dy_j x_j r
// LayerNorm forward (biased variance, two passes over the cached row so a
// large mean cannot cancel the variance):
//   mu = mean_j x_j,  rstd = 1 / sqrt(mean_j (x_j - mu)^2 + eps)
//   xhat_j = (x_j - mu) * rstd,  y_j = xhat_j g_j + b_j
// LayerNorm backward, with dxhat_j = dy_j g_j:
//   dx_i = rstd * (dxhat_i - mean_j dxhat_j - xhat_i * mean_j dxhat_j xhat_j)
//   dg_j = sum over rows of dy_j xhat_j,  db_j = sum over rows of dy_j
//
// Memory: each row is read from memory once and re-read from cache (a row of
// D = 4096 f32 is 16 KiB), so the forward passes cost one read of X and one
// write of Y, the backward passes one read of X and dY and one write of dX;
// the last pass over a row prefetches the next.
// Rows are spread over the thread pool. The weight gradients are summed per
// fixed block of rows, then the blocks' sums are added in block order, so the
// result does not depend on scheduling.
#ifndef TC_SIMD_PASS

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#define TC_SIMD_SELF "cpu/norms.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {
namespace {

// Rows per parallel chunk: enough work (~32K elements) to pay for a hand-off.
int64_t row_grain(int64_t D) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(D, 1)); }

// Runs rows(r0, r1, acc) over [0, N) and adds up the weight-gradient sums
// into out[0..acc_len) (acc is null when acc_len is 0). The rows are cut into
// a fixed number of blocks, each with its own zeroed accumulator; threads take
// blocks as they come free (so a descheduled thread does not hold the others
// up), and the accumulators are added in block order, so the result does not
// depend on which thread ran what.
template <class Rows>
void rows_with_partials(int64_t N, int64_t D, int64_t acc_len, float* out, const Rows& rows) {
  if (N * D < 32768 || num_threads() == 1) {  // small: one block, summed straight into out
    std::fill(out, out + acc_len, 0.0f);
    rows(0, N, acc_len ? out : nullptr);
    return;
  }
  if (acc_len == 0) {
    parallel_for(N, row_grain(D), [&](int64_t r0, int64_t r1) { rows(r0, r1, nullptr); });
    return;
  }
  const int64_t blocks = std::min<int64_t>(N, 4 * num_threads());
  std::vector<float> partial(size_t(blocks) * size_t(acc_len), 0.0f);
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) rows(N * b / blocks, N * (b + 1) / blocks, partial.data() + b * acc_len);
  });
  for (int64_t j = 0; j < acc_len; ++j) {
    float s = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) s += partial[size_t(b * acc_len + j)];
    out[j] = s;
  }
}

}  // namespace

tc_status rmsnorm_forward(const RmsNormForwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto rows = TC_SIMD_PICK(rms_forward_rows<T>);
    parallel_for(a.N, row_grain(a.D), [&](int64_t r0, int64_t r1) { rows(a, r0, r1); });
  });
  return TC_OK;
}

tc_status rmsnorm_backward(const RmsNormBackwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto rows = TC_SIMD_PICK(rms_backward_rows<T>);
    rows_with_partials(a.N, a.D, a.dgamma ? a.D : 0, a.dgamma,
                       [&](int64_t r0, int64_t r1, float* acc) { rows(a, r0, r1, acc); });
  });
  return TC_OK;
}

tc_status layernorm_forward(const LayerNormForwardArgs& a) {
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto rows = TC_SIMD_PICK(ln_forward_rows<T>);
    parallel_for(a.N, row_grain(a.D), [&](int64_t r0, int64_t r1) { rows(a, r0, r1); });
  });
  return TC_OK;
}

tc_status layernorm_backward(const LayerNormBackwardArgs& a) {
  // Accumulator layout: dgamma in [0, D), dbeta in [D, 2D); both are computed
  // whenever either is wanted (the second costs one add per element).
  const bool want = a.dgamma || a.dbeta;
  std::vector<float> sums(want ? size_t(2 * a.D) : 0);
  simd::with_float_type(a.dtype, [&](auto t) {
    using T = decltype(t);
    auto rows = TC_SIMD_PICK(ln_backward_rows<T>);
    rows_with_partials(a.N, a.D, want ? 2 * a.D : 0, sums.data(),
                       [&](int64_t r0, int64_t r1, float* acc) { rows(a, r0, r1, acc); });
  });
  if (a.dgamma) std::copy(sums.begin(), sums.begin() + a.D, a.dgamma);
  if (a.dbeta) std::copy(sums.begin() + a.D, sums.end(), a.dbeta);
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernels, compiled once per instruction set (V).

inline V sum4(const V* acc) { return (acc[0] + acc[1]) + (acc[2] + acc[3]); }

// The last pass over a row works from cache; meanwhile it asks for the next
// row (of this thread's block), kPrefetchStride elements at a time, so memory
// and arithmetic overlap instead of alternating.
constexpr int64_t kPrefetchStride = 64;

template <class T>
void rms_forward_rows(const RmsNormForwardArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.D;
  const T* gamma = static_cast<const T*>(a.gamma);
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    T* y = static_cast<T*>(a.y) + r * D;
    V acc[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(D, [&](int u, int64_t k, int n) {
      V xv = V::ld(x + k, n);
      acc[u] = V::fma(xv, xv, acc[u]);
    });
    const float rs = float(1.0 / std::sqrt(double(V::sum(sum4(acc))) / double(D) + double(a.eps)));
    const V vrs = V::set1(rs);
    const bool more = r + 1 < r1;
    sweep(D, [&](int64_t k, int n) {
      if (more && k % kPrefetchStride == 0) simd::prefetch(x + D + k, kPrefetchStride * sizeof(T));
      V::st(y + k, V::ld(x + k, n) * vrs * V::ld(gamma + k, n), n);
    });
    if (a.rstd) a.rstd[r] = rs;
  }
}

// acc: D floats of dgamma partial sums, or null.
template <class T>
void rms_backward_rows(const RmsNormBackwardArgs& a, int64_t r0, int64_t r1, float* acc) {
  const int64_t D = a.D;
  const T* gamma = static_cast<const T*>(a.gamma);
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    const T* dy = static_cast<const T*>(a.dy) + r * D;
    T* dx = static_cast<T*>(a.dx) + r * D;
    const float rs = a.rstd[r];
    const V vrs = V::set1(rs);
    // Pass 1: sum_j dy_j g_j x_j, and the dgamma partials (before dx may
    // overwrite x or dy).
    V dot[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(D, [&](int u, int64_t k, int n) {
      V dyx = V::ld(dy + k, n) * V::ld(x + k, n);
      dot[u] = V::fma(dyx, V::ld(gamma + k, n), dot[u]);
      if (acc) V::st(acc + k, V::fma(dyx, vrs, V::ld(acc + k, n)), n);
    });
    const V c = V::set1(float(double(rs) * rs * V::sum(sum4(dot)) / double(D)));
    // Pass 2: dx = r * (g dy - x c).
    const bool more = r + 1 < r1;
    sweep(D, [&](int64_t k, int n) {
      if (more && k % kPrefetchStride == 0) {
        simd::prefetch(x + D + k, kPrefetchStride * sizeof(T));
        simd::prefetch(dy + D + k, kPrefetchStride * sizeof(T));
      }
      V gdy = V::ld(gamma + k, n) * V::ld(dy + k, n);
      V::st(dx + k, (gdy - V::ld(x + k, n) * c) * vrs, n);
    });
  }
}

template <class T>
void ln_forward_rows(const LayerNormForwardArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.D;
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    T* y = static_cast<T*>(a.y) + r * D;
    V s[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(D, [&](int u, int64_t k, int n) { s[u] = s[u] + V::ld(x + k, n); });
    const float mu = float(double(V::sum(sum4(s))) / double(D));
    const V vmu = V::set1(mu);
    V var[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(D, [&](int u, int64_t k, int n) {
      V d = V::tail(V::ld(x + k, n) - vmu, n, 0.0f);  // padded lanes add nothing
      var[u] = V::fma(d, d, var[u]);
    });
    const float rs = float(1.0 / std::sqrt(double(V::sum(sum4(var))) / double(D) + double(a.eps)));
    const V vrs = V::set1(rs);
    const bool more = r + 1 < r1;
    sweep(D, [&](int64_t k, int n) {
      if (more && k % kPrefetchStride == 0) simd::prefetch(x + D + k, kPrefetchStride * sizeof(T));
      V xhat = (V::ld(x + k, n) - vmu) * vrs;
      V yv = beta ? V::fma(xhat, V::ld(gamma + k, n), V::ld(beta + k, n)) : xhat * V::ld(gamma + k, n);
      V::st(y + k, yv, n);
    });
    if (a.mean) a.mean[r] = mu;
    if (a.rstd) a.rstd[r] = rs;
  }
}

// acc: 2D floats (dgamma partials, then dbeta partials), or null.
template <class T>
void ln_backward_rows(const LayerNormBackwardArgs& a, int64_t r0, int64_t r1, float* acc) {
  const int64_t D = a.D;
  const T* gamma = static_cast<const T*>(a.gamma);
  for (int64_t r = r0; r < r1; ++r) {
    const T* x = static_cast<const T*>(a.x) + r * D;
    const T* dy = static_cast<const T*>(a.dy) + r * D;
    T* dx = static_cast<T*>(a.dx) + r * D;
    const V vmu = V::set1(a.mean[r]), vrs = V::set1(a.rstd[r]);
    // Pass 1: sum_j dxhat_j, sum_j dxhat_j xhat_j, and the weight-gradient
    // partials. Padded tail lanes load dy = 0, so they add nothing.
    V s1[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    V s2[4] = {V::zero(), V::zero(), V::zero(), V::zero()};
    sweep4(D, [&](int u, int64_t k, int n) {
      V dyv = V::ld(dy + k, n);
      V xhat = (V::ld(x + k, n) - vmu) * vrs;
      V dxhat = dyv * V::ld(gamma + k, n);
      s1[u] = s1[u] + dxhat;
      s2[u] = V::fma(dxhat, xhat, s2[u]);
      if (acc) {
        V::st(acc + k, V::fma(dyv, xhat, V::ld(acc + k, n)), n);
        V::st(acc + D + k, V::ld(acc + D + k, n) + dyv, n);
      }
    });
    const V m1 = V::set1(float(V::sum(sum4(s1)) / double(D)));
    const V m2 = V::set1(float(V::sum(sum4(s2)) / double(D)));
    // Pass 2: dx = rstd * (dxhat - m1 - xhat m2).
    const bool more = r + 1 < r1;
    sweep(D, [&](int64_t k, int n) {
      if (more && k % kPrefetchStride == 0) {
        simd::prefetch(x + D + k, kPrefetchStride * sizeof(T));
        simd::prefetch(dy + D + k, kPrefetchStride * sizeof(T));
      }
      V xhat = (V::ld(x + k, n) - vmu) * vrs;
      V dxhat = V::ld(dy + k, n) * V::ld(gamma + k, n);
      V::st(dx + k, (dxhat - m1 - xhat * m2) * vrs, n);
    });
  }
}

#endif  // TC_SIMD_PASS
