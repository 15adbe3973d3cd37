// DiLoCo's outer-step ops (core/backend.h, "DiLoCo") on every device present,
// called through the context's backend (they have no C ABI). Each is checked
// twice on fresh random inputs with its outputs poisoned first: bit for bit
// against the host path's f32 formulas (src/dist/diloco_outer.cpp, which the
// ops must reproduce), and against a float64 reference within f32 rounding.
//   diloco_prepare  every mode, theta in f32 / f16 / bf16, 1 and 3 ranks
//   diloco_topk     ties in |u| (few distinct magnitudes), k = 1, k = n,
//                   sizes around the GPU kernel's 4096-element tiles
//   diloco_combine  3 ranks, an index past n ignored
//   diloco_update   SGD, Nesterov, Adam (with and without bias correction),
//                   theta written in each dtype or not at all
//   diloco_commit   each dtype
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/half.h"
#include "core/objects.h"
#include "tensorcore/tensorcore.h"
#include "backend_op_fixture.h"

namespace {

using op_test::Dev;
using op_test::devices;
using op_test::randn;
using op_test::rng;

class DilocoOps : public ::testing::TestWithParam<std::string> {};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
const float kNaN = std::nanf("");

// Theta in `dtype` (raw 16-bit or 32-bit words) and its f32 values.
struct Theta {
  std::vector<float> f32;       // the values, exactly representable in dtype
  std::vector<uint16_t> half;   // f16 / bf16 bits
};
Theta random_theta(tc_dtype dtype, size_t n) {
  Theta t;
  t.f32 = randn(n);
  if (dtype == TC_DTYPE_F32) return t;
  t.half.resize(n);
  for (size_t i = 0; i < n; ++i) {
    t.half[i] = dtype == TC_DTYPE_F16 ? tc::f32_to_f16(t.f32[i]) : tc::f32_to_bf16(t.f32[i]);
    t.f32[i] = dtype == TC_DTYPE_F16 ? tc::f16_to_f32(t.half[i]) : tc::bf16_to_f32(t.half[i]);
  }
  return t;
}
uint16_t narrow_bits(tc_dtype dtype, float v) { return dtype == TC_DTYPE_F16 ? tc::f32_to_f16(v) : tc::f32_to_bf16(v); }
float widen_bits(tc_dtype dtype, uint16_t h) { return dtype == TC_DTYPE_F16 ? tc::f16_to_f32(h) : tc::bf16_to_f32(h); }

// |got - want| within f32 rounding of a few operations on values of `scale`.
void expect_close(double got, double want, double scale, const char* what, size_t i) {
  ASSERT_LE(std::fabs(got - want), 1e-5 * (std::fabs(want) + scale)) << what << " at " << i;
}

TEST_P(DilocoOps, PrepareEveryModeAndDtype) {
  Dev dev(GetParam());
  const size_t n = 5000;
  for (tc_dtype dtype : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16})
    for (int mode : {tc::DilocoPrepareArgs::kDelta, tc::DilocoPrepareArgs::kFp16, tc::DilocoPrepareArgs::kErrorFeedback})
      for (int32_t world : {1, 3}) {
        SCOPED_TRACE("dtype " + std::to_string(dtype) + " mode " + std::to_string(mode) + " world " +
                     std::to_string(world));
        const Theta theta = random_theta(dtype, n);
        const std::vector<float> anchor = randn(n), residual = randn(n, 0.01f);
        tc::DilocoPrepareArgs a;
        a.info.name = "test.diloco_prepare";
        a.n = int64_t(n);
        a.mode = mode;
        a.world = world;
        a.dtype = dtype;
        a.theta = dtype == TC_DTYPE_F32 ? static_cast<const void*>(dev.put(theta.f32)) : dev.put(theta.half);
        a.anchor = dev.put(anchor);
        a.residual = dev.put(residual);
        a.out = dev.put(std::vector<float>(n, kNaN));
        uint16_t* q = dev.put(std::vector<uint16_t>(n, 0xFFFF));
        if (mode == tc::DilocoPrepareArgs::kFp16) a.q = q;
        ASSERT_EQ(dev.be().diloco_prepare(a, nullptr), TC_OK);
        const auto out = dev.get(a.out, n);
        const auto qb = dev.get(q, n);
        const float inv = 1.0f / float(world);
        for (size_t i = 0; i < n; ++i) {
          const float delta = anchor[i] - theta.f32[i];  // the host path's f32 formulas
          const double delta64 = double(anchor[i]) - double(theta.f32[i]);
          if (mode == tc::DilocoPrepareArgs::kDelta) {
            ASSERT_EQ(bits(out[i]), bits(delta)) << i;
            expect_close(out[i], delta64, 1.0, "delta", i);
          } else if (mode == tc::DilocoPrepareArgs::kFp16) {
            const float s = (delta + residual[i]) * inv;
            const uint16_t h = tc::f32_to_f16(s);
            ASSERT_EQ(qb[i], h) << i;
            ASSERT_EQ(bits(out[i]), bits((s - tc::f16_to_f32(h)) * float(world))) << i;
            // f64: the payload is u/n to f16 precision and the residual keeps the rest.
            const double u64 = delta64 + double(residual[i]);
            expect_close(tc::f16_to_f32(qb[i]) * double(world) + out[i], u64, 1.0, "payload + residual", i);
          } else {
            ASSERT_EQ(bits(out[i]), bits(delta + residual[i])) << i;
            expect_close(out[i], delta64 + double(residual[i]), 1.0, "u", i);
          }
        }
      }
}

