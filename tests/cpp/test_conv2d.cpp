// conv2d through the C ABI against a direct double-precision reference.
// (The Python suite covers more shapes, finite differences and bad input.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/half.h"
#include "own_sgemm.h"
#include "tensorcore/tensorcore.h"

namespace {

struct Shape {
  int64_t N, C, K, H, W, kH, kW, ph, pw, sh, sw;
};

tc_conv2d_desc make_desc(const Shape& s, tc_dtype dtype) {
  tc_conv2d_desc d{};
  d.batch = s.N;
  d.in_channels = s.C;
  d.out_channels = s.K;
  d.H = s.H;
  d.W = s.W;
  d.kH = s.kH;
  d.kW = s.kW;
  d.pad_h = s.ph;
  d.pad_w = s.pw;
  d.stride_h = s.sh;
  d.stride_w = s.sw;
  d.dtype = dtype;
  return d;
}

// Direct loops in double over the padded input.
struct Reference {
  Shape s;
  int64_t OH, OW;
  explicit Reference(const Shape& sh) : s(sh) {
    OH = (s.H + 2 * s.ph - s.kH) / s.sh + 1;
    OW = (s.W + 2 * s.pw - s.kW) / s.sw + 1;
  }
  template <class F>
  void taps(F&& f) const {  // f(n, o, c, i, j, y, x, iy, ix) for taps inside X
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t o = 0; o < s.K; ++o)
        for (int64_t c = 0; c < s.C; ++c)
          for (int64_t i = 0; i < s.kH; ++i)
            for (int64_t j = 0; j < s.kW; ++j)
              for (int64_t y = 0; y < OH; ++y)
                for (int64_t x = 0; x < OW; ++x) {
                  int64_t iy = y * s.sh - s.ph + i, ix = x * s.sw - s.pw + j;
                  if (iy >= 0 && iy < s.H && ix >= 0 && ix < s.W) f(n, o, c, i, j, y, x, iy, ix);
                }
  }
  int64_t xi(int64_t n, int64_t c, int64_t iy, int64_t ix) const { return ((n * s.C + c) * s.H + iy) * s.W + ix; }
  int64_t wi(int64_t o, int64_t c, int64_t i, int64_t j) const { return ((o * s.C + c) * s.kH + i) * s.kW + j; }
  int64_t yi(int64_t n, int64_t o, int64_t y, int64_t x) const { return ((n * s.K + o) * OH + y) * OW + x; }

  std::vector<double> forward(const std::vector<double>& X, const std::vector<double>& Wt,
                              const std::vector<double>* bias) const {
    std::vector<double> Y(size_t(s.N * s.K * OH * OW), 0.0);
    if (bias)
      for (size_t k = 0; k < Y.size(); ++k) Y[k] = (*bias)[(k / size_t(OH * OW)) % size_t(s.K)];
    taps([&](auto n, auto o, auto c, auto i, auto j, auto y, auto x, auto iy, auto ix) {
      Y[size_t(yi(n, o, y, x))] += Wt[size_t(wi(o, c, i, j))] * X[size_t(xi(n, c, iy, ix))];
    });
    return Y;
  }
  std::vector<double> backward_input(const std::vector<double>& dY, const std::vector<double>& Wt) const {
    std::vector<double> dX(size_t(s.N * s.C * s.H * s.W), 0.0);
    taps([&](auto n, auto o, auto c, auto i, auto j, auto y, auto x, auto iy, auto ix) {
      dX[size_t(xi(n, c, iy, ix))] += Wt[size_t(wi(o, c, i, j))] * dY[size_t(yi(n, o, y, x))];
    });
    return dX;
  }
  std::vector<double> backward_weight(const std::vector<double>& X, const std::vector<double>& dY) const {
    std::vector<double> dW(size_t(s.K * s.C * s.kH * s.kW), 0.0);
    taps([&](auto n, auto o, auto c, auto i, auto j, auto y, auto x, auto iy, auto ix) {
      dW[size_t(wi(o, c, i, j))] += X[size_t(xi(n, c, iy, ix))] * dY[size_t(yi(n, o, y, x))];
    });
    return dW;
  }
};

