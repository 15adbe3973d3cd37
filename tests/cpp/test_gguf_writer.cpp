// The GGUF writer: files it writes read back identically, and misuse gives
// clean statuses without changing what was built.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tensorcore/tensorcore.h"

namespace {

std::string temp_path(const char* tag) {
  return std::string("/tmp/tc_gguf_writer_") + tag + "_" + std::to_string(getpid()) + ".gguf";
}

struct Writer {
  tc_gguf_writer w = nullptr;
  Writer() { EXPECT_EQ(tc_gguf_writer_create(&w), TC_OK); }
  ~Writer() { tc_gguf_writer_free(w); }
};

}  // namespace

TEST(GgufWriter, RoundTripEveryTypeAndTensors) {
  Writer w;
  ASSERT_EQ(tc_gguf_writer_set_u8(w.w, "u8", 250), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_i8(w.w, "i8", -5), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_u16(w.w, "u16", 65535), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_i16(w.w, "i16", -32768), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_u32(w.w, "u32", 4294967295u), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_i32(w.w, "i32", -7), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_f32(w.w, "f32", 0.1f), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_bool(w.w, "bool", 7), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_u64(w.w, "u64", UINT64_MAX), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_i64(w.w, "i64", INT64_MIN), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_f64(w.w, "f64", 1e300), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_str(w.w, "str", "a\0b", 3), TC_OK);
  const float fs[3] = {1, 2, 3};
  ASSERT_EQ(tc_gguf_writer_set_array(w.w, "arr.f32", TC_GGUF_TYPE_FLOAT32, fs, 3), TC_OK);
  const char* strs[2] = {"x", "yz"};
  ASSERT_EQ(tc_gguf_writer_set_str_array(w.w, "arr.str", strs, nullptr, 2), TC_OK);
  // [[1, 2, 3], ["p"], []]
  ASSERT_EQ(tc_gguf_writer_begin_array(w.w, "arr.nested", TC_GGUF_TYPE_ARRAY), TC_OK);
  ASSERT_EQ(tc_gguf_writer_begin_array(w.w, nullptr, TC_GGUF_TYPE_INT16), TC_OK);
  const int16_t i16[3] = {1, 2, 3};
  ASSERT_EQ(tc_gguf_writer_push_values(w.w, TC_GGUF_TYPE_INT16, i16, 2), TC_OK);
  ASSERT_EQ(tc_gguf_writer_push_values(w.w, TC_GGUF_TYPE_INT16, i16 + 2, 1), TC_OK);
  ASSERT_EQ(tc_gguf_writer_end_array(w.w), TC_OK);
  ASSERT_EQ(tc_gguf_writer_begin_array(w.w, nullptr, TC_GGUF_TYPE_STRING), TC_OK);
  ASSERT_EQ(tc_gguf_writer_push_str(w.w, "p", 1), TC_OK);
  ASSERT_EQ(tc_gguf_writer_end_array(w.w), TC_OK);
  ASSERT_EQ(tc_gguf_writer_begin_array(w.w, nullptr, TC_GGUF_TYPE_UINT8), TC_OK);
  ASSERT_EQ(tc_gguf_writer_end_array(w.w), TC_OK);
  ASSERT_EQ(tc_gguf_writer_end_array(w.w), TC_OK);
  ASSERT_EQ(tc_gguf_writer_set_alignment(w.w, 128), TC_OK);

  std::vector<uint8_t> q(2 * 2 * 18);
  for (size_t i = 0; i < q.size(); ++i) q[i] = uint8_t(i);
  const int64_t qd[2] = {64, 2};
  ASSERT_EQ(tc_gguf_writer_add_tensor(w.w, "q", TC_GGML_TYPE_Q4_0, qd, 2, q.data(), q.size(), 1), TC_OK);
  std::vector<float> v = {1, 2, 3, 4, 5};
  const int64_t vd[1] = {5};
  ASSERT_EQ(tc_gguf_writer_add_tensor(w.w, "v", TC_GGML_TYPE_F32, vd, 1, v.data(), 20, 0), TC_OK);
  tc_context ctx;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  tc_buffer b;
  ASSERT_EQ(tc_buffer_alloc(ctx, 64, &b), TC_OK);
  std::vector<uint8_t> bb(64);
  for (int i = 0; i < 64; ++i) bb[i] = uint8_t(255 - i);
  tc_buffer_write(b, 0, bb.data(), 64);
  const int64_t bd[1] = {16};
  ASSERT_EQ(tc_gguf_writer_add_tensor_buffer(w.w, "b", TC_GGML_TYPE_F16, bd, 1, b, 32), TC_OK);
  EXPECT_EQ(tc_gguf_writer_add_tensor_buffer(w.w, "b2", TC_GGML_TYPE_F16, bd, 1, b, 33), TC_ERR_INVALID_ARG);
  tc_buffer_free(b);
  tc_shutdown(ctx);
  v[4] = 50;  // borrowed: read at write time

  std::string path = temp_path("rt");
  ASSERT_EQ(tc_gguf_writer_write_file(w.w, path.c_str()), TC_OK) << tc_last_error_detail();

  tc_gguf g;
  ASSERT_EQ(tc_gguf_open(path.c_str(), &g), TC_OK) << tc_last_error_detail();
  int64_t i;
  uint64_t u;
  double f;
  const char* s;
  size_t len;
  ASSERT_EQ(tc_gguf_meta_get_i64(g, "u8", &i), TC_OK);
  EXPECT_EQ(i, 250);
  ASSERT_EQ(tc_gguf_meta_get_i64(g, "i16", &i), TC_OK);
  EXPECT_EQ(i, -32768);
  ASSERT_EQ(tc_gguf_meta_get_u64(g, "u64", &u), TC_OK);
  EXPECT_EQ(u, UINT64_MAX);
  ASSERT_EQ(tc_gguf_meta_get_i64(g, "i64", &i), TC_OK);
  EXPECT_EQ(i, INT64_MIN);
  ASSERT_EQ(tc_gguf_meta_get_f64(g, "f32", &f), TC_OK);
  EXPECT_EQ(float(f), 0.1f);
  ASSERT_EQ(tc_gguf_meta_get_i64(g, "bool", &i), TC_OK);
  EXPECT_EQ(i, 1);
  ASSERT_EQ(tc_gguf_meta_get_str(g, "str", &s, &len), TC_OK);
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(std::memcmp(s, "a\0b", 3), 0);
  const void* data;
  int32_t et;
  int64_t n;
  ASSERT_EQ(tc_gguf_meta_array_data(g, "arr.f32", &data, &et, &n), TC_OK);
  EXPECT_EQ(et, TC_GGUF_TYPE_FLOAT32);
  EXPECT_EQ(n, 3);
  EXPECT_EQ(std::memcmp(data, fs, 12), 0);
  ASSERT_EQ(tc_gguf_meta_array_get_str(g, "arr.str", 1, &s, nullptr), TC_OK);
  EXPECT_STREQ(s, "yz");
  int64_t path2[2] = {0, 2};
  ASSERT_EQ(tc_gguf_meta_nested_get_i64(g, "arr.nested", path2, 2, &i), TC_OK);
  EXPECT_EQ(i, 3);
  path2[0] = 1;
  path2[1] = 0;
  ASSERT_EQ(tc_gguf_meta_nested_get_str(g, "arr.nested", path2, 2, &s, nullptr), TC_OK);
  EXPECT_STREQ(s, "p");
  path2[0] = 2;
  int32_t type;
  ASSERT_EQ(tc_gguf_meta_nested_type(g, "arr.nested", path2, 1, &type, &et, &n), TC_OK);
  EXPECT_EQ(et, TC_GGUF_TYPE_UINT8);
  EXPECT_EQ(n, 0);
  uint64_t align;
  tc_gguf_alignment(g, &align);
  EXPECT_EQ(align, 128u);
  ASSERT_EQ(tc_gguf_meta_get_u64(g, "general.alignment", &u), TC_OK);
  EXPECT_EQ(u, 128u);
  struct tc_gguf_tensor_info t;
  ASSERT_EQ(tc_gguf_get_tensor(g, "q", &t), TC_OK);
  EXPECT_EQ(t.file_offset % 128, 0u);
  ASSERT_EQ(tc_gguf_tensor_data(g, "q", &data, nullptr), TC_OK);
  EXPECT_EQ(std::memcmp(data, q.data(), q.size()), 0);
  ASSERT_EQ(tc_gguf_get_tensor(g, "v", &t), TC_OK);
  EXPECT_EQ(t.offset % 128, 0u);
  ASSERT_EQ(tc_gguf_tensor_data(g, "v", &data, nullptr), TC_OK);
  EXPECT_EQ(static_cast<const float*>(data)[4], 50.0f);
  ASSERT_EQ(tc_gguf_tensor_data(g, "b", &data, nullptr), TC_OK);
  EXPECT_EQ(std::memcmp(data, bb.data() + 32, 32), 0);
  tc_gguf_close(g);
  std::remove(path.c_str());
}

