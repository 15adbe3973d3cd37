// Collectives on CUDA memory through NCCL.
//
// The communicator is created non-blocking (ncclConfig_t.blocking = 0) so
// that no NCCL call can block forever: initialisation and every collective
// are polled (ncclCommGetAsyncError, cudaStreamQuery) against the group's
// deadline, and a deadline or an asynchronous NCCL error aborts the
// communicator (ncclCommAbort) and reports TC_ERR_TIMEOUT. The unique id is
// published by rank 0 through the rendezvous store. Collectives run on the
// communicator's own stream and are complete when the call returns.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "core/env.h"
#include "core/error.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

namespace {

ncclDataType_t nccl_type(tc_dtype d) {
  return d == TC_DTYPE_F16 ? ncclFloat16 : d == TC_DTYPE_BF16 ? ncclBfloat16 : ncclFloat32;
}

// TC_NCCL_BLOCKING=1 creates blocking communicators: NCCL calls then return
// only once enqueued (no ncclInProgress polling), at the price of an
// initialisation that cannot be timed out. For measuring the cost of the
// non-blocking mode; the default stays non-blocking.
int nccl_blocking() { return env_on("TC_NCCL_BLOCKING") ? 1 : 0; }

ncclRedOp_t nccl_op(int32_t op) {
  return op == TC_REDUCE_AVG ? ncclAvg : op == TC_REDUCE_MAX ? ncclMax : op == TC_REDUCE_MIN ? ncclMin : ncclSum;
}

// Polls an initialising communicator until it is ready; aborts it on
// failure or at the deadline.
tc_status wait_ready(ncclComm_t c, int64_t timeout_ms, const char* what) {
  Deadline d = deadline_after_ms(timeout_ms);
  for (;;) {
    ncclResult_t r = ncclSuccess;
    ncclCommGetAsyncError(c, &r);
    if (r == ncclSuccess) return TC_OK;
    if (r != ncclInProgress) {
      ncclCommAbort(c);
      return fail(TC_ERR_TIMEOUT, "nccl %s: %s", what, ncclGetErrorString(r));
    }
    if (Clock::now() >= d) {
      ncclCommAbort(c);
      return fail(TC_ERR_TIMEOUT, "nccl %s: a peer did not join within %lld ms", what, (long long)timeout_ms);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

class NcclComm final : public Comm {
 public:
  NcclComm(ncclComm_t comm, int device, int rank, int size, int64_t timeout_ms)
      : comm_(comm), device_(device), rank_(rank), size_(size), timeout_ms_(timeout_ms) {
    cudaSetDevice(device_);
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    cudaMalloc(&scratch_, sizeof(float));
  }
  ~NcclComm() override {
    cudaSetDevice(device_);
    if (comm_) {
      if (broken_)
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
    }
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_timeout_ms(int64_t ms) override { timeout_ms_ = ms; }

  tc_status allreduce(void* buf, size_t n, tc_dtype dtype, int32_t op) override {
    return run("allreduce", [&] { return ncclAllReduce(buf, buf, n, nccl_type(dtype), nccl_op(op), comm_, stream_); });
  }
  tc_status broadcast(void* buf, size_t n, tc_dtype dtype, int root) override {
    return run("broadcast", [&] { return ncclBroadcast(buf, buf, n, nccl_type(dtype), root, comm_, stream_); });
  }
  tc_status allgather(const void* src, void* dst, size_t n, tc_dtype dtype) override {
    return run("allgather", [&] { return ncclAllGather(src, dst, n, nccl_type(dtype), comm_, stream_); });
  }
  tc_status reduce_scatter(const void* src, void* dst, size_t n, tc_dtype dtype, int32_t op) override {
    return run("reduce_scatter",
               [&] { return ncclReduceScatter(src, dst, n, nccl_type(dtype), nccl_op(op), comm_, stream_); });
  }
  tc_status barrier() override {
    return run("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }
  tc_status fork(std::unique_ptr<Comm>* out) override {
    ncclComm_t child = nullptr;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = nccl_blocking();
    tc_status st = run("fork", [&] { return ncclCommSplit(comm_, 0, rank_, &child, &cfg); }, false);
    if (st) return st;
    if (tc_status w = wait_ready(child, timeout_ms_, "fork")) return w;
    *out = std::make_unique<NcclComm>(child, device_, rank_, size_, timeout_ms_);
    return TC_OK;
  }

 private:
  template <class F>
  tc_status run(const char* what, F&& launch, bool wait_stream = true) {
    if (broken_) return fail(TC_ERR_TIMEOUT, "nccl %s: the group is broken by an earlier failure; finalize it", what);
    cudaSetDevice(device_);
    ncclResult_t r = launch();
    if (r != ncclSuccess && r != ncclInProgress) return broke(what, ncclGetErrorString(r));
    Deadline d = deadline_after_ms(timeout_ms_);
    // Non-blocking mode: the call may still be enqueueing.
    for (;;) {
      ncclResult_t a = ncclSuccess;
      ncclCommGetAsyncError(comm_, &a);
      if (a == ncclSuccess) break;
      if (a != ncclInProgress) return broke(what, ncclGetErrorString(a));
      if (Clock::now() >= d) return broke(what, "timed out while enqueueing");
      std::this_thread::yield();
    }
    if (!wait_stream) return TC_OK;
    // Spin for the first few milliseconds (a collective of a few MB finishes
    // in tens of microseconds, and a sleep costs ~60 us of timer slack), then
    // back off so a stalled peer does not burn a core until the deadline.
    const auto spin_until = Clock::now() + std::chrono::milliseconds(5);
    for (uint32_t i = 0;; ++i) {
      cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return TC_OK;
      if (e != cudaErrorNotReady) return broke(what, cudaGetErrorString(e));
      if (i % 64 != 63) continue;
      ncclResult_t a = ncclSuccess;
      ncclCommGetAsyncError(comm_, &a);
      if (a != ncclSuccess && a != ncclInProgress) return broke(what, ncclGetErrorString(a));
      auto now = Clock::now();
      if (now >= d) return broke(what, "a peer died or did not answer before the deadline");
      if (now >= spin_until) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  tc_status broke(const char* what, const char* msg) {
    broken_ = true;
    ncclCommAbort(comm_);
    comm_ = nullptr;
    return fail(TC_ERR_TIMEOUT, "nccl %s failed (%s; timeout %lld ms); the group is now broken", what, msg,
                (long long)timeout_ms_);
  }

  ncclComm_t comm_;
  int device_, rank_, size_;
  int64_t timeout_ms_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  bool broken_ = false;
};

}  // namespace

bool nccl_built() { return true; }

tc_status make_nccl_comm(const GroupSpec& spec, std::unique_ptr<Comm>* out) {
  if (spec.cuda_device < 0) return fail(TC_ERR_INVALID_ARG, "nccl: the context is not a CUDA context");
  if (!spec.store)
    return fail(TC_ERR_INVALID_ARG, "nccl: needs a rendezvous store (gloo+tcp://host:port or file:///dir)");
  ncclUniqueId id;
  std::string why;
  Deadline d = deadline_after_ms(spec.timeout_ms);
  if (spec.rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return fail(TC_ERR_INTERNAL, "ncclGetUniqueId: %s", ncclGetErrorString(r));
    if (tc_status st = spec.store->set("tc/nccl_unique_id", std::string(id.internal, sizeof id.internal), &why))
      return fail(st, "nccl: publishing the unique id: %s", why.c_str());
  } else {
    std::string v;
    if (tc_status st = spec.store->get("tc/nccl_unique_id", d, &v, &why))
      return fail(st, "nccl: rank %d did not get the unique id: %s%s", spec.rank, why.c_str(), spec.note ? spec.note().c_str() : "");
    if (v.size() != sizeof id.internal) return fail(TC_ERR_CORRUPT, "nccl: unique id of %zu bytes", v.size());
    std::memcpy(id.internal, v.data(), v.size());
  }
  cudaError_t ce = cudaSetDevice(spec.cuda_device);
  if (ce != cudaSuccess) return fail(TC_ERR_NO_DEVICE, "nccl: cudaSetDevice(%d): %s", spec.cuda_device,
                                     cudaGetErrorString(ce));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = nccl_blocking();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, spec.size, id, spec.rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) return fail(TC_ERR_INTERNAL, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
  if (tc_status st = wait_ready(comm, spec.timeout_ms, "init")) return st;
  *out = std::make_unique<NcclComm>(comm, spec.cuda_device, spec.rank, spec.size, spec.timeout_ms);
  return TC_OK;
}

}  // namespace dist
}  // namespace tc
