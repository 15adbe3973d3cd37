// Built when CUDA or NCCL is not available: the NCCL backend reports itself
// unsupported.
#include "core/error.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

bool nccl_built() { return false; }

tc_status make_nccl_comm(const GroupSpec&, std::unique_ptr<Comm>*) {
  return fail(TC_ERR_UNSUPPORTED,
              "the NCCL backend is not built into this library (needs TC_ENABLE_CUDA=ON and NCCL at configure time)");
}

}  // namespace dist
}  // namespace tc
