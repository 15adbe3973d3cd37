#include "runtime/error.h"

#include <cstdarg>

namespace simpler {

Error make_error(tc_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Error e{status, tc::vformat(fmt, ap)};
  va_end(ap);
  return e;
}

}  // namespace simpler
