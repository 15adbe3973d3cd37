// The 8-bit products of up to kMaxTile rows of X with a Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q4_K, Q5_K or Q6_K W whose rows are interleaved by eight
// (quant::repack_rows8), on AVX512-VNNI processors:
//
//   y[m][r] = sum_b d_r,b dx_m,b sum_k u_r,b,k xq_m,b,k + c_r,b sx_m,b
//
// (gemv_quantized.cpp's 8-bit contract: X per block of 32 as dx = max|x| /
// 127, xq = rne(x / dx), sx = dx sum xq) with u the unsigned codes the layout
// stores and c what turns them into the weights w = d u + c:
//   Q4_0  u = q in 0..15,     c = -8 d
//   Q4_1  u = q in 0..15,     c = m
//   Q5_0  u = q in 0..31,     c = -16 d   (the fifth bits from their plane)
//   Q5_1  u = q in 0..31,     c = m       (likewise)
//   Q8_0  u = q + 128,        c = -128 d
// (Q4_K, Q5_K and Q6_K: sub-block scales, below.)
// One vpdpbusd multiplies four codes of each of the eight rows (the
// layout's 32 bytes: row r in lanes 4r..4r+3) by the same four bytes of X
// broadcast, so the eight int32 lanes are the eight rows' partial sums: a
// block of 32 weights of 8 rows costs 4 (Q8_0: 8) loads, 8 dot products and
// two FMAs a row of X, where the row kernels (quant_dot_vnni.cpp) spend
// their lanes on one row and need horizontal sums and lane permutes.
// Measured on an AMD EPYC core (256-bit units) in a stand-alone test: 25 GB/s
// of Q4_0 W against 14 for a 256-bit row kernel (bench/results/llama-cpu.md,
// 2026-12-04). Two groups of eight rows go through 512-bit vectors at once
// (dots16, below), except the K-quants' at one row of X (256-bit, one group
// at a time).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/quant_dot.h"
#include "quant/formats.h"

#define TC_VNNI8 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace tc {
namespace cpu {
namespace {

// Two groups of eight rows a pass in 512-bit vectors: group g0's 32-byte
// chunk in the low half, g1's in the high half, so one broadcast of X feeds
// sixteen rows' dot products; out is [m][16]. Where the vector units are
// 512 bits wide (AMD Zen 5) that is twice a 256-bit kernel's work per
// instruction, and half its loads of X per row of W: the 1.1B Q4_0 prompt on
// two threads went from 251-262 to 400-445 tok/s against the 256-bit kernel
// it replaced (bench/results/llama-cpu.md, 2026-12-05). The layout stores a
// pair of groups of the non-K formats interleaved (quant::rows8_paired), so
// each of those vectors
// is one 64-byte load from one stream: with two 32-byte halves from two
// streams the loop's loads were fewer to the bytes and its memory reads
// stalled the core (Zen 5, one row of X: 25.6 against 52.9 GB/s of W on two
// threads in a stand-alone copy of the loop).
// Paired = false reads two groups in the group layout: the K-quants' (whose
// groups are not stored in pairs), or g0 == g1, a lone last group (the low
// half of out kept).
template <bool Paired>
struct PairLoads {
  const uint8_t* o0;
  const uint8_t* o1;
  // Unit u (unit_bytes in the group layout) of the two groups.
  static PairLoads at(const uint8_t* g0, const uint8_t* g1, int64_t u, int64_t unit_bytes) {
    if (Paired) return {g0 + 2 * u * unit_bytes, nullptr};
    return {g0 + u * unit_bytes, g1 + u * unit_bytes};
  }
  // The 32-byte field at byte x of the group layout, both groups.
  TC_VNNI8 __m512i chunk(int x) const {
    if (Paired) return _mm512_loadu_si512(o0 + 2 * x);
    return _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o0 + x))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o1 + x)), 1);
  }
  // The 16-byte field of eight f16 at byte x, both groups, as floats.
  TC_VNNI8 __m512 halves(int x) const {
    if (Paired) return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o0 + 2 * x)));
    return _mm512_cvtph_ps(
        _mm256_inserti128_si256(_mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o0 + x))),
                                _mm_loadu_si128(reinterpret_cast<const __m128i*>(o1 + x)), 1));
  }
  // The 8-byte field at byte x (the K-quants' 8-bit sub-scales, whose groups
  // are not stored in pairs), both groups.
  TC_VNNI8 __m128i bytes8(int x) const {
    static_assert(!Paired, "only the K-quants have 8-byte fields");
    return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(o0 + x)),
                              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(o1 + x)));
  }
};

