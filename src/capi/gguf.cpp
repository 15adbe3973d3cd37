// The GGUF reading and model-loading entry points (include/tensorcore/gguf.h):
// handle checks, argument checks and the typed access to metadata. The file
// itself was validated when it was opened (src/gguf/file.cpp).
#include "tensorcore/gguf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <unordered_map>
#include <vector>

#include "capi/api.h"
#include "core/checkpoint.h"
#include "core/tiers.h"
#include "gguf/file.h"
#include "gguf/llama_config.h"
#include "quant/formats.h"

using namespace tc;
using namespace tc::capi;

struct tc_gguf_s {
  std::unique_ptr<gguf::File> file;
};

struct tc_gguf_model_s {
  struct Tensor {
    std::string name;
    int32_t type = 0, format = -1, n_dims = 0;
    int64_t dims[gguf::kMaxDims] = {};
    uint64_t n_bytes = 0;
    tc_buffer buffer = nullptr;
  };
  tc_context ctx = nullptr;
  std::vector<Tensor> tensors;
  std::unordered_map<std::string, size_t> index;
  int64_t skipped = 0;
};

namespace {

const HandleKind& gguf_file_kind() {
  static const HandleKind& k = handle_kind("gguf file");
  return k;
}
const HandleKind& gguf_model_kind() {
  static const HandleKind& k = handle_kind("gguf model");
  return k;
}

tc_status check_gguf(const char* fn, tc_gguf& g) {
  if (!g) return fail(TC_ERR_INVALID_ARG, "%s: gguf handle is null", fn);
  return check_handle(fn, "gguf handle", g, gguf_file_kind());
}

}  // namespace

namespace tc {
namespace capi {

tc_status gguf_file_of(const char* fn, tc_gguf& g, const gguf::File** out) {
  if (tc_status st = check_gguf(fn, g)) return st;
  *out = g->file.get();
  return TC_OK;
}

}  // namespace capi
}  // namespace tc

