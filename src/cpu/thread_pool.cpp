#include "cpu/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
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

class Pool {
 public:
  explicit Pool(int n) : nthreads_(n) {
    for (int i = 1; i < n; ++i) workers_.emplace_back([this, i] { loop(i); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      pending_ = nthreads_ - 1;
      ++generation_;
    }
    cv_.notify_all();
    t_in_pool = true;
    fn(0, nthreads_);
    t_in_pool = false;
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int index) {
    t_in_pool = true;
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int, int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      (*job)(index, nthreads_);
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }

  const int nthreads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int, int)>* job_ = nullptr;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
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
