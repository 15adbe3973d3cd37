/* tensorcore: GGUF model files (v2 and v3, little-endian): reading metadata and
 * tensors, loading tensors into buffers, and writing files.
 *
 * A tc_gguf maps the file read-only; everything is validated when it is
 * opened (a truncated or hostile file gives TC_ERR_CORRUPT with a detail;
 * TC_ERR_IO when it cannot be opened or mapped). Strings and names returned
 * by the getters are NUL-terminated and stay valid until tc_gguf_close.
 * Tensor dims are in the file's order: dims[0] is the row length (ggml's
 * ne[0]), so a weight matrix W[N, K] has dims {K, N}. If another process
 * truncates the file while it is mapped, reading it faults: don't.
 *
 * Metadata getters address a value by key and, for the _nested functions, by
 * a path of array indices (path[0] indexes the key's array, path[1] the
 * array found there, ...). A missing key, an index out of range or a value
 * of another type is TC_ERR_INVALID_ARG. */
#ifndef TENSORCORE_GGUF_H
#define TENSORCORE_GGUF_H

#include "tensorcore/quant.h"
#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tc_gguf_s* tc_gguf;
typedef struct tc_gguf_model_s* tc_gguf_model;
typedef struct tc_gguf_writer_s* tc_gguf_writer;

/* Metadata value types (GGUF's numbering). */
#define TC_GGUF_TYPE_UINT8 0
#define TC_GGUF_TYPE_INT8 1
#define TC_GGUF_TYPE_UINT16 2
#define TC_GGUF_TYPE_INT16 3
#define TC_GGUF_TYPE_UINT32 4
#define TC_GGUF_TYPE_INT32 5
#define TC_GGUF_TYPE_FLOAT32 6
#define TC_GGUF_TYPE_BOOL 7
#define TC_GGUF_TYPE_STRING 8
#define TC_GGUF_TYPE_ARRAY 9
#define TC_GGUF_TYPE_UINT64 10
#define TC_GGUF_TYPE_INT64 11
#define TC_GGUF_TYPE_FLOAT64 12

/* Tensor types: ggml's ids. The library computes with these; a file may hold
 * any other ggml type, which is read and sized but not loaded. */
#define TC_GGML_TYPE_F32 0
#define TC_GGML_TYPE_F16 1
#define TC_GGML_TYPE_Q4_0 2
#define TC_GGML_TYPE_Q4_1 3
#define TC_GGML_TYPE_Q5_0 6
#define TC_GGML_TYPE_Q5_1 7
#define TC_GGML_TYPE_Q8_0 8
#define TC_GGML_TYPE_Q4_K 12
#define TC_GGML_TYPE_Q5_K 13
#define TC_GGML_TYPE_Q6_K 14
#define TC_GGML_TYPE_Q8_K 15
#define TC_GGML_TYPE_BF16 30

#define TC_GGUF_MAX_DIMS 8
#define TC_GGUF_DEFAULT_ALIGNMENT 32

/* ggml's name of a type id ("Q4_0", "F16", ...); "unknown" otherwise. */
TC_API const char* tc_gguf_type_name(int32_t ggml_type);
/* Block geometry of any ggml type, and the TC_QUANT_* format we compute it
 * with (-1 when unsupported). INVALID_ARG for ids ggml does not define. */
TC_API tc_status tc_gguf_type_info(int32_t ggml_type, int64_t* block_elems, int64_t* block_bytes,
                                   tc_quant_type* quant_type);
/* TC_QUANT_* of a ggml type, -1 when unsupported; and the reverse. */
TC_API tc_quant_type tc_gguf_type_to_quant(int32_t ggml_type);
TC_API int32_t tc_quant_to_gguf_type(tc_quant_type fmt);

struct tc_gguf_tensor_info {
  const char* name;
  int32_t type;           /* ggml type id */
  int32_t n_dims;
  int64_t dims[TC_GGUF_MAX_DIMS]; /* dims[0] = row length; unused entries are 1 */
  uint64_t offset;        /* from the start of the data section, as in the file */
  uint64_t n_bytes;
  uint64_t file_offset;   /* from the start of the file */
  tc_quant_type quant_type; /* -1 when the library does not compute with the type */
};

/* A weight matrix view of a tensor: K = dims[0], N = the product of the
 * other dims (1 for a vector). `buffer` is null for a tensor of a file. */
