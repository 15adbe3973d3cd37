// Memory tiers: allocation with budgets and automatic demotion, moves
// between L0/L1/L3 (on a stream or now), usage accounting. See core/tiers.h
// for the model and docs/memory-tiers.md for the user's view.
//
// Locking: a BufferState's `mu` guards its storage and move flag and is held
// only briefly (never while allocating or copying). TierManager::alloc_mu_
// serialises each budget check with the allocation it admits; automatic
// demotion runs under it and only try-locks other buffers, so two threads
// can never wait on each other.
#include "core/tiers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/objects.h"

namespace tc {

// ---- Backend defaults (a backend without tiers) ------------------------------

// Large host allocations are 2 MiB aligned and asked to use transparent huge
// pages: a move writes every byte of its target at once, and 4 KiB page
// faults would otherwise cost more than the copy.
void* Backend::alloc_host(size_t nbytes) {
  const size_t align = nbytes >= kHugeBytes ? kHugeBytes : 64;
  size_t rounded = (nbytes + align - 1) & ~(align - 1);
  if (rounded < nbytes) return nullptr;
  void* p = std::aligned_alloc(align, rounded);
  if (p) tiers::advise_huge(p, rounded);
  return p;
}

void Backend::release_host(void* ptr) { std::free(ptr); }

tc_status Backend::copy_async(void* dst, const void* src, size_t n, bool, Queue* queue) {
  if (queue || !host_accessible()) return fail(TC_ERR_UNSUPPORTED, "this backend cannot copy between memory tiers");
  std::memcpy(dst, src, n);
  return TC_OK;
}

tc_status Backend::run_host(Queue* queue, std::function<tc_status()> fn) {
  if (queue) return fail(TC_ERR_UNSUPPORTED, "this backend cannot order host work with its streams");
  return fn();
}

// ---- TierManager ---------------------------------------------------------------

TierManager::TierManager() : accounts(std::make_shared<TierAccounts>()) {}

void TierManager::set_spill_dir(std::string dir) {
  std::lock_guard<std::mutex> lock(dir_mu_);
  dir_override_ = std::move(dir);
}

std::string TierManager::spill_dir() {
  {
    std::lock_guard<std::mutex> lock(dir_mu_);
    if (!dir_override_.empty()) return dir_override_;
  }
  if (config::from_env(config::Key::kTierDir)) return config::text(config::Key::kTierDir);
  std::error_code ec;
  std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
  std::string base = ec ? std::string("/tmp") : tmp.string();
  return base + "/tensorcore-spill-" + std::to_string(unsigned(::geteuid()));
}

void TierManager::track(const std::shared_ptr<BufferState>& s) {
  s->seq = next_seq_++;
  std::lock_guard<std::mutex> lock(list_mu_);
  buffers_[s->seq] = s;
}

void TierManager::untrack(const BufferState* s) {
  std::lock_guard<std::mutex> lock(list_mu_);
  buffers_.erase(s->seq);
}

namespace tiers {

void advise_huge(void* p, size_t n) {
  if (n < kHugeBytes) return;
  // The 2 MiB-aligned interior of [p, p + n).
  uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugeBytes - 1) & ~uintptr_t(kHugeBytes - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~uintptr_t(kHugeBytes - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // a hint: errors ignored
}

const char* tier_name(int32_t tier) {
  switch (tier) {
    case TC_TIER_L0_DEVICE: return "L0 (device memory)";
    case TC_TIER_L1_HOST_RAM: return "L1 (host RAM)";
    case TC_TIER_L2_REMOTE_RAM: return "L2 (remote RAM)";
    case TC_TIER_L3_LOCAL_NVME: return "L3 (local disk)";
    case TC_TIER_L4_REMOTE_NVME: return "L4 (remote NVMe)";
    default: return "unknown tier";
  }
}

bool tier_implemented(int32_t tier) {
  return tier == TC_TIER_L0_DEVICE || tier == TC_TIER_L1_HOST_RAM || tier == TC_TIER_L3_LOCAL_NVME;
}

}  // namespace tiers

// ---- spill files ----------------------------------------------------------------

namespace {

std::atomic<uint64_t> g_spill_seq{0};

// Creates the spill directory if needed (the last level 0700, its parents
// with the default mode) and refuses it unless it is private: a real
// directory, not a symbolic link, owned by the effective user, with no
// group or other permission bits. A directory someone else created or can
// write into could hand our files to them, or hold links they planted.
// Trailing slashes are dropped from `*dir` ("d/" would follow a link named d).
tc_status ensure_dir(std::string* dir_inout) {
  std::string& dir = *dir_inout;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return fail(TC_ERR_IO, "cannot inspect spill directory %s: %s", dir.c_str(), std::strerror(errno));
    std::error_code ec;
    std::filesystem::path p(dir);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) return fail(TC_ERR_IO, "cannot create spill directory %s: %s", dir.c_str(), ec.message().c_str());
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(TC_ERR_IO, "cannot create spill directory %s: %s", dir.c_str(), std::strerror(errno));
    // Whoever created it (we, or someone faster), it is checked like any other.
    if (::lstat(dir.c_str(), &st) != 0)
      return fail(TC_ERR_IO, "cannot inspect spill directory %s: %s", dir.c_str(), std::strerror(errno));
  }
  if (S_ISLNK(st.st_mode))
    return fail(TC_ERR_IO, "spill directory %s is a symbolic link; refusing to spill through it", dir.c_str());
  if (!S_ISDIR(st.st_mode)) return fail(TC_ERR_IO, "spill directory %s is not a directory", dir.c_str());
  if (st.st_uid != ::geteuid())
    return fail(TC_ERR_IO, "spill directory %s is owned by uid %u, not by this process's user (uid %u); refusing it",
                dir.c_str(), unsigned(st.st_uid), unsigned(::geteuid()));
  if (st.st_mode & 077)
    return fail(TC_ERR_IO,
                "spill directory %s has mode %04o: other users have access to it; refusing it (make it private "
                "with chmod 700, or choose another directory)",
                dir.c_str(), unsigned(st.st_mode & 07777));
  return TC_OK;
}

// Creates a new, empty spill file in `dir` (already checked by ensure_dir)
// and returns its name. The file is created exclusively and never through a
// link: a name that exists already (a file or a link we did not create) is
// skipped, never opened.
tc_status create_spill_file(const std::string& dir, std::string* path) {
  constexpr int kAttempts = 64;
  for (int i = 0; i < kAttempts; ++i) {
    std::string p = dir + "/tc-" + std::to_string(::getpid()) + "-" + std::to_string(++g_spill_seq) + ".spill";
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      *path = std::move(p);
      return TC_OK;
    }
    if (errno != EEXIST) return fail(TC_ERR_IO, "cannot create spill file %s: %s", p.c_str(), std::strerror(errno));
  }
  return fail(TC_ERR_IO, "cannot create a spill file in %s: %d names in a row are taken by files this process did not "
              "create", dir.c_str(), kAttempts);
}

