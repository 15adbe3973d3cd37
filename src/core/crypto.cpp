#include "core/crypto.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "core/ghash.h"

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
const EVP_CIPHER* EVP_aes_256_ecb(void);
int EVP_CIPHER_CTX_set_padding(EVP_CIPHER_CTX* ctx, int padding);
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

// The state of a message hashed by core/ghash.h: its GHASH so far, the
// bytes of an unfinished block, the length, and AES_K(J0) for the tag.
struct Gmac::Fast {
  ghash::Key key;
  uint8_t y[16] = {}, partial[16] = {}, ek_j0[16] = {};
  size_t held = 0;     // bytes in partial
  uint64_t total = 0;  // bytes of the message
};

namespace {

void aes_block(void* ctx, const uint8_t in[16], uint8_t out[16]) {
  int outl = 0;
  if (EVP_EncryptUpdate(cipher_ctx(ctx), out, &outl, in, 16) != 1 || outl != 16)
    throw std::runtime_error("AES-256 block failed in libcrypto");
}

// Whether core/ghash.h's kernel hashes faster than libcrypto's AES-GCM on
// this processor, timed once per process (a 64 KiB message, the best of 8
// alternating passes each; about 50 us in all). Neither wins everywhere:
// 1 MiB on an AMD EPYC (Zen 4) VM, ours 38.9 GB/s against 10.6; on an Intel
// Xeon host, ours 23.4 against 31.7 (libcrypto's VAES / VPCLMULQDQ code).
bool own_ghash_is_faster() {
  static const bool faster = [] {
    if (!ghash::available()) return false;
    const uint8_t key[Gmac::kKeyBytes] = {7}, nonce[Gmac::kNonceBytes] = {9};
    std::vector<uint8_t> msg(64 << 10, 0x5a);
    Gmac own(key, Gmac::Impl::kOwn), lib(key, Gmac::Impl::kLibcrypto);
    auto pass = [&](Gmac& g) {
      uint8_t tag[Gmac::kTagBytes];
      const auto t0 = std::chrono::steady_clock::now();
      g.begin(nonce);
      g.update(msg.data(), msg.size());
      g.tag(tag);
      return std::chrono::steady_clock::now() - t0;
    };
    auto best_own = pass(own), best_lib = pass(lib);  // (first passes warm both up)
    for (int i = 0; i < 8; ++i) {
      best_own = std::min(best_own, pass(own));
      best_lib = std::min(best_lib, pass(lib));
    }
    return best_own <= best_lib;
  }();
  return faster;
}

}  // namespace

Gmac::Gmac(const uint8_t key[kKeyBytes], Impl impl) : ctx_(EVP_CIPHER_CTX_new()) {
  const bool fast = impl == Impl::kOwn ? ghash::available() : impl == Impl::kBest && own_ghash_is_faster();
  if (!ctx_ || EVP_EncryptInit_ex(cipher_ctx(ctx_), fast ? EVP_aes_256_ecb() : EVP_aes_256_gcm(), nullptr, key,
                                  nullptr) != 1 ||
      (fast && EVP_CIPHER_CTX_set_padding(cipher_ctx(ctx_), 0) != 1)) {
    EVP_CIPHER_CTX_free(cipher_ctx(ctx_));
    throw std::runtime_error("AES-256-GCM init failed in libcrypto");
  }
  if (fast) {
    fast_ = std::make_unique<Fast>();
    const uint8_t zero[16] = {};
    uint8_t h[16];
    aes_block(ctx_, zero, h);  // H = AES_K(0^128)
    ghash::init(h, &fast_->key);
  }
}

Gmac::~Gmac() { EVP_CIPHER_CTX_free(cipher_ctx(ctx_)); }

void Gmac::begin(const uint8_t nonce[kNonceBytes]) {
  if (fast_) {
    // A 12-byte nonce: J0 = nonce | 0x00000001.
    uint8_t j0[16] = {};
    std::memcpy(j0, nonce, kNonceBytes);
    j0[15] = 1;
    aes_block(ctx_, j0, fast_->ek_j0);
    std::memset(fast_->y, 0, 16);
    fast_->held = 0;
    fast_->total = 0;
    return;
  }
  // GCM's default nonce is the 12 bytes given here.
  if (EVP_EncryptInit_ex(cipher_ctx(ctx_), nullptr, nullptr, nullptr, nonce) != 1)
    throw std::runtime_error("AES-256-GCM nonce failed in libcrypto");
}

void Gmac::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  if (fast_) {
    if (n == 0) return;  // (data may be null then)
    Fast& f = *fast_;
    f.total += n;
    if (f.held) {  // the message is the concatenation of the pieces fed in
      const size_t take = n < 16 - f.held ? n : 16 - f.held;
      std::memcpy(f.partial + f.held, p, take);
      f.held += take, p += take, n -= take;
      if (f.held < 16) return;
      ghash::blocks(f.key, f.y, f.partial, 1);
      f.held = 0;
    }
    ghash::blocks(f.key, f.y, p, n / 16);
    f.held = n % 16;
    std::memcpy(f.partial, p + (n - f.held), f.held);
    return;
  }
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
  if (fast_) {
    Fast& f = *fast_;
    if (f.held) {  // the last block, zero-padded
      std::memset(f.partial + f.held, 0, 16 - f.held);
      ghash::blocks(f.key, f.y, f.partial, 1);
      f.held = 0;
    }
    // The lengths block: the additional data's bits (64-bit big-endian), then the ciphertext's (none).
    uint8_t len[16] = {};
    for (int i = 0; i < 8; ++i) len[i] = uint8_t((f.total * 8) >> (56 - 8 * i));
    ghash::blocks(f.key, f.y, len, 1);
    ghash::output(f.y, out);
    for (size_t i = 0; i < kTagBytes; ++i) out[i] ^= f.ek_j0[i];
    return;
  }
  int outl = 0;
  unsigned char none[16];
  if (EVP_EncryptFinal_ex(cipher_ctx(ctx_), none, &outl) != 1 ||
      EVP_CIPHER_CTX_ctrl(cipher_ctx(ctx_), EVP_CTRL_AEAD_GET_TAG, int(kTagBytes), out) != 1)
    throw std::runtime_error("AES-256-GCM tag failed in libcrypto");
}

}  // namespace tc