struct tc_quantized_matrix_info {
  tc_quant_type quant_type;
  int32_t gguf_type;
  int64_t N;
  int64_t K;
  uint64_t n_bytes;
  tc_buffer buffer;
};

/* Hyper-parameters of a LLaMA-family model (llama, mistral, and any
 * architecture whose keys follow "<arch>.embedding_length", ...). Missing
 * optional keys take: rms_norm_epsilon 1e-5, rope_freq_base 10000,
 * rope_freq_scale 1 (1 / <arch>.rope.scaling.factor when present),
 * attention_head_count_kv = attention_head_count, rope_dimension_count =
 * embedding_length / attention_head_count, context_length 0, and vocab_size
 * from <arch>.vocab_size, else the tokenizer.ggml.tokens count, else the
 * token_embd.weight rows. Per-layer arrays (head counts, feed-forward
 * lengths) report their largest entry. */
struct tc_gguf_llama_config {
  char architecture[64];
  int64_t vocab_size;
  int64_t context_length;
  int64_t embedding_length;
  int64_t block_count;
  int64_t feed_forward_length;
  int64_t attention_head_count;
  int64_t attention_head_count_kv;
  int64_t rope_dimension_count;
  double rms_norm_epsilon;
  double rope_freq_base;
  double rope_freq_scale;
};

/* ---- Reading -------------------------------------------------------------- */
TC_API tc_status tc_gguf_open(const char* path, tc_gguf* out);
/* Parses a copy of `size` bytes (the caller's memory is not kept). */
TC_API tc_status tc_gguf_open_memory(const void* data, size_t size, tc_gguf* out);
/* Closes the file. Buffers and models made from it stay valid. */
TC_API tc_status tc_gguf_close(tc_gguf g);

TC_API tc_status tc_gguf_version(tc_gguf g, uint32_t* out);
TC_API tc_status tc_gguf_alignment(tc_gguf g, uint64_t* out);
/* File offset where tensor data begins. */
TC_API tc_status tc_gguf_data_offset(tc_gguf g, uint64_t* out);
TC_API tc_status tc_gguf_tensor_count(tc_gguf g, int64_t* out);
TC_API tc_status tc_gguf_metadata_count(tc_gguf g, int64_t* out);

/* Metadata keys in file order; index of a key (-1 when absent, TC_OK). */
TC_API tc_status tc_gguf_meta_key_at(tc_gguf g, int64_t i, const char** key);
TC_API tc_status tc_gguf_meta_find(tc_gguf g, const char* key, int64_t* index);
/* Type of a key's value; for arrays also the element type and count
 * (elem_type -1 and count 0 otherwise). Any out pointer may be null. */
TC_API tc_status tc_gguf_meta_type(tc_gguf g, const char* key, int32_t* type, int32_t* elem_type, int64_t* count);

/* Scalars. get_i64 takes any integer type or bool (a uint64 above INT64_MAX
 * is INVALID_ARG: use get_u64); get_u64 takes non-negative integers and
 * bool; get_f64 takes floats and integers. `len` (may be null) gets the
 * string's length, which may include NUL bytes. */
TC_API tc_status tc_gguf_meta_get_str(tc_gguf g, const char* key, const char** out, size_t* len);
TC_API tc_status tc_gguf_meta_get_i64(tc_gguf g, const char* key, int64_t* out);
TC_API tc_status tc_gguf_meta_get_u64(tc_gguf g, const char* key, uint64_t* out);
TC_API tc_status tc_gguf_meta_get_f64(tc_gguf g, const char* key, double* out);

/* Elements of an array value. */
TC_API tc_status tc_gguf_meta_array_count(tc_gguf g, const char* key, int64_t* out);
TC_API tc_status tc_gguf_meta_array_get_str(tc_gguf g, const char* key, int64_t i, const char** out, size_t* len);
TC_API tc_status tc_gguf_meta_array_get_i64(tc_gguf g, const char* key, int64_t i, int64_t* out);
TC_API tc_status tc_gguf_meta_array_get_u64(tc_gguf g, const char* key, int64_t i, uint64_t* out);
TC_API tc_status tc_gguf_meta_array_get_f64(tc_gguf g, const char* key, int64_t i, double* out);
/* The packed little-endian elements of an array of a fixed-size type, read
 * in place (not necessarily aligned). */
