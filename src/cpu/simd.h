// A small fixed-width vector layer for the memory-bound CPU kernels
// (training kernels: norms, RoPE, activations, AdamW, fused norm + GEMV).
//
// Lane types with one interface, so a kernel is written once:
//   VecAvx512Bf16  VecAvx512 storing bf16 with AVX512-BF16's conversion
//   VecAvx512  16 x f32 in a zmm register (AVX-512 F/BW/VL)
//   VecAvx2     8 x f32 in a ymm register (AVX2 + FMA + F16C)
//   VecScalar   1 lane, plain C++ (any x86-64 or other processor); it
//               computes in double, which scalar code gets for free
// Elements are loaded from and stored to f32, f16 (`simd::f16`) or bf16
// (`simd::bf16`) memory and converted in registers (F16C / integer shifts),
// rounding to nearest even exactly as core/half.h does; int8 (Q8_0 codes)
// is loaded only, whole vectors, exactly.
//
// A kernel file is compiled once per instruction set: it includes its kernel
// body under `#pragma GCC target(...)` (clang: `#pragma clang attribute` with
// the same target, since clang has no GCC target pragma) inside a namespace
// whose `V` names the lane type (see TC_SIMD_* in the kernel files). Nothing here is ever run on
// a processor that lacks it: callers pick with simd::active_isa() at run time.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "cpu/cpu_features.h"

namespace tc {
namespace cpu {
namespace simd {

// Storage types of the 16-bit formats, so kernels can be templates over the
// element type (float, f16, bf16).
struct f16 {
  uint16_t bits;
};
struct bf16 {
  uint16_t bits;
};

inline float to_f32(float v) { return v; }
inline float to_f32(f16 v) { return f16_to_f32(v.bits); }
inline float to_f32(bf16 v) { return bf16_to_f32(v.bits); }
inline float to_f32(int8_t v) { return float(v); }  // Q8_0 codes (load only)
inline void from_f32(float v, float* p) { *p = v; }
inline void from_f32(float v, f16* p) { p->bits = f32_to_f16(v); }
inline void from_f32(float v, bf16* p) { p->bits = f32_to_bf16(v); }

// Calls fn(T{}) with T the storage type of a float dtype (float, f16, bf16);
// other dtypes never reach a kernel (capi rejects them).
template <class F>
inline void with_float_type(int32_t dtype, F&& fn) {
  switch (dtype) {
    case 0: fn(f16{}); break;   // TC_DTYPE_F16
    case 1: fn(bf16{}); break;  // TC_DTYPE_BF16
    default: fn(float{}); break;
  }
}

// Asks for the cache lines of [p, p + bytes) ahead of their use: a hint that
// never faults. Row kernels fetch the next row while computing on this one.
inline void prefetch(const void* p, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b);
}

enum class Isa { Portable = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };

// The widest instruction set the processor has, as capped by TC_CPU_ISA
// (features(): avx512 and avx512_vnni give AVX-512 without its BF16
// conversions).
inline Isa active_isa() {
  const Features& f = features();
  Isa best = Isa::Portable;
  if (f.avx2 && f.fma && f.f16c) best = Isa::Avx2;
  if (best == Isa::Avx2 && f.avx512f && f.avx512bw && f.avx512vl) best = Isa::Avx512;
  if (best == Isa::Avx512 && f.avx512_bf16) best = Isa::Avx512Bf16;
  return best;
}

// One of four same-typed values by the active instruction set (used with
// TC_SIMD_PICK to choose a kernel's copy).
template <class F>
inline F pick(F avx512bf16, F avx512, F avx2, F portable) {
  switch (active_isa()) {
    case Isa::Avx512Bf16: return note_kernel("simd/avx512_bf16"), avx512bf16;
    case Isa::Avx512: return note_kernel("simd/avx512"), avx512;
    case Isa::Avx2: return note_kernel("simd/avx2"), avx2;
    default: return note_kernel("simd/portable"), portable;
  }
}

// exp(x) for the vector paths: Cephes' expf, about 1 ulp. Below the range of
// normal float results it gives 0 (exp(-inf) = 0 exactly, which softmax
// relies on), above it +inf; NaN stays NaN.
namespace expc {
constexpr float kHi = 88.3762626647949f, kLo = -87.3365447504f;
// n = round(x log2e) as (x log2e + 1.5 * 2^23) - 1.5 * 2^23: the fused add
// rounds to nearest even at integer precision (|x log2e| < 2^22 here).
constexpr float kRound = 12582912.0f;
constexpr float kLog2e = 1.44269504088896341f, kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f;
constexpr float kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace expc

// ---------------------------------------------------------------- portable
struct VecScalar {
  static constexpr int W = 1;
  double v;  // scalar double costs what scalar float does, and keeps long sums accurate

