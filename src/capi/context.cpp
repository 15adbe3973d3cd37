#include "tensorcore/context.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "capi/api.h"
#include "core/config.h"
#include "cpu/thread_pool.h"
#include "dist/capabilities.h"

using namespace tc;
using namespace tc::capi;

namespace {

// Every capability bit this library version defines, one area a line.
constexpr uint64_t kKnownCapabilities = 0
    | TC_CAPABILITY_GEMM_F32 | TC_CAPABILITY_GEMM_F16 | TC_CAPABILITY_GEMM_BF16 | TC_CAPABILITY_GEMM_I8
    | TC_CAPABILITY_GEMM_BATCHED | TC_CAPABILITY_STREAMS | TC_CAPABILITY_GEMM_TF32
    | TC_CAPABILITY_CHECKPOINT | TC_CAPABILITY_MEMORY_TIERS
    | TC_CAPABILITY_DIST_GLOO | TC_CAPABILITY_DIST_NCCL | TC_CAPABILITY_DILOCO
    | TC_CAPABILITY_CONV2D
    | TC_CAPABILITY_ATTENTION | TC_CAPABILITY_ATTENTION_BACKWARD
    | TC_CAPABILITY_TRAINING_KERNELS
    | TC_CAPABILITY_QUANTIZED | TC_CAPABILITY_GGUF  // quantized, gguf
    ;

// "name" or "name:N" of a registered backend (core/ops.cpp) into its kind
// and device index.
tc_status parse_device(const char* fn, const std::string& spec, const BackendKind** kind, int* index) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  *index = 0;
  if (colon != std::string::npos) {
    const std::string n = spec.substr(colon + 1);
    if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos)
      return fail(TC_ERR_INVALID_ARG, "%s: unknown device '%s' (expected cpu, cuda or cuda:N)", fn, spec.c_str());
    *index = std::atoi(n.c_str());
  }
  for (const BackendKind& k : backend_kinds())
    if (name == k.name) {
      *kind = &k;
      return TC_OK;
    }
  return fail(TC_ERR_INVALID_ARG, "%s: unknown device '%s' (expected cpu, cuda or cuda:N)", fn, spec.c_str());
}

tc_status create(const char* fn, const char* device, tc_context* out) {
  if (tc_status st = check_out_ptr(fn, "out", out)) return st;
  std::string spec = device ? device : "";
  if (spec.empty()) {
    spec = config::text(config::Key::kDevice);
  }
  std::unique_ptr<Backend> backend;
  if (spec.empty()) {  // the first registered backend with a usable device
    for (const BackendKind& k : backend_kinds())
      if (!backend && k.device_count() > 0) backend = k.make(0);
  } else {
    const BackendKind* kind = nullptr;
    int index = 0;
    if (tc_status st = parse_device(fn, spec, &kind, &index)) return st;
    const int count = kind->device_count();
    if (index >= count)
      return fail(TC_ERR_NO_DEVICE, "%s: device '%s' requested but %d %s device(s) are usable%s", fn, spec.c_str(),
                  count, kind->name, count == 0 ? " (not built with it, or none present)" : "");
    backend = kind->make(index);
    if (!backend)
      return last_status() != TC_OK ? last_status() : fail(TC_ERR_NO_DEVICE, "%s: %s init failed", fn, spec.c_str());
  }
  if (!backend) return fail(TC_ERR_NO_DEVICE, "%s: no backend has a usable device", fn);
  auto* ctx = new tc_context_s();
  ctx->backend = std::move(backend);
  // TC_DISABLE_CUDA_GEMM=1, TC_CUDA_GEMM=0 or TC_USE_CUDA_GEMM=0 run a GPU
  // context's GEMMs on the CPU backend over host copies (capi/gemm.cpp).
  using config::Key;
  ctx->gemm_on_host = !ctx->backend->host_accessible() && (config::on(Key::kDisableCudaGemm) ||
                                                           !config::on(Key::kCudaGemm) || !config::on(Key::kUseCudaGemm));
  *out = register_handle(ctx, context_kind());
  return TC_OK;
}

}  // namespace

extern "C" {

tc_status tc_init(tc_context* out) {
  return guarded("tc_init", [&] { return create("tc_init", nullptr, out); });
}

tc_status tc_init_device(const char* device, tc_context* out) {
  return guarded("tc_init_device", [&] { return create("tc_init_device", device, out); });
}

tc_status tc_shutdown(tc_context ctx) {
  return guarded("tc_shutdown", [&] {
    if (tc_status st = check_context("tc_shutdown", ctx)) return st;
    int64_t nb = ctx->live_buffers.load(), ns = ctx->live_streams.load();
    if (nb || ns)
      return fail(TC_ERR_INVALID_ARG, "tc_shutdown: context still has %lld live buffer(s) and %lld stream(s)",
                  (long long)nb, (long long)ns);
    // -- dist: groups keep the context's device and buffers --------------------
    if (int64_t nd = ctx->live_dists.load())
      return fail(TC_ERR_INVALID_ARG, "tc_shutdown: context still has %lld live distributed group(s)", (long long)nd);
    unregister_handle(ctx);
    delete ctx;
    return TC_OK;
  });
}

tc_status tc_device_info(tc_context ctx, struct tc_device_info* out) {
  return guarded("tc_device_info", [&] {
    if (tc_status st = check_context("tc_device_info", ctx)) return st;
    if (tc_status st = check_out_ptr("tc_device_info", "out", out)) return st;
    ctx->backend->device_info(out);
    return TC_OK;
  });
}

tc_status tc_runtime_capabilities(tc_context ctx, struct tc_runtime_capabilities* out) {
  return guarded("tc_runtime_capabilities", [&] {
    if (tc_status st = check_context("tc_runtime_capabilities", ctx)) return st;
    if (tc_status st = check_out_ptr("tc_runtime_capabilities", "out", out)) return st;
    if (out->struct_size < sizeof(struct tc_runtime_capabilities))
      return fail(TC_ERR_INVALID_ARG, "tc_runtime_capabilities: struct_size %u is smaller than %zu",
                  out->struct_size, sizeof(struct tc_runtime_capabilities));
    out->struct_size = sizeof(struct tc_runtime_capabilities);
    out->version = TC_CAPABILITIES_VERSION;
    out->known = kKnownCapabilities;
    out->available = (op_capabilities(*ctx->backend) | ctx->backend->extra_capabilities()) & kKnownCapabilities;
    // Checkpointing is core code that runs on every backend; tiers need the backend's copies.
    out->available |= TC_CAPABILITY_CHECKPOINT;
    if (ctx->backend->supports_tiers()) out->available |= TC_CAPABILITY_MEMORY_TIERS;
    out->available |= dist::available_capabilities(ctx) & kKnownCapabilities;  // -- dist --
    return TC_OK;
  });
}

tc_status tc_cpu_run_inline(int32_t on) {
  cpu::set_run_inline(on != 0);
  return ok();
}

int32_t tc_capability_available(const struct tc_runtime_capabilities* caps, uint64_t capability) {
  if (!caps || capability == 0 || (capability & (capability - 1)) != 0) return 0;
  return (caps->known & capability) && (caps->available & capability) ? 1 : 0;
}

}  // extern "C"
