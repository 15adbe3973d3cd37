// Collectives on CUDA memory through NCCL.
//
// No NCCL call may block forever, yet NCCL's non-blocking communicator mode
// (ncclConfig_t.blocking = 0, where every call can be polled) costs a large
// part of the bandwidth: its collectives are enqueued asynchronously and
// must be polled until enqueued, which measured 0.26-0.78x PyTorch's NCCL
// (bench/results/dist-gpu.md). So a group holds two communicators:
//  - `parent_`, non-blocking: initialisation, splits and the liveness barrier
//    before a split are polled (ncclCommGetAsyncError) against the deadline;
//  - `comm_`, blocking, split from the parent once every peer has answered
//    the barrier: the collectives run on it at NCCL's full speed. Its
//    connections are made during the split (NCCL_RUNTIME_CONNECT=0, set
//    before the first communicator unless the environment says otherwise),
//    so a collective call itself only enqueues.
// Completion of every collective is polled (cudaStreamQuery, and the
// communicator's asynchronous error) against the group's deadline; a
// deadline or an NCCL error aborts both communicators (ncclCommAbort) and
// reports TC_ERR_TIMEOUT. TC_NCCL_NONBLOCKING=1 runs the collectives on the
// non-blocking parent itself (every call polled, slower). The unique id is
// published by rank 0 through the rendezvous store. Collectives run on the
// group's own stream and are complete when the call returns.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/config.h"
#include "core/error.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

