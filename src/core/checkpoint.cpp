// Activation checkpointing: the registry and its state machine (see
// core/checkpoint.h). Storage is swapped by core/tiers, which keeps bytes
// that enqueued work still uses alive until that work ends.
#include "core/checkpoint.h"

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/error.h"
#include "core/objects.h"
#include "core/tiers.h"
#include "tensorcore/diagnostics.h"

namespace tc {
namespace checkpoint {
namespace {

enum class Phase { Resident, Discarding, Discarded, Realizing };

struct Entry {
  tc_buffer_s* buf = nullptr;
  tc_checkpoint_recompute_fn fn = nullptr;
  void* user_data = nullptr;
  size_t bytes = 0;
  Phase phase = Phase::Resident;
  std::thread::id busy_thread;  // the thread discarding or realizing it
};

// Discarding counts as resident and Realizing as discarded until they end.
struct Registry {
  std::mutex mu;
  std::condition_variable cv;  // an entry left a busy phase
  std::unordered_map<uint64_t, Entry> entries;
  std::unordered_map<tc_buffer_s*, uint64_t> by_buffer;
  uint64_t next_id = 1;
  uint64_t resident = 0, discarded = 0, bytes_discarded = 0;
};

Registry& reg() {
  static auto* r = new Registry();  // outlives static destructors
  return *r;
}

bool busy(Phase p) { return p == Phase::Discarding || p == Phase::Realizing; }

// The entry `id` once no other thread is discarding or realizing it; null
// with a failure recorded in *st when unknown or busy on this very thread.
Entry* settled(std::unique_lock<std::mutex>& lock, uint64_t id, const char* fn, tc_status* st) {
  Registry& r = reg();
  for (;;) {
    auto it = r.entries.find(id);
    if (it == r.entries.end()) {
      *st = fail(TC_ERR_INVALID_ARG, "%s: checkpoint %llu is not registered", fn, (unsigned long long)id);
      return nullptr;
    }
    Entry& e = it->second;
    if (!busy(e.phase)) return &e;
    if (e.busy_thread == std::this_thread::get_id()) {
      *st = fail(TC_ERR_INVALID_ARG, "%s: checkpoint %llu is being %s by this thread (from its own recompute callback?)",
                 fn, (unsigned long long)id, e.phase == Phase::Realizing ? "realized" : "discarded");
      return nullptr;
    }
    r.cv.wait(lock);
  }
}

// Ends a busy phase: `to` is the settled phase reached.
void settle(uint64_t id, Phase to) {
  Registry& r = reg();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    Entry& e = r.entries.at(id);  // busy entries are never erased
    const bool was_resident = e.phase == Phase::Discarding;
    const bool now_resident = to == Phase::Resident;
    if (was_resident != now_resident) {
      if (now_resident) {
        r.resident++;
        r.discarded--;
        r.bytes_discarded -= e.bytes;
      } else {
        r.resident--;
        r.discarded++;
        r.bytes_discarded += e.bytes;
      }
    }
    e.phase = to;
    e.busy_thread = std::thread::id();
  }
  r.cv.notify_all();
}

}  // namespace

tc_status register_buffer(tc_buffer_s* buf, tc_checkpoint_recompute_fn fn, void* user_data, uint64_t* out_id) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto known = r.by_buffer.find(buf);
  if (known != r.by_buffer.end())
    return fail(TC_ERR_INVALID_ARG, "tc_checkpoint_register: the buffer is already registered as checkpoint %llu",
                (unsigned long long)known->second);
  const uint64_t id = r.next_id++;
  Entry e;
  e.buf = buf;
  e.fn = fn;
  e.user_data = user_data;
  e.bytes = buf->size();
  // A buffer left discarded by an earlier registration starts discarded.
  e.phase = tiers::is_discarded(buf) ? Phase::Discarded : Phase::Resident;
  if (e.phase == Phase::Resident) {
    r.resident++;
  } else {
    r.discarded++;
    r.bytes_discarded += e.bytes;
  }
  r.entries.emplace(id, e);
  r.by_buffer.emplace(buf, id);
  buf->storage.state()->checkpoint_id = id;
  *out_id = id;
  return TC_OK;
}

