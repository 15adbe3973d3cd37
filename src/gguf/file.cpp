// GGUF parsing. Every read goes through Cursor, which refuses to step past
// the end; every count is checked against the bytes left (each element needs
// at least a known number of bytes) before anything is reserved for it.
#include "gguf/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "quant/formats.h"

namespace tc {
namespace gguf {
namespace {

struct MappedRegion final : Region {
  void* base = nullptr;
  size_t length = 0;
  ~MappedRegion() override {
    if (base) munmap(base, length);
  }
};

struct OwnedRegion final : Region {
  std::vector<uint8_t> bytes;
};

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  bool u32(uint32_t* v) {
    if (left() < 4) return false;
    std::memcpy(v, data_ + pos_, 4);
    pos_ += 4;
    return true;
  }
  bool u64(uint64_t* v) {
    if (left() < 8) return false;
    *v = load_u64(data_ + pos_);
    pos_ += 8;
    return true;
  }
  bool skip(uint64_t n) {
    if (left() < n) return false;
    pos_ += n;
    return true;
  }
  // A string: `*at` gets the position of its length prefix.
  bool string(uint64_t* at, uint64_t* len) {
    *at = pos_;
    if (!u64(len)) return false;
    return skip(*len);
  }
  const uint8_t* here() const { return data_ + pos_; }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Reports a parse failure at the cursor's position.
tc_status corrupt(const char* origin, const Cursor& c, const char* what) {
  return fail(TC_ERR_CORRUPT, "gguf %s: %s at byte %llu of %llu", origin, what, (unsigned long long)c.pos(),
              (unsigned long long)(c.pos() + c.left()));
}

tc_status parse_value(const char* origin, Cursor& c, int32_t type, int depth, Value* out) {
  out->type = type;
  out->pos = c.pos();
  if (int sz = value_size(type)) {
    if (!c.skip(uint64_t(sz))) return corrupt(origin, c, "truncated value");
    return TC_OK;
  }
  if (type == kString) {
    uint64_t at, len;
    if (!c.string(&at, &len)) return corrupt(origin, c, "truncated string value");
    return TC_OK;
  }
  if (type != kArray) return corrupt(origin, c, "unknown value type");
  if (depth >= kMaxDepth) return corrupt(origin, c, "arrays nested too deeply");
  uint32_t et;
  uint64_t count;
  if (!c.u32(&et) || !c.u64(&count)) return corrupt(origin, c, "truncated array header");
  out->elem_type = int32_t(et);
  out->count = count;
  out->pos = c.pos();
  if (int sz = value_size(out->elem_type)) {
    if (count > c.left() / uint64_t(sz)) return corrupt(origin, c, "array longer than the file");
    c.skip(count * uint64_t(sz));
    return TC_OK;
  }
  if (out->elem_type == kString) {
    if (count > c.left() / 8) return corrupt(origin, c, "string array longer than the file");
    out->elems.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t at, len;
      if (!c.string(&at, &len)) return corrupt(origin, c, "truncated string in array");
      out->elems.push_back(at);
    }
    return TC_OK;
  }
  if (out->elem_type == kArray) {
    if (count > c.left() / 12) return corrupt(origin, c, "nested array longer than the file");
    out->children.resize(count);
    for (uint64_t i = 0; i < count; ++i)
      if (tc_status st = parse_value(origin, c, kArray, depth + 1, &out->children[i])) return st;
    return TC_OK;
  }
  return corrupt(origin, c, "unknown array element type");
}

}  // namespace

int value_size(int32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: return 8;
    default: return 0;
  }
}

const char* value_type_name(int32_t type) {
  static const char* names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                "bool", "string", "array", "uint64", "int64", "float64"};
  return type >= 0 && type <= 12 ? names[type] : "unknown";
}

File::~File() {
  if (fd_ >= 0) close(fd_);
}

