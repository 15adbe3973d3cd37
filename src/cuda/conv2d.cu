// Conv2D on the GPU: implicit GEMM through im2col and cuBLASLt (gemm.cu).
//
// N batch, C in_channels, K out_channels, H x W input, kH x kW kernel, pads
// ph/pw, strides sh/sw, OH x OW output; P = OH*OW, CKK = C*kH*kW. Row (c,i,j)
// of a column matrix is c*kH*kW + i*kW + j, column (y,x) is y*OW + x; the
// maths is the CPU backend's (src/cpu/conv2d.cpp):
//
//   im2col:   col[n][(c,i,j)][(y,x)] = X[n, c, y*sh - ph + i, x*sw - pw + j]   (0 outside X)
//   forward:  Y[n] (K x P)      = W (K x CKK) @ col[n] (CKK x P) + bias[:, None]
//   backward_input:
//             dcol[n] (CKK x P) = W^T (CKK x K) @ dY[n] (K x P)                 (f32)
//             dX[n, c, h, w]    = sum over taps (i, j) with h = y*sh - ph + i,
//                                 w = x*sw - pw + j of dcol[n][(c,i,j)][(y,x)]
//   backward_weight:
//             dW (K x CKK)      = dYt (K x N*P) @ colt^T (N*P x CKK)
//             with dYt[k][n*P + p] = dY[n][k][p] and colt[(c,i,j)][n*P + p] = col[n][(c,i,j)][p]
//
// col2im is a gather: each thread owns one element of dX and sums its taps
// in a fixed order (i, then j), so results are deterministic and need no
// atomics. backward_weight lays the batch out along the GEMM's K dimension,
// so one long product sums over images and pixels at once.
//
// Memory: the column matrices live in the caller's scratch_col (sized for
// the whole batch in f32, so any chunk of it fits in either dtype). dYt and
// the f32 dW accumulator of f16 runs live in the stream's own scratch. The
// batch is processed in chunks: forward and backward_input take as many
// images as keep a chunk's columns within kChunkBytes (so they are still in
// L2 when the GEMM reads them), backward_weight as many as keep dYt within
// kScratchBytes.
//
// Precision: col holds the input dtype (exact: it is a copy of X); every
// product accumulates in f32 (CUBLAS_COMPUTE_32F, no TF32). Forward starts
// Y at the bias and adds the product with beta 1, so an f16 Y is rounded
// once from the f32 sum. dcol is f32 and col2im sums in f32 before rounding
// dX once. f16 dW is rounded once from the f32 sum over the whole batch.
#include <cuda_fp16.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/device.h"

