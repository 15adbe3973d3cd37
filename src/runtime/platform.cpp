#include "runtime/platform.h"


#include "runtime/cpu_executor.h"
#include "runtime/loader.h"

namespace simpler {

std::unique_ptr<Executor> make_executor(Platform p, Device* dev, int cpu_cores, Error* err) {
  if (p == Platform::Cuda) return make_cuda_executor(dev, err);
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
