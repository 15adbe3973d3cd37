#include "runtime/device.h"

#include <cstdio>
#include <mutex>

namespace simpler {

const char* platform_name(Platform p) { return p == Platform::Cpu ? "cpu" : "cuda"; }

namespace {
Error tc_error(const char* what, tc_status st) {
  return make_error(st, "%s: %s (%s)", what, tc_status_string(st), tc_last_error_detail());
}
}  // namespace

std::unique_ptr<Device> Device::open(Platform p, int device_id, Error* err) {
  std::unique_ptr<Device> d(new Device());
  d->platform_ = p;
  d->device_id_ = device_id;
  char spec[32];
  if (p == Platform::Cpu)
    std::snprintf(spec, sizeof spec, "cpu");
  else
    std::snprintf(spec, sizeof spec, "cuda:%d", device_id);
  tc_status st = tc_init_device(spec, &d->ctx_);
  if (st != TC_OK) {
    *err = make_error(st, "cannot open device '%s': %s", spec, tc_last_error_detail());
    return nullptr;
  }
  tc_device_info(d->ctx_, &d->info_);
  return d;
}

Device::~Device() {
  for (auto& kv : allocs_) tc_buffer_free(kv.second.buf);
  allocs_.clear();
  if (ctx_) tc_shutdown(ctx_);
}

Error Device::alloc(uint64_t nbytes, bool internal, uint64_t* addr) {
  if (nbytes == 0) return make_error(TC_ERR_INVALID_ARG, "malloc: size must be > 0");
  tc_buffer buf = nullptr;
  tc_status st = tc_buffer_alloc(ctx_, nbytes, &buf);
  if (st != TC_OK) return tc_error("malloc", st);
  void* p = nullptr;
  tc_buffer_device_ptr(buf, &p);
  std::unique_lock<std::shared_mutex> lk(mu_);
  allocs_[reinterpret_cast<uint64_t>(p)] = Alloc{buf, nbytes, internal};
  *addr = reinterpret_cast<uint64_t>(p);
  return {};
}

Error Device::release(uint64_t addr, bool internal) {
  tc_buffer buf = nullptr;
  {
    std::unique_lock<std::shared_mutex> lk(mu_);
    auto it = allocs_.find(addr);
    if (it == allocs_.end()) {
      uint64_t base, size;
      lk.unlock();
      if (find_start(addr, &base, &size))
        return make_error(TC_ERR_INVALID_ARG, "free: 0x%llx is inside the allocation at 0x%llx, not its start",
                          (unsigned long long)addr, (unsigned long long)base);
      return make_error(TC_ERR_INVALID_ARG, "free: 0x%llx is not a live allocation of this worker",
                        (unsigned long long)addr);
    }
    if (it->second.internal && !internal)
      return make_error(TC_ERR_INVALID_ARG, "free: 0x%llx belongs to the runtime", (unsigned long long)addr);
    buf = it->second.buf;
    allocs_.erase(it);
  }
  tc_buffer_free(buf);
  return {};
}

bool Device::find_start(uint64_t addr, uint64_t* base, uint64_t* size) const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  auto it = allocs_.upper_bound(addr);
  if (it == allocs_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.size) return false;
  *base = it->first;
  *size = it->second.size;
  return true;
}

bool Device::find(uint64_t addr, uint64_t n, uint64_t* base, uint64_t* size) const {
  uint64_t b, s;
  if (!find_start(addr, &b, &s)) return false;
  if (n > s - (addr - b)) return false;
  *base = b;
  *size = s;
  return true;
}

Error Device::locate(const char* what, uint64_t addr, uint64_t n, tc_buffer* buf, uint64_t* offset) const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  auto it = allocs_.upper_bound(addr);
  if (it != allocs_.begin()) {
    --it;
    if (addr < it->first + it->second.size) {
      uint64_t off = addr - it->first;
      if (n > it->second.size - off)
        return make_error(TC_ERR_INVALID_ARG,
                          "%s: [0x%llx, 0x%llx + %llu) runs past the end of its allocation (0x%llx, %llu bytes)",
                          what, (unsigned long long)addr, (unsigned long long)addr, (unsigned long long)n,
                          (unsigned long long)it->first, (unsigned long long)it->second.size);
      *buf = it->second.buf;
      *offset = off;
      return {};
    }
  }
  return make_error(TC_ERR_INVALID_ARG, "%s: 0x%llx is not inside a live allocation of this worker", what,
                    (unsigned long long)addr);
}

Error Device::copy_in(uint64_t dst, const void* src, uint64_t n) {
  tc_buffer buf;
  uint64_t off;
  if (Error e = locate("copy_to", dst, n, &buf, &off); !e.ok()) return e;
  if (n == 0) return {};
  tc_status st = tc_buffer_write(buf, off, src, n);
  return st == TC_OK ? Error{} : tc_error("copy_to", st);
}

Error Device::copy_out(void* dst, uint64_t src, uint64_t n) {
  tc_buffer buf;
  uint64_t off;
  if (Error e = locate("copy_from", src, n, &buf, &off); !e.ok()) return e;
  if (n == 0) return {};
  tc_status st = tc_buffer_read(buf, off, dst, n);
  return st == TC_OK ? Error{} : tc_error("copy_from", st);
}

size_t Device::live_allocations() const {
  std::shared_lock<std::shared_mutex> lk(mu_);
  return allocs_.size();
}

}  // namespace simpler
