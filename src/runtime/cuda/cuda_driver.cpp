#include "runtime/cuda/cuda_driver.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace simpler {
namespace cuda {
namespace {

#define SIMPLER_STR2(x) #x
#define SIMPLER_STR(x) SIMPLER_STR2(x)

Driver g_driver;
const Driver* g_loaded = nullptr;
Error g_error;
std::once_flag g_once;

void load() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    g_error = make_error(TC_ERR_NO_DEVICE, "platform 'cuda': the NVIDIA driver (libcuda.so.1) is not installed: %s",
                         e ? e : "not found");
    return;
  }
  std::string missing;
#define SIMPLER_CU_LOAD(f)                                                        \
  g_driver.f = reinterpret_cast<decltype(g_driver.f)>(dlsym(h, SIMPLER_STR(f))); \
  if (!g_driver.f) missing += std::string(missing.empty() ? "" : ", ") + SIMPLER_STR(f);
  SIMPLER_CU_FUNCTIONS(SIMPLER_CU_LOAD)
#undef SIMPLER_CU_LOAD
  if (!missing.empty()) {
    g_error = make_error(TC_ERR_NO_DEVICE, "platform 'cuda': the NVIDIA driver is too old (missing %s)",
                         missing.c_str());
    return;
  }
  g_loaded = &g_driver;
}

}  // namespace

const Driver* load_driver(Error* err) {
  std::call_once(g_once, load);
  if (!g_loaded && err) *err = g_error;
  return g_loaded;
}

const Driver& cu() { return g_driver; }

}  // namespace cuda
}  // namespace simpler
