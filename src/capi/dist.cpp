// Validation and entry points of include/tensorcore/dist.h.
#include "tensorcore/dist.h"

#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "capi/api.h"
#include "core/half.h"
#include "dist/capabilities.h"
#include "dist/group.h"
#include "dist/net.h"
#include "dist/remote.h"
#include "dist/staging.h"

using namespace tc;
using namespace tc::capi;
using namespace tc::dist;

namespace {

constexpr int32_t kMaxWorld = 1 << 16;

tc_status check_dist(const char* fn, tc_dist& d) {
  if (!d) return fail(TC_ERR_INVALID_ARG, "%s: dist is null", fn);
  return check_handle(fn, "dist", d, dist_kind());
}

tc_status check_remote(const char* fn, tc_remote& r) {
  if (!r) return fail(TC_ERR_INVALID_ARG, "%s: remote is null", fn);
  return check_handle(fn, "remote", r, remote_kind());
}

bool is_loopback(const std::string& h) { return h == "localhost" || h == "::1" || h.rfind("127.", 0) == 0; }

// Host and port of "tcp://host:port" / "gloo+tcp://host:port".
tc_status parse_tcp_url(const char* fn, const char* what, const char* text, bool port_zero_ok, Url* url) {
  std::string why;
  if (!text || !*text) return fail(TC_ERR_INVALID_ARG, "%s: %s is empty", fn, what);
  if (!parse_url(text, url, &why)) return fail(TC_ERR_INVALID_ARG, "%s: %s '%s': %s", fn, what, text, why.c_str());
  if (url->scheme != "tcp" && url->scheme != "gloo+tcp")
    return fail(TC_ERR_INVALID_ARG, "%s: %s '%s' is not tcp://host:port", fn, what, text);
  if (url->host.empty() || url->port < 0 || (url->port == 0 && !port_zero_ok))
    return fail(TC_ERR_INVALID_ARG, "%s: %s '%s' needs a host and a port%s", fn, what, text,
                port_zero_ok ? "" : " (1..65535)");
  return TC_OK;
}

tc_status query_timeout(const char* fn, const Url& url, int64_t* out) {
  *out = default_timeout_ms();
  if (const std::string* t = url.param("timeout_ms")) {
    char* end = nullptr;
    long long v = std::strtoll(t->c_str(), &end, 10);
    if (t->empty() || *end || v <= 0 || v > (1ll << 40))
      return fail(TC_ERR_INVALID_ARG, "%s: timeout_ms=%s must be a positive number of milliseconds", fn, t->c_str());
    *out = v;
  }
  for (auto& kv : url.query)
    if (kv.first != "timeout_ms" && kv.first != "iface_host")
      return fail(TC_ERR_INVALID_ARG, "%s: unknown rendezvous parameter '%s' (timeout_ms, iface_host)", fn,
                  kv.first.c_str());
  return TC_OK;
}

// Everything but the keyring: backend against context, ranks, the URL.
tc_status build_request(const char* fn, tc_context ctx, int32_t backend, int32_t world, int32_t rank,
                        const char* url_text, bool authenticated, GroupRequest* req) {
  if (tc_status st = check_context(fn, ctx)) return st;
  if (world < 1 || world > kMaxWorld)
    return fail(TC_ERR_INVALID_ARG, "%s: world_size %d is out of range 1..%d", fn, world, kMaxWorld);
  if (rank < 0 || rank >= world) return fail(TC_ERR_INVALID_ARG, "%s: rank %d is not in 0..%d", fn, rank, world - 1);
  req->ctx = ctx;
  req->backend = backend;
  req->world = world;
  req->rank = rank;
  bool cuda = ctx->backend->kind() == TC_BACKEND_CUDA;
  switch (backend) {
    case TC_DIST_SINGLE:
      if (world != 1) return fail(TC_ERR_INVALID_ARG, "%s: the single backend has world_size 1 (got %d)", fn, world);
      if (url_text && *url_text && std::strncmp(url_text, "single://", 9) != 0)
        return fail(TC_ERR_INVALID_ARG, "%s: the single backend takes a single://... URL or none (got '%s')", fn,
                    url_text);
      return TC_OK;
    case TC_DIST_RING:
      return fail(TC_ERR_UNSUPPORTED, "%s: backend %d (ring) is reserved and not implemented; use gloo or nccl", fn,
                  backend);
    case TC_DIST_GLOO:
      // gloo reads host memory; a device context's buffers are staged
      // through page-locked host memory at each collective.
      if (!can_stage(*ctx->backend))
        return fail(TC_ERR_UNSUPPORTED, "%s: gloo runs on host memory; this context's buffers are %s, which its "
                                        "backend cannot stage through the host", fn, where(*ctx->backend).c_str());
      if (!gloo_built()) return make_gloo_comm(GroupSpec(), nullptr);
      break;
    case TC_DIST_NCCL:
      if (!cuda) return fail(TC_ERR_UNSUPPORTED, "%s: the nccl backend needs a CUDA context", fn);
      if (!nccl_built()) return make_nccl_comm(GroupSpec(), nullptr);
      {
        struct tc_device_info info;
        ctx->backend->device_info(&info);
        req->cuda_device = info.device_index;
      }
      break;
    default:
      return fail(TC_ERR_INVALID_ARG, "%s: unknown dist backend %d (single 0, gloo 2, nccl 3)", fn, backend);
  }
  if (!url_text || !*url_text)
    return fail(TC_ERR_INVALID_ARG, "%s: backend %s needs a rendezvous URL (gloo+tcp://host:port or file:///dir)", fn,
                backend == TC_DIST_GLOO ? "gloo" : "nccl");
  Url url;
  std::string why;
  if (!parse_url(url_text, &url, &why))
    return fail(TC_ERR_INVALID_ARG, "%s: rendezvous URL '%s': %s", fn, url_text, why.c_str());
  if (tc_status st = query_timeout(fn, url, &req->timeout_ms)) return st;
  const std::string* iface = url.param("iface_host");
  if (url.scheme == "file") {
    if (authenticated)
      return fail(TC_ERR_INVALID_ARG, "%s: authentication needs a tcp rendezvous (file:// has no connection to "
                                      "authenticate)", fn);
    req->rendezvous = GroupRequest::Rendezvous::File;
    req->dir = url.path;
    req->iface_host = iface ? *iface : "127.0.0.1";
    return TC_OK;
  }
  if (tc_status st = parse_tcp_url(fn, "rendezvous URL", url_text, false, &url)) return st;
  req->rendezvous = GroupRequest::Rendezvous::Tcp;
  req->host = url.host;
  req->port = url.port;
  if (iface)
    req->iface_host = *iface;
  else if (is_loopback(url.host))
    req->iface_host = url.host == "localhost" ? "127.0.0.1" : url.host;
  else {
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    req->iface_host = name;
  }
  return TC_OK;
}

tc_status finish_create(const char* fn, const GroupRequest& req, tc_dist* out) {
  tc_dist d = nullptr;
  if (tc_status st = create_group(fn, req, &d)) return st;
  req.ctx->live_dists++;
  *out = d;
  return TC_OK;
}

tc_status check_elems(const char* fn, const char* arg, tc_dist d, tc_buffer& b, size_t n, tc_dtype dtype,
                      int64_t multiplier) {
  if (tc_status st = check_buffer(fn, arg, d->ctx, b)) return st;
  int64_t bytes;
  if (n == 0 || n > (size_t(1) << 60)) return fail(TC_ERR_INVALID_SHAPE, "%s: num_elements %zu must be in 1..2^60", fn, n);
  if (!mul_ok(int64_t(n), multiplier, &bytes) || !mul_ok(bytes, int64_t(dtype_size(dtype)), &bytes))
    return fail(TC_ERR_INVALID_SHAPE, "%s: %zu x %lld elements overflow", fn, n, (long long)multiplier);
  if (uint64_t(bytes) > b->size())
    return fail(TC_ERR_INVALID_ARG, "%s: %s needs %lld bytes (%lld x %zu %s elements) but has %zu", fn, arg,
                (long long)bytes, (long long)multiplier, n, dtype_label(dtype).c_str(), b->size());
  return TC_OK;
}

tc_status check_dtype(const char* fn, tc_dtype dtype) {
  if (dtype != TC_DTYPE_F32 && dtype != TC_DTYPE_F16 && dtype != TC_DTYPE_BF16)
    return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s (collectives take f32, f16, bf16)", fn,
                dtype_label(dtype).c_str());
  return TC_OK;
}

