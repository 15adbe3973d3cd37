// Validation and entry points of include/tensorcore/diloco.h.
#include "tensorcore/diloco.h"

#include <cmath>
#include <cstring>

#include "capi/api.h"
#include "core/config.h"
#include "core/half.h"
#include "dist/diloco.h"
#include "dist/group.h"

using namespace tc;
using namespace tc::capi;
using namespace tc::dist;

namespace {

constexpr uint64_t kCompressSupported = (1ull << TC_DILOCO_COMPRESS_NONE) | (1ull << TC_DILOCO_COMPRESS_FP16) |
                                        (1ull << TC_DILOCO_COMPRESS_TOPK_1PCT) |
                                        (1ull << TC_DILOCO_COMPRESS_TOPK_01PCT);
constexpr uint64_t kCompressSparse = (1ull << TC_DILOCO_COMPRESS_TOPK_1PCT) | (1ull << TC_DILOCO_COMPRESS_TOPK_01PCT);
constexpr uint64_t kOptimizers =
    (1ull << TC_DILOCO_OUTER_SGD) | (1ull << TC_DILOCO_OUTER_NESTEROV) | (1ull << TC_DILOCO_OUTER_ADAM);
constexpr uint64_t kStateFeatures =
    TC_DILOCO_STATE_FEATURE_OUTER_ANCHOR | TC_DILOCO_STATE_FEATURE_OUTER_MOMENTS |
    TC_DILOCO_STATE_FEATURE_ERROR_FEEDBACK | TC_DILOCO_STATE_FEATURE_COUNTERS |
    TC_DILOCO_STATE_FEATURE_TOPOLOGY_EPOCH | TC_DILOCO_STATE_FEATURE_MEMBERSHIP_EPOCH |
    TC_DILOCO_STATE_FEATURE_PAYLOAD_SHA256 | TC_DILOCO_STATE_FEATURE_DETERMINISTIC_LAYOUT |
    TC_DILOCO_STATE_FEATURE_ATOMIC_RESTORE;

tc_status check_diloco(const char* fn, tc_diloco& d) {
  if (!d) return fail(TC_ERR_INVALID_ARG, "%s: diloco is null", fn);
  return check_handle(fn, "diloco", d, diloco_kind());
}

bool in_unit(float v) { return std::isfinite(v) && v >= 0.0f && v < 1.0f; }

tc_status check_outer_rates(const char* fn, float outer_lr, float outer_momentum) {
  if (!std::isfinite(outer_lr) || outer_lr <= 0)
    return fail(TC_ERR_INVALID_ARG, "%s: outer_lr %g must be positive", fn, double(outer_lr));
  if (!in_unit(outer_momentum))
    return fail(TC_ERR_INVALID_ARG, "%s: outer_momentum %g must be in [0, 1)", fn, double(outer_momentum));
  return TC_OK;
}

tc_status check_config(const char* fn, const tc_diloco_config* c) {
  if (!c) return fail(TC_ERR_INVALID_ARG, "%s: config is null", fn);
  if (c->inner_steps < 1) return fail(TC_ERR_INVALID_ARG, "%s: inner_steps %d must be >= 1", fn, c->inner_steps);
  if (tc_status st = check_outer_rates(fn, c->outer_lr, c->outer_momentum)) return st;
  if (!in_unit(c->outer_beta2))
    return fail(TC_ERR_INVALID_ARG, "%s: outer_beta2 %g must be in [0, 1)", fn, double(c->outer_beta2));
  if (!std::isfinite(c->outer_eps) || c->outer_eps <= 0)
    return fail(TC_ERR_INVALID_ARG, "%s: outer_eps %g must be positive", fn, double(c->outer_eps));
  if (c->outer_optimizer < TC_DILOCO_OUTER_SGD || c->outer_optimizer > TC_DILOCO_OUTER_ADAM)
    return fail(TC_ERR_INVALID_ARG, "%s: unknown outer optimizer %d (sgd 0, nesterov 1, adam 2)", fn,
                c->outer_optimizer);
  if (c->compress < TC_DILOCO_COMPRESS_NONE || c->compress > TC_DILOCO_COMPRESS_SIGNSGD)
    return fail(TC_ERR_INVALID_ARG, "%s: unknown compression %d", fn, c->compress);
  if (!(kCompressSupported & (1ull << c->compress)))
    return fail(TC_ERR_UNSUPPORTED, "%s: compression %s is not implemented (none, fp16, topk_1pct, topk_01pct are)", fn,
                c->compress == TC_DILOCO_COMPRESS_FP8 ? "fp8" : c->compress == TC_DILOCO_COMPRESS_LOWRANK ? "lowrank"
                                                                                                        : "signsgd");
  if (c->async_overlap != 0 && c->async_overlap != 1)
    return fail(TC_ERR_INVALID_ARG, "%s: async_overlap must be 0 or 1 (got %d)", fn, c->async_overlap);
  if (c->tolerate_dropouts != 0 && c->tolerate_dropouts != 1)
    return fail(TC_ERR_INVALID_ARG, "%s: tolerate_dropouts must be 0 or 1 (got %d)", fn, c->tolerate_dropouts);
  if (c->tolerate_dropouts)
    return fail(TC_ERR_UNSUPPORTED, "%s: tolerate_dropouts (continuing without failed workers) is not implemented; "
                "a dead worker fails the outer step with TC_ERR_TIMEOUT", fn);
  return TC_OK;
}

tc_status check_idle(const char* fn, tc_diloco d) {
  tc_status ws;
  uint64_t rid;
  int32_t st = diloco_poll(d, &ws, &rid);
  if (st != TC_DILOCO_ASYNC_IDLE)
    return fail(TC_ERR_INVALID_ARG, "%s: an asynchronous round is %s; wait and commit it first", fn,
                st == TC_DILOCO_ASYNC_RUNNING ? "running" : "not committed");
  return TC_OK;
}

tc_status check_state_version(const char* fn, uint32_t v) {
  if (v != TC_DILOCO_STATE_ABI_VERSION_1 && v != TC_DILOCO_STATE_ABI_VERSION_2)
    return fail(TC_ERR_INVALID_ARG, "%s: state format version %u (1 or 2)", fn, v);
  return TC_OK;
}

}  // namespace