namespace tc {
namespace cuda {
namespace {

constexpr int64_t kChunkBytes = int64_t(32) << 20;     // columns of one forward/backward_input chunk
constexpr int64_t kScratchBytes = int64_t(256) << 20;  // dYt of one backward_weight chunk
constexpr int64_t kMaxGemmDim = 0x7fffffff;
constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;

struct Geom {
  int64_t N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW, P, CKK;
  explicit Geom(const tc_conv2d_desc& d)
      : N(d.batch), C(d.in_channels), K(d.out_channels), H(d.H), W(d.W), kH(d.kH), kW(d.kW), ph(d.pad_h),
        pw(d.pad_w), sh(d.stride_h), sw(d.stride_w), OH(d.out_H), OW(d.out_W), P(d.out_H * d.out_W),
        CKK(d.in_channels * d.kH * d.kW) {}
  bool is_pointwise() const { return kH == 1 && kW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  // Every per-pixel coordinate and intermediate (y*sh + kH, H + ph, H*W, P)
  // stays below 2^31.
  bool fits32() const {
    const int64_t lim = int64_t(1) << 30;
    return H * W < lim && P < lim && H + ph + kH < lim && W + pw + kW < lim && OH * sh < lim && OW * sw < lim;
  }
};

template <class T>
__device__ __forceinline__ T from_f32(float v) {
  return T(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// Grid over "rows" (blockIdx.y, looped past 65535) and the positions of a
// row (P or H*W; blockIdx.x * blockDim.x + threadIdx.x, looped). Blocks are
// as wide as a row needs, rounded to whole warps, so 7x7 maps do not leave
// most of a 256-thread block idle.
struct RowLaunch {
  dim3 grid;
  unsigned threads;
};
RowLaunch row_grid(int64_t rows, int64_t width) {
  const int64_t threads = std::min<int64_t>(kThreads, std::max<int64_t>(32, (width + 31) / 32 * 32));
  const int64_t bx = std::min<int64_t>((width + threads - 1) / threads, 1024);
  return {dim3(unsigned(std::max<int64_t>(bx, 1)), unsigned(std::min(rows, kMaxGridY))), unsigned(threads)};
}

// im2col of images [n0, n0 + nc): row r = n*CKK + k of the chunk, written to
// col[k * ld_k + n * ld_n + p]. (ld_k, ld_n) = (P, CKK*P) gives col[n][k][p];
// (nc*P, P) gives colt[k][n*P + p].
// The per-pixel index arithmetic runs in I: int32_t when every coordinate
// fits (Geom::fits32; 64-bit division is an emulated routine on the GPU),
// int64_t otherwise. Offsets into the tensors stay 64-bit.
template <class T, class I>
__global__ void im2col_kernel(const T* __restrict__ x, T* __restrict__ col, int64_t n0, int64_t nc, int64_t C,
                              I H, I W, int kH, int kW, I ph, I pw, I sh, I sw, I OW, I P, int64_t ld_k,
                              int64_t ld_n) {
  const int64_t CKK = C * kH * kW, rows = nc * CKK;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t n = r / CKK, k = r % CKK;
    const int64_t c = k / (kH * kW);
    const int ij = int(k % (kH * kW)), i = ij / kW, j = ij % kW;
    const T* plane = x + ((n0 + n) * C + c) * int64_t(H) * W;
    T* dst = col + k * ld_k + n * ld_n;
    for (I p = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); p < P; p += I(gridDim.x) * I(blockDim.x)) {
      const I y = p / OW, xo = p % OW;
      const I iy = y * sh - ph + i, ix = xo * sw - pw + j;
      dst[p] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? plane[int64_t(iy) * W + ix] : from_f32<T>(0.0f);
    }
  }
}

// col2im as a gather over dX of images [n0, n0 + nc): row r = n*C + c is one
// plane of dX, dcol is f32 [nc][CKK][P].
template <class T, class I>
__global__ void col2im_gather_kernel(const float* __restrict__ dcol, T* __restrict__ dx, int64_t n0, int64_t nc,
                                     int64_t C, I H, I W, int kH, int kW, I ph, I pw, I sh, I sw, I OH, I OW) {
  const int64_t rows = nc * C, P = int64_t(OH) * OW;
  const I HW = H * W;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t n = r / C, c = r % C;
    const float* src = dcol + (n * C + c) * int64_t(kH) * kW * P;  // rows (c, 0, 0) .. (c, kH-1, kW-1) of image n
    T* plane = dx + ((n0 + n) * C + c) * int64_t(HW);
    for (I e = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); e < HW; e += I(gridDim.x) * I(blockDim.x)) {
      const I h = e / W, w = e % W;
      float acc = 0.0f;
      for (int i = 0; i < kH; ++i) {
        const I ty = h + ph - i;  // = y * sh
        if (ty < 0 || ty % sh) continue;
        const I y = ty / sh;
        if (y >= OH) continue;
        for (int j = 0; j < kW; ++j) {
          const I tx = w + pw - j;  // = x * sw
          if (tx < 0 || tx % sw) continue;
          const I xo = tx / sw;
          if (xo >= OW) continue;
          acc += src[(int64_t(i) * kW + j) * P + int64_t(y) * OW + xo];
        }
      }
      plane[e] = from_f32<T>(acc);
    }
  }
}

// Y[n][k][p] = bias[k] for images [n0, n0 + nc): row r = n*K + k.
template <class T>
__global__ void fill_bias_kernel(const T* __restrict__ bias, T* __restrict__ y, int64_t n0, int64_t nc, int64_t K,
                                 int64_t P) {
  for (int64_t r = blockIdx.y; r < nc * K; r += gridDim.y) {
    const T b = bias[r % K];
    T* row = y + (n0 * K + r) * P;
    for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < P; p += int64_t(gridDim.x) * blockDim.x)
      row[p] = b;
  }
}

// dYt[k][n*P + p] = dY[n0 + n][k][p]: row r = n*K + k.
template <class T>
__global__ void transpose_dy_kernel(const T* __restrict__ dy, T* __restrict__ dyt, int64_t n0, int64_t nc, int64_t K,
                                    int64_t P) {
  for (int64_t r = blockIdx.y; r < nc * K; r += gridDim.y) {
    const int64_t n = r / K, k = r % K;
    const T* src = dy + (n0 * K + r) * P;
    T* dst = dyt + k * (nc * P) + n * P;
    for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < P; p += int64_t(gridDim.x) * blockDim.x)
      dst[p] = src[p];
  }
}

