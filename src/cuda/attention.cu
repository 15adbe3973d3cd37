// Attention forward on the GPU, FlashAttention-2 style (semantics: the CPU
// kernel, src/cpu/attention.cpp, and tensorcore/attention.h).
//
// For query row i of head h (kv head g = h / (H / Hkv)), position
// p = i + Skv - Sq, over the keys j the row sees (att::Mask):
//
//   s_j   = scale * <q_i, k_j> + slope_h * (j - p)
//           (with soft-capping, AttentionArgs::softcap = c > 0, scale <q_i, k_j>
//           becomes c tanh(scale <q_i, k_j> / c))
//   O_i   = sum_j exp(s_j - m) v_j / l,   l = sum_j exp(s_j - m),  m = max_j s_j
//   LSE_i = m + log l                     (natural log; -inf and O = 0 for no key)
//
// computed one key tile at a time with the online softmax: for a tile's
// scores s', m' = max(m, max s'), l <- l exp(m - m') + sum exp(s' - m'),
// O <- O exp(m - m') + exp(s' - m') V'. The fast kernel works in base 2
// (x = s log2(e), exp2f), which is the same softmax; LSE = m2 ln 2 + ln l.
//
// cuDNN's fused engines run first where they express these semantics
// exactly (attention_cudnn.cu, "cudnn_sdpa_fprop"); otherwise two paths (the
// one that ran is s->last_kernel):
//   attention_fwd_mma<T, DP, BN>  f16/bf16, head_dim % 8 == 0, 16-byte aligned
//       Q/K/V/O: one CTA of 4 warps per (64-row query tile, head, batch); each
//       warp owns 16 query rows. Q is staged once in shared memory, K/V tiles
//       of BN keys are streamed through a double buffer with cp.async. S = Q K^T
//       and O += P V run on the tensor cores (mma.sync m16n8k16, f32
//       accumulators); the softmax state (m, l) and O stay in registers. head_dim
//       is padded with zeros to DP in {64, 128, 256} (64 and 128 are the
//       specialised sizes; 40 or 72 run padded). Key tiles outside every row's
//       range are never loaded; only tiles straddling a mask edge are masked
//       element by element.
//   attention_fwd_rowwise<T>  everything else (f32, head_dim not a multiple
//       of 8, unaligned pointers, GPUs before sm_80 or with too little shared
//       memory for the tile): one warp per query row, all maths in f32, each
//       lane holding head_dim / 32 elements of q and of the output accumulator.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "cuda/attention_common.cuh"
#include "cuda/attention_cudnn.h"
#include "cuda/device.h"

namespace tc {
namespace cuda {
namespace {

using namespace att;

// Grid size for grid-stride loops: enough CTAs to fill the GPU many times over
// while staying far inside gridDim.x's limit.
unsigned grid_for(int64_t items) { return unsigned(std::min<int64_t>(items, int64_t(1) << 24)); }

// ---- fallback: one warp per query row ---------------------------------------------------------

constexpr int kRowWarps = 4;  // rows per CTA

template <class T>
__global__ void __launch_bounds__(32 * kRowWarps)
    attention_fwd_rowwise(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                          float* __restrict__ lse, const float* __restrict__ alibi, int64_t B, int64_t H,
                          int64_t Hkv, int64_t D, float scale, float cap, Mask mask, int64_t kv_rows) {
  const int lane = threadIdx.x & 31;
  const int64_t G = H / Hkv, nrows = B * H * mask.sq;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; row < nrows;
       row += int64_t(gridDim.x) * kRowWarps) {
    const int64_t i = row % mask.sq, h = (row / mask.sq) % H, b = row / (mask.sq * H), g = h / G;
    const int64_t pos = i + mask.off;
    const float slope = alibi ? alibi[h] : 0.0f;
    float qr[8], acc[8];  // element d = lane + 32 t (head_dim <= 256)
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int64_t d = lane + 32 * t;
      qr[t] = d < D ? to_f32(q[row * D + d]) * scale : 0.0f;
      acc[t] = 0.0f;
    }
    const int64_t kb = mask.key_begin(i), ke = mask.key_end(i);
    const int64_t kv0 = (b * Hkv + g) * kv_rows;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = kb; j < ke; ++j) {
      const T* kr = k + (kv0 + j) * D;
      const T* vr = v + (kv0 + j) * D;
      float sdot = 0.0f;
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < D) sdot += qr[t] * to_f32(kr[d]);
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) sdot += __shfl_xor_sync(0xffffffffu, sdot, off);
      const float s = (cap > 0.0f ? cap * tanhf(sdot / cap) : sdot) + slope * float(j - pos);
      const float m_new = fmaxf(m, s);
      const float alpha = expf(m - m_new);  // 0 for the first key (m = -inf)
      const float e = expf(s - m_new);
      l = l * alpha + e;
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < D) acc[t] = acc[t] * alpha + e * to_f32(vr[d]);
      }
      m = m_new;
    }
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < D) o[row * D + d] = from_f32<T>(acc[t] * inv);
    }
    if (lse && lane == 0) lse[row] = l > 0.0f ? m + logf(l) : -INFINITY;
  }
}

