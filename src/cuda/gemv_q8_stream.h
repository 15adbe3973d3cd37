// gemv_q8 of one row of X on W in the split layout, W streamed into shared
// memory by bulk copies, X quantised inside the product when the call
// brings it in f32 (gemv_q8_stream.cu); taken by gemv_q8.cu's launches when
// the call fits.
#pragma once

#include <cuda_runtime.h>

#include "core/backend.h"

namespace tc {
namespace cuda {

// Whether the streaming kernel takes this call (TC_CUDA_Q8_STREAM on): M = 1,
// Q4_0 or Q8_0 in the split layout with qs and wd 16-byte aligned, K a
// multiple of 256; 8-bit X 16-byte aligned, or f32 X (a.x) 16-byte aligned
// with K <= 4096 (Y apart from it: check_gemv_q8).
bool gemv_q8_stream_fits(const GemvQ8Args& a);
cudaError_t launch_gemv_q8_stream(const GemvQ8Args& a, cudaStream_t st);

}  // namespace cuda
}  // namespace tc