// The host path's choice: indices by (|u| descending, index ascending), the
// first k, in index order.
std::vector<uint32_t> reference_topk(const std::vector<float>& u, size_t k) {
  std::vector<uint32_t> idx(u.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
    const double fa = std::fabs(double(u[a])), fb = std::fabs(double(u[b]));
    return fa > fb || (fa == fb && a < b);
  });
  idx.resize(k);
  std::sort(idx.begin(), idx.end());
  return idx;
}

TEST_P(DilocoOps, TopkWithTiesKOneAndKN) {
  Dev dev(GetParam());
  struct Case {
    size_t n, k;
    bool ties;
  };
  const std::vector<Case> cases = {{1, 1, false},      {7, 1, true},        {7, 7, true},          {1000, 10, false},
                                   {1000, 1000, true}, {4096, 41, true},    {4097, 4097, false},   {12289, 123, true},
                                   {70001, 701, true}, {70001, 1, true},    {100003, 101, false},  {9000, 4500, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " k " + std::to_string(c.k) + (c.ties ? " ties" : ""));
    std::vector<float> u = randn(c.n);
    if (c.ties) {  // few magnitudes, both signs, and zeros: many ties at the threshold
      std::uniform_int_distribution<int> v(-4, 4);
      for (float& x : u) x = 0.25f * float(v(rng()));
    }
    tc::DilocoTopkArgs a;
    a.info.name = "test.diloco_topk";
    a.n = int64_t(c.n);
    a.k = int64_t(c.k);
    a.u = dev.put(u);
    a.pairs = dev.put(std::vector<float>(2 * c.k, kNaN));
    ASSERT_EQ(dev.be().diloco_topk(a, nullptr), TC_OK);
    const auto pairs = dev.get(a.pairs, 2 * c.k);
    const auto residual = dev.get(a.u, c.n);
    const std::vector<uint32_t> want = reference_topk(u, c.k);
    std::vector<float> want_residual = u;
    for (size_t j = 0; j < c.k; ++j) {
      ASSERT_EQ(bits(pairs[2 * j]), want[j]) << "pair " << j;
      ASSERT_EQ(bits(pairs[2 * j + 1]), bits(u[want[j]])) << "pair " << j;
      want_residual[want[j]] = 0.0f;
    }
    for (size_t i = 0; i < c.n; ++i) ASSERT_EQ(bits(residual[i]), bits(want_residual[i])) << i;
  }
}

