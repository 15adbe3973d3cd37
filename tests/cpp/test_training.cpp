// Training kernels through the C ABI against double-precision references,
// on every instruction-set path (TC_CPU_ISA caps it), plus bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "tensorcore/tensorcore.h"

namespace {

const tc_dtype kDtypes[] = {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16};
const char* const kIsas[] = {"native", "avx512", "avx2", "portable"};  // native: no cap

double tol(tc_dtype d) { return d == TC_DTYPE_F32 ? 2e-5 : d == TC_DTYPE_F16 ? 4e-3 : 2e-2; }

// Rounds a value through the dtype, as the kernel sees it.
float round_to(tc_dtype d, float v) {
  if (d == TC_DTYPE_F16) return tc::f16_to_f32(tc::f32_to_f16(v));
  if (d == TC_DTYPE_BF16) return tc::bf16_to_f32(tc::f32_to_bf16(v));
  return v;
}

class Training : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tc_init_device("cpu", &ctx_), TC_OK); }
  void TearDown() override {
    for (tc_buffer b : bufs_) tc_buffer_free(b);
    unsetenv("TC_CPU_ISA");
    EXPECT_EQ(tc_shutdown(ctx_), TC_OK);
  }

  // A buffer holding `v` rounded to dtype `d`; v is updated to the rounded values.
  tc_buffer upload(std::vector<float>& v, tc_dtype d) {
    const size_t es = d == TC_DTYPE_F32 ? 4 : 2;
    tc_buffer b = alloc(v.size() * es);
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = round_to(d, v[i]);
      if (d == TC_DTYPE_F16) h[i] = tc::f32_to_f16(v[i]);
      if (d == TC_DTYPE_BF16) h[i] = tc::f32_to_bf16(v[i]);
    }
    EXPECT_EQ(tc_buffer_write(b, 0, d == TC_DTYPE_F32 ? (const void*)v.data() : (const void*)h.data(), v.size() * es),
              TC_OK);
    return b;
  }
  // n elements of dtype d, filled with NaN.
  tc_buffer poisoned(size_t n, tc_dtype d) {
    std::vector<float> v(n, std::numeric_limits<float>::quiet_NaN());
    return upload(v, d);
  }
  std::vector<float> download(tc_buffer b, size_t n, tc_dtype d) {
    std::vector<float> v(n);
    if (d == TC_DTYPE_F32) {
      EXPECT_EQ(tc_buffer_read(b, 0, v.data(), n * 4), TC_OK);
    } else {
      std::vector<uint16_t> h(n);
      EXPECT_EQ(tc_buffer_read(b, 0, h.data(), n * 2), TC_OK);
      for (size_t i = 0; i < n; ++i) v[i] = d == TC_DTYPE_F16 ? tc::f16_to_f32(h[i]) : tc::bf16_to_f32(h[i]);
    }
    return v;
  }
  tc_buffer alloc(size_t bytes) {
    tc_buffer b = nullptr;
    EXPECT_EQ(tc_buffer_alloc(ctx_, bytes, &b), TC_OK);
    bufs_.push_back(b);
    return b;
  }
  std::vector<float> random(size_t n, float lo = -2.0f, float hi = 2.0f) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng_);
    return v;
  }
  // Every element finite and within tolerance of the reference, relative to
  // the reference's scale.
  // `scale` (default: the largest |want|) is the magnitude of the terms that
  // make up each element, for results that cancel.
  void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel, const std::string& what,
                    double scale = -1.0) {
    ASSERT_EQ(got.size(), want.size());
    if (scale < 0)
      for (double w : want) scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << " element " << i << " not written";
      ASSERT_NEAR(got[i], want[i], rel * (std::fabs(want[i]) + 0.1 * scale) + 1e-30) << what << " element " << i;
    }
  }
  void each_path(const std::function<void(tc_dtype, const std::string&)>& body) {
    for (const char* isa : kIsas) {
      if (std::string(isa) == "native") unsetenv("TC_CPU_ISA");
      else setenv("TC_CPU_ISA", isa, 1);
      for (tc_dtype d : kDtypes) body(d, std::string(isa) + "/" + tc_dtype_name(d));
    }
  }

  tc_context ctx_ = nullptr;
  std::vector<tc_buffer> bufs_;
  std::mt19937 rng_{1234};
};

