// The decoder's small ops on the GPU (core/backend.h, "model ops"); the CPU
// kernels are src/cpu/model_ops.cpp and these compute the same values.
//
//   embed_rows:       dst[i, k] = scale * dequant(table row tokens[i])[k]: one thread
//                     per weight, each format's formula as quant::dequantize_row
//                     writes it (products and sums rounded one by one, no fused
//                     multiply-add, so the f32 values are the reference's)
//   add:              x += y, or x[i] += y[i % period] (a bias row)
//   convert:          f32 <-> f16 / bf16, round to nearest even; a Q8_0
//                     cache's rows to f32 (q d, exact) or f16
//   rope_kv_append:   p = *pos + i; (a, b) -> (a c - b s, b c + a s) for the
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
//   decode_attention: one query row per head over the S cache rows
//                     [j0, *pos] (j0 = 0, or *pos + 1 - window), split over
//                     them (flash-decoding), in base 2 (t_j = log2(e) scale
//                     q . K_j, or log2(e) cap tanh(scale q . K_j / cap) with
//                     soft-capping); K and V rows f32, f16 or Q8_0 (widened
//                     exactly as they are loaded, the sums in f32 either way;
//                     a lane's 4 dims of a Q8_0 row are 4 codes of one block,
//                     two 2-byte loads and the block's f16 d, value q d):
//       piece s covers rows [s c, (s+1) c), c from S and the cache's size
//       (attn_piece: 16 positions or more, about S / 64 at depth) rounded up
//       to whole block iterations (4 warps x keys per warp), so the pieces in
//       use, ceil(S / c) <= splits, share the rows evenly whatever S is:
//         m_s = max_j t_j,  l_s = sum_j 2^(t_j - m_s),  u_s = sum_j 2^(t_j - m_s) V_j
//       combine: M = max_s m_s,  o = sum_s 2^(m_s - M) u_s / sum_s 2^(m_s - M) l_s,
//       by the last block of a head's pieces to finish (each counts itself
//       in `arrivals` after a fence; the last sees every piece's results):
//       one kernel, so no launch boundary in the step between the two. With
//       oq, o quantised per block of 32 as quantize_q8 would (a warp a
//       block: the wo product then needs no quantize_q8 launch)
//     Work split: block (piece, up to 8 query heads of one kv group, so K/V
//     are read once for them); a key row is spread over D/4 lanes (rounded
//     up to a power of two, at most 32; float4 loads when D % 4 == 0, each
//     lane holding its dims of q), so a warp takes 32 / lanes keys at a time,
//     several such steps' loads in flight, a short shuffle tree per score and
//     an online softmax per lane slot with V accumulated in registers; the
//     slots merge once through shared memory. partial holds u [H][splits][D]
//     then (m, l) [H][splits][2]. The grid covers splits pieces (from C,
//     fixed at load) and blocks past the pieces in use exit: the launch does
//     not depend on the position, so it can be recorded once in a graph and
//     replayed. Every sum runs in a fixed order (whichever block combines):
//     same inputs, same bits. A batch step's n rows (each its own slot and
//     position) are the grid's third dimension; partial then holds
//     u [n][H][splits][D] and (m, l) [n][H][splits][2].
// Every position and token id comes from device memory, never from the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/pdl.cuh"
#include "cuda/q8_block.cuh"
#include "cuda/rows.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {

using namespace tc::quant;

__device__ __forceinline__ float h2f(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

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

__global__ void add_kernel(int64_t n, float* x, const float* y, int64_t period) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[period > 0 ? i % period : i];
}

