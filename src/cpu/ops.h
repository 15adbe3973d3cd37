// The CPU kernels, one entry per op, each defined in the op family's file
// (gemm.cpp, ...). Arguments are already validated and normalised by capi.
#pragma once

#include "core/backend.h"

namespace tc {
namespace cpu {

// One kernel per op of core/ops.def, defined in its family's file.
#define TC_OP(name, Args, caps) tc_status name(const Args& args);
#include "core/ops.def"
#undef TC_OP

// out = act(g) u over n f32 elements on this thread, with the kernels of
// swiglu_forward / geglu_forward (activations.cpp): the same bits.
void glu_row(bool gelu, const float* g, const float* u, float* out, int64_t n);

}  // namespace cpu
}  // namespace tc