TEST_F(Training, CapabilityBit) {
  struct tc_runtime_capabilities caps{};
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(ctx_, &caps), TC_OK);
  EXPECT_EQ(tc_capability_available(&caps, TC_CAPABILITY_TRAINING_KERNELS), 1);
}

TEST_F(Training, RmsNormForwardBackward) {
  each_path([&](tc_dtype d, const std::string& what) {
    for (int64_t D : {1, 7, 65, 300}) {
      const int64_t N = 5;
      auto x = random(N * D), g = random(D, 0.5f, 1.5f), dy = random(N * D);
      tc_buffer bx = upload(x, d), bg = upload(g, d), bdy = upload(dy, d);
      tc_buffer by = poisoned(N * D, d), br = poisoned(N, TC_DTYPE_F32);
      ASSERT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, N, D, 1e-5f, d), TC_OK);
      std::vector<double> y(N * D), r(N), dx(N * D), dg(D, 0.0);
      for (int64_t i = 0; i < N; ++i) {
        double ss = 0, dot = 0;
        for (int64_t j = 0; j < D; ++j) ss += double(x[i * D + j]) * x[i * D + j];
        r[i] = 1.0 / std::sqrt(ss / D + 1e-5);
        for (int64_t j = 0; j < D; ++j) {
          y[i * D + j] = x[i * D + j] * r[i] * g[j];
          dot += double(dy[i * D + j]) * g[j] * x[i * D + j];
          dg[j] += double(dy[i * D + j]) * x[i * D + j] * r[i];
        }
        for (int64_t j = 0; j < D; ++j)
          dx[i * D + j] = r[i] * (g[j] * dy[i * D + j] - x[i * D + j] * r[i] * r[i] * dot / D);
      }
      expect_close(download(by, N * D, d), y, tol(d), what + " rmsnorm y");
      expect_close(download(br, N, TC_DTYPE_F32), r, 1e-5, what + " rmsnorm rstd");
      // Backward from the reference rstd (f32), so only the backward maths is measured.
      std::vector<float> rf(r.begin(), r.end());
      tc_buffer brr = upload(rf, TC_DTYPE_F32);
      tc_buffer bdx = poisoned(N * D, d), bdg = poisoned(D, TC_DTYPE_F32);
      ASSERT_EQ(tc_rmsnorm_backward(ctx_, bx, bg, bdy, brr, bdx, bdg, N, D, d), TC_OK);
      double terms = 0;  // |r g dy|, the size of each of dx's two terms
      for (int64_t i = 0; i < N * D; ++i) terms = std::max(terms, std::fabs(r[i / D] * g[i % D] * dy[i]));
      expect_close(download(bdx, N * D, d), dx, tol(d), what + " rmsnorm dx", terms);
      expect_close(download(bdg, D, TC_DTYPE_F32), dg, 1e-5, what + " rmsnorm dgamma");
    }
  });
}