namespace {

tc_status check_model(const char* fn, tc_gguf_model& m) {
  if (!m) return fail(TC_ERR_INVALID_ARG, "%s: model handle is null", fn);
  return check_handle(fn, "model handle", m, gguf_model_kind());
}

tc_status check_name(const char* fn, const char* what, const char* s) {
  if (!s) return fail(TC_ERR_INVALID_ARG, "%s: %s is null", fn, what);
  return TC_OK;
}

// What a metadata path leads to: a whole value (`value` set), or a scalar or
// string element of an array at `pos`.
struct Target {
  int32_t type = -1;
  uint64_t pos = 0;
  const gguf::Value* value = nullptr;
};

tc_status resolve(const char* fn, tc_gguf& g, const char* key, const int64_t* path, int32_t depth, Target* t) {
  if (tc_status st = check_gguf(fn, g)) return st;
  if (tc_status st = check_name(fn, "key", key)) return st;
  if (depth < 0 || (depth > 0 && !path))
    return fail(TC_ERR_INVALID_ARG, "%s: path of depth %d is %s", fn, int(depth), path ? "negative" : "null");
  const gguf::KeyValue* kv = g->file->find_kv(key);
  if (!kv) return fail(TC_ERR_INVALID_ARG, "%s: no metadata key '%s'", fn, key);
  const gguf::Value* v = &kv->value;
  for (int32_t d = 0; d < depth; ++d) {
    if (v->type != gguf::kArray)
      return fail(TC_ERR_INVALID_ARG, "%s: '%s' at depth %d is a %s, not an array", fn, key, int(d),
                  gguf::value_type_name(v->type));
    const int64_t i = path[d];
    if (i < 0 || uint64_t(i) >= v->count)
      return fail(TC_ERR_INVALID_ARG, "%s: index %lld out of range for '%s' (%llu elements at depth %d)", fn,
                  (long long)i, key, (unsigned long long)v->count, int(d));
    if (v->elem_type == gguf::kArray) {
      v = &v->children[size_t(i)];
      continue;
    }
    if (d + 1 < depth)
      return fail(TC_ERR_INVALID_ARG, "%s: '%s' at depth %d holds %s elements, not arrays", fn, key, int(d + 1),
                  gguf::value_type_name(v->elem_type));
    t->type = v->elem_type;
    t->pos = v->elem_type == gguf::kString ? v->elems[size_t(i)]
                                           : v->pos + uint64_t(i) * uint64_t(gguf::value_size(v->elem_type));
    return TC_OK;
  }
  t->type = v->type;
  t->pos = v->pos;
  t->value = v;
  return TC_OK;
}

tc_status wrong_type(const char* fn, const char* key, int32_t type, const char* want) {
  return fail(TC_ERR_INVALID_ARG, "%s: '%s' is a %s, not %s", fn, key, gguf::value_type_name(type), want);
}

tc_status get_str(const char* fn, tc_gguf& g, const char* key, const int64_t* path, int32_t depth, const char** out,
                  size_t* len) {
  Target t;
  if (tc_status st = resolve(fn, g, key, path, depth, &t)) return st;
  if (tc_status st = check_out_ptr(fn, "out", out)) return st;
  if (t.type != gguf::kString) return wrong_type(fn, key, t.type, "a string");
  uint64_t n;
  *out = g->file->string_at(t.pos, &n);
  if (len) *len = size_t(n);
  return TC_OK;
}

bool is_scalar(int32_t type) { return gguf::value_size(type) != 0; }
bool is_float(int32_t type) { return type == gguf::kF32 || type == gguf::kF64; }

tc_status get_i64(const char* fn, tc_gguf& g, const char* key, const int64_t* path, int32_t depth, int64_t* out) {
  Target t;
  if (tc_status st = resolve(fn, g, key, path, depth, &t)) return st;
  if (tc_status st = check_out_ptr(fn, "out", out)) return st;
  if (!is_scalar(t.type) || is_float(t.type)) return wrong_type(fn, key, t.type, "an integer");
  if (!g->file->scalar_i64(t.type, t.pos, out))
    return fail(TC_ERR_INVALID_ARG, "%s: '%s' (uint64) does not fit int64; use the u64 getter", fn, key);
  return TC_OK;
}

tc_status get_u64(const char* fn, tc_gguf& g, const char* key, const int64_t* path, int32_t depth, uint64_t* out) {
  Target t;
  if (tc_status st = resolve(fn, g, key, path, depth, &t)) return st;
  if (tc_status st = check_out_ptr(fn, "out", out)) return st;
  if (!is_scalar(t.type) || is_float(t.type)) return wrong_type(fn, key, t.type, "an integer");
  if (!g->file->scalar_u64(t.type, t.pos, out))
    return fail(TC_ERR_INVALID_ARG, "%s: '%s' is negative; use the i64 getter", fn, key);
  return TC_OK;
}

tc_status get_f64(const char* fn, tc_gguf& g, const char* key, const int64_t* path, int32_t depth, double* out) {
  Target t;
  if (tc_status st = resolve(fn, g, key, path, depth, &t)) return st;
  if (tc_status st = check_out_ptr(fn, "out", out)) return st;
  if (!is_scalar(t.type) || t.type == gguf::kBool) return wrong_type(fn, key, t.type, "a number");
  g->file->scalar_f64(t.type, t.pos, out);
  return TC_OK;
}

void fill_info(const gguf::File& f, const gguf::TensorInfo& t, struct tc_gguf_tensor_info* out) {
  std::memset(out, 0, sizeof *out);
  out->name = t.name.c_str();
  out->type = t.type;
  out->n_dims = t.n_dims;
  for (int d = 0; d < gguf::kMaxDims; ++d) out->dims[d] = d < t.n_dims ? t.dims[d] : 1;
  out->offset = t.offset;
  out->n_bytes = t.n_bytes;
  out->file_offset = f.data_start() + t.offset;
  out->quant_type = t.format;
}

// K = dims[0], N = product of the rest.
tc_status matrix_info(const char* fn, const char* name, int32_t type, int32_t format, int32_t n_dims,
                      const int64_t* dims, uint64_t n_bytes, tc_buffer buffer, struct tc_quantized_matrix_info* out) {
  if (format < 0)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: tensor '%s' has type %s, which tensorcore does not compute with", fn,
                name, tc_gguf_type_name(type));
  int64_t K = n_dims ? dims[0] : 1, N = 1;
  for (int d = 1; d < n_dims; ++d) N *= dims[d];  // the reader checked the product fits
  if (K <= 0 || N <= 0) return fail(TC_ERR_INVALID_SHAPE, "%s: tensor '%s' has no elements", fn, name);
  std::memset(out, 0, sizeof *out);
  out->quant_type = format;
  out->gguf_type = type;
  out->N = N;
  out->K = K;
  out->n_bytes = n_bytes;
  out->buffer = buffer;
  return TC_OK;
}

