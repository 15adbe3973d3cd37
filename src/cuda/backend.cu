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
  explicit CudaBackend(int device) : dev_(device) {}

  tc_backend kind() const override { return TC_BACKEND_CUDA; }

  void device_info(struct tc_device_info* out) const override { fill_device_info(dev_.props(), dev_.index(), out); }

  // Every op of core/ops.def has a CUDA kernel.
  bool supports_op(OpId) const override { return true; }
  uint64_t extra_capabilities() const override {
    // gguf: files load into device buffers by copy
    return TC_CAPABILITY_STREAMS | TC_CAPABILITY_GEMM_TF32 | TC_CAPABILITY_GGUF;
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

  // Each op launches cuda::<op> (cuda/device.h) on the caller's stream, or
  // on the context's stream and waits.
#define TC_OP(name, Args, caps) \
  tc_status name(const Args& a, Queue* q) override { return launch(a, q, cuda::name); }
#include "core/ops.def"
#undef TC_OP

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
