// The decoder's small ops on the CPU (core/backend.h, "model ops"): the
// embedding gather, the residual add, dtype conversion, RoPE with the KV
// cache append and the head-major -> token-major copy (one-row attention
// over the cache is cpu/decode_attention.cpp). Each is a pass over at most a few rows per token, so the
// code is plain loops (the compiler vectorises the inner ones) split over the
// thread pool where the work is large enough to pay for it.
//
//   embed_rows:       dst[i] = scale * dequant(table row tokens[i])
//   add:              x += y, or x += rmsnorm(y) gamma row by row
//   copy_2d:          rows of bytes between two pitches
//   argmax_rows:      out[r] = the first index of row r's largest value (NaN largest)
//   rope_kv_append:   p = *pos + i (a batch: pos[i] in cache slot slots[i]);
//                     q, k and v plus their biases if given (one f32 sum),
//                     q and k RMS-normed per head if asked;
//                     (a, b) pairs -> (a c - b s, b c + a s),
//                     queries to [H][n][D], keys and values into the cache
//                     (f32, f16 rounded to nearest even, or Q8_0 blocks
//                     quantised by quant::quantize_row, ggml's reference)
//   convert:          f32 <-> f16 / bf16, or a Q8_0 cache's rows to f32 / f16 / bf16
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/backend.h"
#include "core/dtypes.h"
#include "cpu/convert.h"
#include "cpu/ops.h"
#include "cpu/row_norm.h"
#include "cpu/thread_pool.h"
#include "quant/formats.h"

namespace tc {
namespace cpu {

tc_status embed_rows(const EmbedRowsArgs& a) {
  const uint8_t* table = static_cast<const uint8_t*>(a.table);
  for (int64_t i = 0; i < a.n; ++i) {
    float* row = a.dst + i * a.K;
    quant::dequantize_row(a.fmt, table + uint64_t(a.tokens[i]) * a.row_bytes, row, a.K);
    if (a.scale != 1.0f)
      for (int64_t k = 0; k < a.K; ++k) row[k] *= a.scale;
  }
  return TC_OK;
}

// The add, then (norm_out) rmsnorm_forward's kernel on the sum and, for f16,
// convert's rounding: the bits of the separate add, rmsnorm and convert.
tc_status add(const AddArgs& a) {
  float* x = a.x;
  const float* y = a.y;
  const int64_t D = a.D;
  if (y && a.gamma) {  // x += y rstd gamma, row by row (rmsnorm_forward's products)
    parallel_for(a.n / D, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0 * D; r < r1 * D; r += D) {
        const float rs = rstd_of(y + r, D, a.eps);
        for (int64_t d = 0; d < D; ++d) x[r + d] += y[r + d] * rs * a.gamma[d];
      }
    });
  } else if (y) {
    auto run = [x, y](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) x[i] += y[i];
    };
    if (a.n < (int64_t(1) << 16)) run(0, a.n);  // a decode step's row: not worth waking the pool
    else parallel_for(a.n, int64_t(1) << 14, run);
  }
  if (!a.norm_out) return TC_OK;
  const bool f16 = a.norm_dtype == TC_DTYPE_F16;
  thread_local std::vector<float> normed;
  if (f16) normed.resize(size_t(a.n));
  RmsNormForwardArgs r;
  r.N = a.n / D, r.D = D;
  r.dtype = TC_DTYPE_F32;
  r.eps = a.eps;
  r.x = x, r.gamma = a.norm_gamma;
  r.y = f16 ? static_cast<void*>(normed.data()) : a.norm_out;
  if (tc_status st = rmsnorm_forward(r)) return st;
  if (f16) {
    const float* rows = normed.data();  // this thread's buffer (the pool's threads have their own)
    parallel_for(r.N, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i)
        narrow_row(false, rows + i * D, static_cast<uint16_t*>(a.norm_out) + i * D, D);
    });
  }
  return TC_OK;
}

