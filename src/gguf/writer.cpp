#include "gguf/writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace tc {
namespace gguf {

void Writer::set_scalar(const std::string& key, int32_t type, const void* value) {
  put_string(key.data(), key.size());
  put_u32(uint32_t(type));
  if (key == "general.alignment" && type == kU32) alignment_value_pos_ = int64_t(kv_.size());
  if (type == kBool) {
    uint8_t b = *static_cast<const uint8_t*>(value) != 0;
    kv_.append(reinterpret_cast<const char*>(&b), 1);
  } else {
    kv_.append(static_cast<const char*>(value), size_t(value_size(type)));
  }
  keys_.insert(key);
  ++n_kv_;
}

void Writer::set_string(const std::string& key, const char* s, uint64_t len) {
  put_string(key.data(), key.size());
  put_u32(kString);
  put_string(s, len);
  keys_.insert(key);
  ++n_kv_;
}

void Writer::begin_array(const std::string& key, int32_t elem_type) {
  if (stack_.empty()) {
    put_string(key.data(), key.size());
    put_u32(kArray);
    keys_.insert(key);
  } else {
    stack_.back().count++;
  }
  put_u32(uint32_t(elem_type));
  stack_.push_back({kv_.size(), elem_type, 0});
  put_u64(0);
}

void Writer::push_values(const void* data, uint64_t count) {
  Open& top = stack_.back();
  const size_t sz = size_t(value_size(top.elem_type));
  if (top.elem_type == kBool) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    for (uint64_t i = 0; i < count; ++i) kv_.push_back(char(p[i] != 0));
  } else {
    kv_.append(static_cast<const char*>(data), size_t(count) * sz);
  }
  top.count += count;
}

void Writer::push_string(const char* s, uint64_t len) {
  put_string(s, len);
  stack_.back().count++;
}

void Writer::end_array() {
  const Open top = stack_.back();
  std::memcpy(&kv_[top.count_pos], &top.count, 8);
  stack_.pop_back();
  if (stack_.empty()) ++n_kv_;
}

void Writer::add_tensor(Tensor t) {
  names_.insert(t.name);
  tensors_.push_back(std::move(t));
}

namespace {

struct File_ {
  std::FILE* f = nullptr;
  ~File_() {
    if (f) std::fclose(f);
  }
};

}  // namespace

tc_status Writer::write_file(const std::string& path) const {
  const uint64_t align = alignment;
  // The header: magic, version, counts, then metadata.
  std::string head;
  auto u32 = [&](uint32_t v) { head.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { head.append(reinterpret_cast<const char*>(&v), 8); };
  const bool add_alignment_key = alignment != kDefaultAlignment && alignment_value_pos_ < 0;
  u32(kMagic);
  u32(version);
  u64(tensors_.size());
  u64(n_kv_ + (add_alignment_key ? 1 : 0));
  std::string kv = kv_;
  if (alignment_value_pos_ >= 0) std::memcpy(&kv[size_t(alignment_value_pos_)], &alignment, 4);
  head += kv;
  if (add_alignment_key) {
    const char key[] = "general.alignment";
    u64(sizeof key - 1);
    head.append(key, sizeof key - 1);
    u32(kU32);
    u32(alignment);
  }
  // Tensor infos with offsets at multiples of the alignment.
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors_) {
    offset = (offset + align - 1) / align * align;
    offsets.push_back(offset);
    u64(t.name.size());
    head += t.name;
    u32(uint32_t(t.n_dims));
    for (int d = 0; d < t.n_dims; ++d) u64(uint64_t(t.dims[d]));
    u32(uint32_t(t.type));
    u64(offset);
    offset += t.n_bytes;
  }
  if (!tensors_.empty()) head.resize((head.size() + align - 1) / align * align, '\0');

  const std::string tmp = path + ".tmp";
  File_ out;
  out.f = std::fopen(tmp.c_str(), "wb");
  if (!out.f) return fail(TC_ERR_IO, "gguf writer: cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
  bool ok = std::fwrite(head.data(), 1, head.size(), out.f) == head.size();
  uint64_t at = 0;  // position in the data section
  static const char zeros[4096] = {};
  for (size_t i = 0; ok && i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    while (ok && at < offsets[i]) {
      size_t n = size_t(std::min<uint64_t>(sizeof zeros, offsets[i] - at));
      ok = std::fwrite(zeros, 1, n, out.f) == n;
      at += n;
    }
    const void* src = t.owned.empty() ? t.borrowed : t.owned.data();
    if (ok && t.n_bytes) ok = std::fwrite(src, 1, size_t(t.n_bytes), out.f) == t.n_bytes;
    at += t.n_bytes;
  }
  int err = ok ? 0 : errno;
  if (std::fclose(out.f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  out.f = nullptr;
  if (!ok) {
    std::remove(tmp.c_str());
    return fail(TC_ERR_IO, "gguf writer: writing '%s' failed: %s", tmp.c_str(), std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return fail(TC_ERR_IO, "gguf writer: cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(),
                std::strerror(err));
  }
  return TC_OK;
}

}  // namespace gguf
}  // namespace tc
