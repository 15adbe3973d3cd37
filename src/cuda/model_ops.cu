// The decoder's small ops on the GPU (core/backend.h, "model ops"); the CPU
// kernels are src/cpu/model_ops.cpp and these compute the same values.
//
//   embed_rows:       dst[i, k] = dequant(table row tokens[i])[k]: one thread
//                     per weight, each format's formula as quant::dequantize_row
//                     writes it (products and sums rounded one by one, no fused
//                     multiply-add, so the f32 values are the reference's)
//   add:              x += y
//   convert:          f32 <-> f16 / bf16, round to nearest even
//   rope_kv_append:   p = *pos + i; (a, b) -> (a c - b s, b c + a s) for the
//                     queries (to [H][n][D]) and keys (into the cache at p),
//                     values copied into the cache at p
//   heads_to_tokens:  [H][n][D] -> [n][H][D]
//   copy_2d:          cudaMemcpy2DAsync, device to device
//   decode_attention: one query row per head over S = *pos + 1 cache rows,
//                     split over the cache (flash-decoding):
//       piece s covers rows [s c, (s+1) c) with c = ceil(C / splits):
//         m_s = max_j t_j,  l_s = sum_j e^(t_j - m_s),  u_s = sum_j e^(t_j - m_s) V_j
//         (t_j = scale q . K_j)
//       combine: M = max_s m_s,  o = sum_s e^(m_s - M) u_s / sum_s e^(m_s - M) l_s
//     The grid covers every piece of the whole cache (C, fixed at load), and
//     pieces past S write m = -inf, l = 0: the launch does not depend on the
//     position, so it can be recorded once in a graph and replayed.
// Every position and token id comes from device memory, never from the host.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cfloat>

#include "core/error.h"
#include "cuda/device.h"
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
                                  const int32_t* tokens, float* dst) {
  const int64_t i = blockIdx.y;
  const uint8_t* row = table + uint64_t(tokens[i]) * row_bytes;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K; k += int64_t(gridDim.x) * blockDim.x)
    dst[i * K + k] = dequant_at(fmt, row, k);
}

__global__ void add_kernel(int64_t n, float* x, const float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] += y[i];
}

template <class From, class To>
__device__ __forceinline__ To cvt(From v);
template <> __device__ __forceinline__ __half cvt(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cvt(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float cvt(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float cvt(__nv_bfloat16 v) { return __bfloat162float(v); }

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
  const int32_t* pos;
  const float *q, *k, *v, *cos_t, *sin_t;
  float *qt, *k_cache, *v_cache;
};
struct AttnParams {
  int64_t H, Hkv, D, C;
  float scale;
  const int32_t* pos;
  const float *q, *k_cache, *v_cache;
  float *o, *partial;
};

// Block (token i, head h): queries for h < H, keys and values after them.
__global__ void rope_kv_append_kernel(RopeParams a) {
  const int64_t i = blockIdx.x, h = blockIdx.y, D = a.D, half = D / 2, p = int64_t(*a.pos) + i;
  const float* c = a.cos_t + p * half;
  const float* s = a.sin_t + p * half;
  const float* src;
  float* dst;
  if (h < a.H) {
    src = a.q + i * a.ldq + h * D;
    dst = a.qt + (h * a.n + i) * D;
  } else {
    const int64_t g = h - a.H;
    src = a.k + i * a.ldk + g * D;
    dst = a.k_cache + (g * a.C + p) * D;
    const float* v = a.v + i * a.ldv + g * D;
    float* vd = a.v_cache + (g * a.C + p) * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) vd[d] = v[d];
  }
  for (int64_t k = threadIdx.x; k < half; k += blockDim.x) {
    const float x0 = src[2 * k], x1 = src[2 * k + 1];
    dst[2 * k] = __fsub_rn(__fmul_rn(x0, c[k]), __fmul_rn(x1, s[k]));
    dst[2 * k + 1] = __fadd_rn(__fmul_rn(x1, c[k]), __fmul_rn(x0, s[k]));
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

// Block (piece s, head h): the piece's rows in tiles of kTile, with a
// running maximum m, sum l and weighted values u (rescaled by e^(m - m')
// when the maximum grows). Shared memory: q [D], u [D], the tile's scores.
constexpr int kTile = 128;
__global__ void decode_attention_split(AttnParams a, int64_t chunk) {
  extern __shared__ float smem[];
  __shared__ float red[kWarps];
  const int64_t D = a.D, h = blockIdx.y, g = h / (a.H / a.Hkv), splits = gridDim.x;
  const int64_t S = int64_t(*a.pos) + 1, j0 = blockIdx.x * chunk, j1 = min(j0 + chunk, S);
  float* part = a.partial + (h * splits + blockIdx.x) * (D + 2);
  if (j0 >= S) {
    if (threadIdx.x == 0) part[D] = -FLT_MAX, part[D + 1] = 0.0f;
    return;
  }
  float* qs = smem;
  float* u = smem + D;
  float* sc = smem + 2 * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = a.q[h * D + d], u[d] = 0.0f;
  __syncthreads();
  const float* K = a.k_cache + g * a.C * D;
  const float* V = a.v_cache + g * a.C * D;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t t0 = j0; t0 < j1; t0 += kTile) {
    const int64_t t1 = min(t0 + int64_t(kTile), j1);
    for (int64_t j = t0 + w; j < t1; j += kWarps) {
      const float* kj = K + j * D;
      float acc = 0.0f;
      for (int64_t d = lane; d < D; d += 32) acc += qs[d] * kj[d];
      acc = warp_sum(acc);
      if (lane == 0) sc[j - t0] = a.scale * acc;
    }
    __syncthreads();
    float mt = -FLT_MAX;
    for (int64_t j = threadIdx.x; j < t1 - t0; j += blockDim.x) mt = fmaxf(mt, sc[j]);
    const float m_new = fmaxf(m, block_reduce<true>(mt, red));
    const float corr = __expf(m - m_new);
    float lt = 0.0f;
    __syncthreads();  // every thread has read sc for the maximum
    for (int64_t j = threadIdx.x; j < t1 - t0; j += blockDim.x) lt += (sc[j] = __expf(sc[j] - m_new));
    l = l * corr + block_reduce<false>(lt, red);  // its barriers also publish sc
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float acc = 0.0f;
      for (int64_t j = t0; j < t1; ++j) acc += sc[j - t0] * V[j * D + d];
      u[d] = u[d] * corr + acc;
    }
    m = m_new;
    __syncthreads();  // sc is rewritten by the next tile
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) part[d] = u[d];
  if (threadIdx.x == 0) part[D] = m, part[D + 1] = l;
}

__global__ void decode_attention_combine(AttnParams a, int64_t chunk, int64_t splits) {
  const int64_t D = a.D, h = blockIdx.x, S = int64_t(*a.pos) + 1;
  const int64_t used = (S + chunk - 1) / chunk;
  const float* part = a.partial + h * splits * (D + 2);
  float M = -FLT_MAX;
  for (int64_t s = 0; s < used; ++s) M = fmaxf(M, part[s * (D + 2) + D]);
  float L = 0.0f;
  for (int64_t s = 0; s < used; ++s) L += __expf(part[s * (D + 2) + D] - M) * part[s * (D + 2) + D + 1];
  const float inv = 1.0f / L;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t s = 0; s < used; ++s) o += __expf(part[s * (D + 2) + D] - M) * part[s * (D + 2) + d];
    a.o[h * D + d] = o * inv;
  }
}