tc_status File::open(const char* path, std::unique_ptr<File>* out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(TC_ERR_IO, "gguf: cannot open '%s': %s", path, std::strerror(errno));
  std::unique_ptr<File> f(new File());
  f->fd_ = fd;
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(TC_ERR_IO, "gguf: cannot stat '%s': %s", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return fail(TC_ERR_IO, "gguf: '%s' is not a regular file", path);
  if (st.st_size < 24)
    return fail(TC_ERR_CORRUPT, "gguf '%s': %lld bytes is shorter than a GGUF header (24)", path,
                (long long)st.st_size);
  auto region = std::make_shared<MappedRegion>();
  void* base = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  if (base == MAP_FAILED) return fail(TC_ERR_IO, "gguf: cannot map '%s': %s", path, std::strerror(errno));
  region->base = base;
  region->length = size_t(st.st_size);
  region->data = static_cast<const uint8_t*>(base);
  region->size = uint64_t(st.st_size);
  f->region_ = region;
  if (tc_status s = f->parse(path)) return s;
  *out = std::move(f);
  return TC_OK;
}

tc_status File::open_memory(const void* data, uint64_t size, std::unique_ptr<File>* out) {
  if (size < 24)
    return fail(TC_ERR_CORRUPT, "gguf <memory>: %llu bytes is shorter than a GGUF header (24)",
                (unsigned long long)size);
  auto region = std::make_shared<OwnedRegion>();
  region->bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  region->data = region->bytes.data();
  region->size = size;
  std::unique_ptr<File> f(new File());
  f->region_ = region;
  if (tc_status s = f->parse("<memory>")) return s;
  *out = std::move(f);
  return TC_OK;
}

tc_status File::parse(const char* origin) {
  Cursor c(region_->data, region_->size);
  uint32_t magic = 0, version = 0;
  c.u32(&magic);
  if (magic != kMagic) return corrupt(origin, c, "bad magic (not a GGUF file)");
  c.u32(&version);
  if (version == 0x02000000u || version == 0x03000000u)
    return fail(TC_ERR_UNSUPPORTED, "gguf %s: big-endian GGUF files are not supported", origin);
  if (version == 1) return fail(TC_ERR_UNSUPPORTED, "gguf %s: GGUF version 1 is not supported (2 and 3 are)", origin);
  if (version != 2 && version != 3) {
    return fail(TC_ERR_CORRUPT, "gguf %s: unknown GGUF version %u (2 and 3 are supported)", origin, version);
  }
  version_ = version;
  uint64_t n_tensors = 0, n_kv = 0;
  c.u64(&n_tensors);
  c.u64(&n_kv);
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes, a
  // tensor info 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
  if (n_kv > c.left() / 13) return corrupt(origin, c, "metadata count larger than the file can hold");
  if (n_tensors > c.left() / 24) return corrupt(origin, c, "tensor count larger than the file can hold");

  kvs_.resize(n_kv);
  kv_index_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    KeyValue& kv = kvs_[i];
    uint64_t at, len;
    if (!c.string(&at, &len)) return corrupt(origin, c, "truncated metadata key");
    kv.key.assign(reinterpret_cast<const char*>(region_->data + at + 8), len);
    uint32_t type;
    if (!c.u32(&type)) return corrupt(origin, c, "truncated metadata value type");
    if (tc_status st = parse_value(origin, c, int32_t(type), 0, &kv.value)) return st;
    if (!kv_index_.emplace(kv.key, i).second)
      return fail(TC_ERR_CORRUPT, "gguf %s: duplicate metadata key '%s'", origin, kv.key.c_str());
  }

  if (const KeyValue* a = find_kv("general.alignment")) {
    uint64_t v = 0;
    if (value_size(a->value.type) == 0 || a->value.type == kF32 || a->value.type == kF64 ||
        !scalar_u64(a->value.type, a->value.pos, &v))
      return fail(TC_ERR_CORRUPT, "gguf %s: general.alignment must be a non-negative integer (it is a %s)", origin,
                  value_type_name(a->value.type));
    if (v == 0 || (v & (v - 1)) != 0 || v > (uint64_t(1) << 30))
      return fail(TC_ERR_CORRUPT, "gguf %s: general.alignment = %llu is not a power of two up to 2^30", origin,
                  (unsigned long long)v);
    alignment_ = v;
  }

  tensors_.resize(n_tensors);
  tensor_index_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo& t = tensors_[i];
    uint64_t at, len;
    if (!c.string(&at, &len)) return corrupt(origin, c, "truncated tensor name");
    t.name.assign(reinterpret_cast<const char*>(region_->data + at + 8), len);
    uint32_t n_dims;
    if (!c.u32(&n_dims)) return corrupt(origin, c, "truncated tensor info");
    if (n_dims > uint32_t(kMaxDims))
      return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' has %u dimensions (at most %d)", origin, t.name.c_str(),
                  n_dims, kMaxDims);
    t.n_dims = int32_t(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t v;
      if (!c.u64(&v)) return corrupt(origin, c, "truncated tensor dimensions");
      if (v > uint64_t(INT64_MAX))
        return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' dimension %u = %llu overflows int64", origin,
                    t.name.c_str(), d, (unsigned long long)v);
      t.dims[d] = int64_t(v);
    }
    uint32_t type;
    if (!c.u32(&type) || !c.u64(&t.offset)) return corrupt(origin, c, "truncated tensor info");
    const quant::GgmlTypeInfo* ti = quant::ggml_type_info(int32_t(type));
    if (!ti) return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' has unknown ggml type %u", origin, t.name.c_str(), type);
    t.type = int32_t(type);
    t.format = ti->format;
    // Elements and bytes, overflow-checked: rows of dims[0] elements.
    uint64_t row_len = n_dims ? uint64_t(t.dims[0]) : 1, rows = 1;
    for (uint32_t d = 1; d < n_dims; ++d)
      if (__builtin_mul_overflow(rows, uint64_t(t.dims[d]), &rows))
        return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' element count overflows", origin, t.name.c_str());
    if (row_len % uint64_t(ti->block_elems))
      return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' row of %llu elements is not a multiple of the %s block (%d)",
                  origin, t.name.c_str(), (unsigned long long)row_len, ti->name, ti->block_elems);
    uint64_t row_bytes;
    if (__builtin_mul_overflow(rows, row_len, &t.n_elements) ||
        __builtin_mul_overflow(row_len / uint64_t(ti->block_elems), uint64_t(ti->block_bytes), &row_bytes) ||
        __builtin_mul_overflow(row_bytes, rows, &t.n_bytes) || t.n_elements > uint64_t(INT64_MAX))
      return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' size overflows", origin, t.name.c_str());
    if (!tensor_index_.emplace(t.name, i).second)
      return fail(TC_ERR_CORRUPT, "gguf %s: duplicate tensor name '%s'", origin, t.name.c_str());
  }

  // The data section starts at the next multiple of the alignment.
  uint64_t pos = c.pos();
  data_start_ = (pos + alignment_ - 1) / alignment_ * alignment_;  // pos < 2^63: no overflow
  const uint64_t size = region_->size;
  for (const TensorInfo& t : tensors_) {
    if (t.offset % alignment_)
      return fail(TC_ERR_CORRUPT, "gguf %s: tensor '%s' offset %llu is not a multiple of the alignment %llu", origin,
                  t.name.c_str(), (unsigned long long)t.offset, (unsigned long long)alignment_);
    uint64_t end;
    if (data_start_ > size || __builtin_add_overflow(data_start_, t.offset, &end) ||
        __builtin_add_overflow(end, t.n_bytes, &end) || end > size)
      return fail(TC_ERR_CORRUPT,
                  "gguf %s: tensor '%s' data [%llu, +%llu) past the data section start %llu lies beyond the file "
                  "(%llu bytes)",
                  origin, t.name.c_str(), (unsigned long long)t.offset, (unsigned long long)t.n_bytes,
                  (unsigned long long)data_start_, (unsigned long long)size);
  }
  return TC_OK;
}

