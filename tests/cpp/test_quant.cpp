// Quantized weights through the C ABI: exact sizes, reference quantisation
// of hand-checked blocks, the GEMV on every instruction-set path against a
// double reference, and bad arguments (right status, buffers untouched).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "tensorcore/tensorcore.h"

namespace {

struct Ctx {
  tc_context ctx = nullptr;
  std::vector<tc_buffer> bufs;
  Ctx() { EXPECT_EQ(tc_init_device("cpu", &ctx), TC_OK); }
  ~Ctx() {
    for (tc_buffer b : bufs) tc_buffer_free(b);
    tc_shutdown(ctx);
  }
  template <class T>
  tc_buffer buf(const std::vector<T>& v) {
    tc_buffer b;
    EXPECT_EQ(tc_buffer_alloc(ctx, v.size() * sizeof(T), &b), TC_OK);
    tc_buffer_write(b, 0, v.data(), v.size() * sizeof(T));
    bufs.push_back(b);
    return b;
  }
  template <class T>
  std::vector<T> read(tc_buffer b, size_t n) {
    std::vector<T> v(n);
    tc_buffer_read(b, 0, v.data(), n * sizeof(T));
    return v;
  }
};

uint16_t f16(float f) {  // exact for the small values used here
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (f == 0) return 0;
  uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
  return uint16_t(((u >> 16) & 0x8000) | ((e - 112) << 10) | (m >> 13));
}

}  // namespace

