// Quantized GEMV on the GPU.
//
//   Y[m, n] = sum_k f(X)[m, k] * W[n, k]          m < M, n < N, k < K
//
// W quantised row by row (src/quant/formats.h), X and Y in f16, bf16 or f32,
// f the identity or the RMS norm f(x)[k] = x[k] * gamma[k] / sqrt(mean(x^2) +
// eps). The kernel for a call, each the one that measured fastest for its
// case on the H200 (bench/results/h200.md, docs/performance.md):
//  - up to 16 rows of f16/bf16 X against Q4_0, Q8_0, Q4_K or Q5_K (the
//    decode shape: one token, or a few sequences), W 16-byte aligned: X
//    quantised to 8 bits per block of 32 and the __dp4a kernels of
//    gemv_q8.cu (two launches; each weight loaded once for 8 rows); each
//    activation moves by at most half a quantisation step, the CPU's VNNI
//    contract;
//  - otherwise the activations are never quantised, accumulation is f32, and
//    the result differs from the float64 product of the dequantised weights
//    only by f32 rounding:
//     - f32 X and Y at M = 1, except Q4_K: four rows of W per warp sharing
//       each load of X (gemv_blocks_f32_rows);
//     - Q4_0, Q8_0, Q4_K, Q6_K with W 16-byte aligned: the streaming kernel
//       of gemv_stream.cuh (W by 16-byte cp.async through a shared-memory
//       ring, R rows of W per load of X, passes of up to 4 rows of X; its
//       header has the design), unless it cannot be launched on the device;
//     - everything else (other formats, Q4_1 and Q5_0/Q5_1 among them, W
//       not 16-byte aligned): the warp-per-row kernels below.
//
// The warp-per-row kernels. At small M the product streams W once at two
// flops per weight, so it is bound by HBM bandwidth; their design:
//  - one warp per row of W (four rows, sharing each load of X, for f32 X and
//    Y at M = 1: gemv_blocks_f32_rows); its lanes take consecutive parts of consecutive
//    blocks (quant_formats.cuh), so each warp-wide load covers a contiguous
//    run of the row, and each lane issues the loads of several parts before
//    using them (unrolled loop) to keep enough bytes in flight;
//  - quants become exact floats by byte permutes (no I2F), one FMA per weight
//    and row of X, the block's scale applied once per run of 4 weights;
//  - X is read straight from global memory (it is small and every warp reads
//    the same X: it stays in L1/L2), converted to f32 as it is loaded;
//  - up to 16 rows of X share one pass over W; larger M loops over tiles of
//    16 (W is re-read per tile; at that size the product is no longer a GEMV).
//  - lanes reduce by warp shuffles; no atomics, no shared memory.
// The fused variant first writes the normalised X as f32 into the stream's
// workspace (one CTA per row: sum of squares in f64, as the CPU), then runs
// the same GEMV on it. The plain formats (f16, bf16, f32 weights, any K) take
// a simpler element-per-lane kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"
#include "cuda/device.h"
#include "cuda/gemv_stream.cuh"
#include "cuda/quant_formats.cuh"