unsigned blocks_for(int64_t n, int threads) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65535)));
}

}  // namespace

tc_status embed_rows(Device&, StreamState* s, const EmbedRowsArgs& a) {
  s->last_kernel = "embed_rows";
  const dim3 grid(blocks_for(a.K, 256), unsigned(a.n));
  embed_rows_kernel<<<grid, 256, 0, s->stream>>>(a.fmt, a.K, a.row_bytes, static_cast<const uint8_t*>(a.table),
                                                 a.tokens, a.dst);
  return check(cudaGetLastError(), "embed_rows: launch");
}

tc_status add(Device&, StreamState* s, const AddArgs& a) {
  s->last_kernel = "add";
  add_kernel<<<blocks_for(a.n, 256), 256, 0, s->stream>>>(a.n, a.x, a.y);
  return check(cudaGetLastError(), "add: launch");
}

tc_status convert(Device&, StreamState* s, const ConvertArgs& a) {
  s->last_kernel = "convert";
  if (a.rows > 65535) return fail(TC_ERR_UNSUPPORTED, "convert: %lld rows in one call", (long long)a.rows);
  const dim3 grid(blocks_for(a.n, 256), unsigned(a.rows));
  const int64_t sp = a.src_pitch ? a.src_pitch : a.n, dp = a.dst_pitch ? a.dst_pitch : a.n;
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
  const RopeParams p{a.n,     a.H,     a.Hkv,   a.D,     a.C,  a.ldq,     a.ldk,     a.ldv,     a.pos,
                     a.q,     a.k,     a.v,     a.cos_t, a.sin_t, a.qt, a.k_cache, a.v_cache};
  s->last_kernel = "rope_kv_append";
  const int threads = int(std::min<int64_t>(std::max<int64_t>(a.D / 2, 32), 256));
  rope_kv_append_kernel<<<dim3(unsigned(a.n), unsigned(a.H + a.Hkv)), threads, 0, s->stream>>>(p);
  return check(cudaGetLastError(), "rope_kv_append: launch");
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
  const AttnParams p{a.H, a.Hkv, a.D, a.C, a.scale, a.pos, a.q, a.k_cache, a.v_cache, a.o, a.partial};
  const int64_t splits = decode_attention_splits(a.C), chunk = (a.C + splits - 1) / splits;
  const size_t smem = size_t(2 * a.D + kTile) * sizeof(float);
  if (smem > 48 * 1024) {
    // Wide heads: above the default limit, opt in.
    if (tc_status st = check(cudaFuncSetAttribute(decode_attention_split, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  int(smem)),
                             "decode_attention: shared memory"))
      return st;
  }
  s->last_kernel = "decode_attention_split";
  decode_attention_split<<<dim3(unsigned(splits), unsigned(a.H)), kAttnThreads, smem, s->stream>>>(p, chunk);
  if (tc_status st = check(cudaGetLastError(), "decode_attention: launch")) return st;
  s->last_kernel = "decode_attention_combine";
  decode_attention_combine<<<unsigned(a.H), kAttnThreads, 0, s->stream>>>(p, chunk, splits);
  return check(cudaGetLastError(), "decode_attention: combine launch");
}

}  // namespace cuda
}  // namespace tc