__global__ void narrow_kernel(const float* __restrict__ src, __half* __restrict__ dst, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    dst[e] = __float2half_rn(src[e]);
}

// A row-major GEMM description in the form gemm_lt takes.
tc_gemm_desc gemm_desc(tc_dtype dtype, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                       int64_t ldc, int64_t batch, int64_t sa, int64_t sb, int64_t sc, double beta) {
  tc_gemm_desc d{};
  d.M = M;
  d.N = N;
  d.K = K;
  d.lda = lda;
  d.ldb = ldb;
  d.ldc = ldc;
  d.transpose_a = ta;
  d.transpose_b = tb;
  d.alpha = 1.0;
  d.beta = beta;
  d.dtype = dtype;
  d.accum = TC_DTYPE_F32;
  d.allow_tf32 = 0;
  d.batch = batch;
  d.stride_a = sa;
  d.stride_b = sb;
  d.stride_c = sc;
  return d;
}

// Images per chunk so that `per_image` bytes each stay within `budget`
// (at least one), with the GEMM dimension nc * P below 2^31 where it is one.
int64_t chunk_images(const Geom& g, int64_t per_image, int64_t budget, bool batch_in_gemm_dim) {
  int64_t nc = std::max<int64_t>(1, budget / std::max<int64_t>(per_image, 1));
  if (batch_in_gemm_dim) nc = std::min(nc, std::max<int64_t>(1, kMaxGemmDim / g.P));
  // Multiples of 8 images keep later chunks' f16 pointers 16-byte aligned,
  // which cuBLASLt's fastest kernels need.
  if (nc >= 8) nc -= nc % 8;
  return std::min(nc, g.N);
}

template <class T>
tc_status im2col(StreamState* s, const Geom& g, const T* x, T* col, int64_t n0, int64_t nc, int64_t ld_k,
                 int64_t ld_n) {
  s->last_kernel = "conv2d_im2col";
  const RowLaunch l = row_grid(nc * g.CKK, g.P);
  if (g.fits32())
    im2col_kernel<T, int32_t><<<l.grid, l.threads, 0, s->stream>>>(
        x, col, n0, nc, g.C, int32_t(g.H), int32_t(g.W), int(g.kH), int(g.kW), int32_t(g.ph), int32_t(g.pw),
        int32_t(g.sh), int32_t(g.sw), int32_t(g.OW), int32_t(g.P), ld_k, ld_n);
  else
    im2col_kernel<T, int64_t><<<l.grid, l.threads, 0, s->stream>>>(x, col, n0, nc, g.C, g.H, g.W, int(g.kH), int(g.kW),
                                                                 g.ph, g.pw, g.sh, g.sw, g.OW, g.P, ld_k, ld_n);
  return check(cudaGetLastError(), "conv2d: im2col launch");
}

template <class T>
tc_status col2im(StreamState* s, const Geom& g, const float* dcol, T* dx, int64_t n0, int64_t nc) {
  s->last_kernel = "conv2d_col2im_gather";
  const RowLaunch l = row_grid(nc * g.C, g.H * g.W);
  if (g.fits32())
    col2im_gather_kernel<T, int32_t><<<l.grid, l.threads, 0, s->stream>>>(
        dcol, dx, n0, nc, g.C, int32_t(g.H), int32_t(g.W), int(g.kH), int(g.kW), int32_t(g.ph), int32_t(g.pw),
        int32_t(g.sh), int32_t(g.sw), int32_t(g.OH), int32_t(g.OW));
  else
    col2im_gather_kernel<T, int64_t><<<l.grid, l.threads, 0, s->stream>>>(dcol, dx, n0, nc, g.C, g.H, g.W, int(g.kH),
                                                                        int(g.kW), g.ph, g.pw, g.sh, g.sw, g.OH, g.OW);
  return check(cudaGetLastError(), "conv2d_backward_input: col2im launch");
}

