// The decoder's small ops on the GPU (core/backend.h, "model ops"); the CPU
// kernels are src/cpu/model_ops.cpp and these compute the same values.
//
//   embed_rows:       dst[i, k] = scale * dequant(table row tokens[i])[k]: one thread
//                     per weight, each format's formula as quant::dequantize_row
//                     writes it (products and sums rounded one by one, no fused
//                     multiply-add, so the f32 values are the reference's)
//   add:              x += y, or x += rmsnorm(y) gamma row by row (a block a row)
//   convert:          f32 <-> f16 / bf16, round to nearest even; a Q8_0
//                     cache's rows to f32 (q d, exact) or f16
//   rope_kv_append:   p = *pos + i; q, k and v plus their biases if given (one
//                     f32 sum), q and k RMS-normed per head if asked (the
//                     rmsnorm op's formula, its sum of squares in the
//                     block's order); (a, b) -> (a c - b s, b c + a s) for the
//                     pairs (x[2k], x[2k+1]) or, NEOX, (x[k], x[k + D/2]) of the
//                     queries (to [H][n][D]) and keys (into the cache at p),
//                     values copied into the cache at p; a cache of f32, of
//                     f16 rounded to nearest even, or of Q8_0 blocks (a warp
//                     per block of 32, lane = element: d = max|x| / 127 by a
//                     shuffle max, q = roundf(x / d), ggml's
//                     quantize_row_q8_0_ref operation for operation, so the
//                     bytes are the CPU's). A batch of sequences:
//                     token i at p = pos[i] in cache slot slots[i]
//   heads_to_tokens:  [H][n][D] -> [n][H][D]
//   copy_2d:          cudaMemcpy2DAsync, device to device
//   argmax_rows:      a block a row: each thread the first index of its largest
//                     value over a strided pass, then a tree over (value, index)
//                     pairs: the larger value wins, on a tie (or two NaNs) the
//                     lower index, a NaN beats any number (NumPy's argmax)
// Every position and token id comes from device memory, never from the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "core/error.h"
#include "core/gate.h"
#include "cuda/device.h"
#include "cuda/kv_cache.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q8_block.cuh"
#include "cuda/rows.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {

using namespace tc::quant;


