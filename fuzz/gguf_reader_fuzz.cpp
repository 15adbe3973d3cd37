// libFuzzer target for the GGUF reader: every input is opened from memory
// and, when it parses, walked through every accessor of the C ABI (metadata
// of every type, nested arrays, tensor infos and bytes, the llama config),
// loaded into a CPU context, and small supported tensors are dequantised and
// multiplied, so the whole path from hostile bytes to a kernel runs under
// AddressSanitizer. Build: cmake -DTC_BUILD_FUZZERS=ON with clang; run:
//   build-fuzz/gguf_reader_fuzz fuzz/corpus/gguf -max_total_time=300
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensorcore/tensorcore.h"

namespace {

tc_context g_ctx = nullptr;
volatile uint8_t g_sink;

void touch(const void* p, size_t n) {
  if (!p || !n) return;
  const uint8_t* b = static_cast<const uint8_t*>(p);
  g_sink = b[0];
  g_sink = b[n - 1];
}

// Reads the value at `path` below `key`, recursing into arrays (bounded).
void walk(tc_gguf g, const char* key, std::vector<int64_t>& path, int budget) {
  int32_t type = -1, et = -1;
  int64_t count = 0;
  const int32_t depth = int32_t(path.size());
  if (tc_gguf_meta_nested_type(g, key, path.data(), depth, &type, &et, &count) != TC_OK) return;
  const char* s;
  size_t len;
  int64_t i;
  uint64_t u;
  double f;
  if (tc_gguf_meta_nested_get_str(g, key, path.data(), depth, &s, &len) == TC_OK) touch(s, len + 1);
  tc_gguf_meta_nested_get_i64(g, key, path.data(), depth, &i);
  tc_gguf_meta_nested_get_u64(g, key, path.data(), depth, &u);
  tc_gguf_meta_nested_get_f64(g, key, path.data(), depth, &f);
  if (type != TC_GGUF_TYPE_ARRAY || budget <= 0) return;
  // First, last and an out-of-range index.
  for (int64_t idx : {int64_t(0), count - 1, count, int64_t(-1)}) {
    path.push_back(idx);
    walk(g, key, path, budget - 1);
    path.pop_back();
  }
}

void exercise(tc_gguf g) {
  int64_t n_kv = 0, n_t = 0;
  uint32_t version;
  uint64_t align, data_off;
  tc_gguf_version(g, &version);
  tc_gguf_alignment(g, &align);
  tc_gguf_data_offset(g, &data_off);
  tc_gguf_metadata_count(g, &n_kv);
  tc_gguf_tensor_count(g, &n_t);
  for (int64_t k = 0; k < n_kv && k < 256; ++k) {
    const char* key;
    if (tc_gguf_meta_key_at(g, k, &key) != TC_OK) continue;
    std::vector<int64_t> path;
    walk(g, key, path, 3);
    const void* data;
    int32_t et;
    int64_t count;
    if (tc_gguf_meta_array_data(g, key, &data, &et, &count) == TC_OK && count > 0) touch(data, 1);
    int64_t idx;
    tc_gguf_meta_find(g, key, &idx);
  }
  struct tc_gguf_llama_config cfg;
  tc_gguf_get_llama_config(g, &cfg);
  for (int64_t t = 0; t < n_t && t < 256; ++t) {
    struct tc_gguf_tensor_info info;
    if (tc_gguf_tensor_at(g, t, &info) != TC_OK) continue;
    const void* data;
    uint64_t nb;
    if (tc_gguf_tensor_data(g, info.name, &data, &nb) == TC_OK) touch(data, size_t(nb));
    struct tc_quantized_matrix_info qi;
    tc_gguf_tensor_quantized_matrix_info(g, info.name, &qi);
  }
  tc_gguf_model m;
  if (tc_gguf_load_supported_tensors(g_ctx, g, &m) != TC_OK) return;
  int64_t loaded = 0;
  tc_gguf_loaded_tensor_count(m, &loaded);
  for (int64_t t = 0; t < loaded && t < 64; ++t) {
    struct tc_gguf_loaded_tensor lt;
    if (tc_gguf_loaded_tensor_at(m, t, &lt) != TC_OK) continue;
    struct tc_quantized_matrix_info qi;
    if (tc_gguf_loaded_tensor_quantized_matrix_info(m, lt.name, &qi) != TC_OK) continue;
    if (qi.n_bytes > (1u << 16) || qi.K > 4096 || qi.N > 4096) continue;
    // One row dequantised, and a GEMV of a single row of ones.
    tc_buffer y = nullptr, x = nullptr, out = nullptr;
    if (tc_buffer_alloc(g_ctx, size_t(qi.K) * 4, &y) == TC_OK) {
      tc_dequantize_weights(g_ctx, qi.buffer, y, qi.quant_type, qi.N - 1, 1, qi.K, TC_DTYPE_F32);
      x = y;
      if (tc_buffer_alloc(g_ctx, size_t(qi.N) * 4, &out) == TC_OK) {
        std::vector<float> ones(size_t(qi.K), 1.0f);
        tc_buffer_write(x, 0, ones.data(), ones.size() * 4);
        tc_gemv_quantized(g_ctx, x, qi.buffer, out, qi.quant_type, 1, qi.N, qi.K, TC_DTYPE_F32);
        // f16 activations (the 8-bit integer path for Q4_0/Q8_0): the f32 ones
        // above hold f16 bit patterns too.
        tc_gemv_quantized(g_ctx, x, qi.buffer, out, qi.quant_type, 1, qi.N, qi.K, TC_DTYPE_F16);
        tc_buffer_free(out);
      }
      tc_buffer_free(y);
    }
  }
  tc_gguf_loaded_model_free(m);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tc_init_device("cpu", &g_ctx);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tc_gguf g = nullptr;
  if (tc_gguf_open_memory(data, size, &g) != TC_OK) {
    // A failure always carries a detail.
    if (tc_last_error_detail()[0] == '\0') __builtin_trap();
    return 0;
  }
  exercise(g);
  tc_gguf_close(g);
  return 0;
}
