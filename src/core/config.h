// The environment switches of tensorcore and simpler, read through one
// registry (the table is config_table.h). Nothing else calls getenv, so every
// switch has one spelling rule, one default, one warning for a value it does
// not know, and one place where TC_TRACE can list what was resolved.
//
// A value the switch does not accept (TC_CPU_ISA=avx9, TC_CUDA_PDL=maybe, an
// Int out of range) prints one warning naming the variable, the value and
// what is allowed, and the default applies. The first read of any switch
// also warns once about TC_* variables in the environment that are not
// switches (likely typos), naming the closest switch.
//
// simpler reads the same registry through the C ABI (tensorcore/config.h):
// libsimpler links libtensorcore, whose internal symbols are hidden.
#pragma once

#include <cstdint>
#include <string>

namespace tc {
namespace config {

enum class Type { Bool, Int, Enum, String, Path };
enum class Read { Once, PerCall };

enum class Key : int {
#define TC_CONFIG(key, ...) key,
#include "core/config_table.h"
#undef TC_CONFIG
  kCount
};

struct Switch {
  const char* name;
  Type type;
  const char* def;      // "auto": the code decides when unset
  const char* allowed;  // Enum: "a|b|c"; Int: "lo..hi"; else free text for the docs
  Read read;
  const char* description;
};

constexpr int kCount = int(Key::kCount);
const Switch& at(int index);
const Switch& info(Key key);
const Switch* find(const char* name);  // null for an undeclared name
const char* type_name(Type t);         // "bool", "int", "enum", "string", "path"

// A switch's value, resolved from the environment or its default.
struct Value {
  int64_t number = 0;  // Bool: 0/1; Int: the value (0 for an "auto" default); Enum: index into allowed
  std::string text;    // as set, or the default's text
  bool from_env = false;
};
// The value of a switch: valid until this thread's next read of the same switch.
const Value& get(Key key);

bool on(Key key);           // Bool
int64_t number(Key key);    // Int; Enum: the index of the value in `allowed`
std::string text(Key key);  // String, Path
bool from_env(Key key);     // set (to an accepted value) in the environment

// "NAME=value (environment|default)", one line per switch, for TC_TRACE.
std::string describe();

}  // namespace config
}  // namespace tc