class Conv2d : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(tc_init_device("cpu", &ctx_), TC_OK); }
  void TearDown() override {
    for (tc_buffer b : bufs_) tc_buffer_free(b);
    EXPECT_EQ(tc_shutdown(ctx_), TC_OK);
  }

  // A buffer holding `v` in `dtype` (values rounded to it first, in place).
  tc_buffer upload(std::vector<double>& v, tc_dtype dtype) {
    tc_buffer b = alloc(v.size() * (dtype == TC_DTYPE_F16 ? 2 : 4));
    if (dtype == TC_DTYPE_F16) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        h[i] = tc::f32_to_f16(float(v[i]));
        v[i] = tc::f16_to_f32(h[i]);
      }
      EXPECT_EQ(tc_buffer_write(b, 0, h.data(), h.size() * 2), TC_OK);
    } else {
      std::vector<float> f(v.begin(), v.end());
      for (size_t i = 0; i < v.size(); ++i) v[i] = f[i];
      EXPECT_EQ(tc_buffer_write(b, 0, f.data(), f.size() * 4), TC_OK);
    }
    return b;
  }
  // An output or scratch buffer filled with NaN.
  tc_buffer poisoned(size_t nbytes) {
    tc_buffer b = alloc(nbytes);
    std::vector<uint8_t> nan(nbytes, 0xff);  // all-ones is a NaN in f16 and f32
    EXPECT_EQ(tc_buffer_write(b, 0, nan.data(), nbytes), TC_OK);
    return b;
  }
  std::vector<double> download(tc_buffer b, size_t n, tc_dtype dtype) {
    std::vector<double> out(n);
    if (dtype == TC_DTYPE_F16) {
      std::vector<uint16_t> h(n);
      EXPECT_EQ(tc_buffer_read(b, 0, h.data(), n * 2), TC_OK);
      for (size_t i = 0; i < n; ++i) out[i] = tc::f16_to_f32(h[i]);
    } else {
      std::vector<float> f(n);
      EXPECT_EQ(tc_buffer_read(b, 0, f.data(), n * 4), TC_OK);
      for (size_t i = 0; i < n; ++i) out[i] = f[i];
    }
    return out;
  }
  tc_buffer alloc(size_t nbytes) {
    tc_buffer b = nullptr;
    EXPECT_EQ(tc_buffer_alloc(ctx_, nbytes, &b), TC_OK);
    bufs_.push_back(b);
    return b;
  }
  std::vector<double> random(size_t n) {
    std::normal_distribution<double> dist;
    std::vector<double> v(n);
    for (double& x : v) x = dist(rng_);
    return v;
  }
  // |got - want| <= tol * (1 + |want|) for every element (NaN fails).
  static void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                           const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_TRUE(std::fabs(got[i] - want[i]) <= tol * (1.0 + std::fabs(want[i])))
          << what << "[" << i << "] = " << got[i] << ", want " << want[i];
  }

  void check(const Shape& s, tc_dtype dtype, bool with_bias) {
    const Reference ref(s);
    tc_conv2d_desc d = make_desc(s, dtype);
    uint64_t col_bytes = 0, dx_bytes = 0;
    ASSERT_EQ(tc_conv2d_scratch_bytes(&d, &col_bytes), TC_OK);
    ASSERT_EQ(tc_conv2d_backward_input_scratch_bytes(&d, &dx_bytes), TC_OK);
    EXPECT_EQ(col_bytes, uint64_t(s.N * s.C * s.kH * s.kW * ref.OH * ref.OW * 4));
    EXPECT_EQ(dx_bytes, uint64_t(s.N * s.C * s.H * s.W * 4));
    const size_t nx = size_t(s.N * s.C * s.H * s.W), nw = size_t(s.K * s.C * s.kH * s.kW),
                 ny = size_t(s.N * s.K * ref.OH * ref.OW), es = dtype == TC_DTYPE_F16 ? 2 : 4;
    std::vector<double> X = random(nx), Wt = random(nw), bias = random(size_t(s.K)), dY = random(ny);
    tc_buffer bX = upload(X, dtype), bW = upload(Wt, dtype), bB = upload(bias, dtype), bdY = upload(dY, dtype);
    tc_buffer bY = poisoned(ny * es), bdX = poisoned(nx * es), bdW = poisoned(nw * es);
    tc_buffer col = poisoned(col_bytes), dx32 = poisoned(dx_bytes);
    const double tol = dtype == TC_DTYPE_F16 ? 1e-2 : 1e-5;
    // Sums of up to C*kH*kW products of unit normals: scale the tolerance.
    const double scale = std::sqrt(double(s.C * s.kH * s.kW)), scale_w = std::sqrt(double(s.N * ref.OH * ref.OW));

    ASSERT_EQ(tc_conv2d_forward(ctx_, bX, bW, with_bias ? bB : nullptr, bY, col, &d), TC_OK);
    expect_close(download(bY, ny, dtype), ref.forward(X, Wt, with_bias ? &bias : nullptr), tol * scale, "Y");
    ASSERT_EQ(tc_conv2d_backward_input(ctx_, bdY, bW, bdX, col, dx32, &d), TC_OK);
    expect_close(download(bdX, nx, dtype), ref.backward_input(dY, Wt), tol * scale, "dX");
    ASSERT_EQ(tc_conv2d_backward_weight(ctx_, bX, bdY, bdW, col, &d), TC_OK);
    expect_close(download(bdW, nw, dtype), ref.backward_weight(X, dY), tol * scale_w, "dW");
    EXPECT_EQ(tc_last_backend(), TC_BACKEND_PORTABLE_CPU);
  }

  tc_context ctx_ = nullptr;
  std::vector<tc_buffer> bufs_;
  std::mt19937_64 rng_{1234};
};

