// Staging between device memory and host-memory engines (see staging.h).
//
// The pipeline of Stager::run, per chunk i on one queue of the device:
//   in(i) copies device -> slot[i % 2], then a host callback marks chunk i
//   ready; the caller thread enqueues chunk i+1's inbound copies, waits for
//   chunk i, runs work(i) and enqueues out(i)'s copies slot -> device.
// The queue runs in order, so chunk i+1's inbound copies (into the slot
// chunk i-1 used) start only after chunk i-1's outbound ones, and "chunk i
// ready" also means its slot is no longer being copied out of.
#include "dist/staging.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core/config.h"
#include "core/error.h"
#include "core/trace.h"
#include "core/dtypes.h"

namespace tc {
namespace dist {

bool treat_as_device(const Backend& backend) {
  return !backend.host_accessible() || config::on(config::Key::kDistDevicePath);
}

bool can_stage(const Backend& backend) { return backend.host_accessible() || backend.supports_tiers(); }

std::string where(const Backend& backend) {
  if (backend.host_accessible()) return "host memory handled as device memory (TC_DIST_DEVICE_PATH=1)";
  struct tc_device_info info;
  backend.device_info(&info);
  char text[96];
  std::snprintf(text, sizeof text, "device memory of %s:%d", backend.kind() == TC_BACKEND_CUDA ? "cuda" : info.family,
                info.device_index);
  return text;
}

// ---- Stager ------------------------------------------------------------------

namespace {

// Set by a host callback on the queue once a chunk's inbound copies are done.
struct Arrival {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};
using ArrivalRef = std::shared_ptr<Arrival>;

}  // namespace

Stager::Stager(Backend* backend) : be_(backend) {}

Stager::~Stager() {
  if (queue_) queue_->sync(nullptr);
  for (char* s : slot_)
    if (s) be_->release_host(s);
}

tc_status Stager::reserve(size_t bytes) {
  if (!queue_) {
    queue_ = be_->create_queue();
    if (!queue_) return fail(TC_ERR_ALLOC, "staging: the device could not create a queue");
  }
  if (bytes <= slot_bytes_) return TC_OK;
  for (char*& s : slot_) {
    if (s) be_->release_host(s);
    s = nullptr;
  }
  slot_bytes_ = 0;
  for (char*& s : slot_) {
    s = static_cast<char*>(be_->alloc_host(bytes));
    if (!s) return fail(TC_ERR_ALLOC, "staging: could not allocate %zu bytes of page-locked host memory", bytes);
  }
  slot_bytes_ = bytes;
  return TC_OK;
}

// Waits for everything on the queue; returns `st`, or the queue's failure
// when `st` is TC_OK.
tc_status Stager::drain(tc_status st) {
  std::string detail;
  tc_status q = queue_ ? queue_->sync(&detail) : TC_OK;
  if (st) return st;
  if (q) return fail_with(q, "staging: a copy between device and host memory failed: " + detail);
  return TC_OK;
}

tc_status Stager::run(size_t chunks, size_t slot_bytes, const std::function<void(size_t, Pieces*)>& in,
                      const std::function<tc_status(char*, size_t)>& work,
                      const std::function<void(size_t, Pieces*)>& out) {
  if (chunks == 0) return TC_OK;
  if (tc_status st = reserve(slot_bytes)) return st;
  std::vector<ArrivalRef> arrivals(chunks);
  Pieces pieces;
  auto enqueue_in = [&](size_t i) -> tc_status {
    char* slot = slot_[i % 2];
    pieces.clear();
    in(i, &pieces);
    for (const Piece& p : pieces)
      if (tc_status st = be_->copy_async(slot + p.offset, p.device, p.bytes, false, queue_.get())) return st;
    ArrivalRef a = std::make_shared<Arrival>();
    arrivals[i] = a;
    return be_->run_host(queue_.get(), [a] {
      std::lock_guard<std::mutex> lock(a->mu);
      a->done = true;
      a->cv.notify_all();
      return TC_OK;
    });
  };
  if (tc_status st = enqueue_in(0)) return drain(st);
  for (size_t i = 0; i < chunks; ++i) {
    if (i + 1 < chunks)
      if (tc_status st = enqueue_in(i + 1)) return drain(st);
    {
      Arrival& a = *arrivals[i];
      std::unique_lock<std::mutex> lock(a.mu);
      if (!a.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms_), [&] { return a.done; })) {
        lock.unlock();
        return drain(fail(TC_ERR_TIMEOUT, "staging: chunk %zu of %zu did not arrive from the device within %lld ms",
                          i, chunks, (long long)timeout_ms_));
      }
    }
    arrivals[i].reset();
    char* slot = slot_[i % 2];
    if (tc_status st = work(slot, i)) return drain(st);
    pieces.clear();
    out(i, &pieces);
    for (const Piece& p : pieces)
      if (tc_status st = be_->copy_async(p.device, slot + p.offset, p.bytes, true, queue_.get())) return drain(st);
  }
  return drain(TC_OK);
}