tc_status convert(const ConvertArgs& a) {
  const int64_t sp = a.src_pitch ? a.src_pitch : a.n, dp = a.dst_pitch ? a.dst_pitch : a.n;
  if (a.src_dtype == TC_DTYPE_Q8_0) {
    // q d per element, exact in f32 (8-bit q times an f16 d), as ggml's
    // dequantize_row_q8_0; f16 and bf16 round that once. Rows split over the pool:
    // this widens a whole cache prefix before a chunk's attention.
    parallel_for(a.rows, 1, [&](int64_t r0, int64_t r1) {
      thread_local std::vector<float> row;
      for (int64_t r = r0; r < r1; ++r) {
        const void* src = static_cast<const char*>(a.src) + dtype_bytes(TC_DTYPE_Q8_0, r * sp);
        if (a.dst_dtype == TC_DTYPE_F32) {
          quant::dequantize_row(quant::Q8_0, src, static_cast<float*>(a.dst) + r * dp, a.n);
        } else {
          row.resize(size_t(a.n));
          quant::dequantize_row(quant::Q8_0, src, row.data(), a.n);
          narrow_row(a.dst_dtype == TC_DTYPE_BF16, row.data(), static_cast<uint16_t*>(a.dst) + r * dp, a.n);
        }
      }
    });
    return TC_OK;
  }
  for (int64_t r = 0; r < a.rows; ++r) {
    if (a.src_dtype == TC_DTYPE_F32)
      narrow_row(a.dst_dtype == TC_DTYPE_BF16, static_cast<const float*>(a.src) + r * sp,
                 static_cast<uint16_t*>(a.dst) + r * dp, a.n);
    else
      widen_row(a.src_dtype == TC_DTYPE_BF16, static_cast<const uint16_t*>(a.src) + r * sp,
                static_cast<float*>(a.dst) + r * dp, a.n);
  }
  return TC_OK;
}

namespace {

// Rotates the D/2 pairs of `x` into `y` with the table row (c, s): pair k is
// (x[2k], x[2k+1]), or (x[k], x[k + D/2]) in the NEOX layout.
inline void rotate(const float* x, float* y, const float* c, const float* s, int64_t half, bool neox) {
  const int64_t step = neox ? 1 : 2, other = neox ? half : 1;
  for (int64_t k = 0; k < half; ++k) {
    const int64_t i = k * step;
    const float a = x[i], b = x[i + other];
    y[i] = a * c[k] - b * s[k];
    y[i + other] = b * c[k] + a * s[k];
  }
}

}  // namespace

tc_status rope_kv_append(const RopeKvAppendArgs& a) {
  const int64_t D = a.D, half = D / 2, P = *a.pos, rows = a.H + a.Hkv;
  const bool f16 = a.cache == TC_DTYPE_F16, q8 = a.cache == TC_DTYPE_Q8_0;
  // One item per (token, head): queries first, then keys with their values.
  auto run = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> k;  // a rotated key (or f16 query) before rounding to f16 or Q8_0
    thread_local std::vector<float> qb, kb, vb;  // rows plus their biases, normed
    if (f16 || q8 || a.qt16) k.resize(size_t(D));
    // Head h's row of x as the op appends it: plus its bias row (if any),
    // then RMS-normed with gamma (if any), as the rmsnorm op computes it.
    auto prepared = [D, eps = double(a.norm_eps)](const float* x, const float* bias, const float* gamma, int64_t h,
                                                  std::vector<float>& row) {
      if (!bias && !gamma) return x;
      row.resize(size_t(D));
      for (int64_t d = 0; d < D; ++d) row[size_t(d)] = bias ? x[d] + bias[h * D + d] : x[d];
      if (gamma) {
        const float rs = rstd_of(row.data(), D, eps);
        for (int64_t d = 0; d < D; ++d) row[size_t(d)] = row[size_t(d)] * rs * gamma[d];
      }
      return static_cast<const float*>(row.data());
    };
    for (int64_t r = b; r < e; ++r) {
      const int64_t i = r / rows, h = r % rows, p = a.slots ? a.pos[i] : P + i;
      const float* c = a.cos_t + p * half;
      const float* s = a.sin_t + p * half;
      if (h < a.H) {
        const float* x = prepared(a.q + i * a.ldq + h * D, a.bq, a.q_norm, h, qb);
        if (a.qt16) {
          rotate(x, k.data(), c, s, half, a.neox);
          narrow_row(false, k.data(), a.qt16 + (h * a.n + i) * D, D);
        } else {
          rotate(x, a.qt + (h * a.n + i) * D, c, s, half, a.neox);
        }
        continue;
      }
      const int64_t g = h - a.H, cell = (a.slots ? a.slots[i] * a.slot_stride : 0) + (g * a.C + p) * D;
      void* kd = static_cast<char*>(a.k_cache) + dtype_bytes(a.cache, cell);
      void* vd = static_cast<char*>(a.v_cache) + dtype_bytes(a.cache, cell);
      const float* key = prepared(a.k + i * a.ldk + g * D, a.bk, a.k_norm, g, kb);
      const float* v = prepared(a.v + i * a.ldv + g * D, a.bv, nullptr, g, vb);
      if (q8) {
        rotate(key, k.data(), c, s, half, a.neox);
        quant::quantize_row(quant::Q8_0, k.data(), kd, D);
        quant::quantize_row(quant::Q8_0, v, vd, D);
      } else if (f16) {
        rotate(key, k.data(), c, s, half, a.neox);
        narrow_row(false, k.data(), static_cast<uint16_t*>(kd), D);
        narrow_row(false, v, static_cast<uint16_t*>(vd), D);
      } else {
        rotate(key, static_cast<float*>(kd), c, s, half, a.neox);
        std::memcpy(vd, v, size_t(D) * sizeof(float));
      }
    }
  };
  const int64_t items = a.n * rows;
  if (items * D < (int64_t(1) << 15)) run(0, items);
  else parallel_for(items, std::max<int64_t>(1, 4096 / D), run);
  return TC_OK;
}