const Shape kShapes[] = {
    {2, 3, 4, 7, 6, 3, 3, 1, 1, 1, 1},  // 3x3 pad 1
    {2, 5, 3, 6, 7, 1, 1, 0, 0, 1, 1},  // pointwise
    {1, 2, 3, 9, 8, 5, 3, 2, 0, 2, 2},  // non-square kernel, stride 2, asymmetric pads
    {3, 1, 2, 5, 5, 5, 5, 2, 2, 3, 1},  // pad = kernel/2, mixed strides
};

TEST_F(Conv2d, F32MatchesReference) {
  for (const Shape& s : kShapes) {
    check(s, TC_DTYPE_F32, true);
    check(s, TC_DTYPE_F32, false);
  }
}

TEST_F(Conv2d, F16MatchesReference) {
  for (const Shape& s : kShapes) check(s, TC_DTYPE_F16, true);
}

// The same on tensorcore's own f32 kernels (what a build without a BLAS runs),
// plus a shape whose products span several micro-tiles and depth chunks.
TEST_F(Conv2d, OwnSgemmMatchesReference) {
  OwnSgemm own;
  const Shape larger{2, 16, 33, 20, 19, 3, 3, 1, 1, 1, 1};
  for (tc_dtype dt : {TC_DTYPE_F32, TC_DTYPE_F16}) {
    for (const Shape& s : kShapes) check(s, dt, true);
    check(larger, dt, dt == TC_DTYPE_F32);
  }
}

TEST_F(Conv2d, Capability) {
  struct tc_runtime_capabilities caps{};
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(ctx_, &caps), TC_OK);
  EXPECT_TRUE(tc_capability_available(&caps, TC_CAPABILITY_CONV2D));
}