template <class From, class To>
__device__ __forceinline__ To cvt(From v);
template <> __device__ __forceinline__ __half cvt(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float cvt(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float cvt(__nv_bfloat16 v) { return __bfloat162float(v); }

// A Q8_0 cache addressed by element offsets (multiples of 32, a row being
// whole blocks): element e starts block e / 32 of 34 bytes (quant::BlockQ8_0).
struct Q8Cache {
  uint8_t byte;
};
template <typename T>
__device__ __forceinline__ const T* cache_at(const T* base, int64_t elems) {
  return base + elems;
}
template <>
__device__ __forceinline__ const Q8Cache* cache_at(const Q8Cache* base, int64_t elems) {
  return base + elems / QK8_0 * int64_t(sizeof(BlockQ8_0));
}

// Block j's code c (signed) as an exact float without I2F: __byte_perm puts
// byte c ^ 0x80 = c + 128 into the mantissa of 2^23, and (2^23 + c + 128) -
// (2^23 + 128) = c.
__device__ __forceinline__ float q8_code(uint32_t biased, int j) {
  return __fsub_rn(__uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | unsigned(j))), 8388736.0f);
}

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
  void *k_cache, *v_cache;
  const int32_t* slots;  // a batch of sequences: pos and slots [n]; null: one sequence at *pos
  int64_t slot_stride;
};
struct AttnParams {
  int64_t H, Hkv, D, C, splits, window;
  int64_t coarse;  // the cache's pieces of 64 positions, at most splits (attn_piece)
  float scale;  // scale * log2(e): scores in base 2; without log2(e) when cap > 0
  float cap;    // soft-capping: t = log2(e) cap tanh(scale q . k / cap); 0: none
  int lanes;    // lanes per key row (a power of two <= 32)
  int ks;       // keys per block iteration: pieces are multiples of it
  const int32_t* pos;
  const float* q;
  const void *k_cache, *v_cache;
  float *o, *partial;
  int64_t n;             // query rows (blockIdx.z)
  const int32_t* slots;  // [n]: row i at pos[i] of slot slots[i]; null: one row at *pos of slot 0
  int64_t slot_stride;
  int8_t* oq;  // or null: o also quantised per block of 32 (DecodeAttentionArgs::oq)
  float2* od;
  uint32_t* arrivals;  // [n][H]: pieces of a head group done (DecodeAttentionArgs::arrivals)
};

// Row i's position and the offset of its slot in the cache (elements).
__device__ __forceinline__ int32_t row_pos(const int32_t* pos, const int32_t* slots, int64_t i) {
  return slots ? pos[i] : *pos;
}
__device__ __forceinline__ int64_t row_slot(const int32_t* slots, int64_t stride, int64_t i) {
  return slots ? int64_t(slots[i]) * stride : 0;
}

// A cache element to and from f32 (f16: round to nearest even; widening is exact).
__device__ __forceinline__ void store_cache(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_cache(__half* p, float x) { *p = __float2half_rn(x); }

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

// Element e of src rotated: its pair k is (x[2k], x[2k+1]) or, NEOX, (x[k],
// x[k + half]), e its first or second element; products and sums rounded
// one by one (the CPU's operations).
__device__ __forceinline__ float rotated(const float* src, const float* c, const float* s, int64_t half, bool neox,
                                         int64_t e) {
  const int64_t k = neox ? e % half : e / 2;
  const float x0 = src[neox ? k : 2 * k], x1 = src[neox ? k + half : 2 * k + 1];
  return (neox ? e < half : e % 2 == 0) ? __fsub_rn(__fmul_rn(x0, c[k]), __fmul_rn(x1, s[k]))
                                        : __fadd_rn(__fmul_rn(x1, c[k]), __fmul_rn(x0, s[k]));
}

// Rotates the D/2 pairs of src into dst (the queries' f32 rows or a cache row of T).
template <typename T>
__device__ __forceinline__ void rotate_row(const float* src, T* dst, const float* c, const float* s, int64_t half,
                                           bool neox) {
  const int64_t step = neox ? 1 : 2, other = neox ? half : 1;
  for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
    const int64_t e = k * step;
    store_cache(dst + e, rotated(src, c, s, half, neox, e));
    store_cache(dst + e + other, rotated(src, c, s, half, neox, e + other));
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
    rotate_row(a.q + i * a.ldq + h * D, a.qt + (h * a.n + i) * D, c, s, half, a.neox);
    return;
  }
  const int64_t g = h - a.H, cell = row_slot(a.slots, a.slot_stride, i) + (g * a.C + p) * D;
  const float* v = a.v + i * a.ldv + g * D;
  if constexpr (std::is_same<T, Q8Cache>::value) {
    const float* k = a.k + i * a.ldk + g * D;
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
  rotate_row(a.k + i * a.ldk + g * D, static_cast<T*>(a.k_cache) + cell, c, s, half, a.neox);
  }
}