tc_status check_op(const char* fn, int32_t op) {
  if (op < TC_REDUCE_SUM || op > TC_REDUCE_MIN)
    return fail(TC_ERR_INVALID_ARG, "%s: unknown reduce op %d (sum 0, avg 1, max 2, min 3)", fn, op);
  return TC_OK;
}

bool overlap(tc_buffer a, size_t an, tc_buffer b, size_t bn) {
  const char* pa = a->bytes();
  const char* pb = b->bytes();
  return pa < pb + bn && pb < pa + an;
}

// How a collective reaches its buffers (all of the group's context, so all
// in one place): in place, or staged through the host.
enum class Route { InPlace, Staged };

// NCCL reads device memory in place. gloo reads host memory: device memory
// (or host memory under TC_DIST_DEVICE_PATH=1) is staged through page-locked
// host memory. The single backend only copies, with the device's copy for
// device memory, so it takes the staged route's communicator too.
tc_status route_of(const char* fn, const char* arg, tc_dist d, Route* out) {
  *out = Route::InPlace;
  if (d->backend == TC_DIST_NCCL) return TC_OK;
  const Backend& be = *d->ctx->backend;
  if (!treat_as_device(be)) return TC_OK;
  if (!can_stage(be))
    return fail(TC_ERR_UNSUPPORTED, "%s: %s is %s, which the %s backend cannot read and this device cannot stage "
                "through host memory", fn, arg, where(be).c_str(), d->backend == TC_DIST_GLOO ? "gloo" : "single");
  *out = Route::Staged;
  return TC_OK;
}

