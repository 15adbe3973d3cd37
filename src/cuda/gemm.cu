// GEMM on the GPU through cuBLASLt.
//
//   C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b]        row-major
//
// cuBLASLt is column-major; a row-major matrix read as column-major is its
// transpose, so we ask it for C^T = op(B)^T @ op(A)^T: its "A" is our B, its
// "B" is our A, m = N and n = M. i8 runs on the integer tensor cores only in
// the "TN" layout (our B transposed, A not; pitches and N, K multiples of 4);
// other i8 layouts run our own exact tiled kernel below.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/error.h"
#include "cuda/device.h"

namespace tc {
namespace cuda {
namespace {

cudaDataType_t lt_type(tc_dtype t) {
  switch (t) {
    case TC_DTYPE_F16: return CUDA_R_16F;
    case TC_DTYPE_BF16: return CUDA_R_16BF;
    case TC_DTYPE_I8: return CUDA_R_8I;
    case TC_DTYPE_I32: return CUDA_R_32I;
    default: return CUDA_R_32F;
  }
}

// C = beta * C for K == 0 (beta == 0 writes zeros without reading C).
template <class T>
__global__ void scale_kernel(T* c, int64_t batch, int64_t M, int64_t N, int64_t ldc, int64_t stride, float beta) {
  const int64_t per = M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < batch * per;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t b = i / per, e = i % per;
    T* p = c + b * stride + (e / N) * ldc + e % N;
    *p = beta == 0.0f ? T(0.0f) : T(beta * float(*p));
  }
}
__global__ void scale_kernel_i32(int32_t* c, int64_t batch, int64_t M, int64_t N, int64_t ldc, int64_t stride,
                                 int32_t beta) {
  const int64_t per = M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < batch * per;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t b = i / per, e = i % per;
    int32_t* p = c + b * stride + (e / N) * ldc + e % N;
    *p = beta == 0 ? 0 : int32_t(uint32_t(beta) * uint32_t(*p));
  }
}

// i8 x i8 -> i32 for layouts the integer tensor-core path does not take:
// 32x32 tiles of C, K in steps of 32 through shared memory; int32 wrapping
// arithmetic in the epilogue, as the header specifies.
constexpr int kTile = 32;
__global__ void gemm_i8_tiled(const int8_t* A, const int8_t* B, int32_t* C, int64_t M, int64_t N, int64_t K,
                              int64_t lda, int64_t ldb, int64_t ldc, int64_t sa, int64_t sb, int64_t sc, int ta,
                              int tb, int32_t alpha, int32_t beta, int64_t row_base, int64_t batch_base) {
  __shared__ int32_t as[kTile][kTile + 1], bs[kTile][kTile + 1];
  const int64_t b = batch_base + blockIdx.z;
  A += b * sa;
  B += b * sb;
  C += b * sc;
  const int tx = threadIdx.x, ty = threadIdx.y;  // 32 x 8 threads, 4 rows each
  const int64_t row0 = row_base + int64_t(blockIdx.y) * kTile, col = int64_t(blockIdx.x) * kTile + tx;
  int32_t acc[4] = {0, 0, 0, 0};
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    for (int r = ty; r < kTile; r += 8) {
      int64_t i = row0 + r, k = k0 + tx;  // A tile: rows i, columns k
      as[r][tx] = (i < M && k < K) ? int32_t(ta ? A[k * lda + i] : A[i * lda + k]) : 0;
      int64_t kk = k0 + r, j = int64_t(blockIdx.x) * kTile + tx;  // B tile: rows kk, columns j
      bs[r][tx] = (kk < K && j < N) ? int32_t(tb ? B[j * ldb + kk] : B[kk * ldb + j]) : 0;
    }
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk)
      for (int q = 0; q < 4; ++q) acc[q] += as[ty + 8 * q][kk] * bs[kk][tx];
    __syncthreads();
  }
  for (int q = 0; q < 4; ++q) {
    int64_t i = row0 + ty + 8 * q;
    if (i < M && col < N) {
      int32_t* p = C + i * ldc + col;
      uint32_t r = uint32_t(alpha) * uint32_t(acc[q]);
      if (beta != 0) r += uint32_t(beta) * uint32_t(*p);
      *p = int32_t(r);
    }
  }
}

bool i8_tensor_core_layout(const tc_gemm_desc& d) {
  return d.transpose_b && !d.transpose_a && d.lda % 4 == 0 && d.ldb % 4 == 0 && d.ldc % 4 == 0 && d.N % 4 == 0 &&
         d.K % 4 == 0 && d.stride_a % 4 == 0 && d.stride_b % 4 == 0 && d.stride_c % 4 == 0;
}

