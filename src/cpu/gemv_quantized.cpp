// Quantized GEMV on the CPU.
//
//   Y[m, n] = sum_k f(X)[m, k] * W[n, k]          m < M, n < N, k < K
//
// with W quantised row by row (src/quant/formats.h), f the identity or the
// RMS norm f(x)[k] = x[k] * gamma[k] / sqrt(mean(x^2) + eps). X (f16, bf16
// or f32) is first widened to f32 (and normalised) into a scratch matrix.
// Then either
//  - the weights are dequantised in registers and multiplied in f32
//    (quant_dot_avx512/avx2.cpp, or the portable loop here): the result
//    differs from an exact product of the dequantised weights only by f32
//    rounding. Every format, and always for f32 activations; or
//  - for f16/bf16 activations against Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K on AVX512-VNNI
//    processors, X is quantised to 8 bits per block of 32 and the products
//    are integer dot products (quant_dot_vnni.cpp), as llama.cpp computes;
//    with M >= kAmxMinRows (a prompt) on AMX-INT8 processors the same
//    8-bit products run as tile products (quant_gemm_amx.cpp), each
//    weight block unpacked once per call and used by every 16 rows of X;
//    otherwise, for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K with
//    the caller's copy of W interleaved by eight rows (w_rows8), the same
//    8-bit terms with one 256-bit dot product for eight rows of W at a time
//    (quant_rows8_vnni.cpp). Q5_K has no 8-bit row kernel: its products
//    are 8-bit on the interleaved copy only, exact f32 on GGUF's rows.
//
// At batch 1 (decode) the product streams W once and does two flops per
// weight: it is bound by memory bandwidth. Threads split the N rows; each row
// is dotted with up to four rows of X at a time while it sits in L1, so W is
// read from memory once for any M. For larger M, blocks of X rows and of W
// rows are sized to stay in L2 while the other block streams past.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "cpu/convert.h"
#include "cpu/cpu_features.h"
#include "cpu/ops.h"
#include "cpu/row_norm.h"
#include "cpu/quant_dot.h"
#include "cpu/thread_pool.h"
#include "quant/formats.h"

