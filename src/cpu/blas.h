// The BLAS this build links for f32 products, chosen by CMake (TC_BLAS,
// CMakeLists.txt), and the only file that knows which it is:
//   TC_BLAS_OPENBLAS        the system's OpenBLAS (cblas_sgemm, openblas_*)
//   TC_BLAS_SCIPY_OPENBLAS  the scipy-openblas32 wheel: the same OpenBLAS
//                           with every symbol prefixed `scipy_`
//                           (scipy_cblas_sgemm, scipy_openblas_get_config)
//                           so that it cannot clash with another copy
//   neither                 no BLAS: TC_HAVE_BLAS is 0 and sgemm runs our
//                           own kernels (gemm_f32.cpp)
// Only gemm_f32.cpp includes this; everything else calls cpu::sgemm.
#pragma once

#include <cstdint>

#if defined(TC_BLAS_OPENBLAS) || defined(TC_BLAS_SCIPY_OPENBLAS)
#define TC_HAVE_BLAS 1
#include <cblas.h>
#if defined(TC_BLAS_SCIPY_OPENBLAS)
#define TC_BLAS_SYMBOL(name) scipy_##name
#else
#define TC_BLAS_SYMBOL(name) name
#endif
#else
#define TC_HAVE_BLAS 0
#endif

namespace tc {
namespace cpu {
namespace blas {

#if TC_HAVE_BLAS
// Row-major C = alpha * op(A) @ op(B) + beta * C. Dimensions and pitches fit
// the BLAS int (capi checks them against 2^31 - 1).
inline void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
                  const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  TC_BLAS_SYMBOL(cblas_sgemm)(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                              blasint(M), blasint(N), blasint(K), alpha, a, blasint(lda), b, blasint(ldb), beta, c,
                              blasint(ldc));
}

// "OpenBLAS 0.3.21 DYNAMIC_ARCH ..." (both builds report OpenBLAS's own string).
inline const char* config() { return TC_BLAS_SYMBOL(openblas_get_config)(); }

inline void set_num_threads(int n) { TC_BLAS_SYMBOL(openblas_set_num_threads)(n); }

// The kernel family OpenBLAS picked for this processor ("SkylakeX", "Haswell",
// "Prescott", ...).
inline const char* core_name() { return TC_BLAS_SYMBOL(openblas_get_corename)(); }
#endif

}  // namespace blas
}  // namespace cpu
}  // namespace tc
