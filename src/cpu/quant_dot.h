// Row kernels of the quantized GEMV: the dot products of one quantised row of
// W (K weights, format fmt) with up to kMaxTile rows of X in f32:
//
//   out[m] = sum_k w[k] * x[m][k]      m < mt, 1 <= mt <= kMaxTile
//
// w[k] is the dequantised weight (src/quant/formats.h), computed in registers
// and never stored; the products are accumulated in f32. One set per
// instruction set, chosen at run time; each returns null for a format it has
// no kernel for.
#pragma once

#include <cstdint>

namespace tc {
namespace cpu {

constexpr int kMaxTile = 4;

using RowDots = void (*)(const uint8_t* w, int64_t K, const float* const* x, int mt, float* out);

RowDots row_dots_avx512(int32_t fmt);  // AVX-512 F/BW/VL with FMA and F16C
RowDots row_dots_avx2(int32_t fmt);    // AVX2 with FMA and F16C

// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K against activations quantised to 8 bits per
// block of 32 (AVX512-VNNI integer dot products; see quant_dot_vnni.cpp). A
// row of X is prepared once per call: qx_pairs(K) pairs of blocks, each 64
// int8 values, 16 int32 lane offsets and 16 lane scales, plus (Q4_1, Q5_1, Q4_K) K/32
// block sums times their scale.
struct QxRow {
  int8_t* xq;
  int32_t* bias;
  float* dx;
  float* sx;
};
using QxDots = void (*)(const uint8_t* w, int64_t K, const QxRow* const* x, int mt, float* out);
int64_t qx_pairs(int64_t K);
void quantize_activations(int32_t fmt, const float* x, int64_t K, QxRow* row);  // AVX512-VNNI processors only
QxDots row_dots_vnni(int32_t fmt);

// The same 8-bit X in its natural order (xq: K int8; dx, sx: one float a
// block of 32), for a W of format fmt (quant::has_rows8) interleaved by eight
// rows (quant::repack_rows8): out[8 m + r] = row r of the group at `grp`
// against row m of X, m < mt <= kMaxTile (quant_rows8_vnni.cpp).
struct QxNatural {
  int8_t* xq;
  float* dx;
  float* sx;
  int32_t* s16;  // sum xq of each half block (16 values): Q6_K's -32 offset, whose scales are per 16
};
void quantize_natural(const float* x, int64_t K, QxNatural* row);  // AVX512-VNNI processors only
void rows8_dots_vnni(int32_t fmt, const uint8_t* grp, int64_t K, const QxNatural* const* x, int mt, float* out);
// The same for groups 2p and 2p + 1 at once, stored interleaved
// (quant::rows8_paired) or, for the K-quants, one after the other (2p's
// rows then 2p + 1's: out[16 m + r], r < 16).
void rows8_pair_dots_vnni(int32_t fmt, const uint8_t* pair, int64_t K, const QxNatural* const* x, int mt,
                          float* out);

// Products of many rows of X (M >= kAmxMinRows) on AMX-INT8, for Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0 and Q4_K: X quantised to 8 bits per block of 32
// as above (the same values), laid out in tiles of 16 rows x one block:
// row m, block b at tile (m / 16) * K/32 + b, row m % 16 of it, for xq (32
// int8 a row), dx and sx (dx * sum xq; one float a row). Rows M..Mp-1 (Mp =
// M rounded up to 16) are zero (quant_gemm_amx.cpp).
constexpr int64_t kAmxMinRows = 8;
struct QxTiles {
  int64_t M, K;
  const int8_t* xq;
  const float* dx;
  const float* sx;
};
bool quant_gemm_amx_supported(int32_t fmt);  // a kernel for fmt, and the processor and OS allow AMX
void quantize_activations_amx(const float* x, int64_t K, int64_t m, int8_t* xq, float* dx, float* sx);  // row m
// y[m][n - n0] (pitch ldy) for every row m of X and rows n0 <= n < n1 of W.
void quant_gemm_amx(int32_t fmt, const QxTiles& x, const uint8_t* w, uint64_t row_bytes, int64_t n0, int64_t n1,
                    float* y, int64_t ldy);

}  // namespace cpu
}  // namespace tc