// Runs a collective under the group's lock and counts its bytes.
template <class F>
tc_status collective(tc_dist d, Route route, uint64_t wire_bytes, F&& body) {
  std::lock_guard<std::mutex> lock(d->mu);
  Comm* c = d->comm.get();
  if (route == Route::Staged) {
    if (!d->staged) {
      Backend* be = d->ctx->backend.get();
      d->staged = d->backend == TC_DIST_SINGLE ? make_single_comm(be) : make_staged_comm(d->comm.get(), be);
      d->staged->set_timeout_ms(d->timeout_ms.load());
    }
    c = d->staged.get();
  }
  tc_status st = body(*c);
  if (st == TC_OK) d->bytes_sent += wire_bytes;
  return st;
}

tc_status keyring_from(const char* fn, const struct tc_auth_config* auth, KeyringRef* out) {
  return make_keyring(fn, auth, out);
}

tc_status identities_from(const char* fn, const char* const* ids, size_t count, int32_t world,
                          std::vector<std::string>* out) {
  if (!ids && count == 0) return TC_OK;
  if (!ids) return fail(TC_ERR_INVALID_ARG, "%s: rank_identities is null but its count is %zu", fn, count);
  if (count != size_t(world))
    return fail(TC_ERR_INVALID_ARG, "%s: %zu rank identities for a group of %d", fn, count, world);
  for (size_t i = 0; i < count; ++i) {
    if (!ids[i] || !*ids[i] || std::strlen(ids[i]) > TC_AUTH_MAX_IDENTITY_BYTES)
      return fail(TC_ERR_INVALID_ARG, "%s: rank identity %zu is empty or longer than %d bytes", fn, i,
                  TC_AUTH_MAX_IDENTITY_BYTES);
    out->push_back(ids[i]);
  }
  return TC_OK;
}

// The endpoint reads and writes its bytes on the host (a publish is copied
// under its lock, a fetch is written where it lands). An address the
// context's device says is its own memory would be read by the host: refused.
// (A host backend cannot tell a device address from a host one.)
tc_status check_host_address(const char* fn, const char* arg, tc_remote r, const void* ptr, size_t nbytes) {
  // accepts_pointer records a detail when it says no; the call's success
  // clears it (capi's guarded).
  Backend& be = *r->ctx->backend;
  if (be.host_accessible() || !be.accepts_pointer(ptr, nbytes)) return TC_OK;
  return fail(TC_ERR_UNSUPPORTED, "%s: %s is %s; the remote endpoint serves and fetches host memory", fn, arg,
              where(be).c_str());
}

tc_status check_name(const char* fn, const char* name) {
  if (!name || !*name) return fail(TC_ERR_INVALID_ARG, "%s: name is empty", fn);
  if (std::strlen(name) > 1000) return fail(TC_ERR_INVALID_ARG, "%s: name is longer than 1000 bytes", fn);
  return TC_OK;
}

}  // namespace

