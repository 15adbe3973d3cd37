// i8 x i8 -> i32 GEMM on the CPU (one matrix of a batch). d is normalised.
#pragma once

#include <cstdint>

#include "tensorcore/gemm.h"

namespace tc {
namespace cpu {

void gemm_i8(const tc_gemm_desc& d, const int8_t* a, const int8_t* b, int32_t* c);

// Name of the kernel gemm_i8 uses on this processor under TC_CPU_ISA:
// "amx_int8", "avx512_vnni", "avx_vnni", "avx2" or "scalar".
const char* gemm_i8_path();

}  // namespace cpu
}  // namespace tc
