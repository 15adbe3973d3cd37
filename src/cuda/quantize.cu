// Quantisation and dequantisation of weight matrices on the GPU, bit-identical
// to the CPU (src/quant/quantize.cpp, dequantize.cpp: ggml's reference
// quantisers and dequantisers).
//
// quantize_weights: one thread per block of 32 (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) or 256
// (Q8_K) weights, one per element for f16 / bf16 / f32. The f32 arithmetic is
// ggml's, operation for operation, with explicit round-to-nearest intrinsics
// so nvcc fuses nothing into an FMA:
//   Q4_0  max = the element of largest |x| (first on ties), d = max / -8,
//         id = 1/d (0 if d = 0), q = min(15, (int8)(x id + 8.5))
//   Q4_1  d = (max - min) / 15, q = min(15, (int8)((x - min) id + 0.5))
//   Q5_0  as Q4_0 with d = max / -16, q = min(31, (int8)(x id + 16.5))
//   Q5_1  d = (max - min) / 31, q = (uint8)((x - min) id + 0.5)
//         (both: nibbles as Q4_0, bit 4 of weight j's q at bit j of qh)
//   Q8_0  d = amax / 127, q = roundf(x id) (half away from zero)
//   Q8_K  iscale = -127 / max, q = min(127, nearest_int(iscale x)), d = 1 / iscale
// (int8)(float) reproduces x86's cvttss2si (INT32_MIN when out of range,
// low byte kept), as the CPU does; f16 conversions round to nearest even
// through the same bit manipulation as src/core/half.h.
//
// dequantize_weights: weight_at of quant_formats.cuh (ggml's operation
// order), narrowed to f16 / bf16 with the CPU's rounding. It turns a whole
// weight matrix into the operand of a GEMM (the LLaMA prefill: 6.5 G weights
// per 7B forward), so it must run at memory speed: one thread per part of a
// block through the GEMV's decoders (dequantize_parts), each 16 bytes of
// output one vector store. Outputs not 16-byte aligned row by row, sources
// below their format's alignment and the plain formats take one thread per
// element (dequantize_elems).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/error.h"
#include "core/half.h"
#include "cuda/device.h"
#include "cuda/quant_formats.cuh"

namespace tc {
namespace cuda {
namespace {

using qdev::f32_to_bf16;
using qdev::f32_to_f16;

// Element i of a row-major source of dtype dt, at any alignment.
__device__ __forceinline__ float load_src(const uint8_t* src, int64_t i, tc_dtype dt) {
  if (dt == TC_DTYPE_F32) return __uint_as_float(qdev::ld32<1>(src + 4 * i));
  const uint16_t h = uint16_t(qdev::ld16<1>(src + 2 * i));
  return dt == TC_DTYPE_F16 ? qdev::f16_to_f32(h) : qdev::bf16_to_f32(h);
}

__device__ __forceinline__ void store16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v & 0xFF);
  p[1] = uint8_t(v >> 8);
}
__device__ __forceinline__ void store32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}

__device__ __forceinline__ int8_t to_int8(float v) {
  const int32_t i = (v > -2147483648.0f && v < 2147483648.0f) ? __float2int_rz(v) : INT32_MIN;
  return int8_t(uint8_t(uint32_t(i) & 0xFF));
}

__device__ __forceinline__ int nearest_int(float fval) {
  const float val = __fadd_rn(fval, 12582912.f);
  const int i = __float_as_int(val);
  return (i & 0x007fffff) - 0x00400000;
}

