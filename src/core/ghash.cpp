#include "core/ghash.h"

#include <immintrin.h>

#define TC_GHASH_TARGET __attribute__((target("avx512f,avx512bw,vpclmulqdq,pclmul,ssse3,sse4.1")))

namespace tc {
namespace ghash {
namespace {

TC_GHASH_TARGET inline __m128i bswap_mask() {
  return _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

// The 256-bit carry-less product hi:lo of two byte-reversed blocks, shifted
// left by one bit (the bit order of GCM's field elements is reversed) and
// reduced modulo x^128 + x^7 + x^2 + x + 1: the field product, byte-reversed.
TC_GHASH_TARGET inline __m128i shift_reduce(__m128i lo, __m128i hi) {
  // hi:lo <<= 1 across the four 32-bit lanes of each half and between them.
  __m128i c_lo = _mm_srli_epi32(lo, 31), c_hi = _mm_srli_epi32(hi, 31);
  lo = _mm_slli_epi32(lo, 1);
  hi = _mm_slli_epi32(hi, 1);
  const __m128i carry_out = _mm_srli_si128(c_lo, 12);  // lo's top bit, into hi
  c_hi = _mm_slli_si128(c_hi, 4);
  c_lo = _mm_slli_si128(c_lo, 4);
  lo = _mm_or_si128(lo, c_lo);
  hi = _mm_or_si128(_mm_or_si128(hi, c_hi), carry_out);
  // Fold lo into hi: lo * (x^7 + x^2 + x + 1), in two steps (the white paper's).
  __m128i a = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30)), _mm_slli_epi32(lo, 25));
  const __m128i a_hi = _mm_srli_si128(a, 4);
  a = _mm_slli_si128(a, 12);
  lo = _mm_xor_si128(lo, a);
  __m128i b = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2)), _mm_srli_epi32(lo, 7));
  b = _mm_xor_si128(b, a_hi);
  lo = _mm_xor_si128(lo, b);
  return _mm_xor_si128(hi, lo);
}

TC_GHASH_TARGET inline __m128i mul(__m128i a, __m128i b) {
  __m128i lo = _mm_clmulepi64_si128(a, b, 0x00), hi = _mm_clmulepi64_si128(a, b, 0x11);
  const __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
  lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
  hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
  return shift_reduce(lo, hi);
}

TC_GHASH_TARGET inline __m128i fold_lanes(__m512i v) {
  return _mm_xor_si128(_mm_xor_si128(_mm512_extracti32x4_epi32(v, 0), _mm512_extracti32x4_epi32(v, 1)),
                       _mm_xor_si128(_mm512_extracti32x4_epi32(v, 2), _mm512_extracti32x4_epi32(v, 3)));
}

}  // namespace

bool available() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul");
}

TC_GHASH_TARGET void init(const uint8_t h[16], Key* key) {
  const __m128i H = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)), bswap_mask());
  __m128i p = H;
  for (int k = 1; k <= kPowers; ++k) {  // powers[kPowers - k] = H^k
    _mm_store_si128(reinterpret_cast<__m128i*>(key->powers[kPowers - k]), p);
    _mm_store_si128(reinterpret_cast<__m128i*>(key->halves[kPowers - k]),
                    _mm_xor_si128(p, _mm_shuffle_epi32(p, 0x4E)));
    p = mul(p, H);
  }
}

// Y_32 = (Y_0 xor X_1) H^32 xor X_2 H^31 xor ... xor X_32 H: 32 blocks, 8
// vectors of four, one reduction. Per block with halves (a1, a0), (b1, b0):
// lo = a0 b0, hi = a1 b1, middle = (a0 + a1)(b0 + b1) + lo + hi (Karatsuba;
// + is xor), the middle's lo + hi added once for the 32 after the sums.
// Y_0 H^32 is its own product, added after the data's: the 32 blocks' work
// does not wait for the previous reduction, so consecutive runs overlap.
TC_GHASH_TARGET void blocks(const Key& key, uint8_t y[16], const uint8_t* data, size_t n) {
  const __m128i bs = bswap_mask();
  const __m512i bs4 = _mm512_broadcast_i32x4(bs);
  __m128i Y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y));
  const __m128i H32 = _mm_load_si128(reinterpret_cast<const __m128i*>(key.powers[0]));
  const __m128i HH32 = _mm_load_si128(reinterpret_cast<const __m128i*>(key.halves[0]));
  for (; n >= size_t(kPowers); n -= kPowers, data += 16 * kPowers) {
    __m512i lo = _mm512_setzero_si512(), hi = lo, mid = lo;
#pragma GCC unroll 8
    for (int j = 0; j < kPowers / 4; ++j) {
      const __m512i x = _mm512_shuffle_epi8(_mm512_loadu_si512(data + 64 * j), bs4);
      const __m512i h = _mm512_load_si512(key.powers[4 * j]), hh = _mm512_load_si512(key.halves[4 * j]);
      lo = _mm512_xor_si512(lo, _mm512_clmulepi64_epi128(x, h, 0x00));
      hi = _mm512_xor_si512(hi, _mm512_clmulepi64_epi128(x, h, 0x11));
      const __m512i xh = _mm512_xor_si512(x, _mm512_shuffle_epi32(x, _MM_PERM_BADC));  // a0 + a1, low half
      mid = _mm512_xor_si512(mid, _mm512_clmulepi64_epi128(xh, hh, 0x00));
    }
    const __m128i l = _mm_xor_si128(fold_lanes(lo), _mm_clmulepi64_si128(Y, H32, 0x00));
    const __m128i h = _mm_xor_si128(fold_lanes(hi), _mm_clmulepi64_si128(Y, H32, 0x11));
    const __m128i ym = _mm_clmulepi64_si128(_mm_xor_si128(Y, _mm_shuffle_epi32(Y, 0x4E)), HH32, 0x00);
    const __m128i m = _mm_xor_si128(_mm_xor_si128(fold_lanes(mid), ym), _mm_xor_si128(l, h));
    Y = shift_reduce(_mm_xor_si128(l, _mm_slli_si128(m, 8)), _mm_xor_si128(h, _mm_srli_si128(m, 8)));
  }
  const __m128i H = _mm_load_si128(reinterpret_cast<const __m128i*>(key.powers[kPowers - 1]));
  for (; n; --n, data += 16)
    Y = mul(_mm_xor_si128(Y, _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(data)), bs)), H);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), Y);
}

TC_GHASH_TARGET void output(const uint8_t y[16], uint8_t out[16]) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y)), bswap_mask()));
}

}  // namespace ghash
}  // namespace tc