// Opens a spill file this process created, never through a link, and
// checks it is still a regular file of ours.
int open_spill(const std::string& path, int flags, const char* what) {
  int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    fail(TC_ERR_IO, "cannot %s spill file %s: %s", what, path.c_str(), std::strerror(errno));
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    fail(TC_ERR_IO, "cannot %s spill file %s: it is no longer the regular file this process created", what,
         path.c_str());
    return -1;
  }
  return fd;
}

// Writes the whole file or removes it. Space is reserved first so a full
// disk (or a file-size limit) fails before any byte is written.
tc_status write_spill(const std::string& path, const void* data, size_t n) {
  int fd = open_spill(path, O_WRONLY | O_TRUNC, "write");
  if (fd < 0) {
    std::string detail = last_detail();
    ::unlink(path.c_str());
    return fail_with(TC_ERR_IO, detail);
  }
  auto give_up = [&](const char* what, int err, size_t done) {
    ::close(fd);
    ::unlink(path.c_str());
    return fail(TC_ERR_IO, "%s spill file %s: %s (%zu of %zu bytes written)", what, path.c_str(), std::strerror(err),
                done, n);
  };
  int e = ::posix_fallocate(fd, 0, off_t(n));
  if (e != 0 && e != EOPNOTSUPP && e != EINVAL && e != ENOSYS) return give_up("reserving space for", e, 0);
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::write(fd, p + done, std::min<size_t>(n - done, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return give_up("writing", errno, done);
    }
    if (w == 0) return give_up("writing", ENOSPC, done);
    done += size_t(w);
  }
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(path.c_str());
    return fail(TC_ERR_IO, "closing spill file %s: %s", path.c_str(), std::strerror(err));
  }
  return TC_OK;
}

