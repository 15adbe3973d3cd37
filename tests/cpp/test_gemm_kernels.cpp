// GEMM kernels through the C ABI against a plain reference, for every dtype,
// transpose, padded pitch and batch layout, on sizes that are not multiples of
// any kernel's blocks. CTest runs this file once per TC_CPU_ISA level
// (portable through amx; see src/cpu/cpu_features.h), so each
// vector path of the machine is checked; the IsaCap test confirms the cap.
//
// Reference: f32/f16/bf16 in double from the stored (rounded) inputs, within
// tol * (|alpha| sum_k |a b| + |beta c|), tol 1e-5 for f32 and 1e-2 for the
// 16-bit types (plus 2^-24 for f16's subnormal results); i8 exactly, in uint32 arithmetic (int32 wraps). C is poisoned
// first (NaN, or random int32), pads between rows and batches must keep their
// bytes, and A and B must be left as they were.
//
// The OwnF32* tests run the f32 products (and f16/bf16 widened to f32) on
// tensorcore's own f32 kernels (src/cpu/gemm_f32*.cpp) in every build, with
// or without a BLAS linked, so each ISA level checks its own f32 kernel.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "cpu/gemm_f32.h"
#include "own_sgemm.h"
#include "tensorcore/tensorcore.h"

namespace {

struct Ctx {
  tc_context ctx = nullptr;
  Ctx() { EXPECT_EQ(tc_init_device("cpu", &ctx), TC_OK); }
  ~Ctx() { EXPECT_EQ(tc_shutdown(ctx), TC_OK); }
};

std::mt19937_64& rng() {
  static std::mt19937_64 r = [] {
    uint64_t seed = std::random_device{}();
    if (const char* s = std::getenv("TC_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
    std::printf("test_gemm_kernels seed %llu (TC_TEST_SEED to repeat)\n", (unsigned long long)seed);
    return std::mt19937_64(seed);
  }();
  return r;
}

size_t in_size(tc_dtype dt) { return dt == TC_DTYPE_F32 ? 4 : dt == TC_DTYPE_I8 ? 1 : 2; }
size_t out_size(tc_dtype dt) { return dt == TC_DTYPE_I8 ? 4 : in_size(dt); }

double load(tc_dtype dt, const std::vector<uint8_t>& buf, int64_t i, bool is_c) {
  const uint8_t* p = buf.data();
  switch (dt) {
    case TC_DTYPE_F32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case TC_DTYPE_F16:
    case TC_DTYPE_BF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return dt == TC_DTYPE_F16 ? tc::f16_to_f32(h) : tc::bf16_to_f32(h);
    }
    default:
      if (is_c) {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        return v;
      }
      return double(int8_t(p[i]));
  }
}

// Random element of an input (A, B) or of C; `poison` writes NaN (or, for
// int32, a random bit pattern: any value is a valid "poison" there).
void fill(tc_dtype dt, std::vector<uint8_t>& buf, int64_t i, bool is_c, bool poison) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  uint8_t* p = buf.data();
  if (dt == TC_DTYPE_I8) {
    if (is_c) {
      const uint32_t v = uint32_t(rng()());
      std::memcpy(p + 4 * i, &v, 4);
    } else {
      p[i] = uint8_t(rng()());  // the full range, -128 included
    }
    return;
  }
  const float f = poison ? std::nanf("") : u(rng());
  if (dt == TC_DTYPE_F32) {
    std::memcpy(p + 4 * i, &f, 4);
  } else {
    const uint16_t h = dt == TC_DTYPE_F16 ? tc::f32_to_f16(f) : tc::f32_to_bf16(f);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

struct Case {
  int64_t M, N, K;
  bool ta = false, tb = false;
  int64_t pad = 0;  // added to every pitch
  double alpha = 1, beta = 0;
  int64_t batch = 1, gap = 0;  // gap: extra elements between batches
};

std::string describe(tc_dtype dt, const Case& c) {
  char s[256];
  std::snprintf(s, sizeof s, "%s M=%lld N=%lld K=%lld ta=%d tb=%d pad=%lld alpha=%g beta=%g batch=%lld gap=%lld",
                tc_dtype_name(dt), (long long)c.M, (long long)c.N, (long long)c.K, c.ta, c.tb, (long long)c.pad,
                c.alpha, c.beta, (long long)c.batch, (long long)c.gap);
  return s;
}

void run_case(tc_context ctx, tc_dtype dt, const Case& c) {
  SCOPED_TRACE(describe(dt, c));
  const int64_t a_rows = c.ta ? c.K : c.M, a_cols = c.ta ? c.M : c.K;
  const int64_t b_rows = c.tb ? c.N : c.K, b_cols = c.tb ? c.K : c.N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.N + c.pad;
  const int64_t sa = a_rows * lda + c.gap, sb = b_rows * ldb + c.gap, sc = c.M * ldc + c.gap;
  const int64_t na = sa * c.batch, nb = sb * c.batch, nc = sc * c.batch;
  std::vector<uint8_t> ha(size_t(na) * in_size(dt)), hb(size_t(nb) * in_size(dt)), hc(size_t(nc) * out_size(dt));
  for (int64_t i = 0; i < na; ++i) fill(dt, ha, i, false, false);
  for (int64_t i = 0; i < nb; ++i) fill(dt, hb, i, false, false);
  // In-matrix C elements are random when beta != 0, NaN otherwise; pads NaN.
  std::vector<bool> in_c(size_t(nc), false);
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) in_c[size_t(bi * sc + i * ldc + j)] = true;
  for (int64_t i = 0; i < nc; ++i) fill(dt, hc, i, true, !(in_c[size_t(i)] && c.beta != 0));

  tc_buffer A, B, C;
  ASSERT_EQ(tc_buffer_alloc(ctx, ha.size(), &A), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(ctx, hb.size(), &B), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(ctx, hc.size(), &C), TC_OK);
  ASSERT_EQ(tc_buffer_write(A, 0, ha.data(), ha.size()), TC_OK);
  ASSERT_EQ(tc_buffer_write(B, 0, hb.data(), hb.size()), TC_OK);
  ASSERT_EQ(tc_buffer_write(C, 0, hc.data(), hc.size()), TC_OK);

  tc_gemm_desc d{};
  d.M = c.M;
  d.N = c.N;
  d.K = c.K;
  d.dtype = dt;
  d.accum = dt == TC_DTYPE_I8 ? TC_DTYPE_I32 : TC_DTYPE_F32;
  d.alpha = c.alpha;
  d.beta = c.beta;
  d.transpose_a = c.ta;
  d.transpose_b = c.tb;
  d.lda = lda;
  d.ldb = ldb;
  d.ldc = ldc;
  d.batch = c.batch;
  d.stride_a = sa;
  d.stride_b = sb;
  d.stride_c = sc;
  const tc_status st = c.batch == 1 && c.gap == 0 ? tc_gemm(ctx, A, B, C, &d) : tc_gemm_batched(ctx, A, B, C, &d);
  ASSERT_EQ(st, TC_OK) << tc_last_error_detail();

  std::vector<uint8_t> ga(ha.size()), gb(hb.size()), gc(hc.size());
  ASSERT_EQ(tc_buffer_read(A, 0, ga.data(), ga.size()), TC_OK);
  ASSERT_EQ(tc_buffer_read(B, 0, gb.data(), gb.size()), TC_OK);
  ASSERT_EQ(tc_buffer_read(C, 0, gc.data(), gc.size()), TC_OK);
  EXPECT_EQ(tc_buffer_free(A), TC_OK);
  EXPECT_EQ(tc_buffer_free(B), TC_OK);
  EXPECT_EQ(tc_buffer_free(C), TC_OK);
  EXPECT_TRUE(ga == ha) << "A was modified";
  EXPECT_TRUE(gb == hb) << "B was modified";

  const size_t cs = out_size(dt);
  for (int64_t i = 0; i < nc; ++i)
    if (!in_c[size_t(i)]) ASSERT_EQ(std::memcmp(&gc[size_t(i) * cs], &hc[size_t(i) * cs], cs), 0) << "pad " << i << " written";

  // Inputs as numbers once, for a quick reference loop.
  std::vector<double> va(static_cast<size_t>(na)), vb(static_cast<size_t>(nb));
  for (int64_t i = 0; i < na; ++i) va[size_t(i)] = load(dt, ha, i, false);
  for (int64_t i = 0; i < nb; ++i) vb[size_t(i)] = load(dt, hb, i, false);
  const double tol = dt == TC_DTYPE_F32 ? 1e-5 : 1e-2;
  // Absolute slack: an f16 result below 2^-14 is subnormal, spaced 2^-24.
  const double slack = dt == TC_DTYPE_F16 ? 0x1p-24 : 1e-30;
  int64_t bad = 0;
  for (int64_t bi = 0; bi < c.batch; ++bi)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        const int64_t ci = bi * sc + i * ldc + j;
        const double old = load(dt, hc, ci, true), got = load(dt, gc, ci, true);
        if (dt == TC_DTYPE_I8) {
          uint32_t s = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const int64_t ai = bi * sa + (c.ta ? k * lda + i : i * lda + k);
            const int64_t bj = bi * sb + (c.tb ? j * ldb + k : k * ldb + j);
            s += uint32_t(int32_t(va[size_t(ai)]) * int32_t(vb[size_t(bj)]));
          }
          uint32_t r = uint32_t(int32_t(c.alpha)) * s;
          if (c.beta != 0) r += uint32_t(int32_t(c.beta)) * uint32_t(int32_t(old));
          if (int32_t(r) != int32_t(got) && bad++ < 5)
            ADD_FAILURE() << "C[" << bi << "][" << i << "][" << j << "] = " << int32_t(got) << ", expected "
                          << int32_t(r);
        } else {
          double s = 0, sabs = 0;
          for (int64_t k = 0; k < c.K; ++k) {
            const int64_t ai = bi * sa + (c.ta ? k * lda + i : i * lda + k);
            const int64_t bj = bi * sb + (c.tb ? j * ldb + k : k * ldb + j);
            const double p = va[size_t(ai)] * vb[size_t(bj)];
            s += p;
            sabs += std::fabs(p);
          }
          double ref = c.alpha * s, bound = std::fabs(c.alpha) * sabs;
          if (c.beta != 0) {
            ref += c.beta * old;
            bound += std::fabs(c.beta * old);
          }
          if (!(std::fabs(got - ref) <= tol * bound + slack) && bad++ < 5)
            ADD_FAILURE() << "C[" << bi << "][" << i << "][" << j << "] = " << got << ", expected " << ref
                          << " (bound " << tol * bound << ")";
        }
      }
  EXPECT_EQ(bad, 0);
}

