// Memory that a collective engine cannot read in place, on its way there and
// back:
//  - device memory (a CUDA context's buffers) for engines that read host
//    memory (gloo, the single backend, DiLoCo's outer step): copied through
//    page-locked host memory in chunks, on a queue of the device's backend,
//    the copies of chunk i+1 overlapping the host's work on chunk i (what
//    torch.distributed does for gloo with CUDA tensors);
//  - host memory (DiLoCo's flat vectors) for an engine that reads device
//    memory (NCCL): copied into device scratch and back.
// TC_DIST_DEVICE_PATH=1 makes a host backend's memory take the device path,
// so that these paths run (and are tested) without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

// Whether dist handles the memory of `backend` as device memory: the host
// cannot read it, or TC_DIST_DEVICE_PATH=1 asks for the device path.
bool treat_as_device(const Backend& backend);
// Whether `backend` can stage its memory through the host: page-locked host
// memory, copies and host callbacks ordered on a queue of its own (the
// memory-tier interface). Host backends can (and need not, unless asked).
bool can_stage(const Backend& backend);
// How an error names such memory: "device memory of cuda:0", or "host
// memory handled as device memory (TC_DIST_DEVICE_PATH=1)".
std::string where(const Backend& backend);

// Device <-> page-locked host copies in chunks on a queue of the backend.
// One caller thread at a time.
class Stager {
 public:
  static constexpr size_t kChunk = size_t(4) << 20;

  explicit Stager(Backend* backend);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // How long to wait for a chunk's copy before asking the queue why it has
  // not arrived (a device that failed never runs the callbacks behind it).
  void set_timeout_ms(int64_t ms) { timeout_ms_ = ms; }

  struct Piece {
    char* device;    // device bytes ...
    size_t offset;   // ... to or from the slot at this offset
    size_t bytes;
  };
  using Pieces = std::vector<Piece>;
  // For each chunk i < chunks: the pieces in(i) lists are copied from the
  // device into a slot of `slot_bytes`, work(slot, i) runs on this thread,
  // and the pieces out(i) lists are copied from the slot back to the device.
  // Two slots: chunk i+1's inbound copies run while work(i) does. Returns the
  // first failure; no copy is in flight when it returns.
  tc_status run(size_t chunks, size_t slot_bytes, const std::function<void(size_t, Pieces*)>& in,
                const std::function<tc_status(char*, size_t)>& work, const std::function<void(size_t, Pieces*)>& out);
  // `bytes` of device memory handed to take(chunk, offset, length) chunk by
  // chunk (the host reads the slot, never the device).
  tc_status read(const void* device, size_t bytes, const std::function<void(const char*, size_t, size_t)>& take);
  // `bytes` of device memory written from what fill(chunk, offset, length)
  // puts in each chunk.
  tc_status write(void* device, size_t bytes, const std::function<void(char*, size_t, size_t)>& fill);

 private:
  tc_status reserve(size_t bytes);
  tc_status drain(tc_status st);

  Backend* be_;
  std::unique_ptr<Queue> queue_;
  char* slot_[2] = {nullptr, nullptr};
  size_t slot_bytes_ = 0;
  int64_t timeout_ms_ = 120000;
};

// The collectives of `host` (an engine that reads host memory) on device
// memory of `device`, staged by a Stager. The first form does not own `host`
// (the group's communicator, which outlives it), the second does.
std::unique_ptr<Comm> make_staged_comm(Comm* host, Backend* device);
std::unique_ptr<Comm> make_staged_comm(std::unique_ptr<Comm> host, Backend* device);
// The collectives of `device_comm` (an engine that reads device memory) on
// host memory, through device scratch of `device`. The first form does not
// own `device_comm`, the second does.
std::unique_ptr<Comm> make_device_backed_comm(Comm* device_comm, Backend* device);
std::unique_ptr<Comm> make_device_backed_comm(std::unique_ptr<Comm> device_comm, Backend* device);

}  // namespace dist
}  // namespace tc
