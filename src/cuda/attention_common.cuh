// Pieces shared by the attention kernels (attention.cu, attention_backward.cu):
// the mask geometry, io-dtype conversions, and the tensor-core primitives
// (cp.async, ldmatrix, mma.sync m16n8k16) with the fragment layouts the
// kernels rely on.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/backend.h"

namespace tc {
namespace cuda {
namespace att {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Which keys query row i sees (tensorcore/attention.h): with p = i + off,
// off = Skv - Sq,
//   causal or window : j <= p
//   window W > 0     : j > p - W
// key_begin/key_end give the half-open range [begin, end) clamped to [0, Skv];
// end <= begin means the row sees nothing (O = 0, LSE = -inf, no gradient).
struct Mask {
  int64_t sq, skv, off, window;
  bool causal;
  __host__ __device__ int64_t key_begin(int64_t i) const {
    if (window <= 0) return 0;
    int64_t b = i + off - window + 1;
    return b < 0 ? 0 : (b > skv ? skv : b);
  }
  __host__ __device__ int64_t key_end(int64_t i) const {
    if (!causal && window <= 0) return skv;
    int64_t e = i + off + 1;
    return e < 0 ? 0 : (e > skv ? skv : e);
  }
  // Query rows that see key j: [row_begin, row_end) clamped to [0, Sq].
  __host__ __device__ int64_t row_begin(int64_t j) const {
    if (!causal && window <= 0) return 0;
    int64_t b = j - off;  // j <= i + off
    return b < 0 ? 0 : (b > sq ? sq : b);
  }
  __host__ __device__ int64_t row_end(int64_t j) const {
    if (window <= 0) return sq;
    int64_t e = j - off + window;  // j > i + off - W  <=>  i < j - off + W
    return e < 0 ? 0 : (e > sq ? sq : e);
  }
};

inline Mask make_mask(const tc_attention_desc& d) {
  return Mask{d.seq_q, d.seq_kv, d.seq_kv - d.seq_q, d.window_size, d.causal != 0};
}

// io dtype <-> f32.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// Two f32 -> one 32-bit register of two 16-bit values, `lo` in the low half
// (the lower column index in every mma fragment).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

// ---- tensor-core primitives -------------------------------------------------------------
//
// These need sm_80 or later; compiled for an older target they trap, and the
// host side sends such devices to the row-wise kernels instead (att::has_mma).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define TC_ATT_NO_MMA 1
#endif
//
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: D[16x8] += A[16x16] B[16x8].
// With lane = 4 * g + t (g = lane / 4 the "groupID", t = lane % 4), per the
// PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type":
//   A (4 regs, 2 values each): a0 = A[g][2t..2t+1]     a1 = A[g+8][2t..2t+1]
//                              a2 = A[g][2t+8..2t+9]   a3 = A[g+8][2t+8..2t+9]
//   B (2 regs):                b0 = B[2t..2t+1][g]     b1 = B[2t+8..2t+9][g]
//   C/D (4 f32):               c0,c1 = C[g][2t..2t+1]  c2,c3 = C[g+8][2t..2t+1]
// The C layout of two adjacent n-tiles (columns 0..7, 8..15) is therefore
// exactly the A layout of a 16x16 tile: c[0](0,1) -> a0, c[0](2,3) -> a1,
// c[1](0,1) -> a2, c[1](2,3) -> a3. That is how P (an accumulator) becomes
// the A operand of P V without going through shared memory.
//
// ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8m..8m+7 give the row
// addresses of 8x8 matrix m (16 bytes per row); afterwards register m of
// each lane holds, of matrix m, row g, columns 2t..2t+1, i.e. the A/B
// fragment piece above. With .trans it holds the transposed matrix's row g:
// stored rows 2t, 2t+1 of column g (how V, stored [key][d], becomes the
// "col" B operand of P V).
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef TC_ATT_NO_MMA
  __trap();
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                         uint32_t b1) {
#ifdef TC_ATT_NO_MMA
  __trap();
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_addr) {
#ifdef TC_ATT_NO_MMA
  __trap();
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
#endif
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_addr) {
#ifdef TC_ATT_NO_MMA
  __trap();
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row_addr)));
#endif
}
// 16-byte global -> shared copy; `valid` false writes 16 zero bytes (src-size
// 0 reads nothing, so `src` only has to be some mapped address).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
#ifdef TC_ATT_NO_MMA
  __trap();
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifndef TC_ATT_NO_MMA
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifndef TC_ATT_NO_MMA
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Whether the device runs a tensor-core kernel needing `smem` bytes of shared
// memory per CTA (sm_80 or later, and enough opt-in shared memory: sm_86/89
// parts have 99 KB, less than some of the tiles take).
inline bool has_mma(int device, size_t smem) {
  int major = 0, optin = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8 &&
         cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess &&
         size_t(optin) >= smem;
}

}  // namespace att
}  // namespace cuda
}  // namespace tc
