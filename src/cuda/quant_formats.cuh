// Device-side decoders of the quantized weight formats (src/quant/formats.h
// has the byte layouts), shared by the GEMV, the (de)quantisers and any later
// kernel that reads GGUF weights on the GPU.
//
// Two kinds of decoder:
//  - weight_at(fmt, block, j): weight j of a block, computed with the same
//    f32 operations in the same order as ggml's dequantize_row_* (the
//    explicit __fmul_rn / __fadd_rn keep nvcc from fusing them into an FMA),
//    so the f32 result is bit-identical to the CPU's reference. One byte load
//    at a time: any alignment, meant for the element-wise kernels.
//  - Fmt<...>::decode<A>(block, part, out): the GEMV's decoder. A block is cut
//    into kParts parts; a part is kGroups runs of 4 consecutive weights, each
//    run sharing one affine map w = a * q + b (b = 0 except Q4_1, Q5_1, Q4_K,
//    Q5_K)
//    with q an exact small integer held as a float (Q4_0 and Q4_K high
//    nibbles: 16 times the integer, a divided by 16, which changes no
//    rounding since powers of two commute with it). The dot product of a run
//    with x is then a * sum(x q) + b * sum(x), which differs from the dot
//    product of the dequantised weights only by f32 rounding.
//    Integers become floats without the (quarter-rate) I2F instruction:
//    __byte_perm puts a byte b into the mantissa of 2^23, giving the float
//    2^23 + b exactly, and one subtraction of (2^23 + bias) leaves b - bias.
//    A is the alignment in bytes the block start is known to have (1, 2 or
//    4, or 16 for the K-quants' 16-byte blocks in the streaming kernel, plus
//    kSmem for a block in shared memory); wider loads are used where
//    it allows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace qdev {

// ---- scalar conversions, bit-identical to src/core/half.h -------------------------------------

__device__ __forceinline__ float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return __uint_as_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return __uint_as_float(sign);
    const float v = __fmul_rn(float(man), 1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ __forceinline__ uint16_t f32_to_f16(float f) {
  uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (au >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (au < 0x38800000u) {
    const float v = __fadd_rn(__uint_as_float(au), 0.5f);
    return uint16_t(sign | (__float_as_uint(v) - 0x3f000000u));
  }
  const uint32_t mant_odd = (au >> 13) & 1u;
  au += 0xc8000fffu + mant_odd;
  return uint16_t(sign | (au >> 13));
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// ---- loads of little-endian words at a known alignment ----------------------------------------
//
// A is the alignment (1, 2, 4 or 16) the address is known to have, plus kSmem
// when the pointer is into shared memory (the streaming GEMV decodes blocks
// staged there): plain loads then, since __ldg is for global memory only.

constexpr int kSmem = 64, kAlignBits = kSmem - 1;

__device__ __forceinline__ uint32_t ld8(const uint8_t* p) { return __ldg(p); }

template <int A>
__device__ __forceinline__ uint32_t ld8a(const uint8_t* p) {
  if constexpr ((A & kSmem) != 0) return *p;
  else return __ldg(p);
}

template <int A>
__device__ __forceinline__ uint32_t ld16(const uint8_t* p) {
  constexpr int S = A & kSmem;
  if constexpr ((A & kAlignBits) >= 2) {
    if constexpr (S) return *reinterpret_cast<const uint16_t*>(p);
    else return __ldg(reinterpret_cast<const uint16_t*>(p));
  } else {
    return ld8a<S>(p) | (ld8a<S>(p + 1) << 8);
  }
}

template <int A>
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) {
  constexpr int S = A & kSmem;
  if constexpr ((A & kAlignBits) >= 4) {
    if constexpr (S) return *reinterpret_cast<const uint32_t*>(p);
    else return __ldg(reinterpret_cast<const uint32_t*>(p));
  } else if constexpr ((A & kAlignBits) == 2) {
    return ld16<S | 2>(p) | (ld16<S | 2>(p + 2) << 16);
  } else {
    return ld8a<S>(p) | (ld8a<S>(p + 1) << 8) | (ld8a<S>(p + 2) << 16) | (ld8a<S>(p + 3) << 24);
  }
}

// 16 and 8 bytes at p (A >= 16 and >= 8).
template <int A>
__device__ __forceinline__ uint4 ld128(const uint8_t* p) {
  if constexpr ((A & kSmem) != 0) return *reinterpret_cast<const uint4*>(p);
  else return __ldg(reinterpret_cast<const uint4*>(p));
}
template <int A>
__device__ __forceinline__ uint2 ld64(const uint8_t* p) {
  if constexpr ((A & kSmem) != 0) return *reinterpret_cast<const uint2*>(p);
  else return __ldg(reinterpret_cast<const uint2*>(p));
}

// Alignment of block + off when the block start has alignment A (the
// shared-memory flag carried along).
__host__ __device__ constexpr int al(int A, int off_align) {
  return ((A & kAlignBits) < off_align ? (A & kAlignBits) : off_align) | (A & kSmem);
}

// An f16 scale as f32: the conversion is exact (hardware cvt; the GEMV
// decoders only, weight_at keeps the bit-level f16_to_f32).
__device__ __forceinline__ float f16s(uint32_t h) { return __half2float(__ushort_as_half(uint16_t(h))); }

// Byte k (< 12) of three little-endian words, without an indexed (local
// memory) array.
__device__ __forceinline__ uint32_t byte_of(uint32_t w0, uint32_t w1, uint32_t w2, int k) {
  const uint32_t w = k < 4 ? w0 : k < 8 ? w1 : w2;
  return (w >> (8 * (k & 3))) & 0xFF;
}

// Q4_K / Q5_K sub-block j's 6-bit scale and min (ggml's get_scale_min_k4)
// from the 12 scale bytes held as three words.
__device__ __forceinline__ void scale_min_k4(int j, uint32_t w0, uint32_t w1, uint32_t w2, float* sc, float* m) {
  if (j < 4) {
    *sc = float(byte_of(w0, w1, w2, j) & 63);
    *m = float(byte_of(w0, w1, w2, j + 4) & 63);
  } else {
    *sc = float((byte_of(w0, w1, w2, j + 4) & 0xF) | ((byte_of(w0, w1, w2, j - 4) >> 6) << 4));
    *m = float((byte_of(w0, w1, w2, j + 4) >> 4) | ((byte_of(w0, w1, w2, j) >> 6) << 4));
  }
}

// The four bytes of v as floats minus `bias` (exact).
template <int kBias>
__device__ __forceinline__ void bytes_to_f32(uint32_t v, float* f) {
  constexpr float kMagic = 8388608.0f + float(kBias);
#pragma unroll
  for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440 + i)) - kMagic;
}

