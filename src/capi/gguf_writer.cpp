// The GGUF writer entry points (include/tensorcore/gguf.h): every argument
// is checked here so that src/gguf/writer.cpp only appends valid pieces.
#include <cstring>

#include "capi/api.h"
#include "gguf/writer.h"
#include "quant/formats.h"
#include "tensorcore/gguf.h"

using namespace tc;
using namespace tc::capi;

struct tc_gguf_writer_s {
  gguf::Writer w;
};

namespace {

tc_status check_writer(const char* fn, tc_gguf_writer& w) {
  if (!w) return fail(TC_ERR_INVALID_ARG, "%s: writer is null", fn);
  static const HandleKind& kind = handle_kind("gguf writer");
  return check_handle(fn, "writer", w, kind);
}

// A new top-level key: not null, not empty, not set yet, no array open.
tc_status check_new_key(const char* fn, tc_gguf_writer& w, const char* key) {
  if (tc_status st = check_writer(fn, w)) return st;
  if (!key || !*key) return fail(TC_ERR_INVALID_ARG, "%s: key is null or empty", fn);
  if (w->w.in_array())
    return fail(TC_ERR_INVALID_ARG, "%s: an array is open; end it before setting '%s'", fn, key);
  if (w->w.has_key(key)) return fail(TC_ERR_INVALID_ARG, "%s: key '%s' is already set", fn, key);
  return TC_OK;
}

bool power_of_two(uint64_t v) { return v && !(v & (v - 1)) && v <= (uint64_t(1) << 30); }

tc_status set_scalar(const char* fn, tc_gguf_writer& w, const char* key, int32_t type, const void* v) {
  if (tc_status st = check_new_key(fn, w, key)) return st;
  if (!std::strcmp(key, "general.alignment")) {
    uint32_t a = 0;
    if (type == gguf::kU32) std::memcpy(&a, v, 4);
    if (type != gguf::kU32 || !power_of_two(a))
      return fail(TC_ERR_INVALID_ARG, "%s: general.alignment must be a uint32 power of two up to 2^30", fn);
    w->w.alignment = a;
  }
  w->w.set_scalar(key, type, v);
  return TC_OK;
}

tc_status check_elem_type(const char* fn, int32_t t, bool fixed_only) {
  if (t < 0 || t > gguf::kF64 || (fixed_only && gguf::value_size(t) == 0))
    return fail(TC_ERR_INVALID_ARG, "%s: element type %d is not a GGUF %svalue type", fn, int(t),
                fixed_only ? "fixed-size " : "");
  return TC_OK;
}

tc_status begin(const char* fn, tc_gguf_writer& w, const char* key, int32_t elem_type) {
  if (tc_status st = check_writer(fn, w)) return st;
  if (tc_status st = check_elem_type(fn, elem_type, false)) return st;
  if (!w->w.in_array()) {
    if (tc_status st = check_new_key(fn, w, key)) return st;
    if (!std::strcmp(key, "general.alignment"))
      return fail(TC_ERR_INVALID_ARG, "%s: general.alignment must be a uint32, not an array", fn);
  } else {
    if (key) return fail(TC_ERR_INVALID_ARG, "%s: key must be null for an array inside an array", fn);
    if (w->w.open_elem_type() != gguf::kArray)
      return fail(TC_ERR_INVALID_ARG, "%s: the open array holds %s elements, not arrays", fn,
                  gguf::value_type_name(w->w.open_elem_type()));
  }
  // The reader accepts kMaxDepth levels of arrays.
  if (w->w.depth() >= gguf::kMaxDepth)
    return fail(TC_ERR_INVALID_ARG, "%s: arrays nest at most %d deep", fn, gguf::kMaxDepth);
  w->w.begin_array(key ? key : "", elem_type);
  return TC_OK;
}

tc_status push_values(const char* fn, tc_gguf_writer& w, int32_t elem_type, const void* data, uint64_t count) {
  if (tc_status st = check_writer(fn, w)) return st;
  if (tc_status st = check_elem_type(fn, elem_type, true)) return st;
  if (!w->w.in_array()) return fail(TC_ERR_INVALID_ARG, "%s: no array is open", fn);
  if (w->w.open_elem_type() != elem_type)
    return fail(TC_ERR_INVALID_ARG, "%s: the open array holds %s elements, not %s", fn,
                gguf::value_type_name(w->w.open_elem_type()), gguf::value_type_name(elem_type));
  if (count && !data) return fail(TC_ERR_INVALID_ARG, "%s: data is null", fn);
  if (count > (uint64_t(1) << 40)) return fail(TC_ERR_INVALID_ARG, "%s: %llu values is too many", fn,
                                                (unsigned long long)count);
  w->w.push_values(data, count);
  return TC_OK;
}

tc_status push_str(const char* fn, tc_gguf_writer& w, const char* v, size_t len) {
  if (tc_status st = check_writer(fn, w)) return st;
  if (!w->w.in_array()) return fail(TC_ERR_INVALID_ARG, "%s: no array is open", fn);
  if (w->w.open_elem_type() != gguf::kString)
    return fail(TC_ERR_INVALID_ARG, "%s: the open array holds %s elements, not strings", fn,
                gguf::value_type_name(w->w.open_elem_type()));
  if (len && !v) return fail(TC_ERR_INVALID_ARG, "%s: string is null", fn);
  w->w.push_string(v, len);
  return TC_OK;
}

// Checks a tensor's name, type and dims and returns its exact byte size.
tc_status check_tensor(const char* fn, tc_gguf_writer& w, const char* name, int32_t type, const int64_t* dims,
                       int32_t n_dims, gguf::Writer::Tensor* t) {
  if (tc_status st = check_writer(fn, w)) return st;
  if (!name || !*name) return fail(TC_ERR_INVALID_ARG, "%s: tensor name is null or empty", fn);
  if (w->w.has_tensor(name)) return fail(TC_ERR_INVALID_ARG, "%s: tensor '%s' is already added", fn, name);
  const quant::GgmlTypeInfo* ti = quant::ggml_type_info(type);
  if (!ti) return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: %d is not a ggml type id", fn, int(type));
  if (n_dims < 0 || n_dims > gguf::kMaxDims)
    return fail(TC_ERR_INVALID_SHAPE, "%s: n_dims = %d (0 to %d)", fn, int(n_dims), gguf::kMaxDims);
  if (n_dims && !dims) return fail(TC_ERR_INVALID_ARG, "%s: dims is null", fn);
  uint64_t rows = 1;
  for (int d = 0; d < n_dims; ++d) {
    if (dims[d] < 0) return fail(TC_ERR_INVALID_SHAPE, "%s: dims[%d] = %lld is negative", fn, d, (long long)dims[d]);
    if (d && __builtin_mul_overflow(rows, uint64_t(dims[d]), &rows))
      return fail(TC_ERR_INVALID_SHAPE, "%s: tensor '%s' size overflows", fn, name);
  }
  const uint64_t row_len = n_dims ? uint64_t(dims[0]) : 1;
  if (row_len % uint64_t(ti->block_elems))
    return fail(TC_ERR_INVALID_SHAPE, "%s: dims[0] = %llu is not a multiple of the %s block size %d", fn,
                (unsigned long long)row_len, ti->name, ti->block_elems);
  uint64_t row_bytes, elems;
  if (__builtin_mul_overflow(row_len / uint64_t(ti->block_elems), uint64_t(ti->block_bytes), &row_bytes) ||
      __builtin_mul_overflow(row_bytes, rows, &t->n_bytes) || __builtin_mul_overflow(row_len, rows, &elems) ||
      elems > uint64_t(INT64_MAX))
    return fail(TC_ERR_INVALID_SHAPE, "%s: tensor '%s' size overflows", fn, name);
  t->name = name;
  t->type = type;
  t->n_dims = n_dims;
  for (int d = 0; d < n_dims; ++d) t->dims[d] = dims[d];
  return TC_OK;
}

}  // namespace

