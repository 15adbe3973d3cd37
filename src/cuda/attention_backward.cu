// Attention backward on the GPU, FlashAttention-2 style (semantics: the CPU
// kernel, src/cpu/attention_backward.cpp).
//
// With s[i,j] = scale <q_i, k_j> + slope_h (j - p_i) over the keys row i sees
// (att::Mask), the forward's LSE gives the probabilities back directly:
//
//   P[i,j]  = exp(s[i,j] - LSE_i)                  (0 where the row does not see j)
//   Dd_i    = <dO_i, O_i>                          (= sum_j P[i,j] dP[i,j])
//   dP[i,j] = <dO_i, v_j>
//   dS[i,j] = scale * P[i,j] (dP[i,j] - Dd_i)
//   dV_j    = sum_i P[i,j] dO_i,  dK_j = sum_i dS[i,j] q_i,  dQ_i = sum_j dS[i,j] k_j
//
// where for dK and dV the sums run over every query head of the kv head's
// group (GQA). Dd is computed first (attention_bwd_dd) into the per-stream
// scratch.
//
// cuDNN's fused engines run first where they express these semantics
// exactly (attention_cudnn.cu, "cudnn_sdpa_bprop"); otherwise two paths (the
// one that ran is s->last_kernel):
//   attention_bwd_mma<T, DP>  f16/bf16, head_dim % 8 == 0 and <= 128, 16-byte
//       aligned operands: one CTA of 4 warps per (64-key tile, kv head, batch);
//       each warp owns 16 keys and keeps their dK, dV in registers over every
//       query tile (of every head of the group) that sees the key tile. Per
//       query tile (Q, dO double-buffered through cp.async): S^T = K Q^T and
//       dP^T = V dO^T, P^T and dS^T from them, dV += P^T dO, dK += dS^T Q on the
//       tensor cores; dS goes through shared memory (transposed) so that each
//       warp forms dQ for 16 query rows, dQ += dS K, added with f32 atomicAdd
//       into an f32 accumulator in the stream scratch; attention_bwd_dq_convert
//       writes dQ from it at the end.
//   attention_bwd_dq_rowwise<T> + attention_bwd_dkdv_rowwise<T>  everything
//       else (f32, head_dim > 128 or not a multiple of 8, unaligned, GPUs
//       before sm_80 or with too little shared memory for the tiles): one warp
//       per query row for dQ, one warp per key row for dK and dV (looping over
//       the rows of every head of the group that see it), f32 maths, no atomics.
#include <cmath>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "cuda/attention_common.cuh"
#include "cuda/attention_cudnn.h"
#include "cuda/device.h"

namespace tc {
namespace cuda {
namespace {

using namespace att;

unsigned grid_for(int64_t items) { return unsigned(items < (int64_t(1) << 24) ? items : (int64_t(1) << 24)); }

constexpr int kRowWarps = 4;

// Dd[r] = <dO_r, O_r>, one warp per row.
template <class T>
__global__ void __launch_bounds__(32 * kRowWarps)
    attention_bwd_dd(const T* __restrict__ o, const T* __restrict__ d_o, float* __restrict__ dd, int64_t nrows,
                     int64_t D) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; row < nrows;
       row += int64_t(gridDim.x) * kRowWarps) {
    float acc = 0.0f;
    for (int64_t d = lane; d < D; d += 32) acc += to_f32(o[row * D + d]) * to_f32(d_o[row * D + d]);
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) dd[row] = acc;
  }
}

// ---- fallback: warp per row -------------------------------------------------------------------

