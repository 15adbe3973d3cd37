#include "dist/slice_hasher.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "core/config.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TC_CPU_RELAX() _mm_pause()
#else
#define TC_CPU_RELAX() std::this_thread::yield()
#endif

namespace tc {
namespace dist {
namespace {

// How long the helper keeps looking for the next slice before it sleeps: a
// long frame's slices come a send or receive call apart (tens of
// microseconds), so it sleeps only between frames.
constexpr auto kSpin = std::chrono::microseconds(200);

// The CPUs this process may run on (its affinity mask), at least 1.
unsigned usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return std::max(1u, std::thread::hardware_concurrency());
  return unsigned(std::max(1, CPU_COUNT(&set)));
}

}  // namespace

std::shared_ptr<SliceHasher> SliceHasher::make_if_useful() {
  const config::Value& v = config::get(config::Key::kChannelHashThread);
  const bool on = v.from_env ? v.number != 0 : usable_cpus() >= kMinThreads;
  return on ? std::make_shared<SliceHasher>() : nullptr;
}

bool SliceHasher::usable(const std::shared_ptr<SliceHasher>& h) { return h && h->owner_ == ::getpid(); }

SliceHasher::SliceHasher() : owner_(::getpid()), thread_(new std::thread([this] { loop(); })) {}

SliceHasher::~SliceHasher() {
  if (owner_ != ::getpid()) {  // a forked child's copy: the thread lives in the parent alone
    (void)thread_.release();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_->join();
}

void SliceHasher::post(Gmac* mac, const void* data, size_t n) {
  const uint64_t k = posted_.load(std::memory_order_relaxed);
  while (k - done_.load(std::memory_order_acquire) >= kRing) TC_CPU_RELAX();  // the ring is full
  ring_[k % kRing] = Job{mac, data, n};
  posted_.store(k + 1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_one();
  }
}

bool SliceHasher::drain() {
  const uint64_t want = posted_.load(std::memory_order_relaxed);
  for (unsigned i = 0; done_.load(std::memory_order_acquire) != want; ++i) {
    if (i < 4096) {
      TC_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  return !failed_.exchange(false, std::memory_order_relaxed);
}

void SliceHasher::loop() {
  uint64_t next = 0;
  for (;;) {
    if (posted_.load(std::memory_order_acquire) == next) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      while (posted_.load(std::memory_order_acquire) == next && std::chrono::steady_clock::now() < until)
        TC_CPU_RELAX();
      if (posted_.load(std::memory_order_acquire) == next) {
        std::unique_lock<std::mutex> lock(mu_);
        sleeping_.store(true, std::memory_order_seq_cst);
        // post() stores posted_ before it reads sleeping_, and this reads
        // posted_ after storing sleeping_ (both seq_cst): one of the two sees
        // the other, so no slice waits for a wake-up that never comes.
        cv_.wait(lock, [&] { return stop_ || posted_.load(std::memory_order_seq_cst) != next; });
        sleeping_.store(false, std::memory_order_relaxed);
        if (stop_ && posted_.load(std::memory_order_acquire) == next) return;
      }
    }
    const Job job = ring_[next % kRing];
    try {
      job.mac->update(job.data, job.n);
    } catch (...) {  // libcrypto's update failed: the frame's MAC is lost, drain() says so
      failed_.store(true, std::memory_order_relaxed);
    }
    done_.store(++next, std::memory_order_release);
  }
}

}  // namespace dist
}  // namespace tc