// Weight k of a row in format fmt, as quant::dequantize_row computes it.
__device__ float dequant_at(int32_t fmt, const uint8_t* row, int64_t k) {
  switch (fmt) {
    case Q4_0: {
      const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row) + k / QK4_0;
      const int j = int(k % QK4_0);
      const int q = j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4);
      return __fmul_rn(float(q - 8), h2f(b->d));
    }
    case Q4_1: {
      const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(row) + k / QK4_1;
      const int j = int(k % QK4_1);
      const int q = j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4);
      return __fadd_rn(__fmul_rn(float(q), h2f(b->d)), h2f(b->m));
    }
    case Q5_0: {
      const BlockQ5_0* b = reinterpret_cast<const BlockQ5_0*>(row) + k / QK5_0;
      const int j = int(k % QK5_0);
      const int q = (j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4)) | (((b->qh[j / 8] >> (j % 8)) & 1) << 4);
      return __fmul_rn(float(q - 16), h2f(b->d));
    }
    case Q5_1: {
      const BlockQ5_1* b = reinterpret_cast<const BlockQ5_1*>(row) + k / QK5_1;
      const int j = int(k % QK5_1);
      const int q = (j < 16 ? (b->qs[j] & 0x0F) : (b->qs[j - 16] >> 4)) | (((b->qh[j / 8] >> (j % 8)) & 1) << 4);
      return __fadd_rn(__fmul_rn(float(q), h2f(b->d)), h2f(b->m));
    }
    case Q8_0: {
      const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + k / QK8_0;
      return __fmul_rn(float(b->qs[k % QK8_0]), h2f(b->d));
    }
    case Q4_K:
    case Q5_K: {
      // Chunk c of 64 weights: sub-blocks 2c (first 32) and 2c + 1.
      const int r = int(k % QK_K), c = r / 64, l = r % 64, hi = l >= 32;
      const uint8_t *scales, *qs;
      uint16_t d, dmin;
      int fifth = 0;
      if (fmt == Q4_K) {
        const BlockQ4_K* b = reinterpret_cast<const BlockQ4_K*>(row) + k / QK_K;
        scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
      } else {
        const BlockQ5_K* b = reinterpret_cast<const BlockQ5_K*>(row) + k / QK_K;
        scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
        fifth = (b->qh[l % 32] >> (2 * c + hi)) & 1 ? 16 : 0;
      }
      uint8_t sc, m;
      scale_min_k4(2 * c + hi, scales, &sc, &m);
      const uint8_t byte = qs[32 * c + l % 32];
      const int q = (hi ? byte >> 4 : byte & 0xF) + fifth;
      const float d1 = __fmul_rn(h2f(d), float(sc)), m1 = __fmul_rn(h2f(dmin), float(m));
      return __fsub_rn(__fmul_rn(d1, float(q)), m1);
    }
    case Q6_K: {
      const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + k / QK_K;
      const int r = int(k % QK_K), half = r / 128, w = r % 128, grp = w / 32, l = w % 32;
      const uint8_t* ql = b->ql + 64 * half;
      const uint8_t* qh = b->qh + 32 * half;
      const int8_t* sc = b->scales + 8 * half;
      const uint8_t lo = ql[l + (grp & 1) * 32];
      const int q = ((grp < 2 ? lo & 0xF : lo >> 4) | (((qh[l] >> (2 * grp)) & 3) << 4)) - 32;
      return __fmul_rn(__fmul_rn(h2f(b->d), float(sc[l / 16 + 2 * grp])), float(q));
    }
    case Q8_K: {
      const BlockQ8_K* b = reinterpret_cast<const BlockQ8_K*>(row) + k / QK_K;
      return __fmul_rn(b->d, float(b->qs[k % QK_K]));
    }
    case F16: return h2f(reinterpret_cast<const uint16_t*>(row)[k]);
    case BF16: return __uint_as_float(uint32_t(reinterpret_cast<const uint16_t*>(row)[k]) << 16);
    default: return reinterpret_cast<const float*>(row)[k];  // F32
  }
}

__global__ void embed_rows_kernel(int32_t fmt, int64_t K, uint64_t row_bytes, const uint8_t* table,
                                  const int32_t* tokens, float* dst, float scale) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = blockIdx.y;
  const uint8_t* row = table + uint64_t(tokens[i]) * row_bytes;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K; k += int64_t(gridDim.x) * blockDim.x)
    dst[i * K + k] = scale == 1.0f ? dequant_at(fmt, row, k) : __fmul_rn(dequant_at(fmt, row, k), scale);
}

__global__ void add_kernel(int64_t n, float* x, const float* y) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

