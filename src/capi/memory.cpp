// C entry points of tensorcore/memory.h: validation of tier and checkpoint
// calls, then core/tiers and core/checkpoint do the work.
#include "tensorcore/memory.h"

#include "capi/api.h"
#include "core/checkpoint.h"
#include "core/tiers.h"
#include "tensorcore/diagnostics.h"

using namespace tc;
using namespace tc::capi;

namespace {

// A tier argument: unknown values are INVALID_ARG, L2/L4 UNSUPPORTED.
tc_status check_tier(const char* fn, int32_t tier) {
  if (tier < TC_TIER_L0_DEVICE || tier > TC_TIER_L4_REMOTE_NVME)
    return fail(TC_ERR_INVALID_ARG, "%s: tier %d is not a TC_TIER_* value (0..4)", fn, tier);
  if (!tiers::tier_implemented(tier))
    return fail(TC_ERR_UNSUPPORTED, "%s: tier %s needs a remote memory runtime, which this build does not have", fn,
                tiers::tier_name(tier));
  return TC_OK;
}

tc_status check_tiers_supported(const char* fn, tc_context ctx) {
  if (!ctx->backend->supports_tiers())
    return fail(TC_ERR_UNSUPPORTED, "%s: the %s backend does not implement memory tiers", fn,
                tc_backend_name(ctx->backend->kind()));
  return TC_OK;
}

tc_status move(const char* fn, tc_buffer& buf, tc_memory_tier target, tc_stream stream, bool promote) {
  if (tc_status st = check_buffer_handle(fn, "buf", nullptr, buf)) return st;
  if (tc_status st = check_tier(fn, target)) return st;
  if (stream)
    if (tc_status st = check_stream(fn, buf->ctx, stream)) return st;
  if (tc_status st = check_tiers_supported(fn, buf->ctx)) return st;
  if (!buf->storage->owned)
    return fail(TC_ERR_INVALID_ARG, "%s: the buffer wraps caller memory (tc_buffer_from_ptr) and cannot move between "
                "tiers", fn);
  return tiers::move(fn, buf, target, promote, stream ? stream->queue.get() : nullptr);
}

tc_status check_budget_context(const char* fn, tc_context& ctx) {
  if (tc_status st = check_context(fn, ctx)) return st;
  return check_tiers_supported(fn, ctx);
}

}  // namespace

