// The GGUF reader against valid, truncated, corrupted and hostile files:
// every bad file must give a clean status, never a crash or a huge
// allocation (these tests also run under AddressSanitizer in the fuzz build).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gguf_bytes.h"
#include "tensorcore/tensorcore.h"

using namespace gguf_test;

namespace {

tc_status open_mem(const std::vector<uint8_t>& b, tc_gguf* g) { return tc_gguf_open_memory(b.data(), b.size(), g); }

std::string temp_path(const char* tag) {
  return std::string("/tmp/tc_gguf_test_") + tag + "_" + std::to_string(getpid()) + ".gguf";
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!b.empty()) ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
  std::fclose(f);
}

// A header followed by `rest`.
std::vector<uint8_t> with_header(uint64_t n_tensors, uint64_t n_kv, const Bytes& rest, uint32_t version = 3) {
  Bytes h;
  h.u32(0x46554747u).u32(version).u64(n_tensors).u64(n_kv);
  h.b.insert(h.b.end(), rest.b.begin(), rest.b.end());
  return h.b;
}

tc_status status_of(const std::vector<uint8_t>& b) {
  tc_gguf g = nullptr;
  tc_status st = open_mem(b, &g);
  if (st == TC_OK) tc_gguf_close(g);
  return st;
}

}  // namespace

