// The CUDA backend: device memory from cudaMalloc, streams that are CUDA
// streams. Ops land here one family at a time; an op without a CUDA kernel
// yet returns TC_ERR_UNSUPPORTED rather than running elsewhere.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "core/backend.h"
#include "core/error.h"

namespace tc {
namespace {

tc_status cuda_fail(cudaError_t err, const char* what) {
  return fail(err == cudaErrorMemoryAllocation ? TC_ERR_ALLOC : TC_ERR_DISPATCH, "%s: %s (%s)", what,
              cudaGetErrorName(err), cudaGetErrorString(err));
}

class CudaQueue final : public Queue {
 public:
  explicit CudaQueue(int device) : device_(device) {
    cudaSetDevice(device_);
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  }
  ~CudaQueue() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
  tc_status sync(std::string* detail) override {
    cudaSetDevice(device_);
    cudaError_t err = cudaStreamSynchronize(stream_);
    if (err == cudaSuccess) return TC_OK;
    if (detail) *detail = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    return TC_ERR_DISPATCH;
  }
  cudaStream_t stream() const { return stream_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) { cudaGetDeviceProperties(&props_, device_); }

  tc_backend kind() const override { return TC_BACKEND_CUDA; }

  void device_info(struct tc_device_info* out) const override {
    std::memset(out, 0, sizeof *out);
    std::snprintf(out->name, sizeof out->name, "%s", props_.name);
    const char* family = props_.major == 9 ? "hopper" : props_.major == 8 ? "ampere" : props_.major >= 10 ? "blackwell" : "cuda";
    std::snprintf(out->family, sizeof out->family, "%s", family);
    std::snprintf(out->features, sizeof out->features, "sm_%d%d", props_.major, props_.minor);
    out->backend = TC_BACKEND_CUDA;
    out->device_index = device_;
    out->compute_units = props_.multiProcessorCount;
    out->compute_capability = props_.major * 10 + props_.minor;
    out->memory_bytes = props_.totalGlobalMem;
  }

  uint64_t available_capabilities() const override {
    return TC_CAPABILITY_STREAMS |
           // gguf: files load into device buffers by copy
           TC_CAPABILITY_GGUF;
  }

  void* alloc(size_t nbytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    return cudaMalloc(&p, nbytes) == cudaSuccess ? p : nullptr;
  }
  void release(void* ptr) override {
    cudaSetDevice(device_);
    cudaFree(ptr);
  }
  bool host_accessible() const override { return false; }
  tc_status copy_in(void* dst, const void* src, size_t n) override {
    cudaSetDevice(device_);
    cudaError_t err = cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice);
    return err == cudaSuccess ? TC_OK : cuda_fail(err, "buffer write");
  }
  tc_status copy_out(void* dst, const void* src, size_t n) override {
    cudaSetDevice(device_);
    cudaError_t err = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost);
    return err == cudaSuccess ? TC_OK : cuda_fail(err, "buffer read");
  }

  std::unique_ptr<Queue> create_queue() override { return std::make_unique<CudaQueue>(device_); }

  tc_status gemm(const GemmArgs&, Queue*) override {
    return fail(TC_ERR_UNSUPPORTED, "gemm has no CUDA kernel in this build");
  }

  // quantized
  tc_status quantize_weights(const QuantizeWeightsArgs&, Queue*) override {
    return fail(TC_ERR_UNSUPPORTED, "quantize_weights has no CUDA kernel in this build");
  }
  tc_status dequantize_weights(const DequantizeWeightsArgs&, Queue*) override {
    return fail(TC_ERR_UNSUPPORTED, "dequantize_weights has no CUDA kernel in this build");
  }
  tc_status gemv_quantized(const GemvQuantizedArgs&, Queue*) override {
    return fail(TC_ERR_UNSUPPORTED, "gemv_quantized has no CUDA kernel in this build");
  }
  tc_status fused_rmsnorm_gemv_quantized(const GemvQuantizedArgs&, Queue*) override {
    return fail(TC_ERR_UNSUPPORTED, "fused_rmsnorm_gemv_quantized has no CUDA kernel in this build");
  }
  // end quantized

 private:
  int device_;
  cudaDeviceProp props_{};
};

}  // namespace

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
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
    cuda_fail(err, "CUDA initialisation");
    return nullptr;
  }
  return std::make_unique<CudaBackend>(device_index);
}

}  // namespace tc
