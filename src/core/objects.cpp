#include "core/objects.h"

#include "core/checkpoint.h"
#include "core/error.h"
#include "quant/formats.h"
#include "tensorcore/diagnostics.h"

#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace tc {
namespace {

thread_local tc_backend t_last_backend = TC_BACKEND_NONE;
thread_local std::string t_last_cuda_kernel;

}  // namespace

void note_backend(tc_backend backend) { t_last_backend = backend; }
tc_backend last_backend() { return t_last_backend; }
void note_cuda_kernel(const char* name) { t_last_cuda_kernel = name ? name : ""; }
const char* last_cuda_kernel() { return t_last_cuda_kernel.c_str(); }

tc_buffer_s* new_buffer(tc_context_s* ctx, StorageRef storage, const void* owner) {
  auto* b = new tc_buffer_s();
  b->ctx = ctx;
  b->storage = std::move(storage);
  b->owner = owner;
  ctx->live_buffers++;
  tiers::on_create(b);
  register_handle(b, buffer_kind());
  return b;
}

tc_status allocate_buffer(tc_context_s* ctx, size_t nbytes, const void* owner, tc_buffer_s** out) {
  StorageRef storage;
  if (tc_status st = tiers::allocate(ctx, TC_TIER_L0_DEVICE, nbytes, &storage)) return st;
  *out = new_buffer(ctx, std::move(storage), owner);
  return TC_OK;
}

tc_status delete_buffer(tc_buffer_s* buf) {
  if (tc_status st = checkpoint::forget_buffer(buf)) return st;
  tiers::on_free(buf);
  unregister_handle(buf);
  buf->ctx->live_buffers--;
  delete buf;
  return TC_OK;
}

tc_status Backend::no_kernel(const OpInfo& info) const {
  const char* backend = kind() == TC_BACKEND_CUDA ? "CUDA" : tc_backend_name(kind());
  return fail(TC_ERR_UNSUPPORTED, "%s has no %s kernel in this build", info.name, backend);
}

void Backend::make_rows8(int32_t fmt, const void* src, int64_t N, int64_t K, void* dst) {
  quant::repack_rows8(fmt, src, N, K, dst);
}

// Graphs (Backend::begin_capture): none unless a backend has them.
tc_status Backend::begin_capture(Queue*) {
  return fail(TC_ERR_UNSUPPORTED, "graph capture: the %s backend has no graphs", tc_backend_name(kind()));
}
tc_status Backend::end_capture(Queue*, std::unique_ptr<Graph>*) {
  return fail(TC_ERR_UNSUPPORTED, "graph capture: the %s backend has no graphs", tc_backend_name(kind()));
}
tc_status Backend::replay(Graph&, Queue*) {
  return fail(TC_ERR_UNSUPPORTED, "graph replay: the %s backend has no graphs", tc_backend_name(kind()));
}

Storage::~Storage() {
  if (owned && data && backend) {
    if (tier == TC_TIER_L1_HOST_RAM) backend->release_host(data);
    else backend->release(data);
  }
  if (!path.empty()) ::unlink(path.c_str());  // L3 spill file
  if (accounts && tier >= 0 && tier < kTierCount) accounts->bytes[tier] -= size;
}

}  // namespace tc