  static VecScalar zero() { return {0.0}; }
  static VecScalar set1(float x) { return {double(x)}; }
  template <class T>
  static VecScalar load(const T* p) { return {double(to_f32(*p))}; }
  template <class T>
  static VecScalar load(const T* p, int n) { return {n > 0 ? double(to_f32(*p)) : 0.0}; }
  template <class T>
  static void store(T* p, VecScalar a) { from_f32(float(a.v), p); }
  template <class T>
  static void store(T* p, VecScalar a, int n) {
    if (n > 0) from_f32(float(a.v), p);
  }
  template <class T>
  static VecScalar ld(const T* p, int) { return load(p); }
  template <class T>
  static void st(T* p, VecScalar a, int) { store(p, a); }
  static VecScalar tail(VecScalar a, int, float) { return a; }

  // a * b + c (two roundings: std::fma is a slow library call without FMA
  // hardware; in double the second rounding is harmless).
  static VecScalar fma(VecScalar a, VecScalar b, VecScalar c) { return {a.v * b.v + c.v}; }
  // max / min return b when either is NaN, as the x86 instructions do.
  static VecScalar max(VecScalar a, VecScalar b) { return {a.v > b.v ? a.v : b.v}; }
  static VecScalar min(VecScalar a, VecScalar b) { return {a.v < b.v ? a.v : b.v}; }
  static VecScalar sqrt(VecScalar a) { return {std::sqrt(a.v)}; }
  static VecScalar exp(VecScalar a) { return {std::exp(a.v)}; }
  static VecScalar rcp(VecScalar a) { return {1.0 / a.v}; }
  static float sum(VecScalar a) { return float(a.v); }
  static float hmax(VecScalar a) { return float(a.v); }
};

inline VecScalar operator+(VecScalar a, VecScalar b) { return {a.v + b.v}; }
inline VecScalar operator-(VecScalar a, VecScalar b) { return {a.v - b.v}; }
inline VecScalar operator*(VecScalar a, VecScalar b) { return {a.v * b.v}; }
inline VecScalar operator/(VecScalar a, VecScalar b) { return {a.v / b.v}; }

// ---------------------------------------------------------------- AVX2
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

struct VecAvx2 {
  static constexpr int W = 8;
  __m256 v;

  static VecAvx2 zero() { return {_mm256_setzero_ps()}; }
  static VecAvx2 set1(float x) { return {_mm256_set1_ps(x)}; }