TEST_F(Training, LayerNormForwardBackward) {
  each_path([&](tc_dtype d, const std::string& what) {
    for (int64_t D : {1, 9, 130}) {
      const int64_t N = 4;
      auto x = random(N * D, 3.0f, 5.0f), g = random(D, 0.5f, 1.5f), b = random(D), dy = random(N * D);
      tc_buffer bx = upload(x, d), bg = upload(g, d), bb = upload(b, d), bdy = upload(dy, d);
      tc_buffer by = poisoned(N * D, d), bm = poisoned(N, TC_DTYPE_F32), br = poisoned(N, TC_DTYPE_F32);
      ASSERT_EQ(tc_layernorm_forward(ctx_, bx, bg, bb, by, bm, br, N, D, 1e-5f, d), TC_OK);
      std::vector<double> y(N * D), mu(N), r(N), dx(N * D), dg(D, 0.0), db(D, 0.0);
      for (int64_t i = 0; i < N; ++i) {
        double s = 0, v = 0, m1 = 0, m2 = 0;
        for (int64_t j = 0; j < D; ++j) s += x[i * D + j];
        mu[i] = s / D;
        for (int64_t j = 0; j < D; ++j) v += (x[i * D + j] - mu[i]) * (x[i * D + j] - mu[i]);
        r[i] = 1.0 / std::sqrt(v / D + 1e-5);
        for (int64_t j = 0; j < D; ++j) {
          double xh = (x[i * D + j] - mu[i]) * r[i];
          y[i * D + j] = xh * g[j] + b[j];
          m1 += double(dy[i * D + j]) * g[j] / D;
          m2 += double(dy[i * D + j]) * g[j] * xh / D;
          dg[j] += dy[i * D + j] * xh;
          db[j] += dy[i * D + j];
        }
        for (int64_t j = 0; j < D; ++j) {
          double xh = (x[i * D + j] - mu[i]) * r[i];
          dx[i * D + j] = r[i] * (dy[i * D + j] * g[j] - m1 - xh * m2);
        }
      }
      expect_close(download(by, N * D, d), y, tol(d), what + " layernorm y");
      expect_close(download(bm, N, TC_DTYPE_F32), mu, 1e-6, what + " layernorm mean");
      if (D > 1) expect_close(download(br, N, TC_DTYPE_F32), r, 1e-4, what + " layernorm rstd");
      std::vector<float> muf(mu.begin(), mu.end()), rf(r.begin(), r.end());
      tc_buffer bmu = upload(muf, TC_DTYPE_F32), brr = upload(rf, TC_DTYPE_F32);
      tc_buffer bdx = poisoned(N * D, d), bdg = poisoned(D, TC_DTYPE_F32), bdb = poisoned(D, TC_DTYPE_F32);
      ASSERT_EQ(tc_layernorm_backward(ctx_, bx, bg, bdy, bmu, brr, bdx, bdg, bdb, N, D, d), TC_OK);
      if (D > 1) expect_close(download(bdx, N * D, d), dx, tol(d) * 4, what + " layernorm dx");
      if (D > 1) expect_close(download(bdg, D, TC_DTYPE_F32), dg, 1e-4, what + " layernorm dgamma");
      expect_close(download(bdb, D, TC_DTYPE_F32), db, 1e-5, what + " layernorm dbeta");
    }
  });
}

TEST_F(Training, RopeBothConventions) {
  each_path([&](tc_dtype d, const std::string& what) {
    for (int interleaved : {0, 1}) {
      for (int64_t hd : {2, 6, 64, 130}) {
        const int64_t B = 2, H = 3, S = 5;
        auto x = random(B * H * S * hd);
        std::vector<float> c(S * hd / 2), s(S * hd / 2);
        for (int64_t p = 0; p < S; ++p)
          for (int64_t k = 0; k < hd / 2; ++k) {
            double th = p * std::pow(10000.0, -2.0 * k / hd);
            c[p * hd / 2 + k] = float(std::cos(th));
            s[p * hd / 2 + k] = float(std::sin(th));
          }
        tc_buffer bx = upload(x, d), bc = upload(c, TC_DTYPE_F32), bs = upload(s, TC_DTYPE_F32);
        std::vector<double> y(x.begin(), x.end());
        for (int64_t r = 0; r < B * H * S; ++r) {
          const int64_t p = r % S;
          for (int64_t k = 0; k < hd / 2; ++k) {
            int64_t i1 = interleaved ? r * hd + 2 * k : r * hd + k;
            int64_t i2 = interleaved ? i1 + 1 : i1 + hd / 2;
            double cv = c[p * hd / 2 + k], sv = s[p * hd / 2 + k];
            y[i1] = x[i1] * cv - x[i2] * sv;
            y[i2] = x[i2] * cv + x[i1] * sv;
          }
        }
        tc_rope_desc desc{B, H, S, hd, d, interleaved};
        ASSERT_EQ(tc_rope_forward(ctx_, bx, bc, bs, &desc), TC_OK);
        auto got = download(bx, x.size(), d);
        expect_close(got, y, tol(d), what + " rope forward");
        ASSERT_EQ(tc_rope_backward(ctx_, bx, bc, bs, &desc), TC_OK);
        std::vector<double> xd(x.begin(), x.end());
        expect_close(download(bx, x.size(), d), xd, tol(d) * 2, what + " rope forward+backward");
      }
    }
  });
}