TC_API tc_status tc_gguf_meta_array_data(tc_gguf g, const char* key, const void** data, int32_t* elem_type,
                                         int64_t* count);

/* Nested arrays: the value at `path` (depth indices) below `key`. */
TC_API tc_status tc_gguf_meta_nested_type(tc_gguf g, const char* key, const int64_t* path, int32_t depth,
                                          int32_t* type, int32_t* elem_type, int64_t* count);
TC_API tc_status tc_gguf_meta_nested_get_str(tc_gguf g, const char* key, const int64_t* path, int32_t depth,
                                             const char** out, size_t* len);
TC_API tc_status tc_gguf_meta_nested_get_i64(tc_gguf g, const char* key, const int64_t* path, int32_t depth,
                                             int64_t* out);
TC_API tc_status tc_gguf_meta_nested_get_u64(tc_gguf g, const char* key, const int64_t* path, int32_t depth,
                                             uint64_t* out);
TC_API tc_status tc_gguf_meta_nested_get_f64(tc_gguf g, const char* key, const int64_t* path, int32_t depth,
                                             double* out);

TC_API tc_status tc_gguf_get_llama_config(tc_gguf g, struct tc_gguf_llama_config* out);

/* Tensors in file order; by name (INVALID_ARG when absent); index of a name
 * (-1 when absent, TC_OK). */
TC_API tc_status tc_gguf_tensor_at(tc_gguf g, int64_t i, struct tc_gguf_tensor_info* out);
TC_API tc_status tc_gguf_get_tensor(tc_gguf g, const char* name, struct tc_gguf_tensor_info* out);
TC_API tc_status tc_gguf_find_tensor(tc_gguf g, const char* name, int64_t* index);
/* The tensor's bytes, read-only, in the mapped file. */
TC_API tc_status tc_gguf_tensor_data(tc_gguf g, const char* name, const void** data, uint64_t* n_bytes);
/* Matrix view of a tensor (buffer null). UNSUPPORTED_DTYPE when the library
 * does not compute with its type (IQ*, Q2_K, ...); the detail names the tensor
 * and the type ("tensor 'blk.0.attn_q.weight' has type IQ2_XXS, which
 * tensorcore does not compute with"). */
TC_API tc_status tc_gguf_tensor_quantized_matrix_info(tc_gguf g, const char* name,
                                                      struct tc_quantized_matrix_info* out);

/* A new buffer holding the tensor's bytes, of any type. On the CPU it is a
 * private copy-on-write mapping of the file (no copy until written); on a
 * GPU a device copy. The caller frees it. */
TC_API tc_status tc_gguf_tensor_to_buffer(tc_context ctx, tc_gguf g, const char* name, tc_buffer* out);

/* ---- Loaded models ---------------------------------------------------------- */
/* Puts every tensor of a supported type (and at least one byte) into a
 * buffer of `ctx` (CPU: one private copy-on-write mapping shared by the
 * tensors, read ahead; GPU: device copies) and counts the others as skipped.
 * The model owns the buffers: tc_buffer_free refuses them, and they stay
 * valid until tc_gguf_loaded_model_free. The model does not need `g` open. */
TC_API tc_status tc_gguf_load_supported_tensors(tc_context ctx, tc_gguf g, tc_gguf_model* out);
TC_API tc_status tc_gguf_loaded_model_free(tc_gguf_model m);
TC_API tc_status tc_gguf_loaded_tensor_count(tc_gguf_model m, int64_t* out);
TC_API tc_status tc_gguf_loaded_skipped_tensor_count(tc_gguf_model m, int64_t* out);

struct tc_gguf_loaded_tensor {
  const char* name;
  int32_t type;              /* ggml type id */
  tc_quant_type quant_type;
  int32_t n_dims;
  int64_t dims[TC_GGUF_MAX_DIMS];
  uint64_t n_bytes;
  tc_buffer buffer;          /* owned by the model */
};
TC_API tc_status tc_gguf_loaded_tensor_at(tc_gguf_model m, int64_t i, struct tc_gguf_loaded_tensor* out);
TC_API tc_status tc_gguf_loaded_get_tensor(tc_gguf_model m, const char* name, struct tc_gguf_loaded_tensor* out);
TC_API tc_status tc_gguf_loaded_tensor_quantized_matrix_info(tc_gguf_model m, const char* name,
                                                             struct tc_quantized_matrix_info* out);

