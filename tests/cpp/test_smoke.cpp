// The C ABI's lifecycle: contexts, buffers, streams, diagnostics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tensorcore/tensorcore.h"

namespace {

struct Ctx {
  tc_context ctx = nullptr;
  Ctx() { EXPECT_EQ(tc_init_device("cpu", &ctx), TC_OK); }
  ~Ctx() { tc_shutdown(ctx); }
};

tc_gemm_desc f32_desc(int64_t M, int64_t N, int64_t K) {
  tc_gemm_desc d{};
  d.M = M, d.N = N, d.K = K;
  d.dtype = TC_DTYPE_F32;
  d.accum = TC_DTYPE_F32;
  d.alpha = 1.0;
  d.beta = 0.0;
  d.batch = 1;
  return d;
}

}  // namespace

TEST(Lifecycle, InitDeviceInfoCapabilities) {
  Ctx c;
  struct tc_device_info info;
  ASSERT_EQ(tc_device_info(c.ctx, &info), TC_OK);
  EXPECT_STREQ(info.family, "cpu");
  EXPECT_EQ(info.backend, TC_BACKEND_PORTABLE_CPU);
  EXPECT_GT(info.compute_units, 0);
  EXPECT_GT(info.memory_bytes, 0u);

  struct tc_runtime_capabilities caps{};
  EXPECT_EQ(tc_runtime_capabilities(c.ctx, &caps), TC_ERR_INVALID_ARG);  // struct_size unset
  caps.struct_size = sizeof caps;
  ASSERT_EQ(tc_runtime_capabilities(c.ctx, &caps), TC_OK);
  EXPECT_EQ(caps.version, TC_CAPABILITIES_VERSION);
  EXPECT_EQ(caps.available & ~caps.known, 0u);
  EXPECT_EQ(tc_capability_available(&caps, TC_CAPABILITY_GEMM_F32), 1);
  EXPECT_EQ(tc_capability_available(&caps, 1ull << 63), 0);  // unknown bit fails closed
  EXPECT_EQ(tc_capability_available(&caps, TC_CAPABILITY_GEMM_F32 | TC_CAPABILITY_GEMM_F16), 0);
  EXPECT_EQ(tc_capability_available(nullptr, TC_CAPABILITY_GEMM_F32), 0);
}

