// The dist area's capability bits for a context: gloo when gloo is built
// (a device context's buffers are staged through the host), NCCL on CUDA
// contexts when NCCL is built, DiLoCo on every context (parameters in device
// memory are staged through the host; an NCCL group exchanges through device
// scratch).
#pragma once

#include <cstdint>

#include "tensorcore/types.h"

namespace tc {
namespace dist {

uint64_t available_capabilities(tc_context ctx);

}  // namespace dist
}  // namespace tc
