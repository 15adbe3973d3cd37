// The object behind tc_dist: a communicator plus the rendezvous that formed
// it (rank 0 keeps its store server alive for the group's lifetime).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "core/handles.h"
#include "dist/refusals.h"
#include "dist/store.h"
#include "tensorcore/dist.h"

struct tc_dist_s {
  tc_context ctx = nullptr;
  int32_t backend = TC_DIST_SINGLE;
  int32_t world = 1;
  int32_t rank = 0;
  bool device_memory = false;  // NCCL: buffers are device memory
  std::unique_ptr<tc::dist::StoreServer> server;
  std::unique_ptr<tc::dist::Store> store;
  std::unique_ptr<tc::dist::Comm> comm;
  // Made at the first collective on device memory that `comm` cannot read in
  // place (gloo on a CUDA context, or TC_DIST_DEVICE_PATH=1): the same
  // collectives staged through the host (src/dist/staging.h).
  std::unique_ptr<tc::dist::Comm> staged;
  std::mutex mu;  // one collective at a time on `comm` and `staged`
  std::atomic<int64_t> timeout_ms{120000};
  std::atomic<uint64_t> bytes_sent{0};
  // What this rank refused or was refused, on its server and client sides.
  std::shared_ptr<tc::dist::Refusals> refusals = std::make_shared<tc::dist::Refusals>();
  std::atomic<int64_t> live_diloco{0};
};

namespace tc {
namespace dist {

// A validated request to form a group (src/capi/dist.cpp builds it).
struct GroupRequest {
  tc_context ctx = nullptr;
  int32_t backend = TC_DIST_SINGLE;
  int32_t world = 1, rank = 0;
  enum class Rendezvous { None, Tcp, File } rendezvous = Rendezvous::None;
  std::string host;       // tcp: rank 0's store address
  int port = 0;
  std::string dir;        // file
  std::string iface_host; // data connections bind here
  int64_t timeout_ms = 120000;
  int cuda_device = -1;
  KeyringRef ring;        // null: unauthenticated
  std::vector<std::string> rank_identities;
};

// Forms the group (blocking until every rank joined or the deadline).
tc_status create_group(const char* fn, const GroupRequest& req, tc_dist* out);
// Leaves it: destroys the communicator, then the store.
void destroy_group(tc_dist d);

// The handle kinds of this area (core/handles.h).
const HandleKind& dist_kind();
const HandleKind& diloco_kind();
const HandleKind& remote_kind();

// The default timeout: $TC_DIST_TIMEOUT_MS, else 120 s.
int64_t default_timeout_ms();

}  // namespace dist
}  // namespace tc