// x[r] += y[r] rstd gamma for rows r of D, rstd = 1 / sqrt(mean y[r]^2 +
// eps) (rmsnorm_forward's formula and products), or x[r] += y[r] without
// gamma; then, with out, out[r] = x[r] rstd(x[r]) norm_gamma (the next
// product's input, in Out). A block a row, E floats a load (4 where D and
// the pointers allow), as many threads as a row has loads (up to 1024). A
// decode step's row is then one load a thread and one round trip to memory
// a pass; 256 threads looping over the row's floats one at a time waited
// for ten loads in turn (7.3 us a row of 2560 on an H100, more than the
// rmsnorm and add kernels it replaced together). The norm's pass rereads
// only the x its own thread wrote.
template <int E, class Out>
__global__ void add_normed_kernel(int64_t rows, int64_t D, float* x, const float* y, const float* gamma, float eps,
                                  const float* norm_gamma, Out* out) {
  __shared__ float red[32];
  pdl_trigger();
  pdl_wait();
  const int64_t nv = D / E;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {  // block-uniform
    const float* yr = y ? y + r * D : nullptr;
    float* xr = x + r * D;
    float rs = 1.0f;
    if (gamma) {
      float ss = 0.0f;
#pragma unroll 4
      for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        const Pack<float, E> yv = load<float, E>(yr + i * E);
#pragma unroll
        for (int e = 0; e < E; ++e) ss = fmaf(yv.f(e), yv.f(e), ss);
      }
      rs = rstd_of(row_sum(ss, red), D, eps);
    }
    float sx = 0.0f;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      Pack<float, E> xv = load<float, E>(xr + i * E);
      if (yr) {
        const Pack<float, E> yv = load<float, E>(yr + i * E);
        if (gamma) {
          const Pack<float, E> gv = load<float, E>(gamma + i * E);
#pragma unroll
          for (int e = 0; e < E; ++e) xv.set(e, xv.f(e) + yv.f(e) * rs * gv.f(e));
        } else {
#pragma unroll
          for (int e = 0; e < E; ++e) xv.set(e, xv.f(e) + yv.f(e));
        }
        store<float, E>(xr + i * E, xv);
      }
#pragma unroll
      for (int e = 0; e < E; ++e) sx = fmaf(xv.f(e), xv.f(e), sx);
    }
    if (!out) continue;
    const float rx = rstd_of(row_sum(sx, red), D, eps);
    Out* orow = out + r * D;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      const Pack<float, E> xv = load<float, E>(xr + i * E), gv = load<float, E>(norm_gamma + i * E);
      Pack<Out, E> ov;
#pragma unroll
      for (int e = 0; e < E; ++e) ov.set(e, xv.f(e) * rx * gv.f(e));
      store<Out, E>(orow + i * E, ov);
    }
  }
}

template <class From, class To>
__device__ __forceinline__ To cvt(From v);
template <> __device__ __forceinline__ __half cvt(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float cvt(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float cvt(__nv_bfloat16 v) { return __bfloat162float(v); }


// Row blockIdx.y of a Q8_0 cache (pitches in elements, multiples of 32) to
// f32, f16 or bf16: q d, exact in f32, then rounded to nearest even.
template <class To>
__global__ void convert_q8_kernel(int64_t n, const uint8_t* src, int64_t src_pitch, To* dst, int64_t dst_pitch) {
  const uint8_t* row = src + blockIdx.y * src_pitch / QK8_0 * int64_t(sizeof(BlockQ8_0));
  dst += blockIdx.y * dst_pitch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint8_t* blk = row + i / QK8_0 * int64_t(sizeof(BlockQ8_0));
    const float v = __fmul_rn(float(int8_t(blk[2 + i % QK8_0])), h2f(*reinterpret_cast<const uint16_t*>(blk)));
    if constexpr (std::is_same<To, float>::value) dst[i] = v;
    else dst[i] = cvt<float, To>(v);
  }
}

// Row blockIdx.y of `rows` pieces of n elements, pitches in elements.
template <class From, class To>
__global__ void convert_kernel(int64_t n, const From* src, int64_t src_pitch, To* dst, int64_t dst_pitch) {
  src += blockIdx.y * src_pitch;
  dst += blockIdx.y * dst_pitch;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = cvt<From, To>(src[i]);
}

// The op's arguments without OpInfo (kernel parameters must be plain data).
struct RopeParams {
  int64_t n, H, Hkv, D, C, ldq, ldk, ldv;
  int neox;
  const int32_t* pos;
  const float *q, *k, *v, *cos_t, *sin_t;
  float* qt;
  __half* qt16;  // when set, the queries in f16 here instead of qt
  void *k_cache, *v_cache;
  const int32_t* slots;  // a batch of sequences: pos and slots [n]; null: one sequence at *pos
  int64_t slot_stride;
  const float *bq, *bk, *bv;  // biases of q, k, v (null: none)
  const float *q_norm, *k_norm;  // per-head RMS norms of q and k (null: none)
  float norm_eps;
};



// ggml's quantize_row_q8_0_ref for one block held by a warp, lane j
// holding x_j: d = max|x| / 127, id = 1 / d (0 when d is 0), q_j =
// roundf(x_j id) (half away from zero), d stored as f16 (round to nearest
// even); the CPU computes the same f32 operations (quant::quantize_row).
__device__ __forceinline__ void quantize_q8_0_block(float x, int lane, uint8_t* blk) {
  float amax = fabsf(x);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
  blk[2 + lane] = uint8_t(int8_t(int(roundf(__fmul_rn(x, id)))));
  if (lane == 0) *reinterpret_cast<__half*>(blk) = __float2half_rn(d);
}

// A head's row of q, k or v as the op appends it: x plus its bias (one f32
// sum, as the add op's; null: none), then, with gamma, RMS-normed over the
// row as the rmsnorm op does (y = x rstd gamma, rstd = 1 / sqrt(mean x^2 + eps)).
struct HeadRow {
  const float *x, *bias, *gamma;
  float rstd;
  __device__ __forceinline__ float operator[](int64_t e) const {
    const float b = bias ? __fadd_rn(x[e], bias[e]) : x[e];
    return gamma ? b * rstd * gamma[e] : b;
  }
};

// The row's view; with gamma its rstd from a block-wide sum of squares
// (every thread of the block calls this: blockDim.x is whole warps).
__device__ __forceinline__ HeadRow head_row(const float* x, const float* bias, const float* gamma, int64_t D,
                                            float eps) {
  HeadRow r{x, bias, nullptr, 1.0f};
  if (gamma) {
    __shared__ float red[32];
    float ss = 0.0f;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) ss = fmaf(r[d], r[d], ss);
    r.rstd = rstd_of(row_sum(ss, red), D, eps);
    r.gamma = gamma;
  }
  return r;
}

