#include "runtime/worker.h"

#include <algorithm>
#include <cstring>

#include "runtime/fault_guard.h"
#include "runtime/loader.h"
#include "runtime/platform.h"
#include "runtime/task_list.h"
#include "runtime/tensor_util.h"
#include "simpler/simpler.h"

namespace simpler {

namespace {

constexpr const char* kSupportedPlatforms = "cpu, cuda";

const char* direction_word(int32_t d) {
  return d == SIMPLER_ARG_IN ? "IN" : d == SIMPLER_ARG_OUT ? "OUT" : d == SIMPLER_ARG_INOUT ? "INOUT" : "SCALAR";
}

}  // namespace

void RunState::complete(const Error& e) {
  std::lock_guard<std::mutex> lk(mu);
  error = e;
  done = true;
  cv.notify_all();
}

Error parse_worker_config(const simpler_worker_config* in, WorkerConfig* out) {
  if (!in) return make_error(TC_ERR_INVALID_ARG, "Worker: config is null");
  if (in->struct_size != sizeof(simpler_worker_config))
    return make_error(TC_ERR_INVALID_ARG, "Worker: struct_size %u is not sizeof(simpler_worker_config) = %zu",
                      in->struct_size, sizeof(simpler_worker_config));
  if (in->level < 2)
    return make_error(TC_ERR_INVALID_ARG, "Worker: level %d is not a level (2 drives one device, 3 and up a hierarchy)",
                      in->level);
  if (in->level >= 3)
    return make_error(TC_ERR_UNSUPPORTED,
                      "Worker: level %d (a hierarchy of devices) is not built yet; this build runs level 2 (one device)",
                      in->level);
  out->level = in->level;
  const std::string platform = in->platform ? in->platform : "";
  if (platform == "cpu") {
    out->platform = Platform::Cpu;
  } else if (platform == "cuda") {
    out->platform = Platform::Cuda;
  } else if (platform == "a2a3" || platform == "a5" || platform == "a2a3sim" || platform == "a5sim") {
    return make_error(TC_ERR_INVALID_ARG,
                      "Worker: platform '%s' is Ascend hardware (or its simulator), which this runtime does not drive; "
                      "supported platforms: %s",
                      platform.c_str(), kSupportedPlatforms);
  } else {
    return make_error(TC_ERR_INVALID_ARG, "Worker: unknown platform '%s'; supported platforms: %s", platform.c_str(),
                      kSupportedPlatforms);
  }
  const std::string runtime = in->runtime && *in->runtime ? in->runtime : "tensormap_and_ringbuffer";
  if (runtime == "tensormap_and_ringbuffer")
    out->build_graph = false;
  else if (runtime == "host_build_graph")
    out->build_graph = true;
  else
    return make_error(TC_ERR_INVALID_ARG,
                      "Worker: unknown runtime '%s'; supported runtimes: tensormap_and_ringbuffer, host_build_graph",
                      runtime.c_str());
  if (in->device_id < 0) return make_error(TC_ERR_INVALID_ARG, "Worker: device_id %d is negative", in->device_id);
  if (out->platform == Platform::Cpu && in->device_id != 0)
    return make_error(TC_ERR_INVALID_ARG, "Worker: platform 'cpu' has one device (device_id 0), not %d", in->device_id);
  out->device_id = in->device_id;
  if (in->num_cores < 0 || in->num_cores > 1024)
    return make_error(TC_ERR_INVALID_ARG, "Worker: num_cores %d must be in [0, 1024]", in->num_cores);
  out->num_cores = in->num_cores;
  if (in->heap_ring_size != 0 && in->heap_ring_size < kHeapAlign)
    return make_error(TC_ERR_INVALID_ARG, "Worker: heap_ring_size %llu is below %llu bytes",
                      (unsigned long long)in->heap_ring_size, (unsigned long long)kHeapAlign);
  out->heap_ring_size = in->heap_ring_size ? in->heap_ring_size : kDefaultHeap;
  return {};
}

Worker::Worker(const WorkerConfig& cfg) : cfg_(cfg) {}

Worker::~Worker() { close(); }

int Worker::num_cores() const {
  if (!executor_) return 0;
  return executor_->num_cores();
}

std::string Worker::device_name() const { return device_ ? device_->info().name : ""; }

Error Worker::check_usable(const char* what) const {
  if (closed_) return make_error(TC_ERR_NOT_INITIALIZED, "%s: the Worker is closed", what);
  if (!initialized_) return make_error(TC_ERR_NOT_INITIALIZED, "%s: call Worker.init() first", what);
  return {};
}

Error Worker::init() {
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return make_error(TC_ERR_NOT_INITIALIZED, "init: the Worker is closed");
  if (initialized_) return make_error(TC_ERR_ALREADY_INITIALIZED, "init: the Worker is already initialised");
  if (cfg_.platform == Platform::Cuda && !cuda_built())
    return make_error(TC_ERR_NO_DEVICE,
                      "platform 'cuda': simpler was built without CUDA (configure with -DTC_ENABLE_CUDA=ON where nvcc "
                      "and a GPU are present)");
  Error err;
  device_ = Device::open(cfg_.platform, cfg_.device_id, &err);
  if (!device_) return err;
  executor_ = make_executor(cfg_.platform, device_.get(), cfg_.num_cores, &err);
  if (!executor_) {
    device_.reset();
    return err;
  }
  engine_ = std::make_unique<Engine>();
  install_fault_handlers();
  for (auto& s : slots_)
    if (s && !s->loaded) {
      if (Error e = load(*s); !e.ok()) {
        engine_.reset();
        executor_.reset();
        for (auto& t : slots_)
          if (t) t->loaded = false, t->kernels.clear(), t->keep.clear(), t->table = KernelTable();
        device_.reset();
        return e;
      }
    }
  initialized_ = true;
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
  return {};
}

Error Worker::close() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (closed_) return {};
    closed_ = true;
    if (!initialized_) return {};
    // Drain: every run already submitted completes.
    idle_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
    stopping_ = true;
    queue_cv_.notify_all();
  }
  thread_.join();
  {
    std::lock_guard<std::mutex> gl(graphs_mu_);
    graphs_.clear();
  }
  engine_.reset();
  executor_.reset();
  for (auto& s : slots_) s.reset();
  device_.reset();
  return {};
}

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