tc_status Stager::read(const void* device, size_t bytes, const std::function<void(const char*, size_t, size_t)>& take) {
  const size_t chunks = (bytes + kChunk - 1) / kChunk;
  char* src = static_cast<char*>(const_cast<void*>(device));
  return run(
      chunks, std::min(bytes, kChunk),
      [&](size_t i, Pieces* p) { p->push_back({src + i * kChunk, 0, std::min(kChunk, bytes - i * kChunk)}); },
      [&](char* slot, size_t i) {
        take(slot, i * kChunk, std::min(kChunk, bytes - i * kChunk));
        return TC_OK;
      },
      [](size_t, Pieces*) {});
}

tc_status Stager::write(void* device, size_t bytes, const std::function<void(char*, size_t, size_t)>& fill) {
  const size_t chunks = (bytes + kChunk - 1) / kChunk;
  char* dst = static_cast<char*>(device);
  return run(
      chunks, std::min(bytes, kChunk), [](size_t, Pieces*) {},
      [&](char* slot, size_t i) {
        fill(slot, i * kChunk, std::min(kChunk, bytes - i * kChunk));
        return TC_OK;
      },
      [&](size_t i, Pieces* p) { p->push_back({dst + i * kChunk, 0, std::min(kChunk, bytes - i * kChunk)}); });
}

// ---- collectives on device memory over a host engine ----------------------------

namespace {

class StagedComm final : public Comm {
 public:
  StagedComm(Comm* host, std::unique_ptr<Comm> owned, Backend* device)
      : owned_(std::move(owned)), host_(host), device_(device), stager_(device) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void set_timeout_ms(int64_t ms) override {
    host_->set_timeout_ms(ms);
    stager_.set_timeout_ms(ms);
  }

  // Elementwise collectives: chunk i of the buffer is chunk i's collective.
  tc_status allreduce(void* buf, size_t n, tc_dtype dtype, int32_t op) override {
    return inplace("allreduce (staged through host memory)", buf, n, dtype, true,
                   [&](char* slot, size_t len) { return host_->allreduce(slot, len, dtype, op); });
  }
  tc_status broadcast(void* buf, size_t n, tc_dtype dtype, int root) override {
    return inplace("broadcast (staged through host memory)", buf, n, dtype, rank() == root,
                   [&](char* slot, size_t len) { return host_->broadcast(slot, len, dtype, root); });
  }

