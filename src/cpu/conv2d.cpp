// Conv2D on the CPU: im2col + sgemm (gemm_f32.h: the build's BLAS, or our own
// f32 kernels).
//
// N batch, C in_channels, K out_channels, H x W input, kH x kW kernel, pads
// ph/pw, strides sh/sw, OH x OW output; P = OH*OW, CKK = C*kH*kW. Row (c,i,j)
// of a column matrix is c*kH*kW + i*kW + j, column (y,x) is y*OW + x.
//
//   im2col:   col[n][(c,i,j)][(y,x)] = X[n, c, y*sh - ph + i, x*sw - pw + j]   (0 outside X)
//   forward:  Y[n] (K x P)    = W (K x CKK) @ col[n] (CKK x P)  + bias[:, None]
//   backward_input:
//             dcol[n] (CKK x P) = W^T (CKK x K) @ dY[n] (K x P)
//             dX = col2im(dcol), the adjoint of im2col:
//             dX[n, c, y*sh - ph + i, x*sw - pw + j] += dcol[n][(c,i,j)][(y,x)]  (taps inside X only)
//   backward_weight:
//             dW (K x CKK) = sum_n dY[n] (K x P) @ col[n]^T (P x CKK)
//
// sgemm with beta == 0 writes C without reading it (the BLAS contract: "when
// BETA is supplied as zero then C need not be set on input"), so the poisoned
// scratch or the caller's dX cannot leak NaN into results.
//
// Precision: the column matrices (scratch_col) are f32 for every dtype; f16
// tensors are widened on their way into col or into a GEMM operand, every
// product and sum is f32, and f16 results are rounded once at the end
// (backward_input accumulates its col2im in the f32 scratch_dX_f32 first).
// f32 with a 1x1 kernel, stride 1 and no padding skips im2col/col2im: col[n]
// is X[n] itself.
//
// Threading: im2col and col2im run over the C input planes of an image on
// the pool (each plane touches its own rows of col and its own plane of dX);
// the GEMMs are threaded by sgemm (OpenBLAS's threads or our pool), one image
// at a time, right after that image's im2col so its columns are still in
// cache.
//
// Cost: with few filters (ResNet's 64) each GEMM is short (K rows against
// CKK-long columns) and OpenBLAS spends about as long packing the column
// matrix as multiplying; im2col takes about a fifth of the forward's time
// (bench/conv2d.py).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "cpu/convert.h"
#include "cpu/gemm_f32.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

struct Geom {
  int64_t N, C, K, H, W, kH, kW, ph, pw, sh, sw, OH, OW, P, CKK;
  // For kernel column j, outputs x in [x_lo[j], x_hi[j]) read inside X.
  std::vector<int64_t> x_lo, x_hi;

  explicit Geom(const tc_conv2d_desc& d)
      : N(d.batch), C(d.in_channels), K(d.out_channels), H(d.H), W(d.W), kH(d.kH), kW(d.kW), ph(d.pad_h),
        pw(d.pad_w), sh(d.stride_h), sw(d.stride_w), OH(d.out_H), OW(d.out_W), P(d.out_H * d.out_W),
        CKK(d.in_channels * d.kH * d.kW), x_lo(size_t(d.kW)), x_hi(size_t(d.kW)) {
    for (int64_t j = 0; j < kW; ++j) {
      // x*sw - pw + j >= 0  and  x*sw - pw + j <= W - 1
      int64_t lo = pw - j > 0 ? (pw - j + sw - 1) / sw : 0;
      int64_t hi = W - 1 + pw - j >= 0 ? (W - 1 + pw - j) / sw + 1 : 0;
      lo = std::min(lo, OW);
      hi = std::max(lo, std::min(hi, OW));
      x_lo[size_t(j)] = lo;
      x_hi[size_t(j)] = hi;
    }
  }
  bool is_pointwise() const { return kH == 1 && kW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  int64_t plane_grain() const { return std::max<int64_t>(1, 65536 / (kH * kW * P + 1)); }
};

// Row copies into f32, contiguous or strided, for each source type.
inline void load_row(const float* s, int64_t stride, int64_t n, float* d) {
  if (stride == 1) {
    std::memcpy(d, s, size_t(n) * sizeof(float));
  } else {
    for (int64_t x = 0; x < n; ++x) d[x] = s[x * stride];
  }
}
inline void load_row(const uint16_t* s, int64_t stride, int64_t n, float* d) {
  if (stride == 1) {
    widen_row(false, s, d, n);
  } else {
    for (int64_t x = 0; x < n; ++x) d[x] = f16_to_f32(s[x * stride]);
  }
}

// im2col of one input plane `src` (H x W) into its kH*kW rows `dst` of a
// column matrix (each P wide).
template <class T>
void im2col_plane(const Geom& g, const T* src, float* dst) {
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      float* row = dst + (i * g.kW + j) * g.P;
      const int64_t lo = g.x_lo[size_t(j)], hi = g.x_hi[size_t(j)];
      for (int64_t y = 0; y < g.OH; ++y) {
        float* d = row + y * g.OW;
        const int64_t iy = y * g.sh - g.ph + i;
        if (iy < 0 || iy >= g.H) {
          std::fill(d, d + g.OW, 0.0f);
          continue;
        }
        std::fill(d, d + lo, 0.0f);
        if (hi > lo) load_row(src + iy * g.W + lo * g.sw - g.pw + j, g.sw, hi - lo, d + lo);
        std::fill(d + hi, d + g.OW, 0.0f);
      }
    }
}