TC_VNNI8 inline __m512i fifth_bits16(__m512i plane, int j) {
  const __m512i at = j < 4 ? _mm512_slli_epi16(plane, 4 - j) : _mm512_srli_epi16(plane, j - 4);
  return _mm512_and_si512(at, _mm512_set1_epi8(0x10));
}

template <int32_t FMT, int MT, bool Paired>
TC_VNNI8 void dots16(const uint8_t* g0, const uint8_t* g1, int64_t nb, const QxNatural* const* x, float* out) {
  constexpr int64_t kBlock = quant::rows8_block_bytes(FMT);
  constexpr int kCodes = quant::rows8_codes_at(FMT), kPlane = quant::rows8_plane_at(FMT);
  constexpr bool kFive = FMT == quant::Q5_0 || FMT == quant::Q5_1, kMin = FMT == quant::Q4_1 || FMT == quant::Q5_1;
  constexpr float kOffset = kMin ? 1.0f : FMT == quant::Q4_0 ? -8.0f : FMT == quant::Q5_0 ? -16.0f : -128.0f;
  __m512 acc[MT], corr[MT];
  for (int m = 0; m < MT; ++m) acc[m] = corr[m] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t b = 0; b < nb; ++b) {
    const PairLoads<Paired> o = PairLoads<Paired>::at(g0, g1, b, kBlock);
    const __m512i plane = kFive ? o.chunk(kPlane) : _mm512_setzero_si512();
    __m512i u[8];
    for (int j = 0; j < 8; ++j) {
      if (FMT == quant::Q8_0) {
        u[j] = o.chunk(kCodes + 32 * j);
      } else if (j < 4) {
        const __m512i v = o.chunk(kCodes + 32 * j);
        u[j] = _mm512_and_si512(v, m4);
        u[j + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (kFive) {
          u[j] = _mm512_or_si512(u[j], fifth_bits16(plane, j));
          u[j + 4] = _mm512_or_si512(u[j + 4], fifth_bits16(plane, 4 + j));
        }
      }
    }
    const __m512 dw = o.halves(0);
    const __m512 cw = kMin ? o.halves(16) : dw;
    for (int m = 0; m < MT; ++m) {
      const int32_t* xb = reinterpret_cast<const int32_t*>(x[m]->xq + 32 * b);
      __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
      for (int j = 0; j < 4; ++j) {
        d0 = _mm512_dpbusd_epi32(d0, u[j], _mm512_set1_epi32(xb[j]));
        d1 = _mm512_dpbusd_epi32(d1, u[j + 4], _mm512_set1_epi32(xb[4 + j]));
      }
      acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)),
                               _mm512_mul_ps(dw, _mm512_set1_ps(x[m]->dx[b])), acc[m]);
      corr[m] = _mm512_fmadd_ps(cw, _mm512_set1_ps(x[m]->sx[b]), corr[m]);
    }
  }
  for (int m = 0; m < MT; ++m)
    _mm512_storeu_ps(out + 16 * m, _mm512_fmadd_ps(_mm512_set1_ps(kOffset), corr[m], acc[m]));
}

// Q4_K and Q5_K: w = d sc u - dmin m per sub-block of 32 (u in 0..15;
// Q5_K 0..31, the fifth bits from the sub-block's plane). Per superblock and
// pair p of sub-blocks (2p: low nibbles, 2p + 1: high), each of the 8 chunks
// of 32 bytes holds four codes of each row, and a row of X
//   acc += d sc_{2p} dx_{2p} dot_lo + d sc_{2p+1} dx_{2p+1} dot_hi
//   corr += dmin m_{2p} sx_{2p} + dmin m_{2p+1} sx_{2p+1},   y = acc - corr
// (the row kernels' terms), the sub-block scales as float lanes once a
// pair for every row of X.
TC_VNNI8 inline __m512 u8_lanes(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v)); }
TC_VNNI8 inline __m512 i8_lanes(__m128i v) { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)); }

