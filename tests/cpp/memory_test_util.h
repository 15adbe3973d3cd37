// Helpers shared by the checkpoint and memory-tier tests: the devices to run
// on (the CPU always, CUDA when a GPU is usable), random bytes, f32 GEMM
// descriptors and a double-precision GEMM reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tensorcore/tensorcore.h"

namespace memtest {

inline bool cuda_present() {
  static const bool present = [] {
    tc_context ctx = nullptr;
    if (tc_init_device("cuda", &ctx) != TC_OK) return false;
    tc_shutdown(ctx);
    return true;
  }();
  return present;
}

// Device parameter of every test: "cpu", "cuda".
inline std::vector<std::string> all_devices() { return {"cpu", "cuda"}; }

// A context on `device`; the test skips where that device is absent.
struct Ctx {
  tc_context ctx = nullptr;
  explicit Ctx(const std::string& device) {
    if (device == "cuda" && !cuda_present()) return;
    EXPECT_EQ(tc_init_device(device.c_str(), &ctx), TC_OK) << tc_last_error_detail();
  }
  ~Ctx() {
    if (ctx) EXPECT_EQ(tc_shutdown(ctx), TC_OK) << tc_last_error_detail();
  }
  operator tc_context() const { return ctx; }
};

#define MEMTEST_REQUIRE_DEVICE(c)                                  \
  do {                                                             \
    if (!(c).ctx) GTEST_SKIP() << "no CUDA device in this machine"; \
  } while (0)

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng());
  return v;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

inline tc_buffer alloc_with(tc_context ctx, const void* data, size_t n) {
  tc_buffer b = nullptr;
  EXPECT_EQ(tc_buffer_alloc(ctx, n, &b), TC_OK) << tc_last_error_detail();
  if (b) EXPECT_EQ(tc_buffer_write(b, 0, data, n), TC_OK) << tc_last_error_detail();
  return b;
}

inline std::vector<uint8_t> read_all(tc_buffer b) {
  size_t n = 0;
  EXPECT_EQ(tc_buffer_size(b, &n), TC_OK);
  std::vector<uint8_t> out(n, 0xCD);
  EXPECT_EQ(tc_buffer_read(b, 0, out.data(), n), TC_OK) << tc_last_error_detail();
  return out;
}

inline tc_gemm_desc f32_desc(int64_t M, int64_t N, int64_t K) {
  tc_gemm_desc d{};
  d.M = M, d.N = N, d.K = K;
  d.dtype = TC_DTYPE_F32;
  d.accum = TC_DTYPE_F32;
  d.alpha = 1.0;
  d.beta = 0.0;
  d.batch = 1;
  return d;
}

// C = A @ B in double, row-major.
inline std::vector<double> ref_gemm(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t N,
                                    int64_t K) {
  std::vector<double> c(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) c[size_t(i * N + j)] += double(a[size_t(i * K + k)]) * b[size_t(k * N + j)];
  return c;
}

inline void expect_near_all(const std::vector<float>& got, const std::vector<double>& ref, double rel) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], rel * (1.0 + std::abs(ref[i]))) << "at " << i;
}

inline std::string detail() { return tc_last_error_detail(); }

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace memtest
