// i8 x i8 -> i32 GEMM: C = alpha * op(A) @ op(B) + beta * C, with int32
// accumulation and wrapping int32 arithmetic in the epilogue.
//
// The fastest kernel the processor offers (and TC_CPU_ISA allows) runs in
// the packed driver of gemm_packed.h:
//   AMX-INT8 (tdpbssd)  >  AVX512-VNNI  >  AVX-VNNI  >  AVX2 (vpmaddwd)
// and plain code below is the portable fallback. All are exact: every sum is
// taken modulo 2^32, so the order of accumulation does not matter.
#include "cpu/gemm_i8.h"

#include <vector>

#include "cpu/cpu_features.h"
#include "cpu/gemm_packed.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

const KernelSet* packed_kernels() {
  const Features& f = features();
  if (f.amx_int8 && amx_ready()) return note_kernel("gemm_i8/amx"), &i8_amx_kernels();
  if (f.avx512_vnni && f.avx512bw && f.avx512vl) return note_kernel("gemm_i8/avx512_vnni"), &i8_avx512_kernels();
  if (f.avx_vnni && f.avx2) return note_kernel("gemm_i8/avx_vnni"), &i8_avx_vnni_kernels();
  if (f.avx2) return note_kernel("gemm_i8/avx2"), &i8_avx2_kernels();
  return note_kernel("gemm_i8/portable"), nullptr;
}

// Portable fallback: op(B) transposed into rows of K, then row-times-row
// dot products, unsigned arithmetic for the wrap.
void gemm_i8_scalar(const tc_gemm_desc& d, const int8_t* a, const int8_t* b, int32_t* c) {
  const int64_t M = d.M, N = d.N, K = d.K;
  const uint32_t alpha = uint32_t(int64_t(d.alpha)), beta = uint32_t(int64_t(d.beta));
  std::vector<int8_t> bt(size_t(N * K));
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < N; ++j) bt[size_t(j * K + k)] = d.transpose_b ? b[j * d.ldb + k] : b[k * d.ldb + j];
  parallel_for(M, 4, [&](int64_t i0, int64_t i1) {
    std::vector<int8_t> arow(static_cast<size_t>(K));
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t k = 0; k < K; ++k) arow[size_t(k)] = d.transpose_a ? a[k * d.lda + i] : a[i * d.lda + k];
      int32_t* crow = c + i * d.ldc;
      for (int64_t j = 0; j < N; ++j) {
        const int8_t* bj = bt.data() + j * K;
        uint32_t acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += uint32_t(int32_t(arow[size_t(k)]) * int32_t(bj[k]));
        uint32_t r = alpha * acc;
        if (beta != 0) r += beta * uint32_t(crow[j]);
        crow[j] = int32_t(r);
      }
    }
  });
}

}  // namespace

void gemm_i8(const tc_gemm_desc& d, const int8_t* a, const int8_t* b, int32_t* c) {
  if (const KernelSet* ks = packed_kernels())
    run_packed_gemm(*ks, make_operands(d, a, b), TC_DTYPE_I8, c, d.ldc, d.alpha, d.beta);
  else
    gemm_i8_scalar(d, a, b, c);
}

}  // namespace cpu
}  // namespace tc