uint64_t tc::dist::available_capabilities(tc_context ctx) {
  uint64_t bits = 0;
  if (gloo_built() && can_stage(*ctx->backend)) bits |= TC_CAPABILITY_DIST_GLOO;  // device memory staged
  if (ctx->backend->kind() == TC_BACKEND_CUDA && nccl_built()) bits |= TC_CAPABILITY_DIST_NCCL;
  bits |= TC_CAPABILITY_DILOCO;  // single groups on any context (device memory through the host), gloo on host ones
  return bits;
}

extern "C" {

tc_status tc_dist_init(tc_context ctx, int32_t backend, int32_t world_size, int32_t rank, const char* rendezvous_url,
                       tc_dist* out) {
  const char* fn = "tc_dist_init";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    GroupRequest req;
    if (tc_status st = build_request(fn, ctx, backend, world_size, rank, rendezvous_url, false, &req)) return st;
    return finish_create(fn, req, out);
  });
}

tc_status tc_dist_init_authenticated(tc_context ctx, int32_t backend, int32_t world_size, int32_t rank,
                                     const char* rendezvous_url, const char* const* rank_identities,
                                     size_t rank_identity_count, const struct tc_auth_config* auth, tc_dist* out) {
  const char* fn = "tc_dist_init_authenticated";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    GroupRequest req;
    if (tc_status st = build_request(fn, ctx, backend, world_size, rank, rendezvous_url, true, &req)) return st;
    if (tc_status st = keyring_from(fn, auth, &req.ring)) return st;
    if (tc_status st = identities_from(fn, rank_identities, rank_identity_count, world_size, &req.rank_identities))
      return st;
    if (!req.rank_identities.empty() && req.rank_identities[size_t(rank)] != req.ring->local_identity)
      return fail(TC_ERR_INVALID_ARG, "%s: rank %d is bound to identity '%s' but the local identity is '%s'", fn, rank,
                  req.rank_identities[size_t(rank)].c_str(), req.ring->local_identity.c_str());
    return finish_create(fn, req, out);
  });
}

tc_status tc_mesh_group_init_authenticated(tc_context ctx, int32_t n_peers, int32_t my_rank,
                                           const char* const* peer_urls, const char* const* peer_identities,
                                           const struct tc_auth_config* auth, tc_dist* out) {
  const char* fn = "tc_mesh_group_init_authenticated";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (tc_status st = check_context(fn, ctx)) return st;
    if (n_peers < 1 || n_peers > kMaxWorld)
      return fail(TC_ERR_INVALID_ARG, "%s: n_peers %d is out of range 1..%d", fn, n_peers, kMaxWorld);
    if (!peer_urls) return fail(TC_ERR_INVALID_ARG, "%s: peer_urls is null", fn);
    if (!peer_identities) return fail(TC_ERR_INVALID_ARG, "%s: peer_identities is null", fn);
    if (my_rank < 0 || my_rank >= n_peers)
      return fail(TC_ERR_INVALID_ARG, "%s: my_rank %d is not in 0..%d", fn, my_rank, n_peers - 1);
    std::vector<Url> urls(static_cast<size_t>(n_peers));
    for (int32_t r = 0; r < n_peers; ++r)
      if (tc_status st = parse_tcp_url(fn, "peer URL", peer_urls[r], false, &urls[size_t(r)])) return st;
    GroupRequest req;
    if (tc_status st = build_request(fn, ctx, TC_DIST_GLOO, n_peers, my_rank, peer_urls[0], true, &req)) return st;
    req.iface_host = urls[size_t(my_rank)].host;
    if (const std::string* iface = urls[size_t(my_rank)].param("iface_host")) req.iface_host = *iface;
    if (tc_status st = keyring_from(fn, auth, &req.ring)) return st;
    if (tc_status st = identities_from(fn, peer_identities, size_t(n_peers), n_peers, &req.rank_identities)) return st;
    if (req.rank_identities[size_t(my_rank)] != req.ring->local_identity)
      return fail(TC_ERR_INVALID_ARG, "%s: peer_identities[%d] is '%s' but the local identity is '%s'", fn, my_rank,
                  req.rank_identities[size_t(my_rank)].c_str(), req.ring->local_identity.c_str());
    return finish_create(fn, req, out);
  });
}

tc_status tc_dist_finalize(tc_dist dist) {
  const char* fn = "tc_dist_finalize";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    if (int64_t n = dist->live_diloco.load())
      return fail(TC_ERR_INVALID_ARG, "%s: %lld DiLoCo context(s) still use this group; finalize them first", fn,
                  (long long)n);
    tc_context ctx = dist->ctx;
    destroy_group(dist);
    ctx->live_dists--;
    return TC_OK;
  });
}