// Byte k (runtime, < 4) of v as an exact float.
__device__ __forceinline__ float byte_f32(uint32_t v, int k) {
  return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u + uint32_t(k))) - 8388608.0f;
}

// ---- GEMV decoders ---------------------------------------------------------------------------

template <int G>
struct Part {
  float q[4 * G];  // run g: q[4g .. 4g+3] at weights pos[g] .. pos[g]+3 of the block
  float a[G], b[G];
  int pos[G];
};

struct Q4_0 {
  static constexpr int kQK = 32, kBytes = 18, kParts = 2, kGroups = 4, kAlign = 2;
  static constexpr bool kMin = false;
  // Part p: quant bytes 8p .. 8p+7, i.e. weights 8p .. 8p+7 (low nibbles)
  // and 16 + 8p .. 16 + 8p + 7 (high nibbles); w = (q - 8) d.
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<4>& o) {
    const float d = f16s(ld16<al(A, 2)>(blk));
    const uint32_t v0 = ld32<al(A, 2)>(blk + 2 + 8 * p), v1 = ld32<al(A, 2)>(blk + 6 + 8 * p);
    // High nibbles left in place: the bytes are 16 q, so runs 2, 3 hold
    // 16 (q - 8) and their scale d / 16 (both exact: scaling by a power of
    // two commutes with rounding), saving the shifts.
    bytes_to_f32<8>(v0 & 0x0F0F0F0Fu, o.q + 0);
    bytes_to_f32<8>(v1 & 0x0F0F0F0Fu, o.q + 4);
    bytes_to_f32<128>(v0 & 0xF0F0F0F0u, o.q + 8);
    bytes_to_f32<128>(v1 & 0xF0F0F0F0u, o.q + 12);
    o.pos[0] = 8 * p, o.pos[1] = 8 * p + 4, o.pos[2] = 16 + 8 * p, o.pos[3] = 20 + 8 * p;
    o.a[0] = o.a[1] = d, o.a[2] = o.a[3] = d * 0.0625f;
#pragma unroll
    for (int g = 0; g < 4; ++g) o.b[g] = 0.0f;
  }
};