const gguf::TensorInfo* find_tensor(const char* fn, tc_gguf& g, const char* name, tc_status* st) {
  *st = check_gguf(fn, g);
  if (!*st) *st = check_name(fn, "name", name);
  if (*st) return nullptr;
  const gguf::TensorInfo* t = g->file->find_tensor(name);
  if (!t) *st = fail(TC_ERR_INVALID_ARG, "%s: no tensor named '%s'", fn, name);
  return t;
}

// Storage holding a copy of `n` bytes in the context's device memory.
tc_status copy_storage(const char* fn, tc_context ctx, const uint8_t* src, uint64_t n, StorageRef* out) {
  StorageRef s;
  if (tc_status st = tiers::allocate(ctx, TC_TIER_L0_DEVICE, size_t(n), &s)) return st;
  if (tc_status st = ctx->backend->copy_in(s->data, src, size_t(n))) return st;
  *out = std::move(s);
  return TC_OK;
}

// Storage borrowing `n` bytes at `data` inside `region`, which it keeps alive.
StorageRef borrowed_storage(tc_context ctx, uint8_t* data, uint64_t n, std::shared_ptr<gguf::Region> region) {
  auto s = std::make_shared<Storage>();
  s->backend = ctx->backend.get();
  s->data = data;
  s->size = size_t(n);
  s->owned = false;
  s->keepalive = std::move(region);
  return s;
}

void fill_loaded(const tc_gguf_model_s::Tensor& t, struct tc_gguf_loaded_tensor* out) {
  std::memset(out, 0, sizeof *out);
  out->name = t.name.c_str();
  out->type = t.type;
  out->quant_type = t.format;
  out->n_dims = t.n_dims;
  for (int d = 0; d < gguf::kMaxDims; ++d) out->dims[d] = d < t.n_dims ? t.dims[d] : 1;
  out->n_bytes = t.n_bytes;
  out->buffer = handle_of(t.buffer);
}

const tc_gguf_model_s::Tensor* find_loaded(const char* fn, tc_gguf_model& m, const char* name, tc_status* st) {
  *st = check_model(fn, m);
  if (!*st) *st = check_name(fn, "name", name);
  if (*st) return nullptr;
  auto it = m->index.find(name);
  if (it == m->index.end()) {
    *st = fail(TC_ERR_INVALID_ARG, "%s: no loaded tensor named '%s'", fn, name);
    return nullptr;
  }
  return &m->tensors[it->second];
}

void free_model(tc_gguf_model m) {
  for (auto& t : m->tensors)
    if (t.buffer) delete_buffer(t.buffer);
  unregister_handle(m);
  delete m;
}

}  // namespace