tc_status tc_dist_world_size(tc_dist dist, int32_t* out) {
  return guarded("tc_dist_world_size", [&] {
    if (tc_status st = check_dist("tc_dist_world_size", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_world_size", "out", out)) return st;
    *out = dist->world;
    return TC_OK;
  });
}

tc_status tc_dist_rank(tc_dist dist, int32_t* out) {
  return guarded("tc_dist_rank", [&] {
    if (tc_status st = check_dist("tc_dist_rank", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_rank", "out", out)) return st;
    *out = dist->rank;
    return TC_OK;
  });
}

tc_status tc_dist_backend(tc_dist dist, int32_t* out) {
  return guarded("tc_dist_backend", [&] {
    if (tc_status st = check_dist("tc_dist_backend", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_backend", "out", out)) return st;
    *out = dist->backend;
    return TC_OK;
  });
}

tc_status tc_dist_set_timeout(tc_dist dist, int64_t timeout_ms) {
  const char* fn = "tc_dist_set_timeout";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    if (timeout_ms <= 0 || timeout_ms > (1ll << 40))
      return fail(TC_ERR_INVALID_ARG, "%s: timeout_ms %lld must be positive", fn, (long long)timeout_ms);
    std::lock_guard<std::mutex> lock(dist->mu);
    dist->timeout_ms = timeout_ms;
    dist->comm->set_timeout_ms(timeout_ms);
    if (dist->staged) dist->staged->set_timeout_ms(timeout_ms);
    return TC_OK;
  });
}

tc_status tc_dist_get_timeout(tc_dist dist, int64_t* out) {
  return guarded("tc_dist_get_timeout", [&] {
    if (tc_status st = check_dist("tc_dist_get_timeout", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_get_timeout", "out", out)) return st;
    *out = dist->timeout_ms.load();
    return TC_OK;
  });
}

tc_status tc_dist_bytes_sent(tc_dist dist, uint64_t* out) {
  return guarded("tc_dist_bytes_sent", [&] {
    if (tc_status st = check_dist("tc_dist_bytes_sent", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_bytes_sent", "out", out)) return st;
    *out = dist->bytes_sent.load();
    return TC_OK;
  });
}

tc_status tc_dist_auth_failure_count(tc_dist dist, uint64_t* out) {
  return guarded("tc_dist_auth_failure_count", [&] {
    if (tc_status st = check_dist("tc_dist_auth_failure_count", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_auth_failure_count", "out", out)) return st;
    *out = dist->refusals->auth();
    return TC_OK;
  });
}

tc_status tc_dist_refusal_count(tc_dist dist, uint64_t* out) {
  return guarded("tc_dist_refusal_count", [&] {
    if (tc_status st = check_dist("tc_dist_refusal_count", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_refusal_count", "out", out)) return st;
    *out = dist->refusals->total();
    return TC_OK;
  });
}

tc_status tc_dist_last_refusal(tc_dist dist, const char** out) {
  return guarded("tc_dist_last_refusal", [&] {
    if (tc_status st = check_dist("tc_dist_last_refusal", dist)) return st;
    if (tc_status st = check_out_ptr("tc_dist_last_refusal", "out", out)) return st;
    // A copy the caller's thread owns: the record changes under the
    // server's threads.
    static thread_local std::string text;
    text = dist->refusals->last();
    *out = text.c_str();
    return TC_OK;
  });
}

tc_status tc_allreduce(tc_dist dist, tc_buffer buf, size_t num_elements, tc_dtype dtype, int32_t op) {
  const char* fn = "tc_allreduce";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    if (tc_status st = check_dtype(fn, dtype)) return st;
    if (tc_status st = check_op(fn, op)) return st;
    if (tc_status st = check_elems(fn, "buf", dist, buf, num_elements, dtype, 1)) return st;
    Route route;
    if (tc_status st = route_of(fn, "buf", dist, &route)) return st;
    uint64_t wire = wire_bytes_allreduce(num_elements * dtype_size(dtype), dist->world);
    return collective(dist, route, wire, [&](Comm& c) { return c.allreduce(buf->bytes(), num_elements, dtype, op); });
  });
}

tc_status tc_broadcast(tc_dist dist, tc_buffer buf, size_t num_elements, tc_dtype dtype, int32_t root) {
  const char* fn = "tc_broadcast";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    if (tc_status st = check_dtype(fn, dtype)) return st;
    if (root < 0 || root >= dist->world)
      return fail(TC_ERR_INVALID_ARG, "%s: root %d is not a rank of 0..%d", fn, root, dist->world - 1);
    if (tc_status st = check_elems(fn, "buf", dist, buf, num_elements, dtype, 1)) return st;
    Route route;
    if (tc_status st = route_of(fn, "buf", dist, &route)) return st;
    uint64_t wire = wire_bytes_broadcast(num_elements * dtype_size(dtype), dist->world, root == dist->rank);
    return collective(dist, route, wire,
                      [&](Comm& c) { return c.broadcast(buf->bytes(), num_elements, dtype, root); });
  });
}

tc_status tc_allgather(tc_dist dist, tc_buffer src, tc_buffer dst, size_t num_elements_per_rank, tc_dtype dtype) {
  const char* fn = "tc_allgather";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    if (tc_status st = check_dtype(fn, dtype)) return st;
    if (tc_status st = check_elems(fn, "src", dist, src, num_elements_per_rank, dtype, 1)) return st;
    if (tc_status st = check_elems(fn, "dst", dist, dst, num_elements_per_rank, dtype, dist->world)) return st;
    size_t per = num_elements_per_rank * dtype_size(dtype);
    if (overlap(src, per, dst, per * size_t(dist->world)))
      return fail(TC_ERR_INVALID_ARG, "%s: src and dst overlap", fn);
    Route route;
    if (tc_status st = route_of(fn, "src", dist, &route)) return st;
    uint64_t wire = wire_bytes_allgather(per, dist->world);
    return collective(dist, route, wire,
                      [&](Comm& c) { return c.allgather(src->bytes(), dst->bytes(), num_elements_per_rank, dtype); });
  });
}

tc_status tc_reduce_scatter(tc_dist dist, tc_buffer src, tc_buffer dst, size_t num_elements_per_rank, tc_dtype dtype,
                            int32_t op) {
  const char* fn = "tc_reduce_scatter";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    if (tc_status st = check_dtype(fn, dtype)) return st;
    if (tc_status st = check_op(fn, op)) return st;
    if (tc_status st = check_elems(fn, "src", dist, src, num_elements_per_rank, dtype, dist->world)) return st;
    if (tc_status st = check_elems(fn, "dst", dist, dst, num_elements_per_rank, dtype, 1)) return st;
    size_t per = num_elements_per_rank * dtype_size(dtype);
    if (overlap(src, per * size_t(dist->world), dst, per))
      return fail(TC_ERR_INVALID_ARG, "%s: src and dst overlap", fn);
    Route route;
    if (tc_status st = route_of(fn, "src", dist, &route)) return st;
    uint64_t wire = wire_bytes_reduce_scatter(per, dist->world);
    return collective(dist, route, wire, [&](Comm& c) {
      return c.reduce_scatter(src->bytes(), dst->bytes(), num_elements_per_rank, dtype, op);
    });
  });
}

tc_status tc_barrier(tc_dist dist) {
  const char* fn = "tc_barrier";
  return guarded(fn, [&] {
    if (tc_status st = check_dist(fn, dist)) return st;
    return collective(dist, Route::InPlace, 0, [&](Comm& c) { return c.barrier(); });
  });
}

// ---- remote endpoint ---------------------------------------------------------

static tc_status remote_create(const char* fn, tc_context ctx, int32_t role, const char* bind_url,
                               const struct tc_auth_config* auth, bool authenticated, tc_remote* out) {
  if (tc_status st = check_out_ptr(fn, "out", out)) return st;
  if (tc_status st = check_context(fn, ctx)) return st;
  if (role != TC_REMOTE_ROLE_WEIGHT_SERVER && role != TC_REMOTE_ROLE_COMPUTE_CLIENT)
    return fail(TC_ERR_INVALID_ARG, "%s: unknown role %d (weight server 0, compute client 1)", fn, role);
  KeyringRef ring;
  if (authenticated)
    if (tc_status st = make_keyring(fn, auth, &ring)) return st;
  Url url;
  int64_t timeout = default_timeout_ms();
  if (role == TC_REMOTE_ROLE_WEIGHT_SERVER) {
    if (tc_status st = parse_tcp_url(fn, "bind_url", bind_url, true, &url)) return st;
    if (tc_status st = query_timeout(fn, url, &timeout)) return st;
  } else if (bind_url && *bind_url) {
    return fail(TC_ERR_INVALID_ARG, "%s: a compute client takes no bind_url", fn);
  }
  std::unique_ptr<RemoteEndpoint> ep;
  std::string why;
  if (tc_status st = RemoteEndpoint::create(role, url.host, url.port, ring, timeout, &ep, &why))
    return fail(st, "%s: %s", fn, why.c_str());
  auto* r = new tc_remote_s();
  r->ctx = ctx;
  r->ep = std::move(ep);
  *out = register_handle(r, remote_kind());
  return TC_OK;
}

tc_status tc_remote_init(tc_context ctx, int32_t role, const char* bind_url, tc_remote* out) {
  return guarded("tc_remote_init",
                 [&] { return remote_create("tc_remote_init", ctx, role, bind_url, nullptr, false, out); });
}

tc_status tc_remote_init_authenticated(tc_context ctx, int32_t role, const char* bind_url,
                                       const struct tc_auth_config* auth, tc_remote* out) {
  return guarded("tc_remote_init_authenticated", [&] {
    return remote_create("tc_remote_init_authenticated", ctx, role, bind_url, auth, true, out);
  });
}

tc_status tc_remote_shutdown(tc_remote remote) {
  return guarded("tc_remote_shutdown", [&] {
    if (tc_status st = check_remote("tc_remote_shutdown", remote)) return st;
    unregister_handle(remote);
    delete remote;
    return TC_OK;
  });
}

tc_status tc_remote_bound_port(tc_remote remote, int32_t* out) {
  const char* fn = "tc_remote_bound_port";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (remote->ep->role() != TC_REMOTE_ROLE_WEIGHT_SERVER)
      return fail(TC_ERR_INVALID_ARG, "%s: a compute client listens on no port", fn);
    *out = remote->ep->port();
    return TC_OK;
  });
}

tc_status tc_remote_register_tensor(tc_remote remote, const char* name, const void* ptr, size_t nbytes) {
  const char* fn = "tc_remote_register_tensor";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (remote->ep->role() != TC_REMOTE_ROLE_WEIGHT_SERVER)
      return fail(TC_ERR_INVALID_ARG, "%s: only a weight server publishes tensors", fn);
    if (tc_status st = check_name(fn, name)) return st;
    if (!ptr) return fail(TC_ERR_INVALID_ARG, "%s: ptr is null", fn);
    if (nbytes == 0 || nbytes > tc::dist::kMaxTensorBytes)
      return fail(TC_ERR_INVALID_ARG, "%s: nbytes %zu must be in 1..%zu (a tensor travels in one frame of at most 4 GiB)",
                  fn, nbytes, tc::dist::kMaxTensorBytes);
    if (tc_status st = check_host_address(fn, "ptr", remote, ptr, nbytes)) return st;
    remote->ep->publish(name, ptr, nbytes);
    return TC_OK;
  });
}