// col2im of one plane: dst (H x W, f32) = sum of the taps of its kH*kW rows.
void col2im_plane(const Geom& g, const float* src, float* dst) {
  std::fill(dst, dst + g.H * g.W, 0.0f);
  for (int64_t i = 0; i < g.kH; ++i)
    for (int64_t j = 0; j < g.kW; ++j) {
      const float* row = src + (i * g.kW + j) * g.P;
      const int64_t lo = g.x_lo[size_t(j)], hi = g.x_hi[size_t(j)];
      for (int64_t y = 0; y < g.OH; ++y) {
        const int64_t iy = y * g.sh - g.ph + i;
        if (iy < 0 || iy >= g.H) continue;
        const float* s = row + y * g.OW;
        float* d = dst + iy * g.W - g.pw + j;
        if (g.sw == 1) {
          for (int64_t x = lo; x < hi; ++x) d[x] += s[x];
        } else {
          for (int64_t x = lo; x < hi; ++x) d[x * g.sw] += s[x];
        }
      }
    }
}

// col[n] of image n, over its C planes in parallel.
template <class T>
void im2col(const Geom& g, const T* x, int64_t n, float* col) {
  parallel_for(g.C, g.plane_grain(), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c)
      im2col_plane(g, x + (n * g.C + c) * g.H * g.W, col + n * g.CKK * g.P + c * g.kH * g.kW * g.P);
  });
}

std::vector<float> widen(const uint16_t* src, int64_t rows, int64_t cols) {
  std::vector<float> out(size_t(rows * cols));
  widen_matrix(false, src, rows, cols, cols, out.data());
  return out;
}

// Y[n] rows start as bias[k] (or 0), so the GEMM adds onto them with beta 1
// and never reads the caller's old Y.
void init_rows(float* y, int64_t K, int64_t P, const float* bias) {
  for (int64_t k = 0; k < K; ++k) std::fill(y + k * P, y + (k + 1) * P, bias ? bias[k] : 0.0f);
}

}  // namespace

tc_status conv2d_forward(const Conv2dForwardArgs& a) {
  const Geom g(a.d);
  if (a.d.dtype == TC_DTYPE_F32) {
    const float* x = static_cast<const float*>(a.x);
    const float* w = static_cast<const float*>(a.w);
    const float* bias = static_cast<const float*>(a.bias);
    float* y = static_cast<float*>(a.y);
    const bool direct = g.is_pointwise();
    for (int64_t n = 0; n < g.N; ++n) {
      if (!direct) im2col(g, x, n, a.col);
      const float* col = direct ? x + n * g.C * g.P : a.col + n * g.CKK * g.P;
      init_rows(y + n * g.K * g.P, g.K, g.P, bias);
      sgemm(false, false, g.K, g.P, g.CKK, 1.0f, w, g.CKK, col, g.P, 1.0f, y + n * g.K * g.P, g.P);
    }
    return TC_OK;
  }
  // f16: f32 copies of W and bias, one image's f32 output at a time.
  const uint16_t* x = static_cast<const uint16_t*>(a.x);
  uint16_t* y = static_cast<uint16_t*>(a.y);
  std::vector<float> w = widen(static_cast<const uint16_t*>(a.w), g.K, g.CKK);
  std::vector<float> bias;
  if (a.bias) bias = widen(static_cast<const uint16_t*>(a.bias), 1, g.K);
  std::vector<float> yf(size_t(g.K * g.P));
  for (int64_t n = 0; n < g.N; ++n) {
    im2col(g, x, n, a.col);
    init_rows(yf.data(), g.K, g.P, a.bias ? bias.data() : nullptr);
    sgemm(false, false, g.K, g.P, g.CKK, 1.0f, w.data(), g.CKK, a.col + n * g.CKK * g.P, g.P, 1.0f, yf.data(), g.P);
    narrow_matrix(false, yf.data(), g.K, g.P, y + n * g.K * g.P, g.P);
  }
  return TC_OK;
}

