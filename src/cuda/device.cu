#include "cuda/device.h"

#include "core/error.h"

namespace tc {
namespace cuda {

constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt's recommendation for Hopper

tc_status check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return TC_OK;
  cudaGetLastError();  // clear a sticky-free error so later calls are not blamed
  return fail(err == cudaErrorMemoryAllocation ? TC_ERR_ALLOC : TC_ERR_DISPATCH, "%s: %s (%s)", what,
              cudaGetErrorName(err), cudaGetErrorString(err));
}

tc_status check_lt(cublasStatus_t st, const char* what) {
  if (st == CUBLAS_STATUS_SUCCESS) return TC_OK;
  tc_status code = st == CUBLAS_STATUS_ALLOC_FAILED ? TC_ERR_ALLOC
                   : st == CUBLAS_STATUS_NOT_SUPPORTED ? TC_ERR_UNSUPPORTED
                                                       : TC_ERR_DISPATCH;
  return fail(code, "%s: cuBLASLt status %d", what, int(st));
}

Device::Device(int index) : index_(index) {
  cudaSetDevice(index_);
  cudaGetDeviceProperties(&props_, index_);
  cublasLtCreate(&lt_);
  init_stream(&default_);
}

Device::~Device() {
  cudaSetDevice(index_);
  destroy_stream(&default_);
  collect();
  if (lt_) cublasLtDestroy(lt_);
}

void Device::init_stream(StreamState* s) {
  cudaSetDevice(index_);
  s->device = index_;
  cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
  if (cudaMalloc(&s->workspace, kWorkspaceBytes) == cudaSuccess) s->workspace_bytes = kWorkspaceBytes;
  else s->workspace = nullptr;
}

void Device::destroy_stream(StreamState* s) {
  cudaSetDevice(index_);
  if (s->stream) cudaStreamSynchronize(s->stream);
  if (s->workspace) cudaFree(s->workspace);
  if (s->stream) cudaStreamDestroy(s->stream);
  s->stream = nullptr;
  s->workspace = nullptr;
  collect();
}

namespace {
struct Parked {
  Device* dev;
  std::vector<StorageRef> keep;
  std::mutex* mu;
  std::vector<std::vector<StorageRef>>* grave;
};
void CUDART_CB release_parked(void* p) {
  auto* parked = static_cast<Parked*>(p);
  {
    std::lock_guard<std::mutex> lock(*parked->mu);
    parked->grave->push_back(std::move(parked->keep));
  }
  delete parked;
}
}  // namespace

void Device::keep_until_done(StreamState* s, std::vector<StorageRef> keep) {
  auto* parked = new Parked{this, std::move(keep), &grave_mu_, &grave_};
  if (cudaLaunchHostFunc(s->stream, release_parked, parked) != cudaSuccess) {
    // Could not enqueue the release: wait for the stream instead.
    cudaStreamSynchronize(s->stream);
    delete parked;
  }
}

void Device::collect() {
  std::vector<std::vector<StorageRef>> dead;
  {
    std::lock_guard<std::mutex> lock(grave_mu_);
    dead.swap(grave_);
  }
  // `dead` goes out of scope here, on an ordinary thread: frees may run.
}

}  // namespace cuda
}  // namespace tc