__global__ void heads_to_tokens_kernel(int64_t n, int64_t H, int64_t D, const float* src, float* dst) {
  const int64_t total = n * H * D;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % D, h = (e / D) % H, i = e / (D * H);
    dst[e] = src[(h * n + i) * D + d];
  }
}

constexpr int kAttnThreads = 128;
constexpr int kWarps = kAttnThreads / 32;
// Keys each lane slot loads at once: 4 with one head and one float4 per lane,
// 2 when the query heads and the accumulators take more registers.
__host__ __device__ constexpr int attn_unroll(int R, int GT) { return R * GT == 1 ? 4 : 2; }
// Blocks an SM must hold: 8 (64 registers a thread) for one float4 and one
// head a lane, whose key loop fits in them; without the bound the combine
// at the kernel's end lifted the Q8_0 kernel to 80 registers (6 blocks an
// SM) and it decoded 11% slower at depth 4096, its loads being what bounds it.
__host__ __device__ constexpr int attn_min_blocks(int R, int GT) { return R * GT == 1 ? 8 : 1; }
// Fewer split blocks than this (about two per SM of an H200) and a block
// takes fewer heads of a group: re-reading K/V from L2 costs less than idle SMs.
constexpr int64_t kAttnMinBlocks = 256;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reduction through `red` (kWarps floats); every thread gets the result.
template <bool Max>
__device__ float block_reduce(float v, float* red) {
  v = Max ? warp_max(v) : warp_sum(v);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `red` may still be read by the previous reduction
  if (lane == 0) red[w] = v;
  __syncthreads();
  float r = red[0];
  for (int i = 1; i < kWarps; ++i) r = Max ? fmaxf(r, red[i]) : r + red[i];
  return r;
}

// The piece length for S positions: as long as a piece of one of `coarse`
// equal pieces (ceil(C / 64) for a cache of C rows, at most splits), but
// no longer than S / 64 and at least 16 positions: a short context comes in short pieces
// whatever the cache's size (each piece's key steps run one after the
// other, so there latency bounds the kernel, not bytes; on an H100 pieces
// of 16 instead of 64 at ~530 positions of a 648-row cache decoded 2.7-2.8%
// faster), and at depth the pieces are the 64-position ones. Never fewer
// positions than ceil(S / splits); rounded up to whole iterations of a
// block (ks positions), so every piece but the last is full and the pieces
// in use are ceil(S / piece) <= splits (the last block to finish counts
// them from the same *pos).
__device__ __forceinline__ int64_t attn_piece(int64_t S, int64_t coarse, int64_t splits, int ks) {
  int64_t per = (S + coarse - 1) / coarse;
  if (per > (S + 63) / 64) per = (S + 63) / 64;
  if (per < 16) per = 16;
  // Already so for S <= C; kept as the bound of the partial results' writes.
  if (per < (S + splits - 1) / splits) per = (S + splits - 1) / splits;
  return (per + ks - 1) / ks * ks;
}

// The first cache row a query at position pos sees (a sliding window keeps
// the last `window` rows).
__device__ __forceinline__ int64_t attn_first(int32_t pos, int64_t window) {
  return window > 0 && int64_t(pos) + 1 > window ? int64_t(pos) + 1 - window : 0;
}