// Element e of the row rotated: its pair k is (x[2k], x[2k+1]) or, NEOX,
// (x[k], x[k + half]), e its first or second element.
__device__ __forceinline__ float rotated(const HeadRow& x, const float* c, const float* s, int64_t half, bool neox,
                                         int64_t e) {
  const int64_t k = neox ? e % half : e / 2;
  const bool first = neox ? e < half : e % 2 == 0;
  const int64_t partner = neox ? (first ? e + half : e - half) : e ^ 1;
  return rope_elem(x[e], x[partner], c[k], s[k], first);
}

// Rotates the D/2 pairs of the row into dst (the queries' f32 or f16 rows, or a cache row of T).
template <typename T>
__device__ __forceinline__ void rotate_row(const HeadRow& x, T* dst, const float* c, const float* s, int64_t half,
                                           bool neox) {
  const int64_t step = neox ? 1 : 2, other = neox ? half : 1;
  for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
    const int64_t e = k * step;
    store_cache(dst + e, rotated(x, c, s, half, neox, e));
    store_cache(dst + e + other, rotated(x, c, s, half, neox, e + other));
  }
}

// Block (token i, head h): queries for h < H, keys and values after them,
// into a cache of T (float, __half, or Q8Cache: then whole warps, one per
// block of 32 of the row at a time).
template <typename T>
__global__ void rope_kv_append_kernel(RopeParams a) {
  pdl_trigger();
  pdl_wait();
  const int64_t i = blockIdx.x, h = blockIdx.y, D = a.D, half = D / 2;
  const int64_t p = a.slots ? int64_t(a.pos[i]) : int64_t(*a.pos) + i;
  const float* c = a.cos_t + p * half;
  const float* s = a.sin_t + p * half;
  if (h < a.H) {
    const HeadRow q = head_row(a.q + i * a.ldq + h * D, a.bq ? a.bq + h * D : nullptr, a.q_norm, D, a.norm_eps);
    if (a.qt16) rotate_row(q, a.qt16 + (h * a.n + i) * D, c, s, half, a.neox);
    else rotate_row(q, a.qt + (h * a.n + i) * D, c, s, half, a.neox);
    return;
  }
  const int64_t g = h - a.H, cell = row_slot(a.slots, a.slot_stride, i) + (g * a.C + p) * D;
  const HeadRow k = head_row(a.k + i * a.ldk + g * D, a.bk ? a.bk + g * D : nullptr, a.k_norm, D, a.norm_eps);
  const HeadRow v{a.v + i * a.ldv + g * D, a.bv ? a.bv + g * D : nullptr, nullptr, 1.0f};
  if constexpr (std::is_same<T, Q8Cache>::value) {
    const int lane = threadIdx.x % 32;
    uint8_t* kd = static_cast<uint8_t*>(a.k_cache) + cell / QK8_0 * int64_t(sizeof(BlockQ8_0));
    uint8_t* vd = static_cast<uint8_t*>(a.v_cache) + cell / QK8_0 * int64_t(sizeof(BlockQ8_0));
    for (int64_t b = threadIdx.x / 32; b < D / QK8_0; b += blockDim.x / 32) {  // warp-uniform
      const int64_t e = b * QK8_0 + lane;
      quantize_q8_0_block(rotated(k, c, s, half, a.neox, e), lane, kd + b * int64_t(sizeof(BlockQ8_0)));
      quantize_q8_0_block(v[e], lane, vd + b * int64_t(sizeof(BlockQ8_0)));
    }
    return;
  } else {
  T* vd = static_cast<T*>(a.v_cache) + cell;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) store_cache(vd + d, v[d]);
  rotate_row(k, static_cast<T*>(a.k_cache) + cell, c, s, half, a.neox);
  }
}

