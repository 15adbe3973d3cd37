#include "cpu/cpu_features.h"

#include <fstream>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tc {
namespace cpu {

const Features& features() {
  static const Features f = [] {
    Features r;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    r.avx2 = __builtin_cpu_supports("avx2");
    r.fma = __builtin_cpu_supports("fma");
    r.f16c = r.avx2;  // every AVX2 processor has F16C; gcc 12 cannot query it
    r.avx512f = __builtin_cpu_supports("avx512f");
    r.avx512bw = __builtin_cpu_supports("avx512bw");
    r.avx512vl = __builtin_cpu_supports("avx512vl");
    r.avx512_vnni = __builtin_cpu_supports("avx512vnni");
    r.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
    // From CPUID directly: clang 14's __builtin_cpu_supports does not know these.
    unsigned a, b, c, d;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) r.avx512_fp16 = (d >> 23) & 1;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) r.avx_vnni = (a >> 4) & 1;
#endif
    return r;
  }();
  return f;
}

std::string features_string() {
  const Features& f = features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ',';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx_vnni, "avx_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  return s;
}

std::string processor_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(line.find_first_not_of(' ', pos + 1));
    }
  }
  return "unknown cpu";
}

}  // namespace cpu
}  // namespace tc
