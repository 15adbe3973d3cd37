// SHA-256 (FIPS 180-4), for the content digests that identify callables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace simpler {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // 64 lowercase hex characters; the object is spent afterwards.
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);

}  // namespace simpler
