// The per-task path of a level-3 Worker's parent process: task records,
// their dependencies (a DepMap), ready queues per child, frames posted into
// the children's shared-memory mailbox and collected from it, and each run's
// count of outstanding tasks and first error. One call per submitted task,
// no interpreter work per task beyond it.
//
// The Python engine (python/simpler/level3/engine.py) keeps what is rare or
// needs Python: resolving a task's arguments, waiting (poll, pidfds,
// timeouts), control requests (mapping more buffers than a frame holds),
// and remote sessions' I/O: a task for a remote worker becomes ready here,
// the engine takes it (take_external), sends it, and reports its completion.
//
// The mailbox layout is python/simpler/level3/layout.py's; the values a
// scheduler is created with are checked against the ones compiled here.
// Only the thread holding the engine's lock calls in.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/depmap.h"
#include "runtime/error.h"

namespace simpler::level3 {

// layout.py, in the order simpler_l3_create receives them.
struct Layout {
  static constexpr uint32_t kFrames = 16, kFrameBytes = 32 * 1024, kGlobalBytes = 64, kChildHeader = 64,
                            kCtrlBytes = 64 * 1024;
  static constexpr uint32_t kMaxTensors = 256, kMaxScalars = 128, kMaxMaps = 8, kMapEntry = 64, kNameBytes = 40;
  static constexpr uint32_t kHdr = 4, kStatus = 40, kMaps = 64, kTags = kMaps + kMaxMaps * kMapEntry,
                            kDirs = kTags + 4 * kMaxTensors, kTensors = kDirs + kMaxTensors,
                            kScalars = kTensors + 96 * kMaxTensors, kMsg = kScalars + 8 * kMaxScalars,
                            kMsgBytes = kFrameBytes - kMsg;
  static constexpr uint32_t kSleeping = 4;  // the child header's flag
  static constexpr uint8_t kFree = 0, kPosted = 1, kDone = 2;
  static constexpr uint64_t kChildBytes = kChildHeader + kCtrlBytes + uint64_t(kFrames) * kFrameBytes;
  static constexpr uint32_t kValues[] = {kFrames, kFrameBytes, kGlobalBytes, kChildHeader, kCtrlBytes,
                                         kHdr,    kStatus,     kMaps,        kTags,        kDirs,
                                         kTensors, kScalars,   kMsg,         kMaxTensors,  kMaxScalars,
                                         kMaxMaps, kMapEntry,  kNameBytes,   kSleeping,    kFree,
                                         kPosted,  kDone};
  static constexpr const char* kNames[] = {
      "FRAMES",    "FRAME_BYTES", "GLOBAL_BYTES", "CHILD_HEADER", "CTRL_BYTES", "F_HDR",      "F_STATUS",
      "F_MAPS",    "F_TAGS",      "F_DIRS",       "F_TENSORS",    "F_SCALARS",  "F_MSG",      "MAX_TENSORS",
      "MAX_SCALARS", "MAX_MAPS",  "MAP_ENTRY",    "NAME_BYTES",   "C_SLEEPING", "FREE",       "POSTED",
      "DONE"};
  static_assert(sizeof(kValues) / sizeof(kValues[0]) == sizeof(kNames) / sizeof(kNames[0]));
};

enum class Role : int32_t { Chip = 0, Sub = 1, Remote = 2 };
enum class State : uint8_t { Pending, Ready, Running, Done, Failed, Cancelled };

// What the Python side reads (and, for `defer`, writes) without a call
// (simpler_l3_notice).
struct Notice {
  uint32_t flags;              // kExternalReady | kMapsNeeded
  uint32_t defer;              // written by the engine: an orchestration is submitting (wakes coalesce)
  uint64_t live;               // tasks submitted and not finished
  uint64_t inflight;           // tasks in children's frames, not yet collected
  uint64_t external_running;   // tasks sent to remote workers, not yet completed
  uint64_t deferred_wakes;     // children whose wake waits for flush_wakes() or its delay
};
constexpr uint32_t kExternalReady = 1;  // take_external() has tasks
constexpr uint32_t kMapsNeeded = 2;     // maps_needed() names a child and buffers

struct Run {
  uint32_t id = 0;
  uint64_t outstanding = 0;
  bool closed = false, released = false;
  tc_status status = TC_OK;  // the first error
  std::string message;
  void fail(tc_status st, std::string msg) {
    if (status == TC_OK) status = st, message = std::move(msg);
  }
};

struct Task {
  uint64_t id = 0;
  Run* run = nullptr;
  uint32_t tpl = 0, cfg = 0;  // its template (kind, callable slot, label) and config
  int32_t ep = -1;  // the endpoint; -1: a sub-task not yet placed
  uint32_t nt = 0, ns = 0, pending = 0;
  State state = State::Pending;
  bool in_map = false;
  std::string payload;         // the frame's tags (4 nt), dirs (nt), tensors (96 nt), scalars (8 ns)
  std::vector<uint32_t> shm;   // shared buffers it names
  std::vector<uint64_t> dev;   // device allocations (bases) of its chip it names
  std::vector<uint64_t> consumers;  // ids of tasks waiting for it
};

struct Endpoint {
  Role role = Role::Sub;
  std::string label;
  uint8_t* block = nullptr;  // its mailbox block (local children)
  int efd = -1;
  std::string why_dead;  // empty while it lives
  std::deque<Task*> ready;
  std::array<Task*, Layout::kFrames> busy{};
  uint32_t seq = 0, posted = 0;  // seq of the last task posted; posted and not yet collected
  std::unordered_set<uint32_t> mapped;
  std::vector<uint32_t> maps_needed;  // buffers a control request must map before its next task
  bool wake_deferred = false;
  double deferred_at = 0;
};

struct SharedBuffer {
  uint64_t base = 0, nbytes = 0;
  std::string name;
};

// What a submit names besides its template.
struct TaskArgs {
  uint32_t cfg = 0, nt = 0, ns = 0, nshm = 0, ndev = 0;
  const ChipTensor* keys = nullptr;    // the tensors as dependencies see them
  const ChipTensor* child = nullptr;   // as the child sees them (null: the same)
  const uint32_t* tags = nullptr;
  const uint8_t* dirs = nullptr;
  const uint64_t* scalars = nullptr;
  const uint32_t* shm = nullptr;
  const uint64_t* dev = nullptr;
};

class Scheduler {
 public:
  Scheduler(uint8_t* mailbox, uint64_t mailbox_bytes);
  ~Scheduler();