namespace tc {
namespace cpu {
namespace {

// The portable kernel: dequantise the row with the reference code into a
// scratch row, then plain f32 dot products.
void dots_portable(int32_t fmt, const uint8_t* w, int64_t K, const float* const* x, int mt, float* out) {
  thread_local std::vector<float> row;
  if (int64_t(row.size()) < K) row.resize(size_t(K));
  quant::dequantize_row(fmt, w, row.data(), K);
  for (int m = 0; m < mt; ++m) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t k = 0;
    for (; k + 4 <= K; k += 4) {
      s0 += row[k] * x[m][k];
      s1 += row[k + 1] * x[m][k + 1];
      s2 += row[k + 2] * x[m][k + 2];
      s3 += row[k + 3] * x[m][k + 3];
    }
    for (; k < K; ++k) s0 += row[k] * x[m][k];
    out[m] = (s0 + s1) + (s2 + s3);
  }
}

// The instruction set for this call: the best that features() allows
// (TC_CPU_ISA=avx512 keeps AVX-512 without the VNNI integer path).
enum class Isa { Portable, Avx2, Avx512, Vnni };

Isa pick_isa() {
  const Features& f = features();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl && f.fma && f.f16c;
  if (avx512 && f.avx512_vnni) return note_kernel("gemv_quantized/avx512_vnni"), Isa::Vnni;
  if (avx512) return note_kernel("gemv_quantized/avx512"), Isa::Avx512;
  if (f.avx2 && f.fma && f.f16c) return note_kernel("gemv_quantized/avx2"), Isa::Avx2;
  return note_kernel("gemv_quantized/portable"), Isa::Portable;
}

// Row kernel for (fmt, isa); null means the portable kernel.
RowDots pick_dots(int32_t fmt, Isa isa) {
  if (isa == Isa::Avx512 || isa == Isa::Vnni) return row_dots_avx512(fmt);
  if (isa == Isa::Avx2) return row_dots_avx2(fmt);
  return nullptr;
}

void store_row(tc_dtype dtype, const float* src, void* dst, int64_t n) {
  switch (dtype) {
    case TC_DTYPE_F32: std::memcpy(dst, src, size_t(n) * 4); break;
    case TC_DTYPE_F16: narrow_row(false, src, static_cast<uint16_t*>(dst), n); break;
    default: narrow_row(true, src, static_cast<uint16_t*>(dst), n); break;
  }
}

void load_row(tc_dtype dtype, const void* src, float* dst, int64_t n) {
  switch (dtype) {
    case TC_DTYPE_F32: std::memcpy(dst, src, size_t(n) * 4); break;
    case TC_DTYPE_F16: widen_row(false, static_cast<const uint16_t*>(src), dst, n); break;
    default: widen_row(true, static_cast<const uint16_t*>(src), dst, n); break;
  }
}

// Rows of X against a W interleaved by eight (a.w_rows8): X quantised
// in its natural order, threads over groups of eight rows of W, each group
// against the rows of X kMaxTile at a time while it is in cache. A row of
// X's arithmetic does not depend on the others (the same for any M).
tc_status run_rows8(const GemvQuantizedArgs& a, const float* xs) {
  note_kernel("gemv_quantized/avx512_vnni_rows8");
  const int64_t M = a.M, N = a.N, K = a.K, nb = K / 32;
  thread_local std::vector<int8_t> xq;
  thread_local std::vector<float> dx, sx;
  thread_local std::vector<int32_t> s16;
  thread_local std::vector<QxNatural> rows;
  if (xq.size() < size_t(M * K)) xq.resize(size_t(M * K));
  if (dx.size() < size_t(M * nb)) dx.resize(size_t(M * nb)), sx.resize(size_t(M * nb)), s16.resize(size_t(2 * M * nb));
  rows.resize(size_t(M));
  for (int64_t m = 0; m < M; ++m) {
    rows[size_t(m)] = {xq.data() + m * K, dx.data() + m * nb, sx.data() + m * nb, s16.data() + 2 * m * nb};
    quantize_natural(xs + m * K, K, &rows[size_t(m)]);
  }
  const QxNatural* rows_p = rows.data();  // the workers read it through this (rows is this thread's)
  const uint8_t* w8 = static_cast<const uint8_t*>(a.w_rows8);
  const uint64_t group_bytes = uint64_t(nb) * uint64_t(quant::rows8_block_bytes(a.fmt));
  const size_t es = dtype_size(a.dtype);
  char* y = static_cast<char*>(a.y);
  const int64_t groups = N / 8;
  // Threads take whole pairs of groups (quant::rows8_paired stores them interleaved), the last group alone where
  // N / 8 is odd.
  const int64_t pairs = (groups + 1) / 2;
  // As run(): a product of under 128 KB of weights (per row of X, up to 8) stays on this thread.
  const uint64_t work = uint64_t(groups) * group_bytes * uint64_t(std::min<int64_t>(M, 8));
  // Otherwise about two chunks a thread: with parallel_for's four, SmolLM2-135M's
  // one-token step (products of 36-864 pairs) decoded 5% slower on two Zen 5
  // threads (each chunk restarts the hardware's streams through W and pays
  // the lambda's set-up).
  const int64_t grain =
      work < (128u << 10)
          ? pairs
          : std::max<int64_t>({int64_t(1), 2048 / (K * std::min<int64_t>(M, 8)) / 2 + 1,
                               (pairs + 2 * num_threads() - 1) / (2 * num_threads())});
  constexpr int64_t kSubGroups = 64;  // groups a thread finishes before storing their outputs (even: whole pairs)
  parallel_for(pairs, grain, [&](int64_t p0, int64_t p1) {
    const int64_t g0 = 2 * p0, g1 = std::min(groups, 2 * p1);
    // This thread's f32 results of a sub-chunk, [M][rows] (no allocation per call).
    thread_local std::vector<float> yt;
    if (yt.size() < size_t(M * 8 * kSubGroups)) yt.resize(size_t(M * 8 * kSubGroups));
    for (int64_t s0 = g0; s0 < g1; s0 += kSubGroups) {
      const int64_t s1 = std::min(g1, s0 + kSubGroups), rows = 8 * (s1 - s0);
      for (int64_t g = s0; g < s1;) {
        const uint8_t* grp = w8 + uint64_t(g) * group_bytes;
        const int span = g + 1 < s1 ? 2 : 1;  // groups of eight rows this pass
        for (int64_t m0 = 0; m0 < M; m0 += kMaxTile) {
          const int mt = int(std::min<int64_t>(kMaxTile, M - m0));
          const QxNatural* rp[kMaxTile];
          for (int j = 0; j < mt; ++j) rp[j] = rows_p + m0 + j;
          float out[16 * kMaxTile];
          if (span == 2) {
            rows8_pair_dots_vnni(a.fmt, grp, K, rp, mt, out);
          } else {
            rows8_dots_vnni(a.fmt, grp, K, rp, mt, out);
          }
          for (int j = 0; j < mt; ++j)
            for (int r = 0; r < 8 * span; ++r) yt[size_t((m0 + j) * rows + 8 * (g - s0) + r)] = out[8 * span * j + r];
        }
        g += span;
      }
      for (int64_t m = 0; m < M; ++m) store_row(a.dtype, yt.data() + m * rows, y + size_t(m * N + 8 * s0) * es, rows);
    }
  });
  return TC_OK;
}

// The 8-bit products of many rows on AMX: X quantised into 16-row tiles,
// threads split W into panels of 16 rows.
tc_status run_amx(const GemvQuantizedArgs& a, const float* xs, uint64_t row_bytes) {
  note_kernel("gemv_quantized/amx_int8");
  const int64_t M = a.M, N = a.N, K = a.K, nb = K / 32, Mp = (M + 15) / 16 * 16;
  const size_t es = dtype_size(a.dtype);
  // The caller's scratch (a thread_local named inside the lambdas below
  // would be each worker's own).
  thread_local std::vector<int8_t> xq_store;
  thread_local std::vector<float> dx_store, sx_store;
  if (xq_store.size() < size_t(Mp * K)) xq_store.resize(size_t(Mp * K));
  if (dx_store.size() < size_t(Mp * nb)) dx_store.resize(size_t(Mp * nb)), sx_store.resize(size_t(Mp * nb));
  int8_t* xq = xq_store.data();
  float *dx = dx_store.data(), *sx = sx_store.data();
  if (Mp > M) {  // the last row of tiles, whose padding rows stay zero
    const int64_t t0 = M / 16 * nb;
    std::memset(xq + 512 * t0, 0, size_t(512 * nb));
    std::fill(dx + 16 * t0, dx + Mp * nb, 0.0f);
    std::fill(sx + 16 * t0, sx + Mp * nb, 0.0f);
  }
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) quantize_activations_amx(xs + m * K, K, m, xq, dx, sx);
  });
  const QxTiles x{M, K, xq, dx, sx};
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  char* y = static_cast<char*>(a.y);
  // Chunks of whole panels; a few per thread.
  const int64_t panels = (N + 15) / 16;
  parallel_for(panels, 1, [&](int64_t q0, int64_t q1) {
    const int64_t n0 = q0 * 16, n1 = std::min(N, q1 * 16), rows = n1 - n0;
    thread_local std::vector<float> yt;  // this thread's results of the chunk, [M][rows]
    if (yt.size() < size_t(M * rows)) yt.resize(size_t(M * rows));
    quant_gemm_amx(a.fmt, x, w, row_bytes, n0, n1, yt.data(), rows);
    for (int64_t m = 0; m < M; ++m) store_row(a.dtype, yt.data() + m * rows, y + size_t(m * N + n0) * es, rows);
  });
  return TC_OK;
}

