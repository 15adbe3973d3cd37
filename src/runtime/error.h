// Errors of the runtime: a status plus a message. The C ABI keeps the calling
// thread's last one (simpler_last_error_detail) in core's error record
// (core/error.h, compiled into libsimpler); a run keeps its first one.
#pragma once

#include <exception>
#include <new>
#include <string>

#include "core/error.h"
#include "tensorcore/types.h"

namespace simpler {

struct Error {
  tc_status status = TC_OK;
  std::string message;
  bool ok() const { return status == TC_OK; }
};

Error make_error(tc_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The calling thread's record.
using tc::fail;
using tc::format;
using tc::last_detail;
using tc::last_status;
using tc::ok;
inline tc_status fail_with(const Error& e) { return tc::fail_with(e.status, e.message); }

// The body of a C ABI entry point: its Error (or an exception, which never
// crosses the ABI) becomes the status and the thread's detail message.
template <class F>
tc_status guarded(const char* fn, F&& body) noexcept {
  try {
    Error e = body();
    return e.ok() ? ok() : fail_with(e);
  } catch (const std::bad_alloc&) {
    return fail(TC_ERR_ALLOC, "%s: out of host memory", fn);
  } catch (const std::exception& ex) {
    return fail(TC_ERR_INTERNAL, "%s: %s", fn, ex.what());
  } catch (...) {
    return fail(TC_ERR_INTERNAL, "%s: unknown exception", fn);
  }
}

}  // namespace simpler