tc_status conv2d_backward_input(const Conv2dBackwardInputArgs& a) {
  const Geom g(a.d);
  const int64_t HW = g.H * g.W;
  if (a.d.dtype == TC_DTYPE_F32) {
    const float* dy = static_cast<const float*>(a.dy);
    const float* w = static_cast<const float*>(a.w);
    float* dx = static_cast<float*>(a.dx);
    if (g.is_pointwise()) {  // col2im is the identity: dX[n] = W^T @ dY[n]
      for (int64_t n = 0; n < g.N; ++n)
        sgemm(true, false, g.C, g.P, g.K, 1.0f, w, g.C, dy + n * g.K * g.P, g.P, 0.0f, dx + n * g.C * HW, g.P);
      return TC_OK;
    }
    for (int64_t n = 0; n < g.N; ++n) {
      float* dcol = a.col + n * g.CKK * g.P;
      sgemm(true, false, g.CKK, g.P, g.K, 1.0f, w, g.CKK, dy + n * g.K * g.P, g.P, 0.0f, dcol, g.P);
      // dX is f32 already: accumulate the col2im in it directly.
      parallel_for(g.C, g.plane_grain(), [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) col2im_plane(g, dcol + c * g.kH * g.kW * g.P, dx + (n * g.C + c) * HW);
      });
    }
    return TC_OK;
  }
  const uint16_t* dy = static_cast<const uint16_t*>(a.dy);
  uint16_t* dx = static_cast<uint16_t*>(a.dx);
  std::vector<float> w = widen(static_cast<const uint16_t*>(a.w), g.K, g.CKK);
  std::vector<float> dyf(size_t(g.K * g.P));
  for (int64_t n = 0; n < g.N; ++n) {
    float* dcol = a.col + n * g.CKK * g.P;
    widen_matrix(false, dy + n * g.K * g.P, g.K, g.P, g.P, dyf.data());
    sgemm(true, false, g.CKK, g.P, g.K, 1.0f, w.data(), g.CKK, dyf.data(), g.P, 0.0f, dcol, g.P);
    // Sum the taps in f32 (scratch_dX_f32), round each plane once.
    parallel_for(g.C, g.plane_grain(), [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const int64_t nc = n * g.C + c;
        col2im_plane(g, dcol + c * g.kH * g.kW * g.P, a.dx_f32 + nc * HW);
        narrow_row(false, a.dx_f32 + nc * HW, dx + nc * HW, HW);
      }
    });
  }
  return TC_OK;
}

tc_status conv2d_backward_weight(const Conv2dBackwardWeightArgs& a) {
  const Geom g(a.d);
  if (a.d.dtype == TC_DTYPE_F32) {
    const float* x = static_cast<const float*>(a.x);
    const float* dy = static_cast<const float*>(a.dy);
    float* dw = static_cast<float*>(a.dw);
    const bool direct = g.is_pointwise();
    std::fill(dw, dw + g.K * g.CKK, 0.0f);  // overwritten, never accumulated into the caller's dW
    for (int64_t n = 0; n < g.N; ++n) {
      if (!direct) im2col(g, x, n, a.col);
      const float* col = direct ? x + n * g.C * g.P : a.col + n * g.CKK * g.P;
      sgemm(false, true, g.K, g.CKK, g.P, 1.0f, dy + n * g.K * g.P, g.P, col, g.P, 1.0f, dw, g.CKK);
    }
    return TC_OK;
  }
  const uint16_t* x = static_cast<const uint16_t*>(a.x);
  const uint16_t* dy = static_cast<const uint16_t*>(a.dy);
  std::vector<float> dwf(size_t(g.K * g.CKK), 0.0f), dyf(size_t(g.K * g.P));
  for (int64_t n = 0; n < g.N; ++n) {
    im2col(g, x, n, a.col);
    widen_matrix(false, dy + n * g.K * g.P, g.K, g.P, g.P, dyf.data());
    sgemm(false, true, g.K, g.CKK, g.P, 1.0f, dyf.data(), g.P, a.col + n * g.CKK * g.P, g.P, 1.0f, dwf.data(), g.CKK);
  }
  narrow_matrix(false, dwf.data(), g.K, g.CKK, static_cast<uint16_t*>(a.dw), g.CKK);
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
