// A kernel as the executors see it: one CoreCallable loaded on one Worker,
// bound to the func_id an orchestration submits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "simpler/kernel.h"

namespace simpler {

struct Builtin;

using KernelEntry = void (*)(int64_t* args);

struct KernelRef {
  int32_t func_id = 0;
  std::vector<int32_t> signature;  // SIMPLER_ARG_* per argument
  uint32_t tensor_args = 0;        // non-scalar entries
  uint32_t scalar_args = 0;
  std::string digest;
  std::string name;                // for messages: "func_id 2 (kernel 1a2b3c4d5e6f)"

  KernelEntry entry = nullptr;         // cpu shared object, or a native function (tests)
  const Builtin* builtin = nullptr;    // a built-in tensorcore op
  std::string builtin_params;
  std::shared_ptr<const void> builtin_state;
  void* cuda_function = nullptr;       // CUfunction on cuda
};

// func_id -> kernel, for one registered ChipCallable.
class KernelTable {
 public:
  void add(KernelRef* k) {
    if (k->func_id >= 0 && k->func_id < kDense) {
      if (dense_.size() <= size_t(k->func_id)) dense_.resize(size_t(k->func_id) + 1, nullptr);
      dense_[size_t(k->func_id)] = k;
    } else {
      sparse_[k->func_id] = k;
    }
    ids_.push_back(k->func_id);
  }
  const KernelRef* find(int32_t func_id) const {
    if (func_id >= 0 && size_t(func_id) < dense_.size()) return dense_[size_t(func_id)];
    auto it = sparse_.find(func_id);
    return it == sparse_.end() ? nullptr : it->second;
  }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  static constexpr int32_t kDense = 4096;
  std::vector<KernelRef*> dense_;
  std::unordered_map<int32_t, KernelRef*> sparse_;
  std::vector<int32_t> ids_;
};

// The launch a cpu kernel asks about through kernel.h (thread-local).
const SimplerLaunch* current_launch();
void set_current_launch(const SimplerLaunch* l);

}  // namespace simpler