/* ---- Writing ----------------------------------------------------------------
 * Build metadata and tensors in memory, then write the file in one go:
 * header, key-value pairs in the order they were set, tensor infos, padding
 * and the data of each tensor at a multiple of the alignment. Keys and
 * tensor names are unique. Arrays are built with begin_array / push / end:
 * inside an array of arrays, begin_array takes key NULL. */
TC_API tc_status tc_gguf_writer_create(tc_gguf_writer* out);
TC_API tc_status tc_gguf_writer_free(tc_gguf_writer w);
/* Version 3 (default) or 2: the bytes are the same, only the number differs. */
TC_API tc_status tc_gguf_writer_set_version(tc_gguf_writer w, uint32_t version);
/* A power of two (default 32); recorded as general.alignment (uint32) when
 * not the default. */
TC_API tc_status tc_gguf_writer_set_alignment(tc_gguf_writer w, uint32_t alignment);

TC_API tc_status tc_gguf_writer_set_u8(tc_gguf_writer w, const char* key, uint8_t v);
TC_API tc_status tc_gguf_writer_set_i8(tc_gguf_writer w, const char* key, int8_t v);
TC_API tc_status tc_gguf_writer_set_u16(tc_gguf_writer w, const char* key, uint16_t v);
TC_API tc_status tc_gguf_writer_set_i16(tc_gguf_writer w, const char* key, int16_t v);
TC_API tc_status tc_gguf_writer_set_u32(tc_gguf_writer w, const char* key, uint32_t v);
TC_API tc_status tc_gguf_writer_set_i32(tc_gguf_writer w, const char* key, int32_t v);
TC_API tc_status tc_gguf_writer_set_f32(tc_gguf_writer w, const char* key, float v);
TC_API tc_status tc_gguf_writer_set_bool(tc_gguf_writer w, const char* key, int32_t v);
TC_API tc_status tc_gguf_writer_set_u64(tc_gguf_writer w, const char* key, uint64_t v);
TC_API tc_status tc_gguf_writer_set_i64(tc_gguf_writer w, const char* key, int64_t v);
TC_API tc_status tc_gguf_writer_set_f64(tc_gguf_writer w, const char* key, double v);
/* `len` bytes of `v` (which may hold NULs). */
TC_API tc_status tc_gguf_writer_set_str(tc_gguf_writer w, const char* key, const char* v, size_t len);
/* An array of `count` packed elements of a fixed-size type. */
TC_API tc_status tc_gguf_writer_set_array(tc_gguf_writer w, const char* key, int32_t elem_type, const void* data,
                                          uint64_t count);
/* An array of strings; lens may be null for NUL-terminated strings. */
TC_API tc_status tc_gguf_writer_set_str_array(tc_gguf_writer w, const char* key, const char* const* values,
                                              const size_t* lens, uint64_t count);
TC_API tc_status tc_gguf_writer_begin_array(tc_gguf_writer w, const char* key, int32_t elem_type);
TC_API tc_status tc_gguf_writer_push_values(tc_gguf_writer w, int32_t elem_type, const void* data, uint64_t count);
TC_API tc_status tc_gguf_writer_push_str(tc_gguf_writer w, const char* v, size_t len);
TC_API tc_status tc_gguf_writer_end_array(tc_gguf_writer w);

/* A tensor of any ggml type; dims in file order (dims[0] = row length);
 * n_bytes must be its exact size. copy != 0 copies the bytes now; copy == 0
 * reads them from `data` when the file is written (keep them valid). */
TC_API tc_status tc_gguf_writer_add_tensor(tc_gguf_writer w, const char* name, int32_t ggml_type,
                                           const int64_t* dims, int32_t n_dims, const void* data, uint64_t n_bytes,
                                           int32_t copy);
/* A tensor whose bytes are read from `buf` (from byte `offset`) when the file
 * is written; the buffer's memory is kept alive until then. */
TC_API tc_status tc_gguf_writer_add_tensor_buffer(tc_gguf_writer w, const char* name, int32_t ggml_type,
                                                  const int64_t* dims, int32_t n_dims, tc_buffer buf,
                                                  uint64_t offset);
TC_API tc_status tc_gguf_writer_write_file(tc_gguf_writer w, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_GGUF_H */
