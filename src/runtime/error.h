// Errors of the runtime: a status plus a message. The C ABI keeps the calling
// thread's last one (simpler_last_error_detail); a run keeps its first one.
#pragma once

#include <string>

#include "tensorcore/types.h"

namespace simpler {

struct Error {
  tc_status status = TC_OK;
  std::string message;
  bool ok() const { return status == TC_OK; }
};

Error make_error(tc_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Records a failure on the calling thread and returns its status.
tc_status fail(tc_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
tc_status fail_with(const Error& e);
tc_status ok();
tc_status last_status();
const std::string& last_detail();

// printf into a std::string.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace simpler