TEST_F(Training, SwigluAndSoftmax) {
  each_path([&](tc_dtype d, const std::string& what) {
    for (int64_t n : {1, 15, 17, 1000}) {
      auto g = random(n, -6.0f, 6.0f), u = random(n), dout = random(n);
      tc_buffer bg = upload(g, d), bu = upload(u, d), bdo = upload(dout, d);
      tc_buffer bo = poisoned(n, d), bdg = poisoned(n, d), bdu = poisoned(n, d);
      ASSERT_EQ(tc_swiglu_forward(ctx_, bg, bu, bo, n, d), TC_OK);
      ASSERT_EQ(tc_swiglu_backward(ctx_, bg, bu, bdo, bdg, bdu, n, d), TC_OK);
      std::vector<double> o(n), dg(n), du(n);
      for (int64_t i = 0; i < n; ++i) {
        double s = 1.0 / (1.0 + std::exp(-double(g[i])));
        o[i] = g[i] * s * u[i];
        dg[i] = dout[i] * u[i] * s * (1 + g[i] * (1 - s));
        du[i] = dout[i] * g[i] * s;
      }
      expect_close(download(bo, n, d), o, tol(d), what + " swiglu out");
      expect_close(download(bdg, n, d), dg, tol(d), what + " swiglu dgate");
      expect_close(download(bdu, n, d), du, tol(d), what + " swiglu dup");
    }
    for (int64_t D : {1, 7, 33, 500}) {
      const int64_t N = 3;
      auto x = random(N * D, -10.0f, 10.0f), dy = random(N * D);
      tc_buffer bx = upload(x, d), bdy = upload(dy, d), by = poisoned(N * D, d);
      ASSERT_EQ(tc_softmax_forward(ctx_, bx, by, N, D, d), TC_OK);
      std::vector<double> y(N * D), dx(N * D);
      for (int64_t i = 0; i < N; ++i) {
        double m = -INFINITY, s = 0, dot = 0;
        for (int64_t j = 0; j < D; ++j) m = std::max(m, double(x[i * D + j]));
        for (int64_t j = 0; j < D; ++j) s += std::exp(x[i * D + j] - m);
        for (int64_t j = 0; j < D; ++j) y[i * D + j] = std::exp(x[i * D + j] - m) / s;
        for (int64_t j = 0; j < D; ++j) dot += y[i * D + j] * dy[i * D + j];
        for (int64_t j = 0; j < D; ++j) dx[i * D + j] = y[i * D + j] * (dy[i * D + j] - dot);
      }
      auto yk = download(by, N * D, d);
      expect_close(yk, y, tol(d), what + " softmax y");
      // Backward from the rounded reference Y, as a caller would hold it.
      std::vector<float> yf(y.begin(), y.end());
      tc_buffer byr = upload(yf, d), bdx = poisoned(N * D, d);
      for (int64_t i = 0; i < N; ++i) {
        double dot = 0;
        for (int64_t j = 0; j < D; ++j) dot += double(yf[i * D + j]) * dy[i * D + j];
        for (int64_t j = 0; j < D; ++j) dx[i * D + j] = yf[i * D + j] * (dy[i * D + j] - dot);
      }
      ASSERT_EQ(tc_softmax_backward(ctx_, byr, bdy, bdx, N, D, d), TC_OK);
      expect_close(download(bdx, N * D, d), dx, tol(d), what + " softmax dx");
    }
  });
}

