// The C ABI (include/simpler/simpler.h). Each entry point checks its handles
// and pointers, turns exceptions into statuses and records the detail.
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>

#include "core/handles.h"
#include "runtime/callable.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/platform.h"
#include "runtime/worker.h"
#include "simpler/simpler.h"

struct simpler_worker_s {
  std::unique_ptr<simpler::Worker> worker;
};
struct simpler_callable_s {
  simpler::CallablePtr c;
};
struct simpler_run_s {
  std::shared_ptr<simpler::RunState> run;
};

using namespace simpler;

namespace {

// Handles carry a generation (core/handles.h, compiled into libsimpler with
// a registry of its own), so a stale, freed or foreign one is an error rather
// than a crash or another object. A check resolves the caller's handle to
// its object in place.
const tc::HandleKind& worker_kind() {
  static const tc::HandleKind& k = tc::handle_kind("Worker");
  return k;
}
const tc::HandleKind& callable_kind() {
  static const tc::HandleKind& k = tc::handle_kind("callable");
  return k;
}
const tc::HandleKind& run_kind() {
  static const tc::HandleKind& k = tc::handle_kind("run");
  return k;
}

template <class T>
Error check_live(const char* fn, T*& h, const tc::HandleKind& kind) {
  std::string why = "null";
  void* obj = h ? tc::lookup_handle(h, kind, &why) : nullptr;
  if (!obj) return make_error(TC_ERR_INVALID_ARG, "%s: not a live %s handle (%s)", fn, kind.name, why.c_str());
  h = static_cast<T*>(obj);
  return {};
}

Error check_worker(const char* fn, simpler_worker& w) { return check_live(fn, w, worker_kind()); }
Error check_callable(const char* fn, simpler_callable& c) { return check_live(fn, c, callable_kind()); }
Error check_run(const char* fn, simpler_run& r) { return check_live(fn, r, run_kind()); }
Error check_out(const char* fn, const void* p) {
  if (!p) return make_error(TC_ERR_INVALID_ARG, "%s: output pointer is null", fn);
  return {};
}

}  // namespace

