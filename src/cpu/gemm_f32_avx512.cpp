// f32 micro-kernel on AVX-512F (plan in gemm_packed.h, the product in
// gemm_f32.cpp).
//
// Tile 14 x 32: 28 zmm accumulators, c[i][h] holding row i, columns
// 16 h .. 16 h + 15. One depth step k loads the 32 values B(k, 0..31) of the
// panel into two zmm and, for each of the 14 rows, broadcasts A(i, k) and
// adds the products to both halves:
//   c[i][h] += A(i, k) * B(k, 16 h .. 16 h + 15)        (vfmadd231ps)
// Why 14 x 32: an FMA has 4 cycles of latency and two issue ports, so at
// least 8 independent accumulators are needed to keep both busy; 28 of them
// make each step 28 FMAs against 2 vector loads of B and 14 broadcasts of A
// (the loads stay under the two FMA ports' rate), and 28 + 2 for B + 1 for
// the broadcast fill the 32 registers without spilling. 16 rows would leave
// none for B.
//
// Packing: A as [depth][14] (one step of a micro-panel is 56 contiguous
// bytes), B as [depth][32] (one step is one 128-byte line pair).
#include <immintrin.h>

// GCC 12 flags the AVX-512 intrinsics' own _mm512_undefined_*() (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cpu/gemm_pack.h"
#include "cpu/gemm_packed.h"

#define TC_AVX512F __attribute__((target("avx512f")))

namespace tc {
namespace cpu {
namespace {

constexpr int kMR = 14, kNR = 32;

int64_t depth(int64_t K) { return K; }
size_t a_bytes(int64_t depth) { return size_t(depth) * kMR * sizeof(float); }
size_t b_bytes(int64_t depth) { return size_t(depth) * kNR * sizeof(float); }

TC_AVX512F void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const float* p = static_cast<const float*>(op.a) + i0 * op.a_rs;
  pack_interleaved<kMR, 1>(p, op.a_rs, op.a_cs, rows, op.K, depth, static_cast<float*>(out),
                           [](float v) { return v; });
}

TC_AVX512F void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const float* p = static_cast<const float*>(op.b) + j0 * op.b_rs;
  pack_interleaved<kNR, 1>(p, op.b_rs, op.b_cs, cols, op.K, depth, static_cast<float*>(out),
                           [](float v) { return v; });
}

// Chunks of 192 depth steps: 24 KiB of the B panel, half of L1, while the
// A micro-panels (10.5 KiB a chunk) stream past it from L2.
constexpr int64_t kKC = 192;

TC_AVX512F void micro(const void* a, const void* b, int64_t, int64_t k0, int64_t kn, void* tile, bool accumulate) {
  const float* pa = static_cast<const float*>(a) + k0 * kMR;
  const float* pb = static_cast<const float*>(b) + k0 * kNR;
  float* t = static_cast<float*>(tile);
  __m512 c[kMR][2];
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_ps(t + i * kNR) : _mm512_setzero_ps();
    c[i][1] = accumulate ? _mm512_loadu_ps(t + i * kNR + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kn; ++k, pa += kMR, pb += kNR) {
    const __m512 b0 = _mm512_loadu_ps(pb), b1 = _mm512_loadu_ps(pb + 16);
#pragma GCC unroll 14
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(pa[i]);
      c[i][0] = _mm512_fmadd_ps(ai, b0, c[i][0]);
      c[i][1] = _mm512_fmadd_ps(ai, b1, c[i][1]);
    }
  }
#pragma GCC unroll 14
  for (int i = 0; i < kMR; ++i) {
    _mm512_storeu_ps(t + i * kNR, c[i][0]);
    _mm512_storeu_ps(t + i * kNR + 16, c[i][1]);
  }
}

}  // namespace

const KernelSet& f32_avx512_kernels() {
  static const KernelSet ks{"f32_avx512", kMR, kNR, kKC, depth, a_bytes, b_bytes, pack_a, pack_b, micro, nullptr,
                            nullptr, nullptr};
  return ks;
}

}  // namespace cpu
}  // namespace tc
