// GEMM on the CPU.
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]      row-major, b < batch
//
// f32 goes to sgemm (gemm_f32.cpp: the BLAS the build links, else our own
// kernels). bf16 and f16 run our AMX kernels where the processor has
// AMX-BF16 (gemm_amx.cpp: bf16 products accumulated in f32; f16 split exactly
// into bf16 pairs); elsewhere they are widened to f32, multiplied by the same
// sgemm and rounded back (f32 accumulation, as specified). i8 x i8 -> i32
// runs our own integer kernels (gemm_i8.cpp).
#include <algorithm>

#include "core/error.h"
#include "core/half.h"
#include "cpu/convert.h"
#include "cpu/cpu_features.h"
#include "cpu/gemm_f32.h"
#include "cpu/gemm_i8.h"
#include "cpu/gemm_packed.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

// C = beta * C on an M x N matrix with row pitch ldc (beta == 0 writes zeros
// without reading C, so NaN in C cannot leak).
template <class T, class ToF, class FromF>
void scale_c(T* c, int64_t M, int64_t N, int64_t ldc, double beta, ToF to_f, FromF from_f) {
  for (int64_t i = 0; i < M; ++i) {
    T* row = c + i * ldc;
    if (beta == 0.0) {
      for (int64_t j = 0; j < N; ++j) row[j] = from_f(0.0);
    } else {
      for (int64_t j = 0; j < N; ++j) row[j] = from_f(beta * to_f(row[j]));
    }
  }
}

// c_type: C's element type (GemmArgs::c_dtype).
void scale_c_any(const tc_gemm_desc& d, tc_dtype c_type, void* c) {
  switch (c_type) {
    case TC_DTYPE_F32:
      scale_c(static_cast<float*>(c), d.M, d.N, d.ldc, d.beta, [](float v) { return double(v); },
              [](double v) { return float(v); });
      break;
    case TC_DTYPE_F16:
      scale_c(static_cast<uint16_t*>(c), d.M, d.N, d.ldc, d.beta, [](uint16_t v) { return double(f16_to_f32(v)); },
              [](double v) { return f32_to_f16(float(v)); });
      break;
    case TC_DTYPE_BF16:
      scale_c(static_cast<uint16_t*>(c), d.M, d.N, d.ldc, d.beta,
              [](uint16_t v) { return double(bf16_to_f32(v)); }, [](double v) { return f32_to_bf16(float(v)); });
      break;
    case TC_DTYPE_I32: {  // i8 inputs; int32 arithmetic wraps as in gemm_i8 (a double product would round)
      const uint32_t beta = uint32_t(int32_t(int64_t(d.beta)));
      for (int64_t i = 0; i < d.M; ++i) {
        int32_t* row = static_cast<int32_t*>(c) + i * d.ldc;
        for (int64_t j = 0; j < d.N; ++j) row[j] = beta == 0 ? 0 : int32_t(beta * uint32_t(row[j]));
      }
      break;
    }
  }
}

void gemm_f32(const tc_gemm_desc& d, const float* a, const float* b, float* c) {
  sgemm(d.transpose_a, d.transpose_b, d.M, d.N, d.K, float(d.alpha), a, d.lda, b, d.ldb, float(d.beta), c, d.ldc);
}

