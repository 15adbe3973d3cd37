#include "cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tc {
namespace cpu {
namespace {

// Applies TC_CPU_ISA (see the header) to the detected flags.
void apply_isa_cap(Features& r) {
  const char* v = std::getenv("TC_CPU_ISA");
  if (!v || !*v) return;
  int level;  // 0 scalar, 1 avx2, 2 avx_vnni, 3 avx512, 4 amx
  if (!std::strcmp(v, "scalar")) level = 0;
  else if (!std::strcmp(v, "avx2")) level = 1;
  else if (!std::strcmp(v, "avx_vnni")) level = 2;
  else if (!std::strcmp(v, "avx512")) level = 3;
  else return;  // "amx", "native" and unknown values leave everything on
  if (level < 4) r.amx_tile = r.amx_int8 = r.amx_bf16 = false;
  if (level < 3) r.avx512f = r.avx512bw = r.avx512vl = r.avx512_vnni = r.avx512_bf16 = r.avx512_fp16 = false;
  if (level < 2) r.avx_vnni = false;
  if (level < 1) r.avx2 = r.fma = r.f16c = false;
}

}  // namespace

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
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      r.avx512_fp16 = (d >> 23) & 1;
      r.amx_bf16 = (d >> 22) & 1;
      r.amx_tile = (d >> 24) & 1;
      r.amx_int8 = (d >> 25) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) r.avx_vnni = (a >> 4) & 1;
    r.amx_int8 = r.amx_tile && r.amx_int8;
    r.amx_bf16 = r.amx_tile && r.amx_bf16;
    // The AMX kernels pack and finish their tiles with AVX-512.
    if (!(r.avx512f && r.avx512bw && r.avx512vl && r.avx512_bf16)) r.amx_tile = r.amx_int8 = r.amx_bf16 = false;
#endif
    apply_isa_cap(r);
    return r;
  }();
  return f;
}

bool amx_ready() {
  static const bool ready = [] {
    if (!features().amx_tile) return false;
#if defined(__linux__) && defined(__x86_64__)
    constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return ready;
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
  add(f.amx_int8, "amx_int8");
  add(f.amx_bf16, "amx_bf16");
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
