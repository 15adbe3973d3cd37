// Attention forward on the CPU, FlashAttention-2 style.
//
// For one batch b and kv head g, the G = H / Hkv query heads that read g are
// processed together: their rows are interleaved as r = i * G + hh (query
// row i, head h = g * G + hh), so a tile of rows shares every K/V tile it
// loads, and a decode step (Sq = 1) still fills G columns. Per row r
// (position p = i + Skv - Sq):
//
//   s_j  = scale * <q_r, k_j> + slope_h * (j - p)      for the keys j the row sees
//          (the decoder's soft-capping first replaces scale <q_r, k_j> by
//          cap tanh(scale <q_r, k_j> / cap): AttentionArgs::softcap)
//   O_r  = sum_j exp(s_j - m) v_j / l,   l = sum_j exp(s_j - m),  m = max_j s_j
//   LSE_r = m + log l
//
// computed one key tile at a time without ever holding all of s (online
// softmax): with the tile's scores s', m' = max(m, max s'),
//   l <- l * exp(m - m') + sum exp(s' - m')
//   O <- O * exp(m - m') + exp(s' - m') V'
// and O / l at the end. A row that sees no key keeps l = 0: O = 0, LSE = -inf.
//
// Layout of the work. A tile is kBr rows x kBc keys. Q is packed once per
// task, scaled and transposed (Qt[d][r]), so the score tile comes out
// transposed, S^T[j][r] = sum_d K[j][d] Qt[d][r]: K is read in place (a
// broadcast per element) and the softmax statistics of a row are a vertical
// max/sum over the tile's key rows, vectorised across rows with no
// horizontal reductions. P^T then multiplies V as stored. Both products go
// through att::tile_gemm (register-blocked FMA, attention_tiles.h). f16/bf16
// K and V are widened to f32 one tile at a time; every sum is f32.
//
// Tasks are (b, g, row tile), taken dynamically by the thread pool, the
// longest first (with a causal mask the last row tiles see the most keys).
// Key tiles outside every row's range are never visited, so a causal mask
// costs about half of the full product; only tiles that straddle a mask
// edge are masked element by element.
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.h"
#include "cpu/attention_tiles.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace att {

TC_TARGET_AVX512 __attribute__((noinline)) void tile_gemm_avx512(const TileGemm& g) { tile_gemm<16>(g); }
TC_TARGET_AVX2 __attribute__((noinline)) void tile_gemm_avx2(const TileGemm& g) { tile_gemm<8>(g); }
__attribute__((noinline)) void tile_gemm_portable(const TileGemm& g) { tile_gemm<4>(g); }

Isa pick_isa() {
  const Features& f = features();
  if (f.avx512f && f.avx2 && f.fma) return note_kernel("attention/avx512"), Isa::Avx512;
  if (f.avx2 && f.fma) return note_kernel("attention/avx2"), Isa::Avx2;
  return note_kernel("attention/portable"), Isa::Portable;
}