// Dims 4v .. 4v + 3 of a row: one 16-byte load (f32) or 8-byte load (f16) on
// the vector path (D % 4 == 0, rows aligned), four guarded scalar loads
// otherwise (zero past D).
__device__ __forceinline__ float elem(const __half* row, int d) { return __half2float(row[d]); }
template <bool kVec>
__device__ __forceinline__ float4 load4(const float* row, int v, int D) {
  if (kVec) return reinterpret_cast<const float4*>(row)[v];
  const int d = 4 * v;
  return make_float4(d < D ? row[d] : 0.0f, d + 1 < D ? row[d + 1] : 0.0f, d + 2 < D ? row[d + 2] : 0.0f,
                     d + 3 < D ? row[d + 3] : 0.0f);
}
template <bool kVec>
__device__ __forceinline__ float4 load4(const __half* row, int v, int D) {
  if (kVec) {
    const uint2 u = reinterpret_cast<const uint2*>(row)[v];
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
  const int d = 4 * v;
  return make_float4(d < D ? elem(row, d) : 0.0f, d + 1 < D ? elem(row, d + 1) : 0.0f,
                     d + 2 < D ? elem(row, d + 2) : 0.0f, d + 3 < D ? elem(row, d + 3) : 0.0f);
}
// Dims 4v .. 4v + 3 of a Q8_0 row: codes 4 (v % 8) .. +3 of block v / 8,
// at any 2-byte alignment (blocks are 34 bytes), times the block's d.
template <bool kVec>
__device__ __forceinline__ float4 load4(const Q8Cache* row, int v, int) {
  const uint8_t* blk = reinterpret_cast<const uint8_t*>(row) + (v / 8) * int(sizeof(BlockQ8_0));
  const unsigned short* qs = reinterpret_cast<const unsigned short*>(blk + 2 + 4 * (v % 8));
  const uint32_t biased = (uint32_t(qs[0]) | uint32_t(qs[1]) << 16) ^ 0x80808080u;
  const float d = h2f(*reinterpret_cast<const uint16_t*>(blk));
  return make_float4(__fmul_rn(q8_code(biased, 0), d), __fmul_rn(q8_code(biased, 1), d),
                     __fmul_rn(q8_code(biased, 2), d), __fmul_rn(q8_code(biased, 3), d));
}
__device__ __forceinline__ float dot4(float4 a, float4 b, float s) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, s))));
}
__device__ __forceinline__ float4 axpy4(float p, float4 x, float4 y) {
  return make_float4(fmaf(p, x.x, y.x), fmaf(p, x.y, y.y), fmaf(p, x.z, y.z), fmaf(p, x.w, y.w));
}
__device__ __forceinline__ float4 scale4(float c, float4 x) { return make_float4(c * x.x, c * x.y, c * x.z, c * x.w); }
__device__ __forceinline__ float comp(float4 x, int c) { return c == 0 ? x.x : c == 1 ? x.y : c == 2 ? x.z : x.w; }

// Head h of row `row`: o = sum_s 2^(m_s - M) u_s / sum_s 2^(m_s - M) l_s
// over the `used` pieces (base 2, as the pieces wrote them), by the whole
// block. The weights go through `wgt` (shared, `used` floats); the sums run
// in piece order. The partial results were written by other blocks: read
// from L2 (__ldcg), never from this SM's L1.
__device__ void combine_head(const AttnParams& a, int64_t row, int64_t h, int64_t used, float* wgt, float* red) {
  const int64_t hr = row * a.H + h, D = a.D, splits = a.splits;
  const float* pu = a.partial + hr * splits * D;
  const float* pml = a.partial + a.n * a.H * splits * D + hr * splits * 2;
  float M = -FLT_MAX;
  for (int64_t s = threadIdx.x; s < used; s += kAttnThreads) M = fmaxf(M, __ldcg(pml + 2 * s));
  M = block_reduce<true>(M, red);
  float lsum = 0.0f;
  for (int64_t s = threadIdx.x; s < used; s += kAttnThreads) {
    const float f = exp2f(__ldcg(pml + 2 * s) - M);
    wgt[s] = f;
    lsum = fmaf(f, __ldcg(pml + 2 * s + 1), lsum);
  }
  const float inv = 1.0f / block_reduce<false>(lsum, red);  // its barriers also publish wgt
  // Whole warps per pass: with oq (D a multiple of 32) warp w's 32 dims are
  // one block of 32 of o, quantised as quantize_q8 would (q8act).
  for (int64_t d0 = 0; d0 < D; d0 += kAttnThreads) {
    const int64_t d = d0 + threadIdx.x;
    float o = 0.0f;
    if (d < D) {
      for (int64_t s = 0; s < used; ++s) o = fmaf(wgt[s], __ldcg(pu + s * D + d), o);
      o *= inv;
      a.o[hr * D + d] = o;
    }
    const int64_t b0 = d0 + (threadIdx.x & ~31);  // the warp's first dim
    if (a.oq && b0 < D) q8act::quantize_block(o, threadIdx.x & 31, a.oq + hr * D + b0, a.od + (hr * D + b0) / 32);
  }
  __syncthreads();  // wgt and red are free for the next head
}

