// i8 x i8 -> i32 micro-kernels on 256-bit vectors (plan in gemm_packed.h).
//
// AVX-VNNI: as the AVX512-VNNI kernel (gemm_i8_avx512.cpp) at half the
// width: vpdpbusd on (a + 128) as unsigned bytes times b, then the epilogue
// adds corr[j] = -128 * sum_k B(k, j). Tile 6 x 16: 12 ymm accumulators.
//
// AVX2: vpmaddubsw would add two u8 x s8 products into a saturating int16
// (255 * 127 * 2 does not fit), so it is not exact. Instead both operands are
// widened to int16 when packed, and vpmaddwd multiplies pairs of int16 into
// one int32: |a b + a' b'| <= 2 * 128 * 128 = 2^15, always exact, and the
// int32 accumulation wraps like the hardware's. Tile 6 x 16.
#include <immintrin.h>

#include "cpu/gemm_pack.h"
#include "cpu/gemm_packed.h"

#define TC_AVX2 __attribute__((target("avx2,fma")))
#define TC_AVX_VNNI __attribute__((target("avx2,fma,avxvnni")))

namespace tc {
namespace cpu {
namespace {

constexpr int kMR = 6, kNR = 16;

// ---- AVX-VNNI: u8 x s8 in groups of 4 ---------------------------------------

namespace vnni {

constexpr int kG = 4;
int64_t depth(int64_t K) { return round_up(K, kG); }
size_t a_bytes(int64_t depth) { return size_t(depth) * kMR; }
size_t corr_offset(int64_t depth) { return size_t(depth) * kNR; }
size_t b_bytes(int64_t depth) { return corr_offset(depth) + kNR * sizeof(int32_t); }

TC_AVX_VNNI void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.a) + i0 * op.a_rs;
  pack_interleaved<kMR, kG>(p, op.a_rs, op.a_cs, rows, op.K, depth, static_cast<uint8_t*>(out),
                            [](int8_t v) { return uint8_t(uint8_t(v) ^ 0x80u); });
}

TC_AVX_VNNI void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.b) + j0 * op.b_rs;
  int8_t* o = static_cast<int8_t*>(out);
  pack_interleaved<kNR, kG>(p, op.b_rs, op.b_cs, cols, op.K, depth, o, [](int8_t v) { return v; });
  const __m256i ones = _mm256_set1_epi8(1);
  __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
  for (int64_t kg = 0; kg < depth / kG; ++kg) {
    s0 = _mm256_dpbusd_avx_epi32(s0, ones, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kg * 64)));
    s1 = _mm256_dpbusd_avx_epi32(s1, ones, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + kg * 64 + 32)));
  }
  __m256i* corr = reinterpret_cast<__m256i*>(o + corr_offset(depth));
  const __m256i zero = _mm256_setzero_si256();
  _mm256_storeu_si256(corr, _mm256_sub_epi32(zero, _mm256_slli_epi32(s0, 7)));
  _mm256_storeu_si256(corr + 1, _mm256_sub_epi32(zero, _mm256_slli_epi32(s1, 7)));
}

// Chunks of 1536 depth steps: 24 KiB of the B panel, half of L1.
constexpr int64_t kKC = 1536;

TC_AVX_VNNI void micro(const void* a, const void* b, int64_t, int64_t k0, int64_t kn, void* tile, bool accumulate) {
  const uint8_t* pa = static_cast<const uint8_t*>(a) + k0 * kMR;
  const int8_t* pb = static_cast<const int8_t*>(b) + k0 * kNR;
  __m256i* t = static_cast<__m256i*>(tile);
  __m256i c[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    c[i][0] = accumulate ? _mm256_loadu_si256(t + 2 * i) : _mm256_setzero_si256();
    c[i][1] = accumulate ? _mm256_loadu_si256(t + 2 * i + 1) : _mm256_setzero_si256();
  }
  for (int64_t kg = 0; kg < kn / kG; ++kg, pa += kMR * kG, pb += kNR * kG) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32));
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      int32_t w;
      __builtin_memcpy(&w, pa + i * kG, 4);
      const __m256i ai = _mm256_set1_epi32(w);
      c[i][0] = _mm256_dpbusd_avx_epi32(c[i][0], ai, b0);
      c[i][1] = _mm256_dpbusd_avx_epi32(c[i][1], ai, b1);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    _mm256_storeu_si256(t + 2 * i, c[i][0]);
    _mm256_storeu_si256(t + 2 * i + 1, c[i][1]);
  }
}

}  // namespace vnni

