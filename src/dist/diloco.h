// The object behind tc_diloco (see include/tensorcore/diloco.h for the
// algorithm). Parameters are viewed as one flat f32 vector (each parameter
// at its offset) so the exchange is one collective per outer step.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "dist/comm.h"
#include "dist/staging.h"
#include "tensorcore/diloco.h"

namespace tc {
namespace dist {

struct DilocoParam {
  std::string name;
  StorageRef storage;  // keeps the caller's memory alive even if its handle is freed
  size_t n = 0;
  tc_dtype dtype = TC_DTYPE_F32;
  size_t offset = 0;   // into the flat vectors
  bool device = false; // device memory: the backend's ops and the Stager touch it, never the host
};

// What an outer step reads and writes besides theta.
struct OuterState {
  std::vector<float> anchor;    // the shared starting point, identical on every rank
  std::vector<float> m1;        // Nesterov velocity / Adam first moment
  std::vector<float> m2;        // Adam second moment
  std::vector<float> residual;  // error feedback of the compression
  uint64_t adam_t = 0;
};

// Device memory of the parameters' backend, freed with the object (after
// the work that uses it has been waited for: the DiLoCo ops run on a queue
// that is synchronised before anything is released).
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept { swap(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    DeviceArray(std::move(o)).swap(*this);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  // Holds at least `bytes` (the contents are not kept when it grows).
  tc_status reserve(Backend* be, size_t bytes, const char* what);
  void reset();
  void swap(DeviceArray& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
  }
  float* f32() const { return static_cast<float*>(p_); }
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  Backend* be_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// OuterState's arrays in device memory, for parameters that live there
// (adam_t stays in OuterState). m1, m2 and residual are empty where the
// optimizer or the compression has none.
struct DeviceOuterState {
  DeviceArray anchor, m1, m2, residual;
};

// What a device outer step needs besides the state: g, the next residual,
// the f16 payload, the top-k pairs of this rank and of the world, and theta
// as it was when an asynchronous round was launched (all flat, f32 but q).
struct DeviceScratch {
  DeviceArray g, next_residual, q, pairs, gathered, theta_at_launch;
};

// ---- the pieces of an outer step (diloco_outer.cpp) ----
// g := mean over ranks of the compressed (delta + residual); residual keeps
// what compression dropped. *bytes: what this rank sent.
tc_status exchange(Comm& comm, int32_t compress, const std::vector<float>& delta, std::vector<float>* residual,
                   std::vector<float>* g, uint64_t* bytes);
// anchor := OuterOpt(anchor, g) with the optimizer's moments in `s`.
void outer_update(const tc_diloco_config& cfg, const std::vector<float>& g, OuterState* s);
// theta (the parameters, in host memory) <-> the flat f32 vector. Device
// parameters never take this path: their outer step runs on the device
// (diloco_device.cpp).
void gather_theta(const std::vector<DilocoParam>& params, std::vector<float>* flat);
void scatter_theta(const std::vector<DilocoParam>& params, const std::vector<float>& flat);
// A parameter's bytes to and from host memory (`host`, param_bytes(p) long).
size_t param_bytes(const DilocoParam& p);
tc_status read_param(Stager* stager, const DilocoParam& p, void* host);
tc_status write_param(Stager* stager, const DilocoParam& p, const void* host);
// flat[p.offset ..] = f32 of the parameter's bytes at `src` (host memory).
void widen_param(const DilocoParam& p, const void* src, float* flat);
// Top-k budget of a compression mode for n elements (0: dense modes).
size_t topk_count(int32_t compress, size_t n);

}  // namespace dist
}  // namespace tc

struct tc_diloco_s {
  tc_dist dist = nullptr;
  tc_diloco_config cfg{};
  // Forked from the group's (never interleaves with caller collectives), and
  // the views of it that take device memory and host memory (see
  // diloco_create). `comm` takes host memory, `device_comm` device memory.
  std::unique_ptr<tc::dist::Comm> engine, staged_engine, host_view;
  tc::dist::Comm* comm = nullptr;
  // Device parameters' copies (made with the first one); caller's thread only.
  std::unique_ptr<tc::dist::Stager> stager;
  std::vector<tc::dist::DilocoParam> params;
  size_t total = 0;
  tc::dist::OuterState state;  // for device parameters only adam_t: the arrays are in `dstate`

