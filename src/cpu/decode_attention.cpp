// One-row attention over the KV cache on the CPU (core/backend.h,
// DecodeAttentionArgs): per query head h of kv group g = h / (H / Hkv),
//
//   s_j = scale q_h . K_g[j]   (or cap tanh(s_j / cap) with soft-capping),
//   o_h = sum_j e^(s_j - m) V_g[j] / sum_j e^(s_j - m),   m = max_j s_j,
//
// over the cache rows j in [first, *pos] (first = 0, or the last `window`
// rows); a batch step's rows each over their own slot and position. K and V rows are f32 or f16 (simd::f16: widened in registers with
// F16C, exactly). It serves a CPU model's one-token steps over an f16 cache
// (an f32 cache attends with attention_forward in place), the device path on
// the CPU (TC_LLAMA_DEVICE_PATH), and is the reference of the GPU's kernel.
//
// Memory: each head reads its group's S rows of K and of V once; the heads
// of a group run one after the other on a thread, so their K and V come from
// cache after the first. Scores are a vector dot product per row (one
// horizontal sum); the exponentials are vectorised over the rows; the values
// accumulate as one vector FMA per row and dimension vector.
#ifndef TC_SIMD_PASS

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/backend.h"
#include "cpu/ops.h"
#include "cpu/simd.h"
#include "cpu/thread_pool.h"

#define TC_SIMD_SELF "cpu/decode_attention.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {

tc_status decode_attention(const DecodeAttentionArgs& a) {
  // Items are (row, head), row-major: a thread's run of heads stays within a
  // row's kv groups as long as it can.
  auto run = [&](auto t) {
    using T = decltype(t);
    auto heads = TC_SIMD_PICK(decode_heads<T>);
    parallel_for(a.n * a.H, 1, [&](int64_t b, int64_t e) {
      // Each thread's scores and accumulator, kept between steps: a decode
      // step calls this once a layer.
      thread_local std::vector<float> p, acc;
      acc.resize(size_t(a.D));
      for (int64_t r = b; r < e;) {
        const int64_t i = r / a.H, h0 = r % a.H, h1 = std::min(a.H, h0 + (e - r));
        const int64_t end = int64_t(a.slots ? a.pos[i] : *a.pos) + 1;
        const int64_t first = a.window > 0 ? std::max<int64_t>(0, end - a.window) : 0;
        p.resize(size_t(end - first));
        heads(a, i, first, end - first, h0, h1, p.data(), acc.data());
        r += h1 - h0;
      }
    });
  };
  if (a.cache == TC_DTYPE_F16) run(simd::f16{});
  else run(float{});
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernel, compiled once per instruction set (V).

// Heads [h0, h1) of query row i: p holds the S scores then their
// exponentials, acc the weighted sum of V rows (D floats).
template <class T>
void decode_heads(const DecodeAttentionArgs& a, int64_t i, int64_t first, int64_t S, int64_t h0, int64_t h1,
                  float* p, float* acc) {
  const int64_t D = a.D, G = a.H / a.Hkv, slot = a.slots ? a.slots[i] * a.slot_stride : 0;
  for (int64_t h = h0; h < h1; ++h) {
    const float* q = a.q + (h * a.n + i) * D;
    const T* K = static_cast<const T*>(a.k_cache) + slot + ((h / G) * a.C + first) * D;
    const T* Vr = static_cast<const T*>(a.v_cache) + slot + ((h / G) * a.C + first) * D;
    float m = -INFINITY;
    for (int64_t j = 0; j < S; ++j) {
      const T* kj = K + j * D;
      V s = V::zero();
      sweep(D, [&](int64_t d, int n) { s = V::fma(V::ld(q + d, n), V::ld(kj + d, n), s); });
      float x = a.scale * V::sum(s);
      if (a.softcap > 0.0f) x = a.softcap * std::tanh(x / a.softcap);
      p[j] = x;
      m = std::max(m, x);
    }
    const V mv = V::set1(m);
    V lsum = V::zero();
    sweep(S, [&](int64_t j, int n) {
      const V e = V::tail(V::exp(V::ld(p + j, n) - mv), n, 0.0f);
      V::st(p + j, e, n);
      lsum = lsum + e;
    });
    std::fill(acc, acc + D, 0.0f);
    for (int64_t j = 0; j < S; ++j) {
      const V w = V::set1(p[j]);
      const T* vj = Vr + j * D;
      sweep(D, [&](int64_t d, int n) { V::st(acc + d, V::fma(w, V::ld(vj + d, n), V::ld(acc + d, n)), n); });
    }
    const V inv = V::set1(1.0f / V::sum(lsum));
    float* o = a.o + (i * a.H + h) * D;
    sweep(D, [&](int64_t d, int n) { V::st(o + d, V::ld(acc + d, n) * inv, n); });
  }
}

#endif  // TC_SIMD_PASS
