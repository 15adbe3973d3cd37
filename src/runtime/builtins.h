// Built-in kernels: tensorcore ops as CoreCallables, so a graph of tensorcore
// kernels runs with no compiler. A built-in is named by its op and static
// parameters ("gemm", "transpose_b=1;beta=1"); its tensor arguments are
// ChipTensor views whose shapes give the sizes. It runs through tensorcore's
// C ABI on the worker's device (on the calling core thread).
//
// Every op of tensorcore's table (tc_op_entry) whose operands its signature
// shapes is a built-in by itself, named after the entry ("rmsnorm_forward",
// "geglu_forward"): its tensors are the signature's buffers in order,
// dimensions and element types come from their views, the other scalars
// ("eps=1e-5") are parameters. Ops with descriptors (gemm) are written by
// hand: prepare (parse the parameters, give the signature) and run (check
// the views, call tc_<op>), listed in builtins.cpp.
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
  Error (*prepare)(const Builtin& self, const std::string& params, std::vector<int32_t>* signature,
                   std::shared_ptr<const void>* state);
  Error (*run)(const void* state, const TaskSlot& t, Device* dev);
  const void* op = nullptr;  // the op-table entry of a table built-in
};

const Builtin* find_builtin(const std::string& name);
std::string builtin_names();  // "gemm, gemm_batched"

// Runs a built-in task (k.builtin set).
Error run_builtin(const KernelRef& k, const TaskSlot& t, Device* dev);

}  // namespace simpler