struct Q4_1 {
  static constexpr int kQK = 32, kBytes = 20, kParts = 2, kGroups = 4, kAlign = 4;
  static constexpr bool kMin = true;
  // As Q4_0 with w = q d + m.
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<4>& o) {
    const float d = f16s(ld16<al(A, 2)>(blk));
    const float m = f16s(ld16<al(A, 2)>(blk + 2));
    const uint32_t v0 = ld32<al(A, 4)>(blk + 4 + 8 * p), v1 = ld32<al(A, 4)>(blk + 8 + 8 * p);
    bytes_to_f32<0>(v0 & 0x0F0F0F0Fu, o.q + 0);
    bytes_to_f32<0>(v1 & 0x0F0F0F0Fu, o.q + 4);
    bytes_to_f32<0>((v0 >> 4) & 0x0F0F0F0Fu, o.q + 8);
    bytes_to_f32<0>((v1 >> 4) & 0x0F0F0F0Fu, o.q + 12);
    o.pos[0] = 8 * p, o.pos[1] = 8 * p + 4, o.pos[2] = 16 + 8 * p, o.pos[3] = 20 + 8 * p;
#pragma unroll
    for (int g = 0; g < 4; ++g) o.a[g] = d, o.b[g] = m;
  }
};

// The fifth bits of weights j .. j + 3 (bits j .. j + 3 of the qh word h) at
// bit 4 of the four bytes of a word. n (1 + 2^7 + 2^14 + 2^21) holds four
// copies of the nibble n at bits 0, 7, 14 and 21, which do not overlap (no
// carries), so bit 8i of the product is bit i of n.
__device__ __forceinline__ uint32_t fifth_bits4(uint32_t h, int j) {
  return ((((h >> j) & 0xFu) * 0x00204081u) & 0x01010101u) << 4;
}

// Q5_0 and Q5_1: part p is quant bytes 8p .. 8p+7, weights 8p .. 8p+7 (low
// nibbles) and 16 + 8p .. 16 + 8p + 7 (high nibbles), as Q4_0; weight j's
// fifth bit is bit j of the qh word. Q5_0: w = (q - 16) d; Q5_1: w = q d + m.
template <bool kOne>
struct Q5 {
  static constexpr int kQK = 32, kBytes = kOne ? 24 : 22, kParts = 2, kGroups = 4, kAlign = kOne ? 4 : 2;
  static constexpr bool kMin = kOne;
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<4>& o) {
    constexpr int AW = al(A, kAlign);  // qh and qs: at 2 and 6 (Q5_0), 4 and 8 (Q5_1)
    constexpr int kQh = kOne ? 4 : 2, kQs = kQh + 4;
    const float d = f16s(ld16<al(A, 2)>(blk));
    const float m = kOne ? f16s(ld16<al(A, 2)>(blk + 2)) : 0.0f;
    const uint32_t h = ld32<AW>(blk + kQh);
    const uint32_t v0 = ld32<AW>(blk + kQs + 8 * p), v1 = ld32<AW>(blk + kQs + 8 * p + 4);
    // The high nibbles are shifted down (unlike Q4_0): bit 4 takes the fifth
    // bit, which would not fit above a nibble left in place.
    constexpr int kBias = kOne ? 0 : 16;
    bytes_to_f32<kBias>((v0 & 0x0F0F0F0Fu) | fifth_bits4(h, 8 * p), o.q + 0);
    bytes_to_f32<kBias>((v1 & 0x0F0F0F0Fu) | fifth_bits4(h, 8 * p + 4), o.q + 4);
    bytes_to_f32<kBias>(((v0 >> 4) & 0x0F0F0F0Fu) | fifth_bits4(h, 16 + 8 * p), o.q + 8);
    bytes_to_f32<kBias>(((v1 >> 4) & 0x0F0F0F0Fu) | fifth_bits4(h, 20 + 8 * p), o.q + 12);
    o.pos[0] = 8 * p, o.pos[1] = 8 * p + 4, o.pos[2] = 16 + 8 * p, o.pos[3] = 20 + 8 * p;
#pragma unroll
    for (int g = 0; g < 4; ++g) o.a[g] = d, o.b[g] = m;
  }
};
using Q5_0 = Q5<false>;
using Q5_1 = Q5<true>;