tc_status read_spill(const std::string& path, void* data, size_t n) {
  int fd = open_spill(path, O_RDONLY, "open");
  if (fd < 0) return TC_ERR_IO;
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, p + done, std::min<size_t>(n - done, size_t(1) << 30));
    if (r < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return fail(TC_ERR_IO, "reading spill file %s: %s", path.c_str(), std::strerror(err));
    }
    if (r == 0) {
      ::close(fd);
      return fail(TC_ERR_IO, "spill file %s ends after %zu of %zu bytes", path.c_str(), done, n);
    }
    done += size_t(r);
  }
  ::close(fd);
  return TC_OK;
}

// Free bytes of the file system holding `dir` (or its nearest existing parent).
uint64_t free_disk_bytes(const std::string& dir) {
  std::filesystem::path p(dir);
  for (;;) {
    struct statvfs vfs;
    if (::statvfs(p.c_str(), &vfs) == 0) return uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize);
    if (!p.has_parent_path() || p.parent_path() == p) return 0;
    p = p.parent_path();
  }
}

uint64_t physical_ram() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

// ---- moves ----------------------------------------------------------------------

// One move in flight: its steps run in stream order (or now) and share it.
struct MoveJob {
  std::shared_ptr<BufferState> state;
  Backend* backend = nullptr;
  StorageRef src, dst, staging;
  std::mutex mu;  // status is written by stream steps and by the submitting thread
  tc_status status = TC_OK;
  std::string detail;

  void record(tc_status st) {
    if (st == TC_OK) return;
    std::lock_guard<std::mutex> lock(mu);
    if (status == TC_OK) {
      status = st;
      detail = last_detail();
    }
  }
  tc_status failed() {
    std::lock_guard<std::mutex> lock(mu);
    return status;
  }
};
using JobRef = std::shared_ptr<MoveJob>;

// Swaps the new storage in (or keeps the old one after a failure), ends the
// move and wakes waiters. Storage dropped here is released where the
// backend allows (this may run inside a CUDA stream callback).
void complete(const JobRef& j, bool record_failure) {
  std::vector<StorageRef> drop;
  tc_status st;
  std::string detail;
  {
    std::lock_guard<std::mutex> lock(j->mu);
    st = j->status;
    detail = j->detail;
  }
  {
    std::lock_guard<std::mutex> lock(j->state->mu);
    if (st == TC_OK) {
      drop.push_back(std::move(j->state->storage));
      j->state->storage = j->dst;
    } else if (record_failure && j->state->move_status == TC_OK) {
      j->state->move_status = st;
      j->state->move_detail = detail;
    }
    j->state->moving = false;
  }
  drop.push_back(std::move(j->src));
  drop.push_back(std::move(j->dst));
  drop.push_back(std::move(j->staging));
  j->backend->defer_release(std::move(drop));
  j->state->cv.notify_all();
}

// Host memory to stage device bytes through on their way to or from disk.
tc_status make_staging(Backend& be, size_t n, StorageRef* out) {
  auto s = std::make_shared<Storage>();
  s->backend = &be;
  s->size = n;
  s->owned = true;
  s->tier = TC_TIER_L1_HOST_RAM;
  s->data = be.alloc_host(n);
  if (!s->data) return fail(TC_ERR_ALLOC, "could not allocate %zu bytes of host memory to stage a move to disk", n);
  *out = std::move(s);
  return TC_OK;
}

