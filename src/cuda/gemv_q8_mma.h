// gemv_q8 of several rows of X on the int8 tensor cores (gemv_q8_mma.cu),
// taken by gemv_q8.cu's launches when the call fits.
#pragma once

#include <cuda_runtime.h>

#include "core/backend.h"

namespace tc {
namespace cuda {

// Whether the tensor-core kernels take this call: at least
// TC_CUDA_Q8_MMA_ROWS rows of X, K a multiple of 256, W in the layout they
// read (Q4_0 / Q8_0 in GGUF's or the split layout, its scales
// 16-byte aligned, Q4_K / Q5_K in GGUF's, Q6_K split) and X 16-byte aligned.
// any_rows: whatever M (f16 X, which only these kernels take).
bool gemv_q8_mma_fits(const GemvQ8Args& a, bool any_rows);
// Y (ytype f32, f16 or bf16; kAdd only with f32) for a call that fits.
cudaError_t launch_gemv_q8_mma(const GemvQ8Args& a, void* y, tc_dtype ytype, cudaStream_t st);

}  // namespace cuda
}  // namespace tc
