// The dist area's capability bits for a context: gloo on host-memory
// contexts when gloo is built, NCCL on CUDA contexts when NCCL is built,
// DiLoCo on every context (its groups are single or gloo; parameters in
// device memory are staged through the host).
#pragma once

#include <cstdint>

#include "tensorcore/types.h"

namespace tc {
namespace dist {

uint64_t available_capabilities(tc_context ctx);

}  // namespace dist
}  // namespace tc
