// SHA-256, HMAC-SHA256, random bytes and constant-time comparison, from
// OpenSSL's libcrypto (the one implementation of these in the library).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tc {
namespace dist {

constexpr size_t kDigestBytes = 32;

void sha256(const void* data, size_t n, uint8_t out[kDigestBytes]);
void hmac_sha256(const void* key, size_t key_n, const void* data, size_t n, uint8_t out[kDigestBytes]);
// Cryptographically strong random bytes; false when the generator fails.
bool random_bytes(void* out, size_t n);
// true when equal; the time taken does not depend on where they differ.
bool equal_ct(const void* a, const void* b, size_t n);

}  // namespace dist
}  // namespace tc