template <int32_t FMT, int MT>
TC_VNNI8 void dots16_q45_k(const uint8_t* g0, const uint8_t* g1, int64_t ns, const QxNatural* const* x,
                           float* out) {
  constexpr int kCodes = quant::rows8_codes_at(FMT), kPlanes = quant::rows8_plane_at(FMT);
  __m512 acc[MT], corr[MT];
  for (int m = 0; m < MT; ++m) acc[m] = corr[m] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int64_t s = 0; s < ns; ++s) {
    const PairLoads<false> o = PairLoads<false>::at(g0, g1, s, quant::rows8_super_bytes(FMT));
    const __m512 dw = o.halves(0), mw = o.halves(16);
    for (int p = 0; p < 4; ++p) {
      const __m512 sc0 = _mm512_mul_ps(dw, u8_lanes(o.bytes8(32 + 16 * p))),
                   sc1 = _mm512_mul_ps(dw, u8_lanes(o.bytes8(40 + 16 * p)));
      const __m512 mn0 = _mm512_mul_ps(mw, u8_lanes(o.bytes8(96 + 16 * p))),
                   mn1 = _mm512_mul_ps(mw, u8_lanes(o.bytes8(104 + 16 * p)));
      // Q5_K: the planes of sub-blocks 2p and 2p + 1 (bit c: chunk c).
      __m512i pl0 = _mm512_setzero_si512(), pl1 = _mm512_setzero_si512();
      if constexpr (FMT == quant::Q5_K) pl0 = o.chunk(kPlanes + 64 * p), pl1 = o.chunk(kPlanes + 64 * p + 32);
      const int64_t b0 = 8 * s + 2 * p;  // X's blocks b0 (low nibbles) and b0 + 1
      __m512i d0[MT], d1[MT];
      for (int m = 0; m < MT; ++m) d0[m] = d1[m] = _mm512_setzero_si512();
      // Unrolled, so that Q5_K's shifts are immediates (GCC leaves Q5_K's
      // four rows of X rolled otherwise: a branch and two shifts by a register a chunk).
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512i v = o.chunk(kCodes + 256 * p + 32 * c);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if constexpr (FMT == quant::Q5_K) {
          lo = _mm512_or_si512(lo, fifth_bits16(pl0, c));
          hi = _mm512_or_si512(hi, fifth_bits16(pl1, c));
        }
        for (int m = 0; m < MT; ++m) {
          const int32_t* xb = reinterpret_cast<const int32_t*>(x[m]->xq + 32 * b0);
          d0[m] = _mm512_dpbusd_epi32(d0[m], lo, _mm512_set1_epi32(xb[c]));
          d1[m] = _mm512_dpbusd_epi32(d1[m], hi, _mm512_set1_epi32(xb[8 + c]));
        }
      }
      for (int m = 0; m < MT; ++m) {
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0[m]), _mm512_mul_ps(sc0, _mm512_set1_ps(x[m]->dx[b0])), acc[m]);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1[m]), _mm512_mul_ps(sc1, _mm512_set1_ps(x[m]->dx[b0 + 1])),
                                 acc[m]);
        corr[m] = _mm512_fmadd_ps(mn0, _mm512_set1_ps(x[m]->sx[b0]), corr[m]);
        corr[m] = _mm512_fmadd_ps(mn1, _mm512_set1_ps(x[m]->sx[b0 + 1]), corr[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(out + 16 * m, _mm512_sub_ps(acc[m], corr[m]));
}

// Q6_K: per block b of 32 weights, the 6-bit codes u of sixteen rows from
// the nibbles and the top-bit plane, and a row of X
//   acc += d sc_{2b} dx_b (dot_lo - 32 s16_{2b}) + d sc_{2b+1} dx_b (dot_hi - 32 s16_{2b+1})
// (the -32 offset exact in int32, X's sums per 16 being the same for every
// lane; the row kernels' terms).
template <int MT>
TC_VNNI8 void dots16_q6_k(const uint8_t* g0, const uint8_t* g1, int64_t ns, const QxNatural* const* x, float* out) {
  constexpr int kCodes = quant::rows8_codes_at(quant::Q6_K);
  __m512 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
  for (int64_t s = 0; s < ns; ++s) {
    const PairLoads<false> o = PairLoads<false>::at(g0, g1, s, quant::rows8_super_bytes(quant::Q6_K));
    const __m512 dw = o.halves(0);
    for (int b = 0; b < 8; ++b) {
      const int ob = kCodes + 192 * b;
      const __m512 sc0 = _mm512_mul_ps(dw, i8_lanes(o.bytes8(16 + 16 * b))),
                   sc1 = _mm512_mul_ps(dw, i8_lanes(o.bytes8(24 + 16 * b)));
      const __m512i pa = o.chunk(ob + 128), pb = o.chunk(ob + 160);
      __m512i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const __m512i v = o.chunk(ob + 32 * j);
        const __m512i p = j < 2 ? pa : pb;
        // Top bits to bits 4-5: those of chunk j's low nibbles sit at bit 4 (j % 2), its high nibbles' at + 2
        // (16-bit shifts; what crosses a byte is masked off).
        const __m512i tl = j % 2 ? p : _mm512_slli_epi16(p, 4), th = j % 2 ? _mm512_srli_epi16(p, 2) : _mm512_slli_epi16(p, 2);
        lo[j] = _mm512_or_si512(_mm512_and_si512(v, m4), _mm512_and_si512(tl, top));
        hi[j] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), _mm512_and_si512(th, top));
      }
      const int64_t xb = 8 * s + b;
      for (int m = 0; m < MT; ++m) {
        const int32_t* xw = reinterpret_cast<const int32_t*>(x[m]->xq + 32 * xb);
        __m512i d0 = _mm512_set1_epi32(-32 * x[m]->s16[2 * xb]), d1 = _mm512_set1_epi32(-32 * x[m]->s16[2 * xb + 1]);
        for (int j = 0; j < 4; ++j) {
          d0 = _mm512_dpbusd_epi32(d0, lo[j], _mm512_set1_epi32(xw[j]));
          d1 = _mm512_dpbusd_epi32(d1, hi[j], _mm512_set1_epi32(xw[4 + j]));
        }
        const __m512 dx = _mm512_set1_ps(x[m]->dx[xb]);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d0), _mm512_mul_ps(sc0, dx), acc[m]);
        acc[m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d1), _mm512_mul_ps(sc1, dx), acc[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm512_storeu_ps(out + 16 * m, acc[m]);
}