Error Worker::malloc(uint64_t nbytes, uint64_t* out) {
  if (Error e = check_usable("malloc"); !e.ok()) return e;
  return device_->alloc(nbytes, false, out);
}

Error Worker::free(uint64_t ptr) {
  if (Error e = check_usable("free"); !e.ok()) return e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto uses = [&](const std::shared_ptr<RunState>& r) {
      if (!r || std::find(r->bases.begin(), r->bases.end(), ptr) == r->bases.end()) return false;
      std::lock_guard<std::mutex> rl(r->mu);
      return !r->done;  // a completed run may still be `current_` for a moment
    };
    bool busy = uses(current_);
    for (auto& r : queue_) busy |= uses(r);
    if (busy)
      return make_error(TC_ERR_INVALID_ARG, "free: 0x%llx is an argument of a run that has not completed",
                        (unsigned long long)ptr);
  }
  return device_->release(ptr, false);
}

Error Worker::copy_to(uint64_t dst, const void* src, uint64_t nbytes) {
  if (Error e = check_usable("copy_to"); !e.ok()) return e;
  if (nbytes && !src) return make_error(TC_ERR_INVALID_ARG, "copy_to: the host source is null");
  return device_->copy_in(dst, src, nbytes);
}

Error Worker::copy_from(void* dst, uint64_t src, uint64_t nbytes) {
  if (Error e = check_usable("copy_from"); !e.ok()) return e;
  if (nbytes && !dst) return make_error(TC_ERR_INVALID_ARG, "copy_from: the host destination is null");
  return device_->copy_out(dst, src, nbytes);
}

// ---------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------

