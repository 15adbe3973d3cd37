#include "runtime/diagnostics.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include "runtime/device.h"
#include "runtime/json.h"
#include "runtime/kernel_ref.h"
#include "simpler/simpler.h"

namespace simpler {

struct Diagnostics::TaskRecord {
  uint64_t id;
  uint64_t seq;
  int32_t func_id;
  int32_t core_type;
  std::string kernel;
  uint32_t scope_depth, ring, block_num;
  uint32_t created_mask;
  std::vector<ChipTensor> tensors;
  std::vector<uint8_t> access;
  std::vector<uint64_t> scalars;
  std::vector<DiagEdge> edges;
  uint64_t t_submit, t_submitted;
};

struct Diagnostics::BlockRecord {
  uint64_t task;
  uint32_t block;
  int32_t core;
  uint64_t t_dispatch, t_start, t_end;
};

struct Diagnostics::SchedRecord {
  int32_t core;
  uint8_t phase;
  uint64_t t0, t1;
};

struct Diagnostics::DumpRecord {
  uint64_t task;
  uint32_t arg;
  bool before;
  uint64_t offset, bytes;
  bool ok;
};

struct Diagnostics::CoreLog {
  std::vector<BlockRecord> blocks;
  std::vector<SchedRecord> sched;
};

namespace {

const char* state_name(uint8_t s) {
  switch (s) {
    case kDone: return "done";
    case kFailed: return "failed";
    case kCancelled: return "cancelled";
    default: return "unfinished";
  }
}

const char* access_word(uint8_t a) {
  return a == SIMPLER_ACCESS_IN ? "in" : a == SIMPLER_ACCESS_OUT ? "out" : "inout";
}

const char* source_word(uint8_t s) {
  return s == uint8_t(DepSource::Creator) ? "creator" : s == uint8_t(DepSource::Explicit) ? "explicit" : "tensormap";
}

Error write_file(const std::string& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return make_error(TC_ERR_IO, "cannot write %s", path.c_str());
  f.write(data.data(), std::streamsize(data.size()));
  f.close();
  if (!f) return make_error(TC_ERR_IO, "cannot write %s", path.c_str());
  return {};
}

void tensor_json(Json& j, const ChipTensor& t) {
  j.kv("buffer", t.buffer.addr).kv("buffer_size", t.buffer.size).kv("start_offset", t.start_offset);
  j.kv("dtype", dtype_name(int32_t(t.dtype)));
  j.key("shape").begin_arr();
  for (uint32_t d = 0; d < t.ndims; d++) j.val(t.shapes[d]);
  j.end_arr();
  j.key("strides").begin_arr();
  for (uint32_t d = 0; d < t.ndims; d++) j.val(t.strides[d]);
  j.end_arr();
}

// Elements of a view in row-major order, packed (dump_args stores them so).
void gather(const ChipTensor& t, const char* base_bytes, uint64_t lo, std::string* out) {
  const uint32_t e = elem_size(t);
  const uint64_t n = numel(t);
  out->resize(n * e);
  uint32_t idx[SIMPLER_MAX_TENSOR_DIMS] = {};
  for (uint64_t k = 0; k < n; k++) {
    uint64_t off = t.start_offset;
    for (uint32_t d = 0; d < t.ndims; d++) off += uint64_t(idx[d]) * uint64_t(t.strides[d]);
    std::memcpy(&(*out)[k * e], base_bytes + off * e - lo, e);
    for (int d = int(t.ndims) - 1; d >= 0; d--) {
      if (++idx[d] < t.shapes[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

Diagnostics::Diagnostics(const DiagOptions& o, Device* dev, int cores) : opt_(o), dev_(dev), cores_(cores) {
  for (int i = 0; i <= cores; i++) core_logs_.emplace_back(new CoreLog());
}

Diagnostics::~Diagnostics() = default;

bool Diagnostics::any() const {
  return opt_.swimlane || opt_.dump_args || opt_.pmu || opt_.dep_gen || opt_.scope_stats;
}

void Diagnostics::set_ring_capacities(const uint64_t window[4], const uint64_t heap[4], const uint64_t deps[4]) {
  for (int i = 0; i < 4; i++) ring_window_[i] = window[i], ring_heap_[i] = heap[i], ring_deps_[i] = deps[i];
}

void Diagnostics::on_submit(const TaskSlot& t, const DiagEdge* edges, size_t n) {
  TaskRecord r;
  r.id = t.id;
  r.seq = tasks_.size();
  r.func_id = t.func_id;
  r.core_type = t.core_type;
  r.kernel = t.kernel ? t.kernel->name : "alloc_tensors";
  r.scope_depth = t.scope_depth;
  r.ring = t.ring;
  r.block_num = t.block_num;
  r.created_mask = t.created_mask;
  r.tensors.assign(t.tensors.begin(), t.tensors.begin() + t.tensor_count);
  r.access.assign(t.access, t.access + t.tensor_count);
  for (uint32_t s = 0; s < t.scalar_count; s++) r.scalars.push_back(uint64_t(t.argv[t.tensor_count + s]));
  r.edges.assign(edges, edges + n);
  r.t_submit = t.t_submit;
  r.t_submitted = t.t_submitted;
  tasks_.push_back(std::move(r));
}

void Diagnostics::on_scope(const ScopeSample& s) { scopes_.push_back(s); }

void Diagnostics::on_block(int core, const TaskSlot& t, uint32_t block, uint64_t t_dispatch, uint64_t t_start,
                           uint64_t t_end) {
  CoreLog& log = *core_logs_[core >= 0 && core < cores_ ? core : cores_];
  if (core < 0 || core >= cores_) {
    std::lock_guard<std::mutex> lk(mu_);
    log.blocks.push_back(BlockRecord{t.id, block, core, t_dispatch, t_start, t_end});
    return;
  }
  log.blocks.push_back(BlockRecord{t.id, block, core, t_dispatch, t_start, t_end});
}

void Diagnostics::on_sched(int core, SchedPhase phase, uint64_t t0, uint64_t t1) {
  if (core < 0 || core >= cores_) return;
  core_logs_[core]->sched.push_back(SchedRecord{core, uint8_t(phase), t0, t1});
}

void Diagnostics::capture(const TaskSlot& t, bool before) {
  for (uint32_t i = 0; i < t.tensor_count; i++) {
    const uint8_t a = t.access[i];
    if (before ? !(a & SIMPLER_ACCESS_IN) : !(a & SIMPLER_ACCESS_OUT)) continue;
    const ChipTensor& v = t.tensors[i];
    const ByteRange r = byte_range(v);
    std::string packed;
    bool ok = true;
    if (dev_->host_accessible()) {
      gather(v, reinterpret_cast<const char*>(v.buffer.addr), 0, &packed);
    } else {
      std::string raw(r.hi - r.lo, '\0');
      ok = dev_->copy_out(&raw[0], v.buffer.addr + r.lo, r.hi - r.lo).ok();
      if (ok) gather(v, raw.data(), r.lo, &packed);
    }
    std::lock_guard<std::mutex> lk(mu_);
    dumps_.push_back(DumpRecord{t.id, i, before, blob_.size(), packed.size(), ok});
    blob_ += packed;
  }
}

void Diagnostics::before_task(const TaskSlot& t) {
  if (opt_.dump_args) capture(t, true);
}

void Diagnostics::after_task(const TaskSlot& t) {
  if (opt_.dump_args) capture(t, false);
}

void Diagnostics::set_pmu(uint64_t task, const std::array<double, 8>& counters) {
  std::lock_guard<std::mutex> lk(mu_);
  pmu_[task] = counters;
}

void Diagnostics::set_pmu_names(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lk(mu_);
  pmu_names_ = names;
}

void Diagnostics::on_finished(const TaskSlot& t) {
  FinishRecord f{t.id, t.core, t.state.load(), t.t_ready, t.t_start, t.t_end, t.t_finish};
  std::lock_guard<std::mutex> lk(mu_);
  finished_.push_back(f);
}

Error Diagnostics::write(const Error& run_error, uint64_t wall_ns) {
  namespace fs = std::filesystem;
  const std::string& p = opt_.prefix;
  std::unordered_map<uint64_t, const TaskRecord*> by_id;
  for (const TaskRecord& r : tasks_) by_id[r.id] = &r;
  std::unordered_map<uint64_t, FinishRecord> fin;
  for (const FinishRecord& f : finished_) fin[f.id] = f;
  const char* status = run_error.ok() ? "ok" : "failed";

  if (opt_.swimlane) {
    Json j;
    j.begin_obj();
    j.kv("version", 1).kv("level", opt_.swimlane).kv("platform", opt_.platform).kv("runtime", opt_.runtime);
    j.kv("callable", opt_.callable).kv("cores", cores_).kv("wall_ns", wall_ns).kv("status", status);
    j.key("tasks").begin_arr();
    for (const FinishRecord& f : finished_) {
      auto it = by_id.find(f.id);
      j.begin_obj().kv("id", f.id);
      if (it != by_id.end()) j.kv("func_id", it->second->func_id).kv("kernel", it->second->kernel);
      j.kv("core", f.core).kv("state", state_name(f.state)).kv("t_start", f.t_start).kv("t_end", f.t_end);
      if (opt_.swimlane >= 2) j.kv("t_ready", f.t_ready).kv("t_finish", f.t_finish);
      if (opt_.swimlane >= 4 && it != by_id.end())
        j.kv("t_submit", it->second->t_submit).kv("t_submitted", it->second->t_submitted);
      j.end_obj();
    }
    j.end_arr();
    j.key("blocks").begin_arr();
    for (auto& log : core_logs_)
      for (const BlockRecord& b : log->blocks) {
        j.begin_obj().kv("task", b.task).kv("block", b.block).kv("core", b.core).kv("t_start", b.t_start);
        j.kv("t_end", b.t_end);
        if (opt_.swimlane >= 2) j.kv("t_dispatch", b.t_dispatch);
        j.end_obj();
      }
    j.end_arr();
    j.key("edges").begin_arr();  // each producer -> consumer pair once
    for (const TaskRecord& r : tasks_) {
      std::vector<uint64_t> preds;
      for (const DiagEdge& e : r.edges) preds.push_back(e.pred);
      std::sort(preds.begin(), preds.end());
      preds.erase(std::unique(preds.begin(), preds.end()), preds.end());
      for (uint64_t p : preds) j.begin_arr().val(p).val(r.id).end_arr();
    }
    j.end_arr();
    if (opt_.swimlane >= 3) {
      j.key("sched").begin_arr();
      static const char* phases[] = {"idle", "steal", "complete"};
      for (auto& log : core_logs_)
        for (const SchedRecord& s : log->sched)
          j.begin_obj().kv("core", s.core).kv("phase", phases[s.phase]).kv("t0", s.t0).kv("t1", s.t1).end_obj();
      j.end_arr();
    }
    if (opt_.swimlane >= 4) {
      j.key("orchestrator").begin_arr();
      for (const TaskRecord& r : tasks_)
        j.begin_obj().kv("task", r.id).kv("t_begin", r.t_submit).kv("t_end", r.t_submitted).end_obj();
      j.end_arr();
    }
    j.end_obj();
    if (Error e = write_file(p + "/l2_perf_records.json", j.str()); !e.ok()) return e;
  }

  if (opt_.dep_gen) {
    Json j;
    j.begin_obj().kv("version", 1).kv("callable", opt_.callable).kv("runtime", opt_.runtime).kv("status", status);
    j.key("tasks").begin_arr();
    std::vector<std::pair<uint64_t, std::pair<uint64_t, int64_t>>> tensors;  // buffer -> (size, creator or -1)
    for (const TaskRecord& r : tasks_) {
      j.begin_obj().kv("id", r.id).kv("seq", r.seq).kv("func_id", r.func_id).kv("kernel", r.kernel);
      j.kv("core_type", r.core_type).kv("scope_depth", r.scope_depth).kv("ring", r.ring).kv("block_num", r.block_num);
      auto f = fin.find(r.id);
      j.kv("state", f == fin.end() ? "unfinished" : state_name(f->second.state));
      j.key("args").begin_arr();
      for (size_t i = 0; i < r.tensors.size(); i++) {
        const bool created = (r.created_mask >> i) & 1;
        j.begin_obj().kv("index", uint64_t(i)).kv("kind", "tensor").kv("access", access_word(r.access[i]));
        j.kv("created", created);
        tensor_json(j, r.tensors[i]);
        j.end_obj();
        tensors.push_back({r.tensors[i].buffer.addr, {r.tensors[i].buffer.size, created ? int64_t(r.id) : -1}});
      }
      for (size_t s = 0; s < r.scalars.size(); s++)
        j.begin_obj().kv("index", uint64_t(r.tensors.size() + s)).kv("kind", "scalar").kv("value", r.scalars[s]).end_obj();
      j.end_arr().end_obj();
    }
    j.end_arr();
    // Each allocation once; a created one names its creator.
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second.second > b.second.second;
    });
    j.key("tensors").begin_arr();
    for (size_t i = 0; i < tensors.size(); i++) {
      if (i && tensors[i].first == tensors[i - 1].first) continue;
      j.begin_obj().kv("buffer", tensors[i].first).kv("size", tensors[i].second.first);
      j.kv("kind", tensors[i].second.second >= 0 ? "created" : "external");
      j.key("creator");
      if (tensors[i].second.second >= 0)
        j.val(uint64_t(tensors[i].second.second));
      else
        j.null();
      j.end_obj();
    }
    j.end_arr();
    j.key("edges").begin_arr();
    for (const TaskRecord& r : tasks_)
      for (const DiagEdge& e : r.edges) {
        j.begin_obj().kv("pred", e.pred).kv("succ", r.id).key("arg");
        if (e.arg == UINT32_MAX)
          j.null();
        else
          j.val(e.arg);
        j.kv("source", source_word(e.source)).kv("overlap", overlap_name(Overlap(e.overlap))).end_obj();
      }
    j.end_arr().end_obj();
    if (Error e = write_file(p + "/deps.json", j.str()); !e.ok()) return e;
  }

  if (opt_.scope_stats) {
    std::error_code ec;
    fs::create_directories(p + "/scope_stats", ec);
    std::string out;
    Json meta;
    meta.begin_obj().kv("type", "meta").kv("version", 1).kv("runtime", opt_.runtime).kv("callable", opt_.callable);
    meta.key("rings").begin_arr();
    for (int i = 0; i < 4; i++)
      meta.begin_obj().kv("ring", i).kv("task_window", ring_window_[i]).kv("heap", ring_heap_[i]).kv("dep_pool",
                                                                                                      ring_deps_[i]).end_obj();
    meta.end_arr().end_obj();
    out += meta.str() + "\n";
    for (const ScopeSample& s : scopes_) {
      Json j;
      j.begin_obj().kv("type", s.begin ? "begin" : "end").kv("scope", s.seq).kv("depth", s.depth).kv("ring", s.ring);
      j.kv("t_ns", s.t_ns).kv("tasks", s.tasks).kv("task_window", s.task_window).kv("heap_used", s.heap_used);
      j.kv("heap", s.heap).kv("dep_pool_used", s.deps_used).kv("dep_pool", s.dep_pool).kv("tensormap", s.tensormap);
      j.end_obj();
      out += j.str() + "\n";
    }
    if (Error e = write_file(p + "/scope_stats/scope_stats.jsonl", out); !e.ok()) return e;
  }

  if (opt_.dump_args) {
    std::error_code ec;
    fs::create_directories(p + "/args_dump", ec);
    if (Error e = write_file(p + "/args_dump/args.bin", blob_); !e.ok()) return e;
    std::unordered_map<uint64_t, std::vector<const DumpRecord*>> dumps;
    for (const DumpRecord& d : dumps_) dumps[d.task].push_back(&d);
    Json j;
    j.begin_obj().kv("version", 1).kv("blob", "args.bin").kv("callable", opt_.callable).kv("status", status);
    j.key("tasks").begin_arr();
    for (const TaskRecord& r : tasks_) {
      j.begin_obj().kv("id", r.id).kv("func_id", r.func_id).kv("kernel", r.kernel).kv("block_num", r.block_num);
      j.key("args").begin_arr();
      for (size_t i = 0; i < r.tensors.size(); i++) {
        j.begin_obj().kv("index", uint64_t(i)).kv("kind", "tensor").kv("access", access_word(r.access[i]));
        j.kv("dtype", dtype_name(int32_t(r.tensors[i].dtype)));
        j.key("shape").begin_arr();
        for (uint32_t d = 0; d < r.tensors[i].ndims; d++) j.val(r.tensors[i].shapes[d]);
        j.end_arr();
        for (bool before : {true, false}) {
          j.key(before ? "before" : "after");
          const DumpRecord* found = nullptr;
          for (const DumpRecord* d : dumps[r.id])
            if (d->arg == i && d->before == before) found = d;
          if (found && found->ok)
            j.begin_obj().kv("offset", found->offset).kv("bytes", found->bytes).end_obj();
          else
            j.null();
        }
        j.end_obj();
      }
      for (size_t s = 0; s < r.scalars.size(); s++)
        j.begin_obj().kv("index", uint64_t(r.tensors.size() + s)).kv("kind", "scalar").kv("value", r.scalars[s]).end_obj();
      j.end_arr().end_obj();
    }
    j.end_arr().end_obj();
    if (Error e = write_file(p + "/args_dump/manifest.json", j.str()); !e.ok()) return e;
  }

  if (opt_.pmu) {
    // cpu has no per-core hardware counters we can attribute to a task: the
    // columns are there, with zeros (cuda fills them from CUPTI).
    std::string csv = "task_id,func_id,core,event_type,";
    for (int c = 0; c < 8; c++) csv += "counter" + std::to_string(c) + (c < 7 ? "," : "\n");
    for (const FinishRecord& f : finished_) {
      auto it = by_id.find(f.id);
      char line[256];
      std::snprintf(line, sizeof line, "%llu,%d,%d,%d,", (unsigned long long)f.id,
                    it != by_id.end() ? it->second->func_id : -1, f.core, opt_.pmu);
      csv += line;
      auto pit = pmu_.find(f.id);
      for (int c = 0; c < 8; c++) {
        char v[32];
        std::snprintf(v, sizeof v, "%.9g", pit != pmu_.end() ? pit->second[size_t(c)] : 0.0);
        csv += std::string(v) + (c < 7 ? "," : "\n");
      }
    }
    if (Error e = write_file(p + "/pmu.csv", csv); !e.ok()) return e;
    // What each counter column holds (none on cpu).
    Json j;
    j.begin_obj().kv("platform", opt_.platform).kv("event_type", opt_.pmu).key("counters").begin_arr();
    for (int c = 0; c < 8; c++) j.val(size_t(c) < pmu_names_.size() ? pmu_names_[size_t(c)] : std::string("none"));
    j.end_arr().end_obj();
    if (Error e = write_file(p + "/pmu_metrics.json", j.str()); !e.ok()) return e;
  }
  return {};
}

}  // namespace simpler