// ---- fast path: tensor cores ------------------------------------------------------------------

constexpr int kBM = 64;        // query rows per CTA: 4 warps x 16
constexpr int kThreads = 128;

template <int DP, int BN>
constexpr size_t fwd_smem_bytes() {
  return size_t(kBM + 4 * BN) * (DP + 8) * 2;  // Q, then K[2], V[2]; rows padded by 16 bytes
}

// Copies rows [r0, r0 + nrows) of a [*, D] matrix (rows < limit valid, the
// rest and the columns D..DP zero) into shared memory rows of LDS elements.
template <class T, int DP, int LDS>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t r0, int nrows, int64_t limit, int64_t D) {
  constexpr int kChunks = DP / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < nrows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool ok = r0 + r < limit && ch * 8 < D;
    cp_async16(dst + r * LDS + ch * 8, ok ? src + (r0 + r) * D + ch * 8 : src, ok);
  }
}

template <class T, int DP, int BN>
__global__ void __launch_bounds__(kThreads)
    attention_fwd_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                      float* __restrict__ lse, const float* __restrict__ alibi, int64_t B, int64_t H, int64_t Hkv,
                      int64_t D, float scale, float cap, Mask mask, int64_t kv_rows) {
  constexpr int LDS = DP + 8;  // padded row: the 8 rows of an ldmatrix hit distinct banks
  constexpr int NT = BN / 8;   // n-tiles of S
  constexpr int DT = DP / 8;   // n-tiles of O
  constexpr int KS = DP / 16;  // k-steps of Q K^T
  constexpr bool kQinRegs = DP <= 128;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Qs = reinterpret_cast<T*>(smem_raw);
  T* Ks = Qs + kBM * LDS;     // [2][BN][LDS]
  T* Vs = Ks + 2 * BN * LDS;  // [2][BN][LDS]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
  const int64_t G = H / Hkv, nqt = (mask.sq + kBM - 1) / kBM, BH = B * H;
  const float scale2 = scale * att::kLog2e;

  for (int64_t item = blockIdx.x; item < nqt * BH; item += gridDim.x) {
    // Heaviest query tiles (the last, under a causal mask) first.
    const int64_t qt = nqt - 1 - item / BH, bh = item % BH, h = bh % H, b = bh / H, g = h / G;
    const int64_t i0 = qt * kBM, i_last = (i0 + kBM < mask.sq ? i0 + kBM : mask.sq) - 1;
    const int64_t q_row0 = bh * mask.sq;  // row of (b, h, i = 0) in Q, O, LSE
    const int64_t kv_row0 = (b * Hkv + g) * kv_rows;
    const float slope2 = alibi ? alibi[h] * att::kLog2e : 0.0f;

    const int64_t kb_lo = mask.key_begin(i0), ke_hi = mask.key_end(i_last);
    const int64_t ke_lo = mask.key_end(i0), kb_hi = mask.key_begin(i_last);
    const int64_t j_start = kb_lo / BN * BN;
    const int ntiles = ke_hi > kb_lo ? int((ke_hi - j_start + BN - 1) / BN) : 0;

    // This thread's two rows: r = 0 -> warp row gq, r = 1 -> gq + 8.
    int64_t ri[2], rkb[2], rke[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      ri[r] = i0 + warp * 16 + gq + 8 * r;
      rkb[r] = mask.key_begin(ri[r]);
      rke[r] = mask.key_end(ri[r]);
    }
    float oacc[DT][4];
#pragma unroll
    for (int n = 0; n < DT; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.0f;
    float m2[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.0f, 0.0f};
    uint32_t qf[kQinRegs ? KS : 1][4];

    if (ntiles > 0) {
      load_tile<T, DP, LDS>(Qs, q + q_row0 * D, i0, kBM, mask.sq, D);
      load_tile<T, DP, LDS>(Ks, k + kv_row0 * D, j_start, BN, mask.skv, D);
      load_tile<T, DP, LDS>(Vs, v + kv_row0 * D, j_start, BN, mask.skv, D);
      cp_async_commit();
    }
    for (int it = 0; it < ntiles; ++it) {
      const int buf = it & 1;
      const int64_t j0 = j_start + int64_t(it) * BN;
      if (it + 1 < ntiles) {
        T* kn = Ks + (buf ^ 1) * BN * LDS;
        T* vn = Vs + (buf ^ 1) * BN * LDS;
        load_tile<T, DP, LDS>(kn, k + kv_row0 * D, j0 + BN, BN, mask.skv, D);
        load_tile<T, DP, LDS>(vn, v + kv_row0 * D, j0 + BN, BN, mask.skv, D);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const T* Kt = Ks + buf * BN * LDS;
      const T* Vt = Vs + buf * BN * LDS;

      if constexpr (kQinRegs) {
        if (it == 0) {
#pragma unroll
          for (int kk = 0; kk < KS; ++kk)
            ldmatrix_x4(qf[kk], Qs + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
        }
      }

      // S[16 x BN] = Q_w K^T. B operand of n-tile 2np / 2np+1 from one ldmatrix.x4
      // over keys 16np.. (matrices: keys +0..7 / d +0..7, keys +0..7 / d +8..15,
      // keys +8..15 / d +0..7, keys +8..15 / d +8..15).
      float s[NT][4];
#pragma unroll
      for (int n = 0; n < NT; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t a[4];
        if constexpr (kQinRegs) {
#pragma unroll
          for (int x = 0; x < 4; ++x) a[x] = qf[kk][x];
        } else {
          ldmatrix_x4(a, Qs + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
        }
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          uint32_t bk[4];
          ldmatrix_x4(bk, Kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk * 16 + ((lane >> 3) & 1) * 8);
          mma16816<T>(s[2 * np], a, bk[0], bk[1]);
          mma16816<T>(s[2 * np + 1], a, bk[2], bk[3]);
        }
      }

      // Scores in base 2, ALiBi, mask. Element e of n-tile n: row gq + 8 (e / 2),
      // key j0 + 8 n + 2 tq + e % 2.
      const bool edge = j0 + BN > ke_lo || j0 < kb_hi || j0 + BN > mask.skv;
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const int64_t j = j0 + n * 8 + 2 * tq + (e & 1);
          // Soft-capping (cap > 0): cap tanh(scale s / cap), then base 2.
          float x = cap > 0.0f ? cap * tanhf(s[n][e] * scale / cap) * att::kLog2e : s[n][e] * scale2;
          if (alibi) x += slope2 * float(j - (ri[r] + mask.off));
          if (edge && (j < rkb[r] || j >= rke[r])) x = -INFINITY;
          s[n][e] = x;
        }

      // Online softmax per row; a row's 16 scores of this thread plus the other
      // three threads of its quad (same gq) make the tile row.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < NT; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m2[r], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing seen yet stays at 0
        const float alpha = exp2f(m2[r] - m_use);
        m2[r] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          s[n][2 * r] = exp2f(s[n][2 * r] - m_use);
          s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - m_use);
          sum += s[n][2 * r] + s[n][2 * r + 1];
        }
        lsum[r] = lsum[r] * alpha + sum;  // this thread's share; the quad is summed at the end
#pragma unroll
        for (int n = 0; n < DT; ++n) {
          oacc[n][2 * r] *= alpha;
          oacc[n][2 * r + 1] *= alpha;
        }
      }

      // O += P V. P's accumulators of n-tiles 2kk, 2kk+1 are the A fragment of
      // key block kk (see attention_common.cuh); V through ldmatrix.trans
      // (matrices: keys +0..7 / d +0..7, keys +8..15 / d +0..7, keys +0..7 / d
      // +8..15, keys +8..15 / d +8..15 -> b0, b1 of d n-tiles 2dp, 2dp+1).
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 + (lane >> 4) * 8);
          mma16816<T>(oacc[2 * dp], a, bv[0], bv[1]);
          mma16816<T>(oacc[2 * dp + 1], a, bv[2], bv[3]);
        }
      }
      __syncthreads();  // the next iteration's loads overwrite this buffer
    }

    // Epilogue: O = acc / l, LSE = m2 ln 2 + ln l.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = lsum[r];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      const int64_t i = ri[r];
      if (i < mask.sq) {
        T* orow = o + (q_row0 + i) * D;
#pragma unroll
        for (int n = 0; n < DT; ++n) {
          const int col = n * 8 + 2 * tq;
          if (col < D)  // D % 8 == 0: col + 1 < D too
            *reinterpret_cast<uint32_t*>(orow + col) = pack2<T>(oacc[n][2 * r] * inv, oacc[n][2 * r + 1] * inv);
        }
        if (lse && tq == 0) lse[q_row0 + i] = l > 0.0f ? m2[r] * att::kLn2 + logf(l) : -INFINITY;
      }
    }
    __syncthreads();  // Qs is reloaded by the next item
  }
}

