// The DiLoCo engine: parameter registration, the synchronous outer step and
// the asynchronous round (a worker thread on private copies).
//
// Thread discipline of the asynchronous round: at launch the caller's thread
// reads theta once (the snapshot Delta) and copies the outer state into
// `work`; the worker then touches only `snapshot`, `work` and the forked
// communicator, and publishes its result under `amu`. Theta and `state` are
// written only by the caller's thread, at commit.
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/objects.h"
#include "core/half.h"
#include "core/crypto.h"
#include "dist/diloco.h"
#include "dist/group.h"

namespace tc {
namespace dist {

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void size_state(tc_diloco d, OuterState* s) {
  s->anchor.resize(d->total);
  s->m1.resize(d->cfg.outer_optimizer == TC_DILOCO_OUTER_SGD ? 0 : d->total);
  s->m2.resize(d->cfg.outer_optimizer == TC_DILOCO_OUTER_ADAM ? d->total : 0);
  s->residual.resize(d->cfg.compress == TC_DILOCO_COMPRESS_NONE ? 0 : d->total);
}

// *delta = anchor - theta (theta itself in *theta when asked); host parameters.
void outer_gradient(tc_diloco d, std::vector<float>* delta, std::vector<float>* theta = nullptr) {
  delta->resize(d->total);
  gather_theta(d->params, delta);
  if (theta) *theta = *delta;
  for (size_t i = 0; i < d->total; ++i) (*delta)[i] = d->state.anchor[i] - (*delta)[i];
}

// exchange + optimizer on `s` (the live state, or a private copy).
tc_status run_round(tc_diloco d, const std::vector<float>& delta, OuterState* s, double* seconds, double* bytes) {
  auto t0 = Clock::now();
  std::vector<float> g;
  uint64_t sent = 0;
  std::vector<float> unused;
  if (tc_status st = exchange(*d->comm, d->cfg.compress, delta, s->residual.empty() ? &unused : &s->residual, &g,
                              &sent))
    return st;
  outer_update(d->cfg, g, s);
  *seconds = seconds_since(t0);
  *bytes = double(sent);
  return TC_OK;
}

void join_worker(tc_diloco d) {
  if (d->worker.joinable()) d->worker.join();
}

}  // namespace

tc_status diloco_create(tc_dist dist, const tc_diloco_config& cfg, bool device_exchange, bool params_on_device,
                        tc_diloco* out) {
  auto d = std::make_unique<tc_diloco_s>();
  d->dist = dist;
  d->cfg = cfg;
  d->params_on_device = params_on_device;
  Backend* be = dist->ctx->backend.get();
  {
    // One fork (two in a row could race in gloo's context factory).
    std::lock_guard<std::mutex> lock(dist->mu);
    if (tc_status st = dist->comm->fork(&d->engine)) return st;
  }
  // A view that takes device memory: NCCL's engine itself; a host engine's
  // collectives staged through the host. The device outer step exchanges
  // on it.
  tc::dist::Comm* device_side = nullptr;
  if (params_on_device || device_exchange) {
    if (dist->device_memory) {
      device_side = d->engine.get();
    } else {
      d->staged_engine = make_staged_comm(d->engine.get(), be);
      device_side = d->staged_engine.get();
    }
  }
  d->device_comm = params_on_device ? device_side : nullptr;
  // Host memory (the host outer step's vectors, the parameter descriptors):
  // the engine itself, or through device scratch where the device view is
  // the one to use (NCCL; every group under TC_DIST_DEVICE_PATH=1, so the
  // adapters run where no GPU is).
  if (device_exchange) {
    d->host_view = make_device_backed_comm(device_side, be);
    d->comm = d->host_view.get();
  } else {
    d->comm = d->engine.get();
  }
  for (auto* c : {d->engine.get(), d->staged_engine.get(), d->host_view.get()})
    if (c) c->set_timeout_ms(dist->timeout_ms.load());
  *out = d.release();
  return TC_OK;
}

void diloco_destroy(tc_diloco d) {
  {
    std::unique_lock<std::mutex> lock(d->amu);
    d->acv.wait(lock, [&] { return d->astate != TC_DILOCO_ASYNC_RUNNING; });
  }
  join_worker(d);
  delete d;
}

tc_status diloco_add(tc_diloco d, const char* name, tc_buffer theta, size_t n, tc_dtype dtype, bool device) {
  // Every rank must register the same parameter: compare descriptors
  // (name digest, count, dtype, position) across the group first, so a
  // mismatch fails on every rank instead of corrupting the exchange.
  struct Desc {
    uint8_t name_digest[16];
    uint64_t n;
    int32_t dtype;
    uint32_t index;
  } mine{};
  static_assert(sizeof(Desc) == 32, "descriptor is 8 words");
  uint8_t digest[kDigestBytes];
  sha256(name, std::strlen(name), digest);
  std::memcpy(mine.name_digest, digest, 16);
  mine.n = n;
  mine.dtype = dtype;
  mine.index = uint32_t(d->params.size());
  const int world = d->comm->size();
  std::vector<Desc> all(static_cast<size_t>(world));
  if (tc_status st = d->comm->allgather(&mine, all.data(), sizeof(Desc) / 4, TC_DTYPE_F32)) return st;
  for (int r = 0; r < world; ++r)
    if (std::memcmp(&all[size_t(r)], &mine, sizeof(Desc)) != 0)
      return fail(TC_ERR_INVALID_ARG,
                  "tc_diloco_add_parameter: rank %d registers a different parameter #%u than this rank's '%s' "
                  "(%zu %s elements): every rank must add the same parameters in the same order",
                  r, mine.index, name, n, dtype == TC_DTYPE_F32 ? "f32" : dtype == TC_DTYPE_F16 ? "f16" : "bf16");
  DilocoParam p;
  p.name = name;
  p.storage = theta->storage;
  p.n = n;
  p.dtype = dtype;
  p.offset = d->total;
  p.device = device;
  if (device && !d->stager) {
    d->stager = std::make_unique<Stager>(d->dist->ctx->backend.get());
    d->stager->set_timeout_ms(d->dist->timeout_ms.load());
  }
  // One starting point for everyone: rank 0's values. A host parameter is
  // broadcast in place; a device one through a host copy.
  std::vector<char> staged;
  void* host = p.storage->data;
  if (device) {
    staged.resize(param_bytes(p));
    host = staged.data();
    if (tc_status st = read_param(d->stager.get(), p, host)) return st;
  }
  if (tc_status st = d->comm->broadcast(host, n, dtype, 0)) return st;
  if (device)
    if (tc_status st = write_param(d->stager.get(), p, host)) return st;
  if (d->params_on_device) {
    if (tc_status st = device_add(d, p)) return st;  // the anchor from theta, on the device
    d->params.push_back(p);
    d->total += n;
    return TC_OK;
  }
  d->params.push_back(p);
  d->total += n;
  size_state(d, &d->state);
  widen_param(p, host, d->state.anchor.data());  // the broadcast values, already on the host
  return TC_OK;
}

tc_status diloco_apply_outer(tc_diloco d) {
  if (d->cfg.async_overlap) {
    // A round still in flight is installed first (this call is a safe
    // boundary), so at most one round runs at a time.
    if (tc_status st = diloco_commit(d)) return st;
    if (d->params_on_device) {
      // theta (as f32) and the state copied on the device; `work` carries adam_t.
      if (tc_status st = device_launch(d)) return st;
    } else {
      std::vector<float> delta;
      outer_gradient(d, &delta, &d->theta_at_launch);
      d->snapshot = delta;
    }
    d->work = d->state;
    d->since_outer = 0;
    {
      std::lock_guard<std::mutex> lock(d->amu);
      d->astate = TC_DILOCO_ASYNC_RUNNING;
      d->worker_status = TC_OK;
      d->worker_detail.clear();
      d->round_id++;
    }
    join_worker(d);
    d->worker = std::thread([d] {
      double secs = 0, bytes = 0;
      tc_status st = d->params_on_device ? device_round(d, &secs, &bytes)
                                         : run_round(d, d->snapshot, &d->work, &secs, &bytes);
      std::string detail = st ? last_detail() : std::string();
      std::lock_guard<std::mutex> lock(d->amu);
      d->worker_status = st;
      d->worker_detail = detail;
      d->work_seconds = secs;
      d->work_bytes = bytes;
      d->astate = st ? TC_DILOCO_ASYNC_FAILED : TC_DILOCO_ASYNC_READY;
      d->acv.notify_all();
    });
    return TC_OK;
  }
  double secs = 0, bytes = 0;
  if (d->params_on_device) {
    // A failed exchange leaves the state as it was (see diloco_device.cpp).
    d->round_id++;
    if (tc_status st = device_outer_step(d, &secs, &bytes)) return st;
  } else {
    std::vector<float> delta;
    outer_gradient(d, &delta);
    OuterState next = d->state;  // a failed exchange leaves the state as it was
    d->round_id++;
    if (tc_status st = run_round(d, delta, &next, &secs, &bytes)) return st;
    d->state = std::move(next);
    scatter_theta(d->params, d->state.anchor);
  }
  d->since_outer = 0;
  d->outer_completed++;
  d->last_seconds = secs;
  d->last_bytes = bytes;
  return TC_OK;
}

int32_t diloco_poll(tc_diloco d, tc_status* worker_status, uint64_t* round_id) {
  std::lock_guard<std::mutex> lock(d->amu);
  *worker_status = d->worker_status;
  *round_id = d->round_id;
  return d->astate;
}

tc_status diloco_wait(tc_diloco d) {
  std::unique_lock<std::mutex> lock(d->amu);
  d->acv.wait(lock, [&] { return d->astate != TC_DILOCO_ASYNC_RUNNING; });
  if (d->astate == TC_DILOCO_ASYNC_FAILED)
    return fail_with(d->worker_status, "tc_diloco_async_wait: the outer round failed: " + d->worker_detail);
  return TC_OK;
}

tc_status diloco_commit(tc_diloco d) {
  int32_t state;
  {
    std::unique_lock<std::mutex> lock(d->amu);
    d->acv.wait(lock, [&] { return d->astate != TC_DILOCO_ASYNC_RUNNING; });
    state = d->astate;
  }
  if (state == TC_DILOCO_ASYNC_IDLE) return TC_OK;
  join_worker(d);
  if (state == TC_DILOCO_ASYNC_READY) {
    // theta <- new anchor + (theta - theta_at_launch): the local progress
    // made while the round ran is kept on top of the new anchor (exactly the
    // new anchor when there was none).
    // A failed device commit returns with the round still READY and the
    // state as it was.
    if (d->params_on_device) {
      if (tc_status st = device_commit(d)) return st;  // theta and the state's arrays, on the device
    } else {
      std::vector<float> theta(d->total);
      gather_theta(d->params, &theta);
      for (size_t i = 0; i < d->total; ++i) theta[i] = d->work.anchor[i] + (theta[i] - d->theta_at_launch[i]);
      scatter_theta(d->params, theta);
    }
    d->state = std::move(d->work);
    d->outer_completed++;
    d->last_seconds = d->work_seconds;
    d->last_bytes = d->work_bytes;
  }
  // FAILED: the round is dropped; `state` (error feedback included) is as
  // it was before the launch.
  d->work = OuterState();
  d->snapshot.clear();
  d->theta_at_launch.clear();
  std::lock_guard<std::mutex> lock(d->amu);
  d->astate = TC_DILOCO_ASYNC_IDLE;
  return TC_OK;
}

}  // namespace dist
}  // namespace tc