// Block `blk` of the matrix (blocks numbered row-major: rows hold whole
// blocks, so block i's elements are elements QK i .. QK i + QK - 1).
__global__ void quantize_blocks(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int32_t fmt,
                                tc_dtype dt, int64_t nblocks) {
  const int64_t blk = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (blk >= nblocks) return;
  if (fmt == quant::Q4_0 || fmt == quant::Q4_1 || fmt == quant::Q5_0 || fmt == quant::Q5_1 || fmt == quant::Q8_0) {
    float x[32];
    for (int j = 0; j < 32; ++j) x[j] = load_src(src, blk * 32 + j, dt);
    if (fmt == quant::Q4_0) {
      uint8_t* y = dst + blk * 18;
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; ++j)
        if (amax < fabsf(x[j])) {
          amax = fabsf(x[j]);
          max = x[j];
        }
      const float d = __fdiv_rn(max, -8.0f);
      const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
      store16(y, f32_to_f16(d));
      for (int j = 0; j < 16; ++j) {
        const int8_t a = to_int8(__fadd_rn(__fmul_rn(x[j], id), 8.5f));
        const int8_t b = to_int8(__fadd_rn(__fmul_rn(x[j + 16], id), 8.5f));
        const uint8_t xi0 = uint8_t(a < 15 ? a : 15), xi1 = uint8_t(b < 15 ? b : 15);
        y[2 + j] = uint8_t(xi0 | (xi1 << 4));
      }
    } else if (fmt == quant::Q5_0) {
      uint8_t* y = dst + blk * 22;
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; ++j)
        if (amax < fabsf(x[j])) {
          amax = fabsf(x[j]);
          max = x[j];
        }
      const float d = __fdiv_rn(max, -16.0f);
      const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
      store16(y, f32_to_f16(d));
      uint32_t qh = 0;
      for (int j = 0; j < 16; ++j) {
        const int8_t a = to_int8(__fadd_rn(__fmul_rn(x[j], id), 16.5f));
        const int8_t b = to_int8(__fadd_rn(__fmul_rn(x[j + 16], id), 16.5f));
        const uint8_t xi0 = uint8_t(a < 31 ? a : 31), xi1 = uint8_t(b < 31 ? b : 31);
        y[6 + j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= uint32_t((xi0 >> 4) & 1) << j | uint32_t((xi1 >> 4) & 1) << (j + 16);
      }
      store32(y + 2, qh);
    } else if (fmt == quant::Q5_1) {
      uint8_t* y = dst + blk * 24;
      float min = 3.402823466e+38f, max = -3.402823466e+38f;
      for (int j = 0; j < 32; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
      }
      const float d = __fdiv_rn(__fsub_rn(max, min), 31.0f);
      const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
      store16(y, f32_to_f16(d));
      store16(y + 2, f32_to_f16(min));
      uint32_t qh = 0;
      for (int j = 0; j < 16; ++j) {
        const uint8_t xi0 = uint8_t(to_int8(__fadd_rn(__fmul_rn(__fsub_rn(x[j], min), id), 0.5f)));
        const uint8_t xi1 = uint8_t(to_int8(__fadd_rn(__fmul_rn(__fsub_rn(x[j + 16], min), id), 0.5f)));
        y[8 + j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= uint32_t((xi0 >> 4) & 1) << j | uint32_t((xi1 >> 4) & 1) << (j + 16);
      }
      store32(y + 4, qh);
    } else if (fmt == quant::Q4_1) {
      uint8_t* y = dst + blk * 20;
      float min = 3.402823466e+38f, max = -3.402823466e+38f;
      for (int j = 0; j < 32; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
      }
      const float d = __fdiv_rn(__fsub_rn(max, min), 15.0f);
      const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
      store16(y, f32_to_f16(d));
      store16(y + 2, f32_to_f16(min));
      for (int j = 0; j < 16; ++j) {
        const int8_t a = to_int8(__fadd_rn(__fmul_rn(__fsub_rn(x[j], min), id), 0.5f));
        const int8_t b = to_int8(__fadd_rn(__fmul_rn(__fsub_rn(x[j + 16], min), id), 0.5f));
        const uint8_t xi0 = uint8_t(a < 15 ? a : 15), xi1 = uint8_t(b < 15 ? b : 15);
        y[4 + j] = uint8_t(xi0 | (xi1 << 4));
      }
    } else {
      uint8_t* y = dst + blk * 34;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) {
        const float ax = fabsf(x[j]);
        amax = amax > ax ? amax : ax;
      }
      const float d = __fdiv_rn(amax, 127.0f);
      const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
      store16(y, f32_to_f16(d));
      for (int j = 0; j < 32; ++j) y[2 + j] = uint8_t(to_int8(roundf(__fmul_rn(x[j], id))));
    }
    return;
  }
  // Q8_K: two passes over the source (256 values do not fit registers).
  uint8_t* y = dst + blk * 292;
  const int64_t x0 = blk * 256;
  float max = 0.0f, amax = 0.0f;
  for (int j = 0; j < 256; ++j) {
    const float v = load_src(src, x0 + j, dt);
    const float ax = fabsf(v);
    if (ax > amax) {
      amax = ax;
      max = v;
    }
  }
  if (amax == 0.0f) {
    for (int j = 0; j < 292; ++j) y[j] = 0;
    return;
  }
  const float iscale = __fdiv_rn(-127.f, max);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int j = 16 * g; j < 16 * g + 16; ++j) {
      const int v = nearest_int(__fmul_rn(iscale, load_src(src, x0 + j, dt)));
      const int8_t q = int8_t(v < 127 ? v : 127);
      y[4 + j] = uint8_t(q);
      sum += q;
    }
    store16(y + 260 + 2 * g, uint16_t(int16_t(sum)));
  }
  store32(y, __float_as_uint(__fdiv_rn(1.0f, iscale)));
}

