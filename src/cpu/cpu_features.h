// What the processor offers, probed once at run time. Kernels compiled for
// AVX-512 or AVX2 are chosen from these flags, never assumed at build time.
//
// TC_CPU_ISA caps what the kernels may use, so that every vector path can be
// run and tested on one machine (it never enables what the processor lacks):
//   scalar    plain x86-64 code only
//   avx2      AVX2, FMA, F16C
//   avx_vnni  the above and AVX-VNNI (256-bit vpdpbusd)
//   avx512    the above and AVX-512 (F/BW/VL, VNNI, BF16, FP16), no AMX
//   amx       everything (the default; also "native" or unset)
// Any other value is ignored. The device info's feature string shows the
// result. A linked BLAS (f32 GEMM, src/cpu/blas.h) makes its own choice and
// is not affected; tensorcore's own f32 kernels (gemm_f32.cpp) are.
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

const Features& features();
std::string features_string();  // "avx2,fma,avx512f,..." of the flags set
std::string processor_name();   // model name from the OS, "unknown cpu" if none

// True when the processor has AMX (and TC_CPU_ISA allows it) and Linux
// granted this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM).
// Asked once, on first use: the permission enlarges every signal frame of
// the process, so it is requested only by a kernel that is about to use AMX.
bool amx_ready();

}  // namespace cpu
}  // namespace tc