extern "C" {

const char* tc_gguf_type_name(int32_t ggml_type) {
  const quant::GgmlTypeInfo* t = quant::ggml_type_info(ggml_type);
  return t ? t->name : "unknown";
}

tc_status tc_gguf_type_info(int32_t ggml_type, int64_t* block_elems, int64_t* block_bytes, tc_quant_type* quant_type) {
  return guarded("tc_gguf_type_info", [&] {
    const quant::GgmlTypeInfo* t = quant::ggml_type_info(ggml_type);
    if (!t) return fail(TC_ERR_INVALID_ARG, "tc_gguf_type_info: %d is not a ggml type id", int(ggml_type));
    if (block_elems) *block_elems = t->block_elems;
    if (block_bytes) *block_bytes = t->block_bytes;
    if (quant_type) *quant_type = t->format;
    return TC_OK;
  });
}

tc_quant_type tc_gguf_type_to_quant(int32_t ggml_type) { return quant::format_from_ggml(ggml_type); }

int32_t tc_quant_to_gguf_type(tc_quant_type fmt) {
  const quant::FormatInfo* f = quant::format_info(fmt);
  return f ? f->ggml_type : -1;
}

tc_status tc_gguf_open(const char* path, tc_gguf* out) {
  return guarded("tc_gguf_open", [&] {
    if (tc_status st = check_name("tc_gguf_open", "path", path)) return st;
    if (tc_status st = check_out_ptr("tc_gguf_open", "out", out)) return st;
    std::unique_ptr<gguf::File> f;
    if (tc_status st = gguf::File::open(path, &f)) return st;
    auto* g = new tc_gguf_s();
    g->file = std::move(f);
    *out = register_handle(g, gguf_file_kind());
    return TC_OK;
  });
}

tc_status tc_gguf_open_memory(const void* data, size_t size, tc_gguf* out) {
  return guarded("tc_gguf_open_memory", [&] {
    if (!data && size) return fail(TC_ERR_INVALID_ARG, "tc_gguf_open_memory: data is null");
    if (tc_status st = check_out_ptr("tc_gguf_open_memory", "out", out)) return st;
    std::unique_ptr<gguf::File> f;
    if (tc_status st = gguf::File::open_memory(data, size, &f)) return st;
    auto* g = new tc_gguf_s();
    g->file = std::move(f);
    *out = register_handle(g, gguf_file_kind());
    return TC_OK;
  });
}

tc_status tc_gguf_close(tc_gguf g) {
  return guarded("tc_gguf_close", [&] {
    if (tc_status st = check_gguf("tc_gguf_close", g)) return st;
    unregister_handle(g);
    delete g;
    return TC_OK;
  });
}

#define TC_GGUF_GETTER(fname, type, expr)                                 \
  tc_status fname(tc_gguf g, type* out) {                                 \
    return guarded(#fname, [&] {                                          \
      if (tc_status st = check_gguf(#fname, g)) return st;                \
      if (tc_status st = check_out_ptr(#fname, "out", out)) return st;    \
      *out = type(expr);                                                  \
      return TC_OK;                                                       \
    });                                                                   \
  }

TC_GGUF_GETTER(tc_gguf_version, uint32_t, g->file->version())
TC_GGUF_GETTER(tc_gguf_alignment, uint64_t, g->file->alignment())
TC_GGUF_GETTER(tc_gguf_data_offset, uint64_t, g->file->data_start())
TC_GGUF_GETTER(tc_gguf_tensor_count, int64_t, g->file->tensors().size())
TC_GGUF_GETTER(tc_gguf_metadata_count, int64_t, g->file->kvs().size())

tc_status tc_gguf_meta_key_at(tc_gguf g, int64_t i, const char** key) {
  return guarded("tc_gguf_meta_key_at", [&] {
    const char* fn = "tc_gguf_meta_key_at";
    if (tc_status st = check_gguf(fn, g)) return st;
    if (tc_status st = check_out_ptr(fn, "key", key)) return st;
    const auto& kvs = g->file->kvs();
    if (i < 0 || uint64_t(i) >= kvs.size())
      return fail(TC_ERR_INVALID_ARG, "%s: index %lld out of range (%zu keys)", fn, (long long)i, kvs.size());
    *key = kvs[size_t(i)].key.c_str();
    return TC_OK;
  });
}

tc_status tc_gguf_meta_find(tc_gguf g, const char* key, int64_t* index) {
  return guarded("tc_gguf_meta_find", [&] {
    if (tc_status st = check_gguf("tc_gguf_meta_find", g)) return st;
    if (tc_status st = check_name("tc_gguf_meta_find", "key", key)) return st;
    if (tc_status st = check_out_ptr("tc_gguf_meta_find", "index", index)) return st;
    *index = g->file->kv_index(key);
    return TC_OK;
  });
}

tc_status tc_gguf_meta_nested_type(tc_gguf g, const char* key, const int64_t* path, int32_t depth, int32_t* type,
                                   int32_t* elem_type, int64_t* count) {
  return guarded("tc_gguf_meta_nested_type", [&] {
    Target t;
    if (tc_status st = resolve("tc_gguf_meta_nested_type", g, key, path, depth, &t)) return st;
    if (type) *type = t.type;
    if (elem_type) *elem_type = t.value && t.type == gguf::kArray ? t.value->elem_type : -1;
    if (count) *count = t.value && t.type == gguf::kArray ? int64_t(t.value->count) : 0;
    return TC_OK;
  });
}

tc_status tc_gguf_meta_type(tc_gguf g, const char* key, int32_t* type, int32_t* elem_type, int64_t* count) {
  return tc_gguf_meta_nested_type(g, key, nullptr, 0, type, elem_type, count);
}

tc_status tc_gguf_meta_nested_get_str(tc_gguf g, const char* key, const int64_t* path, int32_t depth, const char** out,
                                      size_t* len) {
  return guarded("tc_gguf_meta_nested_get_str",
                 [&] { return get_str("tc_gguf_meta_nested_get_str", g, key, path, depth, out, len); });
}
tc_status tc_gguf_meta_nested_get_i64(tc_gguf g, const char* key, const int64_t* path, int32_t depth, int64_t* out) {
  return guarded("tc_gguf_meta_nested_get_i64",
                 [&] { return get_i64("tc_gguf_meta_nested_get_i64", g, key, path, depth, out); });
}
tc_status tc_gguf_meta_nested_get_u64(tc_gguf g, const char* key, const int64_t* path, int32_t depth, uint64_t* out) {
  return guarded("tc_gguf_meta_nested_get_u64",
                 [&] { return get_u64("tc_gguf_meta_nested_get_u64", g, key, path, depth, out); });
}
tc_status tc_gguf_meta_nested_get_f64(tc_gguf g, const char* key, const int64_t* path, int32_t depth, double* out) {
  return guarded("tc_gguf_meta_nested_get_f64",
                 [&] { return get_f64("tc_gguf_meta_nested_get_f64", g, key, path, depth, out); });
}

tc_status tc_gguf_meta_get_str(tc_gguf g, const char* key, const char** out, size_t* len) {
  return guarded("tc_gguf_meta_get_str", [&] { return get_str("tc_gguf_meta_get_str", g, key, nullptr, 0, out, len); });
}
tc_status tc_gguf_meta_get_i64(tc_gguf g, const char* key, int64_t* out) {
  return guarded("tc_gguf_meta_get_i64", [&] { return get_i64("tc_gguf_meta_get_i64", g, key, nullptr, 0, out); });
}
tc_status tc_gguf_meta_get_u64(tc_gguf g, const char* key, uint64_t* out) {
  return guarded("tc_gguf_meta_get_u64", [&] { return get_u64("tc_gguf_meta_get_u64", g, key, nullptr, 0, out); });
}
tc_status tc_gguf_meta_get_f64(tc_gguf g, const char* key, double* out) {
  return guarded("tc_gguf_meta_get_f64", [&] { return get_f64("tc_gguf_meta_get_f64", g, key, nullptr, 0, out); });
}

tc_status tc_gguf_meta_array_count(tc_gguf g, const char* key, int64_t* out) {
  return guarded("tc_gguf_meta_array_count", [&] {
    const char* fn = "tc_gguf_meta_array_count";
    Target t;
    if (tc_status st = resolve(fn, g, key, nullptr, 0, &t)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (t.type != gguf::kArray) return wrong_type(fn, key, t.type, "an array");
    *out = int64_t(t.value->count);
    return TC_OK;
  });
}

tc_status tc_gguf_meta_array_get_str(tc_gguf g, const char* key, int64_t i, const char** out, size_t* len) {
  return guarded("tc_gguf_meta_array_get_str",
                 [&] { return get_str("tc_gguf_meta_array_get_str", g, key, &i, 1, out, len); });
}
tc_status tc_gguf_meta_array_get_i64(tc_gguf g, const char* key, int64_t i, int64_t* out) {
  return guarded("tc_gguf_meta_array_get_i64", [&] { return get_i64("tc_gguf_meta_array_get_i64", g, key, &i, 1, out); });
}
tc_status tc_gguf_meta_array_get_u64(tc_gguf g, const char* key, int64_t i, uint64_t* out) {
  return guarded("tc_gguf_meta_array_get_u64", [&] { return get_u64("tc_gguf_meta_array_get_u64", g, key, &i, 1, out); });
}
tc_status tc_gguf_meta_array_get_f64(tc_gguf g, const char* key, int64_t i, double* out) {
  return guarded("tc_gguf_meta_array_get_f64", [&] { return get_f64("tc_gguf_meta_array_get_f64", g, key, &i, 1, out); });
}

tc_status tc_gguf_meta_array_data(tc_gguf g, const char* key, const void** data, int32_t* elem_type, int64_t* count) {
  return guarded("tc_gguf_meta_array_data", [&] {
    const char* fn = "tc_gguf_meta_array_data";
    Target t;
    if (tc_status st = resolve(fn, g, key, nullptr, 0, &t)) return st;
    if (tc_status st = check_out_ptr(fn, "data", data)) return st;
    if (t.type != gguf::kArray || !is_scalar(t.value->elem_type))
      return fail(TC_ERR_INVALID_ARG, "%s: '%s' is not an array of fixed-size elements", fn, key);
    *data = g->file->region()->data + t.value->pos;
    if (elem_type) *elem_type = t.value->elem_type;
    if (count) *count = int64_t(t.value->count);
    return TC_OK;
  });
}

tc_status tc_gguf_get_llama_config(tc_gguf g, struct tc_gguf_llama_config* out) {
  return guarded("tc_gguf_get_llama_config", [&] {
    if (tc_status st = check_gguf("tc_gguf_get_llama_config", g)) return st;
    if (tc_status st = check_out_ptr("tc_gguf_get_llama_config", "out", out)) return st;
    struct tc_gguf_llama_config c;
    if (tc_status st = gguf::llama_config(*g->file, &c)) return st;
    *out = c;
    return TC_OK;
  });
}

tc_status tc_gguf_tensor_at(tc_gguf g, int64_t i, struct tc_gguf_tensor_info* out) {
  return guarded("tc_gguf_tensor_at", [&] {
    const char* fn = "tc_gguf_tensor_at";
    if (tc_status st = check_gguf(fn, g)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    const auto& ts = g->file->tensors();
    if (i < 0 || uint64_t(i) >= ts.size())
      return fail(TC_ERR_INVALID_ARG, "%s: index %lld out of range (%zu tensors)", fn, (long long)i, ts.size());
    fill_info(*g->file, ts[size_t(i)], out);
    return TC_OK;
  });
}

tc_status tc_gguf_get_tensor(tc_gguf g, const char* name, struct tc_gguf_tensor_info* out) {
  return guarded("tc_gguf_get_tensor", [&] {
    tc_status st;
    const gguf::TensorInfo* t = find_tensor("tc_gguf_get_tensor", g, name, &st);
    if (!t) return st;
    if (tc_status s = check_out_ptr("tc_gguf_get_tensor", "out", out)) return s;
    fill_info(*g->file, *t, out);
    return TC_OK;
  });
}

tc_status tc_gguf_find_tensor(tc_gguf g, const char* name, int64_t* index) {
  return guarded("tc_gguf_find_tensor", [&] {
    if (tc_status st = check_gguf("tc_gguf_find_tensor", g)) return st;
    if (tc_status st = check_name("tc_gguf_find_tensor", "name", name)) return st;
    if (tc_status st = check_out_ptr("tc_gguf_find_tensor", "index", index)) return st;
    *index = g->file->tensor_index(name);
    return TC_OK;
  });
}

tc_status tc_gguf_tensor_data(tc_gguf g, const char* name, const void** data, uint64_t* n_bytes) {
  return guarded("tc_gguf_tensor_data", [&] {
    tc_status st;
    const gguf::TensorInfo* t = find_tensor("tc_gguf_tensor_data", g, name, &st);
    if (!t) return st;
    if (tc_status s = check_out_ptr("tc_gguf_tensor_data", "data", data)) return s;
    *data = g->file->tensor_data(*t);
    if (n_bytes) *n_bytes = t->n_bytes;
    return TC_OK;
  });
}

tc_status tc_gguf_tensor_quantized_matrix_info(tc_gguf g, const char* name, struct tc_quantized_matrix_info* out) {
  return guarded("tc_gguf_tensor_quantized_matrix_info", [&] {
    const char* fn = "tc_gguf_tensor_quantized_matrix_info";
    tc_status st;
    const gguf::TensorInfo* t = find_tensor(fn, g, name, &st);
    if (!t) return st;
    if (tc_status s = check_out_ptr(fn, "out", out)) return s;
    return matrix_info(fn, name, t->type, t->format, t->n_dims, t->dims, t->n_bytes, nullptr, out);
  });
}

tc_status tc_gguf_tensor_to_buffer(tc_context ctx, tc_gguf g, const char* name, tc_buffer* out) {
  return guarded("tc_gguf_tensor_to_buffer", [&] {
    const char* fn = "tc_gguf_tensor_to_buffer";
    if (tc_status st = check_context(fn, ctx)) return st;
    tc_status st;
    const gguf::TensorInfo* t = find_tensor(fn, g, name, &st);
    if (!t) return st;
    if (tc_status s = check_out_ptr(fn, "out", out)) return s;
    if (t->n_bytes == 0) return fail(TC_ERR_INVALID_ARG, "%s: tensor '%s' has no bytes", fn, name);
    const gguf::File& f = *g->file;
    StorageRef storage;
    if (ctx->backend->host_accessible() && f.has_file()) {
      uint8_t* data = nullptr;
      auto region = f.map_private(f.data_start() + t->offset, t->n_bytes, &data);
      if (!region) return last_status();
      storage = borrowed_storage(ctx, data, t->n_bytes, std::move(region));
    } else if (tc_status s = copy_storage(fn, ctx, f.tensor_data(*t), t->n_bytes, &storage)) {
      return s;
    }
    *out = handle_of(new_buffer(ctx, std::move(storage), nullptr));
    return TC_OK;
  });
}

tc_status tc_gguf_load_supported_tensors(tc_context ctx, tc_gguf g, tc_gguf_model* out) {
  return guarded("tc_gguf_load_supported_tensors", [&] {
    const char* fn = "tc_gguf_load_supported_tensors";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (tc_status st = check_gguf(fn, g)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    const gguf::File& f = *g->file;
    std::unique_ptr<tc_gguf_model_s> m(new tc_gguf_model_s());
    m->ctx = ctx;
    std::vector<const gguf::TensorInfo*> load;
    for (const auto& t : f.tensors()) {
      if (t.format >= 0 && t.n_bytes > 0) load.push_back(&t);
      else m->skipped++;
    }
    // CPU: one private mapping of the data section, shared by the buffers.
    std::shared_ptr<gguf::Region> region;
    uint8_t* base = nullptr;
    const bool borrow = ctx->backend->host_accessible() && f.has_file() && !load.empty();
    if (borrow) {
      region = f.map_private(f.data_start(), f.file_size() - f.data_start(), &base);
      if (!region) return last_status();
      // Start reading the weights in while the caller gets going.
      const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
      const uintptr_t start = reinterpret_cast<uintptr_t>(base) / page * page;
      madvise(reinterpret_cast<void*>(start), reinterpret_cast<uintptr_t>(base) + region->size - start, MADV_WILLNEED);
    }
    m->tensors.reserve(load.size());
    for (const gguf::TensorInfo* t : load) {
      StorageRef storage;
      if (borrow) {
        storage = borrowed_storage(ctx, base + t->offset, t->n_bytes, region);
      } else if (tc_status st = copy_storage(fn, ctx, f.tensor_data(*t), t->n_bytes, &storage)) {
        for (auto& lt : m->tensors) delete_buffer(lt.buffer);
        return st;
      }
      tc_gguf_model_s::Tensor lt;
      lt.name = t->name;
      lt.type = t->type;
      lt.format = t->format;
      lt.n_dims = t->n_dims;
      std::memcpy(lt.dims, t->dims, sizeof lt.dims);
      lt.n_bytes = t->n_bytes;
      lt.buffer = new_buffer(ctx, std::move(storage), m.get());
      m->index.emplace(lt.name, m->tensors.size());
      m->tensors.push_back(std::move(lt));
    }
    *out = register_handle(m.release(), gguf_model_kind());
    return TC_OK;
  });
}

tc_status tc_gguf_loaded_model_free(tc_gguf_model m) {
  return guarded("tc_gguf_loaded_model_free", [&] {
    if (tc_status st = check_model("tc_gguf_loaded_model_free", m)) return st;
    free_model(m);
    return TC_OK;
  });
}

tc_status tc_gguf_loaded_tensor_count(tc_gguf_model m, int64_t* out) {
  return guarded("tc_gguf_loaded_tensor_count", [&] {
    if (tc_status st = check_model("tc_gguf_loaded_tensor_count", m)) return st;
    if (tc_status st = check_out_ptr("tc_gguf_loaded_tensor_count", "out", out)) return st;
    *out = int64_t(m->tensors.size());
    return TC_OK;
  });
}

tc_status tc_gguf_loaded_skipped_tensor_count(tc_gguf_model m, int64_t* out) {
  return guarded("tc_gguf_loaded_skipped_tensor_count", [&] {
    if (tc_status st = check_model("tc_gguf_loaded_skipped_tensor_count", m)) return st;
    if (tc_status st = check_out_ptr("tc_gguf_loaded_skipped_tensor_count", "out", out)) return st;
    *out = m->skipped;
    return TC_OK;
  });
}

tc_status tc_gguf_loaded_tensor_at(tc_gguf_model m, int64_t i, struct tc_gguf_loaded_tensor* out) {
  return guarded("tc_gguf_loaded_tensor_at", [&] {
    const char* fn = "tc_gguf_loaded_tensor_at";
    if (tc_status st = check_model(fn, m)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (i < 0 || uint64_t(i) >= m->tensors.size())
      return fail(TC_ERR_INVALID_ARG, "%s: index %lld out of range (%zu tensors)", fn, (long long)i, m->tensors.size());
    fill_loaded(m->tensors[size_t(i)], out);
    return TC_OK;
  });
}

tc_status tc_gguf_loaded_get_tensor(tc_gguf_model m, const char* name, struct tc_gguf_loaded_tensor* out) {
  return guarded("tc_gguf_loaded_get_tensor", [&] {
    tc_status st;
    const auto* t = find_loaded("tc_gguf_loaded_get_tensor", m, name, &st);
    if (!t) return st;
    if (tc_status s = check_out_ptr("tc_gguf_loaded_get_tensor", "out", out)) return s;
    fill_loaded(*t, out);
    return TC_OK;
  });
}

tc_status tc_gguf_loaded_tensor_quantized_matrix_info(tc_gguf_model m, const char* name,
                                                      struct tc_quantized_matrix_info* out) {
  return guarded("tc_gguf_loaded_tensor_quantized_matrix_info", [&] {
    const char* fn = "tc_gguf_loaded_tensor_quantized_matrix_info";
    tc_status st;
    const auto* t = find_loaded(fn, m, name, &st);
    if (!t) return st;
    if (tc_status s = check_out_ptr(fn, "out", out)) return s;
    return matrix_info(fn, name, t->type, t->format, t->n_dims, t->dims, t->n_bytes, t->buffer, out);
  });
}

}  // extern "C"
