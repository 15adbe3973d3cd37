// GEMM on every device present (the CPU always, CUDA when a GPU is usable)
// against a double-precision reference, for each dtype and layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "tensorcore/tensorcore.h"

namespace {

struct Case {
  tc_dtype dtype, accum;
  int64_t M, N, K, batch;
  bool ta, tb;
  int64_t pad;  // extra elements per row of every operand
  double alpha, beta;
};

double load(tc_dtype t, const std::vector<uint8_t>& v, size_t i) {
  switch (t) {
    case TC_DTYPE_F32: { float f; std::memcpy(&f, v.data() + 4 * i, 4); return f; }
    case TC_DTYPE_F16: { uint16_t h; std::memcpy(&h, v.data() + 2 * i, 2); return tc::f16_to_f32(h); }
    case TC_DTYPE_BF16: { uint16_t h; std::memcpy(&h, v.data() + 2 * i, 2); return tc::bf16_to_f32(h); }
    case TC_DTYPE_I8: return double(int8_t(v[i]));
    default: { int32_t x; std::memcpy(&x, v.data() + 4 * i, 4); return x; }
  }
}

void store(tc_dtype t, std::vector<uint8_t>& v, size_t i, double x) {
  switch (t) {
    case TC_DTYPE_F32: { float f = float(x); std::memcpy(v.data() + 4 * i, &f, 4); break; }
    case TC_DTYPE_F16: { uint16_t h = tc::f32_to_f16(float(x)); std::memcpy(v.data() + 2 * i, &h, 2); break; }
    case TC_DTYPE_BF16: { uint16_t h = tc::f32_to_bf16(float(x)); std::memcpy(v.data() + 2 * i, &h, 2); break; }
    case TC_DTYPE_I8: v[i] = uint8_t(int8_t(x)); break;
    default: { int32_t y = int32_t(x); std::memcpy(v.data() + 4 * i, &y, 4); break; }
  }
}

std::vector<std::string> devices() {
  std::vector<std::string> out{"cpu"};
  tc_context ctx;
  if (tc_init_device("cuda", &ctx) == TC_OK) {
    out.push_back("cuda");
    tc_shutdown(ctx);
  }
  return out;
}

void run_case(const std::string& device, const Case& c, std::mt19937& rng) {
  SCOPED_TRACE(device + " dtype=" + tc_dtype_name(c.dtype) + " M=" + std::to_string(c.M) + " N=" +
               std::to_string(c.N) + " K=" + std::to_string(c.K) + " ta=" + std::to_string(c.ta) +
               " tb=" + std::to_string(c.tb));
  tc_context ctx;
  ASSERT_EQ(tc_init_device(device.c_str(), &ctx), TC_OK);
  const bool i8 = c.dtype == TC_DTYPE_I8;
  const tc_dtype ct = i8 ? TC_DTYPE_I32 : c.dtype;
  const size_t es = tc::dtype_size(c.dtype), cs = tc::dtype_size(ct);
  const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K, br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
  const int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.N + c.pad;
  const int64_t sa = ar * lda, sb = br * ldb, sc = c.M * ldc;
  std::vector<uint8_t> a(size_t(sa * c.batch) * es), b(size_t(sb * c.batch) * es), cm(size_t(sc * c.batch) * cs);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> q(-128, 127);
  for (size_t i = 0; i < a.size() / es; ++i) store(c.dtype, a, i, i8 ? q(rng) : u(rng));
  for (size_t i = 0; i < b.size() / es; ++i) store(c.dtype, b, i, i8 ? q(rng) : u(rng));
  for (size_t i = 0; i < cm.size() / cs; ++i) store(ct, cm, i, i8 ? q(rng) : u(rng));
  tc_buffer A, B, C;
  ASSERT_EQ(tc_buffer_alloc(ctx, std::max<size_t>(a.size(), 1), &A), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(ctx, std::max<size_t>(b.size(), 1), &B), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(ctx, cm.size(), &C), TC_OK);
  tc_buffer_write(A, 0, a.data(), a.size());
  tc_buffer_write(B, 0, b.data(), b.size());
  tc_buffer_write(C, 0, cm.data(), cm.size());
  tc_gemm_desc d{};
  d.M = c.M, d.N = c.N, d.K = c.K, d.dtype = c.dtype, d.accum = c.accum, d.alpha = c.alpha, d.beta = c.beta;
  d.transpose_a = c.ta, d.transpose_b = c.tb, d.lda = lda, d.ldb = ldb, d.ldc = ldc, d.batch = c.batch;
  d.stride_a = sa, d.stride_b = sb, d.stride_c = sc;
  ASSERT_EQ(tc_gemm_batched(ctx, A, B, C, &d), TC_OK) << tc_last_error_detail();
  std::vector<uint8_t> out(cm.size());
  tc_buffer_read(C, 0, out.data(), out.size());
  const double tol = c.dtype == TC_DTYPE_F32 ? 1e-4 : i8 ? 0.0 : 2e-2;
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < ldc; ++j) {
        size_t ci = size_t(bi * sc + i * ldc + j);
        if (j >= c.N) {  // padding is never written
          ASSERT_EQ(std::memcmp(out.data() + ci * cs, cm.data() + ci * cs, cs), 0);
          continue;
        }
        double acc = 0.0;
        for (int64_t k = 0; k < c.K; ++k) {
          double x = load(c.dtype, a, size_t(bi * sa + (c.ta ? k * lda + i : i * lda + k)));
          double y = load(c.dtype, b, size_t(bi * sb + (c.tb ? j * ldb + k : k * ldb + j)));
          acc += x * y;
        }
        double ref = c.alpha * acc + (c.beta != 0.0 ? c.beta * load(ct, cm, ci) : 0.0);
        double got = load(ct, out, ci);
        if (i8) {
          ASSERT_EQ(got, double(int32_t(int64_t(ref)))) << "at " << bi << "," << i << "," << j;
        } else {
          double scale = std::sqrt(double(c.K)) + std::fabs(c.beta);
          ASSERT_NEAR(got, ref, tol * scale) << "at " << bi << "," << i << "," << j;
        }
      }
  tc_buffer_free(A);
  tc_buffer_free(B);
  tc_buffer_free(C);
  tc_shutdown(ctx);
}

}  // namespace

TEST(GemmDevices, EveryDtypeLayoutAndBatch) {
  std::mt19937 rng(1234);
  const tc_dtype pairs[][2] = {{TC_DTYPE_F32, TC_DTYPE_F32}, {TC_DTYPE_F16, TC_DTYPE_F32},
                               {TC_DTYPE_F16, TC_DTYPE_F16}, {TC_DTYPE_BF16, TC_DTYPE_F32},
                               {TC_DTYPE_I8, TC_DTYPE_I32}};
  for (const std::string& dev : devices())
    for (auto& p : pairs)
      for (int t = 0; t < 4; ++t)
        for (int64_t pad : {0, 4}) {
          Case c{p[0], p[1], 37, 44, 29, 3, bool(t & 1), bool(t & 2), pad, 1.0, 0.0};
          if (p[0] == TC_DTYPE_I8 && t == 2) c.N = 48, c.K = 32;  // the tensor-core i8 layout on CUDA
          run_case(dev, c, rng);
          c.alpha = 2.0, c.beta = -1.0, c.batch = 1;
          run_case(dev, c, rng);
          c.K = 0;  // beta * C
          run_case(dev, c, rng);
        }
}
