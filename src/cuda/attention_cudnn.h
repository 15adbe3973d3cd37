// Attention through cuDNN's fused flash-attention engines (attention_cudnn.cu),
// tried first by attention_forward / attention_backward for the cases cuDNN
// expresses exactly; everything else stays on our kernels.
#pragma once

#include "core/backend.h"

namespace tc {
namespace cuda {

struct StreamState;

// True when cuDNN took the call: *st is then its status (a failure to
// execute is a real error, with cuDNN's message) and s->last_kernel is
// "cudnn_sdpa_fprop" / "cudnn_sdpa_bprop". False means "run our kernels":
// cuDNN is not in the build, TC_CUDA_ATTENTION_CUDNN=0, or cuDNN has no
// engine for this case (that verdict is cached per shape).
bool try_cudnn_forward(StreamState* s, const AttentionArgs& a, tc_status* st);
bool try_cudnn_backward(StreamState* s, const AttentionBackwardArgs& a, tc_status* st);

// Drops the plan builds queued for `device` and waits for the one in flight
// there, if any. A device's destruction (a context's) calls it, so that no
// build runs on past the contexts that asked for it: a process exiting in
// the middle of one would tear cuDNN down under it.
void drain_cudnn_builds(int device);

// Whether the library was built with cuDNN (TC_HAVE_CUDNN).
constexpr bool cudnn_in_build() {
#ifdef TC_HAVE_CUDNN
  return true;
#else
  return false;
#endif
}

}  // namespace cuda
}  // namespace tc