template <class T>
__global__ void heads_to_tokens_kernel(int64_t n, int64_t H, int64_t D, const T* src, T* dst) {
  const int64_t total = n * H * D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, h = (e / D) % H, i = e / (D * H);
    dst[e] = src[(h * n + i) * D + d];
  }
}

template <class Out>
__global__ void glu_rows_kernel(int64_t n, int64_t F, int64_t ld, bool gelu, const float* gu, Out* out) {
  const int64_t total = n * F;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / F, f = e - i * F;
    out[e] = from_f<Out>(gate::glu(gelu, gu[i * ld + f], gu[i * ld + F + f]));
  }
}

// Whether (v, i) beats (bv, bi) in argmax_rows' order.
__device__ __forceinline__ bool argmax_beats(float v, int32_t i, float bv, int32_t bi) {
  const bool vn = v != v, bn = bv != bv;
  if (vn || bn) return vn && (!bn || i < bi);
  return v > bv || (v == bv && i < bi);
}

constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_rows_kernel(const float* __restrict__ x, int64_t n, bool vec, int32_t* __restrict__ out) {
  const float* row = x + int64_t(blockIdx.x) * n;
  float bv = -INFINITY;
  int32_t bi = INT32_MAX;  // loses to any value, -inf included
  auto consider = [&](float v, int64_t i) {
    if (argmax_beats(v, int32_t(i), bv, bi)) bv = v, bi = int32_t(i);
  };
  if (vec) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < n / 4; j += kArgmaxThreads) {
      const float4 v = __ldcs(r4 + j);
      consider(v.x, 4 * j), consider(v.y, 4 * j + 1), consider(v.z, 4 * j + 2), consider(v.w, 4 * j + 3);
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += kArgmaxThreads) consider(__ldcs(row + j), j);
  }
  auto warp_best = [&] {
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (argmax_beats(ov, oi, bv, bi)) bv = ov, bi = oi;
    }
  };
  warp_best();
  __shared__ float wv[kArgmaxThreads / 32];
  __shared__ int32_t wi[kArgmaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) wv[warp] = bv, wi[warp] = bi;
  __syncthreads();
  if (warp == 0) {
    bv = wv[lane], bi = wi[lane];
    warp_best();
    if (lane == 0) out[blockIdx.x] = bi;
  }
}

}  // namespace

tc_status embed_rows(Device&, StreamState* s, const EmbedRowsArgs& a) {
  s->last_kernel = "embed_rows";
  const dim3 grid(blocks_for(a.K, 256), unsigned(a.n));
  return check(launch_pdl(embed_rows_kernel, grid, dim3(256), 0, s->stream, a.fmt, a.K, a.row_bytes,
                          static_cast<const uint8_t*>(a.table), a.tokens, a.dst, a.scale),
               "embed_rows: launch");
}