namespace tc {
namespace cuda {
namespace {

constexpr int kWarps = 8;  // rows of W per CTA
constexpr int kMaxM = 16;  // rows of X per pass over W

// X elements k .. k+3 as f32 (wstream::ldx4) and the dot product of a
// decoded part with them (wstream::dot_part) are the streaming kernel's
// (gemv_stream.cuh); these kernels use the same two.
using wstream::dot_part;
using wstream::ldx4;

template <class T>
__device__ __forceinline__ float load_x1(const T* x);
template <>
__device__ __forceinline__ float load_x1<float>(const float* x) { return __ldg(x); }
template <>
__device__ __forceinline__ float load_x1<__half>(const __half* x) { return __half2float(__ldg(x)); }
template <>
__device__ __forceinline__ float load_x1<__nv_bfloat16>(const __nv_bfloat16* x) {
  return __uint_as_float(uint32_t(__ldg(reinterpret_cast<const uint16_t*>(x))) << 16);
}

template <class T>
__device__ __forceinline__ T to_out(float v);
template <>
__device__ __forceinline__ float to_out<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half to_out<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 to_out<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Lane `lane` holds acc[0..MT); row m's sum goes to Y[m, n].
template <int MT, class T>
__device__ __forceinline__ void store_rows(float (&acc)[MT], int mt, T* y, int64_t N, int64_t n, int lane) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
    const float s = warp_sum(acc[m]);
    if (m < mt && lane == m % 32) y[int64_t(m) * N + n] = to_out<T>(s);
  }
}

// Block formats. x points at the tile's first row (rows of K elements), y at
// Y[m0, 0]; mt <= MT rows are live.
template <class F, int A, int MT, class T, class TY>
__global__ void __launch_bounds__(kWarps * 32) gemv_blocks(const uint8_t* __restrict__ w, const T* __restrict__ x,
                                                           TY* __restrict__ y, int mt, int64_t N, int64_t K) {
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp leaves together
  const int64_t nb = K / F::kQK;
  const uint8_t* wr = w + n * nb * F::kBytes;
  const int units = int(nb) * F::kParts;  // < 2^28: K < 2^31, at most one part per 16 weights
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
#pragma unroll 4
  for (int u = lane; u < units; u += 32) {
    const int b = u / F::kParts;
    qdev::Part<F::kGroups> pt;
    F::template decode<A>(wr + int64_t(b) * F::kBytes, u % F::kParts, pt);
    const T* xb = x + b * F::kQK;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= mt) break;
      float4 v[F::kGroups];
#pragma unroll
      for (int g = 0; g < F::kGroups; ++g) v[g] = ldx4<T>(xb + int64_t(m) * K + pt.pos[g]);
      acc[m] += dot_part<F>(pt, v);
    }
  }
  store_rows<MT, TY>(acc, mt, y, N, n, lane);
}

// f32 X and Y, one row of X (the exact decode GEMV): as gemv_blocks, but each
// warp takes kRowsF32 rows of W and loads each part's X once for all of them.
// gemv_blocks reads 16 bytes of f32 X from L1 per 4 weights and row of W,
// 7 (Q4_0) to 4 (Q8_0) times the weight bytes, so at 4 TB/s of W the L1
// traffic of X alone exceeds what the SMs' L1 can serve; sharing X over 4
// rows cuts it 4 times, and a lane has 4 rows' loads in flight at once.
// CTAs of 4 warps (16 rows): 4096 rows still make 256 CTAs, about two per SM.
constexpr int kRowsF32 = 4, kWarpsF32 = 4;

template <class F, int A>
__global__ void __launch_bounds__(kWarpsF32 * 32) gemv_blocks_f32_rows(const uint8_t* __restrict__ w,
                                                                    const float* __restrict__ x,
                                                                    float* __restrict__ y, int64_t N, int64_t K) {
  const int lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t(blockIdx.x) * kWarpsF32 + threadIdx.x / 32) * kRowsF32;
  if (n0 >= N) return;  // the whole warp leaves together
  const int64_t nb = K / F::kQK;
  const int units = int(nb) * F::kParts;
  // Rows past N re-read row N - 1 (in bounds) and are not stored.
  const uint8_t* wr[kRowsF32];
#pragma unroll
  for (int r = 0; r < kRowsF32; ++r) wr[r] = w + (n0 + r < N ? n0 + r : N - 1) * nb * F::kBytes;
  float acc[kRowsF32];
#pragma unroll
  for (int r = 0; r < kRowsF32; ++r) acc[r] = 0.0f;
#pragma unroll 2
  for (int u = lane; u < units; u += 32) {
    const int b = u / F::kParts, p = u % F::kParts;
    // The part's X once (positions depend on the part only, not the row),
    // then each row's part decoded and dotted with it.
    qdev::Part<F::kGroups> pt;
    F::template decode<A>(wr[0] + int64_t(b) * F::kBytes, p, pt);
    const float* xb = x + b * F::kQK;
    float4 v[F::kGroups];
#pragma unroll
    for (int g = 0; g < F::kGroups; ++g) v[g] = ldx4<float>(xb + pt.pos[g]);
#pragma unroll
    for (int r = 0; r < kRowsF32; ++r) {
      if (r > 0) F::template decode<A>(wr[r] + int64_t(b) * F::kBytes, p, pt);
      acc[r] += dot_part<F>(pt, v);
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsF32; ++r) {
    const float s = warp_sum(acc[r]);
    if (n0 + r < N && lane == r) y[n0 + r] = s;
  }
}