// f16 / bf16 without AMX: widen op(A), op(B) (as stored) and, when beta != 0,
// C to packed f32, run sgemm, round C back. Widening costs O(MK + KN + MN)
// against the O(MNK) product; the f32 copies live in the thread's kept
// scratch (no page faults after the first call) and are not initialised
// (every element is written before it is read).
void gemm_half_widen(const tc_gemm_desc& d, const uint16_t* a, const uint16_t* b, void* c, bool c_f32) {
  const bool bf = d.dtype == TC_DTYPE_BF16;
  const int64_t a_rows = d.transpose_a ? d.K : d.M, a_cols = d.transpose_a ? d.M : d.K;
  const int64_t b_rows = d.transpose_b ? d.N : d.K, b_cols = d.transpose_b ? d.K : d.N;
  const size_t na = size_t(round_up(a_rows * a_cols, 16)), nb = size_t(round_up(b_rows * b_cols, 16));
  Scratch scratch((na + nb + size_t(d.M * d.N)) * sizeof(float));
  float* fa = reinterpret_cast<float*>(scratch.get());
  float* fb = fa + na;
  float* fc = fb + nb;
  widen_matrix(bf, a, a_rows, a_cols, d.lda, fa);
  widen_matrix(bf, b, b_rows, b_cols, d.ldb, fb);
  if (c_f32) {
    sgemm(d.transpose_a, d.transpose_b, d.M, d.N, d.K, float(d.alpha), fa, a_cols, fb, b_cols, float(d.beta),
          static_cast<float*>(c), d.ldc);
    return;
  }
  uint16_t* ch = static_cast<uint16_t*>(c);
  if (d.beta != 0.0) widen_matrix(bf, ch, d.M, d.N, d.ldc, fc);
  sgemm(d.transpose_a, d.transpose_b, d.M, d.N, d.K, float(d.alpha), fa, a_cols, fb, b_cols, float(d.beta), fc, d.N);
  narrow_matrix(bf, fc, d.M, d.N, ch, d.ldc);
}

// The f16 split (gemm_amx.cpp) turns inf * b into inf * bh + inf * bl, NaN
// where bl == 0: inputs with an infinity or NaN take the widening path.
bool f16_inputs_finite(const tc_gemm_desc& d, const uint16_t* a, const uint16_t* b) {
  return f16_matrix_finite(a, d.transpose_a ? d.K : d.M, d.transpose_a ? d.M : d.K, d.lda) &&
         f16_matrix_finite(b, d.transpose_b ? d.N : d.K, d.transpose_b ? d.K : d.N, d.ldb);
}

// c_f32: C is f32 (GemmArgs::c_f32), else of the inputs' dtype.
void gemm_half(const tc_gemm_desc& d, const uint16_t* a, const uint16_t* b, void* c, bool c_f32) {
  if (features().amx_bf16 && amx_ready() && (d.dtype == TC_DTYPE_BF16 || f16_inputs_finite(d, a, b))) {
    const KernelSet& ks = d.dtype == TC_DTYPE_BF16 ? bf16_amx_kernels() : f16_amx_kernels();
    note_kernel("gemm_half/amx");
    run_packed_gemm(ks, make_operands(d, a, b), c_f32 ? TC_DTYPE_F32 : d.dtype, c, d.ldc, d.alpha, d.beta);
  } else {
    gemm_half_widen(d, a, b, c, c_f32);
  }
}

}  // namespace

tc_status gemm(const GemmArgs& args) {
  const tc_gemm_desc& d = args.d;
  const tc_dtype ct = args.c_dtype();
  const size_t es = dtype_size(d.dtype), cs = dtype_size(ct);
  for (int64_t bi = 0; bi < d.batch; ++bi) {
    const char* a = static_cast<const char*>(args.a) + size_t(bi * d.stride_a) * es;
    const char* b = static_cast<const char*>(args.b) + size_t(bi * d.stride_b) * es;
    char* c = static_cast<char*>(args.c) + size_t(bi * d.stride_c) * cs;
    if (d.K == 0) {
      scale_c_any(d, ct, c);
      continue;
    }
    switch (d.dtype) {
      case TC_DTYPE_F32:
        gemm_f32(d, reinterpret_cast<const float*>(a), reinterpret_cast<const float*>(b), reinterpret_cast<float*>(c));
        break;
      case TC_DTYPE_F16:
      case TC_DTYPE_BF16:
        gemm_half(d, reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b), c,
                  ct == TC_DTYPE_F32);
        break;
      case TC_DTYPE_I8:
        gemm_i8(d, reinterpret_cast<const int8_t*>(a), reinterpret_cast<const int8_t*>(b), reinterpret_cast<int32_t*>(c));
        break;
      default:
        return fail(TC_ERR_UNSUPPORTED_DTYPE, "gemm: dtype %d has no CPU kernel", d.dtype);
    }
  }
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