TEST(GgufReader, ReadsEveryMetadataType) {
  auto b = small_file();
  tc_gguf g;
  ASSERT_EQ(open_mem(b, &g), TC_OK) << tc_last_error_detail();
  uint32_t version;
  uint64_t align;
  int64_t n;
  ASSERT_EQ(tc_gguf_version(g, &version), TC_OK);
  EXPECT_EQ(version, 3u);
  ASSERT_EQ(tc_gguf_alignment(g, &align), TC_OK);
  EXPECT_EQ(align, 64u);
  ASSERT_EQ(tc_gguf_metadata_count(g, &n), TC_OK);
  EXPECT_EQ(n, 17);
  ASSERT_EQ(tc_gguf_tensor_count(g, &n), TC_OK);
  EXPECT_EQ(n, 3);

  const char* s;
  size_t len;
  ASSERT_EQ(tc_gguf_meta_get_str(g, "general.architecture", &s, &len), TC_OK);
  EXPECT_STREQ(s, "llama");
  EXPECT_EQ(len, 5u);
  int64_t i;
  uint64_t u;
  double f;
  struct {
    const char* key;
    int64_t v;
  } ints[] = {{"k.u8", 200},          {"k.i8", -100},           {"k.u16", 60000}, {"k.i16", -30000},
              {"k.u32", 4000000000}, {"k.i32", -2000000000}, {"k.bool", 1},    {"k.i64", -9000000000000000000ll}};
  for (auto& c : ints) {
    ASSERT_EQ(tc_gguf_meta_get_i64(g, c.key, &i), TC_OK) << c.key;
    EXPECT_EQ(i, c.v) << c.key;
  }
  EXPECT_EQ(tc_gguf_meta_get_i64(g, "k.u64", &i), TC_ERR_INVALID_ARG);  // above INT64_MAX
  ASSERT_EQ(tc_gguf_meta_get_u64(g, "k.u64", &u), TC_OK);
  EXPECT_EQ(u, 18000000000000000000ull);
  EXPECT_EQ(tc_gguf_meta_get_u64(g, "k.i8", &u), TC_ERR_INVALID_ARG);  // negative
  ASSERT_EQ(tc_gguf_meta_get_f64(g, "k.f32", &f), TC_OK);
  EXPECT_EQ(f, 1.5);
  ASSERT_EQ(tc_gguf_meta_get_f64(g, "k.f64", &f), TC_OK);
  EXPECT_EQ(f, -2.25);
  ASSERT_EQ(tc_gguf_meta_get_f64(g, "k.i16", &f), TC_OK);  // integers convert
  EXPECT_EQ(f, -30000.0);
  // Wrong types and missing keys are INVALID_ARG.
  EXPECT_EQ(tc_gguf_meta_get_i64(g, "k.f32", &i), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_meta_get_str(g, "k.u8", &s, nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_meta_get_f64(g, "k.strs", &f), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_meta_get_i64(g, "no.such.key", &i), TC_ERR_INVALID_ARG);
  EXPECT_NE(std::string(tc_last_error_detail()).find("no.such.key"), std::string::npos);
  int64_t idx;
  ASSERT_EQ(tc_gguf_meta_find(g, "no.such.key", &idx), TC_OK);
  EXPECT_EQ(idx, -1);
  ASSERT_EQ(tc_gguf_meta_find(g, "k.u8", &idx), TC_OK);
  EXPECT_EQ(idx, 2);
  const char* key;
  ASSERT_EQ(tc_gguf_meta_key_at(g, 16, &key), TC_OK);
  EXPECT_STREQ(key, "llama.block_count");
  EXPECT_EQ(tc_gguf_meta_key_at(g, 17, &key), TC_ERR_INVALID_ARG);

  // Arrays of strings.
  int32_t type, et;
  ASSERT_EQ(tc_gguf_meta_type(g, "k.strs", &type, &et, &n), TC_OK);
  EXPECT_EQ(type, TC_GGUF_TYPE_ARRAY);
  EXPECT_EQ(et, TC_GGUF_TYPE_STRING);
  EXPECT_EQ(n, 3);
  ASSERT_EQ(tc_gguf_meta_array_get_str(g, "k.strs", 2, &s, &len), TC_OK);
  EXPECT_STREQ(s, "ccc");
  ASSERT_EQ(tc_gguf_meta_array_get_str(g, "k.strs", 1, &s, &len), TC_OK);
  EXPECT_EQ(len, 0u);
  EXPECT_EQ(tc_gguf_meta_array_get_str(g, "k.strs", 3, &s, &len), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_meta_array_get_str(g, "k.strs", -1, &s, &len), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_meta_array_count(g, "k.u8", &n), TC_ERR_INVALID_ARG);

  // Nested: [[1, 2], [], [3]].
  ASSERT_EQ(tc_gguf_meta_array_count(g, "k.nested", &n), TC_OK);
  EXPECT_EQ(n, 3);
  int64_t path[2] = {0, 1};
  ASSERT_EQ(tc_gguf_meta_nested_type(g, "k.nested", path, 1, &type, &et, &n), TC_OK);
  EXPECT_EQ(type, TC_GGUF_TYPE_ARRAY);
  EXPECT_EQ(et, TC_GGUF_TYPE_INT32);
  EXPECT_EQ(n, 2);
  ASSERT_EQ(tc_gguf_meta_nested_get_i64(g, "k.nested", path, 2, &i), TC_OK);
  EXPECT_EQ(i, 2);
  path[0] = 2;
  path[1] = 0;
  ASSERT_EQ(tc_gguf_meta_nested_get_i64(g, "k.nested", path, 2, &i), TC_OK);
  EXPECT_EQ(i, 3);
  path[0] = 1;
  EXPECT_EQ(tc_gguf_meta_nested_get_i64(g, "k.nested", path, 2, &i), TC_ERR_INVALID_ARG);  // empty inner
  EXPECT_EQ(tc_gguf_meta_array_get_i64(g, "k.nested", 0, &i), TC_ERR_INVALID_ARG);         // an array, not int
  int64_t deep[3] = {0, 0, 0};
  EXPECT_EQ(tc_gguf_meta_nested_get_i64(g, "k.nested", deep, 3, &i), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_meta_nested_get_i64(g, "k.nested", nullptr, 1, &i), TC_ERR_INVALID_ARG);

  // Tensors.
  struct tc_gguf_tensor_info t;
  ASSERT_EQ(tc_gguf_get_tensor(g, "w.q4", &t), TC_OK);
  EXPECT_EQ(t.type, TC_GGML_TYPE_Q4_0);
  EXPECT_EQ(t.quant_type, TC_QUANT_Q4_0);
  EXPECT_EQ(t.n_dims, 2);
  EXPECT_EQ(t.dims[0], 64);
  EXPECT_EQ(t.dims[1], 2);
  EXPECT_EQ(t.dims[2], 1);
  EXPECT_EQ(t.n_bytes, 72u);
  EXPECT_EQ(t.offset, 0u);
  ASSERT_EQ(tc_gguf_tensor_at(g, 2, &t), TC_OK);
  EXPECT_STREQ(t.name, "w.iq4");
  EXPECT_EQ(t.quant_type, -1);
  EXPECT_EQ(t.n_bytes, 18u);
  EXPECT_EQ(t.offset, 192u);
  EXPECT_EQ(t.file_offset % 64, 0u);
  EXPECT_EQ(tc_gguf_tensor_at(g, 3, &t), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_get_tensor(g, "nope", &t), TC_ERR_INVALID_ARG);
  struct tc_quantized_matrix_info qi;
  ASSERT_EQ(tc_gguf_tensor_quantized_matrix_info(g, "w.q4", &qi), TC_OK);
  EXPECT_EQ(qi.N, 2);
  EXPECT_EQ(qi.K, 64);
  EXPECT_EQ(qi.quant_type, TC_QUANT_Q4_0);
  EXPECT_EQ(qi.buffer, nullptr);
  EXPECT_EQ(tc_gguf_tensor_quantized_matrix_info(g, "w.iq4", &qi), TC_ERR_UNSUPPORTED_DTYPE);
  // The refusal names the tensor and its type.
  EXPECT_NE(std::string(tc_last_error_detail()).find("tensor 'w.iq4' has type IQ4_NL, which tensorcore does not "
                                                     "compute with"),
            std::string::npos)
      << tc_last_error_detail();
  const void* data;
  uint64_t nb;
  ASSERT_EQ(tc_gguf_tensor_data(g, "v.f32", &data, &nb), TC_OK);
  EXPECT_EQ(nb, 32u);
  EXPECT_EQ(static_cast<const float*>(data)[7], 7.0f);

  struct tc_gguf_llama_config c;
  ASSERT_EQ(tc_gguf_get_llama_config(g, &c), TC_ERR_UNSUPPORTED);  // no head_count
  EXPECT_EQ(tc_gguf_close(g), TC_OK);
  EXPECT_EQ(tc_gguf_close(g), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_tensor_count(g, &n), TC_ERR_INVALID_ARG);
}

TEST(GgufReader, Version2AndFiles) {
  auto b = small_file(2);
  std::string path = temp_path("v2");
  write_file(path, b);
  tc_gguf g;
  ASSERT_EQ(tc_gguf_open(path.c_str(), &g), TC_OK) << tc_last_error_detail();
  uint32_t v;
  ASSERT_EQ(tc_gguf_version(g, &v), TC_OK);
  EXPECT_EQ(v, 2u);
  tc_gguf_close(g);
  std::remove(path.c_str());
}

TEST(GgufReader, OpenErrors) {
  tc_gguf g = nullptr;
  EXPECT_EQ(tc_gguf_open("/nonexistent/dir/x.gguf", &g), TC_ERR_IO);
  EXPECT_NE(std::string(tc_last_error_detail()).find("nonexistent"), std::string::npos);
  EXPECT_EQ(tc_gguf_open("/tmp", &g), TC_ERR_IO);  // a directory
  std::string path = temp_path("empty");
  write_file(path, {});
  EXPECT_EQ(tc_gguf_open(path.c_str(), &g), TC_ERR_CORRUPT);
  std::remove(path.c_str());
  EXPECT_EQ(tc_gguf_open(nullptr, &g), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_open("/tmp", nullptr), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_open_memory(nullptr, 10, &g), TC_ERR_INVALID_ARG);
  EXPECT_EQ(g, nullptr);
}

TEST(GgufReader, TruncatedAtEveryOffset) {
  auto b = small_file();
  // Header, metadata and tensor infos: every prefix fails cleanly. Past the
  // infos, a prefix is still valid until the data of some tensor is cut.
  tc_gguf g;
  ASSERT_EQ(open_mem(b, &g), TC_OK);
  uint64_t data_start;
  tc_gguf_data_offset(g, &data_start);
  tc_gguf_close(g);
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + long(n));
    tc_status st = status_of(cut);
    EXPECT_EQ(st, TC_ERR_CORRUPT) << "prefix of " << n << " bytes";
    EXPECT_NE(std::string(tc_last_error_detail()), "");
  }
  // Through a file too, a few sizes.
  std::string path = temp_path("trunc");
  for (size_t n : {size_t(0), size_t(4), size_t(23), size_t(24), size_t(100), size_t(data_start), b.size() - 1}) {
    write_file(path, std::vector<uint8_t>(b.begin(), b.begin() + long(n)));
    EXPECT_EQ(tc_gguf_open(path.c_str(), &g), TC_ERR_CORRUPT) << n;
  }
  std::remove(path.c_str());
}

