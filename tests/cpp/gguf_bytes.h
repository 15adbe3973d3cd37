// Builds GGUF files byte by byte for the reader tests, independently of the
// library's writer, so malformed files can be made on purpose.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gguf_test {

struct Bytes {
  std::vector<uint8_t> b;
  Bytes& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  template <class T>
  Bytes& raw(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(v); }
  Bytes& u64(uint64_t v) { return raw(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& pad_to(size_t align) {
    while (b.size() % align) b.push_back(0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

enum : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

// A small valid v3 file: metadata of every scalar type, a string array, a
// nested array, general.alignment 64, and three tensors (a Q4_0 matrix
// 64 x 2, an F32 vector of 8, an IQ4_NL matrix that is read but unsupported).
// Tensor bytes are filled with a recognisable pattern.
inline std::vector<uint8_t> small_file(uint32_t version = 3) {
  Bytes h;
  h.u32(0x46554747u).u32(version).u64(3).u64(17);
  h.str("general.architecture").u32(STRING).str("llama");
  h.str("general.alignment").u32(U32).u32(64);
  h.str("k.u8").u32(U8).u8(200);
  h.str("k.i8").u32(I8).raw<int8_t>(-100);
  h.str("k.u16").u32(U16).raw<uint16_t>(60000);
  h.str("k.i16").u32(I16).raw<int16_t>(-30000);
  h.str("k.u32").u32(U32).u32(4000000000u);
  h.str("k.i32").u32(I32).raw<int32_t>(-2000000000);
  h.str("k.f32").u32(F32).raw<float>(1.5f);
  h.str("k.bool").u32(BOOL).u8(1);
  h.str("k.u64").u32(U64).u64(18000000000000000000ull);
  h.str("k.i64").u32(I64).raw<int64_t>(-9000000000000000000ll);
  h.str("k.f64").u32(F64).raw<double>(-2.25);
  h.str("k.strs").u32(ARRAY).u32(STRING).u64(3).str("a").str("").str("ccc");
  // [[1, 2], [], [3]] of int32
  h.str("k.nested").u32(ARRAY).u32(ARRAY).u64(3);
  h.u32(I32).u64(2).raw<int32_t>(1).raw<int32_t>(2);
  h.u32(I32).u64(0);
  h.u32(I32).u64(1).raw<int32_t>(3);
  h.str("llama.embedding_length").u32(U32).u32(64);
  h.str("llama.block_count").u32(U32).u32(2);
  // tensors: q4_0 [64, 2] = 2 rows x 2 blocks x 18 = 72 bytes at 0;
  // f32 [8] = 32 bytes at 128; iq4_nl [32] = 18 bytes at 192
  h.str("w.q4").u32(2).u64(64).u64(2).u32(2).u64(0);
  h.str("v.f32").u32(1).u64(8).u32(0).u64(128);
  h.str("w.iq4").u32(1).u64(32).u32(20).u64(192);
  h.pad_to(64);
  const size_t data = h.size();
  h.b.resize(data + 192 + 18);
  for (size_t i = data; i < h.b.size(); ++i) h.b[i] = uint8_t(i * 7 + 3);
  // valid f16 scales (1.0) in the Q4_0 blocks, f32 values 0..7
  for (int blk = 0; blk < 4; ++blk) {
    h.b[data + blk * 18] = 0x00;
    h.b[data + blk * 18 + 1] = 0x3c;
  }
  for (int i = 0; i < 8; ++i) {
    float v = float(i);
    std::memcpy(&h.b[data + 128 + 4 * i], &v, 4);
  }
  return h.b;
}

}  // namespace gguf_test