tc_status add(Device&, StreamState* s, const AddArgs& a) {
  if (a.gamma || a.norm_out) {
    s->last_kernel = a.norm_out ? "add (and the next norm)" : "add (normed rows)";
    const int64_t rows = a.n / a.D;
    if (rows == 0) return TC_OK;
    const bool vec = a.D % 4 == 0 && aligned16(a.x) && (!a.y || aligned16(a.y)) && (!a.gamma || aligned16(a.gamma)) &&
                     (!a.norm_out || (aligned16(a.norm_out) && aligned16(a.norm_gamma)));
    const int64_t loads = vec ? a.D / 4 : a.D;
    const dim3 grid(unsigned(std::min<int64_t>(rows, 65535)));
    const dim3 block(unsigned(std::min<int64_t>((loads + 31) / 32 * 32, 1024)));
    auto go = [&](auto* out) {
      using Out = std::remove_pointer_t<decltype(out)>;
      return check(launch_pdl(vec ? add_normed_kernel<4, Out> : add_normed_kernel<1, Out>, grid, block, 0, s->stream,
                              rows, a.D, a.x, a.y, a.gamma, a.eps, a.norm_gamma, out),
                   "add: launch");
    };
    if (a.norm_out && a.norm_dtype == TC_DTYPE_F16) return go(static_cast<__half*>(a.norm_out));
    return go(static_cast<float*>(a.norm_out));
  }
  s->last_kernel = "add";
  if (a.n == 0) return TC_OK;
  return check(launch_pdl(add_kernel, dim3(blocks_for(a.n, 256)), dim3(256), 0, s->stream, a.n, a.x, a.y),
               "add: launch");
}

tc_status convert(Device&, StreamState* s, const ConvertArgs& a) {
  s->last_kernel = "convert";
  if (a.rows > 65535) return fail(TC_ERR_UNSUPPORTED, "convert: %lld rows in one call", (long long)a.rows);
  const dim3 grid(blocks_for(a.n, 256), unsigned(a.rows));
  const int64_t sp = a.src_pitch ? a.src_pitch : a.n, dp = a.dst_pitch ? a.dst_pitch : a.n;
  if (a.src_dtype == TC_DTYPE_Q8_0) {
    const uint8_t* src = static_cast<const uint8_t*>(a.src);
    if (a.dst_dtype == TC_DTYPE_F32)
      convert_q8_kernel<<<grid, 256, 0, s->stream>>>(a.n, src, sp, static_cast<float*>(a.dst), dp);
    else if (a.dst_dtype == TC_DTYPE_F16)
      convert_q8_kernel<<<grid, 256, 0, s->stream>>>(a.n, src, sp, static_cast<__half*>(a.dst), dp);
    else
      convert_q8_kernel<<<grid, 256, 0, s->stream>>>(a.n, src, sp, static_cast<__nv_bfloat16*>(a.dst), dp);
    return check(cudaGetLastError(), "convert: launch");
  }
  if (a.src_dtype == TC_DTYPE_F32 && a.dst_dtype == TC_DTYPE_F16)
    convert_kernel<<<grid, 256, 0, s->stream>>>(a.n, static_cast<const float*>(a.src), sp, static_cast<__half*>(a.dst),
                                                dp);
  else if (a.src_dtype == TC_DTYPE_F32)
    convert_kernel<<<grid, 256, 0, s->stream>>>(a.n, static_cast<const float*>(a.src), sp,
                                                static_cast<__nv_bfloat16*>(a.dst), dp);
  else if (a.src_dtype == TC_DTYPE_F16)
    convert_kernel<<<grid, 256, 0, s->stream>>>(a.n, static_cast<const __half*>(a.src), sp, static_cast<float*>(a.dst),
                                                dp);
  else
    convert_kernel<<<grid, 256, 0, s->stream>>>(a.n, static_cast<const __nv_bfloat16*>(a.src), sp,
                                                static_cast<float*>(a.dst), dp);
  return check(cudaGetLastError(), "convert: launch");
}