tc_status heads_to_tokens(const HeadsToTokensArgs& a) {
  const size_t es = a.dtype == TC_DTYPE_F16 ? 2 : 4, row = size_t(a.D) * es;
  const char* src = static_cast<const char*>(a.src);
  char* dst = static_cast<char*>(a.dst);
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t h = 0; h < a.H; ++h) std::memcpy(dst + size_t(i * a.H + h) * row, src + size_t(h * a.n + i) * row, row);
  return TC_OK;
}

// The bits of glu() then convert() on the same rows: swiglu / geglu_forward's
// kernels, rounded as convert rounds.
tc_status glu_rows(const GluRowsArgs& a) {
  parallel_for(a.n, 1, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> row;
    for (int64_t i = r0; i < r1; ++i) {
      const float* g = a.gu + i * a.ld;
      if (a.out_dtype == TC_DTYPE_F16) {
        row.resize(size_t(a.F));
        glu_row(a.gelu, g, g + a.F, row.data(), a.F);
        narrow_row(false, row.data(), static_cast<uint16_t*>(a.out) + i * a.F, a.F);
      } else {
        glu_row(a.gelu, g, g + a.F, static_cast<float*>(a.out) + i * a.F, a.F);
      }
    }
  });
  return TC_OK;
}

tc_status copy_2d(const Copy2dArgs& a) {
  parallel_for(a.rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(static_cast<char*>(a.dst) + size_t(r) * a.dst_pitch,
                  static_cast<const char*>(a.src) + size_t(r) * a.src_pitch, a.row_bytes);
  });
  return TC_OK;
}

namespace {

// The largest of x[0, n) with NaNs left out, and whether there is a NaN:
// SSE2's max keeps its second operand when the first is a NaN (a plain loop
// with the same select did not vectorise here: 4x slower than NumPy).
float max_of(const float* x, int64_t n, bool* nan) {
  float m = -INFINITY;
  bool unordered = false;
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(-INFINITY), m1 = m0, u0 = _mm_setzero_ps(), u1 = u0;
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
    m0 = _mm_max_ps(a, m0), m1 = _mm_max_ps(b, m1);
    u0 = _mm_or_ps(u0, _mm_cmpunord_ps(a, a)), u1 = _mm_or_ps(u1, _mm_cmpunord_ps(b, b));
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(m0, m1));
  for (float v : lanes) m = v > m ? v : m;
  unordered = _mm_movemask_ps(_mm_or_ps(u0, u1)) != 0;
#endif
  for (; i < n; ++i) {
    m = x[i] > m ? x[i] : m;
    unordered |= x[i] != x[i];
  }
  *nan = unordered;
  return m;
}

// NumPy's argmax of one row, a block of 256 at a time: only a block whose
// maximum beats the best so far is searched for where that maximum is.
int64_t argmax_row(const float* x, int64_t n) {
  constexpr int64_t kBlock = 256;
  float best = 0.0f;
  int64_t at = -1;
  for (int64_t b = 0; b < n; b += kBlock) {
    bool nan;
    const float m = max_of(x + b, std::min(kBlock, n - b), &nan);
    if (nan) {
      for (int64_t i = b;; ++i)
        if (x[i] != x[i]) return i;
    }
    if (at < 0 || m > best) {
      int64_t i = b;
      while (x[i] != m) ++i;
      best = m, at = i;
    }
  }
  return at;
}

}  // namespace

tc_status argmax_rows(const ArgmaxRowsArgs& a) {
  parallel_for(a.rows, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) a.out[r] = int32_t(argmax_row(a.x + r * a.n, a.n));
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
