#include "tensorcore/config.h"

#include <string>

#include "capi/api.h"
#include "core/config.h"

using namespace tc;
using namespace tc::capi;

extern "C" {

int32_t tc_config_count(void) { return config::kCount; }

tc_status tc_config_at(int32_t index, struct tc_config_switch* out) {
  return guarded("tc_config_at", [&] {
    if (tc_status st = check_out_ptr("tc_config_at", "out", out)) return st;
    if (index < 0 || index >= config::kCount)
      return fail(TC_ERR_INVALID_ARG, "tc_config_at: index %d outside [0, %d)", index, config::kCount);
    const config::Switch& s = config::at(index);
    *out = {s.name, config::type_name(s.type), s.def, s.allowed, s.read == config::Read::PerCall, s.description};
    return TC_OK;
  });
}

tc_status tc_config_get(const char* name, int64_t* number, const char** text, int32_t* from_env) {
  return guarded("tc_config_get", [&] {
    if (tc_status st = check_out_ptr("tc_config_get", "name", name)) return st;
    const config::Switch* s = config::find(name);
    if (!s) return fail(TC_ERR_INVALID_ARG, "tc_config_get: '%s' is not a switch (docs/configuration.md)", name);
    const config::Value& v = config::get(config::Key(s - &config::at(0)));
    thread_local std::string held;
    held = v.text;
    if (number) *number = v.number;
    if (text) *text = held.c_str();
    if (from_env) *from_env = v.from_env;
    return TC_OK;
  });
}

}  // extern "C"
