#include "runtime/platform.h"

#include <cstdlib>
#include <cstring>

#include "runtime/cpu_executor.h"
#include "runtime/loader.h"

namespace simpler {

// The cuda executor has not yet passed its GPU test suite (it failed and hung
// there), so it runs only when asked for explicitly.
bool cuda_executor_enabled() {
  const char* v = std::getenv("SIMPLER_CUDA_EXPERIMENTAL");
  return v && std::strcmp(v, "1") == 0;
}

std::unique_ptr<Executor> make_executor(Platform p, Device* dev, int cpu_cores, Error* err) {
  if (p == Platform::Cuda) {
    if (!cuda_executor_enabled()) {
      *err = make_error(TC_ERR_UNSUPPORTED,
                        "platform 'cuda': the CUDA executor has not passed its GPU tests yet; set "
                        "SIMPLER_CUDA_EXPERIMENTAL=1 to use it anyway (platform 'cpu' is supported)");
      return nullptr;
    }
    return make_cuda_executor(dev, err);
  }
  return std::make_unique<CpuExecutor>(cpu_cores > 0 ? cpu_cores : default_cpu_cores());
}

Error load_kernel(Platform p, Device* dev, const std::string& binary, const std::string& what, KernelRef* k,
                  std::shared_ptr<void>* keep) {
  if (p == Platform::Cuda) return load_cuda_kernel(dev, binary, what, k, keep);
  Error err;
  std::shared_ptr<SharedObject> so = SharedObject::load(binary, what, &err);
  if (!so) return err;
  void* sym = so->symbol("kernel_entry");
  if (!sym)
    return make_error(TC_ERR_KERNEL_NOT_FOUND,
                      "%s does not export kernel_entry (declare it extern \"C\" void kernel_entry(int64_t* args), "
                      "or use SIMPLER_KERNEL_ENTRY from kernel.h)",
                      what.c_str());
  k->entry = reinterpret_cast<KernelEntry>(sym);
  *keep = so;
  return {};
}

bool is_foreign_device_pointer(Platform p, uint64_t addr) {
  return p == Platform::Cuda && cuda_pointer_is_device(addr);
}

}  // namespace simpler
