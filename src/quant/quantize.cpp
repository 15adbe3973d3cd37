// Reference quantisation, bit-identical to ggml's quantize_row_*_ref
// (compiled with -ffp-contract=off, f32 arithmetic in ggml's order).
//
// Q4_0 per block of 32: take the element of largest magnitude (the first one
// on ties), keep its sign: d = max / -8, id = 1/d (0 when d is 0), and
//   q = min(15, trunc(x * id + 8.5))
// so max itself maps to 0 and the grid is (q - 8) * d.
// Q4_1: d = (max - min) / 15, q = min(15, trunc((x - min) * id + 0.5)).
// Q5_0: as Q4_0 on 32 levels: d = max / -16, q = min(31, trunc(x * id + 16.5)).
// Q5_1: d = (max - min) / 31, q = trunc((x - min) * id + 0.5) (ggml does not
// clamp: max lands within rounding of 31.5, which truncates to 31).
// The 5-bit q is stored as Q4_0's nibbles plus bit 4 at bit j of qh.
// Q8_0: d = amax / 127, q = roundf(x * id) (half away from zero).
// Q8_K: per 256, iscale = -127 / max (max = signed element of largest
// magnitude), q = min(127, nearest_int(iscale * x)), d = 1 / iscale, plus
// the sums of each 16 q's; an all-zero block gives d = 0 and q = 0.
//
// ggml converts the f32 products to integers with C casts; on x86 these
// compile to cvttss2si, which gives INT32_MIN for NaN or out-of-range input,
// whose low byte is 0. to_int8 reproduces that, so even non-finite inputs
// quantise as ggml's x86 builds do.
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "quant/formats.h"

namespace tc {
namespace quant {
namespace {

// (int8_t)(float) as x86 code computes it: truncate toward zero, INT32_MIN
// when not representable, then keep the low byte.
inline int8_t to_int8(float v) {
  int32_t i = (v > -2147483648.0f && v < 2147483648.0f) ? int32_t(v) : INT32_MIN;
  return int8_t(uint8_t(uint32_t(i) & 0xFF));
}

// ggml's nearest_int: round half to even through the float adder's rounding
// (valid for |fval| <= 4194303, which the callers guarantee).
inline int nearest_int(float fval) {
  float val = fval + 12582912.f;
  int i;
  std::memcpy(&i, &val, sizeof(int));
  return (i & 0x007fffff) - 0x00400000;
}

void q4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK4_0; ++j) {
      const float v = x[j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + QK4_0 / 2] * id;
      const int8_t a = to_int8(x0 + 8.5f), b = to_int8(x1 + 8.5f);
      const uint8_t xi0 = uint8_t(a < 15 ? a : 15);
      const uint8_t xi1 = uint8_t(b < 15 ? b : 15);
      y[i].qs[j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

void q4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK4_1) {
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < QK4_1; ++j) {
      const float v = x[j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[j + QK4_1 / 2] - min) * id;
      const int8_t a = to_int8(x0 + 0.5f), b = to_int8(x1 + 0.5f);
      const uint8_t xi0 = uint8_t(a < 15 ? a : 15);
      const uint8_t xi1 = uint8_t(b < 15 ? b : 15);
      y[i].qs[j] = uint8_t(xi0 | (xi1 << 4));
    }
  }
}

void store_high_bits(uint32_t qh, uint8_t* out) {
  for (int b = 0; b < 4; ++b) out[b] = uint8_t(qh >> (8 * b));
}

void q5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK5_0; ++j) {
      const float v = x[j];
      if (amax < std::fabs(v)) {
        amax = std::fabs(v);
        max = v;
      }
    }
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const float x0 = x[j] * id;
      const float x1 = x[j + QK5_0 / 2] * id;
      const int8_t a = to_int8(x0 + 16.5f), b = to_int8(x1 + 16.5f);
      const uint8_t xi0 = uint8_t(a < 31 ? a : 31);
      const uint8_t xi1 = uint8_t(b < 31 ? b : 31);
      y[i].qs[j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= uint32_t((xi0 & 0x10) >> 4) << j;
      qh |= uint32_t((xi1 & 0x10) >> 4) << (j + QK5_0 / 2);
    }
    store_high_bits(qh, y[i].qh);
  }
}

void q5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK5_1) {
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < QK5_1; ++j) {
      const float v = x[j];
      if (v < min) min = v;
      if (v > max) max = v;
    }
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    y[i].m = f32_to_f16(min);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const float x0 = (x[j] - min) * id;
      const float x1 = (x[j + QK5_1 / 2] - min) * id;
      // ggml's (uint8_t) cast: the same x86 conversion, low byte kept.
      const uint8_t xi0 = uint8_t(to_int8(x0 + 0.5f)), xi1 = uint8_t(to_int8(x1 + 0.5f));
      y[i].qs[j] = uint8_t((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
      qh |= uint32_t((xi0 & 0x10) >> 4) << j;
      qh |= uint32_t((xi1 & 0x10) >> 4) << (j + QK5_1 / 2);
    }
    store_high_bits(qh, y[i].qh);
  }
}

void q8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) {
      const float ax = std::fabs(x[j]);
      amax = amax > ax ? amax : ax;  // ggml's MAX(a, b), NaN handling included
    }
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = to_int8(std::round(x[j] * id));
  }
}

void q8_k(const float* x, BlockQ8_K* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, QK_K);
      std::memset(y[i].bsums, 0, sizeof y[i].bsums);
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) {
      const int v = nearest_int(iscale * x[j]);
      y[i].qs[j] = int8_t(v < 127 ? v : 127);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = int16_t(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace

bool can_quantize(int32_t format) {
  switch (format) {
    case Q4_0: case Q4_1: case Q5_0: case Q5_1: case Q8_0: case Q8_K: case F16: case BF16: case F32: return true;
    default: return false;
  }
}

bool quantize_row(int32_t format, const float* src, void* dst, int64_t k) {
  switch (format) {
    case Q4_0: q4_0(src, static_cast<BlockQ4_0*>(dst), k / QK4_0); return true;
    case Q4_1: q4_1(src, static_cast<BlockQ4_1*>(dst), k / QK4_1); return true;
    case Q5_0: q5_0(src, static_cast<BlockQ5_0*>(dst), k / QK5_0); return true;
    case Q5_1: q5_1(src, static_cast<BlockQ5_1*>(dst), k / QK5_1); return true;
    case Q8_0: q8_0(src, static_cast<BlockQ8_0*>(dst), k / QK8_0); return true;
    case Q8_K: q8_k(src, static_cast<BlockQ8_K*>(dst), k / QK_K); return true;
    case F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < k; ++i) d[i] = f32_to_f16(src[i]);
      return true;
    }
    case BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < k; ++i) d[i] = f32_to_bf16(src[i]);
      return true;
    }
    case F32: std::memcpy(dst, src, size_t(k) * sizeof(float)); return true;
    default: return false;
  }
}

}  // namespace quant
}  // namespace tc