TEST_P(DilocoOps, CombineRanksInOrder) {
  Dev dev(GetParam());
  const size_t n = 3000, k = 200;
  const int32_t world = 3;
  std::vector<float> pairs(size_t(world) * 2 * k);
  std::vector<uint32_t> all(n + 5);
  std::iota(all.begin(), all.end(), 0u);
  for (int32_t r = 0; r < world; ++r) {
    std::shuffle(all.begin(), all.end(), rng());
    std::vector<uint32_t> idx(all.begin(), all.begin() + k);  // distinct within a rank; may pass n
    std::sort(idx.begin(), idx.end());
    const std::vector<float> v = randn(k);
    for (size_t j = 0; j < k; ++j) {
      std::memcpy(&pairs[(size_t(r) * k + j) * 2], &idx[j], 4);
      pairs[(size_t(r) * k + j) * 2 + 1] = v[j];
    }
  }
  tc::DilocoCombineArgs a;
  a.info.name = "test.diloco_combine";
  a.n = int64_t(n);
  a.k = int64_t(k);
  a.world = world;
  a.pairs = dev.put(pairs);
  a.g = dev.put(std::vector<float>(n, kNaN));
  ASSERT_EQ(dev.be().diloco_combine(a, nullptr), TC_OK);
  const auto g = dev.get(a.g, n);
  std::vector<float> want(n, 0.0f);
  std::vector<double> want64(n, 0.0);
  const float inv = 1.0f / float(world);
  for (int32_t r = 0; r < world; ++r)
    for (size_t j = 0; j < k; ++j) {
      uint32_t i;
      std::memcpy(&i, &pairs[(size_t(r) * k + j) * 2], 4);
      const float v = pairs[(size_t(r) * k + j) * 2 + 1];
      if (i >= n) continue;
      want[i] += v * inv;
      want64[i] += double(v) / world;
    }
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits(g[i]), bits(want[i])) << i;
    expect_close(g[i], want64[i], 1.0, "g", i);
  }
}

TEST_P(DilocoOps, UpdateEveryOptimizerAndDtype) {
  Dev dev(GetParam());
  const size_t n = 6000;
  const float lr = 0.7f, mu = 0.9f, b2 = 0.99f, eps = 1e-8f;
  for (int32_t opt : {TC_DILOCO_OUTER_SGD, TC_DILOCO_OUTER_NESTEROV, TC_DILOCO_OUTER_ADAM})
    for (int theta_kind : {0, 1, 2, 3})  // no theta, f32, f16, bf16
      for (uint64_t t : {uint64_t(0), uint64_t(3)}) {  // t = 0: no bias correction (bc <= 0)
        if (t == 0 && opt != TC_DILOCO_OUTER_ADAM) continue;
        const tc_dtype dtype = theta_kind == 2 ? TC_DTYPE_F16 : theta_kind == 3 ? TC_DTYPE_BF16 : TC_DTYPE_F32;
        SCOPED_TRACE("optimizer " + std::to_string(opt) + " theta " + std::to_string(theta_kind) + " t " +
                     std::to_string(t));
        const std::vector<float> g = randn(n, 0.1f), anchor = randn(n), m1 = randn(n, 0.1f);
        std::vector<float> m2 = randn(n, 0.01f);
        for (float& v : m2) v = std::fabs(v);
        const float bc1 = t ? float(1.0 - std::pow(double(mu), double(t))) : 0.0f;
        const float bc2 = t ? float(1.0 - std::pow(double(b2), double(t))) : 0.0f;
        tc::DilocoUpdateArgs a;
        a.info.name = "test.diloco_update";
        a.n = int64_t(n);
        a.optimizer = opt;
        a.lr = lr, a.mu = mu, a.beta2 = b2, a.eps = eps, a.bc1 = bc1, a.bc2 = bc2;
        a.g = dev.put(g);
        a.anchor = dev.put(anchor);
        a.m1 = dev.put(m1);
        a.m2 = dev.put(m2);
        a.dtype = dtype;
        float* theta32 = dev.put(std::vector<float>(n, kNaN));
        uint16_t* theta16 = dev.put(std::vector<uint16_t>(n, 0xFFFF));
        a.theta = theta_kind == 0 ? nullptr : theta_kind == 1 ? static_cast<void*>(theta32) : theta16;
        ASSERT_EQ(dev.be().diloco_update(a, nullptr), TC_OK);
        const auto got_a = dev.get(a.anchor, n), got_m1 = dev.get(a.m1, n), got_m2 = dev.get(a.m2, n);
        const auto got_t32 = dev.get(theta32, n);
        const auto got_t16 = dev.get(theta16, n);
        for (size_t i = 0; i < n; ++i) {
          float x = anchor[i], v1 = m1[i], v2 = m2[i];
          double x64 = anchor[i];
          if (opt == TC_DILOCO_OUTER_SGD) {
            x -= lr * g[i];
            x64 -= double(lr) * g[i];
          } else if (opt == TC_DILOCO_OUTER_NESTEROV) {
            v1 = mu * v1 + g[i];
            x -= lr * (g[i] + mu * v1);
            const double v64 = double(mu) * m1[i] + g[i];
            x64 -= double(lr) * (g[i] + double(mu) * v64);
            ASSERT_EQ(bits(got_m1[i]), bits(v1)) << i;
          } else {
            v1 = mu * v1 + (1.0f - mu) * g[i];
            v2 = b2 * v2 + (1.0f - b2) * g[i] * g[i];
            const float mh = bc1 > 0 ? v1 / bc1 : v1, vh = bc2 > 0 ? v2 / bc2 : v2;
            x -= lr * mh / (std::sqrt(vh) + eps);
            const double m64 = double(mu) * m1[i] + (1.0 - double(mu)) * g[i];
            const double w64 = double(b2) * m2[i] + (1.0 - double(b2)) * double(g[i]) * g[i];
            const double mh64 = bc1 > 0 ? m64 / bc1 : m64, vh64 = bc2 > 0 ? w64 / bc2 : w64;
            x64 -= double(lr) * mh64 / (std::sqrt(vh64) + eps);
            ASSERT_EQ(bits(got_m1[i]), bits(v1)) << i;
            ASSERT_EQ(bits(got_m2[i]), bits(v2)) << i;
          }
          ASSERT_EQ(bits(got_a[i]), bits(x)) << i;
          // Adam's step divides by sqrt(v) + eps: relative error grows where v is tiny.
          if (opt != TC_DILOCO_OUTER_ADAM) expect_close(got_a[i], x64, 1.0, "anchor", i);
          if (theta_kind == 0) {
            ASSERT_TRUE(std::isnan(got_t32[i]) && got_t16[i] == 0xFFFF) << "theta written without being asked, " << i;
          } else if (theta_kind == 1) {
            ASSERT_EQ(bits(got_t32[i]), bits(x)) << i;
          } else {
            ASSERT_EQ(got_t16[i], narrow_bits(dtype, x)) << i;
          }
        }
      }
}

