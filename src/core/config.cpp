#include "core/config.h"

#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

extern char** environ;

namespace tc {
namespace config {
namespace {

constexpr Switch kTable[] = {
#define TC_CONFIG(key, name, type, def, allowed, read, description) \
  {name, Type::type, def, allowed, Read::read, description},
#include "core/config_table.h"
#undef TC_CONFIG
};
static_assert(sizeof kTable / sizeof kTable[0] == size_t(kCount), "one Switch per Key");

// TC_* names that the build, test and benchmark scripts set for themselves:
// the library never reads them, and they are not typos of a switch.
constexpr const char* kScriptNames[] = {"TC_ROOT",        "TC_BUILD",    "TC_PY",          "TC_ENABLE_CUDA",
                                        "TC_OPTIONAL_PY", "TC_BLAS",     "TC_APT_UPDATED", "TC_BUILD_TESTS",
                                        "TC_CPP_TESTS",   "TC_BENCH_DIR", "TC_INSTALL_PREFIX"};
constexpr const char* kScriptPrefixes[] = {"TC_TEST_", "TC_FRESH_", "TC_TIERS_CHILD_"};

// Switches that were removed, and what replaces them ("" when nothing does:
// the choice they made is gone).
struct Retired {
  const char* name;
  const char* instead;
};
constexpr Retired kRetired[] = {
    {"TC_ATTENTION_ISA", "TC_CPU_ISA"}, {"TC_QUANT_ISA", "TC_CPU_ISA"}, {"TC_CUDA_GEMV_LEGACY", ""},
    {"TC_CUDA_GEMV_INT8", ""},          {"TC_CUDA_GEMV_STREAM", ""},
};

bool bool_word(const char* v, int64_t* out) {
  for (const char* w : {"1", "true", "on", "yes"})
    if (!strcasecmp(v, w)) return *out = 1, true;
  for (const char* w : {"0", "false", "off", "no"})
    if (!strcasecmp(v, w)) return *out = 0, true;
  return false;
}

// Index of `v` in "a|b|c", -1 when absent.
int enum_index(const char* allowed, const char* v) {
  const size_t n = std::strlen(v);
  int i = 0;
  for (const char* p = allowed;; ++i) {
    const char* end = std::strchr(p, '|');
    const size_t len = end ? size_t(end - p) : std::strlen(p);
    if (len == n && !std::strncmp(p, v, n)) return i;
    if (!end) return -1;
    p = end + 1;
  }
}

bool whole_int(const char* v, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end || errno == ERANGE) return false;
  *out = x;
  return true;
}

bool int_range(const char* allowed, int64_t* lo, int64_t* hi) {
  long long a, b;
  if (std::sscanf(allowed, "%lld..%lld", &a, &b) != 2) return false;
  *lo = a, *hi = b;
  return true;
}

// `raw` (set, non-empty) as the switch's value; false when not accepted.
bool parse(const Switch& s, const char* raw, Value* out) {
  int64_t lo, hi;
  switch (s.type) {
    case Type::Bool: return bool_word(raw, &out->number);
    case Type::Enum: out->number = enum_index(s.allowed, raw); return out->number >= 0;
    case Type::Int:
      return whole_int(raw, &out->number) && int_range(s.allowed, &lo, &hi) && out->number >= lo && out->number <= hi;
    default: return true;
  }
}

Value default_value(const Switch& s) {
  Value v;
  v.text = s.def;
  if (!std::strcmp(s.def, "auto")) return v;
  if (s.type == Type::Bool || s.type == Type::Enum || s.type == Type::Int) parse(s, s.def, &v);
  return v;
}

const char* allowed_text(const Switch& s) {
  switch (s.type) {
    case Type::Bool: return "1/true/on/yes or 0/false/off/no";
    default: return s.allowed;
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

bool script_name(const std::string& name) {
  for (const char* n : kScriptNames)
    if (name == n) return true;
  for (const char* p : kScriptPrefixes)
    if (name.compare(0, std::strlen(p), p) == 0) return true;
  return false;
}

void warn_unknown(const std::string& name) {
  for (const Retired& r : kRetired) {
    if (name != r.name) continue;
    if (*r.instead) std::fprintf(stderr, "[tensorcore] %s is no longer read: use %s\n", r.name, r.instead);
    else std::fprintf(stderr, "[tensorcore] %s is no longer read: the path it chose was removed\n", r.name);
    return;
  }
  const Switch* best = nullptr;
  size_t best_d = 0;
  for (const Switch& s : kTable) {
    const size_t d = edit_distance(name, s.name);
    if (!best || d < best_d) best = &s, best_d = d;
  }
  if (best && best_d <= 3)
    std::fprintf(stderr, "[tensorcore] %s is not a tensorcore switch (did you mean %s?)\n", name.c_str(), best->name);
  else
    std::fprintf(stderr, "[tensorcore] %s is not a tensorcore switch (docs/configuration.md lists them)\n",
                 name.c_str());
}

// Once per process, at the first read of any switch.
void scan_environment() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (char** e = environ; e && *e; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (!eq || std::strncmp(*e, "TC_", 3) != 0) continue;
      const std::string name(*e, size_t(eq - *e));
      if (!find(name.c_str()) && !script_name(name)) warn_unknown(name);
    }
  });
}

// A per-call switch is read often: its warning is printed once per value.
std::mutex g_warn_mu;
std::string g_warned[kCount];

void warn_value(int i, const char* raw) {
  const Switch& s = kTable[i];
  std::lock_guard<std::mutex> lock(g_warn_mu);
  if (g_warned[i] == raw) return;
  g_warned[i] = raw;
  std::fprintf(stderr, "[tensorcore] %s=%s is not accepted (allowed: %s); using the default (%s)\n", s.name, raw,
               allowed_text(s), *s.def ? s.def : "unset");
}

Value resolve(int i, const char* raw) {
  const Switch& s = kTable[i];
  if (!raw || !*raw) return default_value(s);
  Value v;
  if (!parse(s, raw, &v)) {
    warn_value(i, raw);
    return default_value(s);
  }
  v.text = raw;
  v.from_env = true;
  return v;
}

struct Cached {
  std::once_flag once;
  Value value;
};
Cached g_cached[kCount];

}  // namespace