extern "C" {

tc_status tc_gguf_writer_create(tc_gguf_writer* out) {
  return guarded("tc_gguf_writer_create", [&] {
    if (tc_status st = check_out_ptr("tc_gguf_writer_create", "out", out)) return st;
    auto* w = new tc_gguf_writer_s();
    static const HandleKind& kind = handle_kind("gguf writer");
    *out = register_handle(w, kind);
    return TC_OK;
  });
}

tc_status tc_gguf_writer_free(tc_gguf_writer w) {
  return guarded("tc_gguf_writer_free", [&] {
    if (tc_status st = check_writer("tc_gguf_writer_free", w)) return st;
    unregister_handle(w);
    delete w;
    return TC_OK;
  });
}

tc_status tc_gguf_writer_set_version(tc_gguf_writer w, uint32_t version) {
  return guarded("tc_gguf_writer_set_version", [&] {
    if (tc_status st = check_writer("tc_gguf_writer_set_version", w)) return st;
    if (version != 2 && version != 3)
      return fail(TC_ERR_INVALID_ARG, "tc_gguf_writer_set_version: version %u (2 or 3)", version);
    w->w.version = version;
    return TC_OK;
  });
}

tc_status tc_gguf_writer_set_alignment(tc_gguf_writer w, uint32_t alignment) {
  return guarded("tc_gguf_writer_set_alignment", [&] {
    if (tc_status st = check_writer("tc_gguf_writer_set_alignment", w)) return st;
    if (!power_of_two(alignment))
      return fail(TC_ERR_INVALID_ARG, "tc_gguf_writer_set_alignment: %u is not a power of two up to 2^30", alignment);
    w->w.alignment = alignment;
    return TC_OK;
  });
}

#define TC_GGUF_SETTER(suffix, ctype, gtype)                                                      \
  tc_status tc_gguf_writer_set_##suffix(tc_gguf_writer w, const char* key, ctype v) {           \
    return guarded("tc_gguf_writer_set_" #suffix,                                               \
                   [&] { return set_scalar("tc_gguf_writer_set_" #suffix, w, key, gtype, &v); }); \
  }

TC_GGUF_SETTER(u8, uint8_t, gguf::kU8)
TC_GGUF_SETTER(i8, int8_t, gguf::kI8)
TC_GGUF_SETTER(u16, uint16_t, gguf::kU16)
TC_GGUF_SETTER(i16, int16_t, gguf::kI16)
TC_GGUF_SETTER(u32, uint32_t, gguf::kU32)
TC_GGUF_SETTER(i32, int32_t, gguf::kI32)
TC_GGUF_SETTER(f32, float, gguf::kF32)
TC_GGUF_SETTER(u64, uint64_t, gguf::kU64)
TC_GGUF_SETTER(i64, int64_t, gguf::kI64)
TC_GGUF_SETTER(f64, double, gguf::kF64)

tc_status tc_gguf_writer_set_bool(tc_gguf_writer w, const char* key, int32_t v) {
  return guarded("tc_gguf_writer_set_bool", [&] {
    uint8_t b = v != 0;
    return set_scalar("tc_gguf_writer_set_bool", w, key, gguf::kBool, &b);
  });
}

tc_status tc_gguf_writer_set_str(tc_gguf_writer w, const char* key, const char* v, size_t len) {
  return guarded("tc_gguf_writer_set_str", [&] {
    const char* fn = "tc_gguf_writer_set_str";
    if (tc_status st = check_new_key(fn, w, key)) return st;
    if (!std::strcmp(key, "general.alignment"))
      return fail(TC_ERR_INVALID_ARG, "%s: general.alignment must be a uint32", fn);
    if (len && !v) return fail(TC_ERR_INVALID_ARG, "%s: value is null", fn);
    w->w.set_string(key, v, len);
    return TC_OK;
  });
}

tc_status tc_gguf_writer_begin_array(tc_gguf_writer w, const char* key, int32_t elem_type) {
  return guarded("tc_gguf_writer_begin_array", [&] { return begin("tc_gguf_writer_begin_array", w, key, elem_type); });
}

tc_status tc_gguf_writer_push_values(tc_gguf_writer w, int32_t elem_type, const void* data, uint64_t count) {
  return guarded("tc_gguf_writer_push_values",
                 [&] { return push_values("tc_gguf_writer_push_values", w, elem_type, data, count); });
}

tc_status tc_gguf_writer_push_str(tc_gguf_writer w, const char* v, size_t len) {
  return guarded("tc_gguf_writer_push_str", [&] { return push_str("tc_gguf_writer_push_str", w, v, len); });
}

tc_status tc_gguf_writer_end_array(tc_gguf_writer w) {
  return guarded("tc_gguf_writer_end_array", [&] {
    if (tc_status st = check_writer("tc_gguf_writer_end_array", w)) return st;
    if (!w->w.in_array()) return fail(TC_ERR_INVALID_ARG, "tc_gguf_writer_end_array: no array is open");
    w->w.end_array();
    return TC_OK;
  });
}

tc_status tc_gguf_writer_set_array(tc_gguf_writer w, const char* key, int32_t elem_type, const void* data,
                                   uint64_t count) {
  return guarded("tc_gguf_writer_set_array", [&] {
    const char* fn = "tc_gguf_writer_set_array";
    if (tc_status st = check_new_key(fn, w, key)) return st;
    if (tc_status st = check_elem_type(fn, elem_type, true)) return st;
    if (count && !data) return fail(TC_ERR_INVALID_ARG, "%s: data is null", fn);
    if (tc_status st = begin(fn, w, key, elem_type)) return st;
    w->w.push_values(data, count);
    w->w.end_array();
    return TC_OK;
  });
}

tc_status tc_gguf_writer_set_str_array(tc_gguf_writer w, const char* key, const char* const* values, const size_t* lens,
                                       uint64_t count) {
  return guarded("tc_gguf_writer_set_str_array", [&] {
    const char* fn = "tc_gguf_writer_set_str_array";
    if (tc_status st = check_new_key(fn, w, key)) return st;
    if (count && !values) return fail(TC_ERR_INVALID_ARG, "%s: values is null", fn);
    for (uint64_t i = 0; i < count; ++i)
      if (!values[i] && (!lens || lens[i])) return fail(TC_ERR_INVALID_ARG, "%s: values[%llu] is null", fn,
                                                        (unsigned long long)i);
    if (tc_status st = begin(fn, w, key, gguf::kString)) return st;
    for (uint64_t i = 0; i < count; ++i) w->w.push_string(values[i], lens ? lens[i] : std::strlen(values[i]));
    w->w.end_array();
    return TC_OK;
  });
}

tc_status tc_gguf_writer_add_tensor(tc_gguf_writer w, const char* name, int32_t ggml_type, const int64_t* dims,
                                    int32_t n_dims, const void* data, uint64_t n_bytes, int32_t copy) {
  return guarded("tc_gguf_writer_add_tensor", [&] {
    const char* fn = "tc_gguf_writer_add_tensor";
    gguf::Writer::Tensor t;
    if (tc_status st = check_tensor(fn, w, name, ggml_type, dims, n_dims, &t)) return st;
    if (n_bytes != t.n_bytes)
      return fail(TC_ERR_INVALID_ARG, "%s: tensor '%s' of type %s and these dims has %llu bytes, not %llu", fn, name,
                  tc_gguf_type_name(ggml_type), (unsigned long long)t.n_bytes, (unsigned long long)n_bytes);
    if (n_bytes && !data) return fail(TC_ERR_INVALID_ARG, "%s: data is null", fn);
    if (copy) t.owned.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n_bytes);
    else t.borrowed = data;
    w->w.add_tensor(std::move(t));
    return TC_OK;
  });
}

tc_status tc_gguf_writer_add_tensor_buffer(tc_gguf_writer w, const char* name, int32_t ggml_type, const int64_t* dims,
                                           int32_t n_dims, tc_buffer buf, uint64_t offset) {
  return guarded("tc_gguf_writer_add_tensor_buffer", [&] {
    const char* fn = "tc_gguf_writer_add_tensor_buffer";
    gguf::Writer::Tensor t;
    if (tc_status st = check_tensor(fn, w, name, ggml_type, dims, n_dims, &t)) return st;
    if (tc_status st = check_buffer(fn, "buf", nullptr, buf)) return st;
    if (offset > buf->size() || t.n_bytes > buf->size() - offset)
      return fail(TC_ERR_INVALID_ARG, "%s: tensor '%s' needs %llu bytes from offset %llu but the buffer has %zu", fn,
                  name, (unsigned long long)t.n_bytes, (unsigned long long)offset, buf->size());
    t.owned.resize(size_t(t.n_bytes));
    if (t.n_bytes)
      if (tc_status st = buf->ctx->backend->copy_out(t.owned.data(), buf->bytes() + offset, size_t(t.n_bytes)))
        return st;
    w->w.add_tensor(std::move(t));
    return TC_OK;
  });
}

tc_status tc_gguf_writer_write_file(tc_gguf_writer w, const char* path) {
  return guarded("tc_gguf_writer_write_file", [&] {
    const char* fn = "tc_gguf_writer_write_file";
    if (tc_status st = check_writer(fn, w)) return st;
    if (!path || !*path) return fail(TC_ERR_INVALID_ARG, "%s: path is null or empty", fn);
    if (w->w.in_array()) return fail(TC_ERR_INVALID_ARG, "%s: an array is still open", fn);
    return w->w.write_file(path);
  });
}

}  // extern "C"