TEST(Lifecycle, DeviceSelection) {
  tc_context ctx = nullptr;
  EXPECT_EQ(tc_init_device("tpu", &ctx), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(tc_last_error_detail()).find("tpu"), std::string::npos);
  EXPECT_EQ(tc_init_device("cuda:99", &ctx), TC_ERR_NO_DEVICE);
  EXPECT_EQ(tc_init_device("cpu", nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(ctx, nullptr);
}

TEST(Lifecycle, ShutdownRefusedWhileChildrenLive) {
  tc_context ctx;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  tc_buffer b;
  tc_stream s;
  ASSERT_EQ(tc_buffer_alloc(ctx, 128, &b), TC_OK);
  ASSERT_EQ(tc_stream_create(ctx, &s), TC_OK);
  EXPECT_EQ(tc_shutdown(ctx), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_free(b), TC_OK);
  EXPECT_EQ(tc_shutdown(ctx), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_stream_destroy(s), TC_OK);
  EXPECT_EQ(tc_shutdown(ctx), TC_OK);
  EXPECT_EQ(tc_shutdown(ctx), TC_ERR_INVALID_ARG);  // stale handle
}

TEST(Buffer, AllocAlignmentReadWriteBounds) {
  Ctx c;
  tc_buffer b;
  ASSERT_EQ(tc_buffer_alloc(c.ctx, 100, &b), TC_OK);
  void* p;
  ASSERT_EQ(tc_buffer_map(b, &p), TC_OK);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  size_t n;
  ASSERT_EQ(tc_buffer_size(b, &n), TC_OK);
  EXPECT_EQ(n, 100u);
  std::vector<uint8_t> src(100), dst(100, 0);
  for (int i = 0; i < 100; ++i) src[i] = uint8_t(i * 7);
  ASSERT_EQ(tc_buffer_write(b, 0, src.data(), 100), TC_OK);
  ASSERT_EQ(tc_buffer_read(b, 10, dst.data(), 90), TC_OK);
  EXPECT_EQ(std::memcmp(dst.data(), src.data() + 10, 90), 0);
  EXPECT_EQ(tc_buffer_write(b, 50, src.data(), 51), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_read(b, SIZE_MAX, dst.data(), 2), TC_ERR_INVALID_ARG);  // offset + n would wrap
  EXPECT_EQ(tc_buffer_write(b, 0, nullptr, 4), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_alloc(c.ctx, 0, &b), TC_ERR_INVALID_ARG);
  tc_buffer huge;
  EXPECT_EQ(tc_buffer_alloc(c.ctx, SIZE_MAX, &huge), TC_ERR_ALLOC);
  EXPECT_EQ(tc_buffer_free(b), TC_OK);
  EXPECT_EQ(tc_buffer_free(b), TC_ERR_INVALID_ARG);  // double free is a clear error
  EXPECT_EQ(tc_buffer_free(nullptr), TC_ERR_INVALID_ARG);
}

TEST(Buffer, FromPtrWrapsWithoutCopy) {
  Ctx c;
  std::vector<float> host(16, 1.0f);
  tc_buffer b;
  ASSERT_EQ(tc_buffer_from_ptr(c.ctx, host.data(), host.size() * 4, &b), TC_OK);
  host[3] = 42.0f;
  float v;
  ASSERT_EQ(tc_buffer_read(b, 12, &v, 4), TC_OK);
  EXPECT_EQ(v, 42.0f);
  EXPECT_EQ(tc_buffer_free(b), TC_OK);
  EXPECT_EQ(host[3], 42.0f);  // not freed or touched
  EXPECT_EQ(tc_buffer_from_ptr(c.ctx, nullptr, 4, &b), TC_ERR_INVALID_ARG);
}

TEST(Stream, OrderedAsyncWorkAndKeepAlive) {
  Ctx c;
  const int n = 64;
  std::vector<float> a(n * n), ident(n * n, 0.0f);
  for (int i = 0; i < n * n; ++i) a[i] = float(i % 13) - 6.0f;
  for (int i = 0; i < n; ++i) ident[i * n + i] = 1.0f;
  tc_buffer A, I, B, C;
  ASSERT_EQ(tc_buffer_alloc(c.ctx, n * n * 4, &A), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(c.ctx, n * n * 4, &I), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(c.ctx, n * n * 4, &B), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(c.ctx, n * n * 4, &C), TC_OK);
  tc_buffer_write(A, 0, a.data(), n * n * 4);
  tc_buffer_write(I, 0, ident.data(), n * n * 4);
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c.ctx, &s), TC_OK);
  tc_gemm_desc d = f32_desc(n, n, n);
  // B = A @ I, then C = 2 * B @ I: correct only if the stream keeps order.
  ASSERT_EQ(tc_gemm_async(c.ctx, A, I, B, &d, s), TC_OK);
  d.alpha = 2.0;
  ASSERT_EQ(tc_gemm_async(c.ctx, B, I, C, &d, s), TC_OK);
  EXPECT_EQ(tc_last_backend(), TC_BACKEND_PORTABLE_CPU);
  // Freeing the handles of pending work must not free its storage.
  ASSERT_EQ(tc_buffer_free(A), TC_OK);
  ASSERT_EQ(tc_buffer_free(I), TC_OK);
  ASSERT_EQ(tc_stream_sync(s), TC_OK);
  std::vector<float> out(n * n);
  tc_buffer_read(C, 0, out.data(), n * n * 4);
  for (int i = 0; i < n * n; ++i) ASSERT_EQ(out[i], 2.0f * a[i]);
  EXPECT_EQ(tc_stream_destroy(s), TC_OK);
  EXPECT_EQ(tc_stream_sync(s), TC_ERR_INVALID_ARG);
  tc_buffer_free(B);
  tc_buffer_free(C);
}

TEST(Stream, ForeignContextRejected) {
  Ctx c1, c2;
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c2.ctx, &s), TC_OK);
  tc_buffer A;
  ASSERT_EQ(tc_buffer_alloc(c1.ctx, 64, &A), TC_OK);
  tc_gemm_desc d = f32_desc(4, 4, 4);
  EXPECT_EQ(tc_gemm_async(c1.ctx, A, A, A, &d, s), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(tc_last_error_detail()).find("another context"), std::string::npos);
  tc_buffer_free(A);
  tc_stream_destroy(s);
}

TEST(Diagnostics, NamesAndLastBackendPerThread) {
  EXPECT_STREQ(tc_status_string(TC_ERR_INVALID_SHAPE), "invalid_shape");
  EXPECT_STREQ(tc_status_string(-12345), "unknown status");
  EXPECT_STREQ(tc_dtype_name(TC_DTYPE_BF16), "bf16");
  EXPECT_STREQ(tc_backend_name(TC_BACKEND_PORTABLE_CPU), "portable_cpu");
  EXPECT_EQ(std::string(tc_version()).rfind("tensorcore ", 0), 0u);
  tc_backend seen = -1;
  std::thread([&] { seen = tc_last_backend(); }).join();
  EXPECT_EQ(seen, TC_BACKEND_NONE);
}

TEST(Diagnostics, DetailNamesArgumentAndClearsOnSuccess) {
  Ctx c;
  tc_buffer A;
  ASSERT_EQ(tc_buffer_alloc(c.ctx, 64, &A), TC_OK);
  tc_gemm_desc d = f32_desc(0, 4, 4);
  EXPECT_EQ(tc_gemm(c.ctx, A, A, A, &d), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_last_error(), TC_ERR_INVALID_SHAPE);
  EXPECT_NE(std::string(tc_last_error_detail()).find("M=0"), std::string::npos);
  size_t n;
  EXPECT_EQ(tc_buffer_size(A, &n), TC_OK);
  EXPECT_STREQ(tc_last_error_detail(), "");
  tc_buffer_free(A);
}