const Switch& at(int index) { return kTable[index]; }
const Switch& info(Key key) { return kTable[int(key)]; }

const Switch* find(const char* name) {
  // Per-call switches are looked up by name on hot paths (simpler reads
  // three for every run): one hash lookup instead of a scan of the table.
  static const std::unordered_map<std::string_view, const Switch*> by_name = [] {
    std::unordered_map<std::string_view, const Switch*> m;
    for (const Switch& s : kTable) m.emplace(s.name, &s);
    return m;
  }();
  const auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Enum: return "enum";
    case Type::String: return "string";
    default: return "path";
  }
}

// A per-call switch sits on hot paths (TC_CPU_ISA is read by every CPU
// kernel dispatch): the text is read each time, but parsed only when it
// differs from what this thread parsed last.
const Value& resolve_per_call(int i) {
  struct Last {
    bool valid = false;
    std::string raw;
    Value value;
  };
  thread_local Last last[kCount];
  const char* raw = std::getenv(kTable[i].name);
  Last& l = last[i];
  if (l.valid && l.raw == (raw ? raw : "")) return l.value;
  l.value = resolve(i, raw);
  l.raw = raw ? raw : "";
  l.valid = true;
  return l.value;
}

const Value& get(Key key) {
  const int i = int(key);
  scan_environment();
  if (kTable[i].read == Read::PerCall) return resolve_per_call(i);
  Cached& c = g_cached[i];
  std::call_once(c.once, [&] { c.value = resolve(i, std::getenv(kTable[i].name)); });
  return c.value;
}

bool on(Key key) { return get(key).number != 0; }
int64_t number(Key key) { return get(key).number; }
std::string text(Key key) { return get(key).text; }
bool from_env(Key key) { return get(key).from_env; }

std::string describe() {
  std::string out;
  for (int i = 0; i < kCount; ++i) {
    const Value v = get(Key(i));
    out += kTable[i].name;
    out += '=';
    out += v.text.empty() ? "(unset)" : v.text;
    out += v.from_env ? " (environment)\n" : " (default)\n";
  }
  return out;
}

}  // namespace config
}  // namespace tc