// Plain formats (f16, bf16, f32 weights; any K): lane k of the warp takes
// elements k, k + 32, ...
template <int32_t FMT, int A, int MT, class T, class TY>
__global__ void __launch_bounds__(kWarps * 32) gemv_plain(const uint8_t* __restrict__ w, const T* __restrict__ x,
                                                          TY* __restrict__ y, int mt, int64_t N, int64_t K) {
  constexpr int es = FMT == quant::F32 ? 4 : 2;
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  const uint8_t* wr = w + n * K * es;
  float acc[MT];
#pragma unroll
  for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
#pragma unroll 4
  for (int64_t k = lane; k < K; k += 32) {
    float wv;
    if constexpr (FMT == quant::F32) wv = __uint_as_float(qdev::ld32<A>(wr + 4 * k));
    else if constexpr (FMT == quant::F16) wv = qdev::f16_to_f32(uint16_t(qdev::ld16<A>(wr + 2 * k)));
    else wv = qdev::bf16_to_f32(uint16_t(qdev::ld16<A>(wr + 2 * k)));
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      if (m >= mt) break;
      acc[m] = fmaf(load_x1<T>(x + int64_t(m) * K + k), wv, acc[m]);
    }
  }
  store_rows<MT, TY>(acc, mt, y, N, n, lane);
}

// xn[m, k] = x[m, k] * rstd[m] * gamma[k] in f32, rstd = 1 / sqrt(mean(x^2) +
// eps) with the sum of squares in f64 (the CPU's order of operations).
template <class T>
__global__ void rmsnorm_rows(const T* __restrict__ x, const T* __restrict__ gamma, float* __restrict__ xn,
                             int64_t K, float eps) {
  const T* xr = x + int64_t(blockIdx.x) * K;
  float* out = xn + int64_t(blockIdx.x) * K;
  double ss = 0.0;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const double v = double(load_x1<T>(xr + k));
    ss += v * v;
  }
  __shared__ double part[32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
  __syncthreads();
  if (threadIdx.x < 32) {
    double t = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) part[0] = t;
  }
  __syncthreads();
  const float rstd = float(1.0 / sqrt(part[0] / double(K) + double(eps)));
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
    out[k] = __fmul_rn(__fmul_rn(load_x1<T>(xr + k), rstd), load_x1<T>(gamma + k));
}

// ---- launch --------------------------------------------------------------------------------

bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
bool is_aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

// Whether a call takes the 8-bit kernels of gemv_q8.cu (see the top).
constexpr int64_t kInt8MaxRows = 16;
bool rows_int8(const GemvQuantizedArgs& a, const StreamState* s, bool fused) {
  const size_t es = dtype_size(a.dtype);
  // Q6_K's products need its split layout, which a caller's matrix does not have.
  const bool fmt = quant::q8_product_format(a.fmt) && !quant::q8_split_only(a.fmt) &&
                   a.K % quant::q8_block_elems(a.fmt) == 0;
  return a.M <= kInt8MaxRows && a.dtype != TC_DTYPE_F32 && fmt &&
         is_aligned16(a.w) && is_aligned(a.x, es) && is_aligned(a.y, es) && (!fused || is_aligned(a.gamma, es)) &&
         s->workspace && s->workspace_bytes >= gemv_q8_scratch_bytes(a.M, a.K);
}

struct Tile {
  const void* x;  // first row of the tile
  void* y;
  int mt;
  int64_t N, K;
};