namespace {

ncclDataType_t nccl_type(tc_dtype d) {
  return d == TC_DTYPE_F16 ? ncclFloat16 : d == TC_DTYPE_BF16 ? ncclBfloat16 : ncclFloat32;
}

bool collectives_nonblocking() { return config::on(config::Key::kNcclNonblocking); }

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

// Polls until `stream` has drained; `comm` is checked for asynchronous errors
// on the way. Spins for the first few milliseconds (a collective of a few MB
// finishes in tens of microseconds, and a sleep costs ~60 us of timer slack),
// then backs off so a stalled peer does not burn a core until the deadline.
// Returns null on success, else why it failed.
const char* wait_stream(cudaStream_t stream, ncclComm_t comm, Deadline d) {
  const auto spin_until = Clock::now() + std::chrono::milliseconds(5);
  for (uint32_t i = 0;; ++i) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return nullptr;
    if (e != cudaErrorNotReady) return cudaGetErrorString(e);
    if (i % 64 != 63) continue;
    ncclResult_t a = ncclSuccess;
    ncclCommGetAsyncError(comm, &a);
    if (a != ncclSuccess && a != ncclInProgress) return ncclGetErrorString(a);
    auto now = Clock::now();
    if (now >= d) return "a peer died or did not answer before the deadline";
    if (now >= spin_until) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Polls a communicator whose last call may still be enqueueing (non-blocking
// mode). Null on success, else why it failed.
const char* wait_enqueued(ncclComm_t comm, Deadline d) {
  for (;;) {
    ncclResult_t a = ncclSuccess;
    ncclCommGetAsyncError(comm, &a);
    if (a == ncclSuccess) return nullptr;
    if (a != ncclInProgress) return ncclGetErrorString(a);
    if (Clock::now() >= d) return "timed out while enqueueing";
    std::this_thread::yield();
  }
}

class NcclComm final : public Comm {
 public:
  // Takes ownership of `parent`, a ready non-blocking communicator.
  NcclComm(ncclComm_t parent, int device, int rank, int size, int64_t timeout_ms)
      : parent_(parent), device_(device), rank_(rank), size_(size), timeout_ms_(timeout_ms) {
    cudaSetDevice(device_);
    cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    cudaMalloc(&scratch_, sizeof(float));
  }
  ~NcclComm() override {
    cudaSetDevice(device_);
    release(broken_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Makes the communicator the collectives run on: the blocking child (the
  // default) or the parent itself (TC_NCCL_NONBLOCKING=1).
  tc_status open() {
    if (!stream_ || !scratch_) return fail(TC_ERR_ALLOC, "nccl: no stream or scratch word on device %d", device_);
    if (collectives_nonblocking()) {
      comm_ = parent_;
      return TC_OK;
    }
    // Every peer is alive and past its own init once this returns, so the
    // split below (a collective over the parent) finds them all.
    if (tc_status st = run_on(parent_, "init barrier", [&] {
          return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, parent_, stream_);
        }))
      return st;
    ncclComm_t child = nullptr;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    if (tc_status st = split(&child, &cfg, "split")) return st;
    comm_ = child;
    // The first collective on the new communicator, while every peer is known
    // to be alive.
    return barrier();
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
  // A second group over the same ranks (its own parent and child), split
  // from this group's parent.
  tc_status fork(std::unique_ptr<Comm>* out) override {
    if (broken_) return fail(TC_ERR_TIMEOUT, "nccl fork: the group is broken by an earlier failure; finalize it");
    cudaSetDevice(device_);
    ncclComm_t child = nullptr;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    if (tc_status st = split(&child, &cfg, "fork")) return st;
    auto forked = std::make_unique<NcclComm>(child, device_, rank_, size_, timeout_ms_);
    if (tc_status st = forked->open()) return st;
    *out = std::move(forked);
    return TC_OK;
  }

 private:
  // A communicator over the same ranks from the (non-blocking) parent. The
  // split behaves like a collective on the parent: whatever it returns, the
  // parent must be polled to ncclSuccess, and only then is *child filled in
  // (NVIDIA/nccl#1472); the child is then polled until its own set-up is done.
  tc_status split(ncclComm_t* child, ncclConfig_t* cfg, const char* what) {
    const Deadline d = deadline_after_ms(timeout_ms_);
    ncclResult_t r = ncclCommSplit(parent_, 0, rank_, child, cfg);
    if (r != ncclSuccess && r != ncclInProgress) return broke(what, ncclGetErrorString(r));
    if (const char* why = wait_enqueued(parent_, d)) return broke(what, why);
    if (!*child) return broke(what, "NCCL returned no communicator");
    if (const char* why = wait_enqueued(*child, d)) {
      ncclCommAbort(*child);
      *child = nullptr;
      return broke(what, why);
    }
    return TC_OK;
  }
  template <class F>
  tc_status run(const char* what, F&& launch) {
    return run_on(comm_, what, std::forward<F>(launch));
  }
  template <class F>
  tc_status run_on(ncclComm_t c, const char* what, F&& launch) {
    if (broken_) return fail(TC_ERR_TIMEOUT, "nccl %s: the group is broken by an earlier failure; finalize it", what);
    cudaSetDevice(device_);
    ncclResult_t r = launch();
    if (r != ncclSuccess && r != ncclInProgress) return broke(what, ncclGetErrorString(r));
    Deadline d = deadline_after_ms(timeout_ms_);
    if (r == ncclInProgress || c == parent_) {
      if (const char* why = wait_enqueued(c, d)) return broke(what, why);
    }
    if (const char* why = wait_stream(stream_, c, d)) return broke(what, why);
    return TC_OK;
  }
  tc_status broke(const char* what, const char* msg) {
    broken_ = true;
    release(true);
    return fail(TC_ERR_TIMEOUT, "nccl %s failed (%s; timeout %lld ms); the group is now broken", what, msg,
                (long long)timeout_ms_);
  }
  void release(bool abort) {
    auto drop = [&](ncclComm_t c) {
      if (!c) return;
      if (abort)
        ncclCommAbort(c);
      else
        ncclCommDestroy(c);
    };
    if (comm_ != parent_) drop(comm_);
    drop(parent_);
    comm_ = parent_ = nullptr;
  }

  ncclComm_t parent_ = nullptr, comm_ = nullptr;
  int device_, rank_, size_;
  int64_t timeout_ms_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  bool broken_ = false;
};

// The blocking child's connections are made while it is created, not at its
// first collectives, where a dead peer could block the enqueueing call.
// NCCL reads its own variable; the registry only says whether the user set it.
void connect_at_init() {
  if (!config::from_env(config::Key::kNcclRuntimeConnect)) setenv("NCCL_RUNTIME_CONNECT", "0", 0);
}

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
  connect_at_init();
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, spec.size, id, spec.rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) return fail(TC_ERR_INTERNAL, "ncclCommInitRankConfig: %s", ncclGetErrorString(r));
  if (tc_status st = wait_ready(comm, spec.timeout_ms, "init")) return st;
  auto group = std::make_unique<NcclComm>(comm, spec.cuda_device, spec.rank, spec.size, spec.timeout_ms);
  if (tc_status st = group->open()) return st;
  *out = std::move(group);
  return TC_OK;
}

}  // namespace dist
}  // namespace tc
