// SHA-256, HMAC-SHA256, HKDF-Expand, AES-256-GCM as a MAC (GMAC), random
// bytes and constant-time comparison, from
// OpenSSL's libcrypto: the one implementation of these in the project, used
// by dist (digests, authentication) and by simpler's runtime (callable
// digests; this file is compiled into libsimpler too).
//
// Without libcrypto's headers (a minimal image, the GPU machine) the few C
// functions used are declared in crypto.cpp and the library found by CMake
// (libcrypto.so.3) is linked as usual; there is no hand-written fallback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tc {

constexpr size_t kDigestBytes = 32;

void sha256(const void* data, size_t n, uint8_t out[kDigestBytes]);
void hmac_sha256(const void* key, size_t key_n, const void* data, size_t n, uint8_t out[kDigestBytes]);
// HKDF-Expand (RFC 5869) with HMAC-SHA256, for outputs of up to 32 bytes:
// T(1) = HMAC(prk, info | 0x01), truncated to n. `prk` must already be a
// uniform key (an HMAC output), which is why no extract step precedes it.
void hkdf_expand_sha256(const void* prk, size_t prk_n, const std::string& info, uint8_t* out, size_t n);
// Cryptographically strong random bytes; false when the generator fails.
bool random_bytes(void* out, size_t n);
// true when equal; the time taken does not depend on where they differ.
bool equal_ct(const void* a, const void* b, size_t n);

// SHA-256 over pieces fed in turn.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  // The 32 bytes, or 64 lowercase hex characters; either spends the object.
  void digest(uint8_t out[kDigestBytes]);
  std::string hex();

 private:
  void* ctx_;  // EVP_MD_CTX
};

std::string sha256_hex(const void* data, size_t n);

// AES-256-GCM used as a MAC (GMAC): every byte fed in is authenticated as
// additional data, nothing is encrypted. A key must never see one nonce
// twice (callers use direction | sequence number). Several GB/s with
// AES-NI and carry-less multiply, against about 1 GB/s for HMAC-SHA256.
// On processors with 512-bit carry-less multiply the hash over the data may
// be core/ghash.h's (the AES stays libcrypto's): Impl::kBest takes it where
// it is the faster of the two on this processor (timed once per process),
// Impl::kOwn wherever it can run; otherwise, or with Impl::kLibcrypto,
// libcrypto's AES-GCM does it all. All give the same tags.
class Gmac {
 public:
  static constexpr size_t kKeyBytes = 32, kNonceBytes = 12, kTagBytes = 16;
  enum class Impl { kBest, kOwn, kLibcrypto };
  explicit Gmac(const uint8_t key[kKeyBytes], Impl impl = Impl::kBest);
  ~Gmac();
  Gmac(const Gmac&) = delete;
  Gmac& operator=(const Gmac&) = delete;
  void begin(const uint8_t nonce[kNonceBytes]);
  void update(const void* data, size_t n);
  void tag(uint8_t out[kTagBytes]);  // ends the message; begin() starts the next
  bool uses_libcrypto_ghash() const { return !fast_; }

 private:
  struct Fast;
  void* ctx_;  // EVP_CIPHER_CTX: AES-256-GCM, or AES-256 blocks (ECB) beside fast_
  std::unique_ptr<Fast> fast_;
};

}  // namespace tc
