// Built when TC_ENABLE_CUDA is off: the CUDA factory reports why it has no GPU.
#include "core/backend.h"
#include "core/error.h"

namespace tc {

int cuda_device_count() { return 0; }

std::unique_ptr<Backend> make_cuda_backend(int) {
  fail(TC_ERR_NO_DEVICE, "tensorcore was built without CUDA (TC_ENABLE_CUDA=OFF)");
  return nullptr;
}

tc_status cuda_device_info(int index, struct tc_device_info*) {
  return fail(TC_ERR_NO_DEVICE, "CUDA device %d: tensorcore was built without CUDA (TC_ENABLE_CUDA=OFF)", index);
}

}  // namespace tc
