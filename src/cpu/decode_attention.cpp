// One-row attention over the KV cache on the CPU (core/backend.h,
// DecodeAttentionArgs): per query head h of kv group g = h / (H / Hkv),
//
//   s_j = scale q_h . K_g[j]   (or cap tanh(s_j / cap) with soft-capping),
//   o_h = sum_j e^(s_j - m) V_g[j] / sum_j e^(s_j - m),   m = max_j s_j,
//
// over the cache rows j in [first, *pos] (first = 0, or the last `window`
// rows); a batch step's rows each over their own slot and position. K and
// V rows are f32, f16 (simd::f16: widened in registers with F16C, exactly)
// or Q8_0 blocks (quant::BlockQ8_0) read in place, each code times its
// block's d (an int8 times an f16 value: exact in f32), so only f32
// rounding separates the result from attention over the dequantised rows.
// It serves a CPU model's
// one-token steps over an f16 or Q8_0 cache (an f32 cache attends with
// attention_forward in place), the device path on the CPU
// (TC_LLAMA_DEVICE_PATH), and is the reference of the GPU's kernel.
//
// Work split: items (query row i, kv group g, piece c), a piece being
// kPiece rows of the row's window (the last one shorter), so that a long
// window keeps every thread busy whatever the number of kv groups, and the
// pieces, hence the bits, do not depend on the thread count. An item reads
// its rows of K and V once for all G = H / Hkv heads of the group (up to 8
// heads a pass: one load and widening of each K and V vector for all of
// them), and leaves per head
//   m_c = max_j s_j,  l_c = sum_j e^(s_j - m_c),  u_c = sum_j e^(s_j - m_c) V_j;
// the pieces of a head then combine in piece order:
//   o = sum_c e^(m_c - M) u_c / sum_c e^(m_c - M) l_c,  M = max_c m_c.
// Scores are one vector FMA chain a head per row; the values accumulate
// one dimension vector at a time over the piece's rows in registers (two
// interleaved sums a head, added in a fixed order), the rows coming from
// cache after the first pass over them.
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
// Rows a piece of work (see above), and heads scored together in one pass
// over a piece's rows.
constexpr int64_t kPiece = 256;
constexpr int64_t kHeadsPerPass = 8;
}  // namespace cpu
}  // namespace tc

#define TC_SIMD_SELF "cpu/decode_attention.cpp"
#include "cpu/simd_foreach.h"

