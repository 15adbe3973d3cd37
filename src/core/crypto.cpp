#include "core/crypto.h"

#include <cstring>
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
typedef struct evp_md_ctx_st EVP_MD_CTX;
typedef struct engine_st ENGINE;
EVP_MD_CTX* EVP_MD_CTX_new(void);
void EVP_MD_CTX_free(EVP_MD_CTX* ctx);
int EVP_DigestInit_ex(EVP_MD_CTX* ctx, const EVP_MD* type, ENGINE* impl);
int EVP_DigestUpdate(EVP_MD_CTX* ctx, const void* d, size_t cnt);
int EVP_DigestFinal_ex(EVP_MD_CTX* ctx, unsigned char* md, unsigned int* s);
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;
const EVP_CIPHER* EVP_aes_256_gcm(void);
EVP_CIPHER_CTX* EVP_CIPHER_CTX_new(void);
void EVP_CIPHER_CTX_free(EVP_CIPHER_CTX* ctx);
int EVP_EncryptInit_ex(EVP_CIPHER_CTX* ctx, const EVP_CIPHER* type, ENGINE* impl, const unsigned char* key,
                       const unsigned char* iv);
int EVP_EncryptUpdate(EVP_CIPHER_CTX* ctx, unsigned char* out, int* outl, const unsigned char* in, int inl);
int EVP_EncryptFinal_ex(EVP_CIPHER_CTX* ctx, unsigned char* out, int* outl);
int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX* ctx, int type, int arg, void* ptr);
#define EVP_CTRL_AEAD_GET_TAG 0x10
}
#else
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#endif

namespace tc {

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

void hkdf_expand_sha256(const void* prk, size_t prk_n, const std::string& info, uint8_t* out, size_t n) {
  if (n > kDigestBytes) throw std::runtime_error("hkdf_expand_sha256: at most 32 bytes");
  std::string block = info;
  block.push_back('\x01');
  uint8_t t[kDigestBytes];
  hmac_sha256(prk, prk_n, block.data(), block.size(), t);
  std::memcpy(out, t, n);
}

bool random_bytes(void* out, size_t n) { return RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n)) == 1; }

bool equal_ct(const void* a, const void* b, size_t n) { return CRYPTO_memcmp(a, b, n) == 0; }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(ctx_), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("SHA-256 init failed in libcrypto");
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), data, n) != 1)
    throw std::runtime_error("SHA-256 update failed in libcrypto");
}

void Sha256::digest(uint8_t out[kDigestBytes]) {
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out, &len) != 1 || len != kDigestBytes)
    throw std::runtime_error("SHA-256 final failed in libcrypto");
}

std::string Sha256::hex() {
  uint8_t d[kDigestBytes];
  digest(d);
  static const char digits[] = "0123456789abcdef";
  std::string out(2 * kDigestBytes, '0');
  for (size_t i = 0; i < kDigestBytes; ++i) out[2 * i] = digits[d[i] >> 4], out[2 * i + 1] = digits[d[i] & 15];
  return out;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex();
}

namespace {
EVP_CIPHER_CTX* cipher_ctx(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }
}  // namespace

Gmac::Gmac(const uint8_t key[kKeyBytes]) : ctx_(EVP_CIPHER_CTX_new()) {
  if (!ctx_ || EVP_EncryptInit_ex(cipher_ctx(ctx_), EVP_aes_256_gcm(), nullptr, key, nullptr) != 1) {
    EVP_CIPHER_CTX_free(cipher_ctx(ctx_));
    throw std::runtime_error("AES-256-GCM init failed in libcrypto");
  }
}

Gmac::~Gmac() { EVP_CIPHER_CTX_free(cipher_ctx(ctx_)); }

void Gmac::begin(const uint8_t nonce[kNonceBytes]) {
  // GCM's default nonce is the 12 bytes given here.
  if (EVP_EncryptInit_ex(cipher_ctx(ctx_), nullptr, nullptr, nullptr, nonce) != 1)
    throw std::runtime_error("AES-256-GCM nonce failed in libcrypto");
}

void Gmac::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (n) {  // the EVP interface takes int lengths
    const int k = int(n < (size_t(1) << 30) ? n : (size_t(1) << 30));
    int outl = 0;
    if (EVP_EncryptUpdate(cipher_ctx(ctx_), nullptr, &outl, p, k) != 1)
      throw std::runtime_error("AES-256-GCM update failed in libcrypto");
    p += k;
    n -= size_t(k);
  }
}

void Gmac::tag(uint8_t out[kTagBytes]) {
  int outl = 0;
  unsigned char none[16];
  if (EVP_EncryptFinal_ex(cipher_ctx(ctx_), none, &outl) != 1 ||
      EVP_CIPHER_CTX_ctrl(cipher_ctx(ctx_), EVP_CTRL_AEAD_GET_TAG, int(kTagBytes), out) != 1)
    throw std::runtime_error("AES-256-GCM tag failed in libcrypto");
}

}  // namespace tc