template <class T, int DP, int BN>
tc_status launch_mma(StreamState* s, const AttentionArgs& a, const std::string& name) {
  const tc_attention_desc& d = a.d;
  const size_t smem = fwd_smem_bytes<DP, BN>();
  auto kernel = attention_fwd_mma<T, DP, BN>;
  if (tc_status st = check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                           "attention_forward: shared memory"))
    return st;
  const int64_t items = (d.seq_q + kBM - 1) / kBM * d.batch * d.heads;
  s->last_kernel = name;
  kernel<<<grid_for(items), kThreads, smem, s->stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse,
      a.alibi, d.batch, d.heads, d.kv_heads, d.head_dim, float(d.softmax_scale), a.softcap, att::make_mask(d),
      a.kv_stride_rows());
  return check(cudaGetLastError(), "attention_forward: launch");
}

template <class T>
tc_status launch_rowwise(StreamState* s, const AttentionArgs& a, const std::string& name) {
  const tc_attention_desc& d = a.d;
  const int64_t rows = d.batch * d.heads * d.seq_q;
  s->last_kernel = name;
  attention_fwd_rowwise<T><<<grid_for((rows + kRowWarps - 1) / kRowWarps), 32 * kRowWarps, 0, s->stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v), static_cast<T*>(a.o), a.lse,
      a.alibi, d.batch, d.heads, d.kv_heads, d.head_dim, float(d.softmax_scale), a.softcap, att::make_mask(d),
      a.kv_stride_rows());
  return check(cudaGetLastError(), "attention_forward: launch");
}

