// Packing loops shared by the kernel sets of gemm_packed.h. They are inlined
// into each kernel's packer, so they compile with that kernel's ISA.
//
// The source X is op(A) or op(B) seen as rows r and depth k (see Operands):
// X(r, k) = p[r * rs + k * cs], and one of rs, cs is 1. Both layouts zero-fill
// rows past `rows` and depth past K, so padding adds nothing to the sums.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace tc {
namespace cpu {

// Interleaved: groups of G consecutive k for each of R rows, group after group:
//   out[(kg * R + r) * G + g] = f(X(r, kg * G + g)),  kg < depth / G.
// The layout of VNNI-style operands: one 32-bit load (or a 64-byte vector)
// holds G depth steps of one row (or of 64 / (G * size) rows).
template <int R, int G, class In, class Out, class F>
__attribute__((always_inline)) inline void pack_interleaved(const In* p, int64_t rs, int64_t cs, int64_t rows,
                                                            int64_t K, int64_t depth, Out* out, F f) {
  const int64_t groups = depth / G, full = K / G;
  if (rs == 1 && rows == R) {
    // Rows contiguous for a fixed k: walk k, read R neighbours.
    for (int64_t kg = 0; kg < full; ++kg) {
      const In* src = p + kg * G * cs;
      Out* o = out + kg * R * G;
      for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) o[r * G + g] = f(src[g * cs + r]);
    }
  } else if (cs == 1) {
    // Depth contiguous for a fixed row: copy G at a time.
    for (int64_t r = 0; r < rows; ++r) {
      const In* src = p + r * rs;
      for (int64_t kg = 0; kg < full; ++kg)
        for (int g = 0; g < G; ++g) out[(kg * R + r) * G + g] = f(src[kg * G + g]);
    }
    for (int64_t kg = 0; kg < full; ++kg)
      for (int64_t r = rows; r < R; ++r)
        for (int g = 0; g < G; ++g) out[(kg * R + r) * G + g] = Out(0);
  } else {
    for (int64_t kg = 0; kg < full; ++kg)
      for (int64_t r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g)
          out[(kg * R + r) * G + g] = r < rows ? f(p[r * rs + (kg * G + g) * cs]) : Out(0);
  }
  // The group holding the end of K, and the padding groups after it.
  for (int64_t kg = full; kg < groups; ++kg)
    for (int64_t r = 0; r < R; ++r)
      for (int g = 0; g < G; ++g) {
        const int64_t k = kg * G + g;
        out[(kg * R + r) * G + g] = r < rows && k < K ? f(p[r * rs + k * cs]) : Out(0);
      }
}

// The common case of B (not transposed, a whole panel): 32 contiguous
// columns at each depth step, interleaved with AVX2 unpacks. `groups` full
// groups of G depth steps, source rows ld elements apart.
// i8, G = 4: out[(kg * 32 + j) * 4 + g] = p[(4 kg + g) * ld + j].
__attribute__((target("avx2"), always_inline)) inline void interleave32_i8x4(const int8_t* p, int64_t ld,
                                                                               int64_t groups, int8_t* out) {
  for (int64_t kg = 0; kg < groups; ++kg, p += 4 * ld, out += 128) {
    const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + ld));
    const __m256i r2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * ld));
    const __m256i r3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 3 * ld));
    // Per 128-bit lane: bytes of rows 0/1 and 2/3 paired, then the pairs paired.
    const __m256i a_lo = _mm256_unpacklo_epi8(r0, r1), a_hi = _mm256_unpackhi_epi8(r0, r1);
    const __m256i b_lo = _mm256_unpacklo_epi8(r2, r3), b_hi = _mm256_unpackhi_epi8(r2, r3);
    const __m256i q0 = _mm256_unpacklo_epi16(a_lo, b_lo);  // columns 0-3 | 16-19
    const __m256i q1 = _mm256_unpackhi_epi16(a_lo, b_lo);  // 4-7 | 20-23
    const __m256i q2 = _mm256_unpacklo_epi16(a_hi, b_hi);  // 8-11 | 24-27
    const __m256i q3 = _mm256_unpackhi_epi16(a_hi, b_hi);  // 12-15 | 28-31
    __m256i* o = reinterpret_cast<__m256i*>(out);
    _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(q0, q1, 0x20));
    _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(q2, q3, 0x20));
    _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(q0, q1, 0x31));
    _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(q2, q3, 0x31));
  }
}

// 16-bit, G = 2: out[(kg * 32 + j) * 2 + g] = p[(2 kg + g) * ld + j].
__attribute__((target("avx2"), always_inline)) inline void interleave32_u16x2(const uint16_t* p, int64_t ld,
                                                                                int64_t groups, uint16_t* out) {
  for (int64_t kg = 0; kg < groups; ++kg, p += 2 * ld, out += 64) {
    __m256i* o = reinterpret_cast<__m256i*>(out);
    for (int h = 0; h < 2; ++h) {  // columns 16 h .. 16 h + 15
      const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 * h));
      const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + ld + 16 * h));
      const __m256i lo = _mm256_unpacklo_epi16(r0, r1);  // columns 0-3 | 8-11
      const __m256i hi = _mm256_unpackhi_epi16(r0, r1);  // 4-7 | 12-15
      _mm256_storeu_si256(o + 2 * h, _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(o + 2 * h + 1, _mm256_permute2x128_si256(lo, hi, 0x31));
    }
  }
}

// Row-major: out[r * pitch + k] = f(X(r, k)) for r < R, k < depth (the
// pitch - depth elements after each row are left alone). The layout of
// AMX's A operand: a tile row is 64 bytes of one row's depth.
template <int R, class In, class Out, class F>
__attribute__((always_inline)) inline void pack_rows(const In* p, int64_t rs, int64_t cs, int64_t rows, int64_t K,
                                                     int64_t depth, int64_t pitch, Out* out, F f) {
  if (cs == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      const In* src = p + r * rs;
      Out* o = out + r * pitch;
      for (int64_t k = 0; k < K; ++k) o[k] = f(src[k]);
    }
  } else {
    // Rows contiguous for a fixed k: a transpose, done 16 depth steps at a
    // time so each output row is written in runs.
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      const int64_t kn = K - k0 < 16 ? K - k0 : 16;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kn; ++k) out[r * pitch + k0 + k] = f(p[r * rs + (k0 + k) * cs]);
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t from = r < rows ? K : 0;
    std::memset(static_cast<void*>(out + r * pitch + from), 0, size_t(depth - from) * sizeof(Out));
  }
}

}  // namespace cpu
}  // namespace tc