  static VecAvx2 load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static VecAvx2 load(const f16* p) { return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))}; }
  static VecAvx2 load(const bf16* p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16))};
  }
  static VecAvx2 load(const int8_t* p) {
    return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))))};
  }
  static __m256i tail_mask(int n) {
    static const int32_t table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(table + 8 - n));
  }
  // First n lanes (0 <= n < W) from memory, the rest zero; never reads past p + n.
  static VecAvx2 load(const float* p, int n) { return {_mm256_maskload_ps(p, tail_mask(n))}; }
  template <class T>
  static VecAvx2 load(const T* p, int n) {
    T tmp[8] = {};
    std::memcpy(tmp, p, sizeof(T) * size_t(n));
    return load(tmp);
  }

  static void store(float* p, VecAvx2 a) { _mm256_storeu_ps(p, a.v); }
  static void store(f16* p, VecAvx2 a) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  static void store(bf16* p, VecAvx2 a) {
    const __m256i u = _mm256_castps_si256(a.v);
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(u, _mm256_set1_epi32(0x400000)), is_nan);
    r = _mm256_srli_epi32(r, 16);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
  }
  // First n lanes (0 <= n < W) to memory; never writes past p + n.
  static void store(float* p, VecAvx2 a, int n) { _mm256_maskstore_ps(p, tail_mask(n), a.v); }
  template <class T>
  static void store(T* p, VecAvx2 a, int n) {
    T tmp[8];
    store(tmp, a);
    std::memcpy(p, tmp, sizeof(T) * size_t(n));
  }

  // Full vector when n == W, else the first n lanes (the test folds away in
  // loops over whole vectors).
  template <class T>
  static VecAvx2 ld(const T* p, int n) { return n == W ? load(p) : load(p, n); }
  template <class T>
  static void st(T* p, VecAvx2 a, int n) {
    if (n == W) store(p, a);
    else store(p, a, n);
  }
  // Lanes n and above replaced by `fill` (a reduction's neutral element).
  static VecAvx2 tail(VecAvx2 a, int n, float fill) {
    return {_mm256_blendv_ps(_mm256_set1_ps(fill), a.v, _mm256_castsi256_ps(tail_mask(n)))};
  }

  static VecAvx2 fma(VecAvx2 a, VecAvx2 b, VecAvx2 c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
  static VecAvx2 max(VecAvx2 a, VecAvx2 b) { return {_mm256_max_ps(a.v, b.v)}; }
  static VecAvx2 min(VecAvx2 a, VecAvx2 b) { return {_mm256_min_ps(a.v, b.v)}; }
  static VecAvx2 sqrt(VecAvx2 a) { return {_mm256_sqrt_ps(a.v)}; }

  static float sum(VecAvx2 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(VecAvx2 a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }

  // Interleaved RoPE: {p[0], p[0], p[1], p[1], ...} from W/2 floats (the
  // first n pairs only, the rest zero, when n is given), the two lanes of
  // each pair swapped, and a*b -/+ c on even/odd lanes (+/- for fmsubadd).
  static VecAvx2 load_dup(const float* p) { return dup_pairs(_mm_loadu_ps(p)); }
  static VecAvx2 load_dup(const float* p, int n) {
    return dup_pairs(_mm_maskload_ps(p, _mm256_castsi256_si128(tail_mask(n))));
  }
  static VecAvx2 dup_pairs(__m128 h) {
    return {_mm256_permutevar8x32_ps(_mm256_castps128_ps256(h), _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))};
  }
  static VecAvx2 swap_pairs(VecAvx2 a) { return {_mm256_permute_ps(a.v, 0xB1)}; }
  static VecAvx2 fmaddsub(VecAvx2 a, VecAvx2 b, VecAvx2 c) { return {_mm256_fmaddsub_ps(a.v, b.v, c.v)}; }
  static VecAvx2 fmsubadd(VecAvx2 a, VecAvx2 b, VecAvx2 c) { return {_mm256_fmsubadd_ps(a.v, b.v, c.v)}; }

  // 1 / a to about 1 ulp for finite, nonzero a: 12-bit estimate, one Newton step.
  static VecAvx2 rcp(VecAvx2 a) {
    __m256 r = _mm256_rcp_ps(a.v);
    return {_mm256_fmadd_ps(_mm256_fnmadd_ps(a.v, r, _mm256_set1_ps(1.0f)), r, r)};
  }

  static VecAvx2 exp(VecAvx2 a) {
    using namespace expc;
    // max/min return their second operand when either is NaN: NaN survives.
    __m256 x = _mm256_min_ps(_mm256_set1_ps(kHi), _mm256_max_ps(_mm256_set1_ps(kLo), a.v));
    __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(kLog2e), _mm256_set1_ps(kRound)), _mm256_set1_ps(kRound));
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC1), x);
    x = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC2), x);
    __m256 p = _mm256_set1_ps(kP0);
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(kP5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 r = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    r = _mm256_blendv_ps(r, _mm256_setzero_ps(), _mm256_cmp_ps(a.v, _mm256_set1_ps(kLo), _CMP_LT_OQ));
    r = _mm256_blendv_ps(r, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                         _mm256_cmp_ps(a.v, _mm256_set1_ps(kHi), _CMP_GT_OQ));
    return {r};
  }
};

