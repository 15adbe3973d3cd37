// The decode step's one-row products on 8-bit activations (core/backend.h,
// QuantizeQ8Args / GemvQ8Args), on the CPU: plain loops, the reference the
// device kernels are tested against (the LLaMA harness takes this path only
// on devices; on the host its products run the quantized GEMV).
//
//   quantize_q8: v = x or rmsnorm(x) * gamma (f64 sum of squares), then per
//     block of 32: dx = max|v| / 127, xq = rne(v * (1 / dx)), sx = dx sum(xq)
//   gemv_q8:     r[n] = sum_b d_b (dx_b sum_i q_i xq_i + c sx_b)  (c = -8 Q4_0, 0 Q8_0;
//                Q4_1 / Q5_1: d_b dx_b sum_i q_i xq_i + m_b sx_b),
//                the K-quants per sub-block as core/backend.h writes them,
//                then y = r, y += r, or y[n] = act(r[n]) r[n + N/2] (core/gate.h)
//   with f16 X (xh): quantize_q8 only normalises and rounds to f16, and
//                gemv_q8 is the exact product with the dequantised weights
//   repack_q8:   GGUF blocks into the split layout (quants and scales apart;
//                Q5_0 into Q8_0's, its codes minus 16)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/gate.h"
#include "core/half.h"
#include "cpu/ops.h"
#include "cpu/row_norm.h"
#include "cpu/thread_pool.h"
#include "quant/formats.h"

namespace tc {
namespace cpu {

namespace {

// One row of X (K values) into xq and xd.
void quantize_row(const float* x, const float* gamma, float eps, int64_t K, int8_t* xq, float* xd) {
  const float rstd = gamma ? rstd_of(x, K, eps) : 1.0f;
  for (int64_t b = 0; b < K / 32; ++b) {
    float v[32], amax = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const int64_t k = b * 32 + i;
      v[i] = gamma ? (x[k] * rstd) * gamma[k] : x[k];
      amax = std::max(amax, std::fabs(v[i]));
    }
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = std::max(-128, std::min(127, int(std::nearbyint(v[i] * id))));
      xq[b * 32 + i] = int8_t(q);
      sum += q;
    }
    xd[2 * b] = d, xd[2 * b + 1] = d * float(sum);
  }
}

// Row m of X normalised and rounded to f16 (the f16 products' X).
void normalise_row_f16(const float* x, const float* gamma, float eps, int64_t K, uint16_t* xh) {
  const float rstd = gamma ? rstd_of(x, K, eps) : 1.0f;
  for (int64_t k = 0; k < K; ++k) xh[k] = f32_to_f16(gamma ? (x[k] * rstd) * gamma[k] : x[k]);
}

}  // namespace

tc_status quantize_q8(const QuantizeQ8Args& a) {
  if (tc_status st = check_quantize_q8(a)) return st;
  if (a.xh) {
    for (int64_t m = 0; m < a.M; ++m) normalise_row_f16(a.x + m * a.K, a.gamma, a.eps, a.K, a.xh + m * a.K);
    return TC_OK;
  }
  for (int64_t m = 0; m < a.M; ++m)
    quantize_row(a.x + m * a.K, a.gamma, a.eps, a.K, a.xq + m * a.K, a.xd + m * (a.K / 16));
  return TC_OK;
}

namespace {

// Block i of W (i = n * K/32 + b): its quants and its scale, in either layout.
const uint8_t* block_at(const GemvQ8Args& a, int64_t i, uint16_t* d) {
  if (a.wd) {
    *d = a.wd[i];
    return static_cast<const uint8_t*>(a.w) + i * quant::split_quant_bytes(a.fmt);
  }
  if (a.fmt == quant::Q4_0) {
    const auto* blk = static_cast<const quant::BlockQ4_0*>(a.w) + i;
    *d = blk->d;
    return blk->qs;
  }
  const auto* blk = static_cast<const quant::BlockQ8_0*>(a.w) + i;
  *d = blk->d;
  return reinterpret_cast<const uint8_t*>(blk->qs);
}

// Row n's r for Q4_0 / Q8_0 (see the top of the file).
float row_q8_0(const GemvQ8Args& a, int64_t n) {
  const int64_t nb = a.K / 32;
  float r = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* xq = a.xq + b * 32;
    const float dx = a.xd[2 * b], sx = a.xd[2 * b + 1];
    uint16_t d;
    const uint8_t* qs = block_at(a, n * nb + b, &d);
    int s = 0;
    if (a.fmt == quant::Q4_0) {
      for (int i = 0; i < 16; ++i) s += (qs[i] & 15) * xq[i] + (qs[i] >> 4) * xq[16 + i];
      r += f16_to_f32(d) * (dx * float(s) - 8.0f * sx);
    } else {
      for (int i = 0; i < 32; ++i) s += int8_t(qs[i]) * xq[i];
      r += f16_to_f32(d) * (dx * float(s));
    }
  }
  return r;
}

