// GHASH, the authenticator inside AES-GCM (NIST SP 800-38D), with 512-bit
// carry-less multiplication (VPCLMULQDQ), for Gmac (core/crypto.h):
//
//   Y_i = (Y_{i-1} xor X_i) * H     in GF(2^128) mod x^128 + x^7 + x^2 + x + 1
//
// over the 16-byte blocks X_i of the message, with H = AES_K(0^128). Why our
// own: libcrypto 3.0 hashes GCM's additional data one 128-bit lane at a time
// (about 8 GB/s on one core), and an authenticated channel runs it over
// every byte it sends and receives; with four blocks a vector and one
// reduction per 32 blocks it runs several times faster. The arithmetic is
// the carry-less method of Gueron and Kounavis (Intel's white paper on
// PCLMULQDQ and GCM): blocks byte-reversed, the 256-bit product shifted left
// by one bit and reduced; a sum of products is reduced once, since both
// steps are linear, and its middle part is Karatsuba's (three carry-less
// products a block, not four). Constant time: no branch or address depends on H or the
// data. libcrypto still does the AES and stays the path on processors
// without these instructions (Gmac's tests compare the two).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tc {
namespace ghash {

constexpr int kPowers = 32;  // blocks a reduction

// H^32 .. H^1 in the kernel's form (byte-reversed), 16 bytes each, and for
// Karatsuba's middle product each power's two 64-bit halves xored (in both).
struct Key {
  alignas(64) uint8_t powers[kPowers][16];
  alignas(64) uint8_t halves[kPowers][16];
};

// Whether this processor (and its OS) runs the kernel: VPCLMULQDQ, AVX-512 F and BW.
bool available();
// The key for H (16 bytes as AES produced it). Only where available().
void init(const uint8_t h[16], Key* key);
// y <- GHASH of n whole blocks at data, continuing from y (the kernel's form;
// zero to start). Only where available().
void blocks(const Key& key, uint8_t y[16], const uint8_t* data, size_t n);
// The tag's GHASH part from y: the block in GCM's byte order.
void output(const uint8_t y[16], uint8_t out[16]);

}  // namespace ghash
}  // namespace tc