const tc_dtype kDtypes[] = {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16, TC_DTYPE_I8};

// Every size appears as M, N and K; none is a multiple of 16 except by chance.
const int64_t kShapes[][3] = {{1, 1, 1},    {1, 3, 17},    {3, 17, 63},   {17, 63, 65}, {63, 65, 130},
                              {65, 130, 1}, {130, 1, 3},   {130, 65, 17}, {63, 3, 130}, {17, 130, 63},
                              {3, 1, 65},   {1, 63, 130},  {65, 63, 130}, {33, 31, 64}, {32, 32, 32}};

void alpha_beta(tc_dtype dt, int variant, double* alpha, double* beta) {
  if (variant == 0) {
    *alpha = 1;
    *beta = 0;
  } else if (dt == TC_DTYPE_I8) {
    *alpha = variant == 1 ? -3 : 1;
    *beta = variant == 1 ? 2 : 1;
  } else {
    *alpha = variant == 1 ? 0.75 : 1;
    *beta = variant == 1 ? -1.5 : 1;
  }
}

}  // namespace

// The feature string matches TC_CPU_ISA: nothing above the cap is reported.
TEST(GemmKernels, IsaCap) {
  Ctx c;
  struct tc_device_info info;
  ASSERT_EQ(tc_device_info(c.ctx, &info), TC_OK);
  const std::string f = std::string(",") + info.features + ",";
  const char* isa = std::getenv("TC_CPU_ISA");
  const std::string cap = isa ? isa : "amx";
  std::printf("TC_CPU_ISA=%s features: %s\n", cap.c_str(), info.features);
  auto has = [&](const char* name) { return f.find(std::string(",") + name + ",") != std::string::npos; };
  if (cap == "portable") EXPECT_STREQ(info.features, "");
  if (cap == "portable" || cap == "avx2" || cap == "avx_vnni") {
    EXPECT_FALSE(has("avx512f"));
    EXPECT_FALSE(has("avx512_vnni"));
  }
  if (cap == "avx2") EXPECT_FALSE(has("avx_vnni"));
  if (cap == "avx512") EXPECT_FALSE(has("avx512_vnni"));
  if (cap == "avx512" || cap == "avx512_vnni") EXPECT_FALSE(has("avx512_bf16"));
  if (cap != "amx") EXPECT_FALSE(has("amx_int8"));
}

