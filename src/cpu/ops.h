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
// quantize.cpp, gemv_quantized.cpp
tc_status quantize_weights(const QuantizeWeightsArgs& args);
tc_status dequantize_weights(const DequantizeWeightsArgs& args);
tc_status gemv_quantized(const GemvQuantizedArgs& args);
tc_status fused_rmsnorm_gemv_quantized(const GemvQuantizedArgs& args);

}  // namespace cpu
}  // namespace tc