struct Q8_0 {
  static constexpr int kQK = 32, kBytes = 34, kParts = 2, kGroups = 4, kAlign = 2;
  static constexpr bool kMin = false;
  // Part p: weights 16p .. 16p+15; w = q d with q int8 (biased by 128 to
  // make it a byte).
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<4>& o) {
    const float d = f16s(ld16<al(A, 2)>(blk));
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      bytes_to_f32<128>(ld32<al(A, 2)>(blk + 2 + 16 * p + 4 * g) ^ 0x80808080u, o.q + 4 * g);
      o.pos[g] = 16 * p + 4 * g;
      o.a[g] = d, o.b[g] = 0.0f;
    }
  }
};

struct Q8_K {
  static constexpr int kQK = 256, kBytes = 292, kParts = 16, kGroups = 4, kAlign = 4;
  static constexpr bool kMin = false;
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<4>& o) {
    const float d = __uint_as_float(ld32<al(A, 4)>(blk));
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      bytes_to_f32<128>(ld32<al(A, 4)>(blk + 4 + 16 * p + 4 * g) ^ 0x80808080u, o.q + 4 * g);
      o.pos[g] = 16 * p + 4 * g;
      o.a[g] = d, o.b[g] = 0.0f;
    }
  }
};

// Q4_K and Q5_K: part p (< 16) is chunk c = p / 4 of 64 weights, bytes
// l0 .. l0+7 (l0 = 8 (p % 4)) of its 32 quant bytes: weights 64c + l0 .. + 7
// (low nibbles, sub-block 2c) and 64c + 32 + l0 .. + 7 (high, 2c + 1);
// w = (d sc) q - (dmin m). Q5_K's fifth bit of weight 64c + l (+ 32) is bit
// 2c (2c + 1) of qh[l].
template <bool kFive>
struct QK45 {
  static constexpr int kQK = 256, kBytes = kFive ? 176 : 144, kParts = 16, kGroups = 4, kAlign = 4;
  static constexpr bool kMin = true;
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<4>& o) {
    constexpr int A4 = al(A, 4);
    const int c = p >> 2, l0 = 8 * (p & 3);
    // A 16-byte aligned block: d, dmin and the 12 scale bytes in one load,
    // the part's 8 quant bytes in another.
    constexpr bool kWide = (A & kAlignBits) >= 16;
    uint32_t dm, s0, s1, s2;
    if constexpr (kWide) {
      const uint4 h = ld128<A>(blk);
      dm = h.x, s0 = h.y, s1 = h.z, s2 = h.w;
    } else {
      dm = ld16<al(A, 2)>(blk) | (ld16<al(A, 2)>(blk + 2) << 16);
      s0 = ld32<A4>(blk + 4), s1 = ld32<A4>(blk + 8), s2 = ld32<A4>(blk + 12);
    }
    const float d = f16s(dm & 0xFFFFu), dmin = f16s(dm >> 16);
    // The 6-bit scales and mins of sub-blocks 2c, 2c + 1 (get_scale_min_k4),
    // four sub-blocks a word, without branches: sub-blocks 0-3 are the low 6
    // bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take their
    // low 4 bits from the nibbles of bytes 8-11 and their top 2 from the top
    // bits of bytes 0-3 (scales) and 4-7 (mins).
    const bool up = c >= 2;
    const uint32_t scw = up ? (s2 & 0x0F0F0F0Fu) | ((s0 >> 2) & 0x30303030u) : s0 & 0x3F3F3F3Fu;
    const uint32_t mw = up ? ((s2 >> 4) & 0x0F0F0F0Fu) | ((s1 >> 2) & 0x30303030u) : s1 & 0x3F3F3F3Fu;
    const int k0 = (2 * c) & 3;
    const float sc0 = byte_f32(scw, k0), sc1 = byte_f32(scw, k0 + 1);
    const float m0 = byte_f32(mw, k0), m1 = byte_f32(mw, k0 + 1);
    const int qs = kFive ? 48 : 16;
    uint32_t v0, v1;
    if constexpr (kWide) {  // qs + 32 c + l0 is a multiple of 8
      const uint2 v = ld64<A>(blk + qs + 32 * c + l0);
      v0 = v.x, v1 = v.y;
    } else {
      v0 = ld32<A4>(blk + qs + 32 * c + l0), v1 = ld32<A4>(blk + qs + 32 * c + l0 + 4);
    }
    // Q4_K: high nibbles left in place (16 q; scale / 16, exact), as Q4_0.
    constexpr float kHi = kFive ? 1.0f : 0.0625f;
    uint32_t lo0 = v0 & 0x0F0F0F0Fu, lo1 = v1 & 0x0F0F0F0Fu;
    uint32_t hi0 = kFive ? (v0 >> 4) & 0x0F0F0F0Fu : v0 & 0xF0F0F0F0u;
    uint32_t hi1 = kFive ? (v1 >> 4) & 0x0F0F0F0Fu : v1 & 0xF0F0F0F0u;
    if constexpr (kFive) {
      const uint32_t h0 = ld32<A4>(blk + 16 + l0), h1 = ld32<A4>(blk + 20 + l0);
      lo0 |= ((h0 >> (2 * c)) & 0x01010101u) << 4;
      lo1 |= ((h1 >> (2 * c)) & 0x01010101u) << 4;
      hi0 |= ((h0 >> (2 * c + 1)) & 0x01010101u) << 4;
      hi1 |= ((h1 >> (2 * c + 1)) & 0x01010101u) << 4;
    }
    bytes_to_f32<0>(lo0, o.q + 0);
    bytes_to_f32<0>(lo1, o.q + 4);
    bytes_to_f32<0>(hi0, o.q + 8);
    bytes_to_f32<0>(hi1, o.q + 12);
    o.pos[0] = 64 * c + l0, o.pos[1] = 64 * c + l0 + 4, o.pos[2] = 64 * c + 32 + l0, o.pos[3] = 64 * c + 36 + l0;
    const float a0 = __fmul_rn(d, sc0), b0 = -__fmul_rn(dmin, m0);
    const float a1 = __fmul_rn(d, sc1) * kHi, b1 = -__fmul_rn(dmin, m1);
    o.a[0] = o.a[1] = a0, o.b[0] = o.b[1] = b0;
    o.a[2] = o.a[3] = a1, o.b[2] = o.b[3] = b1;
  }
};
using Q4_K = QK45<false>;
using Q5_K = QK45<true>;

