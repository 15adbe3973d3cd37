#include "core/error.h"

#include <cstdarg>
#include <cstdio>

namespace tc {
namespace {
thread_local tc_status t_status = TC_OK;
thread_local std::string t_detail;
}  // namespace

tc_status fail(tc_status status, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return fail_with(status, buf);
}

tc_status fail_with(tc_status status, std::string detail) {
  t_status = status;
  t_detail = std::move(detail);
  return status;
}

tc_status ok() {
  t_status = TC_OK;
  t_detail.clear();
  return TC_OK;
}

tc_status last_status() { return t_status; }
const std::string& last_detail() { return t_detail; }

}  // namespace tc