tc_status discard(uint64_t id) {
  const char* fn = "tc_checkpoint_discard";
  Registry& r = reg();
  tc_buffer_s* buf;
  {
    std::unique_lock<std::mutex> lock(r.mu);
    tc_status st = TC_OK;
    Entry* e = settled(lock, id, fn, &st);
    if (!e) return st;
    if (e->phase == Phase::Discarded) return TC_OK;
    e->phase = Phase::Discarding;
    e->busy_thread = std::this_thread::get_id();
    buf = e->buf;
  }
  tc_status st = tiers::discard_storage(buf);
  settle(id, st == TC_OK ? Phase::Discarded : Phase::Resident);
  return st;
}

tc_status realize(uint64_t id) {
  const char* fn = "tc_checkpoint_realize";
  Registry& r = reg();
  tc_buffer_s* buf;
  tc_checkpoint_recompute_fn recompute;
  void* user_data;
  {
    std::unique_lock<std::mutex> lock(r.mu);
    tc_status st = TC_OK;
    Entry* e = settled(lock, id, fn, &st);
    if (!e) return st;
    if (e->phase == Phase::Resident) return TC_OK;
    e->phase = Phase::Realizing;
    e->busy_thread = std::this_thread::get_id();
    buf = e->buf;
    recompute = e->fn;
    user_data = e->user_data;
  }
  tc_status st = tiers::realize_storage(buf);
  if (st != TC_OK) {
    std::string detail = last_detail();
    settle(id, Phase::Discarded);
    return fail_with(st, std::string(fn) + ": reallocating checkpoint " + std::to_string(id) + ": " + detail);
  }
  ok();  // the callback's own failures are the only detail from here on
  tc_status cb;
  try {
    cb = recompute(user_data);
  } catch (...) {  // a C++ callback must not throw through C; treat it as a failure
    cb = fail(TC_ERR_INTERNAL, "the recompute callback threw an exception");
  }
  if (cb == TC_OK) {
    settle(id, Phase::Resident);
    return TC_OK;
  }
  std::string inner = last_status() == TC_OK ? std::string() : last_detail();
  tc_status reported = cb < 0 ? cb : TC_ERR_INTERNAL;
  char head[256];
  std::snprintf(head, sizeof head, "%s: the recompute callback of checkpoint %llu returned %d (%s); the buffer stays "
                "discarded", fn, (unsigned long long)id, int(cb), tc_status_string(cb));
  tiers::discard_storage(buf);  // free what was allocated for the failed recompute
  settle(id, Phase::Discarded);
  return fail_with(reported, inner.empty() ? std::string(head) : std::string(head) + ": " + inner);
}

bool is_resident(uint64_t id) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(id);
  return it != r.entries.end() && it->second.phase == Phase::Resident;
}

namespace {
// Removes a settled entry (registry lock held).
void erase_entry(uint64_t id, Entry& e) {
  Registry& r = reg();
  if (e.phase == Phase::Resident) {
    r.resident--;
  } else {
    r.discarded--;
    r.bytes_discarded -= e.bytes;
  }
  e.buf->storage.state()->checkpoint_id = 0;
  r.by_buffer.erase(e.buf);
  r.entries.erase(id);
}
}  // namespace

tc_status unregister(uint64_t id) {
  Registry& r = reg();
  std::unique_lock<std::mutex> lock(r.mu);
  tc_status st = TC_OK;
  Entry* e = settled(lock, id, "tc_checkpoint_unregister", &st);
  if (!e) return st;
  erase_entry(id, *e);
  return TC_OK;
}

tc_status forget_buffer(tc_buffer_s* buf) {
  Registry& r = reg();
  std::unique_lock<std::mutex> lock(r.mu);
  auto it = r.by_buffer.find(buf);
  if (it == r.by_buffer.end()) return TC_OK;
  const uint64_t id = it->second;
  tc_status st = TC_OK;
  Entry* e = settled(lock, id, "tc_buffer_free", &st);
  if (!e) return st;
  erase_entry(id, *e);
  return TC_OK;
}

uint64_t bytes_discarded() {
  std::lock_guard<std::mutex> lock(reg().mu);
  return reg().bytes_discarded;
}

uint64_t count_resident() {
  std::lock_guard<std::mutex> lock(reg().mu);
  return reg().resident;
}

uint64_t count_discarded() {
  std::lock_guard<std::mutex> lock(reg().mu);
  return reg().discarded;
}

}  // namespace checkpoint
}  // namespace tc