TEST_P(DilocoOps, CommitKeepsLocalProgressOnTheNewAnchor) {
  Dev dev(GetParam());
  const size_t n = 5000;
  for (tc_dtype dtype : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16}) {
    SCOPED_TRACE("dtype " + std::to_string(dtype));
    const Theta theta = random_theta(dtype, n);
    const std::vector<float> anchor = randn(n), at_launch = randn(n);
    tc::DilocoCommitArgs a;
    a.info.name = "test.diloco_commit";
    a.n = int64_t(n);
    a.dtype = dtype;
    float* t32 = dtype == TC_DTYPE_F32 ? dev.put(theta.f32) : nullptr;
    uint16_t* t16 = dtype == TC_DTYPE_F32 ? nullptr : dev.put(theta.half);
    a.theta = t32 ? static_cast<void*>(t32) : t16;
    a.anchor = dev.put(anchor);
    a.theta_at_launch = dev.put(at_launch);
    ASSERT_EQ(dev.be().diloco_commit(a, nullptr), TC_OK);
    const auto got32 = t32 ? dev.get(t32, n) : std::vector<float>();
    const auto got16 = t16 ? dev.get(t16, n) : std::vector<uint16_t>();
    for (size_t i = 0; i < n; ++i) {
      const float want = anchor[i] + (theta.f32[i] - at_launch[i]);
      const double want64 = double(anchor[i]) + (double(theta.f32[i]) - at_launch[i]);
      if (t32) {
        ASSERT_EQ(bits(got32[i]), bits(want)) << i;
        expect_close(got32[i], want64, 1.0, "theta", i);
      } else {
        ASSERT_EQ(got16[i], narrow_bits(dtype, want)) << i;
        ASSERT_LE(std::fabs(widen_bits(dtype, got16[i]) - want64), 1e-2 * (std::fabs(want64) + 1.0)) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, DilocoOps, ::testing::ValuesIn(devices()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
