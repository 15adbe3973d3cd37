#include "dist/group.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include "core/config.h"
#include "core/error.h"
#include "core/objects.h"

namespace tc {
namespace dist {

const HandleKind& dist_kind() {
  static const HandleKind& k = handle_kind("dist group");
  return k;
}
const HandleKind& diloco_kind() {
  static const HandleKind& k = handle_kind("DiLoCo context");
  return k;
}
const HandleKind& remote_kind() {
  static const HandleKind& k = handle_kind("remote endpoint");
  return k;
}

int64_t default_timeout_ms() {
  return config::number(config::Key::kDistTimeoutMs);
}

tc_status create_group(const char* fn, const GroupRequest& req, tc_dist* out) {
  auto d = std::make_unique<tc_dist_s>();
  d->ctx = req.ctx;
  d->backend = req.backend;
  d->world = req.world;
  d->rank = req.rank;
  d->device_memory = req.backend == TC_DIST_NCCL;
  d->timeout_ms = req.timeout_ms;
  std::string why;
  Deadline deadline = deadline_after_ms(req.timeout_ms);

  if (req.backend == TC_DIST_SINGLE) {
    d->comm = make_single_comm(req.ctx->backend->host_accessible() ? nullptr : req.ctx->backend.get());
  } else {
    // The rendezvous store (tcp: rank 0 hosts it, everyone else joins it
    // through the handshake before reading anything).
    if (req.rendezvous == GroupRequest::Rendezvous::Tcp) {
      if (req.rank == 0) {
        // A connection has its own short deadline for the handshake (and for
        // each frame once a request has started), not the collective
        // timeout: a silent peer frees its slot in seconds.
        if (tc_status st = StoreServer::start(req.host, req.port, req.ring, req.world, req.rank_identities,
                                              std::min<int64_t>(req.timeout_ms, kStoreHandshakeMs), &d->server, &why,
                                              d->refusals))
          return fail(st, "%s: rank 0 cannot host the rendezvous: %s", fn, why.c_str());
        d->store = std::make_unique<LocalStore>(d->server.get());
      } else {
        std::unique_ptr<TcpStoreClient> client;
        if (tc_status st = TcpStoreClient::connect(req.host, req.port, req.ring, req.rank, deadline, &client, &why,
                                                   d->refusals))
          return fail(st, "%s: rank %d of %d: %s", fn, req.rank, req.world, why.c_str());
        d->store = std::move(client);
      }
    } else if (req.backend == TC_DIST_NCCL) {
      d->store = std::make_unique<FileStore>(req.dir);
    }
    GroupSpec spec;
    spec.rank = req.rank;
    spec.size = req.world;
    spec.timeout_ms = req.timeout_ms;
    spec.iface_host = req.iface_host;
    spec.store = d->store.get();
    spec.file_dir = req.dir;
    spec.cuda_device = req.cuda_device;
    StoreServer* server = d->server.get();
    spec.note = [server]() -> std::string {
      if (!server || server->auth_failures() == 0) return std::string();
      return " (the rendezvous refused " + std::to_string(server->auth_failures()) +
             " connection(s) by authentication; last: " + server->last_refusal() + ")";
    };
    tc_status st = req.backend == TC_DIST_GLOO ? make_gloo_comm(spec, &d->comm) : make_nccl_comm(spec, &d->comm);
    if (st) return fail_with(st, std::string(fn) + ": " + last_detail());
    // Every rank has joined and read what it needed (rank 0 has read every
    // rank's address, NCCL's initialisation has seen every rank), so no one
    // needs a new connection: later connects are refused by the system
    // instead of reaching the handshake.
    if (d->server) d->server->close_listener();
  }
  *out = register_handle(d.release(), dist_kind());
  return TC_OK;
}

void destroy_group(tc_dist d) {
  unregister_handle(d);
  d->comm.reset();
  d->store.reset();
  d->server.reset();
  delete d;
}

}  // namespace dist
}  // namespace tc