// Launches the kernel for the tile with MT = 1, 4 or 16 (X in T, Y in TY).
template <class F, int A, class T, class TY>
void launch_blocks(const Tile& t, const uint8_t* w, cudaStream_t st) {
  const dim3 grid(unsigned((t.N + kWarps - 1) / kWarps)), block(kWarps * 32);
  const T* x = static_cast<const T*>(t.x);
  TY* y = static_cast<TY*>(t.y);
  if constexpr (std::is_same<T, float>::value && std::is_same<TY, float>::value) {
    if (t.mt == 1) {
      const int64_t rows_per_cta = int64_t(kWarpsF32) * kRowsF32;
      const dim3 grid4(unsigned((t.N + rows_per_cta - 1) / rows_per_cta));
      gemv_blocks_f32_rows<F, A><<<grid4, kWarpsF32 * 32, 0, st>>>(w, x, y, t.N, t.K);
      return;
    }
  }
  if (t.mt == 1) gemv_blocks<F, A, 1, T, TY><<<grid, block, 0, st>>>(w, x, y, t.mt, t.N, t.K);
  else if (t.mt <= 4) gemv_blocks<F, A, 4, T, TY><<<grid, block, 0, st>>>(w, x, y, t.mt, t.N, t.K);
  else gemv_blocks<F, A, 16, T, TY><<<grid, block, 0, st>>>(w, x, y, t.mt, t.N, t.K);
}

template <int32_t FMT, int A, class T, class TY>
void launch_plain(const Tile& t, const uint8_t* w, cudaStream_t st) {
  const dim3 grid(unsigned((t.N + kWarps - 1) / kWarps)), block(kWarps * 32);
  const T* x = static_cast<const T*>(t.x);
  TY* y = static_cast<TY*>(t.y);
  if (t.mt == 1) gemv_plain<FMT, A, 1, T, TY><<<grid, block, 0, st>>>(w, x, y, t.mt, t.N, t.K);
  else if (t.mt <= 4) gemv_plain<FMT, A, 4, T, TY><<<grid, block, 0, st>>>(w, x, y, t.mt, t.N, t.K);
  else gemv_plain<FMT, A, 16, T, TY><<<grid, block, 0, st>>>(w, x, y, t.mt, t.N, t.K);
}

// The format's kernel at the alignment W has: its natural one (the largest
// power of two, up to 4, dividing the block size) or byte loads.
template <class F, class T, class TY>
void launch_fmt(const Tile& t, const uint8_t* w, bool aligned, cudaStream_t st) {
  if (aligned) launch_blocks<F, F::kAlign, T, TY>(t, w, st);
  else launch_blocks<F, 1, T, TY>(t, w, st);
}

template <class T, class TY>
void launch_tile(int32_t fmt, const Tile& t, const uint8_t* w, bool aligned, cudaStream_t st) {
  switch (fmt) {
    case quant::Q4_0: launch_fmt<qdev::Q4_0, T, TY>(t, w, aligned, st); break;
    case quant::Q4_1: launch_fmt<qdev::Q4_1, T, TY>(t, w, aligned, st); break;
    case quant::Q8_0: launch_fmt<qdev::Q8_0, T, TY>(t, w, aligned, st); break;
    case quant::Q5_0: launch_fmt<qdev::Q5_0, T, TY>(t, w, aligned, st); break;
    case quant::Q5_1: launch_fmt<qdev::Q5_1, T, TY>(t, w, aligned, st); break;
    case quant::Q4_K: launch_fmt<qdev::Q4_K, T, TY>(t, w, aligned, st); break;
    case quant::Q5_K: launch_fmt<qdev::Q5_K, T, TY>(t, w, aligned, st); break;
    case quant::Q6_K: launch_fmt<qdev::Q6_K, T, TY>(t, w, aligned, st); break;
    case quant::Q8_K: launch_fmt<qdev::Q8_K, T, TY>(t, w, aligned, st); break;
    case quant::F16:
      if (aligned) launch_plain<quant::F16, 2, T, TY>(t, w, st);
      else launch_plain<quant::F16, 1, T, TY>(t, w, st);
      break;
    case quant::BF16:
      if (aligned) launch_plain<quant::BF16, 2, T, TY>(t, w, st);
      else launch_plain<quant::BF16, 1, T, TY>(t, w, st);
      break;
    default:
      if (aligned) launch_plain<quant::F32, 4, T, TY>(t, w, st);
      else launch_plain<quant::F32, 1, T, TY>(t, w, st);
      break;
  }
}

