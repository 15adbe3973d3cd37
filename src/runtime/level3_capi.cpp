// simpler_l3_*: the level-3 scheduler (runtime/level3_sched.h) behind a C
// ABI for the Python engine. Arguments are checked here; the per-task entry
// points (submit, poll, run_done) stay small because they run once a task.
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/level3_sched.h"
#include "simpler/simpler.h"

struct simpler_l3_s {
  simpler::level3::Scheduler sched;
  simpler_l3_s(uint8_t* mailbox, uint64_t bytes) : sched(mailbox, bytes) {}
};

using namespace simpler;
using level3::Layout;

namespace {

// Every entry point but create checks its scheduler first.
template <class F>
tc_status guarded(const char* fn, simpler_l3 s, F&& body) noexcept {
  return simpler::guarded(fn, [&]() -> Error {
    if (!s) return make_error(TC_ERR_INVALID_ARG, "%s: the scheduler is null", fn);
    return body();
  });
}

Error null_arg(const char* fn, const char* name) {
  return make_error(TC_ERR_INVALID_ARG, "%s: %s is null", fn, name);
}

}  // namespace

extern "C" {

tc_status simpler_l3_create(void* mailbox, uint64_t mailbox_bytes, const uint32_t* layout, uint32_t n,
                            simpler_l3* out) {
  const char* fn = "simpler_l3_create";
  return simpler::guarded(fn, [&]() -> Error {
    if (!mailbox || !layout || !out) return make_error(TC_ERR_INVALID_ARG, "%s: null argument", fn);
    constexpr uint32_t want = sizeof(Layout::kValues) / sizeof(Layout::kValues[0]);
    if (n != want) return make_error(TC_ERR_INVALID_ARG, "%s: %u layout values; this library has %u", fn, n, want);
    for (uint32_t i = 0; i < n; ++i)
      if (layout[i] != Layout::kValues[i])
        return make_error(TC_ERR_INVALID_ARG, "%s: the mailbox layout's %s is %u here and %u in the library", fn,
                          Layout::kNames[i], layout[i], Layout::kValues[i]);
    *out = new simpler_l3_s(static_cast<uint8_t*>(mailbox), mailbox_bytes);
    return {};
  });
}

tc_status simpler_l3_destroy(simpler_l3 s) {
  delete s;
  return ok();
}

tc_status simpler_l3_notice(simpler_l3 s, void** out) {
  return guarded("simpler_l3_notice", s, [&]() -> Error {
    if (!out) return null_arg("simpler_l3_notice", "out");
    *out = s->sched.notice();
    return {};
  });
}

tc_status simpler_l3_add_endpoint(simpler_l3 s, int32_t role, int32_t block, int32_t efd, const char* label,
                                  uint32_t* out) {
  const char* fn = "simpler_l3_add_endpoint";
  return guarded(fn, s, [&]() -> Error {
    if (!label || !out) return null_arg(fn, !label ? "label" : "out");
    if (role < 0 || role > int32_t(level3::Role::Remote))
      return make_error(TC_ERR_INVALID_ARG, "%s: role %d (0 chip, 1 sub, 2 remote)", fn, role);
    Error e = s->sched.add_endpoint(level3::Role(role), block, efd, label, out);
    if (!e.ok()) e.message = std::string(fn) + ": " + e.message;
    return e;
  });
}

tc_status simpler_l3_add_template(simpler_l3 s, uint32_t kind, uint32_t slot, const char* label, uint32_t* out) {
  const char* fn = "simpler_l3_add_template";
  return guarded(fn, s, [&]() -> Error {
    if (!label || !out) return null_arg(fn, !label ? "label" : "out");
    *out = s->sched.add_template(kind, slot, label);
    return {};
  });
}

tc_status simpler_l3_endpoint_dead(simpler_l3 s, uint32_t ep, const char* why) {
  return guarded("simpler_l3_endpoint_dead", s, [&]() -> Error {
    s->sched.endpoint_dead(ep, why);
    return {};
  });
}

tc_status simpler_l3_run_close(simpler_l3 s, uint32_t run) {
  return guarded("simpler_l3_run_close", s, [&]() -> Error {
    s->sched.run_close(run);
    return {};
  });
}

tc_status simpler_l3_run_release(simpler_l3 s, const uint32_t* runs, uint32_t n) {
  return guarded("simpler_l3_run_release", s, [&]() -> Error {
    if (n && !runs) return null_arg("simpler_l3_run_release", "runs");
    for (uint32_t i = 0; i < n; ++i) s->sched.run_release(runs[i]);
    return {};
  });
}

int32_t simpler_l3_run_state(simpler_l3 s, uint32_t run) {
  const level3::Run* r = s ? s->sched.run(run) : nullptr;
  if (!r) return -1;
  return int32_t(r->closed && r->outstanding == 0) | (r->status != TC_OK ? 2 : 0);
}

tc_status simpler_l3_run_error(simpler_l3 s, uint32_t run, int32_t* status, char* buf, uint64_t cap,
                               uint64_t* len) {
  const char* fn = "simpler_l3_run_error";
  return guarded(fn, s, [&]() -> Error {
    if (!status || !len || (cap && !buf)) return null_arg(fn, "an output");
    const level3::Run* r = s->sched.run(run);
    if (!r) return make_error(TC_ERR_INVALID_ARG, "%s: run %u is not open", fn, run);
    *status = r->status;
    *len = r->message.size();
    if (cap) std::memcpy(buf, r->message.data(), std::min<uint64_t>(cap, r->message.size()));
    return {};
  });
}

tc_status simpler_l3_submit(simpler_l3 s, uint32_t run, int32_t ep, uint32_t tpl, uint64_t id) {
  return guarded("simpler_l3_submit", s, [&]() -> Error { return s->sched.submit(run, ep, tpl, id, {}); });
}

tc_status simpler_l3_submit_args(simpler_l3 s, uint32_t run, int32_t ep, uint32_t tpl, uint64_t id, uint32_t cfg,
                                 uint32_t nt, const ChipTensor* keys, const ChipTensor* child, const uint32_t* tags,
                                 const uint8_t* dirs, uint32_t ns, const uint64_t* scalars, uint32_t nshm,
                                 const uint32_t* shm, uint32_t ndev, const uint64_t* dev) {
  return guarded("simpler_l3_submit_args", s, [&]() -> Error {
    level3::TaskArgs a;
    a.cfg = cfg, a.nt = nt, a.ns = ns, a.nshm = nshm, a.ndev = ndev;
    a.keys = keys, a.child = child, a.tags = tags, a.dirs = dirs, a.scalars = scalars, a.shm = shm, a.dev = dev;
    return s->sched.submit(run, ep, tpl, id, a);
  });
}

tc_status simpler_l3_submit_one(simpler_l3 s, uint32_t run, int32_t ep, uint32_t tpl, uint64_t id, uint32_t cfg,
                                const ChipTensor* key, const uint32_t* tag, const uint8_t* dir, const uint32_t* shm) {
  return guarded("simpler_l3_submit_one", s, [&]() -> Error {
    level3::TaskArgs a;
    a.cfg = cfg, a.nt = 1, a.nshm = 1;
    a.keys = key, a.tags = tag, a.dirs = dir, a.shm = shm;
    return s->sched.submit(run, ep, tpl, id, a);
  });
}

int32_t simpler_l3_poll(simpler_l3 s) { return s ? int32_t(s->sched.poll()) : 0; }

int32_t simpler_l3_any_done(simpler_l3 s) { return s ? int32_t(s->sched.any_done()) : 0; }

tc_status simpler_l3_dispatch_all(simpler_l3 s) {
  return guarded("simpler_l3_dispatch_all", s, [&]() -> Error {
    s->sched.dispatch_all();
    return {};
  });
}

tc_status simpler_l3_flush_wakes(simpler_l3 s) {
  return guarded("simpler_l3_flush_wakes", s, [&]() -> Error {
    s->sched.flush_wakes();
    return {};
  });
}

tc_status simpler_l3_take_external(simpler_l3 s, uint64_t* ids, uint32_t cap, uint32_t* n) {
  const char* fn = "simpler_l3_take_external";
  return guarded(fn, s, [&]() -> Error {
    if (!n || (cap && !ids)) return null_arg(fn, "an output");
    *n = s->sched.take_external(ids, cap);
    return {};
  });
}

tc_status simpler_l3_complete(simpler_l3 s, uint64_t id, int32_t status, const char* message) {
  return guarded("simpler_l3_complete", s, [&]() -> Error { return s->sched.complete(id, status, message); });
}

tc_status simpler_l3_maps_needed(simpler_l3 s, uint32_t* ep, uint32_t* idx, uint32_t cap, uint32_t* n) {
  const char* fn = "simpler_l3_maps_needed";
  return guarded(fn, s, [&]() -> Error {
    if (!ep || !n || (cap && !idx)) return null_arg(fn, "an output");
    std::vector<uint32_t> want;
    *n = 0;
    if (!s->sched.maps_needed(ep, &want)) return {};
    if (want.size() > cap)
      return make_error(TC_ERR_INVALID_ARG, "%s: %zu buffers; the output holds %u", fn, want.size(), cap);
    std::memcpy(idx, want.data(), 4 * want.size());
    *n = uint32_t(want.size());
    return {};
  });
}

tc_status simpler_l3_mark_mapped(simpler_l3 s, uint32_t ep, const uint32_t* idx, uint32_t n) {
  const char* fn = "simpler_l3_mark_mapped";
  return guarded(fn, s, [&]() -> Error {
    if (n && !idx) return null_arg(fn, "idx");
    s->sched.mark_mapped(ep, idx, n);
    return {};
  });
}

tc_status simpler_l3_buffer_add(simpler_l3 s, uint32_t idx, uint64_t base, uint64_t nbytes, const char* name) {
  const char* fn = "simpler_l3_buffer_add";
  return guarded(fn, s, [&]() -> Error {
    if (!name) return null_arg(fn, "name");
    if (std::strlen(name) > Layout::kNameBytes)
      return make_error(TC_ERR_INVALID_ARG, "%s: name '%s' is longer than %u bytes", fn, name, Layout::kNameBytes);
    s->sched.buffer_add(idx, base, nbytes, name);
    return {};
  });
}

tc_status simpler_l3_buffer_drop(simpler_l3 s, uint32_t idx, uint32_t* holders, uint32_t cap, uint32_t* n) {
  const char* fn = "simpler_l3_buffer_drop";
  return guarded(fn, s, [&]() -> Error {
    if (!n || (cap && !holders)) return null_arg(fn, "an output");
    std::vector<uint32_t> h;
    s->sched.buffer_drop(idx, &h);
    *n = uint32_t(h.size());
    if (cap && !h.empty()) std::memcpy(holders, h.data(), 4 * std::min<size_t>(h.size(), cap));
    return {};
  });
}

int32_t simpler_l3_uses_buffer(simpler_l3 s, uint32_t idx) { return s ? int32_t(s->sched.uses_buffer(idx)) : 0; }

int32_t simpler_l3_uses_dev(simpler_l3 s, uint32_t ep, uint64_t base) {
  return s ? int32_t(s->sched.uses_dev(ep, base)) : 0;
}

}  // extern "C"
