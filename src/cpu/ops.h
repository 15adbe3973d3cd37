// The CPU kernels, one entry per op, each defined in the op family's file
// (gemm.cpp, ...). Arguments are already validated and normalised by capi.
#pragma once

#include "core/backend.h"

namespace tc {
namespace cpu {

tc_status gemm(const GemmArgs& args);

// conv2d.cpp
tc_status conv2d_forward(const Conv2dForwardArgs& args);
tc_status conv2d_backward_input(const Conv2dBackwardInputArgs& args);
tc_status conv2d_backward_weight(const Conv2dBackwardWeightArgs& args);

// ---- attention (attention.cpp, attention_backward.cpp) ----
tc_status attention_forward(const AttentionArgs& args);
tc_status attention_backward(const AttentionBackwardArgs& args);
// ---- end attention ----

}  // namespace cpu
}  // namespace tc