// dQ_i = sum_j dS[i,j] k_j for one query row per warp; lane holds d = lane + 32 t.
template <class T>
__global__ void __launch_bounds__(32 * kRowWarps)
    attention_bwd_dq_rowwise(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                             const T* __restrict__ d_o, const float* __restrict__ lse, const float* __restrict__ dd,
                             T* __restrict__ dq, const float* __restrict__ alibi, int64_t B, int64_t H, int64_t Hkv,
                             int64_t D, float scale, Mask mask) {
  const int lane = threadIdx.x & 31;
  const int64_t G = H / Hkv, nrows = B * H * mask.sq;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; row < nrows;
       row += int64_t(gridDim.x) * kRowWarps) {
    const int64_t i = row % mask.sq, h = (row / mask.sq) % H, b = row / (mask.sq * H), g = h / G;
    const int64_t pos = i + mask.off, kv0 = (b * Hkv + g) * mask.skv;
    const float slope = alibi ? alibi[h] : 0.0f, l = lse[row], ddr = dd[row];
    float qr[8], gr[8], acc[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int64_t d = lane + 32 * t;
      qr[t] = d < D ? to_f32(q[row * D + d]) : 0.0f;
      gr[t] = d < D ? to_f32(d_o[row * D + d]) : 0.0f;
      acc[t] = 0.0f;
    }
    const int64_t ke = mask.key_end(i);
    for (int64_t j = mask.key_begin(i); j < ke; ++j) {
      const T* kr = k + (kv0 + j) * D;
      const T* vr = v + (kv0 + j) * D;
      float sq = 0.0f, sp = 0.0f;
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < D) {
          sq += qr[t] * to_f32(kr[d]);
          sp += gr[t] * to_f32(vr[d]);
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) {
        sq += __shfl_xor_sync(0xffffffffu, sq, off);
        sp += __shfl_xor_sync(0xffffffffu, sp, off);
      }
      const float p = expf(scale * sq + slope * float(j - pos) - l);
      const float ds = p * (sp - ddr) * scale;
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int64_t d = lane + 32 * t;
        if (d < D) acc[t] += ds * to_f32(kr[d]);
      }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < D) dq[row * D + d] = from_f32<T>(acc[t]);
    }
  }
}

