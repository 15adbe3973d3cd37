// Small helpers around the CUDA driver API for the cuda executor: error text,
// the device's primary context (shared with tensorcore's runtime-API calls),
// and a pool of reusable events.
#pragma once

#include <cuda.h>

#include "runtime/cuda/cuda_driver.h"

#include <mutex>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace simpler {
namespace cuda {

inline std::string cu_error_text(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (cu().cuGetErrorName) cu().cuGetErrorName(r, &name);
  if (cu().cuGetErrorString) cu().cuGetErrorString(r, &text);
  if (!name) return "CUDA error " + std::to_string(int(r));
  return std::string(name ? name : "CUDA_ERROR_?") + " (" + (text ? text : "unknown") + ")";
}

inline Error cu_error(CUresult r, const char* what) {
  tc_status st = r == CUDA_ERROR_OUT_OF_MEMORY ? TC_ERR_ALLOC : TC_ERR_DISPATCH;
  return make_error(st, "%s: %s", what, cu_error_text(r).c_str());
}

// Errors after which the context cannot run anything more.
inline bool sticky(CUresult r) {
  return r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED || r == CUDA_ERROR_ILLEGAL_INSTRUCTION ||
         r == CUDA_ERROR_MISALIGNED_ADDRESS || r == CUDA_ERROR_INVALID_ADDRESS_SPACE || r == CUDA_ERROR_INVALID_PC ||
         r == CUDA_ERROR_HARDWARE_STACK_ERROR || r == CUDA_ERROR_ASSERT || r == CUDA_ERROR_ECC_UNCORRECTABLE ||
         r == CUDA_ERROR_CONTEXT_IS_DESTROYED || r == CUDA_ERROR_LAUNCH_TIMEOUT;
}

// The primary context of a device, retained for the object's lifetime.
class PrimaryContext {
 public:
  Error open(int device_id) {
    Error err;
    if (!load_driver(&err)) return err;
    CUresult r = cu().cuInit(0);
    if (r != CUDA_SUCCESS) return cu_error(r, "cuInit");
    if ((r = cu().cuDeviceGet(&dev_, device_id)) != CUDA_SUCCESS) return cu_error(r, "cuDeviceGet");
    if ((r = cu().cuDevicePrimaryCtxRetain(&ctx_, dev_)) != CUDA_SUCCESS) return cu_error(r, "cuDevicePrimaryCtxRetain");
    return {};
  }
  ~PrimaryContext() {
    if (ctx_) cu().cuDevicePrimaryCtxRelease(dev_);
  }
  // Makes the context current on the calling thread.
  void bind() const {
    CUcontext cur = nullptr;
    cu().cuCtxGetCurrent(&cur);
    if (cur != ctx_) cu().cuCtxSetCurrent(ctx_);
  }
  CUcontext get() const { return ctx_; }
  CUdevice device() const { return dev_; }

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

class EventPool {
 public:
  // destroy_all() runs while the context is alive; nothing is left here.
  ~EventPool() = default;
  CUevent get(bool timing) {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<CUevent>& pool = timing ? timed_ : free_;
    if (!pool.empty()) {
      CUevent e = pool.back();
      pool.pop_back();
      return e;
    }
    CUevent e = nullptr;
    cu().cuEventCreate(&e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
    return e;
  }
  void put(CUevent e, bool timing) {
    if (!e) return;
    std::lock_guard<std::mutex> lk(mu_);
    (timing ? timed_ : free_).push_back(e);
  }
  void destroy_all() {
    std::lock_guard<std::mutex> lk(mu_);
    for (CUevent e : free_) cu().cuEventDestroy(e);
    for (CUevent e : timed_) cu().cuEventDestroy(e);
    free_.clear();
    timed_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<CUevent> free_, timed_;
};

}  // namespace cuda
}  // namespace simpler