// Block (piece blockIdx.x, heads h0 .. h0 + GT - 1 of one kv group, h0 =
// blockIdx.y GT), four warps. A key row is held by L lanes (L = lanes, a
// power of two), lane t owning dims 4 (t + L r) .. +3 for r < R, so a warp
// takes 32 / L keys side by side and U such steps at once (all 2 U R loads
// issued before any is used). Per key: R float4 dot products per head, a
// log2(L) shuffle tree, then the online softmax of the lane's key slot:
//   m' = max(m, t_u),  l = l e^(m - m') + sum_u e^(t_u - m'),
//   acc = acc e^(m - m') + sum_u e^(t_u - m') V_u        (t = scale q . K)
// in base 2 (q is prescaled by scale log2 e). The 4 (32 / L) slot states meet
// once, in shared memory, at the end of the piece. Masked keys (past the
// piece) load nothing and weigh 0; a slot that saw none keeps m = -FLT_MAX,
// l = 0, acc = 0 and drops out of the merge (its weight e^(-FLT_MAX - M) = 0).
template <typename T, int R, int GT, bool kVec>
__global__ void __launch_bounds__(kAttnThreads, attn_min_blocks(R, GT)) decode_attention_split(AttnParams a) {
  constexpr int U = attn_unroll(R, GT);
  extern __shared__ float smem[];
  pdl_trigger();
  pdl_wait();
  const int D = int(a.D), NV = (D + 3) / 4, L = a.lanes, KPW = 32 / L;
  const int64_t row = blockIdx.z;
  const int32_t pos = row_pos(a.pos, a.slots, row);
  const int64_t first = attn_first(pos, a.window), S = int64_t(pos) + 1 - first, piece = blockIdx.x,
                chunk = attn_piece(S, a.coarse, a.splits, a.ks);
  const int64_t j0 = piece * chunk;
  if (j0 >= S) return;  // beyond the pieces in use: the combine reads none of it
  const int64_t j1 = min(j0 + chunk, S);
  const int64_t h0 = int64_t(blockIdx.y) * GT, g = h0 / (a.H / a.Hkv);
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane / L, t = lane % L;
  const int64_t slot = row_slot(a.slots, a.slot_stride, row);
  const T* K = cache_at(static_cast<const T*>(a.k_cache), slot + (g * a.C + first) * D);
  const T* V = cache_at(static_cast<const T*>(a.v_cache), slot + (g * a.C + first) * D);

  float4 q[GT][R], acc[GT][R];
  float m[GT], l[GT];
#pragma unroll
  for (int gi = 0; gi < GT; ++gi) {
    m[gi] = -FLT_MAX, l[gi] = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int v = t + L * r;
      q[gi][r] = v < NV ? scale4(a.scale, load4<kVec>(a.q + ((h0 + gi) * a.n + row) * D, v, D))
                        : make_float4(0, 0, 0, 0);
      acc[gi][r] = make_float4(0, 0, 0, 0);
    }
  }

  const int step = KPW * U;  // keys per warp iteration
  for (int64_t jb = j0 + int64_t(w) * step; jb < j1; jb += int64_t(kWarps) * step) {  // warp-uniform
    float4 kr[U][R], vr[U][R];
    bool ok[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = jb + u * KPW + sub;
      ok[u] = j < j1;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int v = t + L * r;
        const bool in = ok[u] && v < NV;
        kr[u][r] = in ? load4<kVec>(cache_at(K, j * D), v, D) : make_float4(0, 0, 0, 0);
        vr[u][r] = in ? load4<kVec>(cache_at(V, j * D), v, D) : make_float4(0, 0, 0, 0);
      }
    }
    float s[U][GT];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int gi = 0; gi < GT; ++gi) {
        float x = 0.0f;
#pragma unroll
        for (int r = 0; r < R; ++r) x = dot4(q[gi][r], kr[u][r], x);
        s[u][gi] = x;
      }
    // Sum over the L lanes of each key (xor below L stays inside the slot).
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      if (o < L)
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
          for (int gi = 0; gi < GT; ++gi) s[u][gi] += __shfl_xor_sync(0xffffffffu, s[u][gi], o);
    if (a.cap > 0.0f)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int gi = 0; gi < GT; ++gi) s[u][gi] = a.cap * tanhf(s[u][gi] / a.cap) * 1.4426950408889634f;