// dK_j, dV_j for one key row per warp, over the rows of every head of the group.
template <class T>
__global__ void __launch_bounds__(32 * kRowWarps)
    attention_bwd_dkdv_rowwise(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                               const T* __restrict__ d_o, const float* __restrict__ lse,
                               const float* __restrict__ dd, T* __restrict__ dk, T* __restrict__ dv,
                               const float* __restrict__ alibi, int64_t B, int64_t H, int64_t Hkv, int64_t D,
                               float scale, Mask mask) {
  const int lane = threadIdx.x & 31;
  const int64_t G = H / Hkv, nrows = B * Hkv * mask.skv;
  for (int64_t row = int64_t(blockIdx.x) * kRowWarps + threadIdx.x / 32; row < nrows;
       row += int64_t(gridDim.x) * kRowWarps) {
    const int64_t j = row % mask.skv, g = (row / mask.skv) % Hkv, b = row / (mask.skv * Hkv);
    float kr[8], vr[8], ak[8], av[8];
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int64_t d = lane + 32 * t;
      kr[t] = d < D ? to_f32(k[row * D + d]) : 0.0f;
      vr[t] = d < D ? to_f32(v[row * D + d]) : 0.0f;
      ak[t] = av[t] = 0.0f;
    }
    const int64_t ib = mask.row_begin(j), ie = mask.row_end(j);
    for (int64_t hh = 0; hh < G; ++hh) {
      const int64_t h = g * G + hh, q0 = (b * H + h) * mask.sq;
      const float slope = alibi ? alibi[h] : 0.0f;
      for (int64_t i = ib; i < ie; ++i) {
        const T* qr = q + (q0 + i) * D;
        const T* gr = d_o + (q0 + i) * D;
        float sq = 0.0f, sp = 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const int64_t d = lane + 32 * t;
          if (d < D) {
            sq += kr[t] * to_f32(qr[d]);
            sp += vr[t] * to_f32(gr[d]);
          }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
          sq += __shfl_xor_sync(0xffffffffu, sq, off);
          sp += __shfl_xor_sync(0xffffffffu, sp, off);
        }
        const float p = expf(scale * sq + slope * float(j - (i + mask.off)) - lse[q0 + i]);
        const float ds = p * (sp - dd[q0 + i]) * scale;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const int64_t d = lane + 32 * t;
          if (d < D) {
            av[t] += p * to_f32(gr[d]);
            ak[t] += ds * to_f32(qr[d]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const int64_t d = lane + 32 * t;
      if (d < D) {
        dk[row * D + d] = from_f32<T>(ak[t]);
        dv[row * D + d] = from_f32<T>(av[t]);
      }
    }
  }
}

// ---- fast path: tensor cores ------------------------------------------------------------------

constexpr int kBN = 64;  // keys per CTA: 4 warps x 16
constexpr int kBM = 64;  // query rows per step
constexpr int kThreads = 128;

template <int DP>
constexpr size_t bwd_smem_bytes() {
  // K, V [kBN][DP+8]; Q, dO [2][kBM][DP+8]; dS [kBM][kBN+8]; lse2, Dd [2][kBM] f32.
  return size_t(2 * kBN + 4 * kBM) * (DP + 8) * 2 + size_t(kBM) * (kBN + 8) * 2 + 4 * kBM * 4;
}

template <class T, int DP, int LDS>
__device__ __forceinline__ void load_tile(T* dst, const T* src, int64_t r0, int nrows, int64_t limit, int64_t D) {
  constexpr int kChunks = DP / 8;
  for (int c = threadIdx.x; c < nrows * kChunks; c += kThreads) {
    const int r = c / kChunks, ch = c % kChunks;
    const bool ok = r0 + r < limit && ch * 8 < D;
    cp_async16(dst + r * LDS + ch * 8, ok ? src + (r0 + r) * D + ch * 8 : src, ok);
  }
}

template <class T, int DP>
__global__ void __launch_bounds__(kThreads)
    attention_bwd_mma(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const T* __restrict__ d_o, const float* __restrict__ lse, const float* __restrict__ dd,
                      float* __restrict__ dq_acc, T* __restrict__ dk, T* __restrict__ dv,
                      const float* __restrict__ alibi, int64_t B, int64_t H, int64_t Hkv, int64_t D, float scale,
                      Mask mask) {
  constexpr int LDS = DP + 8, LDP = kBN + 8;
  constexpr int DT = DP / 8;    // n-tiles over head_dim
  constexpr int KS = DP / 16;   // k-steps over head_dim
  constexpr int RT = kBM / 8;   // n-tiles over query rows (S^T, dP^T)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* Ks = reinterpret_cast<T*>(smem_raw);
  T* Vs = Ks + kBN * LDS;
  T* Qs = Vs + kBN * LDS;       // [2][kBM][LDS]
  T* Gs = Qs + 2 * kBM * LDS;   // dO, [2][kBM][LDS]
  T* Ps = Gs + 2 * kBM * LDS;   // dS as [row][key], [kBM][LDP]
  float* Ls = reinterpret_cast<float*>(Ps + kBM * LDP);  // LSE * log2(e), [2][kBM]
  float* Ds = Ls + 2 * kBM;                               // Dd, [2][kBM]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
  const int64_t G = H / Hkv, nkt = (mask.skv + kBN - 1) / kBN, BG = B * Hkv;
  const float scale2 = scale * kLog2e;

  for (int64_t item = blockIdx.x; item < nkt * BG; item += gridDim.x) {
    const int64_t kt = item / BG, bg = item % BG, g = bg % Hkv, b = bg / Hkv;
    const int64_t j0 = kt * kBN, j_last = (j0 + kBN < mask.skv ? j0 + kBN : mask.skv) - 1;
    const int64_t kv_row0 = bg * mask.skv;
    // Query rows that see some key of the tile, as whole row tiles.
    const int64_t ib = mask.row_begin(j0), ie = mask.row_end(j_last);
    const int64_t i_start = ib / kBM * kBM;
    const int64_t nqt = ie > ib ? (ie - i_start + kBM - 1) / kBM : 0;
    const int64_t nsteps = nqt * G;

    // This thread's two keys (accumulator rows): r = 0 -> 16 warp + gq, r = 1 -> +8.
    int64_t kj[2];
    kj[0] = j0 + warp * 16 + gq;
    kj[1] = kj[0] + 8;
    float dk_acc[DT][4], dv_acc[DT][4];
#pragma unroll
    for (int n = 0; n < DT; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk_acc[n][e] = dv_acc[n][e] = 0.0f;

    // Step st: head g * G + st / nqt, query tile i_start + (st % nqt) * kBM.
    auto issue = [&](int64_t st, int buf) {
      const int64_t h = g * G + st / nqt, i0 = i_start + (st % nqt) * kBM, q_row0 = (b * H + h) * mask.sq;
      load_tile<T, DP, LDS>(Qs + buf * kBM * LDS, q + q_row0 * D, i0, kBM, mask.sq, D);
      load_tile<T, DP, LDS>(Gs + buf * kBM * LDS, d_o + q_row0 * D, i0, kBM, mask.sq, D);
      for (int r = tid; r < kBM; r += kThreads) {
        const bool ok = i0 + r < mask.sq;
        Ls[buf * kBM + r] = ok ? lse[q_row0 + i0 + r] * kLog2e : 0.0f;
        Ds[buf * kBM + r] = ok ? dd[q_row0 + i0 + r] : 0.0f;
      }
    };
    if (nsteps > 0) {
      load_tile<T, DP, LDS>(Ks, k + kv_row0 * D, j0, kBN, mask.skv, D);
      load_tile<T, DP, LDS>(Vs, v + kv_row0 * D, j0, kBN, mask.skv, D);
      issue(0, 0);
      cp_async_commit();
    }
    for (int64_t st = 0; st < nsteps; ++st) {
      const int buf = int(st & 1);
      if (st + 1 < nsteps) {
        issue(st + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const int64_t h = g * G + st / nqt, i0 = i_start + (st % nqt) * kBM, q_row0 = (b * H + h) * mask.sq;
      const float slope2 = alibi ? alibi[h] * kLog2e : 0.0f;
      const T* Qt = Qs + buf * kBM * LDS;
      const T* Gt = Gs + buf * kBM * LDS;
      const float* Lt = Ls + buf * kBM;
      const float* Dt = Ds + buf * kBM;

      // S^T[16 keys x kBM rows] = K_w Q^T and dP^T = V_w dO^T. A operands: the
      // warp's 16 rows of K / V (ldmatrix, as Q in the forward); B operands:
      // Q / dO rows (ldmatrix, as K in the forward).
      float sT[RT][4], pT[RT][4];
#pragma unroll
      for (int n = 0; n < RT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) sT[n][e] = pT[n][e] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        uint32_t ak[4], av[4];
        ldmatrix_x4(ak, Ks + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
        ldmatrix_x4(av, Vs + (warp * 16 + (lane & 15)) * LDS + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < RT / 2; ++np) {
          uint32_t bq[4], bg4[4];
          const int off = (np * 16 + (lane & 7) + (lane >> 4) * 8) * LDS + kk * 16 + ((lane >> 3) & 1) * 8;
          ldmatrix_x4(bq, Qt + off);
          ldmatrix_x4(bg4, Gt + off);
          mma16816<T>(sT[2 * np], ak, bq[0], bq[1]);
          mma16816<T>(sT[2 * np + 1], ak, bq[2], bq[3]);
          mma16816<T>(pT[2 * np], av, bg4[0], bg4[1]);
          mma16816<T>(pT[2 * np + 1], av, bg4[2], bg4[3]);
        }
      }

      // P^T and dS^T. Element e of n-tile n: key kj[e / 2], row i0 + 8 n + 2 tq + e % 2.
      const int64_t i_tile_last = i0 + kBM - 1;
      const bool edge = i_tile_last >= mask.sq || j0 + kBN > mask.skv || mask.key_begin(i_tile_last) > j0 ||
                        mask.key_end(i0) < j0 + kBN;
#pragma unroll
      for (int n = 0; n < RT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rl = n * 8 + 2 * tq + (e & 1);
          const int64_t i = i0 + rl, j = kj[e >> 1];
          float x = sT[n][e] * scale2 - Lt[rl];
          if (alibi) x += slope2 * float(j - (i + mask.off));
          float p = exp2f(x);
          if (edge && (i >= mask.sq || j < mask.key_begin(i) || j >= mask.key_end(i))) p = 0.0f;
          sT[n][e] = p;
          pT[n][e] = p * (pT[n][e] - Dt[rl]) * scale;  // dS^T
        }

      // dS to shared memory as [row][key] for the dQ product.
#pragma unroll
      for (int n = 0; n < RT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int rl = n * 8 + 2 * tq + (e & 1), kl = warp * 16 + gq + 8 * (e >> 1);
          Ps[rl * LDP + kl] = from_f32<T>(pT[n][e]);
        }

      // dV_w += P^T dO, dK_w += dS^T Q: A from the accumulators (rows = keys,
      // k = query rows), B = dO / Q through ldmatrix.trans (as V in the forward).
#pragma unroll
      for (int kk = 0; kk < kBM / 16; ++kk) {
        uint32_t ap[4], as[4];
        ap[0] = pack2<T>(sT[2 * kk][0], sT[2 * kk][1]);
        ap[1] = pack2<T>(sT[2 * kk][2], sT[2 * kk][3]);
        ap[2] = pack2<T>(sT[2 * kk + 1][0], sT[2 * kk + 1][1]);
        ap[3] = pack2<T>(sT[2 * kk + 1][2], sT[2 * kk + 1][3]);
        as[0] = pack2<T>(pT[2 * kk][0], pT[2 * kk][1]);
        as[1] = pack2<T>(pT[2 * kk][2], pT[2 * kk][3]);
        as[2] = pack2<T>(pT[2 * kk + 1][0], pT[2 * kk + 1][1]);
        as[3] = pack2<T>(pT[2 * kk + 1][2], pT[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < DT / 2; ++dp) {
          uint32_t bo[4], bq[4];
          const int off = (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 + (lane >> 4) * 8;
          ldmatrix_x4_trans(bo, Gt + off);
          ldmatrix_x4_trans(bq, Qt + off);
          mma16816<T>(dv_acc[2 * dp], ap, bo[0], bo[1]);
          mma16816<T>(dv_acc[2 * dp + 1], ap, bo[2], bo[3]);
          mma16816<T>(dk_acc[2 * dp], as, bq[0], bq[1]);
          mma16816<T>(dk_acc[2 * dp + 1], as, bq[2], bq[3]);
        }
      }
      __syncthreads();  // dS complete

      // dQ[16 rows of this warp x DP] = dS[rows, kBN keys] K: A from Ps, B = K
      // through ldmatrix.trans; added to the f32 accumulator.
      {
        float dq[DT][4];
#pragma unroll
        for (int n = 0; n < DT; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
          uint32_t a[4];
          ldmatrix_x4(a, Ps + (warp * 16 + (lane & 15)) * LDP + kk * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int dp = 0; dp < DT / 2; ++dp) {
            uint32_t bk[4];
            const int off = (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + dp * 16 + (lane >> 4) * 8;
            ldmatrix_x4_trans(bk, Ks + off);
            mma16816<T>(dq[2 * dp], a, bk[0], bk[1]);
            mma16816<T>(dq[2 * dp + 1], a, bk[2], bk[3]);
          }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t i = i0 + warp * 16 + gq + 8 * r;
          if (i < mask.sq) {
            float* acc = dq_acc + (q_row0 + i) * D;
#pragma unroll
            for (int n = 0; n < DT; ++n) {
              const int col = n * 8 + 2 * tq;
              if (col < D) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                // One 8-byte atomic for the pair (col even, rows of even length).
                atomicAdd(reinterpret_cast<float2*>(acc + col), make_float2(dq[n][2 * r], dq[n][2 * r + 1]));
#else
                atomicAdd(acc + col, dq[n][2 * r]);
                atomicAdd(acc + col + 1, dq[n][2 * r + 1]);
#endif
              }
            }
          }
        }
      }
      __syncthreads();  // Ps, and this buffer's Q/dO, are rewritten next step
    }

    // dK, dV of this warp's 16 keys.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (kj[r] < mask.skv) {
        T* dkr = dk + (kv_row0 + kj[r]) * D;
        T* dvr = dv + (kv_row0 + kj[r]) * D;
#pragma unroll
        for (int n = 0; n < DT; ++n) {
          const int col = n * 8 + 2 * tq;
          if (col < D) {
            *reinterpret_cast<uint32_t*>(dkr + col) = pack2<T>(dk_acc[n][2 * r], dk_acc[n][2 * r + 1]);
            *reinterpret_cast<uint32_t*>(dvr + col) = pack2<T>(dv_acc[n][2 * r], dv_acc[n][2 * r + 1]);
          }
        }
      }
    }
    __syncthreads();  // Ks, Vs are reloaded by the next item
  }
}

// dQ = the f32 accumulator in the io dtype.
template <class T>
__global__ void attention_bwd_dq_convert(const float* __restrict__ acc, T* __restrict__ dq, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    dq[e] = from_f32<T>(acc[e]);
}

template <class T>
tc_status launch_dd(StreamState* s, const AttentionBackwardArgs& a, float* dd, const std::string& t) {
  const tc_attention_desc& d = a.d;
  const int64_t rows = d.batch * d.heads * d.seq_q;
  s->last_kernel = "attention_bwd_dd<" + t + ">";
  attention_bwd_dd<T><<<grid_for((rows + kRowWarps - 1) / kRowWarps), 32 * kRowWarps, 0, s->stream>>>(
      static_cast<const T*>(a.o), static_cast<const T*>(a.d_o), dd, rows, d.head_dim);
  return check(cudaGetLastError(), "attention_backward: launch");
}

template <class T>
tc_status backward_rowwise(StreamState* s, const AttentionBackwardArgs& a, float* dd, const std::string& t) {
  const tc_attention_desc& d = a.d;
  const Mask mask = make_mask(d);
  const float scale = float(d.softmax_scale);
  const T *q = static_cast<const T*>(a.q), *k = static_cast<const T*>(a.k), *v = static_cast<const T*>(a.v),
          *g = static_cast<const T*>(a.d_o);
  const int64_t qrows = d.batch * d.heads * d.seq_q, krows = d.batch * d.kv_heads * d.seq_kv;
  s->last_kernel = "attention_bwd_dq_rowwise<" + t + ">";
  attention_bwd_dq_rowwise<T><<<grid_for((qrows + kRowWarps - 1) / kRowWarps), 32 * kRowWarps, 0, s->stream>>>(
      q, k, v, g, a.lse, dd, static_cast<T*>(a.dq), a.alibi, d.batch, d.heads, d.kv_heads, d.head_dim, scale, mask);
  if (tc_status st = check(cudaGetLastError(), "attention_backward: launch")) return st;
  s->last_kernel = "attention_bwd_dkdv_rowwise<" + t + ">";
  attention_bwd_dkdv_rowwise<T><<<grid_for((krows + kRowWarps - 1) / kRowWarps), 32 * kRowWarps, 0, s->stream>>>(
      q, k, v, g, a.lse, dd, static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.alibi, d.batch, d.heads, d.kv_heads,
      d.head_dim, scale, mask);
  return check(cudaGetLastError(), "attention_backward: launch");
}

template <class T, int DP>
tc_status backward_mma(StreamState* s, const AttentionBackwardArgs& a, float* dd, float* dq_acc,
                       const std::string& t) {
  const tc_attention_desc& d = a.d;
  const int64_t qn = d.batch * d.heads * d.seq_q * d.head_dim;
  if (tc_status st = check(cudaMemsetAsync(dq_acc, 0, size_t(qn) * 4, s->stream), "attention_backward: memset"))
    return st;
  const size_t smem = bwd_smem_bytes<DP>();
  auto kernel = attention_bwd_mma<T, DP>;
  if (tc_status st = check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                           "attention_backward: shared memory"))
    return st;
  const int64_t items = (d.seq_kv + kBN - 1) / kBN * d.batch * d.kv_heads;
  s->last_kernel = "attention_bwd_mma<" + t + "," + std::to_string(DP) + ">";
  kernel<<<grid_for(items), kThreads, smem, s->stream>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<const T*>(a.d_o), a.lse, dd, dq_acc, static_cast<T*>(a.dk), static_cast<T*>(a.dv), a.alibi,
      d.batch, d.heads, d.kv_heads, d.head_dim, float(d.softmax_scale), make_mask(d));
  if (tc_status st = check(cudaGetLastError(), "attention_backward: launch")) return st;
  s->last_kernel = "attention_bwd_dq_convert<" + t + ">";
  attention_bwd_dq_convert<T><<<grid_for((qn + 255) / 256), 256, 0, s->stream>>>(dq_acc, static_cast<T*>(a.dq), qn);
  return check(cudaGetLastError(), "attention_backward: launch");
}

template <class T>
tc_status backward_typed(StreamState* s, const AttentionBackwardArgs& a, const std::string& t) {
  const tc_attention_desc& d = a.d;
  const int64_t D = d.head_dim, rows = d.batch * d.heads * d.seq_q;
  const bool aligned = ((uintptr_t(a.q) | uintptr_t(a.k) | uintptr_t(a.v) | uintptr_t(a.d_o) | uintptr_t(a.dk) |
                         uintptr_t(a.dv)) & 15) == 0;
  constexpr bool k16bit = !std::is_same<T, float>::value;
  const bool fast = k16bit && D % 8 == 0 && D <= 128 && aligned &&
                    has_mma(s->device, D <= 64 ? bwd_smem_bytes<64>() : bwd_smem_bytes<128>());
  // Scratch: Dd [rows] f32, then (fast path) the dQ accumulator [rows * D] f32,
  // 256-byte aligned.
  const size_t dd_bytes = (size_t(rows) * 4 + 255) / 256 * 256;
  const size_t need = dd_bytes + (fast ? size_t(rows) * size_t(D) * 4 : 0);
  void* scratch = nullptr;
  if (tc_status st = stream_scratch(s, need, "attention_backward: scratch", &scratch)) return st;
  float* dd = static_cast<float*>(scratch);
  if (tc_status st = launch_dd<T>(s, a, dd, t)) return st;
  if constexpr (k16bit) {
    if (fast) {
      float* dq_acc = reinterpret_cast<float*>(static_cast<char*>(scratch) + dd_bytes);
      if (D <= 64) return backward_mma<T, 64>(s, a, dd, dq_acc, t);
      return backward_mma<T, 128>(s, a, dd, dq_acc, t);
    }
  }
  return backward_rowwise<T>(s, a, dd, t);
}

}  // namespace

tc_status attention_backward(Device&, StreamState* s, const AttentionBackwardArgs& a) {
  tc_status st = TC_OK;
  if (try_cudnn_backward(s, a, &st)) return st;
  switch (a.d.dtype) {
    case TC_DTYPE_F16: return backward_typed<__half>(s, a, "f16");
    case TC_DTYPE_BF16: return backward_typed<__nv_bfloat16>(s, a, "bf16");
    default: return backward_typed<float>(s, a, "f32");
  }
}

}  // namespace cuda
}  // namespace tc
