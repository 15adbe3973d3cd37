// DiLoCo's outer step for parameters in device memory (or host memory
// handled as such under TC_DIST_DEVICE_PATH=1), on the device: the state
// (anchor, moments, residual) lives in device memory of the parameters'
// backend and the arithmetic is the backend's diloco_* ops (core/ops.def;
// src/cpu/diloco_outer.cpp, src/cuda/diloco_outer.cu), which compute the host
// path's bits (diloco_outer.cpp has the algorithm). One outer step:
//
//   prepare   per parameter, from theta in its dtype: g = Delta (NONE), the
//             f16 payload q and the next residual (FP16), or u = Delta + e
//             into the next residual (TOPK)
//   exchange  NONE: allreduce_avg(g); FP16: allreduce_sum(q), g = f32(q);
//             TOPK: the top-k pairs of u (u becomes the next residual),
//             allgathered, combined into g in rank order
//   update    per parameter: the outer optimizer on anchor and moments, then
//             theta = the anchor in theta's dtype
//
// The exchange runs on `device_comm`, which takes device memory: NCCL reads
// it in place; a host engine (gloo, the single backend) gets it staged
// through page-locked host memory, so only g (NONE), the f16 payload (FP16)
// or the 8k-byte pairs (TOPK) cross to the host. A group of one exchanges
// nothing. Until the exchange has succeeded nothing but scratch is written,
// so a failed round leaves the state as it was; the next residual is
// installed by swapping it with the current one.
//
// The asynchronous round: launch copies theta (widened to f32) and the state
// on the device; the worker runs prepare (from that copy), the exchange and
// the update on the copies; commit writes theta = new anchor + (theta - theta
// at launch) and swaps the copies in. Every op runs on the context's queue
// `d->queue` and is waited for before its results are used or its memory is
// released; the caller's thread and the worker never use it at once.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/objects.h"
#include "dist/diloco.h"
#include "dist/group.h"

