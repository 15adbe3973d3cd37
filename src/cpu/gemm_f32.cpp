// f32 GEMM: the one routine every f32 product of the CPU backend goes
// through (gemm.cpp for f32, and for f16/bf16 widened to f32; conv2d.cpp).
//
//   C = alpha * op(A) @ op(B) + beta * C      row-major, A: M x K, B: K x N after op
//
// Where it runs:
//   - the BLAS the build links (blas.h: the system's OpenBLAS or the
//     scipy-openblas32 wheel; CMake's TC_BLAS decides), unless TC_CPU_BLAS=0
//     (read at every call, so that tests and benchmarks can run both in one
//     process), or unless that BLAS did not recognise the processor: an
//     OpenBLAS older than the CPU falls back to its SSE3 "Prescott" kernels,
//     4-6x slower than ours on an AVX-512 machine (Debian's 0.3.21 on Emerald
//     Rapids). TC_CPU_BLAS=1 uses the BLAS all the same. A TC_CPU_ISA cap
//     below the processor's own level always takes our kernels: a BLAS
//     chooses its kernels itself, once, and no cap reaches them;
//   - otherwise our own kernels, in the packed driver of gemm_packed.h.
//
// Our kernels. op(B) is packed into panels of NR columns and op(A) into
// micro-panels of MR rows, each as [depth][MR or NR], so one depth step of a
// micro-panel is contiguous. The micro-kernel keeps an MR x NR tile of sums in
// registers and adds one outer product per depth step:
//   t[i][j] += A(i, k) * B(k, j)      i < MR, j < NR, k over a chunk of depth
// (MR broadcasts of A times NR / lanes vectors of B). The best the processor
// offers (features(), capped by TC_CPU_ISA like the other kernel sets):
//   AVX-512F    14 x 32  (gemm_f32_avx512.cpp)
//   AVX2 + FMA   6 x 16  (gemm_f32_avx2.cpp)
//   plain C++    4 x 8   (below; TC_CPU_ISA=portable, processors without AVX2)
// Each sum runs in f32 in depth order (fused multiply-adds on the vector
// paths), so results agree with OpenBLAS's to rounding, not bit for bit. The
// epilogue writes C = alpha t + beta C in f32. As in BLAS, beta == 0 never
// reads C (NaN there cannot leak), and alpha == 0 or K == 0 only scales C
// without reading A or B.
#include "cpu/gemm_f32.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/config.h"
#include "cpu/blas.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm_pack.h"
#include "cpu/gemm_packed.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

// ---- the plain kernel -----------------------------------------------------------
// Compiled for baseline x86-64: the compiler keeps the 4 x 8 tile in eight
// SSE registers (two per row) and vectorises the j loop; no FMA.
namespace plain {

constexpr int kMR = 4, kNR = 8;

int64_t depth(int64_t K) { return K; }
size_t a_bytes(int64_t depth) { return size_t(depth) * kMR * sizeof(float); }
size_t b_bytes(int64_t depth) { return size_t(depth) * kNR * sizeof(float); }

void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const float* p = static_cast<const float*>(op.a) + i0 * op.a_rs;
  pack_interleaved<kMR, 1>(p, op.a_rs, op.a_cs, rows, op.K, depth, static_cast<float*>(out),
                           [](float v) { return v; });
}

void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const float* p = static_cast<const float*>(op.b) + j0 * op.b_rs;
  pack_interleaved<kNR, 1>(p, op.b_rs, op.b_cs, cols, op.K, depth, static_cast<float*>(out),
                           [](float v) { return v; });
}

// 256 depth steps: 8 KiB of the B panel.
constexpr int64_t kKC = 256;

void micro(const void* a, const void* b, int64_t, int64_t k0, int64_t kn, void* tile, bool accumulate) {
  const float* pa = static_cast<const float*>(a) + k0 * kMR;
  const float* pb = static_cast<const float*>(b) + k0 * kNR;
  float* t = static_cast<float*>(tile);
  float c[kMR][kNR] = {};
  if (accumulate) std::memcpy(c, t, sizeof c);
  for (int64_t k = 0; k < kn; ++k, pa += kMR, pb += kNR)
    for (int i = 0; i < kMR; ++i)
      for (int j = 0; j < kNR; ++j) c[i][j] += pa[i] * pb[j];
  std::memcpy(t, c, sizeof c);
}

}  // namespace plain

const KernelSet& own_kernels() {
  const Features& f = features();
  if (f.avx512f) return note_kernel("sgemm/avx512"), f32_avx512_kernels();
  if (f.avx2 && f.fma) return note_kernel("sgemm/avx2"), f32_avx2_kernels();
  return note_kernel("sgemm/portable"), f32_plain_kernels();
}

// C = beta * C; beta == 0 writes zeros without reading C.
void scale_c(float* c, int64_t M, int64_t N, int64_t ldc, float beta) {
  for (int64_t i = 0; i < M; ++i) {
    float* row = c + i * ldc;
    for (int64_t j = 0; j < N; ++j) row[j] = beta == 0.0f ? 0.0f : beta * row[j];
  }
}

#if TC_HAVE_BLAS
// OpenBLAS writes C without reading it when beta == 0 since 0.3.10 (its
// beta kernels used to multiply by zero, so NaN in C leaked). Older builds
// get C zeroed first. Also: when TC_NUM_THREADS sets our pool's size,
// OpenBLAS is given the same count, so "n threads" means n for every dtype.
struct BlasState {
  bool beta0_writes = false;
  bool misdetected = false;  // the BLAS runs kernels older than the processor (see the top)
  BlasState() {
    int major = 0, minor = 0, patch = 0;
    if (const char* cfg = blas::config())
      if (std::sscanf(cfg, "OpenBLAS %d.%d.%d", &major, &minor, &patch) == 3)
        beta0_writes = major > 0 || minor > 3 || (minor == 3 && patch >= 10);
    const Features& f = features();
    misdetected = f.avx2 && f.fma && blas_core_lacks_avx2(blas::core_name());
    if (config::from_env(config::Key::kNumThreads)) blas::set_num_threads(num_threads());
  }
};

const BlasState& blas_state() {
  static const BlasState s;
  return s;
}

// TC_CPU_BLAS: 0 our kernels, 1 the BLAS, unset: the BLAS unless misdetected.
bool use_blas() {
  if (isa_capped()) return false;
  const config::Value v = config::get(config::Key::kCpuBlas);
  return v.from_env ? v.number != 0 : !blas_state().misdetected;
}
#endif

}  // namespace

const KernelSet& f32_plain_kernels() {
  static const KernelSet ks{"f32_plain", plain::kMR, plain::kNR, plain::kKC, plain::depth, plain::a_bytes,
                            plain::b_bytes, plain::pack_a, plain::pack_b, plain::micro, nullptr, nullptr, nullptr};
  return ks;
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
#if TC_HAVE_BLAS
  if (use_blas() && !runs_inline()) {  // the BLAS would bring threads of its own
    if (beta == 0.0f && !blas_state().beta0_writes) scale_c(c, M, N, ldc, 0.0f);
    note_kernel("sgemm/blas");
    blas::sgemm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
#endif
  if (K <= 0 || alpha == 0.0f) {
    scale_c(c, M, N, ldc, beta);
    return;
  }
  run_packed_gemm(own_kernels(), make_operands(ta, tb, M, N, K, a, lda, b, ldb), TC_DTYPE_F32, c, ldc, alpha, beta);
}

}  // namespace cpu
}  // namespace tc