TEST(GemmKernels, ShapesTransposesPitches) {
  Ctx c;
  for (tc_dtype dt : kDtypes)
    for (const auto& s : kShapes)
      for (int t = 0; t < 4; ++t) {
        Case k{s[0], s[1], s[2], bool(t & 1), bool(t & 2)};
        k.pad = (t + s[0]) % 3 == 0 ? 0 : 5;
        alpha_beta(dt, (t + s[1]) % 3, &k.alpha, &k.beta);
        run_case(c.ctx, dt, k);
      }
}

// Several row blocks and column panels, on one thread and (above 2^25
// multiply-adds) on all of them.
TEST(GemmKernels, LargerThanBlocks) {
  Ctx c;
  for (tc_dtype dt : kDtypes) {
    run_case(c.ctx, dt, Case{300, 200, 333});
    run_case(c.ctx, dt, Case{520, 300, 250});
    Case p{300, 450, 260, true, false, 2, -1, 1};
    run_case(c.ctx, dt, p);
    Case t{257, 129, 300, true, true, 3, 2, 1};
    run_case(c.ctx, dt, t);
    // Depth longer than every kernel's chunk (the accumulators are reloaded).
    Case d{40, 70, 1700, false, false, 0, 1, 1};
    run_case(c.ctx, dt, d);
    Case e{37, 33, 3100, true, false, 1};
    run_case(c.ctx, dt, e);
  }
}

