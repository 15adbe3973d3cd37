#include "runtime/callable.h"

#include <cstring>

#include "runtime/builtins.h"
#include "core/crypto.h"
#include "runtime/task_list.h"
#include "simpler/simpler.h"

namespace simpler {

using tc::Sha256;
using tc::sha256_hex;

namespace {

Error check_signature(const int32_t* sig, uint32_t n, uint32_t max_tensors, uint32_t max_scalars, const char* what) {
  if (n && !sig) return make_error(TC_ERR_INVALID_ARG, "%s: signature is null", what);
  uint32_t t = 0, s = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (sig[i] < SIMPLER_ARG_SCALAR || sig[i] > SIMPLER_ARG_INOUT)
      return make_error(TC_ERR_INVALID_ARG, "%s: signature entry %u is %d (SCALAR=0, IN=1, OUT=2, INOUT=3)", what, i,
                        sig[i]);
    (sig[i] == SIMPLER_ARG_SCALAR ? s : t)++;
  }
  if (t > max_tensors || s > max_scalars)
    return make_error(TC_ERR_INVALID_ARG, "%s: %u tensors and %u scalars exceed the limit of %u and %u", what, t, s,
                      max_tensors, max_scalars);
  return {};
}

void hash_sig(Sha256& h, const std::vector<int32_t>& sig) {
  uint32_t n = uint32_t(sig.size());
  h.update(&n, sizeof n);
  if (n) h.update(sig.data(), n * sizeof(int32_t));
}

void hash_str(Sha256& h, const std::string& s) {
  uint64_t n = s.size();
  h.update(&n, sizeof n);
  h.update(s.data(), s.size());
}

}  // namespace

uint32_t Callable::tensor_args() const {
  uint32_t n = 0;
  for (int32_t d : signature) n += d != SIMPLER_ARG_SCALAR;
  return n;
}

uint32_t Callable::scalar_args() const {
  uint32_t n = 0;
  for (int32_t d : signature) n += d == SIMPLER_ARG_SCALAR;
  return n;
}

Error make_core_callable(const int32_t* sig, uint32_t n, const void* binary, uint64_t size, CallablePtr* out) {
  if (Error e = check_signature(sig, n, SIMPLER_MAX_CORE_TENSORS, SIMPLER_MAX_CORE_SCALARS, "CoreCallable.build");
      !e.ok())
    return e;
  if (!binary || size == 0) return make_error(TC_ERR_INVALID_ARG, "CoreCallable.build: the binary is empty");
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Core;
  c->signature.assign(sig, sig + n);
  c->binary.assign(static_cast<const char*>(binary), size);
  Sha256 h;
  hash_str(h, "core");
  hash_sig(h, c->signature);
  hash_str(h, c->binary);
  c->digest = h.hex();
  *out = c;
  return {};
}

Error make_builtin_callable(const std::string& op, const std::string& params, CallablePtr* out) {
  const Builtin* b = find_builtin(op);
  if (!b)
    return make_error(TC_ERR_KERNEL_NOT_FOUND, "CoreCallable.builtin: no built-in op '%s' (built-ins: %s)", op.c_str(),
                      builtin_names().c_str());
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Core;
  c->builtin = b;
  c->builtin_op = op;
  c->builtin_params = params;
  if (Error e = b->prepare(*b, params, &c->signature, &c->builtin_state); !e.ok()) return e;
  c->binary = "tensorcore-builtin:" + op + "?" + params;
  Sha256 h;
  hash_str(h, "builtin");
  hash_sig(h, c->signature);
  hash_str(h, c->binary);
  c->digest = h.hex();
  *out = c;
  return {};
}

