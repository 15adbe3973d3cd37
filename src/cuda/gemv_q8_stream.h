// gemv_q8 of one row of X on W in the split layout or in K-quant
// superblocks, W streamed into shared
// memory by bulk copies, X quantised inside the product when the call
// brings it in f32 (gemv_q8_stream.cu); taken by gemv_q8.cu's launches when
// the call fits.
#pragma once

#include <cuda_runtime.h>

#include "core/backend.h"

namespace tc {
namespace cuda {

// Whether the streaming kernel takes this call (TC_CUDA_Q8_STREAM on): M = 1,
// K a multiple of 256, W 16-byte aligned: Q4_0, Q8_0 or Q6_K in the split
// layout with wd 16-byte aligned and N x (bytes of a row's scales) a
// multiple of 16, or Q4_K / Q5_K in GGUF's layout; 8-bit X 16-byte aligned,
// or f32 X (a.x) 16-byte aligned with K <= 4096 (Y apart from it:
// check_gemv_q8); with a.rope, one token's [q | k | v] row into an f16 or
// f32 cache of one sequence, interleaved pairs.
bool gemv_q8_stream_fits(const GemvQ8Args& a);
cudaError_t launch_gemv_q8_stream(const GemvQ8Args& a, cudaStream_t st);

}  // namespace cuda
}  // namespace tc