// C of 4 MiB and more with beta == 0 is written with streaming stores where
// rows are aligned (pad 0, N a multiple of 16) and plain ones elsewhere.
TEST(GemmKernels, LargeOutput) {
  Ctx c;
  for (tc_dtype dt : kDtypes) {
    const int64_t M = dt == TC_DTYPE_I8 ? 1100 : 1500, N = dt == TC_DTYPE_I8 ? 1024 : 1408;
    run_case(c.ctx, dt, Case{M, N, 40});  // above 2^25 multiply-adds: threaded
    Case p{M, N + 3, 6, false, true, 3};
    run_case(c.ctx, dt, p);
  }
}

TEST(GemmKernels, Batched) {
  Ctx c;
  for (tc_dtype dt : kDtypes) {
    Case k{17, 65, 33, false, true, 2, 1, 0, 3, 7};
    run_case(c.ctx, dt, k);
    Case p{40, 9, 70, true, false, 0, 1, 1, 2, 0};
    run_case(c.ctx, dt, p);
  }
}

// int32 wraps: |sum| > 2^31 and alpha, beta that overflow, all exact.
TEST(GemmKernels, I8Wraps) {
  Ctx ctx;
  tc_buffer A, B, C;
  const int64_t M = 3, N = 5, K = 140000;  // 140000 * 128 * 128 > 2^31
  std::vector<int8_t> a(M * K), b(K * N);
  for (auto& v : a) v = -128;
  for (int64_t i = 0; i < K * N; ++i) b[size_t(i)] = i % 7 == 0 ? 127 : -128;
  std::vector<int32_t> c(M * N, 12345);
  ASSERT_EQ(tc_buffer_alloc(ctx.ctx, a.size(), &A), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(ctx.ctx, b.size(), &B), TC_OK);
  ASSERT_EQ(tc_buffer_alloc(ctx.ctx, c.size() * 4, &C), TC_OK);
  ASSERT_EQ(tc_buffer_write(A, 0, a.data(), a.size()), TC_OK);
  ASSERT_EQ(tc_buffer_write(B, 0, b.data(), b.size()), TC_OK);
  ASSERT_EQ(tc_buffer_write(C, 0, c.data(), c.size() * 4), TC_OK);
  tc_gemm_desc d{};
  d.M = M;
  d.N = N;
  d.K = K;
  d.dtype = TC_DTYPE_I8;
  d.accum = TC_DTYPE_I32;
  d.alpha = 1 << 30;
  d.beta = -2147483647.0;
  d.batch = 1;
  ASSERT_EQ(tc_gemm(ctx.ctx, A, B, C, &d), TC_OK) << tc_last_error_detail();
  std::vector<int32_t> got(c.size());
  ASSERT_EQ(tc_buffer_read(C, 0, got.data(), got.size() * 4), TC_OK);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      uint32_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += uint32_t(int32_t(a[size_t(i * K + k)]) * int32_t(b[size_t(k * N + j)]));
      const uint32_t r = uint32_t(1u << 30) * s + uint32_t(-2147483647) * uint32_t(12345);
      EXPECT_EQ(got[size_t(i * N + j)], int32_t(r)) << i << "," << j;
    }
  tc_buffer_free(A);
  tc_buffer_free(B);
  tc_buffer_free(C);
}

