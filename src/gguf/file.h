// A parsed GGUF file (v2 or v3, little-endian) over its mapped bytes.
//
// Layout (all integers little-endian):
//   u32 magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x  { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   padding to `alignment` (general.alignment, default 32) | tensor data
// where string = u64 length + bytes (no terminator) and an array value is
// u32 element type + u64 count + elements (arrays may nest).
//
// Parsing checks every length, count, offset and dimension against the bytes
// that remain and against 64-bit overflow before using it, so a truncated or
// hostile file fails with TC_ERR_CORRUPT and a detail; no allocation grows
// beyond a small multiple of the file size, nothing recurses deeper than
// kMaxDepth, and no loop runs longer than the file has bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensorcore/types.h"

namespace tc {
namespace gguf {

constexpr int kMaxDims = 8;      // TC_GGUF_MAX_DIMS
constexpr int kMaxDepth = 16;    // nesting of arrays in metadata
constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as little-endian u32
constexpr uint64_t kDefaultAlignment = 32;

// Metadata value types (GGUF's numbering, TC_GGUF_TYPE_*).
enum ValueType : int32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
// Bytes of a fixed-size value type; 0 for string, array and unknown types.
int value_size(int32_t type);
const char* value_type_name(int32_t type);

// Bytes the file (or a copy of it) occupies in memory. Owns them: unmaps or
// frees on destruction. Shared by the file and every buffer made from it.
struct Region {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  virtual ~Region() = default;
};

// One metadata value. Scalars and arrays of fixed-size elements are read at
// `pos`; strings start at `pos` with their u64 length. Arrays of strings keep
// each element's position, arrays of arrays their parsed children.
struct Value {
  int32_t type = -1;
  int32_t elem_type = -1;  // arrays only
  uint64_t pos = 0;
  uint64_t count = 0;      // arrays only
  std::vector<uint64_t> elems;   // arrays of strings
  std::vector<Value> children;   // arrays of arrays
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  int32_t type = -1;     // ggml type id
  int32_t format = -1;   // TC_QUANT_* when we compute with the type, else -1
  int32_t n_dims = 0;
  int64_t dims[kMaxDims] = {};  // dims[0] is the row length (ggml's ne[0])
  uint64_t offset = 0;   // from the start of the data section
  uint64_t n_bytes = 0;
  uint64_t n_elements = 0;
};

class File {
 public:
  // Opens and maps a file: TC_ERR_IO when it cannot be opened or mapped,
  // TC_ERR_CORRUPT (or TC_ERR_UNSUPPORTED for big-endian or v1 files) when
  // its contents are not a valid GGUF file. The detail names the problem.
  static tc_status open(const char* path, std::unique_ptr<File>* out);
  // Parses a copy of `size` bytes at `data`.
  static tc_status open_memory(const void* data, uint64_t size, std::unique_ptr<File>* out);
  ~File();

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }
  uint64_t file_size() const { return region_->size; }
  const std::shared_ptr<Region>& region() const { return region_; }
  bool has_file() const { return fd_ >= 0; }

  const std::vector<KeyValue>& kvs() const { return kvs_; }
  const KeyValue* find_kv(const std::string& key) const;
  int64_t kv_index(const std::string& key) const;  // -1 when absent
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  int64_t tensor_index(const std::string& name) const;  // -1 when absent

  // Raw little-endian reads at a position the parser validated.
  uint64_t read_u64(uint64_t pos) const;
  // The string at `pos` (u64 length + bytes) as a NUL-terminated copy that
  // lives as long as the file; `len` gets the length without the NUL.
  const char* string_at(uint64_t pos, uint64_t* len) const;
  // A scalar of fixed-size `type` at `pos`, widened.
  bool scalar_i64(int32_t type, uint64_t pos, int64_t* out) const;   // integers and bool; false if a u64 > INT64_MAX
  bool scalar_u64(int32_t type, uint64_t pos, uint64_t* out) const;  // integers >= 0 and bool
  bool scalar_f64(int32_t type, uint64_t pos, double* out) const;    // floats and integers

  // Tensor bytes, read-only, inside the region.
  const uint8_t* tensor_data(const TensorInfo& t) const { return region_->data + data_start_ + t.offset; }
  // A private copy-on-write mapping of file bytes [offset, offset + size):
  // reads share the page cache, writes stay in this process and this mapping.
  // Null with a TC_ERR_IO detail when the file cannot be mapped again (or
  // the file was opened from memory). `*data` points at byte `offset`.
  std::shared_ptr<Region> map_private(uint64_t offset, uint64_t size, uint8_t** data) const;

 private:
  File() = default;
  tc_status parse(const char* origin);

  std::shared_ptr<Region> region_;
  int fd_ = -1;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_start_ = 0;
  std::vector<KeyValue> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
  mutable std::mutex strings_mu_;
  mutable std::unordered_map<uint64_t, std::string> strings_;
};

}  // namespace gguf
}  // namespace tc