// A plane's fifth bits of chunk j (bit j of each byte, j < 8) moved to bit 4
// of the byte, the rest cleared: 16-bit shifts, what crosses from the other
// byte of a word masked off.
TC_VNNI8 inline __m256i fifth_bits(__m256i plane, int j) {
  const __m256i at = j < 4 ? _mm256_slli_epi16(plane, 4 - j) : _mm256_srli_epi16(plane, j - 4);
  return _mm256_and_si256(at, _mm256_set1_epi8(0x10));
}

// Q4_K and Q5_K, a group of eight rows in 256-bit vectors: w = d sc u - dmin m per
// sub-block of 32 (u in 0..15; Q5_K 0..31, the fifth bits from the
// sub-block's plane). Per superblock and pair p of sub-blocks (2p: low
// nibbles, 2p + 1: high), each of the 8 chunks of 32 bytes holds four codes
// of each row, and a row of X
//   acc += d sc_{2p} dx_{2p} dot_lo + d sc_{2p+1} dx_{2p+1} dot_hi
//   corr += dmin m_{2p} sx_{2p} + dmin m_{2p+1} sx_{2p+1},   y = acc - corr
// (the row kernels' terms), the sub-block scales as float lanes once a
// pair for every row of X.
// 8 bytes to 8 float lanes.
TC_VNNI8 inline __m256 lanes(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

template <int32_t FMT, int MT>
TC_VNNI8 void dots8_q45_k(const uint8_t* grp, int64_t ns, const QxNatural* const* x, float* out) {
  constexpr int kCodes = quant::rows8_codes_at(FMT), kPlanes = quant::rows8_plane_at(FMT);
  __m256 acc[MT], corr[MT];
  for (int m = 0; m < MT; ++m) acc[m] = corr[m] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = grp + s * quant::rows8_super_bytes(FMT);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
    for (int p = 0; p < 4; ++p) {
      const __m256 sc0 = _mm256_mul_ps(dw, lanes(o + 32 + 16 * p)), sc1 = _mm256_mul_ps(dw, lanes(o + 40 + 16 * p));
      const __m256 mn0 = _mm256_mul_ps(mw, lanes(o + 96 + 16 * p)), mn1 = _mm256_mul_ps(mw, lanes(o + 104 + 16 * p));
      // Q5_K: the planes of sub-blocks 2p and 2p + 1 (bit c: chunk c).
      __m256i pl0 = _mm256_setzero_si256(), pl1 = _mm256_setzero_si256();
      if constexpr (FMT == quant::Q5_K) {
        pl0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kPlanes + 64 * p));
        pl1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kPlanes + 64 * p + 32));
      }
      const int64_t b0 = 8 * s + 2 * p;  // X's blocks b0 (low nibbles) and b0 + 1
      __m256i d0[MT], d1[MT];
      for (int m = 0; m < MT; ++m) d0[m] = d1[m] = _mm256_setzero_si256();
      // Unrolled, so that Q5_K's shifts are immediates (GCC leaves Q5_K's
      // four rows of X rolled otherwise: a branch and two shifts by a register a chunk).
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kCodes + 256 * p + 32 * c));
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (FMT == quant::Q5_K) {
          lo = _mm256_or_si256(lo, fifth_bits(pl0, c));
          hi = _mm256_or_si256(hi, fifth_bits(pl1, c));
        }
        for (int m = 0; m < MT; ++m) {
          const int32_t* xb = reinterpret_cast<const int32_t*>(x[m]->xq + 32 * b0);
          d0[m] = _mm256_dpbusd_epi32(d0[m], lo, _mm256_set1_epi32(xb[c]));
          d1[m] = _mm256_dpbusd_epi32(d1[m], hi, _mm256_set1_epi32(xb[8 + c]));
        }
      }
      for (int m = 0; m < MT; ++m) {
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0[m]), _mm256_mul_ps(sc0, _mm256_set1_ps(x[m]->dx[b0])), acc[m]);
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1[m]), _mm256_mul_ps(sc1, _mm256_set1_ps(x[m]->dx[b0 + 1])), acc[m]);
        corr[m] = _mm256_fmadd_ps(mn0, _mm256_set1_ps(x[m]->sx[b0]), corr[m]);
        corr[m] = _mm256_fmadd_ps(mn1, _mm256_set1_ps(x[m]->sx[b0 + 1]), corr[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm256_storeu_ps(out + 8 * m, _mm256_sub_ps(acc[m], corr[m]));
}

// Q6_K, a group of eight rows in 256-bit vectors: per block b of 32 weights, the 6-bit
// codes u of eight rows from the nibbles and the top-bit plane, and a row
// of X
//   acc += d sc_{2b} dx_b (dot_lo - 32 s16_{2b}) + d sc_{2b+1} dx_b (dot_hi - 32 s16_{2b+1})
// (the -32 offset exact in int32, X's sums per 16 being the same for every
// lane; the row kernels' terms).
template <int MT>
TC_VNNI8 void dots8_q6_k(const uint8_t* grp, int64_t ns, const QxNatural* const* x, float* out) {
  __m256 acc[MT];
  for (int m = 0; m < MT; ++m) acc[m] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
  for (int64_t s = 0; s < ns; ++s) {
    const uint8_t* o = grp + s * quant::rows8_super_bytes(quant::Q6_K);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    for (int b = 0; b < 8; ++b) {
      const uint8_t* ob = o + quant::rows8_codes_at(quant::Q6_K) + 192 * b;
      const __m256 sc0 = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(o + 16 + 16 * b))))),
                   sc1 = _mm256_mul_ps(dw, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                               _mm_loadl_epi64(reinterpret_cast<const __m128i*>(o + 24 + 16 * b)))));
      const __m256i pa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ob + 128)),
                    pb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ob + 160));
      __m256i lo[4], hi[4];
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ob + 32 * j));
        const __m256i p = j < 2 ? pa : pb;
        // Top bits to bits 4-5: those of chunk j's low nibbles sit at bit 4 (j % 2), its high nibbles' at + 2
        // (16-bit shifts; what crosses a byte is masked off).
        const __m256i tl = j % 2 ? p : _mm256_slli_epi16(p, 4), th = j % 2 ? _mm256_srli_epi16(p, 2) : _mm256_slli_epi16(p, 2);
        lo[j] = _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_and_si256(tl, top));
        hi[j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_and_si256(th, top));
      }
      const int64_t xb = 8 * s + b;
      for (int m = 0; m < MT; ++m) {
        const int32_t* xw = reinterpret_cast<const int32_t*>(x[m]->xq + 32 * xb);
        __m256i d0 = _mm256_set1_epi32(-32 * x[m]->s16[2 * xb]), d1 = _mm256_set1_epi32(-32 * x[m]->s16[2 * xb + 1]);
        for (int j = 0; j < 4; ++j) {
          d0 = _mm256_dpbusd_epi32(d0, lo[j], _mm256_set1_epi32(xw[j]));
          d1 = _mm256_dpbusd_epi32(d1, hi[j], _mm256_set1_epi32(xw[4 + j]));
        }
        const __m256 dx = _mm256_set1_ps(x[m]->dx[xb]);
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_mul_ps(sc0, dx), acc[m]);
        acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_mul_ps(sc1, dx), acc[m]);
      }
    }
  }
  for (int m = 0; m < MT; ++m) _mm256_storeu_ps(out + 8 * m, acc[m]);
}