TEST(GgufReader, EveryByteFlippedNeverCrashes) {
  // Each byte of the header region set to 0xFF and to 0x00 in turn: any status
  // is fine, a crash or a sanitizer report is not.
  auto b = small_file();
  tc_gguf g;
  ASSERT_EQ(open_mem(b, &g), TC_OK);
  uint64_t data_start;
  tc_gguf_data_offset(g, &data_start);
  tc_gguf_close(g);
  for (size_t i = 0; i < data_start; ++i) {
    for (uint8_t v : {uint8_t(0xFF), uint8_t(0x00), uint8_t(b[i] ^ 0x80)}) {
      auto c = b;
      c[i] = v;
      if (open_mem(c, &g) == TC_OK) {
        int64_t n;
        tc_gguf_tensor_count(g, &n);
        struct tc_gguf_llama_config cfg;
        tc_gguf_get_llama_config(g, &cfg);
        tc_gguf_close(g);
      } else {
        EXPECT_NE(std::string(tc_last_error_detail()), "");
      }
    }
  }
}

TEST(GgufReader, BadMagicAndVersions) {
  auto b = small_file();
  auto c = b;
  c[0] = 'X';
  EXPECT_EQ(status_of(c), TC_ERR_CORRUPT);
  EXPECT_NE(std::string(tc_last_error_detail()).find("magic"), std::string::npos);
  for (uint32_t v : {0u, 4u, 99u, 0xFFFFFFFFu}) {
    c = b;
    std::memcpy(&c[4], &v, 4);
    EXPECT_EQ(status_of(c), TC_ERR_CORRUPT) << v;
  }
  for (uint32_t v : {1u, 0x02000000u, 0x03000000u}) {
    c = b;
    std::memcpy(&c[4], &v, 4);
    EXPECT_EQ(status_of(c), TC_ERR_UNSUPPORTED) << v;
  }
}