#pragma unroll
    for (int gi = 0; gi < GT; ++gi) {
      float mn = m[gi];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ok[u]) mn = fmaxf(mn, s[u][gi]);
      const float corr = exp2f(m[gi] - mn);
      m[gi] = mn;
      l[gi] *= corr;
#pragma unroll
      for (int r = 0; r < R; ++r) acc[gi][r] = scale4(corr, acc[gi][r]);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const float p = ok[u] ? exp2f(s[u][gi] - mn) : 0.0f;
        l[gi] += p;
#pragma unroll
        for (int r = 0; r < R; ++r) acc[gi][r] = axpy4(p, vr[u][r], acc[gi][r]);
      }
    }
  }

  // Slot states to shared memory: ml [NS][GT][2], then u [NS][GT][D].
  const int NS = kWarps * KPW, st = w * KPW + sub;
  float* sm_ml = smem;
  float* sm_u = smem + NS * GT * 2;
#pragma unroll
  for (int gi = 0; gi < GT; ++gi) {
    if (t == 0) sm_ml[(st * GT + gi) * 2] = m[gi], sm_ml[(st * GT + gi) * 2 + 1] = l[gi];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int v = t + L * r;
      if (v < NV)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (4 * v + c < D) sm_u[(st * GT + gi) * D + 4 * v + c] = comp(acc[gi][r], c);
    }
  }
  __syncthreads();
  // Merge the slots (fixed order), one output element per thread:
  //   M = max m_s,  l = sum l_s e^(m_s - M),  u = sum u_s e^(m_s - M).
  const int64_t splits = a.splits;
  float* pu = a.partial;
  float* pml = a.partial + a.n * a.H * splits * D;
  for (int e = threadIdx.x; e < GT * D; e += kAttnThreads) {
    const int gi = e / D, d = e % D;
    float M = -FLT_MAX;
    for (int i = 0; i < NS; ++i) M = fmaxf(M, sm_ml[(i * GT + gi) * 2]);
    float lsum = 0.0f, usum = 0.0f;
    for (int i = 0; i < NS; ++i) {
      const float f = exp2f(sm_ml[(i * GT + gi) * 2] - M);
      lsum = fmaf(sm_ml[(i * GT + gi) * 2 + 1], f, lsum);
      usum = fmaf(sm_u[(i * GT + gi) * D + d], f, usum);
    }
    const int64_t at = (row * a.H + h0 + gi) * splits + piece;
    pu[at * D + d] = usum;
    if (d == 0) pml[at * 2] = M, pml[at * 2 + 1] = lsum;
  }
  // The last of the pieces in use to get here combines these heads: each
  // block publishes its results (fence) before it counts itself in, so the
  // one that counts `used` sees them all. It also sets the count back to 0
  // for the next call (every piece of this one has counted).
  __shared__ uint32_t arrived;
  __shared__ float red[kWarps];
  const int64_t used = (S + chunk - 1) / chunk;
  __syncthreads();  // every thread's results are written
  if (threadIdx.x == 0) {
    __threadfence();
    uint32_t* count = a.arrivals + row * a.H + h0;
    arrived = atomicAdd(count, 1u) + 1u;
    if (arrived == uint32_t(used)) *count = 0u;
  }
  __syncthreads();
  if (arrived != uint32_t(used)) return;
  __threadfence();
  for (int gi = 0; gi < GT; ++gi) combine_head(a, row, h0 + gi, used, smem, red);
}