  // Chunk i covers elements [i c, i c + len) of every rank's block. The slot
  // holds this rank's piece, then the world's pieces of that range.
  tc_status allgather(const void* src, void* dst, size_t n, tc_dtype dtype) override {
    const size_t esz = dtype_size(dtype), w = size_t(size()), c = per_rank_chunk(esz, w), chunks = (n + c - 1) / c;
    auto len = [&](size_t i) { return std::min(c, n - i * c); };
    char* s = static_cast<char*>(const_cast<void*>(src));
    char* d = static_cast<char*>(dst);
    return traced("allgather (staged through host memory)", n * esz, chunks, [&] {
      return stager_.run(
          chunks, (w + 1) * c * esz,
          [&](size_t i, Stager::Pieces* p) { p->push_back({s + i * c * esz, 0, len(i) * esz}); },
          [&](char* slot, size_t i) { return host_->allgather(slot, slot + len(i) * esz, len(i), dtype); },
          [&](size_t i, Stager::Pieces* p) {
            for (size_t r = 0; r < w; ++r)
              p->push_back({d + (r * n + i * c) * esz, (1 + r) * len(i) * esz, len(i) * esz});
          });
    });
  }
  tc_status reduce_scatter(const void* src, void* dst, size_t n, tc_dtype dtype, int32_t op) override {
    const size_t esz = dtype_size(dtype), w = size_t(size()), c = per_rank_chunk(esz, w), chunks = (n + c - 1) / c;
    auto len = [&](size_t i) { return std::min(c, n - i * c); };
    char* s = static_cast<char*>(const_cast<void*>(src));
    char* d = static_cast<char*>(dst);
    return traced("reduce_scatter (staged through host memory)", n * esz * w, chunks, [&] {
      return stager_.run(
          chunks, (w + 1) * c * esz,
          [&](size_t i, Stager::Pieces* p) {
            for (size_t r = 0; r < w; ++r) p->push_back({s + (r * n + i * c) * esz, r * len(i) * esz, len(i) * esz});
          },
          [&](char* slot, size_t i) {
            return host_->reduce_scatter(slot, slot + w * len(i) * esz, len(i), dtype, op);
          },
          [&](size_t i, Stager::Pieces* p) { p->push_back({d + i * c * esz, w * len(i) * esz, len(i) * esz}); });
    });
  }
  tc_status barrier() override { return host_->barrier(); }
  tc_status fork(std::unique_ptr<Comm>* out) override {
    std::unique_ptr<Comm> f;
    if (tc_status st = host_->fork(&f)) return st;
    *out = make_staged_comm(std::move(f), device_);
    return TC_OK;
  }

 private:
  // Elements per rank in one chunk: the world's pieces together about kChunk.
  static size_t per_rank_chunk(size_t esz, size_t world) { return std::max<size_t>(1, Stager::kChunk / (esz * world)); }

  template <class F>
  tc_status traced(const char* what, size_t bytes, size_t chunks, F&& body) {
    OpInfo info;
    info.name = what;
    if (trace::enabled()) info.shapes = std::to_string(bytes) + " bytes in " + std::to_string(chunks) + " chunks";
    return trace::run(info, device_->kind(), std::forward<F>(body));
  }

  template <class F>
  tc_status inplace(const char* what, void* buf, size_t n, tc_dtype dtype, bool fetch, F&& collective) {
    const size_t esz = dtype_size(dtype), c = Stager::kChunk / esz, chunks = (n + c - 1) / c;
    auto len = [&](size_t i) { return std::min(c, n - i * c); };
    char* b = static_cast<char*>(buf);
    return traced(what, n * esz, chunks, [&] {
      return stager_.run(
          chunks, std::min(n, c) * esz,
          [&](size_t i, Stager::Pieces* p) {
            if (fetch) p->push_back({b + i * c * esz, 0, len(i) * esz});
          },
          [&](char* slot, size_t i) { return collective(slot, len(i)); },
          [&](size_t i, Stager::Pieces* p) { p->push_back({b + i * c * esz, 0, len(i) * esz}); });
    });
  }