template <class T>
tc_status forward_t(Device& dev, StreamState* s, const Conv2dForwardArgs& a, tc_dtype dtype) {
  const Geom g(a.d);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  T* y = static_cast<T*>(a.y);
  T* col = reinterpret_cast<T*>(a.col);
  const bool direct = g.is_pointwise();
  const int64_t nc_max = chunk_images(g, g.CKK * g.P * int64_t(sizeof(T)), kChunkBytes, false);
  for (int64_t n0 = 0; n0 < g.N; n0 += nc_max) {
    const int64_t nc = std::min(nc_max, g.N - n0);
    if (a.bias) {
      s->last_kernel = "conv2d_fill_bias";
      const RowLaunch l = row_grid(nc * g.K, g.P);
      fill_bias_kernel<T><<<l.grid, l.threads, 0, s->stream>>>(static_cast<const T*>(a.bias), y, n0, nc, g.K, g.P);
      if (tc_status st = check(cudaGetLastError(), "conv2d_forward: bias launch")) return st;
    }
    const T* b = x + n0 * g.C * g.P;  // pointwise: col[n] is X[n]
    if (!direct) {
      if (tc_status st = im2col(s, g, x, col, n0, nc, g.P, g.CKK * g.P)) return st;
      b = col;
    }
    // Y[n] = W @ col[n] (+ Y[n] = bias): W is shared by every image (stride 0).
    tc_gemm_desc d = gemm_desc(dtype, false, false, g.K, g.P, g.CKK, g.CKK, g.P, g.P, nc, 0, g.CKK * g.P,
                               g.K * g.P, a.bias ? 1.0 : 0.0);
    if (tc_status st = gemm_lt(dev, s, d, dtype, w, b, y + n0 * g.K * g.P)) return st;
  }
  return TC_OK;
}

template <class T>
tc_status backward_input_t(Device& dev, StreamState* s, const Conv2dBackwardInputArgs& a, tc_dtype dtype) {
  const Geom g(a.d);
  const T* dy = static_cast<const T*>(a.dy);
  const T* w = static_cast<const T*>(a.w);
  T* dx = static_cast<T*>(a.dx);
  if (g.is_pointwise()) {
    // col2im is the identity: dX[n] = W^T @ dY[n], rounded once from f32.
    // (Chunks keep cuBLASLt's int32 batch count in range.)
    for (int64_t n0 = 0; n0 < g.N; n0 += kMaxGridY) {
      const int64_t nc = std::min(kMaxGridY, g.N - n0);
      tc_gemm_desc d = gemm_desc(dtype, true, false, g.C, g.P, g.K, g.C, g.P, g.P, nc, 0, g.K * g.P, g.C * g.P, 0.0);
      if (tc_status st = gemm_lt(dev, s, d, dtype, w, dy + n0 * g.K * g.P, dx + n0 * g.C * g.P)) return st;
    }
    return TC_OK;
  }
  float* dcol = a.col;
  const int64_t nc_max = chunk_images(g, g.CKK * g.P * 4, kChunkBytes, false);
  for (int64_t n0 = 0; n0 < g.N; n0 += nc_max) {
    const int64_t nc = std::min(nc_max, g.N - n0);
    tc_gemm_desc d =
        gemm_desc(dtype, true, false, g.CKK, g.P, g.K, g.CKK, g.P, g.P, nc, 0, g.K * g.P, g.CKK * g.P, 0.0);
    if (tc_status st = gemm_lt(dev, s, d, TC_DTYPE_F32, w, dy + n0 * g.K * g.P, dcol)) return st;
    if (tc_status st = col2im(s, g, dcol, dx, n0, nc)) return st;
  }
  return TC_OK;
}

