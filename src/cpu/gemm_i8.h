// i8 x i8 -> i32 GEMM on the CPU (one matrix of a batch). d is normalised.
#pragma once

#include <cstdint>

#include "tensorcore/gemm.h"

namespace tc {
namespace cpu {

void gemm_i8(const tc_gemm_desc& d, const int8_t* a, const int8_t* b, int32_t* c);

}  // namespace cpu
}  // namespace tc
