// Attention backward on the CPU, FlashAttention-2 style.
//
// With the notation of attention.cpp (row r = query i of head h, key j,
// s = scale * <q_r, k_j> + slope_h * (j - p)), the forward's LSE gives the
// probabilities back without a second softmax pass:
//
//   P[r,j]  = exp(s[r,j] - LSE_r)                 (0 where the row does not see j)
//   Dd_r    = sum_j P[r,j] dP[r,j] = <dO_r, O_r>
//   dP[r,j] = <dO_r, v_j>
//   dS[r,j] = P[r,j] (dP[r,j] - Dd_r)             (gradient of the score)
//   dV_j   += sum_r P[r,j] dO_r
//   dQ_r   += scale * sum_j dS[r,j] k_j
//   dK_j   += scale * sum_r dS[r,j] q_r
//
// where the sums over r run over every query head of the kv head's group
// (GQA: dK and dV are sums over the heads that read them). Dd is computed
// first, one dot product per row.
//
// Work split. A task is (b, kv head g, chunk of key tiles). It owns the dK
// and dV rows of its keys: for each key tile it keeps dK, dV in f32 scratch,
// streams every row tile of the G query heads that can see the tile (rows
// of one head at a time, read in place when f32), and writes dK, dV once. dQ
// gets contributions from every key tile, so each chunk adds into its own
// f32 dQ accumulator; the accumulators are summed into dQ at the end. There
// is one chunk per (b, g) when B * Hkv alone keeps the threads busy, else a
// few, so no two threads ever write the same memory.
//
// Per (row tile, key tile) there are five products, all att::tile_gemm:
// S = Q Kt and dP = dO Vt with K and V packed transposed once per key tile,
// then dV += P^T dO, dK += dS^T Q (the tiles read transposed in place) and
// dQ += dS K. The scale multiplies dS once. Tiles outside the mask are never
// visited, so causal costs about half.
#include <atomic>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "cpu/attention_tiles.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace att {
namespace {

struct BwdPlan {
  const AttentionBackwardArgs* a;
  int64_t B, H, Hkv, G, Sq, Skv, D;
  int64_t rows;     // Sq * G rows per (b, g)
  int64_t nkt;      // key tiles per (b, g)
  int64_t nchunks;  // key-tile chunks per (b, g)
  float scale;
  MaskGeometry geo;
  const float* dd;  // [B][H][Sq]
  float* dq_acc;    // [nchunks][B * Hkv][G][Sq][Dp]
};

int64_t bwd_scratch_floats(int64_t D, int W) {
  const int64_t Dp = round_up(D, W);
  int64_t n = 0;
  for (int64_t piece : {D * kBc, 2 * D * kBc, kBc * Dp, kBc * Dp, kBc * Dp, kBr * Dp, kBr * Dp, kBr * kBc, kBr * kBc,
                        kBc, kBr, kBr, kBr})
    n += round_up(piece, 16);
  return n;
}

template <class I>
TC_AI void bwd_task(const BwdPlan& P, float* scratch, int64_t task) {
  constexpr int W = I::W;
  typedef typename Vec<W>::f F;
  const AttentionBackwardArgs& A = *P.a;
  const int32_t dt = A.d.dtype;
  const int64_t D = P.D, G = P.G, Dp = round_up(D, W), BG = P.B * P.Hkv;
  const int64_t chunk = task / BG, bg = task % BG, b = bg / P.Hkv, g = bg % P.Hkv;
  const int64_t t_begin = chunk * P.nkt / P.nchunks, t_end = (chunk + 1) * P.nkt / P.nchunks;

  float* p = scratch;
  auto take = [&](int64_t n) {
    float* q = p;
    p += round_up(n, 16);
    return q;
  };
  float* kt = take(D * kBc);    // K^T of the tile, [D][kBc]
  float* vt = take(2 * D * kBc);  // V^T of the tile, [D][kBc], then room to widen V
  float* kn = take(kBc * Dp);   // K of the tile, padded, [kBc][Dp]
  float* dk = take(kBc * Dp);   // dK accumulator
  float* dv = take(kBc * Dp);   // dV accumulator
  float* qn = take(kBr * Dp);   // Q rows, [kBr][Dp]
  float* don = take(kBr * Dp);  // dO rows
  float* ps = take(kBr * kBc);  // S, then P, [kBr][kBc]
  float* ds = take(kBr * kBc);  // dP, then scale * dS
  float* kpos = take(kBc);      // key offsets j within the tile
  float* lse = take(kBr);
  float* dd = take(kBr);
  float* negp = take(kBr);  // -(p - j0) of each row: j - p = kpos + negp, exact below 2^24
  int64_t jb[kBr], je[kBr];  // the keys of the tile each row sees: [jb, je)

  const int64_t kv_base = (b * P.Hkv + g) * P.Skv;
  float* dq_acc = P.dq_acc + ((chunk * BG + bg) * P.rows) * Dp;  // [G][Sq][Dp]

  for (int64_t t = t_begin; t < t_end; ++t) {
    const int64_t j0 = t * kBc, nk = std::min(kBc, P.Skv - j0);
    // K^T and V^T of the tile (zero past nk), and K as [nk][Dp].
    const float* kz = load_rows(dt, A.k, (kv_base + j0) * D, nk, D, kn, Dp);
    const float* vz = load_rows(dt, A.v, (kv_base + j0) * D, nk, D, vt + D * kBc, D);  // staged after V^T
    for (int64_t j = 0; j < kBc; ++j) {
      kpos[j] = float(j);
      for (int64_t d = 0; d < D; ++d) {
        kt[d * kBc + j] = j < nk ? kz[j * Dp + d] : 0.0f;
        vt[d * kBc + j] = j < nk ? vz[j * D + d] : 0.0f;
      }
    }
    std::memset(dk, 0, size_t(kBc * Dp) * 4);
    std::memset(dv, 0, size_t(kBc * Dp) * 4);

    // Rows that see some key of the tile, per query head of the group.
    const int64_t i_lo = std::clamp<int64_t>(P.geo.row_begin(j0), 0, P.Sq);
    const int64_t i_hi = std::clamp<int64_t>(P.geo.row_end(j0 + nk - 1), 0, P.Sq);
    for (int64_t hh = 0; hh < G; ++hh) {
      const int64_t h = g * G + hh;
      const F sl = splat<W>(A.alibi ? A.alibi[h] : 0.0f);
      for (int64_t i0 = i_lo; i0 < i_hi; i0 += kBr) {
        const int64_t nq = std::min(kBr, i_hi - i0), row0 = (b * P.H + h) * P.Sq + i0;
        const float* q = load_rows(dt, A.q, row0 * D, nq, D, qn, Dp);
        const float* go = load_rows(dt, A.d_o, row0 * D, nq, D, don, Dp);
        for (int64_t c = 0; c < nq; ++c) {
          const int64_t i = i0 + c;
          lse[c] = A.lse[row0 + c];
          dd[c] = P.dd[row0 + c];
          negp[c] = -float(i + P.geo.off - j0);
          jb[c] = std::clamp<int64_t>(P.geo.key_begin(i) - j0, 0, nk);
          je[c] = std::clamp<int64_t>(P.geo.key_end(i) - j0, 0, nk);
        }
        // S = Q K^T, dP = dO V^T
        I::gemm(TileGemm{ps, kBc, q, Dp, 1, kt, kBc, nq, D, kBc / W, kZero, nullptr});
        I::gemm(TileGemm{ds, kBc, go, Dp, 1, vt, kBc, nq, D, kBc / W, kZero, nullptr});
        for (int64_t c = 0; c < nq; ++c) {
          float* prow = ps + c * kBc;
          float* drow = ds + c * kBc;
          if (jb[c] >= je[c]) {
            std::memset(prow, 0, kBc * 4);
            std::memset(drow, 0, kBc * 4);
            continue;
          }
          const F sc = splat<W>(P.scale), np = splat<W>(negp[c]);
          const F l = splat<W>(lse[c]), ddv = splat<W>(dd[c]);
          for (int64_t j = 0; j < kBc; j += W) {
            F x = load<W>(prow + j) * sc - l;
            if (A.alibi) x += sl * (load<W>(kpos + j) + np);
            store<W>(prow + j, vexp<W>(x));
          }
          for (int64_t j = 0; j < jb[c]; ++j) prow[j] = 0.0f;
          for (int64_t j = je[c]; j < kBc; ++j) prow[j] = 0.0f;
          for (int64_t j = 0; j < kBc; j += W)
            store<W>(drow + j, load<W>(prow + j) * (load<W>(drow + j) - ddv) * sc);
        }
        // dV += P^T dO, dK += dS^T Q, dQ += dS K
        I::gemm(TileGemm{dv, Dp, ps, 1, kBc, go, Dp, nk, nq, Dp / W, kAccumulate, nullptr});
        I::gemm(TileGemm{dk, Dp, ds, 1, kBc, q, Dp, nk, nq, Dp / W, kAccumulate, nullptr});
        I::gemm(TileGemm{dq_acc + (hh * P.Sq + i0) * Dp, Dp, ds, kBc, 1, kz, Dp, nq, nk, Dp / W, kAccumulate,
                         nullptr});
      }
    }
    for (int64_t j = 0; j < nk; ++j) {
      store_row(dt, dk + j * Dp, D, A.dk, (kv_base + j0 + j) * D);
      store_row(dt, dv + j * Dp, D, A.dv, (kv_base + j0 + j) * D);
    }
  }
}

TC_TARGET_AVX512 __attribute__((noinline)) void bwd_task_avx512(const BwdPlan& P, float* s, int64_t t) {
  bwd_task<IsaAvx512>(P, s, t);
}
TC_TARGET_AVX2 __attribute__((noinline)) void bwd_task_avx2(const BwdPlan& P, float* s, int64_t t) {
  bwd_task<IsaAvx2>(P, s, t);
}
__attribute__((noinline)) void bwd_task_portable(const BwdPlan& P, float* s, int64_t t) {
  bwd_task<IsaPortable>(P, s, t);
}

}  // namespace
}  // namespace att