TEST(GgufReader, HugeCountsAndLengths) {
  // Counts and lengths far beyond the file are refused before any allocation.
  EXPECT_EQ(status_of(with_header(0, UINT64_MAX, Bytes())), TC_ERR_CORRUPT);
  EXPECT_EQ(status_of(with_header(UINT64_MAX, 0, Bytes())), TC_ERR_CORRUPT);
  EXPECT_EQ(status_of(with_header(1ull << 40, 1ull << 40, Bytes().u64(0))), TC_ERR_CORRUPT);
  Bytes k;
  k.u64(UINT64_MAX);  // key length
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  k = Bytes();
  k.u64(1ull << 62);
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  k = Bytes();
  k.str("a").u32(STRING).u64(UINT64_MAX - 3);
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  for (uint32_t et : {U8, U64, STRING, ARRAY}) {
    k = Bytes();
    k.str("a").u32(ARRAY).u32(et).u64(UINT64_MAX / 2 + 7);
    EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT) << et;
  }
  k = Bytes();
  k.str("a").u32(ARRAY).u32(13).u64(1).u8(0);  // unknown element type
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  k = Bytes();
  k.str("a").u32(77).u64(0);  // unknown value type
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  // Arrays nested deeper than the limit.
  k = Bytes();
  k.str("a").u32(ARRAY);
  for (int d = 0; d < 40; ++d) k.u32(ARRAY).u64(1);
  k.u32(U8).u64(0);
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  EXPECT_NE(std::string(tc_last_error_detail()).find("deep"), std::string::npos);
  // Deep but allowed.
  k = Bytes();
  k.str("a").u32(ARRAY);
  for (int d = 0; d < 15; ++d) k.u32(ARRAY).u64(1);
  k.u32(U8).u64(1).u8(5);
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_OK) << tc_last_error_detail();
}