// ---- the streaming kernels (gemv_stream.cuh) ----------------------------------------------

struct Gpu {
  int index, sms;
};

constexpr int kMaxDevices = 64;

// One pass of at most MT rows of X. The first launch on a device raises the
// kernel's shared-memory limit where it needs more than 48 KB and asks how
// many CTAs fit an SM; false (nothing launched) when the kernel cannot run.
template <class F, int MT, class T>
bool launch_stream_pass(const uint8_t* w, const void* x, void* y, int ydt, int mt, int64_t N, int64_t K, Gpu g,
                        cudaStream_t st) {
  using C = wstream::Cfg<F>;
  const auto kern = wstream::gemv_stream<F, MT, T>;
  static std::atomic<int> per_sm[kMaxDevices];  // CTAs per SM; 0 unknown, -1 cannot run
  int occ = g.index >= 0 && g.index < kMaxDevices ? per_sm[g.index].load() : 0;
  if (occ == 0) {
    bool ok = true;
    if (C::kSmem > (48 << 10))
      ok = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmem) == cudaSuccess;
    int b = 0;
    if (ok) ok = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, wstream::kThreads, C::kSmem) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();  // not sticky: clear it, the fallback kernel runs instead
    occ = ok && b > 0 ? b : -1;
    if (g.index >= 0 && g.index < kMaxDevices) per_sm[g.index].store(occ);
  }
  if (occ < 0) return false;
  const int64_t tiles = (N + C::kRows - 1) / C::kRows;
  const int64_t grid = std::min<int64_t>(tiles, int64_t(occ) * std::max(g.sms, 1));
  kern<<<unsigned(grid), wstream::kThreads, C::kSmem, st>>>(w, static_cast<const T*>(x), y, ydt, mt, N, K);
  return true;
}

template <class F, class T>
bool launch_stream_fmt(const Tile& t, const uint8_t* w, int ydt, size_t y_es, Gpu g, cudaStream_t st) {
  for (int m0 = 0; m0 < t.mt; m0 += wstream::kMaxMT) {
    const int r = std::min(wstream::kMaxMT, t.mt - m0);
    const void* x = static_cast<const T*>(t.x) + int64_t(m0) * t.K;
    void* y = static_cast<char*>(t.y) + size_t(m0) * size_t(t.N) * y_es;
    const bool ok = r == 1 ? launch_stream_pass<F, 1, T>(w, x, y, ydt, r, t.N, t.K, g, st)
                           : launch_stream_pass<F, wstream::kMaxMT, T>(w, x, y, ydt, r, t.N, t.K, g, st);
    // Not launchable (known at the first call on a device; M = 1 and M > 1
    // are two kernels): the fallback then computes the whole tile, passes
    // done here included.
    if (!ok) return false;
  }
  return true;
}

template <class F>
bool launch_stream_x(tc_dtype xdt, tc_dtype ydt, const Tile& t, const uint8_t* w, Gpu g, cudaStream_t st) {
  const int yc = ydt == TC_DTYPE_F32 ? 0 : ydt == TC_DTYPE_F16 ? 1 : 2;
  const size_t y_es = ydt == TC_DTYPE_F32 ? 4 : 2;
  if (xdt == TC_DTYPE_F32) return launch_stream_fmt<F, float>(t, w, yc, y_es, g, st);
  if (xdt == TC_DTYPE_F16) return launch_stream_fmt<F, __half>(t, w, yc, y_es, g, st);
  return launch_stream_fmt<F, __nv_bfloat16>(t, w, yc, y_es, g, st);
}