Error Worker::load(LoadedChip& chip) {
  const Callable& c = *chip.callable;
  chip.kernels.clear();
  chip.keep.clear();
  chip.table = KernelTable();
  chip.task_list = c.task_list.get();
  if (c.task_list) {
    chip.entry = task_list_orchestration;
    chip.config = nullptr;
  } else if (c.native_orch) {
    chip.entry = c.native_orch;
    chip.config = c.native_config;
  } else {
    Error err;
    std::shared_ptr<SharedObject> so =
        SharedObject::load(c.binary, "the orchestration of ChipCallable '" + c.func_name + "'", &err);
    if (!so) return err;
    void* entry = so->symbol(c.func_name.c_str());
    if (!entry)
      return make_error(TC_ERR_KERNEL_NOT_FOUND,
                        "the orchestration shared object does not export '%s' (declare it extern \"C\" with "
                        "__attribute__((visibility(\"default\"))))",
                        c.func_name.c_str());
    const std::string config_name = c.config_name.empty() ? c.func_name + "_config" : c.config_name;
    void* config = so->symbol(config_name.c_str());
    if (!config && !c.config_name.empty())
      return make_error(TC_ERR_KERNEL_NOT_FOUND, "the orchestration shared object does not export '%s'",
                        config_name.c_str());
    // The orchestration reaches the runtime through its own copy of this pointer.
    if (auto** ops = static_cast<const SimplerOrchOps**>(so->symbol("simpler_orch_ops"))) *ops = orch_ops_table();
    chip.entry = reinterpret_cast<OrchEntry>(entry);
    chip.config = reinterpret_cast<OrchConfigEntry>(config);
    chip.keep.push_back(so);
  }
  for (auto& child : c.children) {
    const Callable& k = *child.second;
    auto ref = std::make_unique<KernelRef>();
    ref->func_id = child.first;
    ref->signature = k.signature;
    ref->tensor_args = k.tensor_args();
    ref->scalar_args = k.scalar_args();
    ref->digest = k.digest;
    char name[128];
    if (k.builtin)
      std::snprintf(name, sizeof name, "func_id %d, built-in %s", child.first, k.builtin_op.c_str());
    else
      std::snprintf(name, sizeof name, "func_id %d, kernel %.12s", child.first, k.digest.c_str());
    ref->name = name;
    if (k.builtin) {
      ref->builtin = k.builtin;
      ref->builtin_params = k.builtin_params;
      ref->builtin_state = k.builtin_state;
    } else if (k.native_kernel) {
      ref->entry = k.native_kernel;
    } else {
      std::shared_ptr<void> keep;
      if (Error e = load_kernel(cfg_.platform, device_.get(), k.binary, "the kernel of func_id " +
                                                                            std::to_string(child.first),
                                ref.get(), &keep);
          !e.ok())
        return e;
      if (cfg_.platform == Platform::Cpu) {
        auto so = std::static_pointer_cast<SharedObject>(keep);
        if (auto** launch = static_cast<const SimplerLaunch* (**)(void)>(so->symbol("simpler_current_launch")))
          *launch = simpler_current_launch ? simpler_current_launch : nullptr;
      }
      chip.keep.push_back(keep);
    }
    chip.table.add(ref.get());
    chip.kernels.push_back(std::move(ref));
  }
  chip.loaded = true;
  return {};
}

Error Worker::register_callable(const CallablePtr& c, int32_t* slot) {
  if (!c || c->kind != Callable::Chip)
    return make_error(TC_ERR_INVALID_ARG, "register: expected a ChipCallable");
  std::lock_guard<std::mutex> lk(mu_);
  if (closed_) return make_error(TC_ERR_NOT_INITIALIZED, "register: the Worker is closed");
  int free_slot = -1;
  for (int i = 0; i < SIMPLER_MAX_CALLABLES; i++) {
    if (slots_[i] && slots_[i]->callable->digest == c->digest) {
      slots_[i]->registrations++;
      *slot = i;
      return {};
    }
    if (!slots_[i] && free_slot < 0) free_slot = i;
  }
  if (free_slot < 0)
    return make_error(TC_ERR_ALLOC, "register: all %d callable slots are in use; unregister one first",
                      SIMPLER_MAX_CALLABLES);
  auto chip = std::make_shared<LoadedChip>();
  chip->callable = c;
  chip->registrations = 1;
  chip->generation = ++generation_;
  if (initialized_)
    if (Error e = load(*chip); !e.ok()) return e;
  slots_[free_slot] = chip;
  *slot = free_slot;
  return {};
}