// Infinities and NaN in f16/bf16 inputs propagate as IEEE says (the f16
// split of the AMX path must not turn inf * b into NaN).
TEST(GemmKernels, HalfNonFinite) {
  Ctx ctx;
  for (tc_dtype dt : {TC_DTYPE_F16, TC_DTYPE_BF16}) {
    SCOPED_TRACE(tc_dtype_name(dt));
    const int64_t M = 33, N = 40, K = 50;
    auto enc = [&](float f) { return dt == TC_DTYPE_F16 ? tc::f32_to_f16(f) : tc::f32_to_bf16(f); };
    auto dec = [&](uint16_t h) { return dt == TC_DTYPE_F16 ? tc::f16_to_f32(h) : tc::bf16_to_f32(h); };
    std::vector<uint16_t> a(M * K), b(K * N), c(M * N, 0);
    std::uniform_real_distribution<float> u(0.5f, 1.0f);  // positive: no inf - inf
    for (auto& v : a) v = enc(u(rng()));
    for (auto& v : b) v = enc(1.0f);  // exactly representable: its lo part is 0
    a[5 * K + 7] = enc(INFINITY);     // row 5 -> +inf everywhere
    a[9 * K + 3] = enc(NAN);          // row 9 -> NaN everywhere
    tc_buffer A, B, C;
    ASSERT_EQ(tc_buffer_alloc(ctx.ctx, a.size() * 2, &A), TC_OK);
    ASSERT_EQ(tc_buffer_alloc(ctx.ctx, b.size() * 2, &B), TC_OK);
    ASSERT_EQ(tc_buffer_alloc(ctx.ctx, c.size() * 2, &C), TC_OK);
    ASSERT_EQ(tc_buffer_write(A, 0, a.data(), a.size() * 2), TC_OK);
    ASSERT_EQ(tc_buffer_write(B, 0, b.data(), b.size() * 2), TC_OK);
    tc_gemm_desc d{};
    d.M = M;
    d.N = N;
    d.K = K;
    d.dtype = dt;
    d.accum = TC_DTYPE_F32;
    d.alpha = 1;
    d.batch = 1;
    ASSERT_EQ(tc_gemm(ctx.ctx, A, B, C, &d), TC_OK) << tc_last_error_detail();
    ASSERT_EQ(tc_buffer_read(C, 0, c.data(), c.size() * 2), TC_OK);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        const float v = dec(c[size_t(i * N + j)]);
        if (i == 5) EXPECT_TRUE(std::isinf(v) && v > 0) << i << "," << j << " = " << v;
        else if (i == 9) EXPECT_TRUE(std::isnan(v)) << i << "," << j << " = " << v;
        else EXPECT_TRUE(std::isfinite(v)) << i << "," << j << " = " << v;
      }
    tc_buffer_free(A);
    tc_buffer_free(B);
    tc_buffer_free(C);
  }
}

