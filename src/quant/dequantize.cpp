// Reference dequantisation, one function per format, each following ggml's
// dequantize_row_* operation for operation so the f32 results are
// bit-identical (this file is compiled with -ffp-contract=off: a fused
// multiply-add would round differently). The vector kernels in src/cpu
// compute the same values, up to the rounding of a fused multiply-add.
#include <cstring>

#include "core/half.h"
#include "quant/formats.h"

namespace tc {
namespace quant {
namespace {

void row_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int x0 = (x[i].qs[j] & 0x0F) - 8;
      const int x1 = (x[i].qs[j] >> 4) - 8;
      y[i * QK4_0 + j] = float(x0) * d;
      y[i * QK4_0 + j + QK4_0 / 2] = float(x1) * d;
    }
  }
}

void row_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int x0 = x[i].qs[j] & 0x0F;
      const int x1 = x[i].qs[j] >> 4;
      y[i * QK4_1 + j] = float(x0) * d + m;
      y[i * QK4_1 + j + QK4_1 / 2] = float(x1) * d + m;
    }
  }
}

// ggml's dequantize_row_q5_0 / _q5_1: the fifth bit of weight j is bit j of
// qh, so x0 = (q[j] & 15) | bit j << 4, x1 = (q[j] >> 4) | bit (j + 16) << 4.
void row_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint32_t qh = q5_high_bits(x[i].qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int x0 = int((x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16;
      const int x1 = int((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      y[i * QK5_0 + j] = float(x0) * d;
      y[i * QK5_0 + j + QK5_0 / 2] = float(x1) * d;
    }
  }
}

void row_q5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const float m = f16_to_f32(x[i].m);
    const uint32_t qh = q5_high_bits(x[i].qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int x0 = int((x[i].qs[j] & 0x0F) | (((qh >> j) & 1) << 4));
      const int x1 = int((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      y[i * QK5_1 + j] = float(x0) * d + m;
      y[i * QK5_1 + j + QK5_1 / 2] = float(x1) * d + m;
    }
  }
}

void row_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[i * QK8_0 + j] = float(x[i].qs[j]) * d;
  }
}

void row_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* q = x[i].qs;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QK_K; j += 64) {
      scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void row_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    const float d = f16_to_f32(x[i].d);
    const float min = f16_to_f32(x[i].dmin);
    int is = 0;
    uint8_t sc, m;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
      scale_min_k4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * float(sc), m1 = min * float(m);
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * float(sc), m2 = min * float(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * float((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * float((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 = uint8_t(u1 << 2);
      u2 = uint8_t(u2 << 2);
    }
  }
}

void row_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = f16_to_f32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < QK_K; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * float(sc[is + 0]) * float(q1);
        y[l + 32] = d * float(sc[is + 2]) * float(q2);
        y[l + 64] = d * float(sc[is + 4]) * float(q3);
        y[l + 96] = d * float(sc[is + 6]) * float(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void row_q8_k(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * float(x[i].qs[j]);
}

}  // namespace

void dequantize_row(int32_t format, const void* src, float* dst, int64_t k) {
  switch (format) {
    case Q4_0: row_q4_0(static_cast<const BlockQ4_0*>(src), dst, k / QK4_0); break;
    case Q4_1: row_q4_1(static_cast<const BlockQ4_1*>(src), dst, k / QK4_1); break;
    case Q8_0: row_q8_0(static_cast<const BlockQ8_0*>(src), dst, k / QK8_0); break;
    case Q5_0: row_q5_0(static_cast<const BlockQ5_0*>(src), dst, k / QK5_0); break;
    case Q5_1: row_q5_1(static_cast<const BlockQ5_1*>(src), dst, k / QK5_1); break;
    case Q4_K: row_q4_k(static_cast<const BlockQ4_K*>(src), dst, k / QK_K); break;
    case Q5_K: row_q5_k(static_cast<const BlockQ5_K*>(src), dst, k / QK_K); break;
    case Q6_K: row_q6_k(static_cast<const BlockQ6_K*>(src), dst, k / QK_K); break;
    case Q8_K: row_q8_k(static_cast<const BlockQ8_K*>(src), dst, k / QK_K); break;
    case F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < k; ++i) dst[i] = f16_to_f32(s[i]);
      break;
    }
    case BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(s[i]);
      break;
    }
    case F32: std::memcpy(dst, src, size_t(k) * sizeof(float)); break;
    default: break;
  }
}

}  // namespace quant
}  // namespace tc
