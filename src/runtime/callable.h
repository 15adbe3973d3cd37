// Callables as the C ABI creates them: immutable, shared between the Python
// objects and every Worker they are registered with, identified by a SHA-256
// of their content (kind, signature, binary, names, children).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/kernel_ref.h"
#include "simpler/orchestration.h"

namespace simpler {

struct Builtin;
struct TaskList;

// An orchestration entry point and its optional config function, as exported
// by an orchestration shared object (or given natively by C++ tests).
using OrchEntry = void (*)(const ::ChipTaskArgs& args);
using OrchConfigEntry = ::PTO2OrchestrationConfig (*)(const ::ChipTaskArgs& args);

struct Callable {
  enum Kind { Core = 1, Chip = 2 };
  Kind kind = Core;
  std::vector<int32_t> signature;
  std::string binary;
  std::string digest;

  // Core: a built-in op, or a native function (C++ tests), else `binary`.
  const Builtin* builtin = nullptr;
  std::string builtin_op, builtin_params;
  std::vector<int32_t> builtin_signature;
  std::shared_ptr<const void> builtin_state;
  KernelEntry native_kernel = nullptr;

  // Chip.
  std::string func_name, config_name;
  std::vector<std::pair<int32_t, std::shared_ptr<const Callable>>> children;
  OrchEntry native_orch = nullptr;
  OrchConfigEntry native_config = nullptr;
  std::shared_ptr<const TaskList> task_list;  // a built-in orchestration (ChipCallable.from_tasks)

  uint32_t tensor_args() const;
  uint32_t scalar_args() const;
};

using CallablePtr = std::shared_ptr<const Callable>;

Error make_core_callable(const int32_t* sig, uint32_t n, const void* binary, uint64_t size, CallablePtr* out);
Error make_builtin_callable(const std::string& op, const std::string& params, CallablePtr* out);
Error make_chip_callable(const int32_t* sig, uint32_t n, const std::string& func_name, const std::string& config_name,
                         const void* binary, uint64_t size, const std::vector<std::pair<int32_t, CallablePtr>>& children,
                         CallablePtr* out);
// A chip callable whose orchestration is a task list (task_list.h).
Error make_task_list_callable(const int32_t* sig, uint32_t n, const std::string& description,
                              const std::vector<std::pair<int32_t, CallablePtr>>& children, CallablePtr* out);
// For C++ tests: kernels and orchestrations that are functions of the caller.
CallablePtr make_native_core_callable(const std::vector<int32_t>& sig, KernelEntry fn);
CallablePtr make_native_chip_callable(const std::vector<int32_t>& sig, OrchEntry fn,
                                      const std::vector<std::pair<int32_t, CallablePtr>>& children,
                                      OrchConfigEntry config = nullptr);

}  // namespace simpler