extern "C" {

tc_status tc_diloco_init(tc_dist dist, const tc_diloco_config* config, tc_diloco* out) {
  const char* fn = "tc_diloco_init";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (!dist) return fail(TC_ERR_INVALID_ARG, "%s: dist is null", fn);
    if (tc_status st = check_handle(fn, "dist", dist, dist_kind())) return st;
    if (tc_status st = check_config(fn, config)) return st;
    // The outer step runs on host vectors: an NCCL group exchanges them
    // through device scratch (as does every group under TC_DIST_DEVICE_PATH=1).
    const bool device_exchange = dist->device_memory || config::on(config::Key::kDistDevicePath);
    // Parameters in device memory (or handled as such) keep the outer
    // step's state there and run it with the backend's ops.
    const bool params_on_device = treat_as_device(*dist->ctx->backend);
    tc_diloco d = nullptr;
    if (tc_status st = diloco_create(dist, *config, device_exchange, params_on_device, &d)) return st;
    dist->live_diloco++;
    *out = register_handle(d, diloco_kind());
    return TC_OK;
  });
}

tc_status tc_diloco_finalize(tc_diloco diloco) {
  const char* fn = "tc_diloco_finalize";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    unregister_handle(diloco);
    tc_dist dist = diloco->dist;
    diloco_destroy(diloco);
    dist->live_diloco--;
    return TC_OK;
  });
}

tc_status tc_diloco_add_parameter(tc_diloco diloco, const char* name, tc_buffer theta_local, size_t num_elements,
                                  tc_dtype dtype) {
  const char* fn = "tc_diloco_add_parameter";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (!name || !*name || std::strlen(name) > 1000)
      return fail(TC_ERR_INVALID_ARG, "%s: name must be 1..1000 bytes", fn);
    if (tc_status st = check_buffer(fn, "theta_local", diloco->dist->ctx, theta_local)) return st;
    if (dtype != TC_DTYPE_F32 && dtype != TC_DTYPE_F16 && dtype != TC_DTYPE_BF16)
      return fail(TC_ERR_UNSUPPORTED_DTYPE, "%s: dtype %s (f32, f16, bf16)", fn, dtype_label(dtype).c_str());
    if (num_elements == 0 || num_elements > (size_t(1) << 40))
      return fail(TC_ERR_INVALID_SHAPE, "%s: num_elements %zu must be in 1..2^40", fn, num_elements);
    if (num_elements * dtype_size(dtype) > theta_local->size())
      return fail(TC_ERR_INVALID_ARG, "%s: '%s' needs %zu bytes but its buffer has %zu", fn, name,
                  num_elements * dtype_size(dtype), theta_local->size());
    if (diloco->total + num_elements > uint64_t(UINT32_MAX))
      return fail(TC_ERR_INVALID_SHAPE, "%s: more than 2^32-1 parameters in one DiLoCo context", fn);
    for (auto& p : diloco->params) {
      if (p.name == name) return fail(TC_ERR_INVALID_ARG, "%s: a parameter named '%s' is already registered", fn, name);
      const char* a = static_cast<const char*>(p.storage->data);
      const char* b = theta_local->bytes();
      if (a < b + num_elements * dtype_size(dtype) && b < a + p.n * dtype_size(p.dtype))
        return fail(TC_ERR_INVALID_ARG, "%s: '%s' overlaps the memory of parameter '%s'", fn, name, p.name.c_str());
    }
    // Device memory (or host memory under TC_DIST_DEVICE_PATH=1) is read and
    // written only through the backend's copies, staged through the host.
    const Backend& be = *diloco->dist->ctx->backend;
    const bool device = treat_as_device(be);
    if (device && !can_stage(be))
      return fail(TC_ERR_UNSUPPORTED, "%s: parameter '%s' is %s, which this backend cannot stage through host memory "
                  "for the outer step", fn, name, where(be).c_str());
    if (device != diloco->params_on_device)
      return fail(TC_ERR_INVALID_ARG, "%s: parameter '%s' is %s, but the DiLoCo context was created for %s "
                  "(TC_DIST_DEVICE_PATH changed in between?)", fn, name, device ? where(be).c_str() : "host memory",
                  diloco->params_on_device ? "device memory" : "host memory");
    if (tc_status st = check_idle(fn, diloco)) return st;
    return diloco_add(diloco, name, theta_local, num_elements, dtype, device);
  });
}

