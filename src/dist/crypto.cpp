#include "dist/crypto.h"

#include <stdexcept>

#ifdef TC_CRYPTO_NO_HEADERS
// libcrypto is present but its headers are not (a minimal system image): the
// few functions used here have had these C prototypes since OpenSSL 1.1.
extern "C" {
typedef struct evp_md_st EVP_MD;
const EVP_MD* EVP_sha256(void);
unsigned char* HMAC(const EVP_MD* md, const void* key, int key_len, const unsigned char* d, size_t n,
                    unsigned char* md_out, unsigned int* md_len);
unsigned char* SHA256(const unsigned char* d, size_t n, unsigned char* md);
int RAND_bytes(unsigned char* buf, int num);
int CRYPTO_memcmp(const void* a, const void* b, size_t len);
}
#else
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#endif

namespace tc {
namespace dist {

void sha256(const void* data, size_t n, uint8_t out[kDigestBytes]) {
  static const unsigned char empty = 0;
  SHA256(n ? static_cast<const unsigned char*>(data) : &empty, n, out);
}

void hmac_sha256(const void* key, size_t key_n, const void* data, size_t n, uint8_t out[kDigestBytes]) {
  unsigned int len = 0;
  static const unsigned char empty = 0;
  if (!HMAC(EVP_sha256(), key, static_cast<int>(key_n), n ? static_cast<const unsigned char*>(data) : &empty, n,
            out, &len) ||
      len != kDigestBytes)
    throw std::runtime_error("HMAC-SHA256 failed in libcrypto");
}

bool random_bytes(void* out, size_t n) { return RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n)) == 1; }

bool equal_ct(const void* a, const void* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

}  // namespace dist
}  // namespace tc