tc_status rope_kv_append(Device&, StreamState* s, const RopeKvAppendArgs& a) {
  const RopeParams p{a.n, a.H, a.Hkv, a.D, a.C, a.ldq, a.ldk, a.ldv, a.neox ? 1 : 0, a.pos,
                     a.q, a.k, a.v, a.cos_t, a.sin_t, a.qt, reinterpret_cast<__half*>(a.qt16), a.k_cache,
                     a.v_cache, a.slots, a.slot_stride,
                     a.bq, a.bk, a.bv, a.q_norm, a.k_norm, a.norm_eps};
  s->last_kernel = "rope_kv_append";
  const dim3 grid(unsigned(a.n), unsigned(a.H + a.Hkv));
  if (a.cache == TC_DTYPE_Q8_0) {
    // Whole warps: one per block of 32 of a row, up to 8.
    const int threads = 32 * int(std::min<int64_t>(std::max<int64_t>(a.D / QK8_0, 1), 8));
    return check(launch_pdl(rope_kv_append_kernel<Q8Cache>, grid, dim3(threads), 0, s->stream, p),
                 "rope_kv_append: launch");
  }
  // Whole warps (the Q/K norms' block-wide sum), a thread a pair.
  const int threads = int(std::min<int64_t>((std::max<int64_t>(a.D / 2, 32) + 31) / 32 * 32, 256));
  return check(a.cache == TC_DTYPE_F16
                   ? launch_pdl(rope_kv_append_kernel<__half>, grid, dim3(threads), 0, s->stream, p)
                   : launch_pdl(rope_kv_append_kernel<float>, grid, dim3(threads), 0, s->stream, p),
               "rope_kv_append: launch");
}

tc_status heads_to_tokens(Device&, StreamState* s, const HeadsToTokensArgs& a) {
  s->last_kernel = "heads_to_tokens";
  const unsigned grid = blocks_for(a.n * a.H * a.D, 256);
  if (a.dtype == TC_DTYPE_F16)
    heads_to_tokens_kernel<<<grid, 256, 0, s->stream>>>(a.n, a.H, a.D, static_cast<const __half*>(a.src),
                                                        static_cast<__half*>(a.dst));
  else
    heads_to_tokens_kernel<<<grid, 256, 0, s->stream>>>(a.n, a.H, a.D, static_cast<const float*>(a.src),
                                                        static_cast<float*>(a.dst));
  return check(cudaGetLastError(), "heads_to_tokens: launch");
}

tc_status glu_rows(Device&, StreamState* s, const GluRowsArgs& a) {
  s->last_kernel = "glu_rows";
  if (a.n * a.F == 0) return TC_OK;
  const unsigned grid = blocks_for(a.n * a.F, 256);
  if (a.out_dtype == TC_DTYPE_F16)
    glu_rows_kernel<<<grid, 256, 0, s->stream>>>(a.n, a.F, a.ld, a.gelu, a.gu, static_cast<__half*>(a.out));
  else
    glu_rows_kernel<<<grid, 256, 0, s->stream>>>(a.n, a.F, a.ld, a.gelu, a.gu, static_cast<float*>(a.out));
  return check(cudaGetLastError(), "glu_rows: launch");
}

tc_status argmax_rows(Device&, StreamState* s, const ArgmaxRowsArgs& a) {
  s->last_kernel = "argmax_rows";
  if (a.rows == 0) return TC_OK;
  const bool vec = a.n % 4 == 0 && aligned16(a.x);
  argmax_rows_kernel<<<unsigned(a.rows), kArgmaxThreads, 0, s->stream>>>(a.x, a.n, vec, a.out);
  return check(cudaGetLastError(), "argmax_rows: launch");
}

tc_status copy_2d(Device&, StreamState* s, const Copy2dArgs& a) {
  s->last_kernel = "copy_2d";
  return check(cudaMemcpy2DAsync(a.dst, a.dst_pitch, a.src, a.src_pitch, a.row_bytes, size_t(a.rows),
                                 cudaMemcpyDeviceToDevice, s->stream),
               "copy_2d: cudaMemcpy2DAsync");
}


}  // namespace cuda
}  // namespace tc
