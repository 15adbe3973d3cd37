// What the tests of internal backend ops (those without a C ABI, called
// through a context's Backend) share: one seeded generator, random vectors,
// a context with buffers freed at the end, and the devices present.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/objects.h"
#include "tensorcore/tensorcore.h"

namespace op_test {

// One generator for the binary; TC_TEST_SEED repeats a run.
inline std::mt19937_64& rng() {
  static std::mt19937_64 r = [] {
    uint64_t seed = std::random_device{}();
    if (const char* s = std::getenv("TC_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
    std::printf("backend op tests seed %llu (TC_TEST_SEED to repeat)\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return r;
}

inline std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

// A context on `device` and buffers in it, freed at the end.
struct Dev {
  tc_context ctx = nullptr;
  std::vector<tc_buffer> bufs;
  explicit Dev(const std::string& device) { EXPECT_EQ(tc_init_device(device.c_str(), &ctx), TC_OK); }
  ~Dev() {
    for (tc_buffer b : bufs) tc_buffer_free(b);
    tc_shutdown(ctx);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  // Handles carry a generation in their top bits (core/handles.h): the
  // objects are at the addresses without it.
  tc::Backend& be() { return *tc::handle_address(ctx)->backend; }
  // A buffer holding `host`; its device address.
  template <class T>
  T* put(const std::vector<T>& host) {
    tc_buffer b = nullptr;
    EXPECT_EQ(tc_buffer_alloc(ctx, std::max<size_t>(host.size() * sizeof(T), 1), &b), TC_OK);
    EXPECT_EQ(tc_buffer_write(b, 0, host.data(), host.size() * sizeof(T)), TC_OK);
    bufs.push_back(b);
    return reinterpret_cast<T*>(tc::handle_address(b)->bytes());
  }
  // The first n elements of the buffer `put` returned `dev` for.
  template <class T>
  std::vector<T> get(const T* dev, size_t n) {
    std::vector<T> out(n);
    for (tc_buffer b : bufs)
      if (reinterpret_cast<const char*>(dev) == tc::handle_address(b)->bytes())
        EXPECT_EQ(tc_buffer_read(b, 0, out.data(), n * sizeof(T)), TC_OK);
    return out;
  }
};

inline std::vector<std::string> devices() {
  std::vector<std::string> d{"cpu"};
  if (tc_cuda_device_count() > 0) d.push_back("cuda");
  return d;
}

}  // namespace op_test