namespace {

struct FwdPlan {
  const AttentionArgs* a;
  int64_t B, H, Hkv, G, Sq, Skv, D;
  int64_t rows;    // Sq * G rows per (b, g)
  int64_t ntiles;  // row tiles per (b, g)
  float scale;
  MaskGeometry geo;
};

// Scratch floats one worker needs for tiles of width W (as fwd_task carves it).
int64_t fwd_scratch_floats(int64_t D, int W) {
  const int64_t Dp = round_up(D, W), Brp = kBr;
  int64_t n = 0;
  for (int64_t piece : {D * Brp, kBc * D, kBc * Dp, kBc * Brp, Brp * Dp, Brp, Brp, Brp, Brp, Brp})
    n += round_up(piece, 16);
  return n;
}

template <class I>
TC_AI void fwd_task(const FwdPlan& P, float* scratch, int64_t task) {
  constexpr int W = I::W;
  typedef typename Vec<W>::f F;
  const AttentionArgs& A = *P.a;
  const int32_t dt = A.d.dtype;
  const int64_t D = P.D, G = P.G, Dp = round_up(D, W);
  const int64_t bg = task % (P.B * P.Hkv), tile = P.ntiles - 1 - task / (P.B * P.Hkv);
  const int64_t b = bg / P.Hkv, g = bg % P.Hkv;
  const int64_t r0 = tile * kBr, nr = std::min(kBr, P.rows - r0), Brp = round_up(nr, W);
  const int64_t key_lo = P.geo.key_begin(r0 / G), key_hi = P.geo.key_end((r0 + nr - 1) / G);

  // Carve the scratch (each piece a multiple of 16 floats, so 64-byte aligned).
  float* p = scratch;
  auto take = [&](int64_t n) {
    float* q = p;
    p += round_up(n, 16);
    return q;
  };
  float* qt = take(D * Brp);     // scale * Q^T, [D][Brp]
  float* kbuf = take(kBc * D);   // widened K tile, [kBc][D]
  float* vbuf = take(kBc * Dp);  // widened/padded V tile, [kBc][Dp]
  float* st = take(kBc * Brp);   // S^T, then P^T, [kBc][Brp]
  float* oacc = take(Brp * Dp);  // unnormalised O, [Brp][Dp]
  float* m = take(Brp);
  float* l = take(Brp);
  float* alpha = take(Brp);
  float* pos = take(Brp);    // -(i - i_first) of each row, for ALiBi
  float* slope = take(Brp);  // ALiBi slope of each row's head

  // Pack Q: row r of the tile is (head g*G + hh, query i).
  const int64_t i_first = r0 / G, p_first = i_first + P.geo.off;
  float* row = oacc;  // free until the first PV product
  for (int64_t c = 0; c < Brp; ++c) {
    if (c < nr) {
      const int64_t r = r0 + c, i = r / G, h = g * G + r % G;
      load_row(dt, A.q, ((b * P.H + h) * P.Sq + i) * D, D, row, D);
      for (int64_t d = 0; d < D; ++d) qt[d * Brp + c] = row[d] * P.scale;
      pos[c] = -float(i - i_first);
      slope[c] = A.alibi ? A.alibi[h] : 0.0f;
    } else {
      for (int64_t d = 0; d < D; ++d) qt[d * Brp + c] = 0.0f;
      pos[c] = 0.0f;
      slope[c] = 0.0f;
    }
    m[c] = -INFINITY;
    l[c] = 0.0f;
  }
  std::memset(oacc, 0, size_t(Brp * Dp) * 4);

  const int64_t kv_base = (b * P.Hkv + g) * A.kv_stride_rows();
  const F neg_inf = splat<W>(-INFINITY);
  for (int64_t j0 = key_lo; j0 < key_hi; j0 += kBc) {
    const int64_t nk = std::min(kBc, key_hi - j0);
    // K is read in place as [nk][D] (f32) or widened; V as [nk][Dp].
    const float* kp = load_rows(dt, A.k, (kv_base + j0) * D, nk, D, kbuf, D);
    const float* vp = load_rows(dt, A.v, (kv_base + j0) * D, nk, D, vbuf, Dp);

    // S^T[j][c] = sum_d K[j][d] Qt[d][c]
    I::gemm(TileGemm{st, Brp, kp, D, 1, qt, Brp, nk, D, Brp / W, kZero, nullptr});

    for (int64_t j = 0; j < nk; ++j) {
      float* s = st + j * Brp;
      const int64_t kj = j0 + j;
      if (A.softcap > 0.0f)
        for (int64_t c = 0; c < nr; ++c) s[c] = A.softcap * std::tanh(s[c] / A.softcap);
      if (A.alibi) {
        const float fk = float(kj - p_first);  // j - p = fk + pos[c], exact below 2^24
        for (int64_t c = 0; c < Brp; c += W)
          store<W>(s + c, load<W>(s + c) + load<W>(slope + c) * (load<W>(pos + c) + fk));
      }
      // Rows [rb, re) of the tile see key kj; the rest of the row is masked.
      const int64_t rb = std::clamp<int64_t>(std::clamp<int64_t>(P.geo.row_begin(kj), 0, P.Sq) * G - r0, 0, nr);
      const int64_t re = std::clamp<int64_t>(std::clamp<int64_t>(P.geo.row_end(kj), 0, P.Sq) * G - r0, 0, nr);
      if (rb > 0 || re < nr) {
        for (int64_t c = 0; c < rb; ++c) s[c] = -INFINITY;
        for (int64_t c = std::max(re, rb); c < nr; ++c) s[c] = -INFINITY;
      }
    }

    // Online softmax, W rows at a time; P^T overwrites S^T.
    for (int64_t c = 0; c < Brp; c += W) {
      F mx = neg_inf, mx1 = neg_inf, mx2 = neg_inf, mx3 = neg_inf;  // four chains hide vmax latency
      int64_t j = 0;
      for (; j + 4 <= nk; j += 4) {
        mx = vmax<W>(mx, load<W>(st + j * Brp + c));
        mx1 = vmax<W>(mx1, load<W>(st + (j + 1) * Brp + c));
        mx2 = vmax<W>(mx2, load<W>(st + (j + 2) * Brp + c));
        mx3 = vmax<W>(mx3, load<W>(st + (j + 3) * Brp + c));
      }
      for (; j < nk; ++j) mx = vmax<W>(mx, load<W>(st + j * Brp + c));
      mx = vmax<W>(vmax<W>(mx, mx1), vmax<W>(mx2, mx3));
      const F m_old = load<W>(m + c);
      const F m_new = vmax<W>(m_old, mx);
      const F m_use = m_new == neg_inf ? F{} : m_new;  // rows with nothing seen yet stay at 0
      F sum = F{};
      for (j = 0; j < nk; ++j) {
        F e = vexp<W>(load<W>(st + j * Brp + c) - m_use);
        store<W>(st + j * Brp + c, e);
        sum += e;
      }
      const F al = vexp<W>(m_old - m_use);
      store<W>(alpha + c, al);
      store<W>(l + c, load<W>(l + c) * al + sum);
      store<W>(m + c, m_new);
    }

    // O[c][:] = alpha[c] * O[c][:] + sum_j P^T[j][c] V[j][:]
    I::gemm(TileGemm{oacc, Dp, st, 1, Brp, vp, Dp, nr, nk, Dp / W, kScaled, alpha});
  }

  for (int64_t c = 0; c < nr; ++c) {
    const int64_t r = r0 + c, i = r / G, h = g * G + r % G;
    const int64_t out_row = (b * P.H + h) * P.Sq + i;
    float* o = oacc + c * Dp;
    const float inv = l[c] > 0.0f ? 1.0f / l[c] : 0.0f;
    for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    store_row(dt, o, D, A.o, out_row * D);
    if (A.lse) A.lse[out_row] = l[c] > 0.0f ? m[c] + std::log(l[c]) : -INFINITY;
  }
}

TC_TARGET_AVX512 __attribute__((noinline)) void fwd_task_avx512(const FwdPlan& P, float* s, int64_t t) {
  fwd_task<IsaAvx512>(P, s, t);
}
TC_TARGET_AVX2 __attribute__((noinline)) void fwd_task_avx2(const FwdPlan& P, float* s, int64_t t) {
  fwd_task<IsaAvx2>(P, s, t);
}
__attribute__((noinline)) void fwd_task_portable(const FwdPlan& P, float* s, int64_t t) {
  fwd_task<IsaPortable>(P, s, t);
}

}  // namespace
}  // namespace att

