// f32 micro-kernel on AVX2 + FMA (plan in gemm_packed.h, the product in
// gemm_f32.cpp).
//
// Tile 6 x 16: 12 ymm accumulators, c[i][h] holding row i, columns
// 8 h .. 8 h + 7. One depth step k loads B(k, 0..15) into two ymm and, for
// each of the 6 rows, broadcasts A(i, k) and adds the products:
//   c[i][h] += A(i, k) * B(k, 8 h .. 8 h + 7)           (vfmadd231ps)
// Why 6 x 16: 12 independent accumulators cover the FMA latency (4-5 cycles)
// on both ports, and 12 + 2 for B + 1 for the broadcast fill 15 of the 16
// registers, so nothing spills. Each step is 12 FMAs against 2 loads of B and
// 6 broadcasts of A.
//
// Packing: A as [depth][6], B as [depth][16] (one step is one 64-byte line).
#include <immintrin.h>

#include "cpu/gemm_pack.h"
#include "cpu/gemm_packed.h"

#define TC_AVX2 __attribute__((target("avx2,fma")))

namespace tc {
namespace cpu {
namespace {

constexpr int kMR = 6, kNR = 16;

int64_t depth(int64_t K) { return K; }
size_t a_bytes(int64_t depth) { return size_t(depth) * kMR * sizeof(float); }
size_t b_bytes(int64_t depth) { return size_t(depth) * kNR * sizeof(float); }

TC_AVX2 void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const float* p = static_cast<const float*>(op.a) + i0 * op.a_rs;
  pack_interleaved<kMR, 1>(p, op.a_rs, op.a_cs, rows, op.K, depth, static_cast<float*>(out),
                           [](float v) { return v; });
}

TC_AVX2 void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const float* p = static_cast<const float*>(op.b) + j0 * op.b_rs;
  pack_interleaved<kNR, 1>(p, op.b_rs, op.b_cs, cols, op.K, depth, static_cast<float*>(out),
                           [](float v) { return v; });
}

// Chunks of 256 depth steps: 16 KiB of the B panel, half of a 32 KiB L1
// (the AVX2 processors' size).
constexpr int64_t kKC = 256;

TC_AVX2 void micro(const void* a, const void* b, int64_t, int64_t k0, int64_t kn, void* tile, bool accumulate) {
  const float* pa = static_cast<const float*>(a) + k0 * kMR;
  const float* pb = static_cast<const float*>(b) + k0 * kNR;
  float* t = static_cast<float*>(tile);
  __m256 c[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    c[i][0] = accumulate ? _mm256_loadu_ps(t + i * kNR) : _mm256_setzero_ps();
    c[i][1] = accumulate ? _mm256_loadu_ps(t + i * kNR + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kn; ++k, pa += kMR, pb += kNR) {
    const __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(pa + i);
      c[i][0] = _mm256_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm256_fmadd_ps(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    _mm256_storeu_ps(t + i * kNR, c[i][0]);
    _mm256_storeu_ps(t + i * kNR + 8, c[i][1]);
  }
}

}  // namespace

const KernelSet& f32_avx2_kernels() {
  static const KernelSet ks{"f32_avx2", kMR, kNR, kKC, depth, a_bytes, b_bytes, pack_a, pack_b, micro, nullptr,
                            nullptr, nullptr};
  return ks;
}

}  // namespace cpu
}  // namespace tc