struct Q6_K {
  static constexpr int kQK = 256, kBytes = 210, kParts = 8, kGroups = 8, kAlign = 2;
  static constexpr bool kMin = false;
  // Part p: half h = p / 4 (128 weights), l = l0 .. l0+7 with l0 = 8 (p % 4):
  // quarter t (< 4) holds weights 128h + 32t + l, whose low 4 bits are
  // nibble t / 2 of ql[64h + 32 (t % 2) + l], top 2 bits are bits 2t, 2t+1 of
  // qh[32h + l], scale scales[8h + l / 16 + 2t]; w = (d sc) (q - 32).
  template <int A>
  __device__ __forceinline__ static void decode(const uint8_t* blk, int p, Part<8>& o) {
    constexpr int A2 = al(A, 2);
    const int h = p >> 2, l0 = 8 * (p & 3), is = l0 / 16;
    const float d = f16s(ld16<A2>(blk + 208));
    float sc[4];
#pragma unroll
    for (int t = 0; t < 4; ++t) sc[t] = __fmul_rn(d, float(int8_t(ld8a<A>(blk + 192 + 8 * h + is + 2 * t))));
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint32_t a = ld32<A2>(blk + 64 * h + l0 + 4 * i);
      const uint32_t b = ld32<A2>(blk + 64 * h + 32 + l0 + 4 * i);
      const uint32_t c = ld32<A2>(blk + 128 + 32 * h + l0 + 4 * i);
      bytes_to_f32<32>((a & 0x0F0F0F0Fu) | ((c << 4) & 0x30303030u), o.q + 4 * (0 + i));
      bytes_to_f32<32>((b & 0x0F0F0F0Fu) | ((c << 2) & 0x30303030u), o.q + 4 * (2 + i));
      bytes_to_f32<32>(((a >> 4) & 0x0F0F0F0Fu) | (c & 0x30303030u), o.q + 4 * (4 + i));
      bytes_to_f32<32>(((b >> 4) & 0x0F0F0F0Fu) | ((c >> 2) & 0x30303030u), o.q + 4 * (6 + i));
    }
#pragma unroll
    for (int t = 0; t < 4; ++t)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        o.pos[2 * t + i] = 128 * h + 32 * t + l0 + 4 * i;
        o.a[2 * t + i] = sc[t];
        o.b[2 * t + i] = 0.0f;
      }
  }
};

