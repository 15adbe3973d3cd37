// The CPU kernels, one entry per op, each defined in the op family's file
// (gemm.cpp, ...). Arguments are already validated and normalised by capi.
#pragma once

#include "core/backend.h"

namespace tc {
namespace cpu {

tc_status gemm(const GemmArgs& args);

// ---- Training kernels
// norms.cpp
tc_status rmsnorm_forward(const RmsNormForwardArgs& args);
tc_status rmsnorm_backward(const RmsNormBackwardArgs& args);
tc_status layernorm_forward(const LayerNormForwardArgs& args);
tc_status layernorm_backward(const LayerNormBackwardArgs& args);
// rope.cpp
tc_status rope(const RopeArgs& args);
// activations.cpp
tc_status swiglu_forward(const SwigluForwardArgs& args);
tc_status swiglu_backward(const SwigluBackwardArgs& args);
tc_status softmax_forward(const SoftmaxForwardArgs& args);
tc_status softmax_backward(const SoftmaxBackwardArgs& args);
// adamw.cpp
tc_status adamw_step(const AdamwArgs& args);
// fused_gemv.cpp
tc_status fused_norm_gemv(const FusedNormGemvArgs& args);
// ---- end of training kernels

// conv2d.cpp
tc_status conv2d_forward(const Conv2dForwardArgs& args);
tc_status conv2d_backward_input(const Conv2dBackwardInputArgs& args);
tc_status conv2d_backward_weight(const Conv2dBackwardWeightArgs& args);
// quantize.cpp, gemv_quantized.cpp
tc_status quantize_weights(const QuantizeWeightsArgs& args);
tc_status dequantize_weights(const DequantizeWeightsArgs& args);
tc_status gemv_quantized(const GemvQuantizedArgs& args);
tc_status fused_rmsnorm_gemv_quantized(const GemvQuantizedArgs& args);

// ---- attention (attention.cpp, attention_backward.cpp) ----
tc_status attention_forward(const AttentionArgs& args);
tc_status attention_backward(const AttentionBackwardArgs& args);
// ---- end attention ----

// model_ops.cpp: the decoder's small ops
tc_status embed_rows(const EmbedRowsArgs& args);
tc_status add(const AddArgs& args);
tc_status convert(const ConvertArgs& args);
tc_status rope_kv_append(const RopeKvAppendArgs& args);
tc_status heads_to_tokens(const HeadsToTokensArgs& args);
tc_status copy_2d(const Copy2dArgs& args);
tc_status decode_attention(const DecodeAttentionArgs& args);
// gemv_q8.cpp: the decode step's products on 8-bit activations
tc_status quantize_q8(const QuantizeQ8Args& args);
tc_status gemv_q8(const GemvQ8Args& args);
tc_status repack_q8(const RepackQ8Args& args);

}  // namespace cpu
}  // namespace tc
