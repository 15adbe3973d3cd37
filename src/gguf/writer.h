// Building and writing a GGUF file (the layout in file.h). Metadata is
// serialised as it is set, so the order of keys is the order of the calls;
// open arrays sit on a stack and get their element count patched when they
// end. Tensor bytes are copied in, or read from the caller's pointer when the
// file is written. Callers (src/capi) validate arguments first; every method
// here leaves the writer unchanged when it refuses.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "gguf/file.h"

namespace tc {
namespace gguf {

class Writer {
 public:
  uint32_t version = 3;
  uint32_t alignment = uint32_t(kDefaultAlignment);

  bool has_key(const std::string& key) const { return keys_.count(key) != 0; }
  bool has_tensor(const std::string& name) const { return names_.count(name) != 0; }
  bool in_array() const { return !stack_.empty(); }
  int depth() const { return int(stack_.size()); }
  int32_t open_elem_type() const { return stack_.empty() ? -1 : stack_.back().elem_type; }

  // A complete scalar (or string) value under a new top-level key. For
  // general.alignment (uint32) the value is patched to `alignment` on write.
  void set_scalar(const std::string& key, int32_t type, const void* value);
  void set_string(const std::string& key, const char* s, uint64_t len);
  // Opens an array under `key` (top level) or as the next element of the open
  // array of arrays (key ignored).
  void begin_array(const std::string& key, int32_t elem_type);
  void push_values(const void* data, uint64_t count);  // fixed-size elements of the open array
  void push_string(const char* s, uint64_t len);
  void end_array();

  struct Tensor {
    std::string name;
    int32_t type = 0;
    int32_t n_dims = 0;
    int64_t dims[kMaxDims] = {};
    uint64_t n_bytes = 0;
    std::vector<uint8_t> owned;   // copied bytes, or
    const void* borrowed = nullptr;  // the caller's bytes, read at write time
  };
  void add_tensor(Tensor t);

  // Writes to `path` through a temporary file renamed into place; TC_ERR_IO
  // with a detail on failure (the target is then untouched).
  tc_status write_file(const std::string& path) const;

 private:
  struct Open {
    size_t count_pos;
    int32_t elem_type;
    uint64_t count;
  };
  void put_u32(uint32_t v) { kv_.append(reinterpret_cast<const char*>(&v), 4); }
  void put_u64(uint64_t v) { kv_.append(reinterpret_cast<const char*>(&v), 8); }
  void put_string(const char* s, uint64_t len) {
    put_u64(len);
    kv_.append(s, size_t(len));
  }

  std::string kv_;  // serialised key-value pairs
  uint64_t n_kv_ = 0;
  std::unordered_set<std::string> keys_;
  std::vector<Open> stack_;
  int64_t alignment_value_pos_ = -1;  // where general.alignment's u32 sits in kv_
  std::vector<Tensor> tensors_;
  std::unordered_set<std::string> names_;
};

}  // namespace gguf
}  // namespace tc