  // Parameters in device memory (decided at init from the context's
  // backend): the outer step runs there (diloco_device.cpp), with the
  // state in `dstate`, the backend's diloco_* ops on `queue` and the
  // exchange on `device_comm`, which takes device memory (NCCL in place,
  // a host engine staged through the host). `queue`, `scratch` and
  // `device_comm` are used by one thread at a time: the caller's, or the
  // worker's while a round runs.
  bool params_on_device = false;
  tc::dist::Comm* device_comm = nullptr;
  std::unique_ptr<tc::Queue> queue;
  tc::dist::DeviceOuterState dstate;
  tc::dist::DeviceScratch scratch;

  uint64_t inner_total = 0, outer_completed = 0, since_outer = 0, round_id = 0;
  double last_seconds = 0, last_bytes = 0;
  uint64_t topology_epoch = 0, membership_epoch = 0;

  // Asynchronous round. The worker owns `work` and `snapshot` while RUNNING;
  // the caller's thread installs them at commit. `amu` guards the fields
  // below it.
  std::thread worker;
  tc::dist::OuterState work;
  std::vector<float> snapshot;  // Delta at launch
  std::vector<float> theta_at_launch;  // caller's thread only
  tc::dist::DeviceOuterState dwork;    // `work`'s arrays for device parameters (theta at launch: scratch)
  std::mutex amu;
  std::condition_variable acv;
  int32_t astate = TC_DILOCO_ASYNC_IDLE;
  tc_status worker_status = TC_OK;
  std::string worker_detail;
  double work_seconds = 0, work_bytes = 0;
};

namespace tc {
namespace dist {

// diloco.cpp: the engine (src/capi/diloco.cpp validates before calling).
// `device_exchange`: the exchange's host vectors go through device scratch
// (NCCL groups; every group under TC_DIST_DEVICE_PATH=1).
// `params_on_device`: the parameters will be device memory (or handled as
// such), so the outer step runs on the device.
tc_status diloco_create(tc_dist dist, const tc_diloco_config& cfg, bool device_exchange, bool params_on_device,
                        tc_diloco* out);
void diloco_destroy(tc_diloco d);
// `device`: the parameter is staged (src/capi decided where it lives).
tc_status diloco_add(tc_diloco d, const char* name, tc_buffer theta, size_t n, tc_dtype dtype, bool device);
tc_status diloco_apply_outer(tc_diloco d);
int32_t diloco_poll(tc_diloco d, tc_status* worker_status, uint64_t* round_id);
tc_status diloco_wait(tc_diloco d);
tc_status diloco_commit(tc_diloco d);

// diloco_device.cpp: the outer step of device parameters on the device.
// A parameter's anchor (= theta, already broadcast), moments and residual.
tc_status device_add(tc_diloco d, const DilocoParam& p);
// The synchronous outer step: theta is written from the new anchor.
tc_status device_outer_step(tc_diloco d, double* seconds, double* bytes);
// The asynchronous round: launch copies theta and the state (caller's
// thread), the round runs on the copies (worker), commit writes theta and
// installs the copies (caller's thread).
tc_status device_launch(tc_diloco d);
tc_status device_round(tc_diloco d, double* seconds, double* bytes);
tc_status device_commit(tc_diloco d);
// The state arrays (anchor, m1, m2, residual: those that exist, each
// `total` floats) to and from host memory, through the stager.
tc_status device_state_read(tc_diloco d, std::vector<uint8_t>* out);
tc_status device_state_write(tc_diloco d, const uint8_t* in);

// diloco_state.cpp: state blobs.
size_t diloco_state_size(tc_diloco d, uint32_t version);
tc_status diloco_state_write(tc_diloco d, uint32_t version, uint8_t* out);
tc_status diloco_state_read(tc_diloco d, uint32_t version, const uint8_t* blob, size_t n);

}  // namespace dist
}  // namespace tc
