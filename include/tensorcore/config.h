/* tensorcore: the environment switches of tensorcore and simpler, declared
 * once (name, type, default, allowed values, when it is read, what it does).
 * docs/configuration.md lists them. */
#ifndef TENSORCORE_CONFIG_H
#define TENSORCORE_CONFIG_H

#include "tensorcore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One switch; every string has static storage. */
struct tc_config_switch {
  const char* name;          /* "TC_CPU_ISA" */
  const char* type;          /* "bool", "int", "enum", "string" or "path" */
  const char* default_value; /* used when unset, empty or not accepted; "auto": the library decides */
  const char* allowed;       /* enum: "a|b|c" in order; int: "lo..hi"; otherwise a description or "" */
  int32_t per_call;          /* 1: read at every use; 0: read once, at first use */
  const char* description;
};

/* Number of switches. */
TC_API int32_t tc_config_count(void);

/* Switch `index` (0 <= index < tc_config_count()). */
TC_API tc_status tc_config_at(int32_t index, struct tc_config_switch* out);

/* The value of switch `name` now, from the environment or its default (a
 * value the switch does not accept warns once on stderr and gives the
 * default). Any out pointer may be NULL. *number: 0/1 for a bool, the
 * value of an int (0 for an "auto" default), the index into `allowed` of an
 * enum, 0 otherwise; *text: the value as text (thread-local storage, valid
 * until the thread's next call of this function); *from_env: 1 when the
 * environment set it. TC_ERR_INVALID_ARG for a name that is not a switch. */
TC_API tc_status tc_config_get(const char* name, int64_t* number, const char** text, int32_t* from_env);

#ifdef __cplusplus
}
#endif

#endif /* TENSORCORE_CONFIG_H */
