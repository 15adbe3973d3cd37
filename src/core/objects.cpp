#include "core/objects.h"

#include "core/error.h"
#include "tensorcore/diagnostics.h"

#include <unistd.h>

#include <mutex>
#include <string>
#include <unordered_map>

namespace tc {
namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}
std::unordered_map<const void*, HandleKind>& registry() {
  static auto* map = new std::unordered_map<const void*, HandleKind>();  // outlives static destructors
  return *map;
}

thread_local tc_backend t_last_backend = TC_BACKEND_NONE;
thread_local std::string t_last_cuda_kernel;

}  // namespace

void register_handle(const void* h, HandleKind kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[h] = kind;
}

void unregister_handle(const void* h) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(h);
}

bool is_live_handle(const void* h, HandleKind kind) {
  if (!h) return false;
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(h);
  return it != registry().end() && it->second == kind;
}

void note_backend(tc_backend backend) { t_last_backend = backend; }
tc_backend last_backend() { return t_last_backend; }
void note_cuda_kernel(const char* name) { t_last_cuda_kernel = name ? name : ""; }
const char* last_cuda_kernel() { return t_last_cuda_kernel.c_str(); }

tc_status Backend::no_kernel(const OpInfo& info) const {
  const char* backend = kind() == TC_BACKEND_CUDA ? "CUDA" : tc_backend_name(kind());
  return fail(TC_ERR_UNSUPPORTED, "%s has no %s kernel in this build", info.name, backend);
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
