#include "runtime/error.h"

#include <cstdarg>
#include <cstdio>

namespace simpler {
namespace {
thread_local tc_status t_status = TC_OK;
thread_local std::string t_detail;

std::string vformat(const char* fmt, va_list ap) {
  char buf[2048];
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  return buf;
}
}  // namespace

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

Error make_error(tc_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Error e{status, vformat(fmt, ap)};
  va_end(ap);
  return e;
}

tc_status fail(tc_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  t_detail = vformat(fmt, ap);
  va_end(ap);
  t_status = status;
  return status;
}

tc_status fail_with(const Error& e) {
  t_status = e.status;
  t_detail = e.message;
  return e.status;
}

tc_status ok() {
  t_status = TC_OK;
  t_detail.clear();
  return TC_OK;
}

tc_status last_status() { return t_status; }
const std::string& last_detail() { return t_detail; }

}  // namespace simpler