// ---- AVX2: s16 x s16 in pairs --------------------------------------------------

namespace avx2 {

constexpr int kG = 2;
int64_t depth(int64_t K) { return round_up(K, kG); }
size_t a_bytes(int64_t depth) { return size_t(depth) * kMR * sizeof(int16_t); }
size_t b_bytes(int64_t depth) { return size_t(depth) * kNR * sizeof(int16_t); }

TC_AVX2 void pack_a(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.a) + i0 * op.a_rs;
  pack_interleaved<kMR, kG>(p, op.a_rs, op.a_cs, rows, op.K, depth, static_cast<int16_t*>(out),
                            [](int8_t v) { return int16_t(v); });
}

TC_AVX2 void pack_b(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out) {
  const int8_t* p = static_cast<const int8_t*>(op.b) + j0 * op.b_rs;
  pack_interleaved<kNR, kG>(p, op.b_rs, op.b_cs, cols, op.K, depth, static_cast<int16_t*>(out),
                            [](int8_t v) { return int16_t(v); });
}

// Chunks of 768 depth steps: 24 KiB of the B panel (int16), half of L1.
constexpr int64_t kKC = 768;

TC_AVX2 void micro(const void* a, const void* b, int64_t, int64_t k0, int64_t kn, void* tile, bool accumulate) {
  const int16_t* pa = static_cast<const int16_t*>(a) + k0 * kMR;
  const int16_t* pb = static_cast<const int16_t*>(b) + k0 * kNR;
  __m256i* t = static_cast<__m256i*>(tile);
  __m256i c[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    c[i][0] = accumulate ? _mm256_loadu_si256(t + 2 * i) : _mm256_setzero_si256();
    c[i][1] = accumulate ? _mm256_loadu_si256(t + 2 * i + 1) : _mm256_setzero_si256();
  }
  for (int64_t kg = 0; kg < kn / kG; ++kg, pa += kMR * kG, pb += kNR * kG) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 16));
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      int32_t w;
      __builtin_memcpy(&w, pa + i * kG, 4);
      const __m256i ai = _mm256_set1_epi32(w);
      c[i][0] = _mm256_add_epi32(c[i][0], _mm256_madd_epi16(ai, b0));
      c[i][1] = _mm256_add_epi32(c[i][1], _mm256_madd_epi16(ai, b1));
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    _mm256_storeu_si256(t + 2 * i, c[i][0]);
    _mm256_storeu_si256(t + 2 * i + 1, c[i][1]);
  }
}

}  // namespace avx2

}  // namespace

const KernelSet& i8_avx_vnni_kernels() {
  static const KernelSet ks{"avx_vnni", kMR, kNR, vnni::kKC, vnni::depth, vnni::a_bytes, vnni::b_bytes, vnni::pack_a,
                            vnni::pack_b, vnni::micro, vnni::corr_offset, nullptr, nullptr};
  return ks;
}

const KernelSet& i8_avx2_kernels() {
  static const KernelSet ks{"avx2", kMR, kNR, avx2::kKC, avx2::depth, avx2::a_bytes, avx2::b_bytes, avx2::pack_a,
                            avx2::pack_b, avx2::micro, nullptr, nullptr, nullptr};
  return ks;
}

}  // namespace cpu
}  // namespace tc
