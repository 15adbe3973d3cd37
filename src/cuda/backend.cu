// The CUDA backend: device memory from cudaMalloc, streams that are CUDA
// streams. A synchronous op runs on the context's own stream and waits for
// it; an `_async` op is enqueued on the caller's stream and returns at once.
// An op without a CUDA kernel returns TC_ERR_UNSUPPORTED rather than running
// elsewhere.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "core/backend.h"
#include "core/error.h"
#include "core/objects.h"
#include "core/trace.h"
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

 private:
  cuda::Device& dev_;
  cuda::StreamState state_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : dev_(device) {}

  tc_backend kind() const override { return TC_BACKEND_CUDA; }

  void device_info(struct tc_device_info* out) const override { fill_device_info(dev_.props(), dev_.index(), out); }

  uint64_t available_capabilities() const override {
    return TC_CAPABILITY_GEMM_F32 | TC_CAPABILITY_GEMM_F16 | TC_CAPABILITY_GEMM_BF16 | TC_CAPABILITY_GEMM_I8 |
           TC_CAPABILITY_GEMM_BATCHED | TC_CAPABILITY_STREAMS | TC_CAPABILITY_GEMM_TF32 |
           TC_CAPABILITY_TRAINING_KERNELS |
           // gguf: files load into device buffers by copy
           TC_CAPABILITY_GGUF;
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
  tc_status copy_in(void* dst, const void* src, size_t n) override {
    cudaSetDevice(dev_.index());
    return cuda::check(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "buffer write");
  }
  tc_status copy_out(void* dst, const void* src, size_t n) override {
    cudaSetDevice(dev_.index());
    return cuda::check(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost), "buffer read");
  }

  std::unique_ptr<Queue> create_queue() override { return std::make_unique<CudaQueue>(dev_); }

  tc_status gemm(const GemmArgs& a, Queue* q) override { return launch(a, q, cuda::gemm); }
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
  // ---- end of training kernels
  // Ops without a CUDA kernel yet answer TC_ERR_UNSUPPORTED (Backend's defaults).

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
      if (st == TC_OK) dev_.keep_until_done(s, args.info.keep);
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

  cuda::Device dev_;
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
