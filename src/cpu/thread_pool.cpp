#include "cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"

namespace tc {
namespace cpu {
namespace {

thread_local bool t_in_pool = false;
thread_local bool t_inline = false;  // tc_cpu_run_inline

// A job is handed over through an atomic generation counter. A worker that
// has finished a job polls the counter for a while before it sleeps on the
// condition variable, and the caller polls the count of workers still busy
// before it sleeps: a decode step runs hundreds of short parallel regions
// back to back (a small model's products take tens of microseconds), and
// the futex wake-up of a sleeping thread costs about as much as the region
// itself. A poll lasts at most kSpin. One that runs out makes the next
// waits of that thread sleep at once, twice as many after each further
// miss (up to kSkipMax): on a machine whose cores are taken by other
// processes the thread that would hand over the work is often not running,
// and polling there would take the core from it; the pool then sleeps as a
// plain condition-variable pool does.
using Clock = std::chrono::steady_clock;
constexpr std::chrono::microseconds kSpin{50};
constexpr int kSkipMax = 256;

class Waiter {
 public:
  // Polls pred() unless recent polls missed; returns pred().
  template <class Pred>
  bool spin(Pred pred) {
    if (skip_left_ > 0) {
      --skip_left_;
      return pred();
    }
    const auto t0 = Clock::now();
    for (;;) {
      for (int i = 0; i < 16; ++i) {
        if (pred()) {
          skip_ = 0;
          return true;
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
      }
      if (Clock::now() - t0 > kSpin) break;
    }
    skip_ = std::min(kSkipMax, 2 * skip_ + 1);
    skip_left_ = skip_;
    return pred();
  }

 private:
  int skip_ = 0, skip_left_ = 0;
};

class Pool {
 public:
  explicit Pool(int n) : nthreads_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  int size() const { return nthreads_; }

  // One job at a time: callers from different threads (streams, user
  // threads) queue up on run_mu_.
  void run(const std::function<void(int, int)>& fn) {
    if (nthreads_ == 1 || t_in_pool || t_inline) {
      fn(0, 1);
      return;
    }
    std::lock_guard<std::mutex> run_lock(run_mu_);
    job_.store(&fn, std::memory_order_relaxed);
    pending_.store(nthreads_ - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_seq_cst);
    // A worker about to sleep counts itself in sleepers_ before it looks at
    // the generation (both sequentially consistent): either it sees the new
    // job or this sees it sleeping and wakes it under the lock.
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    t_in_pool = true;
    fn(0, nthreads_);
    t_in_pool = false;
    if (!caller_wait_.spin([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mu_);
      waiting_.store(true, std::memory_order_seq_cst);
      done_cv_.wait(lock, [this] { return pending_.load(std::memory_order_seq_cst) == 0; });
      waiting_.store(false, std::memory_order_relaxed);
    }
    job_.store(nullptr, std::memory_order_relaxed);
  }

 private:
  void loop(int index) {
    t_in_pool = true;
    uint64_t seen = 0;
    Waiter wait;
    for (;;) {
      auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen; };
      if (!wait.spin([&] { return fresh() || stop_.load(std::memory_order_relaxed); })) {
        std::unique_lock<std::mutex> lock(mu_);
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        cv_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_seq_cst) != seen; });
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      if (stop_.load()) return;
      seen = generation_.load(std::memory_order_acquire);
      (*job_.load(std::memory_order_relaxed))(index, nthreads_);
      // The last worker out wakes the caller if it went to sleep; the
      // caller sets waiting_ under the lock before it checks pending_.
      if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 && waiting_.load(std::memory_order_seq_cst)) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_one();
      }
    }
  }

  const int nthreads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::atomic<const std::function<void(int, int)>*> job_{nullptr};
  std::atomic<int> pending_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> waiting_{false};
  Waiter caller_wait_;  // used under run_mu_
  std::atomic<bool> stop_{false};
};

// Reads one integer from a sysfs file; -1 when it cannot.
int read_sysfs_int(const std::string& path) {
  std::ifstream in(path);
  int v = -1;
  return (in >> v) ? v : -1;
}

// Physical cores among the CPUs this process may run on. Two hardware
// threads of one core share its vector units and caches, so a second worker
// on a core slows the FMA- and bandwidth-bound kernels rather than helping
// (llama.cpp counts threads the same way). Where the topology cannot be read
// (some sandboxes), every allowed CPU counts as a core.
int physical_cores() {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return 0;
  std::set<std::pair<int, int>> cores;  // (package, core)
  int cpus = 0;
  bool topology = true;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    ++cpus;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    const int package = read_sysfs_int(dir + "physical_package_id"), core = read_sysfs_int(dir + "core_id");
    if (package < 0 || core < 0) topology = false;
    cores.emplace(package, core);
  }
  return topology ? int(cores.size()) : cpus;
}

// TC_NUM_THREADS, else the physical cores this process may use.
int configured_threads() {
  if (config::from_env(config::Key::kNumThreads)) return int(config::number(config::Key::kNumThreads));
  int n = physical_cores();
  if (n < 1) n = int(std::thread::hardware_concurrency());
  return std::clamp(n, 1, 1024);
}

// The pool of this process. After fork() the child has only the forking
// thread: the parent's workers are gone and its mutexes may be held by
// threads that no longer exist, so a job handed to the inherited pool would
// wait forever (a level-3 chip child of a process that ran kernels before
// forking). The atfork handler makes the child leak the parent's pool and
// start a fresh one on first use.
std::atomic<Pool*> g_pool{nullptr};
std::mutex g_create_mu;

void forget_pool_in_child() {
  g_pool.store(nullptr, std::memory_order_relaxed);
  new (&g_create_mu) std::mutex();  // it may have been held by another thread at fork()
  t_in_pool = false;
}

Pool& pool() {
  // Never destroyed: worker threads must not be joined from static
  // destructors while other statics they use are gone.
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p) return *p;
  std::lock_guard<std::mutex> lock(g_create_mu);
  p = g_pool.load(std::memory_order_relaxed);
  if (!p) {
    static const bool registered = pthread_atfork(nullptr, nullptr, forget_pool_in_child) == 0;
    (void)registered;
    p = new Pool(configured_threads());
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

}  // namespace

int num_threads() { return pool().size(); }

bool runs_inline() { return t_inline; }
void set_run_inline(bool on) { t_inline = on; }

void parallel_run(const std::function<void(int, int)>& fn) { pool().run(fn); }

void parallel_run(int most, const std::function<void(int, int)>& fn) {
  if (most <= 1 || num_threads() == 1) {
    fn(0, 1);
    return;
  }
  if (most >= num_threads()) {
    pool().run(fn);
    return;
  }
  pool().run([&](int t, int) {
    if (t < most) fn(t, most);
  });
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int nt = num_threads();
  if (nt == 1 || n <= grain || t_in_pool || t_inline) {
    fn(0, n);
    return;
  }
  // Chunks of at least `grain`, about 4 per thread, taken dynamically.
  int64_t chunk = std::max(grain, (n + nt * 4 - 1) / (nt * 4));
  std::atomic<int64_t> next{0};
  pool().run([&](int, int) {
    for (;;) {
      int64_t b = next.fetch_add(chunk);
      if (b >= n) break;
      fn(b, std::min(n, b + chunk));
    }
  });
}

}  // namespace cpu
}  // namespace tc