  Notice* notice() { return &notice_; }

  Error add_endpoint(Role role, int32_t block, int efd, const char* label, uint32_t* out);
  uint32_t add_template(uint32_t kind, uint32_t slot, const char* label);
  void endpoint_dead(uint32_t ep, const char* why);

  void run_close(uint32_t rid);
  void run_release(uint32_t rid);
  const Run* run(uint32_t rid) const;

  // ep < 0: a sub-task for the least loaded sub-worker. A run (its id
  // picked by the caller, never 0) is recorded with its first task; until
  // then run() does not know it (a run without tasks is done once closed).
  Error submit(uint32_t rid, int32_t ep, uint32_t tpl, uint64_t id, const TaskArgs& a);

  bool poll();
  bool any_done() const;
  void dispatch_all();
  void flush_wakes();

  uint32_t take_external(uint64_t* ids, uint32_t cap);
  Error complete(uint64_t id, tc_status status, const char* message);
  bool maps_needed(uint32_t* ep, std::vector<uint32_t>* idx);
  void mark_mapped(uint32_t ep, const uint32_t* idx, uint32_t n);

  void buffer_add(uint32_t idx, uint64_t base, uint64_t nbytes, const char* name);
  // Forgets a buffer; the children that had mapped it go to *holders.
  void buffer_drop(uint32_t idx, std::vector<uint32_t>* holders);
  bool uses_buffer(uint32_t idx) const;
  bool uses_dev(uint32_t ep, uint64_t base) const;

 private:
  struct Template {
    uint32_t kind, slot;
    std::string label;
  };
  Task* new_task();
  void ready(Task* t);
  void dispatch(Endpoint& e);
  void post(Endpoint& e, Task* t, const std::vector<uint32_t>& maps);
  void wake(Endpoint& e);
  void wake_overdue(double now);
  void finish(Task* t, State state, tc_status status = TC_OK, std::string message = {});
  void finish_one(Task* t, State state, tc_status status, std::string message, std::vector<Task*>* cancel);
  void forget(Task* t);
  std::string what(const Task* t) const;  // "task 7 (sub-task f)"
  uint8_t* frame(const Endpoint& e, uint32_t f) const {
    return e.block + Layout::kChildHeader + Layout::kCtrlBytes + uint64_t(f) * Layout::kFrameBytes;
  }

  uint8_t* mailbox_;
  uint64_t mailbox_bytes_;
  Notice notice_{};
  DepMap deps_;
  std::vector<Endpoint> eps_;
  std::vector<uint32_t> subs_;
  std::vector<Template> templates_;
  std::unordered_map<uint32_t, std::unique_ptr<Run>> runs_;
  std::unordered_map<uint64_t, Task*> live_;
  std::vector<std::unique_ptr<Task>> pool_;
  std::vector<Task*> free_;
  std::unordered_map<uint32_t, SharedBuffer> buffers_;
  std::deque<uint64_t> outbox_;  // remote tasks ready to send
  uint64_t last_id_ = 0;
  uint32_t submits_ = 0;
  double wake_due_ = 0;
  std::vector<uint32_t> scratch_maps_;
};

}  // namespace simpler::level3