TEST(GgufReader, DuplicatesAndAlignment) {
  Bytes k;
  k.str("a").u32(U8).u8(1).str("a").u32(U8).u8(2);
  EXPECT_EQ(status_of(with_header(0, 2, k)), TC_ERR_CORRUPT);
  EXPECT_NE(std::string(tc_last_error_detail()).find("duplicate"), std::string::npos);
  for (uint32_t a : {0u, 3u, 48u, 1u << 31}) {
    k = Bytes();
    k.str("general.alignment").u32(U32).u32(a);
    EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT) << a;
  }
  k = Bytes();
  k.str("general.alignment").u32(STRING).str("32");
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_ERR_CORRUPT);
  k = Bytes();
  k.str("general.alignment").u32(U64).u64(1);  // any integer type, power of two
  EXPECT_EQ(status_of(with_header(0, 1, k)), TC_OK);
  // Two tensors of one name.
  Bytes t;
  t.str("x").u32(1).u64(4).u32(0).u64(0).str("x").u32(1).u64(4).u32(0).u64(32);
  EXPECT_EQ(status_of(with_header(2, 0, t)), TC_ERR_CORRUPT);
  EXPECT_NE(std::string(tc_last_error_detail()).find("duplicate tensor"), std::string::npos);
}

// One tensor info, then data of `data_bytes` at the default alignment.
std::vector<uint8_t> one_tensor(uint32_t n_dims, std::vector<uint64_t> dims, uint32_t type, uint64_t offset,
                                size_t data_bytes) {
  Bytes t;
  t.str("t").u32(n_dims);
  for (uint64_t d : dims) t.u64(d);
  t.u32(type).u64(offset);
  auto f = with_header(1, 0, t);
  while (f.size() % 32) f.push_back(0);
  f.resize(f.size() + data_bytes, 0);
  return f;
}

TEST(GgufReader, BadTensorInfos) {
  EXPECT_EQ(status_of(one_tensor(1, {8}, 0, 0, 32)), TC_OK) << tc_last_error_detail();
  EXPECT_EQ(status_of(one_tensor(1, {8}, 0, 0, 31)), TC_ERR_CORRUPT);     // data cut short
  EXPECT_EQ(status_of(one_tensor(1, {8}, 0, 32, 32)), TC_ERR_CORRUPT);    // offset past the end
  EXPECT_EQ(status_of(one_tensor(1, {8}, 0, 16, 64)), TC_ERR_CORRUPT);    // misaligned
  EXPECT_NE(std::string(tc_last_error_detail()).find("alignment"), std::string::npos);
  EXPECT_EQ(status_of(one_tensor(1, {8}, 0, UINT64_MAX - 31, 32)), TC_ERR_CORRUPT);  // offset + size wraps
  EXPECT_EQ(status_of(one_tensor(1, {8}, 99, 0, 32)), TC_ERR_CORRUPT);    // unknown type
  EXPECT_EQ(status_of(one_tensor(1, {8}, 4, 0, 32)), TC_ERR_CORRUPT);     // removed type id 4
  EXPECT_EQ(status_of(one_tensor(1, {33}, 2, 0, 64)), TC_ERR_CORRUPT);    // not whole Q4_0 blocks
  EXPECT_EQ(status_of(one_tensor(9, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 32)), TC_ERR_CORRUPT);  // too many dims
  EXPECT_EQ(status_of(one_tensor(2, {1ull << 63, 1}, 0, 0, 32)), TC_ERR_CORRUPT);      // dim beyond int64
  EXPECT_EQ(status_of(one_tensor(2, {1ull << 32, 1ull << 32}, 0, 0, 32)), TC_ERR_CORRUPT);  // product overflows
  EXPECT_EQ(status_of(one_tensor(3, {1ull << 40, 1ull << 20, 1ull << 2}, 0, 0, 32)), TC_ERR_CORRUPT);
  EXPECT_EQ(status_of(one_tensor(2, {1ull << 62, 2}, 0, 0, 32)), TC_ERR_CORRUPT);  // bytes overflow
  EXPECT_EQ(status_of(one_tensor(2, {32, 1ull << 40}, 2, 0, 32)), TC_ERR_CORRUPT);  // far larger than the file
  EXPECT_EQ(status_of(one_tensor(1, {0}, 0, 0, 0)), TC_OK);  // an empty tensor is valid
  EXPECT_EQ(status_of(one_tensor(0, {}, 0, 0, 4)), TC_OK);   // a 0-d scalar
}