// Free functions, not hidden friends: GCC 12 drops the target pragma on
// friends defined in a class.
inline VecAvx2 operator+(VecAvx2 a, VecAvx2 b) { return {_mm256_add_ps(a.v, b.v)}; }
inline VecAvx2 operator-(VecAvx2 a, VecAvx2 b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline VecAvx2 operator*(VecAvx2 a, VecAvx2 b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline VecAvx2 operator/(VecAvx2 a, VecAvx2 b) { return {_mm256_div_ps(a.v, b.v)}; }

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// ---------------------------------------------------------------- AVX-512
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#endif

struct VecAvx512 {
  static constexpr int W = 16;
  __m512 v;

  static VecAvx512 zero() { return {_mm512_setzero_ps()}; }
  static VecAvx512 set1(float x) { return {_mm512_set1_ps(x)}; }

  static VecAvx512 load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static VecAvx512 load(const f16* p) {
    return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
  }
  static VecAvx512 load(const bf16* p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
  }
  static VecAvx512 load(const int8_t* p) {
    return {_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))))};
  }
  static __mmask16 tail_mask(int n) { return __mmask16((1u << n) - 1u); }
  // First n lanes (0 <= n < W) from memory, the rest zero; masked, so no
  // byte past p + n is touched.
  static VecAvx512 load(const float* p, int n) { return {_mm512_maskz_loadu_ps(tail_mask(n), p)}; }
  static VecAvx512 load(const f16* p, int n) { return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p))}; }
  static VecAvx512 load(const bf16* p, int n) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail_mask(n), p));
    return {_mm512_castsi512_ps(_mm512_slli_epi32(w, 16))};
  }

  static __m256i to_f16(__m512 v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static __m256i to_bf16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __mmask16 is_nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
    r = _mm512_mask_mov_epi32(r, is_nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
  }
  static void store(float* p, VecAvx512 a) { _mm512_storeu_ps(p, a.v); }
  static void store(f16* p, VecAvx512 a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_f16(a.v)); }
  static void store(bf16* p, VecAvx512 a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(a.v)); }
  static void store(float* p, VecAvx512 a, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), a.v); }
  static void store(f16* p, VecAvx512 a, int n) { _mm256_mask_storeu_epi16(p, tail_mask(n), to_f16(a.v)); }
  static void store(bf16* p, VecAvx512 a, int n) { _mm256_mask_storeu_epi16(p, tail_mask(n), to_bf16(a.v)); }

  template <class T>
  static VecAvx512 ld(const T* p, int n) { return n == W ? load(p) : load(p, n); }
  template <class T>
  static void st(T* p, VecAvx512 a, int n) {
    if (n == W) store(p, a);
    else store(p, a, n);
  }
  static VecAvx512 tail(VecAvx512 a, int n, float fill) {
    return {_mm512_mask_mov_ps(_mm512_set1_ps(fill), tail_mask(n), a.v)};
  }

  static VecAvx512 fma(VecAvx512 a, VecAvx512 b, VecAvx512 c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
  static VecAvx512 max(VecAvx512 a, VecAvx512 b) { return {_mm512_max_ps(a.v, b.v)}; }
  static VecAvx512 min(VecAvx512 a, VecAvx512 b) { return {_mm512_min_ps(a.v, b.v)}; }
  static VecAvx512 sqrt(VecAvx512 a) { return {_mm512_sqrt_ps(a.v)}; }
  static float sum(VecAvx512 a) { return _mm512_reduce_add_ps(a.v); }
  static float hmax(VecAvx512 a) { return _mm512_reduce_max_ps(a.v); }

  static VecAvx512 load_dup(const float* p) { return dup_pairs(_mm256_loadu_ps(p)); }
  static VecAvx512 load_dup(const float* p, int n) { return dup_pairs(_mm256_maskz_loadu_ps(__mmask8((1u << n) - 1u), p)); }
  static VecAvx512 dup_pairs(__m256 h) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    return {_mm512_permutexvar_ps(idx, _mm512_castps256_ps512(h))};
  }
  static VecAvx512 swap_pairs(VecAvx512 a) { return {_mm512_permute_ps(a.v, 0xB1)}; }
  static VecAvx512 fmaddsub(VecAvx512 a, VecAvx512 b, VecAvx512 c) { return {_mm512_fmaddsub_ps(a.v, b.v, c.v)}; }
  static VecAvx512 fmsubadd(VecAvx512 a, VecAvx512 b, VecAvx512 c) { return {_mm512_fmsubadd_ps(a.v, b.v, c.v)}; }

  // Same polynomial; the scaling by 2^n is VSCALEF, which itself gives 0
  // below the float range and +inf above it, so only NaN-safe clamping to
  // [-104, 89] (beyond which the result is 0 or inf anyway) is needed.
  static VecAvx512 exp(VecAvx512 a) {
    using namespace expc;
    __m512 x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), a.v));
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(kLog2e), _mm512_set1_ps(kRound)), _mm512_set1_ps(kRound));
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(kC1), x);
    x = _mm512_fnmadd_ps(n, _mm512_set1_ps(kC2), x);
    __m512 p = _mm512_set1_ps(kP0);
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(kP5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
    return {_mm512_scalef_ps(p, n)};
  }
  // 1 / a to about 1 ulp for finite, nonzero a: 14-bit estimate, one Newton step.
  static VecAvx512 rcp(VecAvx512 a) {
    __m512 r = _mm512_rcp14_ps(a.v);
    return {_mm512_fmadd_ps(_mm512_fnmadd_ps(a.v, r, _mm512_set1_ps(1.0f)), r, r)};
  }
};