struct LtObjects {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~LtObjects() {
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// A problem's descriptors and chosen algorithm are built once and reused:
// building them costs more than a small GEMM.
// The key also holds C's dtype (conv2d writes f32 from f16 inputs) and the
// alignment of each pointer: an algorithm chosen for 256-byte aligned
// operands may not run on a pointer offset into a buffer.
using PlanKey = std::tuple<int, int, int, int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t, int64_t, int, int, uint32_t, uint32_t, uint32_t>;
std::mutex g_plan_mu;
std::map<PlanKey, std::unique_ptr<LtObjects>> g_plans;

tc_status make_layout(cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                      int64_t batch, int64_t stride) {
  if (tc_status st = check_lt(cublasLtMatrixLayoutCreate(out, type, uint64_t(rows), uint64_t(cols), ld),
                              "cublasLtMatrixLayoutCreate"))
    return st;
  if (batch > 1) {
    int32_t count = int32_t(batch);
    cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count);
    cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
  }
  return TC_OK;
}

// Largest power of two (up to 256) dividing the address.
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al) al >>= 1;
  return al;
}

struct Aligns {
  uint32_t a, b, c;
};

tc_status build_plan(Device& dev, size_t workspace, const tc_gemm_desc& d, tc_dtype c_dtype, Aligns al,
                     std::unique_ptr<LtObjects>* out) {
  const bool i8 = d.dtype == TC_DTYPE_I8;
  const bool f16_accum = d.dtype == TC_DTYPE_F16 && d.accum == TC_DTYPE_F16;
  cublasComputeType_t compute = i8 ? CUBLAS_COMPUTE_32I
                                : f16_accum ? CUBLAS_COMPUTE_16F
                                : (d.dtype == TC_DTYPE_F32 && d.allow_tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                             : CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = i8 ? CUDA_R_32I : f16_accum ? CUDA_R_16F : CUDA_R_32F;
  cudaDataType_t in_t = lt_type(d.dtype), out_t = lt_type(c_dtype);
  auto o = std::make_unique<LtObjects>();
  if (tc_status st = check_lt(cublasLtMatmulDescCreate(&o->op, compute, scale), "cublasLtMatmulDescCreate")) return st;
  cublasOperation_t opa = d.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // Lt's A is our B
  cublasOperation_t opb = d.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
  cublasLtMatmulDescSetAttribute(o->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
  // Column-major shapes of the stored operands.
  int64_t a_rows = d.transpose_b ? d.K : d.N, a_cols = d.transpose_b ? d.N : d.K;
  int64_t b_rows = d.transpose_a ? d.M : d.K, b_cols = d.transpose_a ? d.K : d.M;
  if (tc_status st = make_layout(&o->a, in_t, a_rows, a_cols, d.ldb, d.batch, d.stride_b)) return st;
  if (tc_status st = make_layout(&o->b, in_t, b_rows, b_cols, d.lda, d.batch, d.stride_a)) return st;
  if (tc_status st = make_layout(&o->c, out_t, d.N, d.M, d.ldc, d.batch, d.stride_c)) return st;
  cublasLtMatmulPreference_t pref = nullptr;
  if (tc_status st = check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate")) return st;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  // Lt's A is our B and its B our A.
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al.b, sizeof al.b);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al.a, sizeof al.a);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al.c, sizeof al.c);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al.c, sizeof al.c);
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(dev.lt(), o->op, o->a, o->b, o->c, o->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    return fail(TC_ERR_UNSUPPORTED, "gemm: cuBLASLt has no algorithm for this problem (status %d)", int(hs));
  o->algo = result.algo;
  *out = std::move(o);
  return TC_OK;
}

}  // namespace