tc_status attention_forward(const AttentionArgs& a) {
  using namespace att;
  const tc_attention_desc& d = a.d;
  const int64_t G = d.heads / d.kv_heads;
  FwdPlan P{&a,     d.batch,  d.heads, d.kv_heads, G, d.seq_q, d.seq_kv, d.head_dim, d.seq_q * G, 0,
            float(d.softmax_scale), MaskGeometry(d.seq_q, d.seq_kv, d.causal != 0, d.window_size)};
  P.ntiles = (P.rows + kBr - 1) / kBr;

  const Isa isa = pick_isa();
  const int W = isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 4;
  void (*task_fn)(const FwdPlan&, float*, int64_t) =
      isa == Isa::Avx512 ? fwd_task_avx512 : isa == Isa::Avx2 ? fwd_task_avx2 : fwd_task_portable;

  const int64_t ntasks = P.B * P.Hkv * P.ntiles;
  const int nthreads = int(std::min<int64_t>(num_threads(), ntasks));
  const int64_t per_thread = fwd_scratch_floats(P.D, W);
  // Allocated here, so that a failure happens before any output is written;
  // kept by the calling thread for its next call (decode calls are short).
  thread_local Scratch scratch;
  float* base = scratch.get(size_t(per_thread * std::max(nthreads, 1)));

  std::atomic<int64_t> next{0};
  parallel_run(nthreads, [&](int t, int) {
    float* mine = base + per_thread * t;
    for (int64_t task; (task = next.fetch_add(1)) < ntasks;) task_fn(P, mine, task);
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
