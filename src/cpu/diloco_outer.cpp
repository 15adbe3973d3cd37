// DiLoCo's outer step on parameters the CPU backend holds as device memory
// (TC_DIST_DEVICE_PATH=1): the ops of core/backend.h ("DiLoCo"), each the
// host path's loop (src/dist/diloco_outer.cpp) on a range, so the bits are
// the host path's. Both files are compiled without floating-point
// contraction (CMakeLists.txt): a fused multiply-add would round once where
// the other side rounds twice.
//
//   prepare  Delta = anchor - f32(theta); then as the mode says:
//              kDelta          out = Delta
//              kFp16           s = (Delta + e) * (1/n); q = f16(s); out = (s - f32(q)) * n
//              kErrorFeedback  out = Delta + e
//   topk     the k largest |u_i|, ties to the lower index (nth_element with
//            that total order, then the chosen indices sorted): pairs
//            (i, u_i) in index order, u_i zeroed
//   combine  g = 0; for each rank r in order, for each of its pairs (i, v):
//            g[i] += v * (1/n)
//   update   SGD / Nesterov / Adam on the anchor (core/backend.h), then
//            theta = narrow(anchor)
//   commit   theta = narrow(anchor + (f32(theta) - theta_at_launch))
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "cpu/convert.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "tensorcore/diloco.h"

namespace tc {
namespace cpu {

namespace {

// Elementwise work runs over pieces of this many elements: a piece of theta
// is widened into (or narrowed from) a buffer on the stack.
constexpr int64_t kPiece = 4096;

// fn(begin, end) over [0, n) in pieces of kPiece, spread over the pool.
template <class F>
void for_pieces(int64_t n, F&& fn) {
  parallel_for((n + kPiece - 1) / kPiece, 16, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) fn(p * kPiece, std::min(n, (p + 1) * kPiece));
  });
}

void widen(tc_dtype dtype, const void* src, int64_t first, float* dst, int64_t count) {
  if (dtype == TC_DTYPE_F32)
    std::memcpy(dst, static_cast<const float*>(src) + first, size_t(count) * 4);
  else
    widen_row(dtype == TC_DTYPE_BF16, static_cast<const uint16_t*>(src) + first, dst, count);
}

void narrow(tc_dtype dtype, const float* src, void* dst, int64_t first, int64_t count) {
  if (dtype == TC_DTYPE_F32)
    std::memcpy(static_cast<float*>(dst) + first, src, size_t(count) * 4);
  else
    narrow_row(dtype == TC_DTYPE_BF16, src, static_cast<uint16_t*>(dst) + first, count);
}

}  // namespace

tc_status diloco_prepare(const DilocoPrepareArgs& a) {
  const float inv = 1.0f / float(a.world), world = float(a.world);
  for_pieces(a.n, [&](int64_t b, int64_t e) {
    float delta[kPiece];
    const int64_t len = e - b;
    widen(a.dtype, a.theta, b, delta, len);
    for (int64_t j = 0; j < len; ++j) delta[j] = a.anchor[b + j] - delta[j];
    switch (a.mode) {
      case DilocoPrepareArgs::kDelta:
        std::memcpy(a.out + b, delta, size_t(len) * 4);
        break;
      case DilocoPrepareArgs::kFp16: {
        float s[kPiece], back[kPiece];
        for (int64_t j = 0; j < len; ++j) s[j] = (delta[j] + a.residual[b + j]) * inv;
        narrow_row(false, s, a.q + b, len);
        widen_row(false, a.q + b, back, len);
        for (int64_t j = 0; j < len; ++j) a.out[b + j] = (s[j] - back[j]) * world;
        break;
      }
      default:  // kErrorFeedback
        for (int64_t j = 0; j < len; ++j) a.out[b + j] = delta[j] + a.residual[b + j];
    }
  });
  return TC_OK;
}

tc_status diloco_topk(const DilocoTopkArgs& a) {
  float* u = a.u;
  const size_t n = size_t(a.n), k = size_t(a.k);
  std::vector<uint32_t> idx(n);
  for (size_t i = 0; i < n; ++i) idx[i] = uint32_t(i);
  auto larger = [&](uint32_t x, uint32_t y) {
    const float fx = std::fabs(u[x]), fy = std::fabs(u[y]);
    return fx > fy || (fx == fy && x < y);
  };
  std::nth_element(idx.begin(), idx.begin() + std::ptrdiff_t(k - 1), idx.end(), larger);
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  for (size_t j = 0; j < k; ++j) {
    std::memcpy(&a.pairs[2 * j], &idx[j], 4);
    a.pairs[2 * j + 1] = u[idx[j]];
    u[idx[j]] = 0.0f;
  }
  return TC_OK;
}

tc_status diloco_combine(const DilocoCombineArgs& a) {
  std::fill(a.g, a.g + a.n, 0.0f);
  const float inv = 1.0f / float(a.world);
  for (int32_t r = 0; r < a.world; ++r) {
    const float* p = a.pairs + size_t(r) * 2 * size_t(a.k);
    for (int64_t j = 0; j < a.k; ++j) {
      uint32_t i;
      std::memcpy(&i, &p[2 * j], 4);
      if (int64_t(i) < a.n) a.g[i] += p[2 * j + 1] * inv;
    }
  }
  return TC_OK;
}

tc_status diloco_update(const DilocoUpdateArgs& a) {
  const float lr = a.lr, mu = a.mu, b2 = a.beta2, eps = a.eps, bc1 = a.bc1, bc2 = a.bc2;
  const float* g = a.g;
  float* x = a.anchor;
  for_pieces(a.n, [&](int64_t b, int64_t e) {
    switch (a.optimizer) {
      case TC_DILOCO_OUTER_SGD:
        for (int64_t i = b; i < e; ++i) x[i] -= lr * g[i];
        break;
      case TC_DILOCO_OUTER_NESTEROV: {
        float* v = a.m1;
        for (int64_t i = b; i < e; ++i) {
          v[i] = mu * v[i] + g[i];
          x[i] -= lr * (g[i] + mu * v[i]);
        }
        break;
      }
      default: {  // ADAM
        float* m = a.m1;
        float* v = a.m2;
        for (int64_t i = b; i < e; ++i) {
          m[i] = mu * m[i] + (1.0f - mu) * g[i];
          v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
          const float mh = bc1 > 0 ? m[i] / bc1 : m[i];
          const float vh = bc2 > 0 ? v[i] / bc2 : v[i];
          x[i] -= lr * mh / (std::sqrt(vh) + eps);
        }
      }
    }
    if (a.theta) narrow(a.dtype, x + b, a.theta, b, e - b);
  });
  return TC_OK;
}

tc_status diloco_commit(const DilocoCommitArgs& a) {
  for_pieces(a.n, [&](int64_t b, int64_t e) {
    float theta[kPiece];
    const int64_t len = e - b;
    widen(a.dtype, a.theta, b, theta, len);
    for (int64_t j = 0; j < len; ++j) theta[j] = a.anchor[b + j] + (theta[j] - a.theta_at_launch[b + j]);
    narrow(a.dtype, theta, a.theta, b, len);
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