template <int MT, bool Paired>
TC_VNNI8 void dots16_any(int32_t fmt, const uint8_t* g0, const uint8_t* g1, int64_t nb, const QxNatural* const* x,
                         float* out) {
  switch (fmt) {
    case quant::Q4_1: return dots16<quant::Q4_1, MT, Paired>(g0, g1, nb, x, out);
    case quant::Q5_0: return dots16<quant::Q5_0, MT, Paired>(g0, g1, nb, x, out);
    case quant::Q5_1: return dots16<quant::Q5_1, MT, Paired>(g0, g1, nb, x, out);
    case quant::Q8_0: return dots16<quant::Q8_0, MT, Paired>(g0, g1, nb, x, out);
    case quant::Q4_0: return dots16<quant::Q4_0, MT, Paired>(g0, g1, nb, x, out);
  }
  if constexpr (!Paired) {  // the K-quants' groups are not stored in pairs
    switch (fmt) {
      case quant::Q4_K: return dots16_q45_k<quant::Q4_K, MT>(g0, g1, nb / 8, x, out);
      case quant::Q5_K: return dots16_q45_k<quant::Q5_K, MT>(g0, g1, nb / 8, x, out);
      case quant::Q6_K: return dots16_q6_k<MT>(g0, g1, nb / 8, x, out);
    }
  }
}

