// Loading user shared objects (cpu kernels, orchestrations) from the bytes a
// callable carries: written to an anonymous memory file and dlopen'ed from
// there, RTLD_LOCAL, so two callables never see each other's symbols.
#pragma once

#include <memory>
#include <string>

#include "runtime/error.h"

namespace simpler {

class SharedObject {
 public:
  // `what` names the object in messages ("the kernel of func_id 3").
  static std::shared_ptr<SharedObject> load(const std::string& bytes, const std::string& what, Error* err);
  ~SharedObject();
  void* symbol(const char* name) const;

 private:
  SharedObject() = default;
  void* handle_ = nullptr;
  int fd_ = -1;  // the memory file it was loaded from
};

}  // namespace simpler
