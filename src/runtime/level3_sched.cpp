#include "runtime/level3_sched.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "runtime/wire.h"
#include "simpler/simpler.h"

namespace simpler::level3 {

namespace {

// While the orchestration goes on submitting, a child is woken once this
// many of its tasks are posted, or once the oldest has waited kWakeDelayS
// (and at the latest when the orchestration waits or returns): one wakeup
// (a system call, and on a busy host a lost time slice) runs a batch.
constexpr uint32_t kWakeBatch = Layout::kFrames / 2;
constexpr double kWakeDelayS = 50e-6;
// While the orchestration submits, one submit in this many collects finished
// frames (a ring holds kFrames tasks, so every child stays fed).
constexpr uint32_t kPollEvery = 4;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

using wire::load;
using wire::store;

}  // namespace

Scheduler::Scheduler(uint8_t* mailbox, uint64_t mailbox_bytes) : mailbox_(mailbox), mailbox_bytes_(mailbox_bytes) {}

Scheduler::~Scheduler() = default;

Error Scheduler::add_endpoint(Role role, int32_t block, int efd, const char* label, uint32_t* out) {
  Endpoint e;
  e.role = role;
  e.label = label ? label : "";
  e.efd = efd;
  if (role != Role::Remote) {
    if (block < 0 || Layout::kGlobalBytes + uint64_t(block + 1) * Layout::kChildBytes > mailbox_bytes_)
      return make_error(TC_ERR_INVALID_ARG, "block %d is not inside the %llu-byte mailbox", block,
                        (unsigned long long)mailbox_bytes_);
    e.block = mailbox_ + Layout::kGlobalBytes + uint64_t(block) * Layout::kChildBytes;
  }
  *out = uint32_t(eps_.size());
  if (role == Role::Sub) subs_.push_back(*out);
  eps_.push_back(std::move(e));
  return {};
}

uint32_t Scheduler::add_template(uint32_t kind, uint32_t slot, const char* label) {
  templates_.push_back({kind, slot, label ? label : ""});
  return uint32_t(templates_.size() - 1);
}

void Scheduler::run_close(uint32_t rid) {
  auto it = runs_.find(rid);
  if (it != runs_.end()) it->second->closed = true;
}

void Scheduler::run_release(uint32_t rid) {
  auto it = runs_.find(rid);
  if (it == runs_.end()) return;
  if (it->second->outstanding == 0)
    runs_.erase(it);
  else
    it->second->released = true;  // erased when its last task finishes
}

const Run* Scheduler::run(uint32_t rid) const {
  auto it = runs_.find(rid);
  return it == runs_.end() ? nullptr : it->second.get();
}

Task* Scheduler::new_task() {
  if (free_.empty()) {
    pool_.push_back(std::make_unique<Task>());
    return pool_.back().get();
  }
  Task* t = free_.back();
  free_.pop_back();
  return t;
}

void Scheduler::forget(Task* t) {
  Run* r = t->run;
  if (r->released && r->outstanding == 0) runs_.erase(r->id);
  t->run = nullptr;
  t->payload.clear();
  t->shm.clear();
  t->dev.clear();
  t->consumers.clear();
  free_.push_back(t);
}

std::string Scheduler::what(const Task* t) const {
  return "task " + std::to_string(t->id) + " (" + templates_[t->tpl].label + ")";
}

Error Scheduler::submit(uint32_t rid, int32_t ep, uint32_t tpl, uint64_t id, const TaskArgs& a) {
  if (rid == 0) return make_error(TC_ERR_INVALID_ARG, "run 0: run ids start at 1");
  if (tpl >= templates_.size()) return make_error(TC_ERR_INVALID_ARG, "task template %u is not registered", tpl);
  const std::string& label = templates_[tpl].label;
  if (ep >= int32_t(eps_.size()) || (ep < 0 && subs_.empty()))
    return make_error(TC_ERR_INVALID_ARG, "%s: endpoint %d is not one of this Worker's", label.c_str(), ep);
  if (id <= last_id_)
    return make_error(TC_ERR_INVALID_ARG, "%s: task id %llu does not follow %llu", label.c_str(),
                      (unsigned long long)id, (unsigned long long)last_id_);
  if (a.nt > Layout::kMaxTensors || a.ns > Layout::kMaxScalars)
    return make_error(TC_ERR_INVALID_ARG, "%s: %u tensors and %u scalars (at most %u and %u)", label.c_str(), a.nt,
                      a.ns, Layout::kMaxTensors, Layout::kMaxScalars);
  if ((a.nt && (!a.keys || !a.tags || !a.dirs)) || (a.ns && !a.scalars) || (a.nshm && !a.shm) || (a.ndev && !a.dev))
    return make_error(TC_ERR_INVALID_ARG, "%s: null argument array", label.c_str());
  auto rit = runs_.find(rid);
  if (rit == runs_.end()) {  // its first task: runs without tasks never get here
    rit = runs_.emplace(rid, std::make_unique<Run>()).first;
    rit->second->id = rid;
  }
  Run* run = rit->second.get();
  last_id_ = id;
  if (run->status != TC_OK) return {};  // the run has failed: later submits are no-ops
  Task* t = new_task();
  t->id = id;
  t->run = run;
  t->tpl = tpl;
  t->cfg = a.cfg;
  t->ep = ep;
  t->nt = a.nt;
  t->ns = a.ns;
  t->pending = 0;
  t->state = State::Pending;
  t->in_map = false;
  if (a.nt) {
    Error e = deps_.producers(id, a.keys, a.dirs, a.nt, [&](uint64_t pid) {
      auto it = live_.find(pid);  // finished tasks have left
      if (it == live_.end()) return;
      it->second->consumers.push_back(id);
      t->pending++;
    });
    if (!e.ok()) {
      forget(t);
      e.message = label + ": " + e.message;
      return e;
    }
    deps_.record(id, a.keys, a.dirs, a.nt);
    t->in_map = true;
    const ChipTensor* shown = a.child ? a.child : a.keys;
    t->payload.reserve(101 * a.nt + 8 * a.ns);
    t->payload.append(reinterpret_cast<const char*>(a.tags), 4 * a.nt);
    t->payload.append(reinterpret_cast<const char*>(a.dirs), a.nt);
    t->payload.append(reinterpret_cast<const char*>(shown), sizeof(ChipTensor) * a.nt);
    t->shm.assign(a.shm, a.shm + a.nshm);
    t->dev.assign(a.dev, a.dev + a.ndev);
  }
  if (a.ns) t->payload.append(reinterpret_cast<const char*>(a.scalars), 8 * a.ns);
  live_[id] = t;
  run->outstanding++;
  notice_.live++;
  if (!t->pending) ready(t);
  if (notice_.inflight) {
    ++submits_;
    if (!notice_.defer || submits_ % kPollEvery == 0) poll();
  }
  if (notice_.deferred_wakes) {
    const double now = now_s();
    if (now > wake_due_) wake_overdue(now);
  }
  return {};
}

void Scheduler::ready(Task* t) {
  if (t->ep < 0) {  // a sub-task goes to the least loaded sub-worker (alive, when one is)
    int32_t best = -1;
    size_t load = 0;
    for (int pass = 0; pass < 2 && best < 0; ++pass)
      for (uint32_t k : subs_) {
        const Endpoint& e = eps_[k];
        if (pass == 0 && !e.why_dead.empty()) continue;
        const size_t l = e.ready.size() + e.posted;
        if (best < 0 || l < load) best = int32_t(k), load = l;
      }
    t->ep = best;
  }
  t->state = State::Ready;
  Endpoint& e = eps_[t->ep];
  if (!e.why_dead.empty()) {
    finish(t, State::Failed, TC_ERR_DISPATCH, e.why_dead);
    return;
  }
  if (e.role == Role::Remote) {
    outbox_.push_back(t->id);
    notice_.flags |= kExternalReady;
    return;
  }
  e.ready.push_back(t);
  dispatch(e);
}

void Scheduler::dispatch(Endpoint& e) {
  while (!e.ready.empty() && e.maps_needed.empty()) {
    const uint32_t f = e.seq % Layout::kFrames;  // the ring's next frame, free once its last task is collected
    if (e.busy[f]) break;
    Task* t = e.ready.front();
    if (t->run->status != TC_OK) {
      e.ready.pop_front();
      finish(t, State::Cancelled);
      continue;
    }
    scratch_maps_.clear();
    for (uint32_t idx : t->shm)
      if (!e.mapped.count(idx)) scratch_maps_.push_back(idx);
    if (scratch_maps_.size() > Layout::kMaxMaps) {  // a control request maps them first (the engine's)
      e.maps_needed = scratch_maps_;
      notice_.flags |= kMapsNeeded;
      break;
    }
    e.ready.pop_front();
    post(e, t, scratch_maps_);
  }
}

void Scheduler::post(Endpoint& e, Task* t, const std::vector<uint32_t>& maps) {
  const uint32_t f = e.seq % Layout::kFrames;
  uint8_t* fr = frame(e, f);
  uint32_t nmaps = 0;
  for (uint32_t idx : maps) {
    auto b = buffers_.find(idx);
    if (b == buffers_.end()) continue;  // dropped: no live task names it (the engine waits for them first)
    uint8_t* m = fr + Layout::kMaps + nmaps * Layout::kMapEntry;
    std::memset(m, 0, Layout::kMapEntry);
    store<uint32_t>(m, idx);
    store<uint64_t>(m + 8, b->second.nbytes);
    store<uint64_t>(m + 16, b->second.base);
    std::memcpy(m + 24, b->second.name.data(), std::min<size_t>(b->second.name.size(), Layout::kNameBytes));
    e.mapped.insert(idx);
    nmaps++;
  }
  const char* p = t->payload.data();
  if (t->nt) {
    std::memcpy(fr + Layout::kTags, p, 4 * t->nt);
    std::memcpy(fr + Layout::kDirs, p + 4 * t->nt, t->nt);
    std::memcpy(fr + Layout::kTensors, p + 5 * t->nt, sizeof(ChipTensor) * t->nt);
  }
  if (t->ns) std::memcpy(fr + Layout::kScalars, p + (5 + sizeof(ChipTensor)) * t->nt, 8 * t->ns);
  const uint32_t seq = e.seq + 1;
  e.seq = seq;
  const Template& tpl = templates_[t->tpl];
  const uint32_t hdr[8] = {seq, uint32_t(t->id), uint32_t(t->id >> 32), tpl.kind, tpl.slot, t->cfg, t->nt, t->ns};
  std::memcpy(fr + Layout::kHdr, hdr, sizeof hdr);
  store<uint32_t>(fr + Layout::kHdr + sizeof hdr, nmaps);
  // The payload is in place before the state says so (the child reads the state first).
  __atomic_store_n(fr, Layout::kPosted, __ATOMIC_RELEASE);
  e.busy[f] = t;
  e.posted++;
  t->state = State::Running;
  notice_.inflight++;
  if (notice_.defer && e.posted < kWakeBatch) {
    // Wake later (coalescing): a child that finishes a task faster than the
    // orchestration submits the next would sleep after each one; meanwhile
    // more tasks fill the ring and the child runs them on one wakeup.
    if (!e.wake_deferred) {
      const double now = now_s();
      if (!notice_.deferred_wakes) wake_due_ = now + kWakeDelayS;
      e.wake_deferred = true;
      e.deferred_at = now;
      notice_.deferred_wakes++;
    }
  } else {
    if (e.wake_deferred) e.wake_deferred = false, notice_.deferred_wakes--;
    wake(e);
  }
}

void Scheduler::wake(Endpoint& e) {
  // Clearing the child's flag here spares the system call to posts made
  // before it is up again; every clear comes with a write, so a child that
  // goes on to block still finds its eventfd set.
  auto* sleeping = reinterpret_cast<uint32_t*>(e.block + Layout::kSleeping);
  if (__atomic_load_n(sleeping, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(sleeping, 0u, __ATOMIC_RELEASE);
    const uint64_t one = 1;
    ssize_t w = ::write(e.efd, &one, sizeof one);
    (void)w;  // a full counter (never at these rates) still wakes the child
  }
}

void Scheduler::wake_overdue(double now) {
  double oldest = 0;
  for (Endpoint& e : eps_) {
    if (!e.wake_deferred) continue;
    if (now - e.deferred_at > kWakeDelayS) {
      e.wake_deferred = false;
      notice_.deferred_wakes--;
      wake(e);
    } else if (!oldest || e.deferred_at < oldest) {
      oldest = e.deferred_at;
    }
  }
  if (notice_.deferred_wakes) wake_due_ = oldest + kWakeDelayS;
}

void Scheduler::flush_wakes() {
  if (!notice_.deferred_wakes) return;
  for (Endpoint& e : eps_)
    if (e.wake_deferred) {
      e.wake_deferred = false;
      wake(e);
    }
  notice_.deferred_wakes = 0;
}

bool Scheduler::poll() {
  if (!notice_.inflight) return false;
  bool got = false;
  for (Endpoint& e : eps_) {
    // A child finishes its tasks in seq order: collect from the oldest until
    // one still runs. (A finish can post this child's next tasks: posted and
    // seq are read afresh each time.)
    if (!e.posted) continue;
    if (__atomic_load_n(frame(e, (e.seq - e.posted) % Layout::kFrames), __ATOMIC_ACQUIRE) != Layout::kDone) continue;
    while (e.posted) {
      const uint32_t f = (e.seq - e.posted) % Layout::kFrames;
      uint8_t* fr = frame(e, f);
      if (__atomic_load_n(fr, __ATOMIC_ACQUIRE) != Layout::kDone) break;
      Task* t = e.busy[f];
      e.busy[f] = nullptr;
      e.posted--;
      notice_.inflight--;
      const int32_t status = load<int32_t>(fr + Layout::kStatus);
      std::string msg;
      if (status) {
        const uint32_t n = std::min(load<uint32_t>(fr + Layout::kStatus + 4), Layout::kMsgBytes);
        msg.assign(reinterpret_cast<const char*>(fr + Layout::kMsg), n);
      }
      __atomic_store_n(fr, Layout::kFree, __ATOMIC_RELEASE);
      if (!t) continue;
      if (status)
        finish(t, State::Failed, tc_status(status), e.label + ": " + what(t) + " failed: " + msg);
      else
        finish(t, State::Done);
    }
    if (!e.ready.empty()) dispatch(e);
    got = true;
  }
  return got;
}

bool Scheduler::any_done() const {
  for (const Endpoint& e : eps_)
    if (e.posted &&
        __atomic_load_n(frame(e, (e.seq - e.posted) % Layout::kFrames), __ATOMIC_ACQUIRE) == Layout::kDone)
      return true;
  return false;
}

void Scheduler::dispatch_all() {
  for (Endpoint& e : eps_)
    if (!e.ready.empty() && e.why_dead.empty()) dispatch(e);
}

void Scheduler::finish(Task* t, State state, tc_status status, std::string message) {
  // A failure cancels every task waiting on it, and theirs in turn: a
  // worklist rather than recursion, since a chain can be the whole window.
  std::vector<Task*> cancel;
  finish_one(t, state, status, std::move(message), &cancel);
  while (!cancel.empty()) {
    Task* c = cancel.back();
    cancel.pop_back();
    finish_one(c, State::Cancelled, TC_OK, {}, &cancel);
  }
}

void Scheduler::finish_one(Task* t, State state, tc_status status, std::string message, std::vector<Task*>* cancel) {
  if (t->state >= State::Done) return;
  t->state = state;
  live_.erase(t->id);
  notice_.live--;
  if (t->in_map) deps_.finish(t->id);
  Run* run = t->run;
  run->outstanding--;
  if (status != TC_OK) run->fail(status, std::move(message));
  // Nothing below adds to t's list (cancellations wait in the worklist), and
  // iterating it in place keeps its capacity for the slot's next task.
  for (uint64_t cid : t->consumers) {
    auto it = live_.find(cid);  // a consumer cancelled meanwhile has left
    if (it == live_.end()) continue;
    Task* c = it->second;
    if (state == State::Done) {
      if (--c->pending == 0 && c->state == State::Pending) ready(c);
    } else if (c->state == State::Pending) {
      c->run->fail(TC_ERR_DISPATCH, what(c) + " not run: producer task " + std::to_string(t->id) + " failed");
      cancel->push_back(c);
    }
  }
  forget(t);
}

void Scheduler::endpoint_dead(uint32_t k, const char* why) {
  if (k >= eps_.size()) return;
  Endpoint& e = eps_[k];
  e.why_dead = why && *why ? why : "the worker died";
  if (e.wake_deferred) e.wake_deferred = false, notice_.deferred_wakes--;
  // What it held, oldest first (the first error of a run names its oldest task).
  std::vector<Task*> held;
  for (uint32_t i = 0; i < e.posted; ++i) {
    Task*& t = e.busy[(e.seq - e.posted + i) % Layout::kFrames];
    if (t) held.push_back(t);
    t = nullptr;
  }
  notice_.inflight -= e.posted;
  e.posted = 0;
  for (Task* t : held) finish(t, State::Failed, TC_ERR_DISPATCH, e.why_dead + " while running " + what(t));
  while (!e.ready.empty()) {
    Task* t = e.ready.front();
    e.ready.pop_front();
    finish(t, State::Failed, TC_ERR_DISPATCH, e.why_dead + " before " + what(t) + " started");
  }
  e.maps_needed.clear();
  if (e.role == Role::Remote) {
    std::vector<Task*> mine;
    for (auto& [id, t] : live_)
      if (t->ep == int32_t(k) && (t->state == State::Running || t->state == State::Ready)) mine.push_back(t);
    std::sort(mine.begin(), mine.end(), [](const Task* a, const Task* b) { return a->id < b->id; });
    for (Task* t : mine) {
      const bool running = t->state == State::Running;
      if (running) notice_.external_running--;
      finish(t, State::Failed, TC_ERR_DISPATCH,
             e.why_dead + (running ? " while running " + what(t) : " before " + what(t) + " started"));
    }
  }
}

uint32_t Scheduler::take_external(uint64_t* ids, uint32_t cap) {
  uint32_t n = 0;
  while (!outbox_.empty() && n < cap) {
    const uint64_t id = outbox_.front();
    outbox_.pop_front();
    auto it = live_.find(id);
    if (it == live_.end() || it->second->state != State::Ready) continue;
    Task* t = it->second;
    if (t->run->status != TC_OK) {
      finish(t, State::Cancelled);
      continue;
    }
    t->state = State::Running;
    notice_.external_running++;
    ids[n++] = id;
  }
  if (outbox_.empty()) notice_.flags &= ~kExternalReady;
  return n;
}

Error Scheduler::complete(uint64_t id, tc_status status, const char* message) {
  auto it = live_.find(id);
  if (it == live_.end()) return {};  // finished already (its worker was declared dead first)
  Task* t = it->second;
  if (t->ep < 0 || eps_[t->ep].role != Role::Remote)
    return make_error(TC_ERR_INVALID_ARG, "%s is not a remote worker's task", what(t).c_str());
  if (t->state == State::Running) notice_.external_running--;
  finish(t, status ? State::Failed : State::Done, status, message ? message : "");
  return {};
}

bool Scheduler::maps_needed(uint32_t* ep, std::vector<uint32_t>* idx) {
  for (uint32_t k = 0; k < eps_.size(); ++k)
    if (!eps_[k].maps_needed.empty()) {
      *ep = k;
      *idx = eps_[k].maps_needed;
      return true;
    }
  notice_.flags &= ~kMapsNeeded;
  return false;
}

void Scheduler::mark_mapped(uint32_t k, const uint32_t* idx, uint32_t n) {
  if (k >= eps_.size()) return;
  Endpoint& e = eps_[k];
  e.mapped.insert(idx, idx + n);
  e.maps_needed.clear();
  dispatch(e);
  bool more = false;
  for (const Endpoint& x : eps_) more = more || !x.maps_needed.empty();
  if (!more) notice_.flags &= ~kMapsNeeded;
}

void Scheduler::buffer_add(uint32_t idx, uint64_t base, uint64_t nbytes, const char* name) {
  buffers_[idx] = SharedBuffer{base, nbytes, name ? name : ""};
}

void Scheduler::buffer_drop(uint32_t idx, std::vector<uint32_t>* holders) {
  buffers_.erase(idx);
  for (uint32_t k = 0; k < eps_.size(); ++k)
    if (eps_[k].mapped.erase(idx)) holders->push_back(k);
}

bool Scheduler::uses_buffer(uint32_t idx) const {
  for (const auto& [id, t] : live_)
    if (std::find(t->shm.begin(), t->shm.end(), idx) != t->shm.end()) return true;
  return false;
}

bool Scheduler::uses_dev(uint32_t ep, uint64_t base) const {
  for (const auto& [id, t] : live_)
    if (t->ep == int32_t(ep) && std::find(t->dev.begin(), t->dev.end(), base) != t->dev.end()) return true;
  return false;
}

}  // namespace simpler::level3
