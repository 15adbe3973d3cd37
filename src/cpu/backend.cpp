// The portable CPU backend: host memory, worker-thread streams, and the
// kernels of src/cpu.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/backend.h"
#include "cpu/cpu_features.h"
#include "cpu/ops.h"
#include "cpu/queue.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace {

class CpuBackend final : public Backend {
 public:
  tc_backend kind() const override { return TC_BACKEND_PORTABLE_CPU; }

  void device_info(struct tc_device_info* out) const override {
    std::memset(out, 0, sizeof *out);
    std::snprintf(out->name, sizeof out->name, "%s", cpu::processor_name().c_str());
    std::snprintf(out->family, sizeof out->family, "cpu");
    std::snprintf(out->features, sizeof out->features, "%s", cpu::features_string().c_str());
    out->backend = TC_BACKEND_PORTABLE_CPU;
    out->device_index = 0;
    out->compute_units = cpu::num_threads();
    out->compute_capability = 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  }

  uint64_t available_capabilities() const override {
    return TC_CAPABILITY_GEMM_F32 | TC_CAPABILITY_GEMM_F16 | TC_CAPABILITY_GEMM_BF16 | TC_CAPABILITY_GEMM_I8 |
           TC_CAPABILITY_GEMM_BATCHED | TC_CAPABILITY_STREAMS |
           // training kernels
           TC_CAPABILITY_TRAINING_KERNELS |
           // conv2d
           TC_CAPABILITY_CONV2D |
           // attention
           TC_CAPABILITY_ATTENTION | TC_CAPABILITY_ATTENTION_BACKWARD |
           // quantized, gguf
           TC_CAPABILITY_QUANTIZED | TC_CAPABILITY_GGUF;
  }

  // Host memory as the L1 tier gets it (core/tiers.cpp): 2 MiB aligned with
  // transparent huge pages from 2 MiB up. GEMM reads its operands through
  // the TLB; OpenBLAS's sgemm ran ~5% slower on 4 KiB pages than on the huge
  // pages NumPy asks for its own arrays (bench/results/gemm-cpu.md).
  void* alloc(size_t nbytes) override { return alloc_host(nbytes); }
  void release(void* ptr) override { release_host(ptr); }
  bool host_accessible() const override { return true; }
  tc_status copy_in(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return TC_OK;
  }
  tc_status copy_out(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return TC_OK;
  }

  std::unique_ptr<Queue> create_queue() override { return std::make_unique<cpu::WorkQueue>(); }

  tc_status gemm(const GemmArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::gemm); }

  // ---- Training kernels
  tc_status rmsnorm_forward(const RmsNormForwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::rmsnorm_forward);
  }
  tc_status rmsnorm_backward(const RmsNormBackwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::rmsnorm_backward);
  }
  tc_status layernorm_forward(const LayerNormForwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::layernorm_forward);
  }
  tc_status layernorm_backward(const LayerNormBackwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::layernorm_backward);
  }
  tc_status rope(const RopeArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::rope); }
  tc_status swiglu_forward(const SwigluForwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::swiglu_forward);
  }
  tc_status swiglu_backward(const SwigluBackwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::swiglu_backward);
  }
  tc_status softmax_forward(const SoftmaxForwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::softmax_forward);
  }
  tc_status softmax_backward(const SoftmaxBackwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::softmax_backward);
  }
  tc_status adamw_step(const AdamwArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::adamw_step); }
  tc_status fused_norm_gemv(const FusedNormGemvArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::fused_norm_gemv);
  }
  // ---- end of training kernels

  // ---- Memory tiers (core/tiers.h) -------------------------------------------
  // L0 and L1 are both RAM here (separately budgeted); a move on a stream
  // runs on the stream's worker thread, in order with its ops.
  bool supports_tiers() const override { return true; }
  tc_status copy_async(void* dst, const void* src, size_t n, bool, Queue* q) override {
    if (!q) return copy_parallel(dst, src, n);
    static_cast<cpu::WorkQueue*>(q)->enqueue([dst, src, n] { return copy_parallel(dst, src, n); });
    return TC_OK;
  }
  // Large copies in 1 MiB pieces on the pool: the target's first-touch page
  // faults dominate, and they run in parallel.
  static tc_status copy_parallel(void* dst, const void* src, size_t n) {
    constexpr int64_t kPiece = 1 << 20;
    cpu::parallel_for(int64_t((n + kPiece - 1) / kPiece), 4, [&](int64_t b, int64_t e) {
      size_t lo = size_t(b) * kPiece, hi = std::min(n, size_t(e) * kPiece);
      std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
    });
    return TC_OK;
  }
  tc_status run_host(Queue* q, std::function<tc_status()> fn) override {
    if (!q) return fn();
    static_cast<cpu::WorkQueue*>(q)->enqueue(std::move(fn));
    return TC_OK;
  }

  // conv2d
  tc_status conv2d_forward(const Conv2dForwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::conv2d_forward);
  }
  tc_status conv2d_backward_input(const Conv2dBackwardInputArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::conv2d_backward_input);
  }
  tc_status conv2d_backward_weight(const Conv2dBackwardWeightArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::conv2d_backward_weight);
  }
  // end conv2d
  // ---- attention ----
  tc_status attention_forward(const AttentionArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::attention_forward);
  }
  tc_status attention_backward(const AttentionBackwardArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::attention_backward);
  }
  // ---- end attention ----

  // quantized
  tc_status quantize_weights(const QuantizeWeightsArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::quantize_weights);
  }
  tc_status dequantize_weights(const DequantizeWeightsArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::dequantize_weights);
  }
  tc_status gemv_quantized(const GemvQuantizedArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::gemv_quantized);
  }
  tc_status fused_rmsnorm_gemv_quantized(const GemvQuantizedArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::fused_rmsnorm_gemv_quantized);
  }
  // end quantized

  // ---- model ops
  tc_status embed_rows(const EmbedRowsArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::embed_rows); }
  tc_status add(const AddArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::add); }
  tc_status convert(const ConvertArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::convert); }
  tc_status rope_kv_append(const RopeKvAppendArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::rope_kv_append);
  }
  tc_status heads_to_tokens(const HeadsToTokensArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::heads_to_tokens);
  }
  tc_status decode_attention(const DecodeAttentionArgs& a, Queue* q) override {
    return cpu::run_on(q, a, cpu::decode_attention);
  }
  tc_status quantize_q8(const QuantizeQ8Args& a, Queue* q) override { return cpu::run_on(q, a, cpu::quantize_q8); }
  tc_status gemv_q8(const GemvQ8Args& a, Queue* q) override { return cpu::run_on(q, a, cpu::gemv_q8); }
  tc_status repack_q8(const RepackQ8Args& a, Queue* q) override { return cpu::run_on(q, a, cpu::repack_q8); }
  tc_status copy_2d(const Copy2dArgs& a, Queue* q) override { return cpu::run_on(q, a, cpu::copy_2d); }
  // ---- end model ops
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tc
