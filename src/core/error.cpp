#include "core/error.h"

#include <cstdio>

namespace tc {
namespace {
thread_local tc_status t_status = TC_OK;
thread_local std::string t_detail;
}  // namespace

std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  va_list again;
  va_copy(again, ap);
  int n = std::vsnprintf(buf, sizeof buf, fmt, ap);
  std::string out;
  if (n < 0) {
    out = fmt;  // a format the C library refuses: the text is still worth keeping
  } else if (size_t(n) < sizeof buf) {
    out.assign(buf, size_t(n));
  } else {
    out.resize(size_t(n) + 1);
    std::vsnprintf(&out[0], out.size(), fmt, again);
    out.resize(size_t(n));
  }
  va_end(again);
  return out;
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

tc_status fail(tc_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string detail = vformat(fmt, ap);
  va_end(ap);
  return fail_with(status, std::move(detail));
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