namespace tc {
namespace dist {

void DeviceArray::reset() {
  if (p_) be_->release(p_);
  be_ = nullptr;
  p_ = nullptr;
  bytes_ = 0;
}

tc_status DeviceArray::reserve(Backend* be, size_t bytes, const char* what) {
  if (bytes <= bytes_ && be == be_) return TC_OK;
  reset();
  if (bytes == 0) return TC_OK;
  void* p = be->alloc(bytes);
  if (!p)
    return fail(TC_ERR_ALLOC, "DiLoCo: could not allocate %zu bytes of %s for %s", bytes, where(*be).c_str(), what);
  be_ = be;
  p_ = p;
  bytes_ = bytes;
  return TC_OK;
}

namespace {

Backend* backend_of(tc_diloco d) { return d->dist->ctx->backend.get(); }

// Waits for what was enqueued on d->queue; `enqueued` (a failure to enqueue)
// is returned first, then the queue's.
tc_status finish(tc_diloco d, tc_status enqueued) {
  std::string detail;
  const tc_status queued = d->queue->sync(&detail);
  if (enqueued) return enqueued;
  if (queued) return fail_with(queued, "DiLoCo outer step on " + where(*backend_of(d)) + ": " + detail);
  return TC_OK;
}

// The state's arrays this configuration has, in the state blob's order.
std::vector<DeviceArray DeviceOuterState::*> arrays_of(const tc_diloco_config& c) {
  std::vector<DeviceArray DeviceOuterState::*> v{&DeviceOuterState::anchor};
  if (c.outer_optimizer != TC_DILOCO_OUTER_SGD) v.push_back(&DeviceOuterState::m1);
  if (c.outer_optimizer == TC_DILOCO_OUTER_ADAM) v.push_back(&DeviceOuterState::m2);
  if (c.compress != TC_DILOCO_COMPRESS_NONE) v.push_back(&DeviceOuterState::residual);
  return v;
}

// Device to device on the queue, in pieces a 2D copy takes (a pitch of at
// most 1 GiB).
tc_status copy_on_device(tc_diloco d, void* dst, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t(1) << 30;
  for (size_t off = 0; off < bytes; off += kPiece) {
    Copy2dArgs a;
    a.info.name = "diloco_copy";
    a.rows = 1;
    a.row_bytes = a.src_pitch = a.dst_pitch = std::min(kPiece, bytes - off);
    a.src = static_cast<const char*>(src) + off;
    a.dst = static_cast<char*>(dst) + off;
    if (tc_status st = backend_of(d)->copy_2d(a, d->queue.get())) return st;
  }
  return TC_OK;
}

// flat[0, p.n) = f32 of the parameter, on the queue.
tc_status widen_on_device(tc_diloco d, const DilocoParam& p, float* flat) {
  if (p.dtype == TC_DTYPE_F32) return copy_on_device(d, flat, p.storage->data, p.n * 4);
  ConvertArgs a;
  a.info.name = "diloco_widen";
  a.n = int64_t(p.n);
  a.src_dtype = p.dtype;
  a.dst_dtype = TC_DTYPE_F32;
  a.src = p.storage->data;
  a.dst = flat;
  return backend_of(d)->convert(a, d->queue.get());
}

// Scratch for a round of `total` elements.
tc_status reserve_scratch(tc_diloco d) {
  Backend* be = backend_of(d);
  DeviceScratch& s = d->scratch;
  const size_t n = d->total, world = size_t(d->device_comm->size());
  const int32_t c = d->cfg.compress;
  if (tc_status st = s.g.reserve(be, n * 4, "the outer gradient")) return st;
  if (c != TC_DILOCO_COMPRESS_NONE)
    if (tc_status st = s.next_residual.reserve(be, n * 4, "the error feedback")) return st;
  if (c == TC_DILOCO_COMPRESS_FP16)
    if (tc_status st = s.q.reserve(be, n * 2, "the f16 payload")) return st;
  const size_t k = topk_count(c, n);
  if (k) {
    if (tc_status st = s.pairs.reserve(be, 8 * k, "the top-k pairs")) return st;
    if (world > 1)
      if (tc_status st = s.gathered.reserve(be, 8 * k * world, "the gathered top-k pairs")) return st;
  }
  return TC_OK;
}

// prepare: from every parameter's theta, or (`from_launch_copy`) once over
// the flat copy of theta made at launch.
tc_status prepare(tc_diloco d, const DeviceOuterState& s, bool from_launch_copy) {
  const int32_t c = d->cfg.compress;
  DilocoPrepareArgs a;
  a.info.name = "diloco_prepare";
  a.mode = c == TC_DILOCO_COMPRESS_NONE   ? DilocoPrepareArgs::kDelta
           : c == TC_DILOCO_COMPRESS_FP16 ? DilocoPrepareArgs::kFp16
                                          : DilocoPrepareArgs::kErrorFeedback;
  a.world = d->device_comm->size();
  float* out = a.mode == DilocoPrepareArgs::kDelta ? d->scratch.g.f32() : d->scratch.next_residual.f32();
  auto range = [&](size_t offset, size_t n, tc_dtype dtype, const void* theta) {
    a.n = int64_t(n);
    a.dtype = dtype;
    a.theta = theta;
    a.anchor = s.anchor.f32() + offset;
    a.residual = c == TC_DILOCO_COMPRESS_NONE ? nullptr : s.residual.f32() + offset;
    a.out = out + offset;
    a.q = c == TC_DILOCO_COMPRESS_FP16 ? static_cast<uint16_t*>(d->scratch.q.data()) + offset : nullptr;
    return backend_of(d)->diloco_prepare(a, d->queue.get());
  };
  tc_status st = TC_OK;
  if (from_launch_copy)
    st = range(0, d->total, TC_DTYPE_F32, d->scratch.theta_at_launch.f32());
  else
    for (const DilocoParam& p : d->params)
      if ((st = range(p.offset, p.n, p.dtype, p.storage->data))) break;
  return finish(d, st);
}

// g = the mean over ranks of the compressed outer gradients (prepare's
// output); *sent: what this rank put on the wire.
tc_status exchange(tc_diloco d, uint64_t* sent) {
  Backend* be = backend_of(d);
  Comm& comm = *d->device_comm;
  const size_t n = d->total;
  const int world = comm.size();
  DeviceScratch& s = d->scratch;
  switch (d->cfg.compress) {
    case TC_DILOCO_COMPRESS_NONE:
      *sent = wire_bytes_allreduce(4 * n, world);
      return world == 1 ? TC_OK : comm.allreduce(s.g.data(), n, TC_DTYPE_F32, TC_REDUCE_AVG);
    case TC_DILOCO_COMPRESS_FP16: {
      if (world > 1)
        if (tc_status st = comm.allreduce(s.q.data(), n, TC_DTYPE_F16, TC_REDUCE_SUM)) return st;
      ConvertArgs a;
      a.info.name = "diloco_widen";
      a.n = int64_t(n);
      a.src_dtype = TC_DTYPE_F16;
      a.dst_dtype = TC_DTYPE_F32;
      a.src = s.q.data();
      a.dst = s.g.data();
      *sent = wire_bytes_allreduce(2 * n, world);
      return finish(d, be->convert(a, d->queue.get()));
    }
    default: {
      const size_t k = topk_count(d->cfg.compress, n);
      DilocoTopkArgs t;
      t.info.name = "diloco_topk";
      t.n = int64_t(n);
      t.k = int64_t(k);
      t.u = s.next_residual.f32();
      t.pairs = s.pairs.f32();
      if (tc_status st = finish(d, be->diloco_topk(t, d->queue.get()))) return st;
      const float* all = s.pairs.f32();
      if (world > 1) {
        if (tc_status st = comm.allgather(s.pairs.data(), s.gathered.data(), 2 * k, TC_DTYPE_F32)) return st;
        all = s.gathered.f32();
      }
      DilocoCombineArgs c;
      c.info.name = "diloco_combine";
      c.n = int64_t(n);
      c.k = int64_t(k);
      c.world = world;
      c.pairs = all;
      c.g = s.g.f32();
      *sent = wire_bytes_allgather(8 * k, world);
      return finish(d, be->diloco_combine(c, d->queue.get()));
    }
  }
}

// The outer optimizer on `s` with g; theta written per parameter when
// `write_theta`, else one call over the flat vectors.
tc_status update(tc_diloco d, DeviceOuterState* s, uint64_t* adam_t, bool write_theta) {
  const tc_diloco_config& cfg = d->cfg;
  DilocoUpdateArgs a;
  a.info.name = "diloco_update";
  a.optimizer = cfg.outer_optimizer;
  a.lr = cfg.outer_lr;
  a.mu = cfg.outer_momentum;
  a.beta2 = cfg.outer_beta2;
  a.eps = cfg.outer_eps;
  if (cfg.outer_optimizer == TC_DILOCO_OUTER_ADAM) {
    ++*adam_t;  // the bias corrections as the host path rounds them
    a.bc1 = float(1.0 - std::pow(double(cfg.outer_momentum), double(*adam_t)));
    a.bc2 = float(1.0 - std::pow(double(cfg.outer_beta2), double(*adam_t)));
  }
  auto range = [&](size_t offset, size_t n, tc_dtype dtype, void* theta) {
    a.n = int64_t(n);
    a.g = d->scratch.g.f32() + offset;
    a.anchor = s->anchor.f32() + offset;
    a.m1 = s->m1.data() ? s->m1.f32() + offset : nullptr;
    a.m2 = s->m2.data() ? s->m2.f32() + offset : nullptr;
    a.dtype = dtype;
    a.theta = theta;
    return backend_of(d)->diloco_update(a, d->queue.get());
  };
  tc_status st = TC_OK;
  if (!write_theta)
    st = range(0, d->total, TC_DTYPE_F32, nullptr);
  else
    for (const DilocoParam& p : d->params)
      if ((st = range(p.offset, p.n, p.dtype, p.storage->data))) break;
  return finish(d, st);
}

// prepare, exchange and update on `s`; theta written unless the round runs
// on the copy made at launch.
tc_status outer_round(tc_diloco d, DeviceOuterState* s, uint64_t* adam_t, bool from_launch_copy, double* seconds,
                      double* bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  if (tc_status st = reserve_scratch(d)) return st;
  if (tc_status st = prepare(d, *s, from_launch_copy)) return st;
  uint64_t sent = 0;
  if (tc_status st = exchange(d, &sent)) return st;
  if (d->cfg.compress != TC_DILOCO_COMPRESS_NONE) s->residual.swap(d->scratch.next_residual);
  if (tc_status st = update(d, s, adam_t, !from_launch_copy)) return st;
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *bytes = double(sent);
  return TC_OK;
}

}  // namespace

tc_status device_add(tc_diloco d, const DilocoParam& p) {
  Backend* be = backend_of(d);
  if (!d->queue) {
    d->queue = be->create_queue();
    if (!d->queue) return fail(TC_ERR_ALLOC, "tc_diloco_add_parameter: the device could not create a queue");
  }
  // The flat arrays grow by the parameter: new ones, the old contents
  // copied over, the anchor's new range = theta, the others' zero.
  const size_t old = d->total, now = old + p.n;
  DeviceOuterState grown;
  tc_status st = TC_OK;
  for (auto member : arrays_of(d->cfg)) {
    if ((st = (grown.*member).reserve(be, now * 4, "the DiLoCo state"))) break;
    if (old && (st = copy_on_device(d, (grown.*member).data(), (d->dstate.*member).data(), old * 4))) break;
  }
  if (!st) st = widen_on_device(d, p, grown.anchor.f32() + old);
  if ((st = finish(d, st))) return st;
  for (auto member : arrays_of(d->cfg)) {
    if (member == &DeviceOuterState::anchor) continue;
    if ((st = d->stager->write((grown.*member).f32() + old, p.n * 4,
                               [](char* chunk, size_t, size_t len) { std::memset(chunk, 0, len); })))
      return st;
  }
  d->dstate = std::move(grown);
  return TC_OK;
}

tc_status device_outer_step(tc_diloco d, double* seconds, double* bytes) {
  return outer_round(d, &d->dstate, &d->state.adam_t, false, seconds, bytes);
}

tc_status device_launch(tc_diloco d) {
  Backend* be = backend_of(d);
  if (tc_status st = d->scratch.theta_at_launch.reserve(be, d->total * 4, "theta at launch")) return st;
  tc_status st = TC_OK;
  for (const DilocoParam& p : d->params)
    if ((st = widen_on_device(d, p, d->scratch.theta_at_launch.f32() + p.offset))) break;
  if (!st)
    for (auto member : arrays_of(d->cfg)) {
      if ((st = (d->dwork.*member).reserve(be, d->total * 4, "the asynchronous round's state"))) break;
      if ((st = copy_on_device(d, (d->dwork.*member).data(), (d->dstate.*member).data(), d->total * 4))) break;
    }
  return finish(d, st);
}

tc_status device_round(tc_diloco d, double* seconds, double* bytes) {
  return outer_round(d, &d->dwork, &d->work.adam_t, true, seconds, bytes);
}

tc_status device_commit(tc_diloco d) {
  DilocoCommitArgs a;
  a.info.name = "diloco_commit";
  tc_status st = TC_OK;
  for (const DilocoParam& p : d->params) {
    a.n = int64_t(p.n);
    a.dtype = p.dtype;
    a.theta = p.storage->data;
    a.anchor = d->dwork.anchor.f32() + p.offset;
    a.theta_at_launch = d->scratch.theta_at_launch.f32() + p.offset;
    if ((st = backend_of(d)->diloco_commit(a, d->queue.get()))) break;
  }
  if ((st = finish(d, st))) return st;
  std::swap(d->dstate, d->dwork);  // the old state's arrays serve the next round's copies
  return TC_OK;
}

tc_status device_state_read(tc_diloco d, std::vector<uint8_t>* out) {
  const size_t bytes = d->total * 4;
  for (auto member : arrays_of(d->cfg)) {
    const size_t at = out->size();
    out->resize(at + bytes);
    uint8_t* dst = out->data() + at;
    if (tc_status st =
            d->stager->read((d->dstate.*member).data(), bytes,
                            [&](const char* chunk, size_t off, size_t len) { std::memcpy(dst + off, chunk, len); }))
      return st;
  }
  return TC_OK;
}

tc_status device_state_write(tc_diloco d, const uint8_t* in) {
  // Into new arrays, installed once every copy has succeeded.
  Backend* be = backend_of(d);
  const size_t bytes = d->total * 4;
  DeviceOuterState next;
  for (auto member : arrays_of(d->cfg)) {
    if (tc_status st = (next.*member).reserve(be, bytes, "the DiLoCo state")) return st;
    if (tc_status st = d->stager->write((next.*member).data(), bytes, [&](char* chunk, size_t off, size_t len) {
          std::memcpy(chunk, in + off, len);
        }))
      return st;
    in += bytes;
  }
  d->dstate = std::move(next);
  return TC_OK;
}

}  // namespace dist
}  // namespace tc