tc_status tc_remote_unregister_tensor(tc_remote remote, const char* name) {
  const char* fn = "tc_remote_unregister_tensor";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (tc_status st = check_name(fn, name)) return st;
    if (!remote->ep->withdraw(name)) return fail(TC_ERR_INVALID_ARG, "%s: no tensor named '%s'", fn, name);
    return TC_OK;
  });
}

tc_status tc_remote_registered_count(tc_remote remote, size_t* out) {
  const char* fn = "tc_remote_registered_count";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    *out = remote->ep->published();
    return TC_OK;
  });
}

static tc_status remote_connect(const char* fn, tc_remote remote, const char* peer_url, const char* expected,
                                bool authenticated, int32_t* out_peer_id) {
  if (tc_status st = check_remote(fn, remote)) return st;
  if (tc_status st = check_out_ptr(fn, "out_peer_id", out_peer_id)) return st;
  if (remote->ep->role() != TC_REMOTE_ROLE_COMPUTE_CLIENT)
    return fail(TC_ERR_INVALID_ARG, "%s: only a compute client connects", fn);
  if (authenticated != remote->ep->authenticated())
    return fail(TC_ERR_INVALID_ARG, "%s: the endpoint was created %s; use tc_remote_connect%s", fn,
                remote->ep->authenticated() ? "with authentication" : "without authentication",
                remote->ep->authenticated() ? "_authenticated" : "");
  if (authenticated && (!expected || !*expected))
    return fail(TC_ERR_INVALID_ARG, "%s: expected_peer_identity is empty", fn);
  Url url;
  if (tc_status st = parse_tcp_url(fn, "peer_url", peer_url, false, &url)) return st;
  std::string why;
  if (tc_status st = remote->ep->connect(url.host, url.port, expected ? expected : "", out_peer_id, &why))
    return fail(st, "%s: %s: %s", fn, peer_url, why.c_str());
  return TC_OK;
}

