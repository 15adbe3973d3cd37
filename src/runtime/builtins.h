// Built-in kernels: tensorcore ops as CoreCallables, so a graph of tensorcore
// kernels runs with no compiler. A built-in is named by its op and static
// parameters ("gemm", "transpose_b=1;beta=1"); its tensor arguments are
// ChipTensor views whose shapes give the sizes. It runs through tensorcore's
// C ABI on the worker's device (on the calling core thread).
//
// Adding an op: write prepare (parse the parameters, give the signature)
// and run (check the views, call tc_<op>), and list it in builtins.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace simpler {

class Device;
struct KernelRef;
struct TaskSlot;

struct Builtin {
  const char* name;
  const char* help;  // parameters, for messages and docs
  // Parses `params` into an opaque state and gives the signature.
  Error (*prepare)(const std::string& params, std::vector<int32_t>* signature, std::shared_ptr<const void>* state);
  Error (*run)(const void* state, const TaskSlot& t, Device* dev);
};

const Builtin* find_builtin(const std::string& name);
std::string builtin_names();  // "gemm, gemm_batched"

// Runs a built-in task (k.builtin set).
Error run_builtin(const KernelRef& k, const TaskSlot& t, Device* dev);

}  // namespace simpler
