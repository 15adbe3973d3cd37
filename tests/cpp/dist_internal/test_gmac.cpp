// Gmac (core/crypto.h): the tags of its own GHASH (core/ghash.h) against
// libcrypto's AES-GCM on the same key, nonce and bytes, fed in pieces of
// every kind (a 4-byte prefix then the rest, as frames are; single bytes;
// whole 512-byte runs), and a published answer for both.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/crypto.h"
#include "core/ghash.h"

namespace {

using tc::Gmac;

std::vector<uint8_t> tag_of(Gmac& g, const uint8_t* nonce, const std::vector<uint8_t>& msg,
                            const std::vector<size_t>& cuts) {
  g.begin(nonce);
  size_t at = 0;
  for (size_t c : cuts) {
    g.update(msg.data() + at, c - at);
    at = c;
  }
  g.update(msg.data() + at, msg.size() - at);
  std::vector<uint8_t> t(Gmac::kTagBytes);
  g.tag(t.data());
  return t;
}

// The GCM specification's test case 13: AES-256, key and IV zero, nothing
// to authenticate or encrypt.
TEST(Gmac, KnownAnswer) {
  const uint8_t key[32] = {}, nonce[12] = {};
  const uint8_t expect[16] = {0x53, 0x0f, 0x8a, 0xfb, 0xc7, 0x45, 0x36, 0xb9,
                              0xa9, 0x63, 0xb4, 0xf1, 0xc4, 0xcb, 0x73, 0x8b};
  for (Gmac::Impl impl : {Gmac::Impl::kBest, Gmac::Impl::kOwn, Gmac::Impl::kLibcrypto}) {
    Gmac g(key, impl);
    EXPECT_EQ(tag_of(g, nonce, {}, {}), std::vector<uint8_t>(expect, expect + 16));
  }
}

TEST(Gmac, OwnGhashMatchesLibcrypto) {
  if (!tc::ghash::available()) GTEST_SKIP() << "no 512-bit carry-less multiply here: Gmac is libcrypto's alone";
  std::mt19937_64 rng(20261204);
  auto bytes = [&](size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = uint8_t(rng());
    return v;
  };
  const std::vector<uint8_t> key = bytes(32);
  Gmac ours(key.data(), Gmac::Impl::kOwn), ref(key.data(), Gmac::Impl::kLibcrypto);
  ASSERT_FALSE(ours.uses_libcrypto_ghash());
  ASSERT_TRUE(ref.uses_libcrypto_ghash());
  // Around every boundary of the kernel: a block, 32 blocks (one reduction), and many.
  for (size_t n : {size_t(0), size_t(1), size_t(4), size_t(15), size_t(16), size_t(17), size_t(100), size_t(511),
                   size_t(512), size_t(513), size_t(1024 + 4), size_t(4096 + 7), size_t(100003), size_t((1 << 20) + 4)}) {
    SCOPED_TRACE("bytes " + std::to_string(n));
    const std::vector<uint8_t> msg = bytes(n), nonce = bytes(12);
    const auto expect = tag_of(ref, nonce.data(), msg, {});
    EXPECT_EQ(tag_of(ours, nonce.data(), msg, {}), expect) << "one piece";
    if (n >= 4) EXPECT_EQ(tag_of(ours, nonce.data(), msg, {4}), expect) << "a frame's length prefix, then the rest";
    std::vector<size_t> cuts;
    for (size_t at = 0; at < n;) {
      at += 1 + rng() % 700;
      if (at < n) cuts.push_back(at);
    }
    EXPECT_EQ(tag_of(ours, nonce.data(), msg, cuts), expect) << "random pieces";
    if (n <= 600) {
      std::vector<size_t> each;
      for (size_t at = 1; at < n; ++at) each.push_back(at);
      EXPECT_EQ(tag_of(ours, nonce.data(), msg, each), expect) << "byte by byte";
    }
    if (n) {  // any changed bit changes the tag
      std::vector<uint8_t> bad = msg;
      bad[rng() % n] ^= uint8_t(1u << (rng() % 8));
      EXPECT_NE(tag_of(ours, nonce.data(), bad, {}), expect);
    }
  }
}

}  // namespace