extern "C" {

tc_status tc_buffer_set_tier_hint(tc_buffer buf, tc_tier_hint hint) {
  return guarded("tc_buffer_set_tier_hint", [&] {
    if (tc_status st = check_buffer_handle("tc_buffer_set_tier_hint", "buf", nullptr, buf)) return st;
    if (hint < TC_TIER_HINT_HOT || hint > TC_TIER_HINT_ICE)
      return fail(TC_ERR_INVALID_ARG, "tc_buffer_set_tier_hint: hint %d is not a TC_TIER_HINT_* value (0..3)", hint);
    buf->storage.state()->hint = hint;
    return TC_OK;
  });
}

tc_status tc_buffer_get_tier(tc_buffer buf, tc_memory_tier* out) {
  return guarded("tc_buffer_get_tier", [&] {
    const char* fn = "tc_buffer_get_tier";
    if (tc_status st = check_buffer_handle(fn, "buf", nullptr, buf)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    if (tiers::is_discarded(buf))
      return fail(TC_ERR_INVALID_ARG, "%s: the buffer has no bytes in any tier: checkpoint %llu discarded it", fn,
                  (unsigned long long)buf->storage.state()->checkpoint_id.load());
    *out = tiers::current_tier(buf);
    return TC_OK;
  });
}

tc_status tc_buffer_promote_async(tc_buffer buf, tc_memory_tier target_tier, tc_stream stream) {
  return guarded("tc_buffer_promote_async",
                 [&] { return move("tc_buffer_promote_async", buf, target_tier, stream, true); });
}

tc_status tc_buffer_demote_async(tc_buffer buf, tc_memory_tier target_tier, tc_stream stream) {
  return guarded("tc_buffer_demote_async",
                 [&] { return move("tc_buffer_demote_async", buf, target_tier, stream, false); });
}

tc_status tc_buffer_tier_sync(tc_buffer buf) {
  return guarded("tc_buffer_tier_sync", [&] {
    if (tc_status st = check_buffer_handle("tc_buffer_tier_sync", "buf", nullptr, buf)) return st;
    return tiers::sync(buf);
  });
}

tc_status tc_memory_tier_usage(tc_context ctx, tc_memory_tier tier, uint64_t* out_bytes_resident,
                               uint64_t* out_bytes_capacity) {
  return guarded("tc_memory_tier_usage", [&] {
    const char* fn = "tc_memory_tier_usage";
    if (tc_status st = check_context(fn, ctx)) return st;
    if (tc_status st = check_tier(fn, tier)) return st;
    return tiers::usage(ctx, tier, out_bytes_resident, out_bytes_capacity);
  });
}

tc_status tc_context_set_memory_budget(tc_context ctx, uint64_t device_bytes) {
  return guarded("tc_context_set_memory_budget", [&] {
    if (tc_status st = check_budget_context("tc_context_set_memory_budget", ctx)) return st;
    ctx->tiers.device_budget = device_bytes;
    return TC_OK;
  });
}

tc_status tc_context_set_host_memory_budget(tc_context ctx, uint64_t host_bytes) {
  return guarded("tc_context_set_host_memory_budget", [&] {
    if (tc_status st = check_budget_context("tc_context_set_host_memory_budget", ctx)) return st;
    ctx->tiers.host_budget = host_bytes;
    return TC_OK;
  });
}

tc_status tc_context_set_spill_dir(tc_context ctx, const char* path) {
  return guarded("tc_context_set_spill_dir", [&] {
    if (tc_status st = check_context("tc_context_set_spill_dir", ctx)) return st;
    ctx->tiers.set_spill_dir(path ? path : "");
    return TC_OK;
  });
}

tc_status tc_checkpoint_register(tc_buffer buf, tc_checkpoint_recompute_fn recompute_fn, void* user_data,
                                 tc_checkpoint_id* out_id) {
  return guarded("tc_checkpoint_register", [&] {
    const char* fn = "tc_checkpoint_register";
    if (tc_status st = check_buffer_handle(fn, "buf", nullptr, buf)) return st;
    if (!recompute_fn) return fail(TC_ERR_INVALID_ARG, "%s: recompute_fn is null", fn);
    if (tc_status st = check_out_ptr(fn, "out_id", out_id)) return st;
    if (!buf->storage->owned)
      return fail(TC_ERR_INVALID_ARG, "%s: the buffer wraps caller memory (tc_buffer_from_ptr); only buffers "
                  "tensorcore allocated can be discarded and reallocated", fn);
    uint64_t id = 0;
    if (tc_status st = checkpoint::register_buffer(buf, recompute_fn, user_data, &id)) return st;
    *out_id = id;
    return TC_OK;
  });
}

tc_status tc_checkpoint_discard(tc_checkpoint_id id) {
  return guarded("tc_checkpoint_discard", [&] { return checkpoint::discard(id); });
}

tc_status tc_checkpoint_realize(tc_checkpoint_id id) {
  return guarded("tc_checkpoint_realize", [&] { return checkpoint::realize(id); });
}

int32_t tc_checkpoint_is_resident(tc_checkpoint_id id) { return checkpoint::is_resident(id) ? 1 : 0; }

tc_status tc_checkpoint_unregister(tc_checkpoint_id id) {
  return guarded("tc_checkpoint_unregister", [&] { return checkpoint::unregister(id); });
}

uint64_t tc_checkpoint_total_bytes_discarded(void) { return checkpoint::bytes_discarded(); }
uint64_t tc_checkpoint_count_resident(void) { return checkpoint::count_resident(); }
uint64_t tc_checkpoint_count_discarded(void) { return checkpoint::count_discarded(); }

}  // extern "C"
