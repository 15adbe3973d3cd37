// Packing loops shared by the kernel sets of gemm_packed.h. They are inlined
// into each kernel's packer, so they compile with that kernel's ISA.
//
// The source X is op(A) or op(B) seen as rows r and depth k (see Operands):
// X(r, k) = p[r * rs + k * cs], and one of rs, cs is 1. Both layouts zero-fill
// rows past `rows` and depth past K, so padding adds nothing to the sums.
#pragma once

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

// Row-major: out[r * depth + k] = f(X(r, k)) for r < R, k < depth. The
// layout of AMX's A operand (a tile row is 64 bytes of one row's depth).
template <int R, class In, class Out, class F>
__attribute__((always_inline)) inline void pack_rows(const In* p, int64_t rs, int64_t cs, int64_t rows, int64_t K,
                                                     int64_t depth, Out* out, F f) {
  if (cs == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      const In* src = p + r * rs;
      Out* o = out + r * depth;
      for (int64_t k = 0; k < K; ++k) o[k] = f(src[k]);
      std::memset(static_cast<void*>(o + K), 0, size_t(depth - K) * sizeof(Out));
    }
  } else {
    // Rows contiguous for a fixed k: a transpose, done 16 depth steps at a
    // time so each output row is written in runs.
    for (int64_t k0 = 0; k0 < K; k0 += 16) {
      const int64_t kn = K - k0 < 16 ? K - k0 : 16;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < kn; ++k) out[r * depth + k0 + k] = f(p[r * rs + (k0 + k) * cs]);
    }
    for (int64_t r = 0; r < rows; ++r)
      std::memset(static_cast<void*>(out + r * depth + K), 0, size_t(depth - K) * sizeof(Out));
  }
  std::memset(static_cast<void*>(out + rows * depth), 0, size_t((R - rows) * depth) * sizeof(Out));
}

}  // namespace cpu
}  // namespace tc
