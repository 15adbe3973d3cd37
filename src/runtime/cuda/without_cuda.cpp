// Built when TC_ENABLE_CUDA is off: the cuda platform reports that it is not
// part of this build.
#include "runtime/platform.h"

namespace simpler {

bool cuda_built() { return false; }

std::unique_ptr<Executor> make_cuda_executor(Device*, Error* err) {
  *err = make_error(TC_ERR_NO_DEVICE,
                    "platform 'cuda': simpler was built without CUDA (configure with -DTC_ENABLE_CUDA=ON where nvcc "
                    "and a GPU are present)");
  return nullptr;
}

Error load_cuda_kernel(Device*, const std::string&, const std::string& what, KernelRef*, std::shared_ptr<void>*) {
  return make_error(TC_ERR_NO_DEVICE, "cannot load %s: simpler was built without CUDA", what.c_str());
}

bool cuda_pointer_is_device(uint64_t) { return false; }

}  // namespace simpler