tc_status tc_remote_connect(tc_remote remote, const char* peer_url, int32_t* out_peer_id) {
  return guarded("tc_remote_connect",
                 [&] { return remote_connect("tc_remote_connect", remote, peer_url, nullptr, false, out_peer_id); });
}

tc_status tc_remote_connect_authenticated(tc_remote remote, const char* peer_url, const char* expected_peer_identity,
                                          int32_t* out_peer_id) {
  return guarded("tc_remote_connect_authenticated", [&] {
    return remote_connect("tc_remote_connect_authenticated", remote, peer_url, expected_peer_identity, true,
                          out_peer_id);
  });
}

tc_status tc_remote_tensor_fetch(tc_remote remote, int32_t peer_id, const char* name, void* dst, size_t nbytes) {
  const char* fn = "tc_remote_tensor_fetch";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (remote->ep->role() != TC_REMOTE_ROLE_COMPUTE_CLIENT)
      return fail(TC_ERR_INVALID_ARG, "%s: only a compute client fetches", fn);
    if (tc_status st = check_name(fn, name)) return st;
    const char* id;
    uint64_t key;
    if (!remote->ep->peer(peer_id, &id, &key)) return fail(TC_ERR_INVALID_ARG, "%s: no peer %d", fn, peer_id);
    if (!dst) return fail(TC_ERR_INVALID_ARG, "%s: dst is null", fn);
    if (nbytes == 0 || nbytes > tc::dist::kMaxTensorBytes)
      return fail(TC_ERR_INVALID_ARG, "%s: nbytes %zu must be in 1..%zu (a tensor travels in one frame of at most 4 GiB)",
                  fn, nbytes, tc::dist::kMaxTensorBytes);
    if (tc_status st = check_host_address(fn, "dst", remote, dst, nbytes)) return st;
    std::string why;
    if (tc_status st = remote->ep->fetch(peer_id, name, dst, nbytes, &why)) return fail(st, "%s: %s", fn, why.c_str());
    return TC_OK;
  });
}