TEST(GgufWriter, MisuseIsRefusedCleanly) {
  Writer w;
  EXPECT_EQ(tc_gguf_writer_set_u8(w.w, nullptr, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_u8(w.w, "", 1), TC_ERR_INVALID_ARG);
  ASSERT_EQ(tc_gguf_writer_set_u8(w.w, "a", 1), TC_OK);
  EXPECT_EQ(tc_gguf_writer_set_i32(w.w, "a", 1), TC_ERR_INVALID_ARG);  // duplicate
  EXPECT_EQ(tc_gguf_writer_set_u64(w.w, "general.alignment", 64), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_u32(w.w, "general.alignment", 48), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_alignment(w.w, 0), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_version(w.w, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_array(w.w, "x", TC_GGUF_TYPE_STRING, "a", 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_array(w.w, "x", 13, "a", 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_set_array(w.w, "x", TC_GGUF_TYPE_UINT8, nullptr, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_push_str(w.w, "a", 1), TC_ERR_INVALID_ARG);  // no array open
  EXPECT_EQ(tc_gguf_writer_end_array(w.w), TC_ERR_INVALID_ARG);
  ASSERT_EQ(tc_gguf_writer_begin_array(w.w, "arr", TC_GGUF_TYPE_INT32), TC_OK);
  EXPECT_EQ(tc_gguf_writer_set_u8(w.w, "b", 1), TC_ERR_INVALID_ARG);  // array open
  EXPECT_EQ(tc_gguf_writer_push_str(w.w, "a", 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_push_values(w.w, TC_GGUF_TYPE_INT16, "ab", 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_begin_array(w.w, nullptr, TC_GGUF_TYPE_INT32), TC_ERR_INVALID_ARG);
  std::string path = temp_path("misuse");
  EXPECT_EQ(tc_gguf_writer_write_file(w.w, path.c_str()), TC_ERR_INVALID_ARG);  // array open
  ASSERT_EQ(tc_gguf_writer_end_array(w.w), TC_OK);
  // Nesting is bounded like the reader's.
  ASSERT_EQ(tc_gguf_writer_begin_array(w.w, "deep", TC_GGUF_TYPE_ARRAY), TC_OK);
  int depth = 1;
  while (tc_gguf_writer_begin_array(w.w, nullptr, TC_GGUF_TYPE_ARRAY) == TC_OK) ++depth;
  EXPECT_EQ(depth, 16);
  for (int d = 0; d < depth; ++d) ASSERT_EQ(tc_gguf_writer_end_array(w.w), TC_OK);

  const int64_t dims[2] = {33, 1};
  char bytes[64] = {};
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_Q4_0, dims, 2, bytes, 18, 1), TC_ERR_INVALID_SHAPE);
  const int64_t ok_dims[2] = {32, 1};
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_Q4_0, ok_dims, 2, bytes, 17, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", 4, ok_dims, 2, bytes, 18, 1), TC_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_Q4_0, ok_dims, 9, bytes, 18, 1), TC_ERR_INVALID_SHAPE);
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_Q4_0, ok_dims, 2, nullptr, 18, 1), TC_ERR_INVALID_ARG);
  const int64_t neg[1] = {-1};
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_F32, neg, 1, bytes, 4, 1), TC_ERR_INVALID_SHAPE);
  const int64_t huge[2] = {INT64_MAX, 4};
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_F32, huge, 2, bytes, 4, 1), TC_ERR_INVALID_SHAPE);
  ASSERT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_Q4_0, ok_dims, 2, bytes, 18, 1), TC_OK);
  EXPECT_EQ(tc_gguf_writer_add_tensor(w.w, "t", TC_GGML_TYPE_Q4_0, ok_dims, 2, bytes, 18, 1), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_gguf_writer_write_file(w.w, "/nonexistent/dir/x.gguf"), TC_ERR_IO);

  // After all the refusals the file is exactly what was accepted.
  ASSERT_EQ(tc_gguf_writer_write_file(w.w, path.c_str()), TC_OK);
  tc_gguf g;
  ASSERT_EQ(tc_gguf_open(path.c_str(), &g), TC_OK) << tc_last_error_detail();
  int64_t n;
  tc_gguf_metadata_count(g, &n);
  EXPECT_EQ(n, 3);  // a, arr, deep
  tc_gguf_tensor_count(g, &n);
  EXPECT_EQ(n, 1);
  tc_gguf_close(g);
  std::remove(path.c_str());

  EXPECT_EQ(tc_gguf_writer_free(nullptr), TC_ERR_INVALID_ARG);
  tc_gguf_writer stale = w.w;
  tc_gguf_writer_free(w.w);
  w.w = nullptr;
  EXPECT_EQ(tc_gguf_writer_set_u8(stale, "a", 1), TC_ERR_INVALID_ARG);
}
