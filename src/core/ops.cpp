// What core/ops.def gives every backend: op names, the capability bits the
// supported ops add up to, and the registry of backends.
#include "core/backend.h"

namespace tc {

const char* op_name(OpId op) {
  static const char* const names[] = {
#define TC_OP(name, Args, caps) #name,
#include "core/ops.def"
#undef TC_OP
  };
  const int i = int(op);
  return i >= 0 && i < kOpCount ? names[i] : "?";
}

uint64_t op_capabilities(const Backend& backend) {
  static const uint64_t caps[] = {
#define TC_OP(name, Args, c) uint64_t(c),
#include "core/ops.def"
#undef TC_OP
  };
  uint64_t any = 0, missing = 0;
  for (int i = 0; i < kOpCount; ++i) {
    if (backend.supports_op(OpId(i))) any |= caps[i];
    else missing |= caps[i];
  }
  return any & ~missing;
}

const std::vector<BackendKind>& backend_kinds() {
  static const std::vector<BackendKind> kinds = {
      {"cuda", cuda_device_count, make_cuda_backend},
      {"cpu", [] { return 1; }, [](int) { return make_cpu_backend(); }},
  };
  return kinds;
}

}  // namespace tc