template <bool Paired>
TC_VNNI8 void dots16_tile(int32_t fmt, const uint8_t* g0, const uint8_t* g1, int64_t nb, const QxNatural* const* x,
                          int mt, float* out) {
  switch (mt) {
    case 1: return dots16_any<1, Paired>(fmt, g0, g1, nb, x, out);
    case 2: return dots16_any<2, Paired>(fmt, g0, g1, nb, x, out);
    case 3: return dots16_any<3, Paired>(fmt, g0, g1, nb, x, out);
    default: return dots16_any<4, Paired>(fmt, g0, g1, nb, x, out);
  }
}

// The K-quants' 256-bit kernels over one group.
template <int MT>
TC_VNNI8 void dots8_k_tile(int32_t fmt, const uint8_t* grp, int64_t ns, const QxNatural* const* x, float* out) {
  if (fmt == quant::Q4_K) return dots8_q45_k<quant::Q4_K, MT>(grp, ns, x, out);
  if (fmt == quant::Q5_K) return dots8_q45_k<quant::Q5_K, MT>(grp, ns, x, out);
  return dots8_q6_k<MT>(grp, ns, x, out);
}

TC_VNNI8 void dots8_k(int32_t fmt, const uint8_t* grp, int64_t ns, const QxNatural* const* x, int mt, float* out) {
  switch (mt) {
    case 1: return dots8_k_tile<1>(fmt, grp, ns, x, out);
    case 2: return dots8_k_tile<2>(fmt, grp, ns, x, out);
    case 3: return dots8_k_tile<3>(fmt, grp, ns, x, out);
    default: return dots8_k_tile<4>(fmt, grp, ns, x, out);
  }
}