// ---- tensorcore's own f32 kernels ------------------------------------------------

// Every M, N, K of {1, 7, 33, 257} (below, at and above each kernel's MR and
// NR, one row or column past a multiple of 32; 257 also splits the depth
// into chunks), every transpose pair, with and without pitches, and alpha /
// beta of each kind: (1, 0), (0.75, -1.5), (1, 1), (-2.5, 0) and (0, 0.5).
// C holds NaN wherever beta == 0 (it must not be read).
TEST(GemmKernels, OwnF32Shapes) {
  Ctx c;
  OwnSgemm own;
  const int64_t sizes[] = {1, 7, 33, 257};
  const double ab[][2] = {{1, 0}, {0.75, -1.5}, {1, 1}, {-2.5, 0}, {0, 0.5}};
  int v = 0;
  for (int64_t M : sizes)
    for (int64_t N : sizes)
      for (int64_t K : sizes)
        for (int t = 0; t < 4; ++t, ++v) {
          Case k{M, N, K, bool(t & 1), bool(t & 2)};
          k.pad = v % 3 == 0 ? 0 : v % 3 == 1 ? 1 : 6;
          k.alpha = ab[v % 5][0];
          k.beta = ab[v % 5][1];
          run_case(c.ctx, TC_DTYPE_F32, k);
        }
}

// Threaded (above 2^25 multiply-adds), several row blocks and panels, depth
// longer than every chunk, a C of 4 MiB and more (streaming stores where rows
// are aligned), and batches with gaps. f16 / bf16 go through the same
// routine where they are widened to f32 (no AMX, or TC_CPU_ISA below amx).
TEST(GemmKernels, OwnF32Larger) {
  Ctx c;
  OwnSgemm own;
  for (tc_dtype dt : {TC_DTYPE_F32, TC_DTYPE_F16, TC_DTYPE_BF16}) {
    run_case(c.ctx, dt, Case{300, 200, 333});
    run_case(c.ctx, dt, Case{520, 300, 250, false, false, 0, 1.25, 0});
    run_case(c.ctx, dt, Case{300, 450, 260, true, false, 2, -1, 1});
    run_case(c.ctx, dt, Case{257, 129, 300, true, true, 3, 2, 1});
    run_case(c.ctx, dt, Case{40, 70, 1700, false, false, 0, 1, 1});
    run_case(c.ctx, dt, Case{37, 33, 3100, true, false, 1});
    run_case(c.ctx, dt, Case{1500, 1408, 40});
    run_case(c.ctx, dt, Case{1500, 1411, 6, false, true, 3});
    run_case(c.ctx, dt, Case{17, 65, 33, false, true, 2, 1, 0, 3, 7});
    run_case(c.ctx, dt, Case{40, 9, 70, true, false, 0, 0.5, -2, 2, 0});
    run_case(c.ctx, dt, Case{33, 257, 7, true, true, 1, 1, 1, 4, 5});
  }
}

// OpenBLAS kernel families that show it did not recognise an AVX2 processor
// (the f32 products then run on our kernels); the families of AVX2 and
// AVX-512 processors keep the BLAS.
TEST(GemmKernels, BlasCoreWithoutAvx2IsRecognised) {
  for (const char* old : {"Prescott", "Core2", "Nehalem", "Sandybridge", "SANDYBRIDGE", "Barcelona", "Atom "})
    EXPECT_TRUE(tc::cpu::blas_core_lacks_avx2(old)) << old;
  for (const char* modern : {"Haswell", "SkylakeX", "Cooperlake", "SapphireRapids", "Zen", "Neoversen2", "", "x"})
    EXPECT_FALSE(tc::cpu::blas_core_lacks_avx2(modern)) << modern;
  EXPECT_FALSE(tc::cpu::blas_core_lacks_avx2(nullptr));
}