// The tile by the streaming kernel where it applies; false (nothing
// launched) otherwise.
bool launch_stream(tc_dtype xdt, tc_dtype ydt, int32_t fmt, const Tile& t, const uint8_t* w, Gpu g,
                   cudaStream_t st) {
  if (!is_aligned16(w)) return false;
  // f32 X and Y, one row: the four-rows-per-warp kernel (gemv_blocks_f32_rows)
  // measured faster for these formats on an H200 (14336 x 4096: Q4_0 1800 vs
  // 1248 GB/s, Q8_0 2414 vs 2059, Q6_K 2182 vs 1633; Q4_K 1243 vs 1315).
  if (xdt == TC_DTYPE_F32 && ydt == TC_DTYPE_F32 && t.mt == 1 && fmt != quant::Q4_K) return false;
  switch (fmt) {
    case quant::Q4_0: return launch_stream_x<qdev::Q4_0>(xdt, ydt, t, w, g, st);
    case quant::Q8_0: return launch_stream_x<qdev::Q8_0>(xdt, ydt, t, w, g, st);
    case quant::Q4_K: return launch_stream_x<qdev::Q4_K>(xdt, ydt, t, w, g, st);
    case quant::Q6_K: return launch_stream_x<qdev::Q6_K>(xdt, ydt, t, w, g, st);
    default: return false;
  }
}

// X in `xdt` (the call's dtype, or f32 once normalised), Y in `ydt`.
void launch_any(tc_dtype xdt, tc_dtype ydt, int32_t fmt, const Tile& t, const uint8_t* w, bool aligned, Gpu g,
                cudaStream_t st) {
  if (launch_stream(xdt, ydt, fmt, t, w, g, st)) return;
  if (xdt == TC_DTYPE_F32) {
    if (ydt == TC_DTYPE_F32) launch_tile<float, float>(fmt, t, w, aligned, st);
    else if (ydt == TC_DTYPE_F16) launch_tile<float, __half>(fmt, t, w, aligned, st);
    else launch_tile<float, __nv_bfloat16>(fmt, t, w, aligned, st);
  } else if (xdt == TC_DTYPE_F16) {
    launch_tile<__half, __half>(fmt, t, w, aligned, st);
  } else {
    launch_tile<__nv_bfloat16, __nv_bfloat16>(fmt, t, w, aligned, st);
  }
}

// Natural alignment of the format's weight loads.
size_t weight_alignment(int32_t fmt) {
  switch (fmt) {
    case quant::Q4_0: return qdev::Q4_0::kAlign;
    case quant::Q4_1: return qdev::Q4_1::kAlign;
    case quant::Q8_0: return qdev::Q8_0::kAlign;
    case quant::Q5_0: return qdev::Q5_0::kAlign;
    case quant::Q5_1: return qdev::Q5_1::kAlign;
    case quant::Q4_K: return qdev::Q4_K::kAlign;
    case quant::Q5_K: return qdev::Q5_K::kAlign;
    case quant::Q6_K: return qdev::Q6_K::kAlign;
    case quant::Q8_K: return qdev::Q8_K::kAlign;
    case quant::F32: return 4;
    default: return 2;
  }
}