Error Worker::unregister(int32_t slot) {
  std::lock_guard<std::mutex> lk(mu_);
  if (slot < 0 || slot >= SIMPLER_MAX_CALLABLES || !slots_[slot])
    return make_error(TC_ERR_INVALID_ARG, "unregister: slot %d holds no callable", slot);
  if (--slots_[slot]->registrations > 0) return {};
  // Its recorded graphs go first: they name its kernels (CUDA functions).
  // Runs in flight keep their own reference to the callable.
  const std::string prefix = std::to_string(slots_[slot]->generation) + "|";
  {
    std::lock_guard<std::mutex> gl(graphs_mu_);
    graphs_.remove_if([&](const auto& g) { return g.first.compare(0, prefix.size(), prefix) == 0; });
  }
  slots_[slot].reset();
  return {};
}

// ---------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------

Error Worker::bind_args(const LoadedChip& chip, const simpler_task_args& a, RunState* run) {
  const Callable& c = *chip.callable;
  const uint32_t nt = c.tensor_args(), ns = c.scalar_args();
  const std::string who = "ChipCallable '" + c.func_name + "'";
  if (a.tensor_count != nt || a.scalar_count != ns)
    return make_error(TC_ERR_INVALID_ARG,
                      "%s: its signature has %u tensor(s) and %u scalar(s) but the call passes %u tensor(s) and %u "
                      "scalar(s)",
                      who.c_str(), nt, ns, a.tensor_count, a.scalar_count);
  if ((a.tensor_count && !a.tensors) || (a.scalar_count && !a.scalars))
    return make_error(TC_ERR_INVALID_ARG, "%s: argument arrays are null", who.c_str());
  run->tensors.assign(a.tensors, a.tensors + a.tensor_count);
  run->scalars.assign(a.scalars, a.scalars + a.scalar_count);
  uint32_t ti = 0;
  for (int32_t dir : c.signature) {
    if (dir == SIMPLER_ARG_SCALAR) continue;
    ChipTensor& t = run->tensors[ti];
    const uint32_t i = ti++;
    std::string why;
    auto bad = [&](const std::string& msg) {
      return make_error(TC_ERR_INVALID_ARG, "%s: tensor argument %u (%s) %s: %s", who.c_str(), i, direction_word(dir),
                        describe(t).c_str(), msg.c_str());
    };
    if (t.ndims < 1 || t.ndims > SIMPLER_MAX_TENSOR_DIMS || elem_size(t) == 0) {
      check_view(t, &why);
      return bad(why);
    }
    uint64_t base, size;
    if (device_->find_start(t.buffer.addr, &base, &size)) {
      // A device tensor: rebase an interior address onto its allocation.
      const uint64_t delta = t.buffer.addr - base;
      if (delta % elem_size(t)) return bad("its address is not a whole number of elements into its allocation");
      t.start_offset += delta / elem_size(t);
      t.buffer.addr = base;
      t.buffer.size = size;
      if (!check_view(t, &why)) return bad("outside its allocation: " + why);
      run->bases.push_back(base);
      run->regions.push_back(Region{base, size});
      continue;
    }
    if (!check_view(t, &why)) return bad(why);
    if (t.buffer.size == 0) return bad("its buffer is empty");
    if (is_foreign_device_pointer(cfg_.platform, t.buffer.addr)) {
      // Device memory from another allocator: passed through as it is.
      run->regions.push_back(Region{t.buffer.addr, t.buffer.size});
      continue;
    }
    if (cfg_.platform == Platform::Cpu) {
      // Host memory is the cpu device's memory: no copy.
      run->regions.push_back(Region{t.buffer.addr, t.buffer.size});
    } else {
      // Only the bytes the view can touch are staged (the view then starts
      // at element 0 of its staging copy), so runs that write disjoint parts
      // of one host buffer, such as two devices filling the halves of a
      // shared output, never copy each other's stale bytes back.
      // (An empty view keeps its whole buffer.)
      const ByteRange r = byte_range(t);
      const bool empty = r.hi == r.lo;
      const uint64_t lo = empty ? 0 : r.lo, bytes = empty ? t.buffer.size : r.hi - r.lo;
      t.start_offset -= lo / elem_size(t);
      run->host.push_back(HostArg{i, t.buffer.addr + lo, bytes, dir, 0});
    }
  }
  // Overlapping host regions merge (two views of one array).
  std::sort(run->regions.begin(), run->regions.end(), [](const Region& x, const Region& y) { return x.base < y.base; });
  std::vector<Region> merged;
  for (const Region& r : run->regions) {
    if (!merged.empty() && r.base < merged.back().base + merged.back().size) {
      uint64_t end = std::max(merged.back().base + merged.back().size, r.base + r.size);
      merged.back().size = end - merged.back().base;
    } else {
      merged.push_back(r);
    }
  }
  run->regions = merged;
  return {};
}

