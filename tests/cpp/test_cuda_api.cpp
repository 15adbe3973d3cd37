// The CUDA management calls behave in every build: zero devices and clear
// errors without a GPU, a working switch to CUDA with one.
#include <gtest/gtest.h>

#include <string>

#include "tensorcore/tensorcore.h"

TEST(CudaApi, ConsistentWithDeviceCount) {
  const int32_t n = tc_cuda_device_count();
  ASSERT_GE(n, 0);
  tc_context ctx;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  int32_t active = -1;
  ASSERT_EQ(tc_cuda_is_active(ctx, &active), TC_OK);
  EXPECT_EQ(active, 0);
  struct tc_device_info info;
  EXPECT_EQ(tc_cuda_device_at(n, &info), TC_ERR_NO_DEVICE);
  EXPECT_EQ(tc_cuda_select_device(ctx, -1), TC_ERR_NO_DEVICE);
  if (n == 0) {
    EXPECT_EQ(tc_cuda_init(ctx), TC_ERR_NO_DEVICE);
    EXPECT_STRNE(tc_last_error_detail(), "");
    EXPECT_STREQ(tc_cuda_last_kernel_name(), "");
  } else {
    ASSERT_EQ(tc_cuda_device_at(0, &info), TC_OK);
    EXPECT_EQ(info.backend, TC_BACKEND_CUDA);
    tc_buffer b;
    ASSERT_EQ(tc_buffer_alloc(ctx, 16, &b), TC_OK);
    EXPECT_EQ(tc_cuda_init(ctx), TC_ERR_INVALID_ARG);  // live buffer
    tc_buffer_free(b);
    ASSERT_EQ(tc_cuda_init(ctx), TC_OK);
    ASSERT_EQ(tc_cuda_is_active(ctx, &active), TC_OK);
    EXPECT_EQ(active, 1);
    ASSERT_EQ(tc_cuda_select_device(ctx, n - 1), TC_OK);
    // A GEMM names the cuBLASLt call it made.
    tc_buffer A;
    ASSERT_EQ(tc_buffer_alloc(ctx, 64 * 64 * 4, &A), TC_OK);
    tc_buffer C;
    ASSERT_EQ(tc_buffer_alloc(ctx, 64 * 64 * 4, &C), TC_OK);
    tc_gemm_desc d{};
    d.M = d.N = d.K = 64;
    d.dtype = d.accum = TC_DTYPE_F32;
    d.alpha = 1.0;
    d.batch = 1;
    ASSERT_EQ(tc_gemm(ctx, A, A, C, &d), TC_OK) << tc_last_error_detail();
    EXPECT_EQ(std::string(tc_cuda_last_kernel_name()), "cublasLtMatmul");
    EXPECT_EQ(tc_last_backend(), TC_BACKEND_CUDA);
    void* p;
    EXPECT_EQ(tc_buffer_map(A, &p), TC_ERR_UNSUPPORTED);
    tc_buffer_free(A);
    tc_buffer_free(C);
  }
  EXPECT_EQ(tc_shutdown(ctx), TC_OK);
}