// Row n's r for Q4_K / Q5_K (GGUF layout): per sub-block j of 32,
// d sc_j dx dot(q, xq) - dmin m_j sx.
float row_q45_k(const GemvQ8Args& a, int64_t n) {
  const int64_t ns = a.K / quant::QK_K;
  const bool five = a.fmt == quant::Q5_K;
  float r = 0.0f;
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t *scales, *qs, *qh = nullptr;
    uint16_t dh, mh;
    if (five) {
      const auto* blk = static_cast<const quant::BlockQ5_K*>(a.w) + n * ns + s;
      dh = blk->d, mh = blk->dmin, scales = blk->scales, qs = blk->qs, qh = blk->qh;
    } else {
      const auto* blk = static_cast<const quant::BlockQ4_K*>(a.w) + n * ns + s;
      dh = blk->d, mh = blk->dmin, scales = blk->scales, qs = blk->qs;
    }
    const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
    for (int j = 0; j < 8; ++j) {
      const int64_t b = s * 8 + j;
      const int8_t* xq = a.xq + b * 32;
      uint8_t sc, m;
      quant::scale_min_k4(j, scales, &sc, &m);
      // Sub-block j: chunk j / 2 of 32 bytes, low nibbles for even j.
      const uint8_t* q = qs + 32 * (j / 2);
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        int v = j % 2 ? q[l] >> 4 : q[l] & 15;
        if (five) v |= ((qh[l] >> j) & 1) << 4;
        dot += v * xq[l];
      }
      r += d * float(sc) * a.xd[2 * b] * float(dot) - dmin * float(m) * a.xd[2 * b + 1];
    }
  }
  return r;
}

// Row n's r for Q6_K (split layout): per group g of 16,
// d sc_g dx dot(q - 32, xq).
float row_q6_k(const GemvQ8Args& a, int64_t n) {
  const int64_t ns = a.K / quant::QK_K;
  float r = 0.0f;
  for (int64_t s = 0; s < ns; ++s) {
    const int64_t i = n * ns + s;
    const uint8_t* blk = static_cast<const uint8_t*>(a.w) + i * quant::split_quant_bytes(a.fmt);
    const uint8_t *ql = blk, *qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = f16_to_f32(a.wd[i]);
    for (int h = 0; h < 2; ++h)
      for (int g = 0; g < 4; ++g)
        for (int half = 0; half < 2; ++half) {
          // Weights 128h + 32g + 16 half + l, X's block 8s + 4h + g.
          const int64_t b = s * 8 + 4 * h + g;
          int dot = 0;
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q = quant::q6_k_code(ql, qh, 128 * h + 32 * g + l);
            dot += (q - 32) * a.xq[b * 32 + (l & 31)];
          }
          r += d * float(sc[8 * h + 2 * g + half]) * a.xd[2 * b] * float(dot);
        }
  }
  return r;
}

// Row n's r for Q4_1 / Q5_1 (GGUF layout; w = d q + m, q the 4- or 5-bit
// code): per block d dx dot(q, xq) + m sx.
float row_q_1(const GemvQ8Args& a, int64_t n) {
  const int64_t nb = a.K / 32;
  const bool five = a.fmt == quant::Q5_1;
  float r = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* xq = a.xq + b * 32;
    const float dx = a.xd[2 * b], sx = a.xd[2 * b + 1];
    uint16_t d, m;
    const uint8_t* qs;
    uint32_t qh = 0;
    if (five) {
      const auto& blk = static_cast<const quant::BlockQ5_1*>(a.w)[n * nb + b];
      d = blk.d, m = blk.m, qs = blk.qs, qh = quant::q5_high_bits(blk.qh);
    } else {
      const auto& blk = static_cast<const quant::BlockQ4_1*>(a.w)[n * nb + b];
      d = blk.d, m = blk.m, qs = blk.qs;
    }
    int s = 0;
    for (int i = 0; i < 32; ++i) s += quant::nibble_code(qs, qh, i) * xq[i];
    r += f16_to_f32(d) * (dx * float(s)) + f16_to_f32(m) * sx;
  }
  return r;
}

float row_q8(const GemvQ8Args& a, int64_t n) {
  switch (a.fmt) {
    case quant::Q4_K: case quant::Q5_K: return row_q45_k(a, n);
    case quant::Q6_K: return row_q6_k(a, n);
    case quant::Q4_1: case quant::Q5_1: return row_q_1(a, n);
    default: return row_q8_0(a, n);
  }
}

}  // namespace

namespace {

// Row n of W dequantised (f32), from either layout: the split layout's
// blocks are put back together in GGUF's order first.
void dequantize_w_row(const GemvQ8Args& a, int64_t n, float* out) {
  const quant::FormatInfo* f = quant::format_info(a.fmt);
  const int64_t nb = a.K / f->block_elems;
  if (!a.wd) {
    quant::dequantize_row(a.fmt, static_cast<const uint8_t*>(a.w) + n * nb * f->block_bytes, out, a.K);
    return;
  }
  const int64_t qb = quant::split_quant_bytes(a.fmt);
  const bool d_last = quant::q8_split_only(a.fmt);
  std::vector<uint8_t> blk(size_t(f->block_bytes));
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i = n * nb + b;
    std::memcpy(blk.data() + (d_last ? qb : 0), &a.wd[i], 2);
    std::memcpy(blk.data() + (d_last ? 0 : 2), static_cast<const uint8_t*>(a.w) + i * qb, size_t(qb));
    quant::dequantize_row(a.fmt, blk.data(), out + b * f->block_elems, f->block_elems);
  }
}

