// On/off switches read from the environment, with one spelling rule for all
// of them: unset or empty is "not set"; "0", "false", "off", "no" (any case)
// are off; any other value is on.
#pragma once

#include <strings.h>

#include <cstdlib>
#include <cstring>

namespace tc {

// True when `name` is set to an "on" value (TC_X=1).
inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  return std::strcmp(v, "0") && strcasecmp(v, "false") && strcasecmp(v, "off") && strcasecmp(v, "no");
}

// True when `name` is set to an "off" value (TC_X=0); unset is neither.
inline bool env_off(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && !env_on(name);
}

}  // namespace tc