TEST(Quant, SizesAndNames) {
  size_t n;
  ASSERT_EQ(tc_quantized_size(TC_QUANT_Q4_0, 3, 64, &n), TC_OK);
  EXPECT_EQ(n, 3u * 2 * 18);
  ASSERT_EQ(tc_quantized_size(TC_QUANT_Q6_K, 2, 512, &n), TC_OK);
  EXPECT_EQ(n, 2u * 2 * 210);
  ASSERT_EQ(tc_quantized_size(TC_QUANT_F16, 3, 5, &n), TC_OK);
  EXPECT_EQ(n, 30u);
  EXPECT_EQ(tc_quantized_size(TC_QUANT_Q4_K, 1, 32, &n), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_quantized_size(TC_QUANT_Q4_0, 0, 32, &n), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_quantized_size(TC_QUANT_Q8_0, INT64_MAX, 32, &n), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_quantized_size(42, 1, 32, &n), TC_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(tc_quantized_size(TC_QUANT_Q4_0, 1, 32, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_STREQ(tc_quant_name(TC_QUANT_Q5_K), "q5_k");
  EXPECT_STREQ(tc_quant_name(99), "unknown");
  EXPECT_EQ(tc_quant_to_gguf_type(TC_QUANT_Q6_K), TC_GGML_TYPE_Q6_K);
  EXPECT_EQ(tc_gguf_type_to_quant(TC_GGML_TYPE_BF16), TC_QUANT_BF16);
  EXPECT_EQ(tc_gguf_type_to_quant(TC_GGML_TYPE_Q5_0), TC_QUANT_Q5_0);
  EXPECT_EQ(tc_gguf_type_to_quant(TC_GGML_TYPE_Q5_1), TC_QUANT_Q5_1);
  EXPECT_EQ(tc_quant_to_gguf_type(TC_QUANT_Q5_1), 7);
  EXPECT_STREQ(tc_quant_name(TC_QUANT_Q5_0), "q5_0");
  EXPECT_EQ(tc_gguf_type_to_quant(16), -1);  // IQ2_XXS
  int64_t be, bb;
  tc_quant_type q;
  ASSERT_EQ(tc_gguf_type_info(23, &be, &bb, &q), TC_OK);  // IQ4_XS: known, not computed with
  EXPECT_EQ(be, 256);
  EXPECT_EQ(bb, 136);
  EXPECT_EQ(q, -1);
  EXPECT_EQ(tc_gguf_type_info(5, &be, &bb, &q), TC_ERR_INVALID_ARG);
}

TEST(Quant, ReferenceBlocks) {
  Ctx c;
  // One Q4_0 block: the largest magnitude is -4 (the first of the tie -4 / 4),
  // so d = -4 / -8 = 0.5 and -4 itself maps to q = 0.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f, x[1] = -4.0f, x[2] = 4.0f, x[16] = 0.25f, x[17] = -0.75f;
  tc_buffer src = c.buf(x);
  tc_buffer q = c.buf(std::vector<uint8_t>(18, 0xAA));
  ASSERT_EQ(tc_quantize_weights(c.ctx, src, q, TC_QUANT_Q4_0, 1, 32, TC_DTYPE_F32), TC_OK) << tc_last_error_detail();
  auto b = c.read<uint8_t>(q, 18);
  uint16_t d;
  std::memcpy(&d, b.data(), 2);
  EXPECT_EQ(d, f16(0.5f));
  // id = 1/d = 2, q(x) = min(15, trunc(2x + 8.5)): 1 -> 10, -4 -> 0, 4 -> 15 (16 clamped), 0 -> 8,
  // 0.25 -> 9, -0.75 -> 7; byte j holds q(x[j]) | q(x[j + 16]) << 4.
  EXPECT_EQ(b[2], uint8_t(10 | (9 << 4)));
  EXPECT_EQ(b[3], uint8_t(0 | (7 << 4)));
  EXPECT_EQ(b[4], uint8_t(15 | (8 << 4)));
  EXPECT_EQ(b[5], uint8_t(8 | (8 << 4)));
  // Q8_0: d = 127/127 = 1 for amax 127, q = round half away.
  std::vector<float> y(32, 0.0f);
  y[0] = 127.0f, y[1] = 2.5f, y[2] = -2.5f, y[3] = 0.49f;
  tc_buffer src8 = c.buf(y);
  tc_buffer q8 = c.buf(std::vector<uint8_t>(34, 0));
  ASSERT_EQ(tc_quantize_weights(c.ctx, src8, q8, TC_QUANT_Q8_0, 1, 32, TC_DTYPE_F32), TC_OK);
  auto b8 = c.read<int8_t>(q8, 34);
  std::memcpy(&d, b8.data(), 2);
  EXPECT_EQ(d, f16(1.0f));
  EXPECT_EQ(b8[2], 127);
  EXPECT_EQ(b8[3], 3);
  EXPECT_EQ(b8[4], -3);
  EXPECT_EQ(b8[5], 0);
  // All-zero block: d = 0 / -8 = -0 (stored with its sign, as ggml does),
  // every q the midpoint.
  tc_buffer z = c.buf(std::vector<float>(32, 0.0f));
  ASSERT_EQ(tc_quantize_weights(c.ctx, z, q, TC_QUANT_Q4_0, 1, 32, TC_DTYPE_F32), TC_OK);
  b = c.read<uint8_t>(q, 18);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x80);
  for (int i = 2; i < 18; ++i) EXPECT_EQ(b[i], 0x88);
  // Q5_0: the largest magnitude is -4, d = -4 / -16 = 0.25, id = 4 and
  // q(x) = min(31, trunc(4x + 16.5)): -4 -> 0, 4 -> 31 (32 clamped), 0 -> 16,
  // 1 -> 20, 0.25 -> 17, -0.75 -> 13. qs byte j holds the low four bits of
  // q(x[j]) | q(x[j + 16]) << 4, bit j of the qh word the fifth bit of q(x[j]).
  tc_buffer q5 = c.buf(std::vector<uint8_t>(22, 0xAA));
  ASSERT_EQ(tc_quantize_weights(c.ctx, src, q5, TC_QUANT_Q5_0, 1, 32, TC_DTYPE_F32), TC_OK) << tc_last_error_detail();
  b = c.read<uint8_t>(q5, 22);
  std::memcpy(&d, b.data(), 2);
  EXPECT_EQ(d, f16(0.25f));
  uint32_t qh;
  std::memcpy(&qh, b.data() + 2, 4);
  // q >= 16 everywhere except x[1] = -4 (q = 0) and x[17] = -0.75 (q = 13).
  EXPECT_EQ(qh, ~((1u << 1) | (1u << 17)));
  EXPECT_EQ(b[6], uint8_t((20 & 15) | ((17 & 15) << 4)));
  EXPECT_EQ(b[7], uint8_t(0 | (13 << 4)));
  EXPECT_EQ(b[8], uint8_t((31 & 15) | ((16 & 15) << 4)));
  // And back: w = (q - 16) d.
  tc_buffer y5 = c.buf(std::vector<float>(32, NAN));
  ASSERT_EQ(tc_dequantize_weights(c.ctx, q5, y5, TC_QUANT_Q5_0, 0, 1, 32, TC_DTYPE_F32), TC_OK);
  auto w5 = c.read<float>(y5, 32);
  EXPECT_EQ(w5[0], 1.0f);
  EXPECT_EQ(w5[1], -4.0f);
  EXPECT_EQ(w5[2], 3.75f);  // 4 clamped to q = 31
  EXPECT_EQ(w5[16], 0.25f);
  EXPECT_EQ(w5[17], -0.75f);
  // Q5_1: min -4, max 4, d = 8 / 31, q(x) = trunc((x + 4) / d + 0.5): -4 -> 0
  // and 4 -> 31, so weight 1's fifth bit is 0 and weight 2's 1; w = q d + m
  // gives back -4 exactly and 4 up to the f16 rounding of d.
  tc_buffer q51 = c.buf(std::vector<uint8_t>(24, 0xAA));
  ASSERT_EQ(tc_quantize_weights(c.ctx, src, q51, TC_QUANT_Q5_1, 1, 32, TC_DTYPE_F32), TC_OK);
  b = c.read<uint8_t>(q51, 24);
  std::memcpy(&d, b.data() + 2, 2);
  EXPECT_EQ(d, f16(-4.0f));
  std::memcpy(&qh, b.data() + 4, 4);
  EXPECT_EQ((qh >> 1) & 1, 0u);
  EXPECT_EQ((qh >> 2) & 1, 1u);
  EXPECT_EQ(b[8 + 1] & 15, 0);
  EXPECT_EQ(b[8 + 2] & 15, 15);
  ASSERT_EQ(tc_dequantize_weights(c.ctx, q51, y5, TC_QUANT_Q5_1, 0, 1, 32, TC_DTYPE_F32), TC_OK);
  w5 = c.read<float>(y5, 32);
  EXPECT_EQ(w5[1], -4.0f);
  EXPECT_NEAR(w5[2], 4.0f, 31 * 0.258f / 1024);
  // K-quants are read, not written.
  tc_buffer qk = c.buf(std::vector<uint8_t>(144, 0));
  tc_buffer src256 = c.buf(std::vector<float>(256, 1.0f));
  EXPECT_EQ(tc_quantize_weights(c.ctx, src256, qk, TC_QUANT_Q4_K, 1, 256, TC_DTYPE_F32), TC_ERR_UNSUPPORTED);
}

// Random blocks with sane scales, for any format (scales are f16 ~0.01).
std::vector<uint8_t> random_matrix(tc_quant_type fmt, int64_t N, int64_t K, std::mt19937& rng) {
  size_t n;
  tc_quantized_size(fmt, N, K, &n);
  std::vector<uint8_t> w(n);
  for (auto& v : w) v = uint8_t(rng());
  int64_t be, bb;
  tc_quant_block_info(fmt, &be, &bb);
  const uint16_t s = f16(0.0078125f);
  for (size_t off = 0; off < n; off += size_t(bb)) {
    switch (fmt) {
      case TC_QUANT_Q4_0: case TC_QUANT_Q8_0: case TC_QUANT_Q5_0: std::memcpy(&w[off], &s, 2); break;
      case TC_QUANT_Q4_1: case TC_QUANT_Q4_K: case TC_QUANT_Q5_K: case TC_QUANT_Q5_1:
        std::memcpy(&w[off], &s, 2);
        std::memcpy(&w[off + 2], &s, 2);
        break;
      case TC_QUANT_Q6_K: std::memcpy(&w[off + 208], &s, 2); break;
      case TC_QUANT_Q8_K: {
        float d = 0.01f;
        std::memcpy(&w[off], &d, 4);
        break;
      }
      case TC_QUANT_F16: w[off + 1] &= 0x3b; break;  // finite halves below 1
      case TC_QUANT_BF16: w[off + 1] &= 0x3f; break;
      case TC_QUANT_F32: w[off + 3] &= 0x3f; break;
    }
  }
  return w;
}

TEST(Quant, GemvEveryFormatEveryPath) {
  Ctx c;
  std::mt19937 rng(7);
  const char* isas[] = {"", "avx512", "avx2", "portable"};
  for (const char* isa : isas) {
    if (*isa) setenv("TC_CPU_ISA", isa, 1);
    else unsetenv("TC_CPU_ISA");
    for (tc_quant_type fmt = TC_QUANT_Q4_0; fmt <= TC_QUANT_Q5_1; ++fmt) {  // every format
      const int64_t N = 19, K = 512;
      for (int64_t M : {1, 2, 3, 4, 6}) {
        auto w = random_matrix(fmt, N, K, rng);
        // f32 activations: the exact path on every instruction set.
        std::vector<float> x(size_t(M * K));
        std::normal_distribution<float> nd;
        for (auto& v : x) v = nd(rng);
        tc_buffer bw = c.buf(w), bx = c.buf(x), by = c.buf(std::vector<float>(size_t(M * N), NAN));
        tc_buffer bd = c.buf(std::vector<float>(size_t(N * K), NAN));
        ASSERT_EQ(tc_gemv_quantized(c.ctx, bx, bw, by, fmt, M, N, K, TC_DTYPE_F32), TC_OK) << tc_last_error_detail();
        ASSERT_EQ(tc_dequantize_weights(c.ctx, bw, bd, fmt, 0, N, K, TC_DTYPE_F32), TC_OK);
        auto y = c.read<float>(by, size_t(M * N));
        auto wd = c.read<float>(bd, size_t(N * K));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
              ref += double(x[size_t(m * K + k)]) * wd[size_t(n * K + k)];
              mag += std::fabs(double(x[size_t(m * K + k)]) * wd[size_t(n * K + k)]);
            }
            ASSERT_NEAR(y[size_t(m * N + n)], ref, 1e-5 * mag + 1e-30)
                << "fmt " << tc_quant_name(fmt) << " isa '" << isa << "' M " << M << " m " << m << " n " << n;
          }
      }
    }
  }
  unsetenv("TC_CPU_ISA");
}

