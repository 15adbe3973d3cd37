// What the processor offers, probed once at run time. Kernels compiled for
// AVX-512 or AVX2 are chosen from these flags, never assumed at build time.
//
// TC_CPU_ISA caps what every CPU kernel may use (it never enables what the
// processor lacks), so that every vector path can be run and tested on one
// machine. One ordered list of levels, each allowing what the ones before it
// allow:
//   portable     plain C++ (baseline x86-64)
//   avx2         AVX2, FMA, F16C
//   avx_vnni     AVX-VNNI (256-bit vpdpbusd)
//   avx512       AVX-512 F/BW/VL
//   avx512_vnni  AVX512-VNNI
//   avx512_bf16  AVX512-BF16 and AVX512-FP16
//   amx          AMX-INT8 and AMX-BF16 (the default: everything)
// It is read at every call of features(), so a test can change it between
// ops. The device info's feature string shows the result. A linked BLAS
// picks its own kernels and cannot be capped: under a cap that removes
// anything this processor has, the f32 GEMM runs tensorcore's kernels
// (gemm_f32.cpp).
#pragma once

#include <string>

namespace tc {
namespace cpu {

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_vnni = false, avx_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;  // the OS must still grant AMX: see amx_ready()
};

enum class IsaLevel { Portable, Avx2, AvxVnni, Avx512, Avx512Vnni, Avx512Bf16, Amx };

// What the processor has, capped by TC_CPU_ISA.
const Features& features();
// True when TC_CPU_ISA removes something the processor has.
bool isa_capped();
std::string features_string();  // "avx2,fma,avx512f,..." of the flags set
std::string processor_name();   // model name from the OS, "unknown cpu" if none

// Notes the kernel family an op dispatched to, as "<op>/<level>" (a string
// literal), for tc_cpu_last_kernel_name(): so tests can see which path ran.
void note_kernel(const char* family);
const char* last_kernel();

// True when the processor has AMX (and TC_CPU_ISA allows it) and Linux
// granted this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
// Asked once, on first use: the permission enlarges every signal frame of
// the process, so it is requested only by a kernel that is about to use AMX.
bool amx_ready();

}  // namespace cpu
}  // namespace tc
