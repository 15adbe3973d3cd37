// The CPU kernels, one entry per op, each defined in the op family's file
// (gemm.cpp, ...). Arguments are already validated and normalised by capi.
#pragma once

#include "core/backend.h"

namespace tc {
namespace cpu {

tc_status gemm(const GemmArgs& args);

}  // namespace cpu
}  // namespace tc