const KeyValue* File::find_kv(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

int64_t File::kv_index(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? -1 : int64_t(it->second);
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

int64_t File::tensor_index(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? -1 : int64_t(it->second);
}

uint64_t File::read_u64(uint64_t pos) const { return load_u64(region_->data + pos); }

const char* File::string_at(uint64_t pos, uint64_t* len) const {
  const uint64_t n = read_u64(pos);
  if (len) *len = n;
  std::lock_guard<std::mutex> lock(strings_mu_);
  auto it = strings_.find(pos);
  if (it == strings_.end())
    it = strings_.emplace(pos, std::string(reinterpret_cast<const char*>(region_->data + pos + 8), n)).first;
  return it->second.c_str();
}

bool File::scalar_i64(int32_t type, uint64_t pos, int64_t* out) const {
  const uint8_t* p = region_->data + pos;
  switch (type) {
    case kU8: *out = *p; return true;
    case kI8: *out = int8_t(*p); return true;
    case kBool: *out = *p != 0; return true;
    case kU16: { uint16_t v; std::memcpy(&v, p, 2); *out = v; return true; }
    case kI16: { int16_t v; std::memcpy(&v, p, 2); *out = v; return true; }
    case kU32: { uint32_t v; std::memcpy(&v, p, 4); *out = v; return true; }
    case kI32: { int32_t v; std::memcpy(&v, p, 4); *out = v; return true; }
    case kI64: { int64_t v; std::memcpy(&v, p, 8); *out = v; return true; }
    case kU64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      if (v > uint64_t(INT64_MAX)) return false;
      *out = int64_t(v);
      return true;
    }
    default: return false;
  }
}

bool File::scalar_u64(int32_t type, uint64_t pos, uint64_t* out) const {
  if (type == kU64) {
    std::memcpy(out, region_->data + pos, 8);
    return true;
  }
  int64_t v;
  if (!scalar_i64(type, pos, &v) || v < 0) return false;
  *out = uint64_t(v);
  return true;
}

bool File::scalar_f64(int32_t type, uint64_t pos, double* out) const {
  const uint8_t* p = region_->data + pos;
  if (type == kF32) {
    float v;
    std::memcpy(&v, p, 4);
    *out = v;
    return true;
  }
  if (type == kF64) {
    std::memcpy(out, p, 8);
    return true;
  }
  if (type == kU64) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    *out = double(v);
    return true;
  }
  int64_t v;
  if (!scalar_i64(type, pos, &v)) return false;
  *out = double(v);
  return true;
}

std::shared_ptr<Region> File::map_private(uint64_t offset, uint64_t size, uint8_t** data) const {
  if (fd_ < 0) {
    fail(TC_ERR_IO, "gguf: opened from memory, cannot map the file again");
    return nullptr;
  }
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const uint64_t length = offset - start + size;
  void* base = mmap(nullptr, size_t(length), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, off_t(start));
  if (base == MAP_FAILED) {
    fail(TC_ERR_IO, "gguf: cannot map %llu bytes of the file: %s", (unsigned long long)length, std::strerror(errno));
    return nullptr;
  }
  auto r = std::make_shared<MappedRegion>();
  r->base = base;
  r->length = size_t(length);
  r->data = static_cast<const uint8_t*>(base) + (offset - start);
  r->size = size;
  *data = static_cast<uint8_t*>(base) + (offset - start);
  return r;
}

}  // namespace gguf
}  // namespace tc
