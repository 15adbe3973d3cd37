#include "cpu/cpu_features.h"

#include <atomic>
#include <cstring>
#include <fstream>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "core/config.h"

namespace tc {
namespace cpu {
namespace {

// The levels' order is TC_CPU_ISA's allowed list (core/config_table.h).
Features capped(Features r, IsaLevel level) {
  if (level < IsaLevel::Amx) r.amx_tile = r.amx_int8 = r.amx_bf16 = false;
  if (level < IsaLevel::Avx512Bf16) r.avx512_bf16 = r.avx512_fp16 = false;
  if (level < IsaLevel::Avx512Vnni) r.avx512_vnni = false;
  if (level < IsaLevel::Avx512) r.avx512f = r.avx512bw = r.avx512vl = r.avx512_vnni = r.avx512_bf16 = false;
  if (level < IsaLevel::AvxVnni) r.avx_vnni = false;
  if (level < IsaLevel::Avx2) r.avx2 = r.fma = r.f16c = false;
  return r;
}

Features detect() {
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
  return r;
}

constexpr int kLevels = int(IsaLevel::Amx) + 1;

// The detected flags under every cap, computed once; the cap is read per
// call, so a test can switch it between ops without a stale copy.
struct Capped {
  Features at[kLevels];
  bool lowers[kLevels];
  Capped() {
    const Features all = detect();
    for (int l = 0; l < kLevels; ++l) {
      at[l] = capped(all, IsaLevel(l));
      lowers[l] = std::memcmp(&at[l], &all, sizeof all) != 0;
    }
  }
};

const Capped& capped_sets() {
  static const Capped c;
  return c;
}

int cap_level() { return int(config::number(config::Key::kCpuIsa)); }

std::atomic<const char*> g_last_kernel{""};

}  // namespace

const Features& features() { return capped_sets().at[cap_level()]; }

bool isa_capped() { return capped_sets().lowers[cap_level()]; }

void note_kernel(const char* family) { g_last_kernel.store(family, std::memory_order_relaxed); }
const char* last_kernel() { return g_last_kernel.load(std::memory_order_relaxed); }

bool amx_ready() {
  if (!features().amx_tile) return false;
  static const bool granted = [] {
#if defined(__linux__) && defined(__x86_64__)
    constexpr long kArchReqXcompPerm = 0x1023;  // asm/prctl.h
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false;
#endif
  }();
  return granted;
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
