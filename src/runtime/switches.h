// simpler's environment switches come from tensorcore's registry
// (src/core/config_table.h) through its C ABI: libsimpler links
// libtensorcore, whose C++ internals are hidden, and one registry means one
// spelling rule, one set of warnings and one TC_TRACE listing for both.
#pragma once

#include <cstdint>
#include <string>

#include "tensorcore/config.h"

namespace simpler {

struct Switch {
  int64_t number = 0;  // bool 0/1, int value, enum index
  std::string text;
  bool from_env = false;
};

inline Switch read_switch(const char* name) {
  Switch s;
  const char* text = nullptr;
  int32_t from_env = 0;
  if (tc_config_get(name, &s.number, &text, &from_env) == TC_OK) {
    s.text = text ? text : "";
    s.from_env = from_env != 0;
  }
  return s;
}

}  // namespace simpler
