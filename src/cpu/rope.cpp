// Rotary position embedding (RoPE), in place, on the CPU.
//
// X is [batch, heads, seq, D] (D = head_dim, even); cos_t and sin_t are f32
// [seq, D/2]. Each row at position s holds D/2 pairs (a_k, b_k), rotated by
// the angle theta_{s,k} whose cosine and sine the tables hold:
//   forward:   a' = a cos - b sin,   b' = b cos + a sin
//   backward:  a' = a cos + b sin,   b' = b cos - a sin
// The backward pass multiplies the gradient by the transposed rotation
// matrix, which is the rotation by -theta: forward then backward is the
// identity. Pairs are
//   half rotation (GPT-NeoX, HF LLaMA):  a_k = x[k],  b_k = x[k + D/2]
//   interleaved (GGUF / Meta LLaMA):     a_k = x[2k], b_k = x[2k + 1]
// The interleaved form keeps pairs inside a vector: with C and S the table
// values each duplicated into both lanes of their pair and x~ the vector with
// each pair's lanes swapped,
//   forward  = fmaddsub(x, C, x~ * S)   (even lanes x C - x~ S, odd x C + x~ S)
//   backward = fmsubadd(x, C, x~ * S)
// One read and one write of X; the tables are read once per row (from cache
// after the first batch and head).
#ifndef TC_SIMD_PASS

#include <algorithm>

#include "core/backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#define TC_SIMD_SELF "cpu/rope.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {

tc_status rope(const RopeArgs& a) {
  const tc_rope_desc& d = a.d;
  const int64_t rows = d.batch * d.heads * d.seq;
  const int64_t grain = std::max<int64_t>(1, 32768 / d.head_dim);
  simd::with_float_type(d.dtype, [&](auto t) {
    using T = decltype(t);
    void (*kernel)(const RopeArgs&, int64_t, int64_t);
    if (d.interleaved) kernel = a.inverse ? TC_SIMD_PICK(rope_interleaved<T, true>)
                             : TC_SIMD_PICK(rope_interleaved<T, false>);
    else kernel = a.inverse ? TC_SIMD_PICK(rope_half<T, true>) : TC_SIMD_PICK(rope_half<T, false>);
    parallel_for(rows, grain, [&](int64_t r0, int64_t r1) { kernel(a, r0, r1); });
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernels, compiled once per instruction set (V).

template <class T, bool Inverse>
void rope_half(const RopeArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.d.head_dim, H = D / 2, S = a.d.seq;
  for (int64_t r = r0; r < r1; ++r) {
    T* x = static_cast<T*>(a.x) + r * D;
    const float* c = a.cos_t + (r % S) * H;
    const float* s = a.sin_t + (r % S) * H;
    sweep(H, [&](int64_t k, int n) {
      V x1 = V::ld(x + k, n), x2 = V::ld(x + H + k, n);
      V cv = V::ld(c + k, n), sv = V::ld(s + k, n);
      if (Inverse) {
        V::st(x + k, V::fma(x2, sv, x1 * cv), n);
        V::st(x + H + k, x2 * cv - x1 * sv, n);
      } else {
        V::st(x + k, x1 * cv - x2 * sv, n);
        V::st(x + H + k, V::fma(x1, sv, x2 * cv), n);
      }
    });
  }
}

// VV = V, made a template parameter so the vector branch is discarded for
// the one-lane type (which has no pair shuffles).
template <class T, bool Inverse, class VV = V>
void rope_interleaved(const RopeArgs& a, int64_t r0, int64_t r1) {
  const int64_t D = a.d.head_dim, H = D / 2, S = a.d.seq;
  for (int64_t r = r0; r < r1; ++r) {
    T* x = static_cast<T*>(a.x) + r * D;
    const float* c = a.cos_t + (r % S) * H;
    const float* s = a.sin_t + (r % S) * H;
    if constexpr (VV::W > 1) {
      // k is an element index (pair k / 2); n is even as D is.
      sweep(D, [&](int64_t k, int n) {
        VV xv = VV::ld(x + k, n);
        VV cv = n == VV::W ? VV::load_dup(c + k / 2) : VV::load_dup(c + k / 2, n / 2);
        VV sv = n == VV::W ? VV::load_dup(s + k / 2) : VV::load_dup(s + k / 2, n / 2);
        VV cross = VV::swap_pairs(xv) * sv;
        VV::st(x + k, Inverse ? VV::fmsubadd(xv, cv, cross) : VV::fmaddsub(xv, cv, cross), n);
      });
      continue;
    }
    for (int64_t k = 0; k < D; k += 2) {  // one-lane type
      const float x1 = simd::to_f32(x[k]), x2 = simd::to_f32(x[k + 1]);
      const float cv = c[k / 2], sv = Inverse ? -s[k / 2] : s[k / 2];
      simd::from_f32(x1 * cv - x2 * sv, x + k);
      simd::from_f32(x2 * cv + x1 * sv, x + k + 1);
    }
  }
}

#endif  // TC_SIMD_PASS