// Enqueues (or runs) the copy steps of `j`. A step after a failed one does
// nothing. Returns an enqueue failure; step failures land in j->status.
tc_status run_steps(const JobRef& j, Queue* q) {
  Backend& be = *j->backend;
  Storage& src = *j->src;
  Storage& dst = *j->dst;
  const size_t n = src.size;
  const int32_t a = src.tier, b = dst.tier;
  auto host = [&](std::function<tc_status(MoveJob&)> fn) {
    return be.run_host(q, [j, fn] {
      if (j->failed() != TC_OK) return TC_OK;
      tc_status st = fn(*j);
      j->record(st);
      return st;
    });
  };
  auto copy = [&](void* to, const void* from, bool to_device) {
    tc_status st = be.copy_async(to, from, n, to_device, q);
    j->record(st);
    return st;
  };
  const bool host_l0 = be.host_accessible();  // L0 is host memory (the CPU): disk I/O reads it directly
  if (a == TC_TIER_L0_DEVICE && b == TC_TIER_L1_HOST_RAM) return copy(dst.data, src.data, false);
  if (a == TC_TIER_L1_HOST_RAM && b == TC_TIER_L0_DEVICE) return copy(dst.data, src.data, true);
  if (a == TC_TIER_L1_HOST_RAM && b == TC_TIER_L3_LOCAL_NVME)
    return host([](MoveJob& m) { return write_spill(m.dst->path, m.src->data, m.src->size); });
  if (a == TC_TIER_L3_LOCAL_NVME && b == TC_TIER_L1_HOST_RAM)
    return host([](MoveJob& m) { return read_spill(m.src->path, m.dst->data, m.dst->size); });
  if (a == TC_TIER_L0_DEVICE && b == TC_TIER_L3_LOCAL_NVME) {
    if (host_l0) return host([](MoveJob& m) { return write_spill(m.dst->path, m.src->data, m.src->size); });
    if (tc_status st = make_staging(be, n, &j->staging)) return st;
    if (tc_status st = copy(j->staging->data, src.data, false)) return st;
    return host([](MoveJob& m) { return write_spill(m.dst->path, m.staging->data, m.src->size); });
  }
  if (a == TC_TIER_L3_LOCAL_NVME && b == TC_TIER_L0_DEVICE) {
    if (host_l0) return host([](MoveJob& m) { return read_spill(m.src->path, m.dst->data, m.dst->size); });
    if (tc_status st = make_staging(be, n, &j->staging)) return st;
    if (tc_status st = host([](MoveJob& m) { return read_spill(m.src->path, m.staging->data, m.dst->size); }))
      return st;
    return copy(dst.data, j->staging->data, true);
  }
  return fail(TC_ERR_INTERNAL, "no move from %s to %s", tiers::tier_name(a), tiers::tier_name(b));
}

void release_claim(const std::shared_ptr<BufferState>& state) {
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->moving = false;
  }
  state->cv.notify_all();
}

// Moves the claimed buffer (state->moving already set by the caller, `src`
// its storage) to `target`, on `q` or now. Ends the claim on every path.
tc_status run_move(tc_context_s* ctx, const std::shared_ptr<BufferState>& state, const StorageRef& src,
                   int32_t target, Queue* q) {
  StorageRef dst;
  if (tc_status st = tiers::allocate(ctx, target, src->size, &dst)) {
    release_claim(state);
    return st;
  }
  if (target == TC_TIER_L0_DEVICE && ctx->backend->host_accessible()) tiers::advise_huge(dst->data, dst->size);
  auto j = std::make_shared<MoveJob>();
  j->state = state;
  j->backend = ctx->backend.get();
  j->src = src;
  j->dst = std::move(dst);
  Backend& be = *j->backend;
  if (!q) {
    tc_status st = run_steps(j, nullptr);
    j->record(st);
    st = j->failed();
    std::string detail = j->detail;
    complete(j, false);
    j.reset();
    be.collect();
    return st == TC_OK ? TC_OK : fail_with(st, detail);
  }
  // A step that could not be enqueued fails the move now; the completion
  // still runs in stream order (after the steps that were enqueued) and then
  // does not report the failure a second time.
  tc_status st = run_steps(j, q);
  std::string detail = st == TC_OK ? std::string() : last_detail();
  j->record(st);
  const bool reported_now = st != TC_OK;
  if (be.run_host(q, [j, reported_now] {
        complete(j, !reported_now);
        return TC_OK;
      }) != TC_OK) {
    // The completion could not be enqueued (the stream is broken): wait for
    // the steps already enqueued, then finish here.
    if (!reported_now) detail = last_detail();
    q->sync(nullptr);
    j->record(fail_with(TC_ERR_DISPATCH, detail));
    complete(j, false);
    return fail_with(reported_now ? st : TC_ERR_DISPATCH, detail);
  }
  return reported_now ? fail_with(st, detail) : TC_OK;
}

// The storage of `state` if it can be demoted automatically from `tier`
// right now (idle, owned, resident, no move, nothing else holding it); the
// buffer is then claimed (moving = true).
StorageRef claim_idle(const std::shared_ptr<BufferState>& state, int32_t tier) {
  std::unique_lock<std::mutex> lock(state->mu, std::try_to_lock);
  if (!lock.owns_lock() || state->moving) return nullptr;
  const StorageRef& s = state->storage;
  if (!s || !s->owned || !s->resident || s->tier != tier || s.use_count() != 1) return nullptr;
  state->moving = true;
  return s;
}

}  // namespace