// The split kernel for a cache of T, R float4s per lane, gt heads per block.
template <typename T>
void (*split_kernel(bool vec, int R, int gt))(AttnParams) {
  if (!vec)
    return R == 1 ? decode_attention_split<T, 1, 1, false>
                  : R == 2 ? decode_attention_split<T, 2, 1, false> : decode_attention_split<T, 4, 1, false>;
  if (R == 1)
    return gt == 1   ? decode_attention_split<T, 1, 1, true>
           : gt == 2 ? decode_attention_split<T, 1, 2, true>
           : gt == 4 ? decode_attention_split<T, 1, 4, true>
                     : decode_attention_split<T, 1, 8, true>;
  if (R == 2)
    return gt == 1 ? decode_attention_split<T, 2, 1, true>
                   : gt == 2 ? decode_attention_split<T, 2, 2, true> : decode_attention_split<T, 2, 4, true>;
  return decode_attention_split<T, 4, 1, true>;
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
  s->last_kernel = "add";
  add_kernel<<<blocks_for(a.n, 256), 256, 0, s->stream>>>(a.n, a.x, a.y, a.period);
  return check(cudaGetLastError(), "add: launch");
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
                     a.q, a.k, a.v, a.cos_t, a.sin_t, a.qt, a.k_cache, a.v_cache, a.slots, a.slot_stride};
  s->last_kernel = "rope_kv_append";
  const dim3 grid(unsigned(a.n), unsigned(a.H + a.Hkv));
  if (a.cache == TC_DTYPE_Q8_0) {
    // Whole warps: one per block of 32 of a row, up to 8.
    const int threads = 32 * int(std::min<int64_t>(std::max<int64_t>(a.D / QK8_0, 1), 8));
    return check(launch_pdl(rope_kv_append_kernel<Q8Cache>, grid, dim3(threads), 0, s->stream, p),
                 "rope_kv_append: launch");
  }
  const int threads = int(std::min<int64_t>(std::max<int64_t>(a.D / 2, 32), 256));
  return check(a.cache == TC_DTYPE_F16
                   ? launch_pdl(rope_kv_append_kernel<__half>, grid, dim3(threads), 0, s->stream, p)
                   : launch_pdl(rope_kv_append_kernel<float>, grid, dim3(threads), 0, s->stream, p),
               "rope_kv_append: launch");
}

tc_status heads_to_tokens(Device&, StreamState* s, const HeadsToTokensArgs& a) {
  s->last_kernel = "heads_to_tokens";
  heads_to_tokens_kernel<<<blocks_for(a.n * a.H * a.D, 256), 256, 0, s->stream>>>(a.n, a.H, a.D, a.src, a.dst);
  return check(cudaGetLastError(), "heads_to_tokens: launch");
}

tc_status copy_2d(Device&, StreamState* s, const Copy2dArgs& a) {
  s->last_kernel = "copy_2d";
  return check(cudaMemcpy2DAsync(a.dst, a.dst_pitch, a.src, a.src_pitch, a.row_bytes, size_t(a.rows),
                                 cudaMemcpyDeviceToDevice, s->stream),
               "copy_2d: cudaMemcpy2DAsync");
}