TEST(Quant, BadArgumentsLeaveBuffersUntouched) {
  Ctx c;
  const int64_t M = 2, N = 4, K = 64;
  std::mt19937 rng(1);
  auto w = random_matrix(TC_QUANT_Q4_0, N, K, rng);
  tc_buffer X = c.buf(std::vector<uint16_t>(size_t(M * K), 0x3c00));
  tc_buffer W = c.buf(w);
  tc_buffer Y = c.buf(std::vector<uint16_t>(size_t(M * N), 0x7e00));
  tc_buffer G = c.buf(std::vector<uint16_t>(size_t(K), 0x3c00));
  tc_buffer small = c.buf(std::vector<uint8_t>(10, 0));
  auto gemv = [&](tc_buffer x, tc_buffer wq, tc_buffer y, tc_quant_type f, int64_t m, int64_t n, int64_t k,
                  tc_dtype dt) { return tc_gemv_quantized(c.ctx, x, wq, y, f, m, n, k, dt); };
  ASSERT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_OK);
  tc_buffer_write(Y, 0, std::vector<uint16_t>(size_t(M * N), 0x7e00).data(), size_t(M * N * 2));
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, 0, N, K, TC_DTYPE_F16), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, M, -1, K, TC_DTYPE_F16), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, M, N, 48, TC_DTYPE_F16), TC_ERR_INVALID_SHAPE);  // not whole blocks
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, M, N, int64_t(1) << 40, TC_DTYPE_F16), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(gemv(X, W, Y, 77, M, N, K, TC_DTYPE_F16), TC_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_I8), TC_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q8_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);  // W too small for Q8_0
  EXPECT_EQ(gemv(X, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F32), TC_ERR_INVALID_ARG);  // X too small for f32
  EXPECT_EQ(gemv(small, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);
  EXPECT_EQ(gemv(X, W, small, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);
  EXPECT_EQ(gemv(X, W, X, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);  // Y overlaps X
  EXPECT_EQ(gemv(nullptr, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gemv_quantized(nullptr, X, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gemv_quantized_async(c.ctx, X, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16, nullptr),
            TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_fused_rmsnorm_gemv_quantized(c.ctx, X, G, W, Y, TC_QUANT_Q4_0, M, N, K, -1.0f, TC_DTYPE_F16),
            TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_fused_rmsnorm_gemv_quantized(c.ctx, X, G, W, Y, TC_QUANT_Q4_0, M, N, K, NAN, TC_DTYPE_F16),
            TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_fused_rmsnorm_gemv_quantized(c.ctx, X, small, W, Y, TC_QUANT_Q4_0, M, N, K, 1e-5f, TC_DTYPE_F16),
            TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_fused_rmsnorm_gemv_quantized(c.ctx, X, nullptr, W, Y, TC_QUANT_Q4_0, M, N, K, 1e-5f, TC_DTYPE_F16),
            TC_ERR_INVALID_ARG);
  // Another context's buffer.
  tc_context other;
  ASSERT_EQ(tc_init_device("cpu", &other), TC_OK);
  EXPECT_EQ(tc_gemv_quantized(other, X, W, Y, TC_QUANT_Q4_0, M, N, K, TC_DTYPE_F16), TC_ERR_INVALID_ARG);
  tc_shutdown(other);
  EXPECT_EQ(tc_quantize_weights(c.ctx, X, Y, TC_QUANT_Q4_0, 1, 64, TC_DTYPE_F16), TC_ERR_INVALID_ARG);  // Y small
  EXPECT_EQ(tc_quantize_weights(c.ctx, X, W, TC_QUANT_Q4_0, 1, 64, TC_DTYPE_I32), TC_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(tc_dequantize_weights(c.ctx, W, Y, TC_QUANT_Q4_0, 0, 1, 64, TC_DTYPE_F16), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_dequantize_weights(c.ctx, W, X, TC_QUANT_Q4_0, 4, 1, 64, TC_DTYPE_F16), TC_ERR_INVALID_ARG);  // rows
  EXPECT_EQ(tc_dequantize_weights(c.ctx, W, X, TC_QUANT_Q4_0, -1, 1, 64, TC_DTYPE_F16), TC_ERR_INVALID_SHAPE);
  auto y = c.read<uint16_t>(Y, size_t(M * N));
  for (uint16_t v : y) EXPECT_EQ(v, 0x7e00);
  EXPECT_EQ(c.read<uint8_t>(W, w.size()), w);
}

TEST(Quant, AsyncAndFusedRmsnorm) {
  Ctx c;
  const int64_t M = 3, N = 8, K = 96;
  std::mt19937 rng(3);
  auto w = random_matrix(TC_QUANT_Q8_0, N, K, rng);
  std::vector<float> x(static_cast<size_t>(M * K)), g(static_cast<size_t>(K));
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  for (auto& v : g) v = 1.0f + 0.1f * nd(rng);
  tc_buffer bw = c.buf(w), bx = c.buf(x), bg = c.buf(g);
  tc_buffer y1 = c.buf(std::vector<float>(size_t(M * N), NAN)), y2 = c.buf(std::vector<float>(size_t(M * N), NAN));
  tc_buffer bd = c.buf(std::vector<float>(size_t(N * K), NAN));
  ASSERT_EQ(tc_dequantize_weights(c.ctx, bw, bd, TC_QUANT_Q8_0, 0, N, K, TC_DTYPE_F32), TC_OK);
  auto wd = c.read<float>(bd, size_t(N * K));
  tc_stream s;
  ASSERT_EQ(tc_stream_create(c.ctx, &s), TC_OK);
  ASSERT_EQ(tc_gemv_quantized_async(c.ctx, bx, bw, y1, TC_QUANT_Q8_0, M, N, K, TC_DTYPE_F32, s), TC_OK);
  ASSERT_EQ(tc_stream_sync(s), TC_OK);
  tc_stream_destroy(s);
  ASSERT_EQ(tc_fused_rmsnorm_gemv_quantized(c.ctx, bx, bg, bw, y2, TC_QUANT_Q8_0, M, N, K, 1e-5f, TC_DTYPE_F32), TC_OK);
  auto r1 = c.read<float>(y1, size_t(M * N)), r2 = c.read<float>(y2, size_t(M * N));
  for (int64_t m = 0; m < M; ++m) {
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) ss += double(x[size_t(m * K + k)]) * x[size_t(m * K + k)];
    const double rstd = 1.0 / std::sqrt(ss / K + 1e-5);
    for (int64_t n = 0; n < N; ++n) {
      double plain = 0, normed = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double xv = x[size_t(m * K + k)], wv = wd[size_t(n * K + k)];
        plain += xv * wv;
        normed += xv * rstd * g[size_t(k)] * wv;
        mag += std::fabs(xv * wv);
      }
      EXPECT_NEAR(r1[size_t(m * N + n)], plain, 1e-5 * mag);
      EXPECT_NEAR(r2[size_t(m * N + n)], normed, 1e-5 * mag * rstd * 1.5);
    }
  }
  // The normalised X is never written back.
  EXPECT_EQ(c.read<float>(bx, x.size()), x);
}