namespace tc {
namespace cpu {

tc_status decode_attention(const DecodeAttentionArgs& a) {
  if (tc_status st = check_decode_attention(a)) return st;
  const int64_t G = a.H / a.Hkv, D = a.D;
  // The window of query row i: [first, end).
  auto window = [&](int64_t i, int64_t* first) {
    const int64_t end = int64_t(a.slots ? a.pos[i] : *a.pos) + 1;
    *first = a.window > 0 ? std::max<int64_t>(0, end - a.window) : 0;
    return end - *first;
  };
  int64_t pieces = 1;
  for (int64_t i = 0; i < a.n; ++i) {
    int64_t first;
    pieces = std::max(pieces, (window(i, &first) + kPiece - 1) / kPiece);
  }
  // Each piece's (m, l, u) a head: [n][H][pieces][D + 2], kept between
  // calls (a decode step makes one a layer); every entry read is written
  // first. The workers reach it through `part`: a thread_local named inside
  // their lambdas would be their own.
  // Every row's window one piece: the items write o themselves (no combine).
  const bool whole = pieces == 1;
  thread_local std::vector<float> parts;
  parts.resize(size_t(a.n * a.H * pieces * (D + 2)));
  float* const part = parts.data();
  auto run = [&](auto t) {
    using T = decltype(t);
    auto piece = TC_SIMD_PICK(decode_piece<T>);
    parallel_for(a.n * a.Hkv * pieces, 1, [&](int64_t b, int64_t e) {
      thread_local std::vector<float> p;  // scores, then weights: [heads of a pass][kPiece]
      p.resize(size_t(std::min<int64_t>(G, kHeadsPerPass) * kPiece));
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = r / (a.Hkv * pieces), g = r / pieces % a.Hkv, c = r % pieces;
        int64_t first;
        const int64_t S = window(i, &first), j0 = c * kPiece;
        if (j0 >= S) continue;  // a shorter row of the batch
        for (int64_t h0 = g * G; h0 < (g + 1) * G; h0 += kHeadsPerPass) {
          const int64_t h1 = std::min((g + 1) * G, h0 + kHeadsPerPass);
          if (whole)
            piece(a, i, first, S, h0, h1, p.data(), a.o + (i * a.H + h0) * D, D, true);
          else
            piece(a, i, first + j0, std::min(S - j0, kPiece), h0, h1, p.data(),
                  part + ((i * a.H + h0) * pieces + c) * (D + 2), pieces * (D + 2), false);
        }
      }
    });
    if (whole) return;
    auto combine = TC_SIMD_PICK(combine_pieces);
    parallel_for(a.n * a.H, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t first;
        const int64_t used = (window(r / a.H, &first) + kPiece - 1) / kPiece;
        combine(part + r * pieces * (D + 2), used, D, a.o + r * D);
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

// Dims d .. d + n - 1 of a cache row as f32 (exact): f32 and f16 rows as
// they are; a Q8_0 row's codes times their block's d (an int8 times an f16
// value: exact in f32). Vectors never straddle a block of 32 (W divides 32
// and D is whole blocks).
template <class T>
inline V row_at(const T* row, int64_t d, int n) {
  return V::ld(row + d, n);
}
inline V row_at(const quant::BlockQ8_0* row, int64_t d, int) {
  const quant::BlockQ8_0& blk = row[d / quant::QK8_0];
  return V::load(blk.qs + d % quant::QK8_0) * V::set1(f16_to_f32(blk.d));
}

// Heads [h0, h0 + NH) of query row i over the cache rows [j0, j0 + S) of
// its window (S <= kPiece): each head's (m, l, u) of the piece to out + u
// (D + 2 floats, heads `stride` floats apart), or, when the piece is the
// whole window (`whole`), its o = u / l (D floats). p: NH x kPiece floats.
template <class T, int NH>
void piece_heads(const DecodeAttentionArgs& a, int64_t i, int64_t j0, int64_t S, int64_t h0, float* p, float* out,
                 int64_t stride, bool whole) {
  const int64_t D = a.D, G = a.H / a.Hkv, slot = a.slots ? a.slots[i] * a.slot_stride : 0;
  constexpr int64_t per = kPerUnit<T>;
  const int64_t start = (slot + ((h0 / G) * a.C + j0) * D) / per, row = D / per;
  const T* K = static_cast<const T*>(a.k_cache) + start;
  const T* Vr = static_cast<const T*>(a.v_cache) + start;
  const float* q[NH];
  for (int u = 0; u < NH; ++u) q[u] = a.q + ((h0 + u) * a.n + i) * D;
  // Scores: each K vector loaded and widened once for the NH heads. The
  // piece's V rows are fetched into cache meanwhile (the value pass below
  // reads them a dimension vector at a time, so row by row at a stride the
  // hardware prefetcher does not run ahead of), and K kAhead rows ahead.
  constexpr int64_t kAhead = 24;
  const int64_t row_bytes = row * int64_t(sizeof(T));
  const float scale = a.scale, cap = a.softcap;
  auto fetch = [&](const T* r) {
    for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(reinterpret_cast<const char*>(r) + b, 0, 3);
  };
  for (int64_t j = 0; j < S; ++j) {
    if (j + kAhead < S) fetch(K + (j + kAhead) * row);
    fetch(Vr + j * row);
    V s[NH];
    for (int u = 0; u < NH; ++u) s[u] = V::zero();
    sweep(D, [&](int64_t d, int n) {
      const V k = row_at(K + j * row, d, n);
      for (int u = 0; u < NH; ++u) s[u] = V::fma(V::ld(q[u] + d, n), k, s[u]);
    });
    for (int u = 0; u < NH; ++u) {
      float x = scale * V::sum(s[u]);
      if (cap > 0.0f) x = cap * std::tanh(x / cap);
      p[u * kPiece + j] = x;
    }
  }
  // Weights e^(s - m) in place; (m, l) after u.
  float inv[NH];
  for (int u = 0; u < NH; ++u) {
    float* pu = p + u * kPiece;
    V mv = V::set1(-INFINITY);
    sweep(S, [&](int64_t j, int n) { mv = V::max(mv, V::tail(V::ld(pu + j, n), n, -INFINITY)); });
    const float m = V::hmax(mv);
    V lsum = V::zero();
    sweep(S, [&](int64_t j, int n) {
      const V e = V::tail(V::exp(V::ld(pu + j, n) - V::set1(m)), n, 0.0f);
      V::st(pu + j, e, n);
      lsum = lsum + e;
    });
    const float l = V::sum(lsum);
    inv[u] = 1.0f / l;
    if (!whole) out[u * stride + D] = m, out[u * stride + D + 1] = l;
  }
  // u = sum_j w_j V_j, one dimension vector at a time, even and odd rows
  // in separate sums (two chains a head), added once at the end.
  sweep(D, [&](int64_t d, int n) {
    V e[NH], o[NH];
    for (int u = 0; u < NH; ++u) e[u] = o[u] = V::zero();
    int64_t j = 0;
    for (; j + 1 < S; j += 2) {
      const V v0 = row_at(Vr + j * row, d, n), v1 = row_at(Vr + (j + 1) * row, d, n);
      for (int u = 0; u < NH; ++u) {
        e[u] = V::fma(V::set1(p[u * kPiece + j]), v0, e[u]);
        o[u] = V::fma(V::set1(p[u * kPiece + j + 1]), v1, o[u]);
      }
    }
    if (j < S) {
      const V v0 = row_at(Vr + j * row, d, n);
      for (int u = 0; u < NH; ++u) e[u] = V::fma(V::set1(p[u * kPiece + j]), v0, e[u]);
    }
    for (int u = 0; u < NH; ++u) V::st(out + u * stride + d, whole ? (e[u] + o[u]) * V::set1(inv[u]) : e[u] + o[u], n);
  });
}

// Heads [h0, h1) (h1 - h0 <= kHeadsPerPass) of one piece: piece_heads for that many.
template <class T>
void decode_piece(const DecodeAttentionArgs& a, int64_t i, int64_t j0, int64_t S, int64_t h0, int64_t h1, float* p,
                  float* out, int64_t stride, bool whole) {
  switch (h1 - h0) {
    case 1: return piece_heads<T, 1>(a, i, j0, S, h0, p, out, stride, whole);
    case 2: return piece_heads<T, 2>(a, i, j0, S, h0, p, out, stride, whole);
    case 3: return piece_heads<T, 3>(a, i, j0, S, h0, p, out, stride, whole);
    case 4: return piece_heads<T, 4>(a, i, j0, S, h0, p, out, stride, whole);
    case 5: return piece_heads<T, 5>(a, i, j0, S, h0, p, out, stride, whole);
    case 6: return piece_heads<T, 6>(a, i, j0, S, h0, p, out, stride, whole);
    case 7: return piece_heads<T, 7>(a, i, j0, S, h0, p, out, stride, whole);
    default: return piece_heads<T, 8>(a, i, j0, S, h0, p, out, stride, whole);
  }
}

// o = sum_c e^(m_c - M) u_c / sum_c e^(m_c - M) l_c over a head's `used`
// pieces (part: [used][D + 2], u then m, l), in piece order; each piece's
// m is replaced by its weight e^(m_c - M) on the way (the scratch is this
// call's), so the weights are computed once, not once a dimension vector.
inline void combine_pieces(float* part, int64_t used, int64_t D, float* o) {
  float M = -INFINITY;
  for (int64_t c = 0; c < used; ++c) M = std::max(M, part[c * (D + 2) + D]);
  float l = 0.0f;
  for (int64_t c = 0; c < used; ++c) {
    float* ml = part + c * (D + 2) + D;
    ml[0] = std::exp(ml[0] - M);
    l += ml[0] * ml[1];
  }
  const float inv = 1.0f / l;
  sweep(D, [&](int64_t d, int n) {
    V acc = V::zero();
    for (int64_t c = 0; c < used; ++c)
      acc = V::fma(V::set1(part[c * (D + 2) + D]), V::ld(part + c * (D + 2) + d, n), acc);
    V::st(o + d, acc * V::set1(inv), n);
  });
}

#endif  // TC_SIMD_PASS