Error make_chip_callable(const int32_t* sig, uint32_t n, const std::string& func_name, const std::string& config_name,
                         const void* binary, uint64_t size, const std::vector<std::pair<int32_t, CallablePtr>>& children,
                         CallablePtr* out) {
  if (Error e = check_signature(sig, n, SIMPLER_MAX_CHIP_TENSORS, SIMPLER_MAX_CHIP_SCALARS, "ChipCallable.build");
      !e.ok())
    return e;
  if (func_name.empty()) return make_error(TC_ERR_INVALID_ARG, "ChipCallable.build: func_name is empty");
  if (!binary || size == 0) return make_error(TC_ERR_INVALID_ARG, "ChipCallable.build: the binary is empty");
  for (size_t i = 0; i < children.size(); i++) {
    if (!children[i].second || children[i].second->kind != Callable::Core)
      return make_error(TC_ERR_INVALID_ARG, "ChipCallable.build: child %zu is not a CoreCallable", i);
    if (children[i].first < 0)
      return make_error(TC_ERR_INVALID_ARG, "ChipCallable.build: func_id %d is negative", children[i].first);
    for (size_t j = 0; j < i; j++)
      if (children[j].first == children[i].first)
        return make_error(TC_ERR_INVALID_ARG, "ChipCallable.build: func_id %d appears twice", children[i].first);
  }
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Chip;
  c->signature.assign(sig, sig + n);
  c->func_name = func_name;
  c->config_name = config_name;
  c->binary.assign(static_cast<const char*>(binary), size);
  c->children.assign(children.begin(), children.end());
  Sha256 h;
  hash_str(h, "chip");
  hash_sig(h, c->signature);
  hash_str(h, func_name);
  hash_str(h, config_name);
  hash_str(h, c->binary);
  for (auto& ch : children) {
    h.update(&ch.first, sizeof ch.first);
    hash_str(h, ch.second->digest);
  }
  c->digest = h.hex();
  *out = c;
  return {};
}

Error make_task_list_callable(const int32_t* sig, uint32_t n, const std::string& description,
                              const std::vector<std::pair<int32_t, CallablePtr>>& children, CallablePtr* out) {
  CallablePtr base;
  if (Error e = make_chip_callable(sig, n, "simpler_task_list", "", description.data(), description.size(), children,
                                   &base);
      !e.ok())
    return e;
  auto c = std::make_shared<Callable>(*base);
  if (Error e = parse_task_list(description, c->tensor_args(), &c->task_list); !e.ok()) return e;
  for (const auto& item : c->task_list->items) {
    if (item.kind != TaskList::Item::Task) continue;
    bool found = false;
    for (auto& ch : children) found |= ch.first == item.func_id;
    if (!found)
      return make_error(TC_ERR_KERNEL_NOT_FOUND, "ChipCallable.from_tasks: a task uses func_id %d, which no child has",
                        item.func_id);
  }
  *out = c;
  return {};
}

CallablePtr make_native_core_callable(const std::vector<int32_t>& sig, KernelEntry fn) {
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Core;
  c->signature = sig;
  c->native_kernel = fn;
  char buf[64];
  std::snprintf(buf, sizeof buf, "native-kernel:%p", reinterpret_cast<void*>(fn));
  c->binary = buf;
  c->digest = sha256_hex(c->binary.data(), c->binary.size());
  return c;
}

CallablePtr make_native_chip_callable(const std::vector<int32_t>& sig, OrchEntry fn,
                                      const std::vector<std::pair<int32_t, CallablePtr>>& children,
                                      OrchConfigEntry config) {
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Chip;
  c->signature = sig;
  c->native_orch = fn;
  c->native_config = config;
  c->func_name = "native_orchestration";
  char buf[64];
  std::snprintf(buf, sizeof buf, "native-orch:%p", reinterpret_cast<void*>(fn));
  c->binary = buf;
  c->children.assign(children.begin(), children.end());
  Sha256 h;
  hash_str(h, c->binary);
  for (auto& ch : children) {
    h.update(&ch.first, sizeof ch.first);
    hash_str(h, ch.second->digest);
  }
  c->digest = h.hex();
  return c;
}

}  // namespace simpler