TEST_F(Training, AdamwSteps) {
  each_path([&](tc_dtype gd, const std::string& what) {
    const int64_t n = 37;
    auto p = random(n), g = random(n);
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    tc_buffer bp = upload(p, TC_DTYPE_F32), bm = upload(m, TC_DTYPE_F32), bv = upload(v, TC_DTYPE_F32);
    tc_buffer bg = upload(g, gd);
    std::vector<double> P(p.begin(), p.end()), M(n, 0.0), Vv(n, 0.0);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    for (int t = 1; t <= 3; ++t) {
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      tc_adamw_desc desc{n, gd, lr, b1, b2, eps, wd, bc1, bc2};
      ASSERT_EQ(tc_adamw_step(ctx_, bp, bm, bv, bg, &desc), TC_OK);
      for (int64_t i = 0; i < n; ++i) {
        M[i] = b1 * M[i] + (1 - b1) * g[i];
        Vv[i] = b2 * Vv[i] + (1 - b2) * double(g[i]) * g[i];
        P[i] -= lr * ((M[i] / bc1) / (std::sqrt(Vv[i] / bc2) + eps) + wd * P[i]);
      }
    }
    expect_close(download(bp, n, TC_DTYPE_F32), P, 1e-5, what + " adamw p");
    expect_close(download(bm, n, TC_DTYPE_F32), M, 1e-5, what + " adamw m");
    expect_close(download(bv, n, TC_DTYPE_F32), Vv, 1e-5, what + " adamw v");
  });
}

TEST_F(Training, FusedNormGemv) {
  each_path([&](tc_dtype d, const std::string& what) {
    for (int ln = 0; ln < 2; ++ln) {
      for (auto mnk : {std::vector<int64_t>{1, 5, 7}, {3, 9, 40}, {6, 13, 100}}) {
        const int64_t M = mnk[0], N = mnk[1], K = mnk[2];
        auto x = random(M * K, ln ? 2.0f : -2.0f, 4.0f), g = random(K, 0.5f, 1.5f), b = random(K), w = random(N * K);
        tc_buffer bx = upload(x, d), bg = upload(g, d), bb = upload(b, d), bw = upload(w, d), by = poisoned(M * N, d);
        if (ln) ASSERT_EQ(tc_fused_layernorm_gemv(ctx_, bx, bg, bb, bw, by, M, N, K, 1e-5f, d), TC_OK);
        else ASSERT_EQ(tc_fused_rmsnorm_gemv(ctx_, bx, bg, bw, by, M, N, K, 1e-5f, d), TC_OK);
        std::vector<double> y(M * N, 0.0), xn(K);
        for (int64_t i = 0; i < M; ++i) {
          double mu = 0, v = 0;
          if (ln) {
            for (int64_t k = 0; k < K; ++k) mu += x[i * K + k] / double(K);
          }
          for (int64_t k = 0; k < K; ++k) v += (x[i * K + k] - mu) * (x[i * K + k] - mu) / K;
          const double r = 1.0 / std::sqrt(v + 1e-5);
          for (int64_t k = 0; k < K; ++k) xn[k] = (x[i * K + k] - mu) * r * g[k] + (ln ? b[k] : 0.0);
          for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) y[i * N + n] += xn[k] * w[n * K + k];
        }
        expect_close(download(by, M * N, d), y, tol(d) * 2, what + (ln ? " fused layernorm" : " fused rmsnorm"));
      }
    }
  });
}

