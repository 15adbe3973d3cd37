// The device a Worker drives, on top of tensorcore: its context, the
// allocations made through it (so an interior pointer finds its allocation)
// and host <-> device copies.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>

#include "runtime/error.h"
#include "tensorcore/tensorcore.h"

namespace simpler {

enum class Platform { Cpu, Cuda };
const char* platform_name(Platform p);

class Device {
 public:
  // Opens a tensorcore context for the platform (cpu, or cuda:device_id).
  static std::unique_ptr<Device> open(Platform p, int device_id, Error* err);
  ~Device();  // frees every allocation left, then the context

  Platform platform() const { return platform_; }
  bool host_accessible() const { return platform_ == Platform::Cpu; }
  tc_context context() const { return ctx_; }
  const struct tc_device_info& info() const { return info_; }
  int device_id() const { return device_id_; }

  // `internal` allocations (rings, staging) cannot be freed by the user.
  Error alloc(uint64_t nbytes, bool internal, uint64_t* addr);
  Error release(uint64_t addr, bool internal);

  // The allocation holding [addr, addr + n); false when none does.
  bool find(uint64_t addr, uint64_t n, uint64_t* base, uint64_t* size) const;
  // The allocation holding addr at all (even when addr + n runs past it).
  bool find_start(uint64_t addr, uint64_t* base, uint64_t* size) const;

  // Copies to/from device memory; [addr, addr + n) must lie in one allocation.
  Error copy_in(uint64_t dst, const void* src, uint64_t n);
  Error copy_out(void* dst, uint64_t src, uint64_t n);

  size_t live_allocations() const;

 private:
  Device() = default;
  struct Alloc {
    tc_buffer buf;
    uint64_t size;
    bool internal;
  };
  Error locate(const char* what, uint64_t addr, uint64_t n, tc_buffer* buf, uint64_t* offset) const;

  Platform platform_ = Platform::Cpu;
  int device_id_ = 0;
  tc_context ctx_ = nullptr;
  struct tc_device_info info_{};
  mutable std::shared_mutex mu_;
  std::map<uint64_t, Alloc> allocs_;
};

}  // namespace simpler
