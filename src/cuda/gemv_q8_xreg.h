// gemv_q8 of one row of 8-bit X on W in the split layout, each lane holding
// its blocks of X in registers for every row it takes (gemv_q8_xreg.cu);
// taken by gemv_q8.cu's launches when the call fits.
#pragma once

#include <cuda_runtime.h>

#include "core/backend.h"

namespace tc {
namespace cuda {

// Whether this kernel takes the call (TC_CUDA_Q8_STREAM and TC_CUDA_Q8_XREG on): M = 1, Q4_0 or Q8_0 in the split
// layout (qs 16-byte, wd 2-byte aligned) with a row over 2 to 16 warps, X
// given in 8 bits (xq 16-byte, xd 8-byte aligned), K > 4096.
bool gemv_q8_xreg_fits(const GemvQ8Args& a);
cudaError_t launch_gemv_q8_xreg(const GemvQ8Args& a, cudaStream_t st);

}  // namespace cuda
}  // namespace tc