tc_status run(const GemvQuantizedArgs& a) {
  const quant::FormatInfo& f = *quant::format_info(a.fmt);
  const int64_t M = a.M, N = a.N, K = a.K;
  const size_t es = dtype_size(a.dtype);
  const uint64_t row_bytes = uint64_t(K / f.block_elems) * uint64_t(f.block_bytes);

  // X in f32, normalised when fused. f32 input without a norm is used as is.
  thread_local std::vector<float> xs_store;
  const float* xs = static_cast<const float*>(a.x);
  if (a.dtype != TC_DTYPE_F32 || a.gamma) {
    if (xs_store.size() < size_t(M * K)) xs_store.resize(size_t(M * K));
    for (int64_t m = 0; m < M; ++m)
      load_row(a.dtype, static_cast<const char*>(a.x) + size_t(m * K) * es, xs_store.data() + m * K, K);
    if (a.gamma) {
      std::vector<float> g(static_cast<size_t>(K));
      load_row(a.dtype, a.gamma, g.data(), K);
      for (int64_t m = 0; m < M; ++m) {
        float* r = xs_store.data() + m * K;
        const float rstd = rstd_of(r, K, a.eps);
        for (int64_t k = 0; k < K; ++k) r[k] = r[k] * rstd * g[size_t(k)];
      }
    }
    xs = xs_store.data();
  }

  const Isa isa = pick_isa();
  const RowDots dots = pick_dots(a.fmt, isa);
  // f16/bf16 activations against Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K on VNNI processors: X quantised to
  // 8 bits per block, integer dot products (quant_dot_vnni.cpp). Their error,
  // at most half a step of 1/127 of each block's largest |x| per element, is
  // below the f16/bf16 rounding of the output for typical activations; f32
  // activations always take the exact f32 path.
  const bool q8 = isa == Isa::Vnni && a.dtype != TC_DTYPE_F32;
  const QxDots qdots = q8 ? row_dots_vnni(a.fmt) : nullptr;
  const bool amx = qdots && M >= kAmxMinRows && quant_gemm_amx_supported(a.fmt);
  if (amx) return run_amx(a, xs, row_bytes);
  if (q8 && a.w_rows8 && quant::has_rows8(a.fmt) && N % 8 == 0) return run_rows8(a, xs);
  thread_local std::vector<int8_t> qx_q;
  thread_local std::vector<int32_t> qx_bias;
  thread_local std::vector<float> qx_dx, qx_sx;
  thread_local std::vector<QxRow> qx;  // the workers read it through qxr (a thread_local named in a lambda is the worker's own)
  if (qdots) {
    const int64_t np = qx_pairs(K), nb = K / 32;
    if (qx_q.size() < size_t(M * np * 64)) qx_q.resize(size_t(M * np * 64));
    if (qx_bias.size() < size_t(M * np * 16)) qx_bias.resize(size_t(M * np * 16));
    if (qx_dx.size() < size_t(M * np * 16)) qx_dx.resize(size_t(M * np * 16));
    if (qx_sx.size() < size_t(M * nb)) qx_sx.resize(size_t(M * nb));
    qx.resize(size_t(M));
    for (int64_t m = 0; m < M; ++m) {
      qx[size_t(m)] = {qx_q.data() + m * np * 64, qx_bias.data() + m * np * 16, qx_dx.data() + m * np * 16,
                       qx_sx.data() + m * nb};
      quantize_activations(a.fmt, xs + m * K, K, &qx[size_t(m)]);
    }
  }
  const QxRow* qxr = qx.data();
  const uint8_t* w = static_cast<const uint8_t*>(a.w);
  char* y = static_cast<char*>(a.y);

  // Blocking: W rows in sub-chunks of ~256 KB, X rows in blocks of ~256 KB,
  // so both stay in L2 while the loops cross them.
  const int64_t n_sub = std::max<int64_t>(1, int64_t((256 << 10) / std::max<uint64_t>(row_bytes, 1)));
  const int64_t m_blk = std::max<int64_t>(kMaxTile, (256 << 10) / (K * 4) / kMaxTile * kMaxTile);
  // Enough rows per task that dispatch is cheap, enough tasks to balance;
  // a product of under 128 KB of weights (per row of X, up to 8) runs on
  // this thread alone: waking a worker costs about what it would save
  // (a small model's k and v products at decode).
  const uint64_t work = uint64_t(N) * row_bytes * uint64_t(std::min<int64_t>(M, 8));
  const int64_t grain =
      work < (128u << 10) ? N : std::max<int64_t>(1, 16384 / (K * std::min<int64_t>(M, 8)) + 1);

  constexpr int64_t kPrefetchRows = 1;
  parallel_for(N, grain, [&](int64_t n0, int64_t n1) {
    // This thread's f32 results of a sub-chunk, [M][rows] (no allocation per call).
    thread_local std::vector<float> yt;
    if (yt.size() < size_t(M * std::min(n_sub, n1 - n0))) yt.resize(size_t(M * std::min(n_sub, n1 - n0)));
    for (int64_t s0 = n0; s0 < n1; s0 += n_sub) {
      const int64_t s1 = std::min(n1, s0 + n_sub), rows = s1 - s0;
      for (int64_t mb = 0; mb < M; mb += m_blk) {
        const int64_t me = std::min(M, mb + m_blk);
        for (int64_t n = s0; n < s1; ++n) {
          const uint8_t* wr = w + uint64_t(n) * row_bytes;
          // Ask for the next row while this one is computed: a thread
          // streams its rows from DRAM faster than the hardware prefetcher
          // alone brings them.
          if (n + kPrefetchRows < n1)
            for (uint64_t off = 0; off < row_bytes; off += 64) __builtin_prefetch(wr + kPrefetchRows * row_bytes + off);
          for (int64_t m0 = mb; m0 < me; m0 += kMaxTile) {
            const int mt = int(std::min<int64_t>(kMaxTile, me - m0));
            const float* xp[kMaxTile];
            const QxRow* qp[kMaxTile];
            float out[kMaxTile];
            for (int j = 0; j < mt; ++j) {
              xp[j] = xs + (m0 + j) * K;
              if (qdots) qp[j] = qxr + m0 + j;
            }
            if (qdots) qdots(wr, K, qp, mt, out);
            else if (dots) dots(wr, K, xp, mt, out);
            else dots_portable(a.fmt, wr, K, xp, mt, out);
            for (int j = 0; j < mt; ++j) yt[size_t((m0 + j) * rows + (n - s0))] = out[j];
          }
        }
      }
      for (int64_t m = 0; m < M; ++m) store_row(a.dtype, yt.data() + m * rows, y + size_t(m * N + s0) * es, rows);
    }
  });
  return TC_OK;
}

}  // namespace

tc_status gemv_quantized(const GemvQuantizedArgs& args) { return run(args); }

tc_status fused_rmsnorm_gemv_quantized(const GemvQuantizedArgs& args) { return run(args); }

}  // namespace cpu
}  // namespace tc