tc_status tc_diloco_step(tc_diloco diloco, int32_t* out_outer_pending) {
  const char* fn = "tc_diloco_step";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_out_ptr(fn, "out_outer_pending", out_outer_pending)) return st;
    diloco->inner_total++;
    diloco->since_outer++;
    *out_outer_pending = diloco->since_outer >= uint64_t(diloco->cfg.inner_steps) ? 1 : 0;
    return TC_OK;
  });
}

tc_status tc_diloco_apply_outer(tc_diloco diloco) {
  const char* fn = "tc_diloco_apply_outer";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (diloco->params.empty()) return fail(TC_ERR_INVALID_ARG, "%s: no parameters are registered", fn);
    return diloco_apply_outer(diloco);
  });
}

tc_status tc_diloco_async_poll(tc_diloco diloco, int32_t* out_state, int32_t* out_worker_status,
                               uint64_t* out_round_id) {
  const char* fn = "tc_diloco_async_poll";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_out_ptr(fn, "out_state", out_state)) return st;
    tc_status ws;
    uint64_t rid;
    int32_t s = diloco_poll(diloco, &ws, &rid);
    *out_state = s;
    if (out_worker_status) *out_worker_status = ws;
    if (out_round_id) *out_round_id = rid;
    return TC_OK;
  });
}

tc_status tc_diloco_async_wait(tc_diloco diloco) {
  const char* fn = "tc_diloco_async_wait";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    return diloco_wait(diloco);
  });
}

tc_status tc_diloco_async_commit(tc_diloco diloco) {
  const char* fn = "tc_diloco_async_commit";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    return diloco_commit(diloco);
  });
}

tc_status tc_diloco_capability_query(tc_diloco diloco, uint32_t abi_version, struct tc_diloco_capabilities* out) {
  const char* fn = "tc_diloco_capability_query";
  return guarded(fn, [&] {
    if (diloco)
      if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (abi_version != TC_DILOCO_CAPABILITIES_ABI_VERSION_1)
      return fail(TC_ERR_INVALID_ARG, "%s: capabilities ABI version %u (this library knows 1)", fn, abi_version);
    if (out->struct_size < sizeof(struct tc_diloco_capabilities))
      return fail(TC_ERR_INVALID_ARG, "%s: struct_size %u is smaller than %zu", fn, out->struct_size,
                  sizeof(struct tc_diloco_capabilities));
    std::memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->abi_version = TC_DILOCO_CAPABILITIES_ABI_VERSION_1;
    out->state_abi_version_min = TC_DILOCO_STATE_ABI_VERSION_MIN;
    out->state_abi_version_max = TC_DILOCO_STATE_ABI_VERSION_2;
    out->state_abi_version_current = TC_DILOCO_STATE_ABI_VERSION_CURRENT;
    out->state_header_size = TC_DILOCO_STATE_V2_HEADER_SIZE;
    out->state_payload_digest_bytes = TC_DILOCO_STATE_V2_DIGEST_BYTES;
    out->outer_optimizer_supported_mask = kOptimizers;
    out->outer_optimizer_serializable_mask = kOptimizers;
    out->compress_supported_mask = kCompressSupported;
    out->compress_serializable_mask = kCompressSupported;
    out->compress_sparse_wire_mask = kCompressSparse;
    out->state_feature_mask = kStateFeatures;
    out->async_overlap_supported = 1;
    out->async_state_serializable = 0;
    out->tolerate_dropouts_supported = 0;
    if (diloco && diloco->comm->size() == 1) out->compress_sparse_wire_mask = 0;  // nothing goes on a wire
    return TC_OK;
  });
}

