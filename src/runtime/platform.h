// What differs between the cpu and cuda platforms, behind one interface:
// the executor, how a kernel binary becomes something to launch, and how a
// pointer the worker did not allocate is treated.
#pragma once

#include <memory>
#include <string>

#include "runtime/device.h"
#include "runtime/engine.h"
#include "runtime/error.h"
#include "runtime/kernel_ref.h"

namespace simpler {

// True when this library was built with the CUDA executor.
bool cuda_built();

std::unique_ptr<Executor> make_executor(Platform p, Device* dev, int cpu_cores, Error* err);

// Loads a CoreCallable's binary for the platform into k (k.entry on cpu,
// k.cuda_function on cuda). `keep` holds what must outlive the kernel.
Error load_kernel(Platform p, Device* dev, const std::string& binary, const std::string& what, KernelRef* k,
                  std::shared_ptr<void>* keep);

// cuda: true when addr is device memory (of any owner); cpu: false.
bool is_foreign_device_pointer(Platform p, uint64_t addr);

// cuda executor and kernel loading (src/runtime/cuda/).
std::unique_ptr<Executor> make_cuda_executor(Device* dev, Error* err);
Error load_cuda_kernel(Device* dev, const std::string& binary, const std::string& what, KernelRef* k,
                       std::shared_ptr<void>* keep);
bool cuda_pointer_is_device(uint64_t addr);

}  // namespace simpler