extern "C" {

const char* simpler_version(void) {
  return simpler::cuda_built() ? "simpler 0.1.0 (levels 2-4; platforms cpu, cuda)" : "simpler 0.1.0 (levels 2-4; platform cpu)";
}

const char* simpler_last_error_detail(void) { return last_detail().c_str(); }

tc_status simpler_last_error(void) { return last_status(); }

tc_status simpler_call_config_validate(const simpler_call_config* cfg) {
  return guarded("simpler_call_config_validate", [&]() -> Error {
    CallConfig c;
    if (Error e = copy_call_config(cfg, &c); !e.ok()) return e;
    simpler_call_config raw = c.c;
    raw.output_prefix = c.output_prefix.c_str();
    return validate_call_config(raw);
  });
}

tc_status simpler_worker_create(const simpler_worker_config* cfg, simpler_worker* out) {
  return guarded("simpler_worker_create", [&]() -> Error {
    if (Error e = check_out("simpler_worker_create", out); !e.ok()) return e;
    WorkerConfig wc;
    if (Error e = parse_worker_config(cfg, &wc); !e.ok()) return e;
    auto* h = new simpler_worker_s();
    h->worker = std::make_unique<Worker>(wc);
    *out = tc::register_handle(h, worker_kind());
    return {};
  });
}

tc_status simpler_worker_init(simpler_worker w) {
  return guarded("simpler_worker_init", [&]() -> Error {
    if (Error e = check_worker("simpler_worker_init", w); !e.ok()) return e;
    return w->worker->init();
  });
}

tc_status simpler_worker_close(simpler_worker w) {
  return guarded("simpler_worker_close", [&]() -> Error {
    if (Error e = check_worker("simpler_worker_close", w); !e.ok()) return e;
    return w->worker->close();
  });
}

tc_status simpler_worker_destroy(simpler_worker w) {
  return guarded("simpler_worker_destroy", [&]() -> Error {
    if (Error e = check_worker("simpler_worker_destroy", w); !e.ok()) return e;
    tc::unregister_handle(w);
    Error e = w->worker->close();
    delete w;
    return e;
  });
}

tc_status simpler_worker_get_info(simpler_worker w, simpler_worker_info* out) {
  return guarded("simpler_worker_get_info", [&]() -> Error {
    if (Error e = check_worker("simpler_worker_get_info", w); !e.ok()) return e;
    if (Error e = check_out("simpler_worker_get_info", out); !e.ok()) return e;
    std::memset(out, 0, sizeof *out);
    const Worker& wk = *w->worker;
    out->level = wk.config().level;
    out->initialized = wk.initialized();
    out->closed = wk.closed();
    out->num_cores = wk.num_cores();
    std::snprintf(out->platform, sizeof out->platform, "%s", platform_name(wk.config().platform));
    std::snprintf(out->runtime, sizeof out->runtime, "%s",
                  wk.config().build_graph ? "host_build_graph" : "tensormap_and_ringbuffer");
    std::snprintf(out->device, sizeof out->device, "%s", wk.device_name().c_str());
    out->runs = wk.runs();
    out->graph_builds = wk.graph_builds();
    out->graph_replays = wk.graph_replays();
    return {};
  });
}

tc_status simpler_malloc(simpler_worker w, uint64_t nbytes, uint64_t* out) {
  return guarded("simpler_malloc", [&]() -> Error {
    if (Error e = check_worker("simpler_malloc", w); !e.ok()) return e;
    if (Error e = check_out("simpler_malloc", out); !e.ok()) return e;
    return w->worker->malloc(nbytes, out);
  });
}

tc_status simpler_free(simpler_worker w, uint64_t ptr) {
  return guarded("simpler_free", [&]() -> Error {
    if (Error e = check_worker("simpler_free", w); !e.ok()) return e;
    return w->worker->free(ptr);
  });
}

tc_status simpler_copy_to(simpler_worker w, uint64_t dst, const void* src, uint64_t nbytes) {
  return guarded("simpler_copy_to", [&]() -> Error {
    if (Error e = check_worker("simpler_copy_to", w); !e.ok()) return e;
    return w->worker->copy_to(dst, src, nbytes);
  });
}

tc_status simpler_copy_from(simpler_worker w, void* dst, uint64_t src, uint64_t nbytes) {
  return guarded("simpler_copy_from", [&]() -> Error {
    if (Error e = check_worker("simpler_copy_from", w); !e.ok()) return e;
    return w->worker->copy_from(dst, src, nbytes);
  });
}

tc_status simpler_core_callable_create(const int32_t* signature, uint32_t signature_len, const void* binary,
                                       uint64_t binary_size, simpler_callable* out) {
  return guarded("simpler_core_callable_create", [&]() -> Error {
    if (Error e = check_out("simpler_core_callable_create", out); !e.ok()) return e;
    CallablePtr c;
    if (Error e = make_core_callable(signature, signature_len, binary, binary_size, &c); !e.ok()) return e;
    auto* h = new simpler_callable_s{c};
    *out = tc::register_handle(h, callable_kind());
    return {};
  });
}

tc_status simpler_core_callable_builtin(const char* op, const char* params, simpler_callable* out) {
  return guarded("simpler_core_callable_builtin", [&]() -> Error {
    if (Error e = check_out("simpler_core_callable_builtin", out); !e.ok()) return e;
    if (!op) return make_error(TC_ERR_INVALID_ARG, "CoreCallable.builtin: op is null");
    CallablePtr c;
    if (Error e = make_builtin_callable(op, params ? params : "", &c); !e.ok()) return e;
    auto* h = new simpler_callable_s{c};
    *out = tc::register_handle(h, callable_kind());
    return {};
  });
}

tc_status simpler_chip_callable_create(const int32_t* signature, uint32_t signature_len, const char* func_name,
                                       const char* config_name, const void* binary, uint64_t binary_size,
                                       const int32_t* func_ids, const simpler_callable* children, uint32_t child_count,
                                       simpler_callable* out) {
  return guarded("simpler_chip_callable_create", [&]() -> Error {
    if (Error e = check_out("simpler_chip_callable_create", out); !e.ok()) return e;
    if (child_count && (!func_ids || !children))
      return make_error(TC_ERR_INVALID_ARG, "ChipCallable.build: children arrays are null");
    std::vector<std::pair<int32_t, CallablePtr>> kids;
    for (uint32_t i = 0; i < child_count; i++) {
      simpler_callable child = children[i];
      if (Error e = check_callable("ChipCallable.build", child); !e.ok()) return e;
      kids.emplace_back(func_ids[i], child->c);
    }
    CallablePtr c;
    if (Error e = make_chip_callable(signature, signature_len, func_name ? func_name : "",
                                     config_name ? config_name : "", binary, binary_size, kids, &c);
        !e.ok())
      return e;
    auto* h = new simpler_callable_s{c};
    *out = tc::register_handle(h, callable_kind());
    return {};
  });
}

tc_status simpler_chip_callable_from_tasks(const int32_t* signature, uint32_t signature_len, const char* description,
                                           const int32_t* func_ids, const simpler_callable* children,
                                           uint32_t child_count, simpler_callable* out) {
  return guarded("simpler_chip_callable_from_tasks", [&]() -> Error {
    if (Error e = check_out("simpler_chip_callable_from_tasks", out); !e.ok()) return e;
    if (!description) return make_error(TC_ERR_INVALID_ARG, "ChipCallable.from_tasks: description is null");
    if (child_count && (!func_ids || !children))
      return make_error(TC_ERR_INVALID_ARG, "ChipCallable.from_tasks: children arrays are null");
    std::vector<std::pair<int32_t, CallablePtr>> kids;
    for (uint32_t i = 0; i < child_count; i++) {
      simpler_callable child = children[i];
      if (Error e = check_callable("ChipCallable.from_tasks", child); !e.ok()) return e;
      kids.emplace_back(func_ids[i], child->c);
    }
    CallablePtr c;
    if (Error e = make_task_list_callable(signature, signature_len, description, kids, &c); !e.ok()) return e;
    auto* h = new simpler_callable_s{c};
    *out = tc::register_handle(h, callable_kind());
    return {};
  });
}

tc_status simpler_callable_get_info(simpler_callable c, simpler_callable_info* out) {
  return guarded("simpler_callable_get_info", [&]() -> Error {
    if (Error e = check_callable("simpler_callable_get_info", c); !e.ok()) return e;
    if (Error e = check_out("simpler_callable_get_info", out); !e.ok()) return e;
    std::memset(out, 0, sizeof *out);
    const Callable& k = *c->c;
    out->kind = k.kind;
    out->builtin = k.builtin != nullptr;
    out->signature_len = uint32_t(k.signature.size());
    out->child_count = uint32_t(k.children.size());
    out->binary_size = k.builtin ? 0 : k.binary.size();
    std::snprintf(out->digest, sizeof out->digest, "%s", k.digest.c_str());
    return {};
  });
}

tc_status simpler_callable_get_signature(simpler_callable c, int32_t* out, uint32_t capacity) {
  return guarded("simpler_callable_get_signature", [&]() -> Error {
    if (Error e = check_callable("simpler_callable_get_signature", c); !e.ok()) return e;
    const auto& sig = c->c->signature;
    if (capacity < sig.size())
      return make_error(TC_ERR_INVALID_ARG, "simpler_callable_get_signature: capacity %u < %zu", capacity, sig.size());
    if (!sig.empty() && !out) return make_error(TC_ERR_INVALID_ARG, "simpler_callable_get_signature: out is null");
    std::copy(sig.begin(), sig.end(), out);
    return {};
  });
}

tc_status simpler_callable_release(simpler_callable c) {
  return guarded("simpler_callable_release", [&]() -> Error {
    if (Error e = check_callable("simpler_callable_release", c); !e.ok()) return e;
    tc::unregister_handle(c);
    delete c;
    return {};
  });
}

tc_status simpler_register(simpler_worker w, simpler_callable chip, int32_t* out_slot) {
  return guarded("simpler_register", [&]() -> Error {
    if (Error e = check_worker("simpler_register", w); !e.ok()) return e;
    if (Error e = check_callable("simpler_register", chip); !e.ok()) return e;
    if (Error e = check_out("simpler_register", out_slot); !e.ok()) return e;
    return w->worker->register_callable(chip->c, out_slot);
  });
}

tc_status simpler_unregister(simpler_worker w, int32_t slot) {
  return guarded("simpler_unregister", [&]() -> Error {
    if (Error e = check_worker("simpler_unregister", w); !e.ok()) return e;
    return w->worker->unregister(slot);
  });
}

tc_status simpler_submit(simpler_worker w, int32_t slot, const simpler_task_args* args, const simpler_call_config* cfg,
                         simpler_run* out) {
  return guarded("simpler_submit", [&]() -> Error {
    if (Error e = check_worker("simpler_submit", w); !e.ok()) return e;
    if (Error e = check_out("simpler_submit", out); !e.ok()) return e;
    simpler_task_args empty{nullptr, 0, nullptr, 0};
    std::shared_ptr<RunState> run;
    if (Error e = w->worker->submit(slot, args ? *args : empty, cfg, &run); !e.ok()) return e;
    *out = tc::register_handle(new simpler_run_s{run}, run_kind());
    return {};
  });
}

tc_status simpler_run_sync(simpler_worker w, int32_t slot, const simpler_task_args* args,
                           const simpler_call_config* cfg) {
  return guarded("simpler_run_sync", [&]() -> Error {
    if (Error e = check_worker("simpler_run_sync", w); !e.ok()) return e;
    simpler_task_args empty{nullptr, 0, nullptr, 0};
    return w->worker->run(slot, args ? *args : empty, cfg);
  });
}

tc_status simpler_run_wait(simpler_run r, double timeout_s) {
  return guarded("simpler_run_wait", [&]() -> Error {
    if (Error e = check_run("simpler_run_wait", r); !e.ok()) return e;
    RunState& s = *r->run;
    std::unique_lock<std::mutex> lk(s.mu);
    if (timeout_s < 0) {
      s.cv.wait(lk, [&] { return s.done; });
    } else if (!s.cv.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return s.done; })) {
      return make_error(TC_ERR_TIMEOUT, "the run did not complete within %.3f s", timeout_s);
    }
    return s.error;
  });
}

int32_t simpler_run_done(simpler_run r) {
  if (!check_run("simpler_run_done", r).ok()) return -1;
  std::lock_guard<std::mutex> lk(r->run->mu);
  return r->run->done ? 1 : 0;
}

tc_status simpler_run_release(simpler_run r) {
  return guarded("simpler_run_release", [&]() -> Error {
    if (Error e = check_run("simpler_run_release", r); !e.ok()) return e;
    tc::unregister_handle(r);
    delete r;
    return {};
  });
}

}  // extern "C"