// Free functions, not hidden friends: GCC 12 drops the target pragma on
// friends defined in a class.
inline VecAvx512 operator+(VecAvx512 a, VecAvx512 b) { return {_mm512_add_ps(a.v, b.v)}; }
inline VecAvx512 operator-(VecAvx512 a, VecAvx512 b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline VecAvx512 operator*(VecAvx512 a, VecAvx512 b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline VecAvx512 operator/(VecAvx512 a, VecAvx512 b) { return {_mm512_div_ps(a.v, b.v)}; }

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

// ---------------------------------------------------------------- AVX-512 + BF16
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")
#endif

// VecAvx512 whose bf16 stores are one VCVTNEPS2BF16 instead of the integer
// rounding sequence: round to nearest even and quiet NaNs as that sequence
// does, but the instruction flushes f32 denormals (below 2^-126) to zero.
// Everything else is VecAvx512's; results convert back and forth implicitly.
struct VecAvx512Bf16 : VecAvx512 {
  VecAvx512Bf16() = default;
  VecAvx512Bf16(VecAvx512 b) : VecAvx512(b) {}

  static __m256i to_bf16(__m512 v) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)); }
  using VecAvx512::store;
  static void store(bf16* p, VecAvx512 a) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), to_bf16(a.v)); }
  static void store(bf16* p, VecAvx512 a, int n) { _mm256_mask_storeu_epi16(p, tail_mask(n), to_bf16(a.v)); }
  template <class T>
  static void st(T* p, VecAvx512 a, int n) {  // as VecAvx512::st, with the stores above
    if (n == W) store(p, a);
    else store(p, a, n);
  }
};

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

}  // namespace simd
}  // namespace cpu
}  // namespace tc
