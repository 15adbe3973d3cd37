// i8 x i8 -> i32 micro-kernel on AVX512-VNNI (plan in gemm_packed.h).
//
// vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the four
// products to an int32 lane (no saturation: vpdpbusds is the saturating one).
// A is made unsigned by adding 128 (xor 0x80), so the kernel computes
//   sum_k (a + 128) b = sum_k a b + 128 sum_k b,
// and the epilogue adds corr[j] = -128 * sum_k B(k, j), per column, taken
// when B is packed. Every step is exact modulo 2^32, hence the result is the
// int32 product with wrapping, in any order of summation.
//
// Tile 8 x 32: 16 zmm accumulators. A depth step of 4 loads two vectors of B
// (32 columns x 4 k) and broadcasts 4 bytes of each of the 8 rows of A.
#include <immintrin.h>

// GCC 12 flags the AVX-512 intrinsics' own _mm512_undefined_*() (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "cpu/gemm_pack.h"
#include "cpu/gemm_packed.h"

#define TC_VNNI512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

namespace tc {
namespace cpu {
namespace {

constexpr int kMR = 8, kNR = 32, kG = 4;

int64_t depth(int64_t K) { return round_up(K, kG); }
size_t a_bytes(int64_t depth) { return size_t(depth) * kMR; }
size_t corr_offset(int64_t depth) { return size_t(depth) * kNR; }
size_t b_bytes(int64_t depth) { return corr_offset(depth) + kNR * sizeof(int32_t); }

TC_VNNI512 void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.a) + i0 * op.a_rs;
  pack_interleaved<kMR, kG>(p, op.a_rs, op.a_cs, rows, op.K, depth, static_cast<uint8_t*>(out),
                            [](int8_t v) { return uint8_t(uint8_t(v) ^ 0x80u); });
}

TC_VNNI512 void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.b) + j0 * op.b_rs;
  int8_t* o = static_cast<int8_t*>(out);
  if (op.b_rs == 1 && cols == kNR) {  // whole groups vectorised, the rest below
    const int64_t full = op.K / kG;
    interleave32_i8x4(p, op.b_cs, full, o);
    pack_interleaved<kNR, kG>(p + full * kG * op.b_cs, op.b_rs, op.b_cs, cols, op.K - full * kG, depth - full * kG,
                              o + full * kG * kNR, [](int8_t v) { return v; });
  } else {
    pack_interleaved<kNR, kG>(p, op.b_rs, op.b_cs, cols, op.K, depth, o, [](int8_t v) { return v; });
  }
  // Column sums by the same instruction: 1 * b summed over each group of 4.
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  for (int64_t kg = 0; kg < depth / kG; ++kg) {
    s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_loadu_si512(o + kg * 128));
    s1 = _mm512_dpbusd_epi32(s1, ones, _mm512_loadu_si512(o + kg * 128 + 64));
  }
  int32_t* corr = reinterpret_cast<int32_t*>(o + corr_offset(depth));
  const __m512i zero = _mm512_setzero_si512();
  _mm512_storeu_si512(corr, _mm512_sub_epi32(zero, _mm512_slli_epi32(s0, 7)));
  _mm512_storeu_si512(corr + 16, _mm512_sub_epi32(zero, _mm512_slli_epi32(s1, 7)));
}

// Chunks of 768 depth steps: 24 KiB of the B panel, half of L1.
constexpr int64_t kKC = 768;

TC_VNNI512 void micro(const void* a, const void* b, int64_t, int64_t k0, int64_t kn, void* tile, bool accumulate) {
  const uint8_t* pa = static_cast<const uint8_t*>(a) + k0 * kMR;
  const int8_t* pb = static_cast<const int8_t*>(b) + k0 * kNR;
  int32_t* t = static_cast<int32_t*>(tile);
  __m512i c[kMR][2];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) {
    c[i][0] = accumulate ? _mm512_loadu_si512(t + i * kNR) : _mm512_setzero_si512();
    c[i][1] = accumulate ? _mm512_loadu_si512(t + i * kNR + 16) : _mm512_setzero_si512();
  }
  for (int64_t kg = 0; kg < kn / kG; ++kg, pa += kMR * kG, pb += kNR * kG) {
    const __m512i b0 = _mm512_loadu_si512(pb), b1 = _mm512_loadu_si512(pb + 64);
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      int32_t w;
      __builtin_memcpy(&w, pa + i * kG, 4);
      const __m512i ai = _mm512_set1_epi32(w);
      c[i][0] = _mm512_dpbusd_epi32(c[i][0], ai, b0);
      c[i][1] = _mm512_dpbusd_epi32(c[i][1], ai, b1);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) {
    _mm512_storeu_si512(t + i * kNR, c[i][0]);
    _mm512_storeu_si512(t + i * kNR + 16, c[i][1]);
  }
}

}  // namespace

const KernelSet& i8_avx512_kernels() {
  static const KernelSet ks{"avx512_vnni", kMR, kNR, kKC, depth, a_bytes, b_bytes, pack_a, pack_b, micro, corr_offset,
                            nullptr, nullptr};
  return ks;
}

}  // namespace cpu
}  // namespace tc
