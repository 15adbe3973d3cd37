// One-row attention over the KV cache on the CPU (core/backend.h,
// DecodeAttentionArgs): per query head h of kv group g = h / (H / Hkv),
//
//   s_j = scale q_h . K_g[j]   (or cap tanh(s_j / cap) with soft-capping),
//   o_h = sum_j e^(s_j - m) V_g[j] / sum_j e^(s_j - m),   m = max_j s_j,
//
// over the cache rows j in [first, *pos] (first = 0, or the last `window`
// rows); a batch step's rows each over their own slot and position. K and V rows are f32 or f16 (simd::f16: widened in registers with
// F16C, exactly), or Q8_0 blocks (quant::BlockQ8_0: value = q d), read in
// place block by block: with c the 32 codes of block b of a row,
//   q . K_j = sum_b d_b (q_b . c_b),   acc += (p_j d_b) c_b,
// the codes widened to f32 exactly, so only f32 rounding separates the
// result from attention over the dequantised rows. It serves a CPU model's
// one-token steps over an f16 or Q8_0 cache (an f32 cache attends with
// attention_forward in place), the device path on the CPU
// (TC_LLAMA_DEVICE_PATH), and is the reference of the GPU's kernel.
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
#include "quant/formats.h"

namespace tc {
namespace cpu {
// Cache elements per stored unit: a Q8_0 row is whole blocks of 32, so the
// element offsets of the cache (multiples of D) become block offsets.
template <class T>
constexpr int64_t kPerUnit = 1;
template <>
constexpr int64_t kPerUnit<quant::BlockQ8_0> = quant::QK8_0;
}  // namespace cpu
}  // namespace tc

#define TC_SIMD_SELF "cpu/decode_attention.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {

tc_status decode_attention(const DecodeAttentionArgs& a) {
  if (tc_status st = check_decode_attention(a)) return st;
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
  else if (a.cache == TC_DTYPE_Q8_0) run(quant::BlockQ8_0{});
  else run(float{});
  if (!a.oq) return TC_OK;
  QuantizeQ8Args qa;
  qa.info = a.info;
  qa.M = a.n, qa.K = a.H * a.D;
  qa.x = a.o, qa.xq = a.oq, qa.xd = a.od;
  return quantize_q8(qa);
}

}  // namespace cpu
}  // namespace tc

#else  // TC_SIMD_PASS: the kernel, compiled once per instruction set (V).

// q . row and acc += w row for a cache row of D elements of T.
template <class T>
inline float row_dot(const float* q, const T* row, int64_t D) {
  V s = V::zero();
  sweep(D, [&](int64_t d, int n) { s = V::fma(V::ld(q + d, n), V::ld(row + d, n), s); });
  return V::sum(s);
}
template <class T>
inline void row_axpy(float w, const T* row, float* acc, int64_t D) {
  const V wv = V::set1(w);
  sweep(D, [&](int64_t d, int n) { V::st(acc + d, V::fma(wv, V::ld(row + d, n), V::ld(acc + d, n)), n); });
}
// Q8_0 rows: D / 32 blocks; a block's 32 codes are whole vectors of every
// lane type (W = 1, 8 or 16).
inline float row_dot(const float* q, const quant::BlockQ8_0* row, int64_t D) {
  V s = V::zero();
  for (int64_t b = 0; b < D / quant::QK8_0; ++b, q += quant::QK8_0) {
    V t = V::zero();
    for (int k = 0; k < quant::QK8_0; k += V::W) t = V::fma(V::load(q + k), V::load(row[b].qs + k), t);
    s = V::fma(V::set1(f16_to_f32(row[b].d)), t, s);
  }
  return V::sum(s);
}
inline void row_axpy(float w, const quant::BlockQ8_0* row, float* acc, int64_t D) {
  for (int64_t b = 0; b < D / quant::QK8_0; ++b, acc += quant::QK8_0) {
    const V wd = V::set1(w * f16_to_f32(row[b].d));
    for (int k = 0; k < quant::QK8_0; k += V::W) V::store(acc + k, V::fma(wd, V::load(row[b].qs + k), V::load(acc + k)));
  }
}

// Heads [h0, h1) of query row i: p holds the S scores then their
// exponentials, acc the weighted sum of V rows (D floats).
template <class T>
void decode_heads(const DecodeAttentionArgs& a, int64_t i, int64_t first, int64_t S, int64_t h0, int64_t h1,
                  float* p, float* acc) {
  const int64_t D = a.D, G = a.H / a.Hkv, slot = a.slots ? a.slots[i] * a.slot_stride : 0;
  for (int64_t h = h0; h < h1; ++h) {
    const float* q = a.q + (h * a.n + i) * D;
    constexpr int64_t per = kPerUnit<T>;
    const int64_t start = (slot + ((h / G) * a.C + first) * D) / per, row = D / per;
    const T* K = static_cast<const T*>(a.k_cache) + start;
    const T* Vr = static_cast<const T*>(a.v_cache) + start;
    float m = -INFINITY;
    for (int64_t j = 0; j < S; ++j) {
      float x = a.scale * row_dot(q, K + j * row, D);
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
    for (int64_t j = 0; j < S; ++j) row_axpy(p[j], Vr + j * row, acc, D);
    const V inv = V::set1(1.0f / V::sum(lsum));
    float* o = a.o + (i * a.H + h) * D;
    sweep(D, [&](int64_t d, int n) { V::st(o + d, V::ld(acc + d, n) * inv, n); });
  }
}

#endif  // TC_SIMD_PASS