// ---- element decoder, bit-identical to the CPU reference --------------------------------------

__device__ __forceinline__ float ld_f16(const uint8_t* p) { return f16_to_f32(uint16_t(ld16<1>(p))); }

// Weight j of the block at `blk` (j < block size; plain formats: j = 0).
__device__ inline float weight_at(int32_t fmt, const uint8_t* blk, int j) {
  switch (fmt) {
    case quant::Q4_0: {
      const uint32_t byte = ld8(blk + 2 + (j & 15));
      const int q = int(j < 16 ? byte & 0xF : byte >> 4) - 8;
      return __fmul_rn(float(q), ld_f16(blk));
    }
    case quant::Q4_1: {
      const uint32_t byte = ld8(blk + 4 + (j & 15));
      const int q = int(j < 16 ? byte & 0xF : byte >> 4);
      return __fadd_rn(__fmul_rn(float(q), ld_f16(blk)), ld_f16(blk + 2));
    }
    case quant::Q5_0:
    case quant::Q5_1: {
      // qh at 2 (Q5_0) or 4 (Q5_1), the nibbles after it; bit j of qh is
      // weight j's fifth bit.
      const int qh = fmt == quant::Q5_0 ? 2 : 4;
      const uint32_t byte = ld8(blk + qh + 4 + (j & 15));
      const uint32_t fifth = (ld8(blk + qh + j / 8) >> (j % 8)) & 1u;
      const int q = int((j < 16 ? byte & 0xF : byte >> 4) | (fifth << 4));
      if (fmt == quant::Q5_0) return __fmul_rn(float(q - 16), ld_f16(blk));
      return __fadd_rn(__fmul_rn(float(q), ld_f16(blk)), ld_f16(blk + 2));
    }
    case quant::Q8_0: return __fmul_rn(float(int8_t(ld8(blk + 2 + j))), ld_f16(blk));
    case quant::Q4_K:
    case quant::Q5_K: {
      const bool five = fmt == quant::Q5_K;
      const int c = j / 64, l = j % 64, is = 2 * c + (l >= 32);
      const uint32_t byte = ld8(blk + (five ? 48 : 16) + 32 * c + (l & 31));
      int q = int(l < 32 ? byte & 0xF : byte >> 4);
      if (five && (ld8(blk + 16 + (l & 31)) >> is) & 1) q += 16;
      const uint32_t w0 = ld32<1>(blk + 4), w1 = ld32<1>(blk + 8), w2 = ld32<1>(blk + 12);
      float sc, m;
      scale_min_k4(is, w0, w1, w2, &sc, &m);
      const float d1 = __fmul_rn(ld_f16(blk), sc), m1 = __fmul_rn(ld_f16(blk + 2), m);
      return __fsub_rn(__fmul_rn(d1, float(q)), m1);
    }
    case quant::Q6_K: {
      const int h = j / 128, r = j % 128, t = r / 32, l = r % 32;
      const uint32_t lo = ld8(blk + 64 * h + 32 * (t & 1) + l);
      const uint32_t hi = ld8(blk + 128 + 32 * h + l);
      const int q = int(((t < 2 ? lo & 0xF : lo >> 4) | (((hi >> (2 * t)) & 3) << 4))) - 32;
      const float sc = float(int8_t(ld8(blk + 192 + 8 * h + l / 16 + 2 * t)));
      return __fmul_rn(__fmul_rn(ld_f16(blk + 208), sc), float(q));
    }
    case quant::Q8_K: return __fmul_rn(__uint_as_float(ld32<1>(blk)), float(int8_t(ld8(blk + 4 + j))));
    case quant::F16: return ld_f16(blk);
    case quant::BF16: return bf16_to_f32(uint16_t(ld16<1>(blk)));
    default: return __uint_as_float(ld32<1>(blk));  // F32
  }
}

}  // namespace qdev
}  // namespace cuda
}  // namespace tc
