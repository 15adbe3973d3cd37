// Thread-local record of the last call's status and its human-readable detail.
//
// The one implementation of it: libtensorcore and libsimpler each compile
// this file, so each library keeps its own record per thread (what
// tc_last_error_detail and simpler_last_error_detail report) through the
// same code.
#pragma once

#include <cstdarg>
#include <string>

#include "tensorcore/types.h"

namespace tc {

// Records a failure and returns `status`, so validation reads
// `return fail(TC_ERR_INVALID_SHAPE, "M must be > 0 (got %lld)", M);`.
tc_status fail(tc_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Records `status` with an already formatted detail (used to carry a worker
// thread's failure over to the thread that syncs).
tc_status fail_with(tc_status status, std::string detail);

// Marks the calling thread's last call as successful.
tc_status ok();

tc_status last_status();
const std::string& last_detail();

// printf into a std::string, whatever its length.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vformat(const char* fmt, va_list ap);

}  // namespace tc