TEST_F(Conv2d, HelpersAndBadShapes) {
  int64_t oh = 0, ow = 0;
  ASSERT_EQ(tc_conv2d_output_shape(56, 56, 3, 3, 1, 1, 1, 1, &oh, &ow), TC_OK);
  EXPECT_EQ(oh, 56);
  EXPECT_EQ(ow, 56);
  ASSERT_EQ(tc_conv2d_output_shape(9, 8, 5, 3, 2, 0, 2, 2, &oh, &ow), TC_OK);
  EXPECT_EQ(oh, 5);
  EXPECT_EQ(ow, 3);
  EXPECT_EQ(tc_conv2d_output_shape(4, 4, 7, 1, 1, 0, 1, 1, &oh, &ow), TC_ERR_INVALID_SHAPE);  // 7 > 4 + 2
  EXPECT_EQ(tc_conv2d_output_shape(4, 4, 3, 3, 0, 0, 0, 1, &oh, &ow), TC_ERR_INVALID_SHAPE);  // stride 0
  EXPECT_EQ(tc_conv2d_output_shape(4, 4, 3, 3, -1, 0, 1, 1, &oh, &ow), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_conv2d_output_shape(INT64_MAX, 4, 3, 3, INT64_MAX / 2, 0, 1, 1, &oh, &ow), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_conv2d_output_shape(4, 4, 3, 3, 0, 0, 1, 1, nullptr, &ow), TC_ERR_INVALID_ARG);

  tc_conv2d_desc d = make_desc({1 << 20, 1 << 20, 1, 1 << 20, 1 << 20, 1, 1, 0, 0, 1, 1}, TC_DTYPE_F32);
  uint64_t bytes = 0;
  EXPECT_EQ(tc_conv2d_scratch_bytes(&d, &bytes), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_conv2d_backward_input_scratch_bytes(&d, &bytes), TC_ERR_INVALID_SHAPE);
  d = make_desc({2, 3, 4, 7, 6, 3, 3, 1, 1, 1, 1}, TC_DTYPE_F32);
  d.out_H = 6;  // computed: 7
  EXPECT_EQ(tc_conv2d_scratch_bytes(&d, &bytes), TC_ERR_INVALID_SHAPE);
  d.out_H = 7;
  d.out_W = 6;
  ASSERT_EQ(tc_conv2d_scratch_bytes(&d, &bytes), TC_OK);
  EXPECT_EQ(bytes, uint64_t(2 * 27 * 42 * 4));
}

TEST_F(Conv2d, BadInputLeavesBuffersUntouched) {
  const Shape s{2, 3, 4, 7, 6, 3, 3, 1, 1, 1, 1};
  tc_conv2d_desc d = make_desc(s, TC_DTYPE_F32);
  uint64_t col_bytes = 0;
  ASSERT_EQ(tc_conv2d_scratch_bytes(&d, &col_bytes), TC_OK);
  std::vector<double> X = random(2 * 3 * 7 * 6), Wt = random(4 * 3 * 9);
  tc_buffer bX = upload(X, TC_DTYPE_F32), bW = upload(Wt, TC_DTYPE_F32);
  tc_buffer bY = poisoned(2 * 4 * 42 * 4), col = poisoned(col_bytes), small = poisoned(col_bytes - 4);
  auto unchanged = [&](tc_buffer b, size_t n) {
    std::vector<uint8_t> got(n);
    ASSERT_EQ(tc_buffer_read(b, 0, got.data(), n), TC_OK);
    for (uint8_t v : got) ASSERT_EQ(v, 0xff);
  };
  EXPECT_EQ(tc_conv2d_forward(ctx_, bX, bW, nullptr, bY, small, &d), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_conv2d_forward(ctx_, bX, bW, nullptr, bY, nullptr, &d), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_conv2d_forward(ctx_, bX, bW, nullptr, bX, col, &d), TC_ERR_INVALID_ARG);  // Y aliases X
  tc_conv2d_desc bad = d;
  bad.dtype = TC_DTYPE_BF16;
  EXPECT_EQ(tc_conv2d_forward(ctx_, bX, bW, nullptr, bY, col, &bad), TC_ERR_UNSUPPORTED_DTYPE);
  bad = d;
  bad.stride_w = 0;
  EXPECT_EQ(tc_conv2d_forward(ctx_, bX, bW, nullptr, bY, col, &bad), TC_ERR_INVALID_SHAPE);
  bad = d;
  bad.out_channels = 5;  // W and Y too small
  EXPECT_EQ(tc_conv2d_forward(ctx_, bX, bW, nullptr, bY, col, &bad), TC_ERR_INVALID_ARG);
  unchanged(bY, 2 * 4 * 42 * 4);
  unchanged(col, col_bytes);
  unchanged(small, col_bytes - 4);
}

}  // namespace