Error Worker::prepare(int32_t slot, const simpler_task_args& args, const simpler_call_config* cfg,
                      std::shared_ptr<RunState>* out) {
  if (Error e = check_usable("run"); !e.ok()) return e;
  auto run = std::make_shared<RunState>();
  if (Error e = copy_call_config(cfg, &run->cfg); !e.ok()) return e;
  {
    simpler_call_config c = run->cfg.c;
    c.output_prefix = run->cfg.output_prefix.c_str();
    if (Error e = validate_call_config(c); !e.ok()) return e;
  }
  if (cfg_.build_graph && run->cfg.any_ring_override())
    return make_error(TC_ERR_INVALID_ARG,
                      "runtime_env (ring sizes) applies to runtime 'tensormap_and_ringbuffer'; this Worker runs "
                      "'host_build_graph'");
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (slot < 0 || slot >= SIMPLER_MAX_CALLABLES || !slots_[slot])
      return make_error(TC_ERR_INVALID_ARG, "run: slot %d holds no registered callable", slot);
    run->chip = slots_[slot];
  }
  if (Error e = bind_args(*run->chip, args, run.get()); !e.ok()) return e;
  *out = std::move(run);
  return {};
}

Error Worker::submit(int32_t slot, const simpler_task_args& args, const simpler_call_config* cfg,
                     std::shared_ptr<RunState>* out) {
  std::shared_ptr<RunState> run;
  if (Error e = prepare(slot, args, cfg, &run); !e.ok()) return e;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_ || stopping_) return make_error(TC_ERR_NOT_INITIALIZED, "run: the Worker is closed");
    queue_.push_back(run);
    queue_cv_.notify_one();
  }
  *out = run;
  return {};
}

Error Worker::run(int32_t slot, const simpler_task_args& args, const simpler_call_config* cfg) {
  std::shared_ptr<RunState> run;
  if (Error e = prepare(slot, args, cfg, &run); !e.ok()) return e;
  bool here = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (closed_ || stopping_) return make_error(TC_ERR_NOT_INITIALIZED, "run: the Worker is closed");
    if (busy_ || !queue_.empty()) {
      // Runs execute one at a time in submission order: queue behind the others.
      queue_.push_back(run);
      queue_cv_.notify_one();
    } else {
      // The caller would only wait: it executes the run itself, which spares
      // the two thread switches (hand over, hand back) a queued run costs.
      busy_ = true;
      current_ = run;
      here = true;
    }
  }
  if (!here) {
    std::unique_lock<std::mutex> lk(run->mu);
    run->cv.wait(lk, [&] { return run->done; });
    return run->error;
  }
  execute(*run);
  {
    std::lock_guard<std::mutex> lk(mu_);
    busy_ = false;
    current_.reset();
    if (queue_.empty())
      idle_cv_.notify_all();
    else
      queue_cv_.notify_one();  // runs queued meanwhile: the orchestrating thread takes them
  }
  return run->error;
}

}  // namespace simpler
