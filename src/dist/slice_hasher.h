// A frame's MAC computed beside its transfer: a thread of its own hashes
// the slices the caller has already sent (or received), in order, while the
// caller moves the next one through the socket.
//
// Why: on loopback each side of a long frame does two passes over its bytes,
// the kernel's copy into (out of) the socket and the GHASH pass; one after
// the other they hold a 1 MiB copy to about copy / (copy + hash) of raw TCP
// (0.66-0.77x on a 16-thread host). With the hash on another core only the
// last slice's hash is left after the transfer. With few CPUs the helper
// would take the peer's core (or its own caller's) instead: it is used
// where the process may run on at least kMinThreads CPUs (its affinity
// mask; TC_CHANNEL_HASH_THREAD decides otherwise). On a 2-CPU VM, forced
// on, 1 MiB copies ran at 0.4x the speed without it.
//
// One producer (the thread sending, or receiving, the frame); the Gmac and
// the slices must stay untouched between post() and drain(). A process
// that forks keeps the helper in the parent only: a child's copy hashes
// inline.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "core/crypto.h"

namespace tc {
namespace dist {

class SliceHasher {
 public:
  static constexpr unsigned kMinThreads = 4;
  // Slice length while a helper hashes: short, so that little is left to
  // hash once the last byte has moved (a send or receive call per slice).
  static constexpr size_t kSliceBytes = 128 << 10;

  // A helper for this process, or null where frames hash inline (the
  // setting, or too few hardware threads).
  static std::shared_ptr<SliceHasher> make_if_useful();
  // Whether `h` may be used by this process (it was made here, not
  // inherited through fork).
  static bool usable(const std::shared_ptr<SliceHasher>& h);

  SliceHasher();
  ~SliceHasher();
  SliceHasher(const SliceHasher&) = delete;
  SliceHasher& operator=(const SliceHasher&) = delete;

  // mac->update(data, n) on the helper, after every slice posted before.
  void post(Gmac* mac, const void* data, size_t n);
  // Returns once every posted slice is hashed: false if an update failed
  // (libcrypto's; the frame's MAC is then unusable).
  bool drain();

 private:
  struct Job {
    Gmac* mac;
    const void* data;
    size_t n;
  };
  static constexpr size_t kRing = 64;
  void loop();

  Job ring_[kRing];
  std::atomic<uint64_t> posted_{0}, done_{0};
  std::atomic<bool> sleeping_{false}, failed_{false};
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  pid_t owner_;
  std::unique_ptr<std::thread> thread_;
};

// Drains a helper when a frame's send or receive ends, on every path (its
// slices are the caller's memory).
class DrainOnExit {
 public:
  explicit DrainOnExit(SliceHasher* h) : h_(h) {}
  ~DrainOnExit() {
    if (h_) h_->drain();
  }
  DrainOnExit(const DrainOnExit&) = delete;
  DrainOnExit& operator=(const DrainOnExit&) = delete;

 private:
  SliceHasher* h_;
};

}  // namespace dist
}  // namespace tc