// Bad input: the right status, nothing written.
TEST_F(Training, BadInputLeavesBuffersUntouched) {
  const int64_t N = 4, D = 8;
  std::vector<float> x = random(N * D), g = random(D);
  tc_buffer bx = upload(x, TC_DTYPE_F32), bg = upload(g, TC_DTYPE_F32);
  tc_buffer by = poisoned(N * D, TC_DTYPE_F32), br = poisoned(N, TC_DTYPE_F32);
  auto untouched = [&] {
    for (float v : download(by, N * D, TC_DTYPE_F32)) ASSERT_TRUE(std::isnan(v));
    for (float v : download(br, N, TC_DTYPE_F32)) ASSERT_TRUE(std::isnan(v));
  };
  EXPECT_EQ(tc_rmsnorm_forward(nullptr, bx, bg, by, br, N, D, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, nullptr, bg, by, br, N, D, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, N, D, 1e-5f, TC_DTYPE_I8), TC_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, 0, D, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, N, INT64_MAX / 2, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, N + 1, D, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, N, D, -1.0f, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, br, N, D, NAN, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, bx, bg, by, by, N, D, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_ARG);  // rstd in Y
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, by, bg, by, br, N, D, 1e-5f, TC_DTYPE_F32), TC_OK);  // in place is allowed
  for (float& v : x) v = NAN;
  tc_buffer_write(by, 0, x.data(), x.size() * 4);
  tc_buffer_write(br, 0, x.data(), N * 4);
  untouched();

  tc_context other = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &other), TC_OK);
  tc_buffer foreign = nullptr;
  ASSERT_EQ(tc_buffer_alloc(other, 4096, &foreign), TC_OK);
  EXPECT_EQ(tc_rmsnorm_forward(ctx_, foreign, bg, by, br, N, D, 1e-5f, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  tc_buffer_free(foreign);
  tc_shutdown(other);
  untouched();

  // RoPE: odd head_dim, bad flag, short table, table inside X.
  tc_buffer tab = poisoned(64, TC_DTYPE_F32);
  tc_rope_desc rd{1, 1, 4, 7, TC_DTYPE_F32, 0};
  EXPECT_EQ(tc_rope_forward(ctx_, by, tab, tab, &rd), TC_ERR_INVALID_SHAPE);
  rd.head_dim = 8;
  rd.interleaved = 2;
  EXPECT_EQ(tc_rope_forward(ctx_, by, tab, tab, &rd), TC_ERR_INVALID_ARG);
  rd.interleaved = 1;
  rd.seq = 40;
  EXPECT_EQ(tc_rope_forward(ctx_, by, tab, tab, &rd), TC_ERR_INVALID_ARG);
  rd.seq = 4;
  EXPECT_EQ(tc_rope_forward(ctx_, by, by, tab, &rd), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_rope_forward(ctx_, by, tab, tab, nullptr), TC_ERR_INVALID_ARG);
  untouched();

  // AdamW: hyper-parameters and aliasing.
  tc_adamw_desc ad{N, TC_DTYPE_F32, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.1f, 0.001f};
  tc_buffer m = poisoned(N, TC_DTYPE_F32), v = poisoned(N, TC_DTYPE_F32);
  ad.beta1 = 1.0f;
  EXPECT_EQ(tc_adamw_step(ctx_, br, m, v, bx, &ad), TC_ERR_INVALID_ARG);
  ad.beta1 = 0.9f;
  ad.bias_correction1 = 0.0f;
  EXPECT_EQ(tc_adamw_step(ctx_, br, m, v, bx, &ad), TC_ERR_INVALID_ARG);
  ad.bias_correction1 = 0.1f;
  EXPECT_EQ(tc_adamw_step(ctx_, br, m, m, bx, &ad), TC_ERR_INVALID_ARG);
  ad.grad_dtype = TC_DTYPE_I32;
  EXPECT_EQ(tc_adamw_step(ctx_, br, m, v, bx, &ad), TC_ERR_UNSUPPORTED_DTYPE);
  untouched();

  // SwiGLU: dgate and dup may not be the same memory.
  EXPECT_EQ(tc_swiglu_backward(ctx_, bx, bx, bx, by, by, N, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  // Softmax: Y partly overlapping X is refused, exactly X is fine.
  std::vector<float> host(2 * N * D, NAN);
  tc_buffer lo = nullptr, hi = nullptr;
  ASSERT_EQ(tc_buffer_from_ptr(ctx_, host.data(), N * D * 4, &lo), TC_OK);
  ASSERT_EQ(tc_buffer_from_ptr(ctx_, host.data() + 3, N * D * 4, &hi), TC_OK);
  bufs_.push_back(lo);
  bufs_.push_back(hi);
  EXPECT_EQ(tc_softmax_forward(ctx_, lo, hi, N, D, TC_DTYPE_F32), TC_ERR_INVALID_ARG);
  for (float f : host) EXPECT_TRUE(std::isnan(f));
  untouched();
}

}  // namespace
