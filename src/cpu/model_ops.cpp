// The decoder's small ops on the CPU (core/backend.h, "model ops"): the
// embedding gather, the residual add, dtype conversion, RoPE with the KV
// cache append, the head-major -> token-major copy and one-row attention
// over the cache. Each is a pass over at most a few rows per token, so the
// code is plain loops (the compiler vectorises the inner ones) split over the
// thread pool where the work is large enough to pay for it.
//
//   embed_rows:       dst[i] = scale * dequant(table row tokens[i])
//   add:              x += y (or a bias row: x[i] += y[i % period])
//   copy_2d:          rows of bytes between two pitches
//   rope_kv_append:   p = *pos + i; (a, b) pairs -> (a c - b s, b c + a s),
//                     queries to [H][n][D], keys and values into the cache
//   decode_attention: o_h = sum_j softmax_j(cap(scale q_h . K_g[j])) V_g[j],
//                     *pos - window < j <= *pos
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "cpu/convert.h"
#include "cpu/ops.h"
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

tc_status add(const AddArgs& a) {
  float* x = a.x;
  const float* y = a.y;
  if (a.period > 0) {
    for (int64_t r = 0; r < a.n; r += a.period)
      for (int64_t i = 0; i < a.period && r + i < a.n; ++i) x[r + i] += y[i];
    return TC_OK;
  }
  auto run = [x, y](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] += y[i];
  };
  if (a.n < (int64_t(1) << 16)) run(0, a.n);  // a decode step's row: not worth waking the pool
  else parallel_for(a.n, int64_t(1) << 14, run);
  return TC_OK;
}

tc_status convert(const ConvertArgs& a) {
  const int64_t sp = a.src_pitch ? a.src_pitch : a.n, dp = a.dst_pitch ? a.dst_pitch : a.n;
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
  const bool f16 = a.cache == TC_DTYPE_F16;
  // One item per (token, head): queries first, then keys with their values.
  auto run = [&](int64_t b, int64_t e) {
    std::vector<float> k(f16 ? size_t(D) : 0);  // a rotated key before rounding to f16
    for (int64_t r = b; r < e; ++r) {
      const int64_t i = r / rows, h = r % rows, p = P + i;
      const float* c = a.cos_t + p * half;
      const float* s = a.sin_t + p * half;
      if (h < a.H) {
        rotate(a.q + i * a.ldq + h * D, a.qt + (h * a.n + i) * D, c, s, half, a.neox);
        continue;
      }
      const int64_t g = h - a.H, cell = (g * a.C + p) * D;
      const float* v = a.v + i * a.ldv + g * D;
      if (f16) {
        rotate(a.k + i * a.ldk + g * D, k.data(), c, s, half, a.neox);
        narrow_row(false, k.data(), static_cast<uint16_t*>(a.k_cache) + cell, D);
        narrow_row(false, v, static_cast<uint16_t*>(a.v_cache) + cell, D);
      } else {
        rotate(a.k + i * a.ldk + g * D, static_cast<float*>(a.k_cache) + cell, c, s, half, a.neox);
        std::memcpy(static_cast<float*>(a.v_cache) + cell, v, size_t(D) * sizeof(float));
      }
    }
  };
  const int64_t items = a.n * rows;
  if (items * D < (int64_t(1) << 15)) run(0, items);
  else parallel_for(items, std::max<int64_t>(1, 4096 / D), run);
  return TC_OK;
}

tc_status heads_to_tokens(const HeadsToTokensArgs& a) {
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t h = 0; h < a.H; ++h)
      std::memcpy(a.dst + (i * a.H + h) * a.D, a.src + (h * a.n + i) * a.D, size_t(a.D) * sizeof(float));
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

// One query row per head, the whole prefix of the cache at once: scores,
// their maximum, the exponentials and their sum, then the weighted values.
// It serves a CPU model's one-token steps over an f16 cache (an f32 cache
// attends with attention_forward in place), the device path on the CPU
// (TC_LLAMA_DEVICE_PATH), and is the reference of the GPU's. f16 rows are
// widened one at a time (exactly: every f16 is an f32).
tc_status decode_attention(const DecodeAttentionArgs& a) {
  const int64_t D = a.D, end = int64_t(*a.pos) + 1, G = a.H / a.Hkv;
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, end - a.window) : 0, S = end - first;
  const bool f16 = a.cache == TC_DTYPE_F16;
  const size_t esize = f16 ? 2 : 4;
  parallel_for(a.H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> p(static_cast<size_t>(S)), wide(f16 ? size_t(D) : 0);
    // Row j of a cache matrix as f32 (in place for an f32 cache).
    auto row = [&](const char* M, int64_t j) {
      if (!f16) return reinterpret_cast<const float*>(M) + j * D;
      widen_row(false, reinterpret_cast<const uint16_t*>(M) + j * D, wide.data(), D);
      return static_cast<const float*>(wide.data());
    };
    for (int64_t h = h0; h < h1; ++h) {
      const float* q = a.q + h * D;
      const char* K = static_cast<const char*>(a.k_cache) + size_t((h / G) * a.C + first) * size_t(D) * esize;
      const char* V = static_cast<const char*>(a.v_cache) + size_t((h / G) * a.C + first) * size_t(D) * esize;
      float m = -INFINITY;
      for (int64_t j = 0; j < S; ++j) {
        const float* kj = row(K, j);
        float acc[4] = {0, 0, 0, 0};  // four partial sums: lets the loop vectorise
        int64_t d = 0;
        for (; d + 4 <= D; d += 4)
          for (int u = 0; u < 4; ++u) acc[u] += q[d + u] * kj[d + u];
        for (; d < D; ++d) acc[0] += q[d] * kj[d];
        float sj = a.scale * ((acc[0] + acc[1]) + (acc[2] + acc[3]));
        if (a.softcap > 0.0f) sj = a.softcap * std::tanh(sj / a.softcap);
        p[size_t(j)] = sj;
        m = std::max(m, sj);
      }
      float l = 0.0f;
      for (int64_t j = 0; j < S; ++j) l += (p[size_t(j)] = std::exp(p[size_t(j)] - m));
      float* o = a.o + h * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t j = 0; j < S; ++j) {
        const float w = p[size_t(j)];
        const float* vj = row(V, j);
        for (int64_t d = 0; d < D; ++d) o[d] += w * vj[d];
      }
      const float inv = 1.0f / l;
      for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    }
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