tc_status run(Device& d, StreamState* s, const GemvQuantizedArgs& a, bool fused) {
  const char* op = fused ? "fused_rmsnorm_gemv_quantized" : "gemv_quantized";
  const size_t es = dtype_size(a.dtype);
  const int64_t M = a.M, N = a.N, K = a.K;
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  if (rows_int8(a, s, fused))
    return gemv_q8_x_rows(s, a.fmt, a.dtype, a.x, fused ? a.gamma : nullptr, a.eps, w, M, N, K, a.y, s->workspace);
  const bool w_aligned = is_aligned(w, weight_alignment(a.fmt));
  // X rows are read 4 elements at a time by the f32 kernels: the buffer
  // must be 16-byte (f32) or 8-byte (f16/bf16) aligned, else it is copied
  // to the workspace first
  // (K is a multiple of 4 for block formats, so every row then is too). The
  // plain formats read element by element and only need element alignment.
  const bool blocks = a.fmt != quant::F16 && a.fmt != quant::BF16 && a.fmt != quant::F32;
  const bool x_direct = !fused && is_aligned(a.x, blocks ? 4 * es : es);
  const bool y_direct = is_aligned(a.y, es);
  // Workspace: the tile's X (f32 when normalised) in the first half, its Y
  // in the second when Y is not element-aligned.
  const size_t half_ws = s->workspace_bytes / 2;
  const size_t x_row = size_t(K) * (fused ? 4 : es), y_row = size_t(N) * es;
  int64_t tile = kMaxM;
  if (!x_direct) tile = std::min<int64_t>(tile, int64_t(half_ws / x_row));
  if (!y_direct) tile = std::min<int64_t>(tile, int64_t(half_ws / y_row));
  if (tile < 1 || ((!x_direct || !y_direct) && !s->workspace))
    return fail(TC_ERR_UNSUPPORTED,
                "%s: a row of X (%lld x %zu bytes) or Y (%lld x %zu bytes) needs staging through the stream's "
                "%zu-byte workspace and does not fit it",
                op, (long long)K, fused ? size_t(4) : es, (long long)N, es, s->workspace_bytes);
  char* ws_x = static_cast<char*>(s->workspace);
  char* ws_y = ws_x + half_ws;
  for (int64_t m0 = 0; m0 < M; m0 += tile) {
    const int mt = int(std::min<int64_t>(tile, M - m0));
    const char* xsrc = static_cast<const char*>(a.x) + size_t(m0) * size_t(K) * es;
    char* ydst = static_cast<char*>(a.y) + size_t(m0) * size_t(N) * es;
    Tile t{xsrc, y_direct ? ydst : ws_y, mt, N, K};
    tc_dtype xdt = a.dtype;
    if (fused) {
      s->last_kernel = "rmsnorm_rows";
      if (a.dtype == TC_DTYPE_F32)
        rmsnorm_rows<float><<<mt, 256, 0, s->stream>>>(reinterpret_cast<const float*>(xsrc),
                                                       static_cast<const float*>(a.gamma),
                                                       reinterpret_cast<float*>(ws_x), K, a.eps);
      else if (a.dtype == TC_DTYPE_F16)
        rmsnorm_rows<__half><<<mt, 256, 0, s->stream>>>(reinterpret_cast<const __half*>(xsrc),
                                                        static_cast<const __half*>(a.gamma),
                                                        reinterpret_cast<float*>(ws_x), K, a.eps);
      else
        rmsnorm_rows<__nv_bfloat16><<<mt, 256, 0, s->stream>>>(
            reinterpret_cast<const __nv_bfloat16*>(xsrc), static_cast<const __nv_bfloat16*>(a.gamma),
            reinterpret_cast<float*>(ws_x), K, a.eps);
      if (tc_status st = check(cudaGetLastError(), "fused_rmsnorm_gemv_quantized: launch")) return st;
      t.x = ws_x;
      xdt = TC_DTYPE_F32;
    } else if (!x_direct) {
      s->last_kernel = "gemv_quantized: stage X";
      if (tc_status st = check(cudaMemcpyAsync(ws_x, xsrc, size_t(mt) * x_row, cudaMemcpyDeviceToDevice, s->stream),
                               "gemv_quantized: stage X"))
        return st;
      t.x = ws_x;
    }
    s->last_kernel = "gemv_quantized";
    launch_any(xdt, a.dtype, a.fmt, t, w, w_aligned, Gpu{d.index(), d.props().multiProcessorCount}, s->stream);
    if (tc_status st = check(cudaGetLastError(), fused ? "fused_rmsnorm_gemv_quantized: launch"
                                                       : "gemv_quantized: launch"))
      return st;
    if (!y_direct) {
      if (tc_status st = check(cudaMemcpyAsync(ydst, ws_y, size_t(mt) * y_row, cudaMemcpyDeviceToDevice, s->stream),
                               "gemv_quantized: copy Y"))
        return st;
    }
  }
  return TC_OK;
}

}  // namespace

tc_status gemv_quantized(Device& d, StreamState* s, const GemvQuantizedArgs& a) { return run(d, s, a, false); }

tc_status fused_rmsnorm_gemv_quantized(Device& d, StreamState* s, const GemvQuantizedArgs& a) {
  return run(d, s, a, true);
}

}  // namespace cuda
}  // namespace tc