template <class T>
tc_status backward_weight_t(Device& dev, StreamState* s, const Conv2dBackwardWeightArgs& a, tc_dtype dtype) {
  const Geom g(a.d);
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* colt = reinterpret_cast<T*>(a.col);
  const int64_t nc_max = chunk_images(g, g.K * g.P * int64_t(sizeof(T)), kScratchBytes, true);
  const bool chunked = nc_max < g.N;
  // f16 over several chunks sums in an f32 accumulator (after dYt in scratch).
  const bool f32_acc = chunked && dtype == TC_DTYPE_F16;
  // One image at a time: dY[n] is already dYt, and colt is col[n].
  const bool several = nc_max > 1;
  const int64_t dyt_bytes = several ? (g.K * nc_max * g.P * int64_t(sizeof(T)) + 255) / 256 * 256 : 0;
  void* scratch = nullptr;
  if (dyt_bytes || f32_acc)
    if (tc_status st = stream_scratch(s, size_t(dyt_bytes + (f32_acc ? g.K * g.CKK * 4 : 0)),
                                      "conv2d_backward_weight scratch", &scratch))
      return st;
  float* acc = f32_acc ? reinterpret_cast<float*>(static_cast<char*>(scratch) + dyt_bytes) : nullptr;
  for (int64_t n0 = 0; n0 < g.N; n0 += nc_max) {
    const int64_t nc = std::min(nc_max, g.N - n0);
    if (tc_status st = im2col(s, g, x, colt, n0, nc, nc * g.P, g.P)) return st;
    const T* dyt = dy + n0 * g.K * g.P;
    if (several) {
      dyt = static_cast<T*>(scratch);
      s->last_kernel = "conv2d_transpose_dy";
      const RowLaunch l = row_grid(nc * g.K, g.P);
      transpose_dy_kernel<T><<<l.grid, l.threads, 0, s->stream>>>(dy, static_cast<T*>(scratch), n0, nc, g.K, g.P);
      if (tc_status st = check(cudaGetLastError(), "conv2d_backward_weight: transpose launch")) return st;
    }
    // dW (+)= dYt (K x nc*P) @ colt^T (nc*P x CKK); the first chunk overwrites.
    tc_gemm_desc d =
        gemm_desc(dtype, false, true, g.K, g.CKK, nc * g.P, nc * g.P, nc * g.P, g.CKK, 1, 0, 0, 0, n0 ? 1.0 : 0.0);
    if (f32_acc) {
      if (tc_status st = gemm_lt(dev, s, d, TC_DTYPE_F32, dyt, colt, acc)) return st;
    } else {
      if (tc_status st = gemm_lt(dev, s, d, dtype, dyt, colt, a.dw)) return st;
    }
  }
  if (f32_acc) {
    const int64_t n = g.K * g.CKK;
    s->last_kernel = "conv2d_narrow_dw";
    narrow_kernel<<<unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, 8192)), kThreads, 0, s->stream>>>(
        acc, static_cast<__half*>(a.dw), n);
    return check(cudaGetLastError(), "conv2d_backward_weight: narrow launch");
  }
  return TC_OK;
}

}  // namespace

tc_status conv2d_forward(Device& dev, StreamState* s, const Conv2dForwardArgs& a) {
  if (a.d.dtype == TC_DTYPE_F16) return forward_t<__half>(dev, s, a, TC_DTYPE_F16);
  return forward_t<float>(dev, s, a, TC_DTYPE_F32);
}

tc_status conv2d_backward_input(Device& dev, StreamState* s, const Conv2dBackwardInputArgs& a) {
  if (a.d.dtype == TC_DTYPE_F16) return backward_input_t<__half>(dev, s, a, TC_DTYPE_F16);
  return backward_input_t<float>(dev, s, a, TC_DTYPE_F32);
}

tc_status conv2d_backward_weight(Device& dev, StreamState* s, const Conv2dBackwardWeightArgs& a) {
  if (a.d.dtype == TC_DTYPE_F16) return backward_weight_t<__half>(dev, s, a, TC_DTYPE_F16);
  return backward_weight_t<float>(dev, s, a, TC_DTYPE_F32);
}

}  // namespace cuda
}  // namespace tc
