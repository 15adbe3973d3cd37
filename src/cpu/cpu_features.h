// What the processor offers, probed once at run time. Kernels compiled for
// AVX-512 or AVX2 are chosen from these flags, never assumed at build time.
#pragma once

#include <string>

namespace tc {
namespace cpu {

struct Features {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_vnni = false, avx_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
};

const Features& features();
std::string features_string();  // "avx2,fma,avx512f,..." of the flags set
std::string processor_name();   // model name from the OS, "unknown cpu" if none

}  // namespace cpu
}  // namespace tc