tc_status tc_diloco_set_outer_hyperparameters(tc_diloco diloco, float outer_lr, float outer_momentum) {
  const char* fn = "tc_diloco_set_outer_hyperparameters";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_outer_rates(fn, outer_lr, outer_momentum)) return st;
    // The round in flight reads the config from its own thread.
    if (tc_status st = check_idle(fn, diloco)) return st;
    diloco->cfg.outer_lr = outer_lr;
    diloco->cfg.outer_momentum = outer_momentum;
    return TC_OK;
  });
}

tc_status tc_diloco_state_set_epochs(tc_diloco diloco, uint64_t topology_epoch, uint64_t membership_epoch) {
  const char* fn = "tc_diloco_state_set_epochs";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_idle(fn, diloco)) return st;
    diloco->topology_epoch = topology_epoch;
    diloco->membership_epoch = membership_epoch;
    return TC_OK;
  });
}

tc_status tc_diloco_state_get_epochs(tc_diloco diloco, uint64_t* out_topology_epoch, uint64_t* out_membership_epoch) {
  const char* fn = "tc_diloco_state_get_epochs";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_out_ptr(fn, "out_topology_epoch", out_topology_epoch)) return st;
    if (tc_status st = check_out_ptr(fn, "out_membership_epoch", out_membership_epoch)) return st;
    *out_topology_epoch = diloco->topology_epoch;
    *out_membership_epoch = diloco->membership_epoch;
    return TC_OK;
  });
}

tc_status tc_diloco_state_size(tc_diloco diloco, uint32_t abi_version, size_t* out) {
  const char* fn = "tc_diloco_state_size";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (tc_status st = check_state_version(fn, abi_version)) return st;
    if (tc_status st = check_idle(fn, diloco)) return st;
    *out = diloco_state_size(diloco, abi_version);
    return TC_OK;
  });
}

tc_status tc_diloco_state_serialize(tc_diloco diloco, uint32_t abi_version, void* out, size_t capacity,
                                    size_t* out_written) {
  const char* fn = "tc_diloco_state_serialize";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (tc_status st = check_state_version(fn, abi_version)) return st;
    if (tc_status st = check_idle(fn, diloco)) return st;
    size_t need = diloco_state_size(diloco, abi_version);
    if (capacity < need) return fail(TC_ERR_INVALID_ARG, "%s: capacity %zu < %zu bytes needed", fn, capacity, need);
    if (tc_status st = diloco_state_write(diloco, abi_version, static_cast<uint8_t*>(out))) return st;
    if (out_written) *out_written = need;
    return TC_OK;
  });
}

tc_status tc_diloco_state_deserialize(tc_diloco diloco, uint32_t abi_version, const void* blob, size_t nbytes) {
  const char* fn = "tc_diloco_state_deserialize";
  return guarded(fn, [&] {
    if (tc_status st = check_diloco(fn, diloco)) return st;
    if (!blob && nbytes) return fail(TC_ERR_INVALID_ARG, "%s: blob is null", fn);
    if (tc_status st = check_state_version(fn, abi_version)) return st;
    if (tc_status st = check_idle(fn, diloco)) return st;
    return diloco_state_read(diloco, abi_version, static_cast<const uint8_t*>(blob), nbytes);
  });
}

#define TC_DILOCO_GETTER(name, type, expr)                             \
  tc_status name(tc_diloco diloco, type* out) {                        \
    return guarded(#name, [&] {                                        \
      if (tc_status st = check_diloco(#name, diloco)) return st;       \
      if (tc_status st = check_out_ptr(#name, "out", out)) return st;  \
      *out = diloco->expr;                                             \
      return TC_OK;                                                    \
    });                                                                \
  }
TC_DILOCO_GETTER(tc_diloco_outer_steps_completed, uint64_t, outer_completed)
TC_DILOCO_GETTER(tc_diloco_inner_steps_completed, uint64_t, inner_total)
TC_DILOCO_GETTER(tc_diloco_last_outer_step_seconds, double, last_seconds)
TC_DILOCO_GETTER(tc_diloco_last_outer_bytes_sent, double, last_bytes)
#undef TC_DILOCO_GETTER

}  // extern "C"