tc_status decode_attention(Device&, StreamState* s, const DecodeAttentionArgs& a) {
  if (tc_status st = check_decode_attention(a)) return st;
  if (!a.arrivals)
    return fail(TC_ERR_INVALID_ARG, "%s: decode_attention on a GPU needs its arrival counters (arrivals)",
                a.info.name);
  // Lanes per key: the float4s of a row (NV) spread over L lanes, R each.
  const int64_t NV = (a.D + 3) / 4;
  int R = 1, L = 32;
  if (NV <= 32)
    for (L = 1; L < NV; L *= 2) {}
  else
    R = NV <= 64 ? 2 : NV <= 128 ? 4 : 0;
  if (R == 0) return fail(TC_ERR_UNSUPPORTED, "decode_attention: head dim %lld above 512", (long long)a.D);
  // Vector loads: 16 bytes of q, 4 cache elements (16 or 8 bytes, or a Q8_0
  // block's 4 codes as two 2-byte loads) at a time.
  const uintptr_t cache_align = a.cache == TC_DTYPE_F16 ? 8 : a.cache == TC_DTYPE_Q8_0 ? 2 : 16;
  auto aligned = [](const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
  const bool vec = a.D % 4 == 0 && aligned(a.q, 16) && aligned(a.k_cache, cache_align) &&
                   aligned(a.v_cache, cache_align);
  // Query heads per block: as many of the group's heads as registers allow
  // (K/V then read once for them), fewer while that leaves too few blocks.
  const int64_t splits = decode_attention_splits(a.C), G = a.H / a.Hkv;
  const int64_t coarse = std::min<int64_t>(splits, (a.C + 63) / 64);
  int gt = 1;
  if (vec) {
    const int gmax = R == 1 ? 8 : R == 2 ? 4 : 1;
    while (gt * 2 <= gmax && G % (gt * 2) == 0) gt *= 2;
    // Blocks counted as the coarse pieces (attn_piece) make them, so that the
    // short pieces of a short context do not put more heads in a block (four
    // heads a block there took the 8B-shaped model's attention from 0.34 to
    // 0.57 ms a token on an H100).
    while (gt > 1 && coarse * (a.H / gt) * a.n < kAttnMinBlocks) gt /= 2;
  }
  const int ks = kWarps * (32 / L) * attn_unroll(R, gt);
  // With soft-capping the scores are capped in natural units, then moved to base 2.
  const float scale = a.softcap > 0.0f ? a.scale : float(double(a.scale) * 1.4426950408889634);
  if (a.n > 65535) return fail(TC_ERR_UNSUPPORTED, "decode_attention: %lld rows in one call", (long long)a.n);
  const AttnParams p{a.H, a.Hkv, a.D, a.C, splits, a.window, coarse, scale, a.softcap, L, ks,
                     a.pos, a.q, a.k_cache, a.v_cache, a.o, a.partial, a.n, a.slots, a.slot_stride,
                     a.oq, reinterpret_cast<float2*>(a.od), a.arrivals};
  void (*split)(AttnParams) = a.cache == TC_DTYPE_F16    ? split_kernel<__half>(vec, R, gt)
                              : a.cache == TC_DTYPE_Q8_0 ? split_kernel<Q8Cache>(vec, R, gt)
                                                         : split_kernel<float>(vec, R, gt);
  // Slot states: 4 (32 / L) slots of gt (D + 2) floats; at most 24.6 KB
  // (D <= 4, gt 8), under the 48 KB default; then the combine's weights
  // (splits <= 128 floats) in the same space.
  const size_t smem = std::max(size_t(kWarps * (32 / L)) * gt * size_t(a.D + 2), size_t(splits)) * sizeof(float);
  s->last_kernel = "decode_attention_split";
  return check(launch_pdl(split, dim3(unsigned(splits), unsigned(a.H / gt), unsigned(a.n)), dim3(kAttnThreads), smem,
                          s->stream, p),
               "decode_attention: launch");
}

}  // namespace cuda
}  // namespace tc