bool is_k_quant(int32_t fmt) { return fmt == quant::Q4_K || fmt == quant::Q5_K || fmt == quant::Q6_K; }

}  // namespace

TC_VNNI8 void quantize_natural(const float* x, int64_t K, QxNatural* row) {
  for (int64_t b = 0; b < K / 32; ++b) {
    const __m256 v[4] = {_mm256_loadu_ps(x + 32 * b), _mm256_loadu_ps(x + 32 * b + 8), _mm256_loadu_ps(x + 32 * b + 16),
                         _mm256_loadu_ps(x + 32 * b + 24)};
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                              _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const float d = _mm_cvtss_f32(h) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    // Round to nearest even (the MXCSR default), saturate to int8; the half
    // blocks' sums from the same saturated values, in vector lanes.
    const __m256i lo = _mm256_set1_epi32(-128), hi = _mm256_set1_epi32(127);
    __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int i = 0; i < 4; ++i) {
      const __m256i q32 = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(row->xq + 32 * b + 8 * i), _mm256_cvtsepi32_epi8(q32));
      sums[i / 2] = _mm256_add_epi32(sums[i / 2], _mm256_min_epi32(_mm256_max_epi32(q32, lo), hi));
    }
    int half[2];
    for (int j = 0; j < 2; ++j) {
      __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sums[j]), _mm256_extracti128_si256(sums[j], 1));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
      half[j] = _mm_cvtsi128_si32(t);
    }
    row->s16[2 * b] = half[0], row->s16[2 * b + 1] = half[1];
    row->dx[b] = d;
    row->sx[b] = d * float(half[0] + half[1]);
  }
}

TC_VNNI8 void rows8_dots_vnni(int32_t fmt, const uint8_t* grp, int64_t K, const QxNatural* const* x, int mt,
                              float* out) {
  if (is_k_quant(fmt)) return dots8_k(fmt, grp, K / 256, x, mt, out);
  // The other formats: the pair kernel over the group twice, the low half kept.
  float both[16 * kMaxTile];
  dots16_tile<false>(fmt, grp, grp, K / 32, x, mt, both);
  for (int m = 0; m < mt; ++m) std::memcpy(out + 8 * m, both + 16 * m, 8 * sizeof(float));
}

TC_VNNI8 void rows8_pair_dots_vnni(int32_t fmt, const uint8_t* pair, int64_t K, const QxNatural* const* x, int mt,
                                   float* out) {
  if (!is_k_quant(fmt)) return dots16_tile<true>(fmt, pair, nullptr, K / 32, x, mt, out);
  // The K-quants' two groups one after the other: at one row of X the
  // 256-bit kernel over each (a stand-alone loop over 700 MB on two Zen 5
  // threads: Q4_K 68.7 GB/s against 45.5-53.0 for the 512-bit pair kernel,
  // Q6_K 54.9 against 32.9, which are bound by their instructions there);
  // with more rows, where the instructions per weight bound them, the 512-bit one.
  const uint8_t* second = pair + K / 256 * quant::rows8_super_bytes(fmt);
  if (mt == 1) {
    dots8_k(fmt, pair, K / 256, x, 1, out);
    return dots8_k(fmt, second, K / 256, x, 1, out + 8);
  }
  dots16_tile<false>(fmt, pair, second, K / 32, x, mt, out);
}

}  // namespace cpu
}  // namespace tc
