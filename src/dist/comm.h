// A communicator: one member of a group running collectives on an engine
// (gloo for host memory, NCCL for CUDA memory, or nothing at world size 1).
// Pointers are host pointers for gloo and device pointers for NCCL; src/capi
// has validated everything. Every call honours the timeout: a dead or silent
// peer fails it with TC_ERR_TIMEOUT (the detail says which), never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/auth.h"
#include "dist/store.h"
#include "tensorcore/dist.h"

namespace tc {
class Backend;
}  // namespace tc

namespace tc {
namespace dist {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void set_timeout_ms(int64_t ms) = 0;

  virtual tc_status allreduce(void* buf, size_t n, tc_dtype dtype, int32_t op) = 0;
  virtual tc_status broadcast(void* buf, size_t n, tc_dtype dtype, int root) = 0;
  virtual tc_status allgather(const void* src, void* dst, size_t n, tc_dtype dtype) = 0;
  virtual tc_status reduce_scatter(const void* src, void* dst, size_t n, tc_dtype dtype, int32_t op) = 0;
  virtual tc_status barrier() = 0;
  // A second communicator over the same group with its own connections, so
  // collectives on the two never interleave (DiLoCo's worker thread).
  // Collective: every rank calls it.
  virtual tc_status fork(std::unique_ptr<Comm>* out) = 0;
};

// Everything a backend needs to form its group.
struct GroupSpec {
  int rank = 0, size = 1;
  int64_t timeout_ms = 120000;
  std::string iface_host;     // address the data connections bind to
  Store* store = nullptr;     // our store (tcp rendezvous, or FileStore)
  std::string file_dir;       // file:// rendezvous directory (gloo uses its own FileStore)
  int cuda_device = -1;       // NCCL: the context's device
  std::function<std::string()> note;  // appended to a rendezvous timeout's detail
};

// The world of one. `device`: the backend of a context whose buffers the host
// cannot touch (a CUDA context), which then makes allgather's and
// reduce_scatter's copies; null for host memory.
std::unique_ptr<Comm> make_single_comm(Backend* device);
// Each returns TC_ERR_UNSUPPORTED (detail recorded) when not built.
tc_status make_gloo_comm(const GroupSpec& spec, std::unique_ptr<Comm>* out);
tc_status make_nccl_comm(const GroupSpec& spec, std::unique_ptr<Comm>* out);
bool gloo_built();
bool nccl_built();

// Bytes one rank sends for each collective (ring algorithms), for counters.
uint64_t wire_bytes_allreduce(uint64_t bytes, int n);
uint64_t wire_bytes_allgather(uint64_t bytes_per_rank, int n);
uint64_t wire_bytes_reduce_scatter(uint64_t bytes_per_rank, int n);
uint64_t wire_bytes_broadcast(uint64_t bytes, int n, bool root);

}  // namespace dist
}  // namespace tc