TEST(GgufReader, LoadedModelAndBuffers) {
  auto b = small_file();
  std::string path = temp_path("load");
  write_file(path, b);
  tc_context ctx;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  tc_gguf g;
  ASSERT_EQ(tc_gguf_open(path.c_str(), &g), TC_OK);
  tc_gguf_model m;
  ASSERT_EQ(tc_gguf_load_supported_tensors(ctx, g, &m), TC_OK) << tc_last_error_detail();
  int64_t n;
  ASSERT_EQ(tc_gguf_loaded_tensor_count(m, &n), TC_OK);
  EXPECT_EQ(n, 2);
  ASSERT_EQ(tc_gguf_loaded_skipped_tensor_count(m, &n), TC_OK);
  EXPECT_EQ(n, 1);  // IQ4_NL
  struct tc_gguf_loaded_tensor lt;
  ASSERT_EQ(tc_gguf_loaded_get_tensor(m, "v.f32", &lt), TC_OK);
  EXPECT_EQ(lt.n_bytes, 32u);
  float v[8];
  ASSERT_EQ(tc_buffer_read(lt.buffer, 0, v, 32), TC_OK);
  EXPECT_EQ(v[5], 5.0f);
  EXPECT_EQ(tc_buffer_free(lt.buffer), TC_ERR_INVALID_ARG);  // owned by the model
  EXPECT_EQ(tc_shutdown(ctx), TC_ERR_INVALID_ARG);          // model buffers are alive
  // Writing into a loaded buffer changes neither the file nor a second buffer.
  float nine = 9.0f;
  ASSERT_EQ(tc_buffer_write(lt.buffer, 0, &nine, 4), TC_OK);
  tc_buffer copy;
  ASSERT_EQ(tc_gguf_tensor_to_buffer(ctx, g, "v.f32", &copy), TC_OK);
  ASSERT_EQ(tc_buffer_read(copy, 0, v, 32), TC_OK);
  EXPECT_EQ(v[0], 0.0f);
  const void* data;
  tc_gguf_tensor_data(g, "v.f32", &data, nullptr);
  EXPECT_EQ(static_cast<const float*>(data)[0], 0.0f);
  ASSERT_EQ(tc_gguf_close(g), TC_OK);  // buffers outlive the file handle
  ASSERT_EQ(tc_buffer_read(lt.buffer, 0, v, 32), TC_OK);
  EXPECT_EQ(v[0], 9.0f);
  EXPECT_EQ(v[7], 7.0f);
  struct tc_quantized_matrix_info qi;
  ASSERT_EQ(tc_gguf_loaded_tensor_quantized_matrix_info(m, "w.q4", &qi), TC_OK);
  EXPECT_EQ(qi.N, 2);
  EXPECT_EQ(qi.K, 64);
  EXPECT_NE(qi.buffer, nullptr);
  EXPECT_EQ(tc_gguf_loaded_tensor_quantized_matrix_info(m, "w.iq4", &qi), TC_ERR_INVALID_ARG);  // not loaded
  ASSERT_EQ(tc_gguf_loaded_tensor_at(m, 0, &lt), TC_OK);
  EXPECT_STREQ(lt.name, "w.q4");
  EXPECT_EQ(tc_gguf_loaded_tensor_at(m, 2, &lt), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_buffer_free(copy), TC_OK);
  EXPECT_EQ(tc_gguf_loaded_model_free(m), TC_OK);
  EXPECT_EQ(tc_gguf_loaded_model_free(m), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_shutdown(ctx), TC_OK);
  std::remove(path.c_str());
}

