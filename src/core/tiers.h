// Memory tiers: where a buffer's bytes live (L0 device memory, L1 host RAM,
// L3 a spill file), how they move, and the per-context accounting and
// budgets that drive automatic demotion.
//
// A buffer handle owns a BufferState that holds its current Storage. A move
// never changes a Storage in place: it allocates a new Storage in the target
// tier, copies the bytes (on a stream or now), and then swaps the new one in.
// Work already enqueued keeps its own reference to the old Storage, so a move
// or a checkpoint discard never frees bytes that pending work still uses, and
// a failed move simply drops the new Storage, leaving the bytes where they
// were.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.h"
#include "tensorcore/memory.h"

struct tc_context_s;
struct tc_buffer_s;

namespace tc {

constexpr int kTierCount = 5;

// Bytes of live buffer storage per tier, for one context. Shared with every
// Storage it counts, so a Storage freed late (after stream work) still finds it.
struct TierAccounts {
  std::atomic<uint64_t> bytes[kTierCount] = {};
};

// The state behind one buffer handle, shared with moves in flight (which
// finish after the handle may have been freed).
struct BufferState {
  std::mutex mu;
  std::condition_variable cv;  // signalled when a move finishes
  StorageRef storage;
  bool moving = false;         // a move is in flight (its job swaps `storage`)
  tc_status move_status = TC_OK;  // first failure of an async move since tier_sync
  std::string move_detail;
  std::atomic<int32_t> hint{TC_TIER_HINT_WARM};
  std::atomic<uint64_t> checkpoint_id{0};  // 0: not registered
  uint64_t seq = 0;            // order of creation, for automatic demotion
};

// Per-context tier state: accounting, budgets, the spill directory and the
// buffers that automatic demotion may pick.
class TierManager {
 public:
  TierManager();
  std::shared_ptr<TierAccounts> accounts;
  std::atomic<uint64_t> device_budget{0};  // 0: no cap
  std::atomic<uint64_t> host_budget{0};

  void set_spill_dir(std::string dir);
  std::string spill_dir();  // the override, else $TC_TIER_DIR, else <tmp>/tensorcore-spill-<euid>

  // Buffers that may be demoted automatically (owned storage), by age.
  void track(const std::shared_ptr<BufferState>& s);
  void untrack(const BufferState* s);

 private:
  friend struct TierOps;
  std::mutex dir_mu_;
  std::string dir_override_;
  std::mutex list_mu_;
  std::map<uint64_t, std::weak_ptr<BufferState>> buffers_;
  std::atomic<uint64_t> next_seq_{1};
  std::recursive_mutex alloc_mu_;  // serialises budget checks with the allocation they admit
};

constexpr size_t kHugeBytes = size_t(2) << 20;

namespace tiers {

// Asks for transparent huge pages on host memory of n >= 2 MiB (a hint).
void advise_huge(void* p, size_t n);

const char* tier_name(int32_t tier);  // "L0 (device)", ...
bool tier_implemented(int32_t tier);  // L0, L1, L3

// A new Storage of `nbytes` in `tier` (L0 or L1 memory, or an L3 file path),
// counted in the context's accounts. L0 and L1 allocations respect the
// budgets, demoting idle COLD/ICE buffers first. Fails with a detail.
tc_status allocate(tc_context_s* ctx, int32_t tier, size_t nbytes, StorageRef* out);

// Waits for an in-flight move of `buf`, then checks its bytes are in L0
// (the check every op, read, write and map runs): TC_ERR_INVALID_ARG with a
// detail naming the argument otherwise.
tc_status check_usable(const char* fn, const char* arg, tc_buffer_s* buf);

// Moves `buf` to `target` on `queue` (null: now), after its move in flight.
// `promote` says which direction the caller asked for; the other one, a
// discarded buffer, is TC_ERR_INVALID_ARG. The rest is validated by the caller.
tc_status move(const char* fn, tc_buffer_s* buf, int32_t target, bool promote, Queue* queue);

// Waits for `buf`'s move in flight; returns and clears the first failure.
tc_status sync(tc_buffer_s* buf);

// The tier of the bytes now (the source tier while a move is in flight).
int32_t current_tier(tc_buffer_s* buf);

// Usage of one implemented tier: resident bytes and capacity.
tc_status usage(tc_context_s* ctx, int32_t tier, uint64_t* resident, uint64_t* capacity);

// Checkpoint support: replace the storage with a discarded one (no bytes),
// or with new L0 storage of the same size. Wait for a move in flight first.
tc_status discard_storage(tc_buffer_s* buf);
tc_status realize_storage(tc_buffer_s* buf);
bool is_discarded(tc_buffer_s* buf);

// Buffer lifetime hooks (tc_buffer_alloc / tc_buffer_free).
void on_create(tc_buffer_s* buf);
void on_free(tc_buffer_s* buf);

}  // namespace tiers
}  // namespace tc
