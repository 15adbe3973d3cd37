// The CUDA backend: device memory from cudaMalloc, streams that are CUDA
// streams. A synchronous op runs on the context's own stream and waits for
// it; an `_async` op is enqueued on the caller's stream and returns at once.
// An op without a CUDA kernel returns TC_ERR_UNSUPPORTED rather than running
// elsewhere.
#include <cuda_runtime.h>


#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/config.h"
#include "core/error.h"
#include "core/objects.h"
#include "core/trace.h"
#include "cpu/ops.h"
#include "cuda/device.h"

namespace tc {
namespace {

void fill_device_info(const cudaDeviceProp& p, int index, struct tc_device_info* out) {
  std::memset(out, 0, sizeof *out);
  std::snprintf(out->name, sizeof out->name, "%s", p.name);
  const char* family = p.major == 9 ? "hopper" : p.major == 8 ? "ampere" : p.major >= 10 ? "blackwell" : "cuda";
  std::snprintf(out->family, sizeof out->family, "%s", family);
  std::snprintf(out->features, sizeof out->features, "sm_%d%d", p.major, p.minor);
  out->backend = TC_BACKEND_CUDA;
  out->device_index = index;
  out->compute_units = p.multiProcessorCount;
  out->compute_capability = p.major * 10 + p.minor;
  out->memory_bytes = p.totalGlobalMem;
}

// TC_DISABLE_CUDA_GEMM=1, TC_CUDA_GEMM=0 or TC_USE_CUDA_GEMM=0 (read when a
// context is created) run its GEMMs on the CPU backend instead of cuBLASLt.
bool cuda_gemm_disabled() {
  using config::Key;
  return config::on(Key::kDisableCudaGemm) || !config::on(Key::kCudaGemm) || !config::on(Key::kUseCudaGemm);
}

class CudaQueue final : public Queue {
 public:
  explicit CudaQueue(cuda::Device& dev) : dev_(dev) { dev_.init_stream(&state_); }
  ~CudaQueue() override { dev_.destroy_stream(&state_); }

  tc_status sync(std::string* detail) override {
    cudaSetDevice(dev_.index());
    cudaError_t err = cudaStreamSynchronize(state_.stream);
    dev_.collect();
    if (err == cudaSuccess) return TC_OK;
    if (detail)
      *detail = std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ") after kernel " +
                (state_.last_kernel.empty() ? "<none>" : state_.last_kernel);
    return TC_ERR_DISPATCH;
  }
  cuda::StreamState* state() { return &state_; }
  // While a graph is being captured on the stream, ops are recorded, not
  // run: no events may be recorded behind them nor queried (the storage of a
  // captured op belongs to whoever replays the graph).
  bool capturing = false;

