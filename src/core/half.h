// Scalar conversions between f32 and the 16-bit float formats (IEEE binary16
// and bfloat16), round-to-nearest-even. The one definition every backend and
// test uses; vector kernels convert in bulk with the same rounding.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtypes.h"  // dtype_size, which every user of these conversions needs

namespace tc {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // nan
  if (au >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (rounds to inf)
  if (au < 0x38800000u) {
    // subnormal or zero in f16: scale so the integer part is the mantissa,
    // letting the float adder round to nearest even.
    float v = bits_f32(au) + 0.5f;  // 0.5 = 2^-1 pushes bits below 2^-24 out
    return uint16_t(sign | (f32_bits(v) - 0x3f000000u));
  }
  uint32_t mant_odd = (au >> 13) & 1u;
  au += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return uint16_t(sign | (au >> 13));
}

}  // namespace tc