// f16 / bf16 / f32 "quantisation": element-wise conversion.
__global__ void quantize_plain(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int32_t fmt, tc_dtype dt,
                               int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = load_src(src, i, dt);
    if (fmt == quant::F32) store32(dst + 4 * i, __float_as_uint(v));
    else store16(dst + 2 * i, fmt == quant::F16 ? f32_to_f16(v) : f32_to_bf16(v));
  }
}

// Y[r, k] = weight k of row r, in dtype dt.
__global__ void dequantize_elems(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int32_t fmt, tc_dtype dt,
                                 int64_t N, int64_t K, int qk, int block_bytes) {
  const int64_t row_bytes = K / qk * block_bytes;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < N * K; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    const float v = qdev::weight_at(fmt, src + r * row_bytes + (k / qk) * block_bytes, int(k % qk));
    if (dt == TC_DTYPE_F32) store32(dst + 4 * i, __float_as_uint(v));
    else store16(dst + 2 * i, dt == TC_DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v));
  }
}

// Rows of K weights in block format F (a qdev decoder), one thread per part
// of a block: the decoder reads the part's bytes with loads of alignment A
// and gives runs of four weights w = a q + b, so each part's scales are
// decoded once rather than once per weight (a thread calling weight_at for
// each of 32 weights was bound by instructions at a third of memory speed
// in the prefill's profile). w = a q (+ b) rounds as weight_at does: a is
// the product weight_at forms first (d, or d sc), q an exact integer (or 16
// times one, a divided by 16: the same rounding), b = m or -(dmin m); the
// formats without a minimum skip + 0, which would turn -0 into +0. Runs g
// and g + 1 of a part are consecutive weights in every format, so each pair
// is 8 outputs: one 16-byte store in f16 / bf16, two in f32. Rows hold whole
// blocks, so block i's outputs start at i * QK; the caller checked that dst
// is 16-byte aligned (then so is every pair) and src A-aligned.
template <class F, int A, class Out>
__global__ void dequantize_parts(const uint8_t* __restrict__ src, Out* __restrict__ dst, int64_t nblocks) {
  const int64_t units = nblocks * F::kParts;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < units; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / F::kParts;
    qdev::Part<F::kGroups> pt;
    F::template decode<A>(src + i * F::kBytes, int(t - i * F::kParts), pt);
    Out* out = dst + i * F::kQK;
#pragma unroll
    for (int g = 0; g < F::kGroups; g += 2) {
      float w[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = g + e / 4;
        const float v = __fmul_rn(pt.a[r], pt.q[4 * r + e % 4]);
        w[e] = F::kMin ? __fadd_rn(v, pt.b[r]) : v;
      }
      Out* o = out + pt.pos[g];
      if constexpr (sizeof(Out) == 4) {
        reinterpret_cast<float4*>(o)[0] = make_float4(w[0], w[1], w[2], w[3]);
        reinterpret_cast<float4*>(o)[1] = make_float4(w[4], w[5], w[6], w[7]);
      } else {
        constexpr bool h = std::is_same_v<Out, __half>;
        uint32_t v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          v[e] = uint32_t(h ? f32_to_f16(w[2 * e]) : f32_to_bf16(w[2 * e])) |
                 uint32_t(h ? f32_to_f16(w[2 * e + 1]) : f32_to_bf16(w[2 * e + 1])) << 16;
        *reinterpret_cast<uint4*>(o) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }
}

template <class F, int A>
void launch_dequantize_parts(const DequantizeWeightsArgs& a, cudaStream_t stream) {
  const int64_t nblocks = a.N * (a.K / F::kQK);
  const unsigned grid = unsigned(std::min<int64_t>((nblocks * F::kParts + 255) / 256, int64_t(1) << 20));
  const uint8_t* src = static_cast<const uint8_t*>(a.src);
  if (a.dtype == TC_DTYPE_F32)
    dequantize_parts<F, A, float><<<grid, 256, 0, stream>>>(src, static_cast<float*>(a.dst), nblocks);
  else if (a.dtype == TC_DTYPE_F16)
    dequantize_parts<F, A, __half><<<grid, 256, 0, stream>>>(src, static_cast<__half*>(a.dst), nblocks);
  else
    dequantize_parts<F, A, __nv_bfloat16><<<grid, 256, 0, stream>>>(src, static_cast<__nv_bfloat16*>(a.dst), nblocks);
}

// The decoder's own alignment for a source at `src`, or 16 where whole
// blocks are 16-byte multiples and src is 16-aligned (one load for a
// K-quant's header). False where src is not even F::kAlign-aligned.
template <class F>
bool launch_dequantize(const DequantizeWeightsArgs& a, cudaStream_t stream) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(a.src);
  if constexpr (F::kBytes % 16 == 0) {
    if (at % 16 == 0) return launch_dequantize_parts<F, 16>(a, stream), true;
  }
  if (at % F::kAlign != 0) return false;
  launch_dequantize_parts<F, F::kAlign>(a, stream);
  return true;
}