TEST(GgufReader, LoadFromMemoryCopies) {
  auto b = small_file();
  tc_context ctx;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  tc_gguf g;
  ASSERT_EQ(open_mem(b, &g), TC_OK);
  tc_gguf_model m;
  ASSERT_EQ(tc_gguf_load_supported_tensors(ctx, g, &m), TC_OK);
  tc_gguf_close(g);
  struct tc_gguf_loaded_tensor lt;
  ASSERT_EQ(tc_gguf_loaded_get_tensor(m, "v.f32", &lt), TC_OK);
  float v[8];
  ASSERT_EQ(tc_buffer_read(lt.buffer, 0, v, 32), TC_OK);
  EXPECT_EQ(v[3], 3.0f);
  EXPECT_EQ(tc_gguf_load_supported_tensors(ctx, g, &m), TC_ERR_INVALID_ARG);  // closed handle
  tc_gguf_loaded_model_free(m);
  tc_shutdown(ctx);
}

TEST(GgufReader, LlamaConfig) {
  Bytes k;
  k.str("general.architecture").u32(STRING).str("mistral");
  k.str("mistral.embedding_length").u32(U32).u32(4096);
  k.str("mistral.block_count").u32(U64).u64(32);
  k.str("mistral.attention.head_count").u32(U32).u32(32);
  k.str("mistral.attention.head_count_kv").u32(ARRAY).u32(I32).u64(3).raw<int32_t>(8).raw<int32_t>(4).raw<int32_t>(8);
  k.str("mistral.feed_forward_length").u32(U32).u32(14336);
  k.str("mistral.rope.freq_base").u32(F32).raw<float>(1000000.0f);
  k.str("mistral.rope.scaling.factor").u32(F32).raw<float>(4.0f);
  k.str("tokenizer.ggml.tokens").u32(ARRAY).u32(STRING).u64(2).str("<s>").str("</s>");
  tc_gguf g;
  auto f = with_header(0, 9, k);
  ASSERT_EQ(open_mem(f, &g), TC_OK) << tc_last_error_detail();
  struct tc_gguf_llama_config c;
  ASSERT_EQ(tc_gguf_get_llama_config(g, &c), TC_OK) << tc_last_error_detail();
  EXPECT_STREQ(c.architecture, "mistral");
  EXPECT_EQ(c.embedding_length, 4096);
  EXPECT_EQ(c.block_count, 32);
  EXPECT_EQ(c.attention_head_count, 32);
  EXPECT_EQ(c.attention_head_count_kv, 8);  // largest per-layer entry
  EXPECT_EQ(c.feed_forward_length, 14336);
  EXPECT_EQ(c.rope_dimension_count, 128);
  EXPECT_EQ(c.vocab_size, 2);
  EXPECT_EQ(c.context_length, 0);
  EXPECT_DOUBLE_EQ(c.rms_norm_epsilon, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_freq_base, 1e6);
  EXPECT_DOUBLE_EQ(c.rope_freq_scale, 0.25);
  tc_gguf_close(g);
  // A wrongly typed key is CORRUPT with the key named.
  k = Bytes();
  k.str("general.architecture").u32(STRING).str("llama");
  k.str("llama.embedding_length").u32(STRING).str("big");
  f = with_header(0, 2, k);
  ASSERT_EQ(open_mem(f, &g), TC_OK);
  EXPECT_EQ(tc_gguf_get_llama_config(g, &c), TC_ERR_CORRUPT);
  EXPECT_NE(std::string(tc_last_error_detail()).find("llama.embedding_length"), std::string::npos);
  tc_gguf_close(g);
}