tc_status tc_remote_auth_rotate(tc_remote remote, const struct tc_auth_config* auth) {
  const char* fn = "tc_remote_auth_rotate";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (!remote->ep->authenticated())
      return fail(TC_ERR_INVALID_ARG, "%s: the endpoint was created without authentication", fn);
    KeyringRef ring;
    if (tc_status st = make_keyring(fn, auth, &ring)) return st;
    remote->ep->rotate(ring);
    return TC_OK;
  });
}

tc_status tc_remote_peer_identity(tc_remote remote, int32_t peer_id, const char** out) {
  const char* fn = "tc_remote_peer_identity";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    uint64_t key;
    if (!remote->ep->peer(peer_id, out, &key)) return fail(TC_ERR_INVALID_ARG, "%s: no peer %d", fn, peer_id);
    return TC_OK;
  });
}

tc_status tc_remote_peer_key_id(tc_remote remote, int32_t peer_id, uint64_t* out) {
  const char* fn = "tc_remote_peer_key_id";
  return guarded(fn, [&] {
    if (tc_status st = check_remote(fn, remote)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    const char* id;
    if (!remote->ep->peer(peer_id, &id, out)) return fail(TC_ERR_INVALID_ARG, "%s: no peer %d", fn, peer_id);
    return TC_OK;
  });
}

#define TC_REMOTE_COUNTER(name, expr)                                  \
  tc_status name(tc_remote remote, uint64_t* out) {                    \
    return guarded(#name, [&] {                                        \
      if (tc_status st = check_remote(#name, remote)) return st;       \
      if (tc_status st = check_out_ptr(#name, "out", out)) return st;  \
      *out = remote->ep->expr();                                       \
      return TC_OK;                                                    \
    });                                                                \
  }
TC_REMOTE_COUNTER(tc_remote_auth_failure_count, auth_failures)
TC_REMOTE_COUNTER(tc_remote_refusal_count, refusal_count)
TC_REMOTE_COUNTER(tc_remote_total_bytes_served, bytes_served)
TC_REMOTE_COUNTER(tc_remote_total_bytes_fetched, bytes_fetched)
#undef TC_REMOTE_COUNTER

}  // extern "C"
