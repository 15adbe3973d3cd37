// C++ through the installed simpler headers and library: the version string
// and a worker configuration checked by the library.
#include <cstdio>
#include <cstring>

#include <simpler/simpler.h>

int main() {
  const char* v = simpler_version();
  if (!v || !*v) return 1;
  simpler_call_config cfg;
  std::memset(&cfg, 0, sizeof cfg);
  tc_status s = simpler_call_config_validate(&cfg);
  std::printf("%s; a zeroed call config validates to %d (%s)\n", v, int(s), simpler_last_error_detail());
  return 0;
}