template <class T>
tc_status forward_16bit(StreamState* s, const AttentionArgs& a, const char* tname) {
  const int64_t D = a.d.head_dim;
  const bool aligned = ((uintptr_t(a.q) | uintptr_t(a.k) | uintptr_t(a.v) | uintptr_t(a.o)) & 15) == 0;
  const std::string t(tname);
  const size_t smem =
      D <= 64 ? fwd_smem_bytes<64, 64>() : D <= 128 ? fwd_smem_bytes<128, 64>() : fwd_smem_bytes<256, 32>();
  if (D % 8 != 0 || !aligned || !has_mma(s->device, smem))
    return launch_rowwise<T>(s, a, "attention_fwd_rowwise<" + t + ">");
  if (D <= 64) return launch_mma<T, 64, 64>(s, a, "attention_fwd_mma<" + t + ",64,64>");
  if (D <= 128) return launch_mma<T, 128, 64>(s, a, "attention_fwd_mma<" + t + ",128,64>");
  return launch_mma<T, 256, 32>(s, a, "attention_fwd_mma<" + t + ",256,32>");
}

}  // namespace

tc_status attention_forward(Device&, StreamState* s, const AttentionArgs& a) {
  tc_status st = TC_OK;
  if (a.softcap <= 0.0f && try_cudnn_forward(s, a, &st)) return st;  // cuDNN's graph has no soft-capping here
  switch (a.d.dtype) {
    case TC_DTYPE_F16: return forward_16bit<__half>(s, a, "f16");
    case TC_DTYPE_BF16: return forward_16bit<__nv_bfloat16>(s, a, "bf16");
    default: return launch_rowwise<float>(s, a, "attention_fwd_rowwise<f32>");
  }
}

}  // namespace cuda
}  // namespace tc