tc_status gemm_lt(Device& dev, StreamState* s, const tc_gemm_desc& d, tc_dtype c_dtype, const void* a_ptr,
                  const void* b_ptr, void* c_ptr) {
  const Aligns al{alignment(a_ptr), alignment(b_ptr), alignment(c_ptr)};
  PlanKey key{d.dtype, d.accum, d.allow_tf32, d.transpose_a, d.transpose_b, d.M, d.N, d.K, d.lda, d.ldb, d.ldc,
              d.batch, d.stride_a, d.stride_b, d.stride_c, dev.index(), c_dtype, al.a, al.b, al.c};
  LtObjects* plan = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_plan_mu);
    auto it = g_plans.find(key);
    if (it != g_plans.end()) plan = it->second.get();
  }
  if (!plan) {
    std::unique_ptr<LtObjects> built;
    if (tc_status st = build_plan(dev, s->workspace_bytes, d, c_dtype, al, &built)) return st;
    std::lock_guard<std::mutex> lock(g_plan_mu);
    auto& slot = g_plans[key];
    if (!slot) slot = std::move(built);
    plan = slot.get();
  }
  const bool i8 = d.dtype == TC_DTYPE_I8;
  const bool f16_accum = d.dtype == TC_DTYPE_F16 && d.accum == TC_DTYPE_F16;
  float alpha_f = float(d.alpha), beta_f = float(d.beta);
  __half alpha_h = __float2half(alpha_f), beta_h = __float2half(beta_f);
  int32_t alpha_i = int32_t(int64_t(d.alpha)), beta_i = int32_t(int64_t(d.beta));
  const void* alpha = i8 ? (const void*)&alpha_i : f16_accum ? (const void*)&alpha_h : (const void*)&alpha_f;
  const void* beta = i8 ? (const void*)&beta_i : f16_accum ? (const void*)&beta_h : (const void*)&beta_f;
  s->last_kernel = "cublasLtMatmul";
  return check_lt(cublasLtMatmul(dev.lt(), plan->op, alpha, b_ptr, plan->a, a_ptr, plan->b, beta, c_ptr, plan->c,
                                 c_ptr, plan->c, &plan->algo, s->workspace, s->workspace_bytes, s->stream),
                  "gemm: cublasLtMatmul");
}

tc_status gemm(Device& dev, StreamState* s, const GemmArgs& args) {
  const tc_gemm_desc& d = args.d;
  const tc_dtype ct = args.c_dtype();
  if (d.K == 0) {
    const int64_t total = d.batch * d.M * d.N;
    const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 8192));
    if (ct == TC_DTYPE_I32) {
      scale_kernel_i32<<<blocks, 256, 0, s->stream>>>(static_cast<int32_t*>(args.c), d.batch, d.M, d.N, d.ldc,
                                                      d.stride_c, int32_t(int64_t(d.beta)));
    } else if (ct == TC_DTYPE_F32) {
      scale_kernel<float><<<blocks, 256, 0, s->stream>>>(static_cast<float*>(args.c), d.batch, d.M, d.N, d.ldc,
                                                         d.stride_c, float(d.beta));
    } else if (ct == TC_DTYPE_F16) {
      scale_kernel<__half><<<blocks, 256, 0, s->stream>>>(static_cast<__half*>(args.c), d.batch, d.M, d.N, d.ldc,
                                                          d.stride_c, float(d.beta));
    } else {
      scale_kernel<__nv_bfloat16><<<blocks, 256, 0, s->stream>>>(static_cast<__nv_bfloat16*>(args.c), d.batch, d.M,
                                                                 d.N, d.ldc, d.stride_c, float(d.beta));
    }
    s->last_kernel = "gemm_scale_c";
    return check(cudaGetLastError(), "gemm: scale kernel launch");
  }
  if (d.dtype == TC_DTYPE_I8 && !i8_tensor_core_layout(d)) {
    // Grid y and z are limited to 65535: launch in chunks of row tiles and batches.
    constexpr int64_t kMaxGrid = 65535;
    const int64_t row_tiles = (d.M + kTile - 1) / kTile;
    for (int64_t b0 = 0; b0 < d.batch; b0 += kMaxGrid) {
      for (int64_t t0 = 0; t0 < row_tiles; t0 += kMaxGrid) {
        dim3 grid(unsigned((d.N + kTile - 1) / kTile), unsigned(std::min(kMaxGrid, row_tiles - t0)),
                  unsigned(std::min(kMaxGrid, d.batch - b0)));
        gemm_i8_tiled<<<grid, dim3(kTile, 8), 0, s->stream>>>(
            static_cast<const int8_t*>(args.a), static_cast<const int8_t*>(args.b), static_cast<int32_t*>(args.c),
            d.M, d.N, d.K, d.lda, d.ldb, d.ldc, d.stride_a, d.stride_b, d.stride_c, d.transpose_a, d.transpose_b,
            int32_t(int64_t(d.alpha)), int32_t(int64_t(d.beta)), t0 * kTile, b0);
      }
    }
    s->last_kernel = "gemm_i8_tiled";
    return check(cudaGetLastError(), "gemm: i8 kernel launch");
  }
  return gemm_lt(dev, s, d, ct, args.a, args.b, args.c);
}

}  // namespace cuda
}  // namespace tc