// f16 X: y = W x exactly (f64 sums of the f32 weights and X).
tc_status gemv_f16_x(const GemvQ8Args& a) {
  const int64_t rows = GemvQ8Args::gated(a.epilogue) ? a.N / 2 : a.N;
  std::vector<float> x(size_t(a.M * a.K));
  for (size_t i = 0; i < x.size(); ++i) x[i] = f16_to_f32(a.xh[i]);
  std::vector<float> r(size_t(a.M * a.N));
  parallel_for(a.N, 16, [&](int64_t n0, int64_t n1) {
    std::vector<float> w(size_t(a.K));
    for (int64_t n = n0; n < n1; ++n) {
      dequantize_w_row(a, n, w.data());
      for (int64_t m = 0; m < a.M; ++m) {
        double s = 0.0;
        for (int64_t k = 0; k < a.K; ++k) s += double(w[size_t(k)]) * double(x[size_t(m * a.K + k)]);
        r[size_t(m * a.N + n)] = float(s);
      }
    }
  });
  for (int64_t m = 0; m < a.M; ++m)
    for (int64_t n = 0; n < rows; ++n) {
      const float v = r[size_t(m * a.N + n)];
      float* y = a.y + m * rows + n;
      if (a.epilogue == GemvQ8Args::kStore) *y = v;
      else if (a.epilogue == GemvQ8Args::kAdd) *y += v;
      else *y = gate::glu(a.epilogue == GemvQ8Args::kGeglu, v, r[size_t(m * a.N + n + rows)]);
    }
  return TC_OK;
}

}  // namespace

tc_status gemv_q8(const GemvQ8Args& a) {
  if (tc_status st = check_gemv_q8(a)) return st;
  if (a.rope.n > 0) {  // the rows, then RoPE and the cache append on them
    if (tc_status st = gemv_q8(without_rope(a))) return st;
    return rope_kv_append(a.rope);
  }
  if (a.x) {  // X to quantise: into the call's scratch, then the product
    if (tc_status st = quantize_q8(quantize_of(a))) return st;
    return gemv_q8(product_of(a));
  }
  if (a.xh) return gemv_f16_x(a);
  const int64_t rows = GemvQ8Args::gated(a.epilogue) ? a.N / 2 : a.N;
  for (int64_t m = 0; m < a.M; ++m) {
    GemvQ8Args row = a;  // row m of X and of Y
    row.M = 1;
    row.xq = a.xq + m * a.K, row.xd = a.xd + m * (a.K / 16), row.y = a.y + m * rows;
    parallel_for(rows, 64, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) {
        const float r = row_q8(row, n);
        if (a.epilogue == GemvQ8Args::kStore) row.y[n] = r;
        else if (a.epilogue == GemvQ8Args::kAdd) row.y[n] += r;
        else row.y[n] = gate::glu(a.epilogue == GemvQ8Args::kGeglu, r, row_q8(row, n + rows));
      }
    });
  }
  return TC_OK;
}

tc_status repack_q8(const RepackQ8Args& a) {
  if (tc_status st = check_repack_q8(a)) return st;
  const int64_t blocks = a.N * (a.K / quant::q8_block_elems(a.fmt)), qb = quant::split_quant_bytes(a.fmt);
  const auto* w = static_cast<const uint8_t*>(a.w);
  auto* qs = static_cast<uint8_t*>(a.qs);
  if (a.fmt == quant::Q5_0) {  // Q8_0's split layout: code i = (nibble | fifth bit << 4) - 16, the same d
    const auto* q5 = static_cast<const quant::BlockQ5_0*>(a.w);
    parallel_for(blocks, 4096, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const quant::BlockQ5_0& blk = q5[b];
        const uint32_t qh = quant::q5_high_bits(blk.qh);
        int8_t* out = reinterpret_cast<int8_t*>(qs + b * qb);
        for (int i = 0; i < 32; ++i) out[i] = int8_t(quant::nibble_code(blk.qs, qh, i) - 16);
        a.d[b] = blk.d;
      }
    });
    return TC_OK;
  }
  // Q4_0 / Q8_0 blocks start with d, Q6_K's end with it.
  const int64_t d_at = a.fmt == quant::Q6_K ? qb : 0, q_at = a.fmt == quant::Q6_K ? 0 : 2;
  parallel_for(blocks, 4096, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::memcpy(&a.d[b], w + b * (qb + 2) + d_at, 2);
      std::memcpy(qs + b * qb, w + b * (qb + 2) + q_at, size_t(qb));
    }
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