// Budget enforcement and automatic demotion (needs TierManager's privates).
struct TierOps {
  // Demotes one idle COLD/ICE buffer (ICE first, oldest first) out of
  // `tier`; false when none could be. `why` gets the last move failure.
  static bool evict_one(tc_context_s* ctx, int32_t tier, std::string* why) {
    TierManager& m = ctx->tiers;
    std::vector<std::shared_ptr<BufferState>> all;
    {
      std::lock_guard<std::mutex> lock(m.list_mu_);
      for (auto& kv : m.buffers_)
        if (auto s = kv.second.lock()) all.push_back(std::move(s));
    }
    for (int32_t hint : {TC_TIER_HINT_ICE, TC_TIER_HINT_COLD}) {
      for (auto& state : all) {
        if (state->hint.load() != hint) continue;
        // L0 goes to L1 if the host budget admits it, else to disk; L1 to disk.
        std::vector<int32_t> targets;
        if (tier == TC_TIER_L0_DEVICE) targets = {TC_TIER_L1_HOST_RAM, TC_TIER_L3_LOCAL_NVME};
        else targets = {TC_TIER_L3_LOCAL_NVME};
        for (int32_t target : targets) {
          StorageRef src = claim_idle(state, tier);
          if (!src) break;
          if (run_move(ctx, state, src, target, nullptr) == TC_OK) return true;
          *why = last_detail();
        }
      }
    }
    return false;
  }

  // Makes room for `n` more bytes in `tier` under its budget. alloc_mu_ held.
  static tc_status reserve(tc_context_s* ctx, int32_t tier, size_t n) {
    TierManager& m = ctx->tiers;
    const uint64_t budget = tier == TC_TIER_L0_DEVICE ? m.device_budget.load() : m.host_budget.load();
    if (budget == 0) return TC_OK;
    if (n > budget)
      return fail(TC_ERR_ALLOC, "%zu bytes exceed the %s budget of %llu bytes", n, tiers::tier_name(tier),
                  (unsigned long long)budget);
    std::string why;
    while (m.accounts->bytes[tier].load() + n > budget) {
      if (!evict_one(ctx, tier, &why))
        return fail(TC_ERR_ALLOC,
                    "%zu bytes do not fit the %s budget of %llu bytes (%llu in use) and no idle COLD or ICE buffer "
                    "is left to demote%s%s",
                    n, tiers::tier_name(tier), (unsigned long long)budget,
                    (unsigned long long)m.accounts->bytes[tier].load(), why.empty() ? "" : "; last demotion failed: ",
                    why.c_str());
    }
    return TC_OK;
  }

  static std::recursive_mutex& alloc_mu(TierManager& m) { return m.alloc_mu_; }
};

namespace tiers {

tc_status allocate(tc_context_s* ctx, int32_t tier, size_t nbytes, StorageRef* out) {
  TierManager& m = ctx->tiers;
  Backend& be = *ctx->backend;
  auto s = std::make_shared<Storage>();
  s->backend = &be;
  s->size = nbytes;
  s->owned = true;
  s->tier = tier;
  if (tier == TC_TIER_L3_LOCAL_NVME) {
    std::string dir = m.spill_dir();
    if (tc_status st = ensure_dir(&dir)) return st;
    if (tc_status st = create_spill_file(dir, &s->path)) return st;
  } else {
    std::lock_guard<std::recursive_mutex> lock(TierOps::alloc_mu(m));
    be.collect();
    if (tc_status st = TierOps::reserve(ctx, tier, nbytes)) return st;
    auto raw = [&] { return tier == TC_TIER_L0_DEVICE ? be.alloc(nbytes) : be.alloc_host(nbytes); };
    s->data = raw();
    // Out of memory without a budget: demote idle COLD/ICE buffers and retry.
    std::string why;
    while (!s->data && TierOps::evict_one(ctx, tier, &why)) s->data = raw();
    if (!s->data) return fail(TC_ERR_ALLOC, "could not allocate %zu bytes of %s", nbytes, tier_name(tier));
  }
  s->accounts = m.accounts;
  m.accounts->bytes[tier] += nbytes;
  *out = std::move(s);
  return TC_OK;
}

tc_status check_usable(const char* fn, const char* arg, tc_buffer_s* buf) {
  const auto& state = buf->storage.state();
  std::unique_lock<std::mutex> lock(state->mu);
  state->cv.wait(lock, [&] { return !state->moving; });
  const Storage& s = *state->storage;
  if (!s.resident)
    return fail(TC_ERR_INVALID_ARG,
                "%s: buffer %s has no storage: checkpoint %llu discarded it; call tc_checkpoint_realize first", fn,
                arg, (unsigned long long)state->checkpoint_id.load());
  if (s.tier != TC_TIER_L0_DEVICE)
    return fail(TC_ERR_INVALID_ARG,
                "%s: buffer %s is in tier %s, not in device memory; promote it to L0 first "
                "(tc_buffer_promote_async(buf, TC_TIER_L0_DEVICE, stream))",
                fn, arg, tier_name(s.tier));
  return TC_OK;
}

tc_status move(const char* fn, tc_buffer_s* buf, int32_t target, bool promote, Queue* q) {
  std::shared_ptr<BufferState> state = buf->storage.state();
  StorageRef src;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return !state->moving; });
    src = state->storage;
    if (!src->resident)
      return fail(TC_ERR_INVALID_ARG, "%s: the buffer was discarded by checkpoint %llu; realize it before moving it",
                  fn, (unsigned long long)state->checkpoint_id.load());
    if (src->tier == target) return TC_OK;
    if (promote && target > src->tier)
      return fail(TC_ERR_INVALID_ARG, "%s: target %s is slower than the buffer's tier %s; use tc_buffer_demote_async",
                  fn, tier_name(target), tier_name(src->tier));
    if (!promote && target < src->tier)
      return fail(TC_ERR_INVALID_ARG, "%s: target %s is faster than the buffer's tier %s; use tc_buffer_promote_async",
                  fn, tier_name(target), tier_name(src->tier));
    state->moving = true;
  }
  return run_move(buf->ctx, state, src, target, q);
}