 private:
  cuda::Device& dev_;
  cuda::StreamState state_;
};

// A captured stream's work, instantiated once and launched per replay.
class CudaGraph final : public Graph {
 public:
  CudaGraph(int device, cudaGraph_t graph, cudaGraphExec_t exec) : device_(device), graph_(graph), exec_(exec) {}
  ~CudaGraph() override {
    cudaSetDevice(device_);
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  int device_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : dev_(device), gemm_on_cpu_(cuda_gemm_disabled()) {}

  tc_backend kind() const override { return TC_BACKEND_CUDA; }

  void device_info(struct tc_device_info* out) const override { fill_device_info(dev_.props(), dev_.index(), out); }

  uint64_t available_capabilities() const override {
    return TC_CAPABILITY_GEMM_F32 | TC_CAPABILITY_GEMM_F16 | TC_CAPABILITY_GEMM_BF16 | TC_CAPABILITY_GEMM_I8 |
           TC_CAPABILITY_GEMM_BATCHED | TC_CAPABILITY_STREAMS | TC_CAPABILITY_GEMM_TF32 |
           TC_CAPABILITY_ATTENTION | TC_CAPABILITY_QUANTIZED | TC_CAPABILITY_ATTENTION_BACKWARD | TC_CAPABILITY_TRAINING_KERNELS |
           // gguf: files load into device buffers by copy
           TC_CAPABILITY_GGUF |
           // conv2d
           TC_CAPABILITY_CONV2D;
  }

  void* alloc(size_t nbytes) override {
    cudaSetDevice(dev_.index());
    dev_.collect();
    void* p = nullptr;
    if (cudaMalloc(&p, nbytes) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void release(void* ptr) override {
    cudaSetDevice(dev_.index());
    cudaFree(ptr);
  }
  bool host_accessible() const override { return false; }
  bool accepts_pointer(const void* ptr, size_t) const override {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
      cudaGetLastError();
      attr.type = cudaMemoryTypeUnregistered;
    }
    if (attr.type == cudaMemoryTypeDevice && attr.device == dev_.index()) return true;
    fail(TC_ERR_INVALID_ARG, "tc_buffer_from_ptr: %p is not device memory of CUDA device %d", ptr, dev_.index());
    return false;
  }
  tc_status copy_in(void* dst, const void* src, size_t n) override { return cuda::copy_to_device(dev_, dst, src, n); }
  tc_status copy_out(void* dst, const void* src, size_t n) override {
    return cuda::copy_from_device(dev_, dst, src, n);
  }

  std::unique_ptr<Queue> create_queue() override { return std::make_unique<CudaQueue>(dev_); }

  tc_status gemm(const GemmArgs& a, Queue* q) override {
    return gemm_on_cpu_ ? gemm_on_cpu(a, q) : launch(a, q, cuda::gemm);
  }
  tc_status conv2d_forward(const Conv2dForwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::conv2d_forward);
  }
  tc_status conv2d_backward_input(const Conv2dBackwardInputArgs& a, Queue* q) override {
    return launch(a, q, cuda::conv2d_backward_input);
  }
  tc_status conv2d_backward_weight(const Conv2dBackwardWeightArgs& a, Queue* q) override {
    return launch(a, q, cuda::conv2d_backward_weight);
  }
  // ---- attention (cuda/attention.cu, attention_backward.cu)
  tc_status attention_forward(const AttentionArgs& a, Queue* q) override {
    return launch(a, q, cuda::attention_forward);
  }
  tc_status attention_backward(const AttentionBackwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::attention_backward);
  }
  // ---- quantized weights (cuda/gemv_quantized.cu, quantize.cu)
  tc_status quantize_weights(const QuantizeWeightsArgs& a, Queue* q) override {
    return launch(a, q, cuda::quantize_weights);
  }
  tc_status dequantize_weights(const DequantizeWeightsArgs& a, Queue* q) override {
    return launch(a, q, cuda::dequantize_weights);
  }
  tc_status gemv_quantized(const GemvQuantizedArgs& a, Queue* q) override {
    return launch(a, q, cuda::gemv_quantized);
  }
  tc_status fused_rmsnorm_gemv_quantized(const GemvQuantizedArgs& a, Queue* q) override {
    return launch(a, q, cuda::fused_rmsnorm_gemv_quantized);
  }
  // ---- training kernels (norms.cu, rope.cu, activations.cu, adamw.cu, fused_gemv.cu)
  tc_status rmsnorm_forward(const RmsNormForwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::rmsnorm_forward);
  }
  tc_status rmsnorm_backward(const RmsNormBackwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::rmsnorm_backward);
  }
  tc_status layernorm_forward(const LayerNormForwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::layernorm_forward);
  }
  tc_status layernorm_backward(const LayerNormBackwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::layernorm_backward);
  }
  tc_status rope(const RopeArgs& a, Queue* q) override { return launch(a, q, cuda::rope); }
  tc_status swiglu_forward(const SwigluForwardArgs& a, Queue* q) override { return launch(a, q, cuda::swiglu_forward); }
  tc_status swiglu_backward(const SwigluBackwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::swiglu_backward);
  }
  tc_status softmax_forward(const SoftmaxForwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::softmax_forward);
  }
  tc_status softmax_backward(const SoftmaxBackwardArgs& a, Queue* q) override {
    return launch(a, q, cuda::softmax_backward);
  }
  tc_status adamw_step(const AdamwArgs& a, Queue* q) override { return launch(a, q, cuda::adamw_step); }
  tc_status fused_norm_gemv(const FusedNormGemvArgs& a, Queue* q) override {
    return launch(a, q, cuda::fused_norm_gemv);
  }
  // Ops without a CUDA kernel yet answer TC_ERR_UNSUPPORTED (Backend's defaults).

  // ---- model ops (cuda/model_ops.cu) and graphs ----
  tc_status embed_rows(const EmbedRowsArgs& a, Queue* q) override { return launch(a, q, cuda::embed_rows); }
  tc_status add(const AddArgs& a, Queue* q) override { return launch(a, q, cuda::add); }
  tc_status convert(const ConvertArgs& a, Queue* q) override { return launch(a, q, cuda::convert); }
  tc_status rope_kv_append(const RopeKvAppendArgs& a, Queue* q) override {
    return launch(a, q, cuda::rope_kv_append);
  }
  tc_status heads_to_tokens(const HeadsToTokensArgs& a, Queue* q) override {
    return launch(a, q, cuda::heads_to_tokens);
  }
  tc_status decode_attention(const DecodeAttentionArgs& a, Queue* q) override {
    return launch(a, q, cuda::decode_attention);
  }
  tc_status quantize_q8(const QuantizeQ8Args& a, Queue* q) override { return launch(a, q, cuda::quantize_q8); }
  tc_status gemv_q8(const GemvQ8Args& a, Queue* q) override { return launch(a, q, cuda::gemv_q8); }
  tc_status repack_q8(const RepackQ8Args& a, Queue* q) override { return launch(a, q, cuda::repack_q8); }
  tc_status copy_2d(const Copy2dArgs& a, Queue* q) override { return launch(a, q, cuda::copy_2d); }

  // Relaxed mode: a kernel's first-use work (a cached scratch's cudaMalloc,
  // a cuBLASLt plan) stays legal in this thread while the stream records.
  bool supports_graphs() const override { return true; }
  tc_status begin_capture(Queue* q) override {
    cudaSetDevice(dev_.index());
    auto* cq = static_cast<CudaQueue*>(q);
    if (tc_status st = cuda::check(cudaStreamBeginCapture(cq->state()->stream, cudaStreamCaptureModeRelaxed),
                                   "graph capture: cudaStreamBeginCapture"))
      return st;
    cq->capturing = true;
    return TC_OK;
  }
  tc_status end_capture(Queue* q, std::unique_ptr<Graph>* out) override {
    cudaSetDevice(dev_.index());
    auto* cq = static_cast<CudaQueue*>(q);
    cq->capturing = false;
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(cq->state()->stream, &graph);
    if (err != cudaSuccess) {
      if (graph) cudaGraphDestroy(graph);
      return cuda::check(err, "graph capture: cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    if (err != cudaSuccess) {
      cudaGraphDestroy(graph);
      return cuda::check(err, "graph capture: cudaGraphInstantiate");
    }
    *out = std::make_unique<CudaGraph>(dev_.index(), graph, exec);
    return TC_OK;
  }
  tc_status replay(Graph& g, Queue* q) override {
    cudaSetDevice(dev_.index());
    cuda::StreamState* s = static_cast<CudaQueue*>(q)->state();
    s->last_kernel = "graph replay";
    return cuda::check(cudaGraphLaunch(static_cast<CudaGraph&>(g).exec(), s->stream), "graph replay: cudaGraphLaunch");
  }

  // ---- Memory tiers (cuda/tiers.cu) -----------------------------------------
  bool supports_tiers() const override { return true; }
  void* alloc_host(size_t n) override { return cuda::alloc_pinned(dev_, n); }
  void release_host(void* p) override { cuda::free_pinned(dev_, p); }
  tc_status copy_async(void* dst, const void* src, size_t n, bool to_device, Queue* q) override {
    return cuda::copy_tier(dev_, q ? static_cast<CudaQueue*>(q)->state() : nullptr, dst, src, n, to_device);
  }
  tc_status run_host(Queue* q, std::function<tc_status()> fn) override {
    return cuda::run_host(dev_, q ? static_cast<CudaQueue*>(q)->state() : nullptr, std::move(fn));
  }
  void defer_release(std::vector<StorageRef> refs) override { dev_.park(std::move(refs)); }
  void collect() override { dev_.collect(); }

 private:
  // Runs `op` on the caller's stream (keeping its storage alive until done)
  // or on the context's stream, waiting for it and reporting kernel errors.
  template <class Args>
  tc_status launch(const Args& args, Queue* q, tc_status (*op)(cuda::Device&, cuda::StreamState*, const Args&)) {
    cudaSetDevice(dev_.index());
    if (q) {
      cuda::StreamState* s = static_cast<CudaQueue*>(q)->state();
      tc_status st = trace::run(args.info, TC_BACKEND_CUDA, [&] { return op(dev_, s, args); });
      note_cuda_kernel(s->last_kernel.c_str());
      if (st == TC_OK && !static_cast<CudaQueue*>(q)->capturing) dev_.keep_until_done(s, args.info.keep);
      return st;
    }
    cuda::StreamState* s = dev_.default_stream();
    return trace::run(args.info, TC_BACKEND_CUDA, [&] {
      tc_status st = op(dev_, s, args);
      note_cuda_kernel(s->last_kernel.c_str());
      if (st != TC_OK) return st;
      cudaError_t err = cudaStreamSynchronize(s->stream);
      if (err != cudaSuccess)
        return fail(TC_ERR_DISPATCH, "%s: kernel %s failed: %s (%s)", args.info.name, s->last_kernel.c_str(),
                    cudaGetErrorName(err), cudaGetErrorString(err));
      return TC_OK;
    });
  }

  // The CPU fallback the GEMM switches ask for: the operands' storage is
  // copied to host memory, the CPU backend's GEMM runs on the copies and C
  // is copied back; last_backend() says portable_cpu. An `_async` call first
  // waits for the work already on its stream, then runs synchronously.
  tc_status gemm_on_cpu(const GemmArgs& a, Queue* q) {
    cudaSetDevice(dev_.index());
    if (q) {
      std::string detail;
      if (tc_status st = q->sync(&detail)) return fail(st, "%s: earlier work on the stream failed: %s", a.info.name,
                                                       detail.c_str());
    }
    note_backend(TC_BACKEND_PORTABLE_CPU);
    const StorageRef& sa = a.info.keep[0];
    const StorageRef& sb = a.info.keep[1];
    const StorageRef& sc = a.info.keep[2];
    std::vector<char> ha(sa->size), hb(sb->size), hc(sc->size);
    for (auto [host, st] : {std::pair{&ha, &sa}, {&hb, &sb}, {&hc, &sc}})
      if (tc_status e = cuda::copy_and_wait(host->data(), (*st)->data, (*st)->size, cudaMemcpyDefault, "gemm (CPU fallback): copy to host"))
        return e;
    GemmArgs h = a;
    h.a = ha.data() + (static_cast<const char*>(a.a) - static_cast<const char*>(sa->data));
    h.b = hb.data() + (static_cast<const char*>(a.b) - static_cast<const char*>(sb->data));
    h.c = hc.data() + (static_cast<char*>(a.c) - static_cast<char*>(sc->data));
    if (tc_status st = trace::run(a.info, TC_BACKEND_PORTABLE_CPU, [&] { return cpu::gemm(h); })) return st;
    return cuda::copy_and_wait(sc->data, hc.data(), sc->size, cudaMemcpyDefault,
                               "gemm (CPU fallback): copy of C to the device");
  }

  cuda::Device dev_;
  const bool gemm_on_cpu_;
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

tc_status cuda_device_info(int index, struct tc_device_info* out) {
  int n = cuda_device_count();
  if (index < 0 || index >= n) return fail(TC_ERR_NO_DEVICE, "CUDA device %d requested, %d present", index, n);
  cudaDeviceProp p{};
  if (tc_status st = cuda::check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties")) return st;
  fill_device_info(p, index, out);
  return TC_OK;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  int n = cuda_device_count();
  if (device_index < 0 || device_index >= n) {
    fail(TC_ERR_NO_DEVICE, "CUDA device %d requested, %d present", device_index, n);
    return nullptr;
  }
  cudaError_t err = cudaSetDevice(device_index);
  if (err == cudaSuccess) err = cudaFree(nullptr);  // create the primary context now
  if (err != cudaSuccess) {
    cuda::check(err, "CUDA initialisation");
    return nullptr;
  }
  return std::make_unique<CudaBackend>(device_index);
}

}  // namespace tc
