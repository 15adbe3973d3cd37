// Built when gloo is not found: the gloo backend reports itself unsupported.
#include "core/error.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

bool gloo_built() { return false; }

tc_status make_gloo_comm(const GroupSpec&, std::unique_ptr<Comm>*) {
  return fail(TC_ERR_UNSUPPORTED,
              "the gloo backend is not built into this library (gloo was not found at configure time; "
              "install libgloo-dev and rebuild)");
}

}  // namespace dist
}  // namespace tc