tc_status attention_backward(const AttentionBackwardArgs& a) {
  using namespace att;
  const tc_attention_desc& d = a.d;
  const int64_t G = d.heads / d.kv_heads;
  BwdPlan P{&a, d.batch, d.heads, d.kv_heads, G, d.seq_q, d.seq_kv, d.head_dim, d.seq_q * G, 0, 1,
            float(d.softmax_scale), MaskGeometry(d.seq_q, d.seq_kv, d.causal != 0, d.window_size), nullptr,
            nullptr};
  P.nkt = (P.Skv + kBc - 1) / kBc;

  const Isa isa = pick_isa();
  const int W = isa == Isa::Avx512 ? 16 : isa == Isa::Avx2 ? 8 : 4;
  void (*task_fn)(const BwdPlan&, float*, int64_t) =
      isa == Isa::Avx512 ? bwd_task_avx512 : isa == Isa::Avx2 ? bwd_task_avx2 : bwd_task_portable;
  const int64_t Dp = round_up(P.D, W), BG = P.B * P.Hkv;

  // Enough tasks for every thread (about three each) when B * Hkv is small,
  // as long as the extra dQ accumulators stay within 1 GiB.
  const int nthreads_all = num_threads();
  const int64_t want = 3 * int64_t(nthreads_all);
  const int64_t acc_floats = BG * P.rows * Dp;
  if (BG < want) {
    P.nchunks = std::min(P.nkt, (want + BG - 1) / BG);
    P.nchunks = std::max<int64_t>(1, std::min(P.nchunks, (int64_t(1) << 28) / std::max<int64_t>(acc_floats, 1)));
  }
  const int64_t ntasks = BG * P.nchunks;
  const int nthreads = int(std::min<int64_t>(nthreads_all, ntasks));
  const int64_t per_thread = bwd_scratch_floats(P.D, W);

  // Everything is allocated before any output is touched.
  Scratch dd_buf, acc_buf;
  thread_local Scratch scratch;
  float* dd = dd_buf.get(size_t(P.B * P.H * P.Sq));
  float* acc = acc_buf.get(size_t(P.nchunks * acc_floats));
  float* base = scratch.get(size_t(per_thread * std::max(nthreads, 1)));
  P.dd = dd;
  P.dq_acc = acc;

  // Dd = rowsum(dO * O); zero the dQ accumulators.
  const int64_t nrows = P.B * P.H * P.Sq, D = P.D;
  parallel_for(nrows, std::max<int64_t>(1, 4096 / D), [&](int64_t r0, int64_t r1) {
    alignas(64) float o[kMaxD], g[kMaxD];
    for (int64_t r = r0; r < r1; ++r) {
      load_row(d.dtype, a.o, r * D, D, o, D);
      load_row(d.dtype, a.d_o, r * D, D, g, D);
      float s = 0.0f;
      for (int64_t k = 0; k < D; ++k) s += o[k] * g[k];
      dd[r] = s;
    }
  });
  const int64_t acc_total = P.nchunks * acc_floats;
  parallel_for(acc_total, 1 << 16, [&](int64_t b0, int64_t b1) {
    std::memset(acc + b0, 0, size_t(b1 - b0) * 4);
  });

  std::atomic<int64_t> next{0};
  parallel_run([&](int t, int n) {
    if (t >= nthreads) return;
    float* mine = base + per_thread * t;
    for (int64_t task; (task = next.fetch_add(1)) < ntasks;) task_fn(P, mine, task);
  });

  // dQ = the sum of the chunks' accumulators.
  parallel_for(nrows, std::max<int64_t>(1, 4096 / D), [&](int64_t r0, int64_t r1) {
    alignas(64) float s[kMaxD];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t i = r % P.Sq, h = (r / P.Sq) % P.H, b = r / (P.Sq * P.H);
      const int64_t g = h / G, hh = h % G;
      const float* src = acc + ((b * P.Hkv + g) * P.rows + hh * P.Sq + i) * Dp;
      std::memcpy(s, src, size_t(D) * 4);
      for (int64_t c = 1; c < P.nchunks; ++c) {
        const float* more = src + c * acc_floats;
        for (int64_t k = 0; k < D; ++k) s[k] += more[k];
      }
      store_row(d.dtype, s, D, a.dq, r * D);
    }
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