  std::unique_ptr<Comm> owned_;
  Comm* host_;
  Backend* device_;
  Stager stager_;
};

// ---- collectives on host memory over a device engine ------------------------------

class DeviceBackedComm final : public Comm {
 public:
  DeviceBackedComm(Comm* inner, std::unique_ptr<Comm> owned, Backend* device)
      : owned_(std::move(owned)), inner_(inner), device_(device) {}
  ~DeviceBackedComm() override {
    if (scratch_) device_->release(scratch_);
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void set_timeout_ms(int64_t ms) override { inner_->set_timeout_ms(ms); }

  tc_status allreduce(void* buf, size_t n, tc_dtype dtype, int32_t op) override {
    const size_t bytes = n * dtype_size(dtype);
    return around(bytes, buf, bytes, buf, bytes, [&](char* s) { return inner_->allreduce(s, n, dtype, op); });
  }
  tc_status broadcast(void* buf, size_t n, tc_dtype dtype, int root) override {
    const size_t bytes = n * dtype_size(dtype);
    return around(bytes, buf, bytes, buf, bytes, [&](char* s) { return inner_->broadcast(s, n, dtype, root); });
  }
  tc_status allgather(const void* src, void* dst, size_t n, tc_dtype dtype) override {
    const size_t bytes = n * dtype_size(dtype), all = bytes * size_t(size());
    return around(bytes + all, src, bytes, dst, all, [&](char* s) { return inner_->allgather(s, s + bytes, n, dtype); },
                  bytes);
  }
  tc_status reduce_scatter(const void* src, void* dst, size_t n, tc_dtype dtype, int32_t op) override {
    const size_t bytes = n * dtype_size(dtype), all = bytes * size_t(size());
    return around(all + bytes, src, all, dst, bytes,
                  [&](char* s) { return inner_->reduce_scatter(s, s + all, n, dtype, op); }, all);
  }
  tc_status barrier() override { return inner_->barrier(); }
  tc_status fork(std::unique_ptr<Comm>* out) override {
    std::unique_ptr<Comm> f;
    if (tc_status st = inner_->fork(&f)) return st;
    *out = make_device_backed_comm(std::move(f), device_);
    return TC_OK;
  }

 private:
  // src (host) -> scratch, collective(scratch), scratch + out_offset -> dst (host).
  template <class F>
  tc_status around(size_t scratch_bytes, const void* src, size_t in_bytes, void* dst, size_t out_bytes, F&& collective,
                   size_t out_offset = 0) {
    if (scratch_bytes > scratch_bytes_) {
      if (scratch_) device_->release(scratch_);
      scratch_bytes_ = 0;
      scratch_ = static_cast<char*>(device_->alloc(scratch_bytes));
      if (!scratch_)
        return fail(TC_ERR_ALLOC, "could not allocate %zu bytes of device memory for a collective on host memory",
                    scratch_bytes);
      scratch_bytes_ = scratch_bytes;
    }
    if (tc_status st = device_->copy_in(scratch_, src, in_bytes)) return st;
    if (tc_status st = collective(scratch_)) return st;
    return device_->copy_out(dst, scratch_ + out_offset, out_bytes);
  }

  std::unique_ptr<Comm> owned_;
  Comm* inner_;
  Backend* device_;
  char* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Comm> make_staged_comm(Comm* host, Backend* device) {
  return std::make_unique<StagedComm>(host, nullptr, device);
}

std::unique_ptr<Comm> make_staged_comm(std::unique_ptr<Comm> host, Backend* device) {
  Comm* h = host.get();
  return std::make_unique<StagedComm>(h, std::move(host), device);
}

std::unique_ptr<Comm> make_device_backed_comm(Comm* device_comm, Backend* device) {
  return std::make_unique<DeviceBackedComm>(device_comm, nullptr, device);
}

std::unique_ptr<Comm> make_device_backed_comm(std::unique_ptr<Comm> device_comm, Backend* device) {
  Comm* c = device_comm.get();
  return std::make_unique<DeviceBackedComm>(c, std::move(device_comm), device);
}

}  // namespace dist
}  // namespace tc