unsigned grid_for(int64_t n, int threads) {
  const int64_t g = (n + threads - 1) / threads;
  return unsigned(g < 65536 * 16 ? g : 65536 * 16);  // grid-stride loops cover the rest
}

}  // namespace

tc_status quantize_weights(Device&, StreamState* s, const QuantizeWeightsArgs& a) {
  const quant::FormatInfo& f = *quant::format_info(a.fmt);
  const uint8_t* src = static_cast<const uint8_t*>(a.src);
  uint8_t* dst = static_cast<uint8_t*>(a.dst);
  if (f.block_elems == 1) {
    s->last_kernel = "quantize_plain";
    quantize_plain<<<grid_for(a.N * a.K, 256), 256, 0, s->stream>>>(src, dst, a.fmt, a.src_dtype, a.N * a.K);
  } else {
    const int64_t nblocks = a.N * (a.K / f.block_elems);
    const int64_t grid = (nblocks + 127) / 128;
    if (grid > INT32_MAX)
      return fail(TC_ERR_UNSUPPORTED, "quantize_weights: %lld blocks exceed one launch", (long long)nblocks);
    s->last_kernel = "quantize_blocks";
    quantize_blocks<<<unsigned(grid), 128, 0, s->stream>>>(src, dst, a.fmt, a.src_dtype, nblocks);
  }
  return check(cudaGetLastError(), "quantize_weights: launch");
}

tc_status dequantize_weights(Device&, StreamState* s, const DequantizeWeightsArgs& a) {
  const quant::FormatInfo& f = *quant::format_info(a.fmt);
  const int esize = a.dtype == TC_DTYPE_F32 ? 4 : 2;
  const bool vectors = f.block_elems > 1 && reinterpret_cast<uintptr_t>(a.dst) % 16 == 0 &&
                       (int64_t(f.block_elems) * esize) % 16 == 0;  // rows hold whole blocks: aligned too
  bool launched = false;
  if (vectors) {
    s->last_kernel = "dequantize_parts";
    switch (a.fmt) {
      case quant::Q4_0: launched = launch_dequantize<qdev::Q4_0>(a, s->stream); break;
      case quant::Q4_1: launched = launch_dequantize<qdev::Q4_1>(a, s->stream); break;
      case quant::Q8_0: launched = launch_dequantize<qdev::Q8_0>(a, s->stream); break;
      case quant::Q5_0: launched = launch_dequantize<qdev::Q5_0>(a, s->stream); break;
      case quant::Q5_1: launched = launch_dequantize<qdev::Q5_1>(a, s->stream); break;
      case quant::Q4_K: launched = launch_dequantize<qdev::Q4_K>(a, s->stream); break;
      case quant::Q5_K: launched = launch_dequantize<qdev::Q5_K>(a, s->stream); break;
      case quant::Q6_K: launched = launch_dequantize<qdev::Q6_K>(a, s->stream); break;
      case quant::Q8_K: launched = launch_dequantize<qdev::Q8_K>(a, s->stream); break;
      default: return fail(TC_ERR_INTERNAL, "dequantize_weights: format %d has no block kernel", int(a.fmt));
    }
  }
  if (!launched) {  // plain formats, an unaligned output or source: a thread per weight
    s->last_kernel = "dequantize_elems";
    dequantize_elems<<<grid_for(a.N * a.K, 256), 256, 0, s->stream>>>(static_cast<const uint8_t*>(a.src),
                                                                      static_cast<uint8_t*>(a.dst), a.fmt, a.dtype,
                                                                      a.N, a.K, f.block_elems, f.block_bytes);
  }
  return check(cudaGetLastError(), "dequantize_weights: launch");
}

}  // namespace cuda
}  // namespace tc
