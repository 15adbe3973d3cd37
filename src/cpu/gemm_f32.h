// The f32 product of the CPU backend. f32 GEMM, f16/bf16 GEMM without AMX
// (widened to f32) and conv2d all go through sgemm, which runs on the BLAS
// the build links or on tensorcore's own kernels (gemm_f32.cpp).
#pragma once

#include <cctype>
#include <cstdint>
#include <string>

namespace tc {
namespace cpu {

// C = alpha * op(A) @ op(B) + beta * C for one row-major matrix: op(A) is
// M x K (A stored K x M with pitch lda when ta), op(B) K x N. beta == 0 never
// reads C; alpha == 0 or K == 0 only scales C. Dimensions and pitches fit
// int32 (capi checks them).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// True for an OpenBLAS kernel family without AVX2 and FMA ("Prescott",
// "Nehalem", "Sandybridge", ...). A BLAS that picked one on a processor with
// AVX2 has not recognised it (a CPU newer than the library): sgemm then runs
// our own kernels, which use what the processor has.
inline bool blas_core_lacks_avx2(const char* core) {
  if (!core) return false;
  static const char* const kOld[] = {"prescott", "core2",       "penryn",    "dunnington", "nehalem",
                                     "atom",     "sandybridge", "barcelona", "bobcat",     "opteron",
                                     "opteron_sse3", "katmai",  "coppermine", "northwood", "banias"};
  std::string name(core);
  for (char& ch : name) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  while (!name.empty() && name.back() == ' ') name.pop_back();
  for (const char* old : kOld)
    if (name == old) return true;
  return false;
}

}  // namespace cpu
}  // namespace tc