tc_status sync(tc_buffer_s* buf) {
  const auto& state = buf->storage.state();
  tc_status st;
  std::string detail;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return !state->moving; });
    st = state->move_status;
    detail.swap(state->move_detail);
    state->move_status = TC_OK;
  }
  buf->ctx->backend->collect();
  if (st != TC_OK) return fail_with(st, "an asynchronous tier move failed: " + detail);
  return TC_OK;
}

int32_t current_tier(tc_buffer_s* buf) {
  std::lock_guard<std::mutex> lock(buf->storage.state()->mu);
  return buf->storage.state()->storage->tier;
}

bool is_discarded(tc_buffer_s* buf) {
  std::lock_guard<std::mutex> lock(buf->storage.state()->mu);
  return !buf->storage.state()->storage->resident;
}

tc_status usage(tc_context_s* ctx, int32_t tier, uint64_t* resident, uint64_t* capacity) {
  TierManager& m = ctx->tiers;
  ctx->backend->collect();
  uint64_t used = m.accounts->bytes[tier].load(), cap = 0;
  auto capped = [](uint64_t physical, uint64_t budget) {
    if (budget == 0) return physical;
    return physical == 0 ? budget : std::min(physical, budget);
  };
  if (tier == TC_TIER_L0_DEVICE) {
    struct tc_device_info info;
    ctx->backend->device_info(&info);
    cap = capped(info.memory_bytes, m.device_budget.load());
  } else if (tier == TC_TIER_L1_HOST_RAM) {
    cap = capped(physical_ram(), m.host_budget.load());
  } else {
    cap = free_disk_bytes(m.spill_dir());
  }
  if (resident) *resident = used;
  if (capacity) *capacity = cap;
  return TC_OK;
}

tc_status discard_storage(tc_buffer_s* buf) {
  const auto& state = buf->storage.state();
  auto empty = std::make_shared<Storage>();
  empty->backend = buf->ctx->backend.get();
  empty->owned = true;
  empty->resident = false;
  StorageRef old;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return !state->moving; });
    empty->size = state->storage->size;
    old = std::move(state->storage);
    state->storage = std::move(empty);
  }
  // `old` is freed here unless enqueued work still holds it (then when that ends).
  return TC_OK;
}

tc_status realize_storage(tc_buffer_s* buf) {
  const auto& state = buf->storage.state();
  size_t n;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    n = state->storage->size;
  }
  StorageRef fresh;
  if (tc_status st = allocate(buf->ctx, TC_TIER_L0_DEVICE, n, &fresh)) return st;
  StorageRef old;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return !state->moving; });
    old = std::move(state->storage);
    state->storage = std::move(fresh);
  }
  return TC_OK;
}

void on_create(tc_buffer_s* buf) {
  const auto& state = buf->storage.state();
  if (state->storage && state->storage->owned) buf->ctx->tiers.track(state);
}

void on_free(tc_buffer_s* buf) { buf->ctx->tiers.untrack(buf->storage.state().get()); }

}  // namespace tiers
}  // namespace tc
