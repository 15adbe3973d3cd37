// Hardware counters of each kernel through CUPTI's range profiler
// (enable_pmu on cuda). Auto ranges with kernel replay: every kernel launched
// on the context while a session is open becomes one range, replayed by
// CUPTI as many times as its metrics need. CUPTI serialises the launches and
// numbers the ranges in launch order; their names are those numbers ("0",
// "1", ...), not kernel names, so the executor maps range i to the i-th
// kernel it launched (and closes the session before anything else launches
// kernels on the context, e.g. a built-in op).
//
// libcupti is loaded at run time like the driver; without it enable_pmu on
// cuda fails with an explicit error.
#include "runtime/cuda/cupti_pmu.h"

#if __has_include(<cupti_range_profiler.h>)

#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_result.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace simpler {
namespace cuda {
namespace {

#define SIMPLER_CUPTI_FUNCTIONS(X)                                                                                    \
  X(cuptiGetResultString) X(cuptiProfilerInitialize) X(cuptiProfilerDeInitialize) X(cuptiDeviceGetChipName)           \
  X(cuptiProfilerGetCounterAvailability) X(cuptiProfilerHostInitialize) X(cuptiProfilerHostDeinitialize)              \
  X(cuptiProfilerHostConfigAddMetrics) X(cuptiProfilerHostGetConfigImageSize) X(cuptiProfilerHostGetConfigImage)      \
  X(cuptiProfilerHostEvaluateToGpuValues) X(cuptiRangeProfilerEnable) X(cuptiRangeProfilerDisable)                    \
  X(cuptiRangeProfilerGetCounterDataSize) X(cuptiRangeProfilerCounterDataImageInitialize)                             \
  X(cuptiRangeProfilerSetConfig) X(cuptiRangeProfilerStart) X(cuptiRangeProfilerStop) X(cuptiRangeProfilerDecodeData) \
  X(cuptiRangeProfilerGetCounterDataInfo) X(cuptiRangeProfilerCounterDataGetRangeInfo)

struct Cupti {
#define SIMPLER_CUPTI_MEMBER(f) decltype(&::f) f = nullptr;
  SIMPLER_CUPTI_FUNCTIONS(SIMPLER_CUPTI_MEMBER)
#undef SIMPLER_CUPTI_MEMBER
};

Cupti g_cupti;
bool g_ok = false;
Error g_error;
std::once_flag g_once;
std::mutex g_session_mu;  // one session at a time per process

void load() {
  const char* candidates[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12",
                              "/usr/local/cuda/lib64/libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
  void* h = nullptr;
  for (const char* c : candidates)
    if ((h = dlopen(c, RTLD_NOW | RTLD_LOCAL))) break;
  if (!h) {
    g_error = make_error(TC_ERR_UNSUPPORTED, "enable_pmu on cuda needs CUPTI (libcupti.so from the CUDA toolkit), "
                                             "which is not installed here");
    return;
  }
  std::string missing;
#define SIMPLER_CUPTI_LOAD(f)                                             \
  g_cupti.f = reinterpret_cast<decltype(g_cupti.f)>(dlsym(h, #f));      \
  if (!g_cupti.f) missing += std::string(missing.empty() ? "" : ", ") + #f;
  SIMPLER_CUPTI_FUNCTIONS(SIMPLER_CUPTI_LOAD)
#undef SIMPLER_CUPTI_LOAD
  if (!missing.empty()) {
    g_error = make_error(TC_ERR_UNSUPPORTED, "enable_pmu on cuda needs CUPTI's range profiler (CUDA 12.6 or later); "
                                             "this libcupti lacks %s",
                         missing.c_str());
    return;
  }
  g_ok = true;
}

Error cupti_error(CUptiResult r, const char* what) {
  const char* s = nullptr;
  if (g_cupti.cuptiGetResultString) g_cupti.cuptiGetResultString(r, &s);
  return make_error(TC_ERR_DISPATCH, "CUPTI %s: %s (%d)", what, s ? s : "error", int(r));
}

#define CUPTI_TRY(call, what)                         \
  do {                                                \
    CUptiResult r_ = (call);                          \
    if (r_ != CUPTI_SUCCESS) return cupti_error(r_, what); \
  } while (0)

}  // namespace

const std::vector<std::string>& pmu_metric_names(int event_type) {
  static const std::vector<std::string> execution = {
      "gpu__time_duration.sum",       "sm__cycles_elapsed.max",         "smsp__inst_executed.sum",
      "smsp__thread_inst_executed.sum", "sm__warps_launched.sum",       "dram__bytes_read.sum",
      "dram__bytes_write.sum",        "lts__t_bytes.sum"};
  static const std::vector<std::string> memory = {
      "gpu__time_duration.sum",
      "l1tex__t_bytes.sum",
      "l1tex__t_sector_hit_rate.pct",
      "lts__t_sector_hit_rate.pct",
      "dram__throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__throughput.avg.pct_of_peak_sustained_elapsed",
      "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
      "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"};
  return event_type == 2 ? memory : execution;
}

struct PmuSession::Impl {
  CUpti_Profiler_Host_Object* host = nullptr;
  CUpti_RangeProfiler_Object* profiler = nullptr;
  std::vector<uint8_t> config, counter_data;
  std::vector<const char*> metrics;
  bool started = false;
  size_t max_ranges = 0;
  std::unique_lock<std::mutex> guard{g_session_mu, std::defer_lock};
};

PmuSession::PmuSession() : impl_(new Impl()) {}

PmuSession::~PmuSession() {
  Impl& s = *impl_;
  if (s.started) {
    CUpti_RangeProfiler_Stop_Params stop{};
    stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
    stop.pRangeProfilerObject = s.profiler;
    g_cupti.cuptiRangeProfilerStop(&stop);
  }
  if (s.profiler) {
    CUpti_RangeProfiler_Disable_Params d{};
    d.structSize = CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE;
    d.pRangeProfilerObject = s.profiler;
    g_cupti.cuptiRangeProfilerDisable(&d);
  }
  if (s.host) {
    CUpti_Profiler_Host_Deinitialize_Params d{};
    d.structSize = CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE;
    d.pHostObject = s.host;
    g_cupti.cuptiProfilerHostDeinitialize(&d);
  }
}

Error PmuSession::open(CUcontext ctx, int device_index, int event_type, size_t max_ranges) {
  std::call_once(g_once, load);
  if (!g_ok) return g_error;
  Impl& s = *impl_;
  s.guard.lock();
  s.max_ranges = max_ranges;
  CUpti_Profiler_Initialize_Params init{};
  init.structSize = CUpti_Profiler_Initialize_Params_STRUCT_SIZE;
  CUPTI_TRY(g_cupti.cuptiProfilerInitialize(&init), "profiler initialisation");

  CUpti_Device_GetChipName_Params chip{};
  chip.structSize = CUpti_Device_GetChipName_Params_STRUCT_SIZE;
  chip.deviceIndex = size_t(device_index);
  CUPTI_TRY(g_cupti.cuptiDeviceGetChipName(&chip), "chip name");

  CUpti_Profiler_GetCounterAvailability_Params avail{};
  avail.structSize = CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE;
  avail.ctx = ctx;
  CUPTI_TRY(g_cupti.cuptiProfilerGetCounterAvailability(&avail), "counter availability size");
  std::vector<uint8_t> availability(avail.counterAvailabilityImageSize);
  avail.pCounterAvailabilityImage = availability.data();
  CUPTI_TRY(g_cupti.cuptiProfilerGetCounterAvailability(&avail),
            "counter availability (are GPU performance counters open to this user? see NVreg_RestrictProfilingToAdminUsers)");

  CUpti_Profiler_Host_Initialize_Params hi{};
  hi.structSize = CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE;
  hi.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
  hi.pChipName = chip.pChipName;
  hi.pCounterAvailabilityImage = availability.data();
  CUPTI_TRY(g_cupti.cuptiProfilerHostInitialize(&hi), "host initialisation");
  s.host = hi.pHostObject;

  for (const std::string& m : pmu_metric_names(event_type)) s.metrics.push_back(m.c_str());
  CUpti_Profiler_Host_ConfigAddMetrics_Params add{};
  add.structSize = CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE;
  add.pHostObject = s.host;
  add.ppMetricNames = s.metrics.data();
  add.numMetrics = s.metrics.size();
  CUPTI_TRY(g_cupti.cuptiProfilerHostConfigAddMetrics(&add), "adding metrics");
  CUpti_Profiler_Host_GetConfigImageSize_Params csz{};
  csz.structSize = CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE;
  csz.pHostObject = s.host;
  CUPTI_TRY(g_cupti.cuptiProfilerHostGetConfigImageSize(&csz), "config image size");
  s.config.resize(csz.configImageSize);
  CUpti_Profiler_Host_GetConfigImage_Params cimg{};
  cimg.structSize = CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE;
  cimg.pHostObject = s.host;
  cimg.configImageSize = s.config.size();
  cimg.pConfigImage = s.config.data();
  CUPTI_TRY(g_cupti.cuptiProfilerHostGetConfigImage(&cimg), "config image");

  CUpti_RangeProfiler_Enable_Params en{};
  en.structSize = CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE;
  en.ctx = ctx;
  CUPTI_TRY(g_cupti.cuptiRangeProfilerEnable(&en), "enabling the range profiler");
  s.profiler = en.pRangeProfilerObject;

  CUpti_RangeProfiler_GetCounterDataSize_Params ds{};
  ds.structSize = CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE;
  ds.pRangeProfilerObject = s.profiler;
  ds.pMetricNames = s.metrics.data();
  ds.numMetrics = s.metrics.size();
  ds.maxNumOfRanges = max_ranges;
  ds.maxNumRangeTreeNodes = uint32_t(max_ranges);
  CUPTI_TRY(g_cupti.cuptiRangeProfilerGetCounterDataSize(&ds), "counter data size");
  s.counter_data.resize(ds.counterDataSize);
  CUpti_RangeProfiler_CounterDataImage_Initialize_Params ci{};
  ci.structSize = CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE;
  ci.pRangeProfilerObject = s.profiler;
  ci.counterDataSize = s.counter_data.size();
  ci.pCounterData = s.counter_data.data();
  CUPTI_TRY(g_cupti.cuptiRangeProfilerCounterDataImageInitialize(&ci), "counter data image");

  CUpti_RangeProfiler_SetConfig_Params sc{};
  sc.structSize = CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE;
  sc.pRangeProfilerObject = s.profiler;
  sc.configSize = s.config.size();
  sc.pConfig = s.config.data();
  sc.counterDataImageSize = s.counter_data.size();
  sc.pCounterDataImage = s.counter_data.data();
  sc.range = CUPTI_AutoRange;
  sc.replayMode = CUPTI_KernelReplay;
  sc.maxRangesPerPass = max_ranges;
  sc.numNestingLevels = 1;
  sc.minNestingLevel = 1;
  sc.passIndex = 0;
  sc.targetNestingLevel = 1;
  CUPTI_TRY(g_cupti.cuptiRangeProfilerSetConfig(&sc), "setting the configuration");

  CUpti_RangeProfiler_Start_Params st{};
  st.structSize = CUpti_RangeProfiler_Start_Params_STRUCT_SIZE;
  st.pRangeProfilerObject = s.profiler;
  CUPTI_TRY(g_cupti.cuptiRangeProfilerStart(&st), "starting");
  s.started = true;
  return {};
}

Error PmuSession::finish(std::vector<PmuRange>* out) {
  Impl& s = *impl_;
  if (!s.started) return {};
  CUpti_RangeProfiler_Stop_Params stop{};
  stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
  stop.pRangeProfilerObject = s.profiler;
  s.started = false;
  CUPTI_TRY(g_cupti.cuptiRangeProfilerStop(&stop), "stopping");
  // Kernel replay runs every pass of a kernel inside its launch: all of them
  // are in once the session stops, or the values would be partial.
  if (!stop.isAllPassSubmitted)
    return make_error(TC_ERR_DISPATCH, "CUPTI: not every replay pass was submitted when the session stopped");
  CUpti_RangeProfiler_DecodeData_Params dec{};
  dec.structSize = CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE;
  dec.pRangeProfilerObject = s.profiler;
  CUPTI_TRY(g_cupti.cuptiRangeProfilerDecodeData(&dec), "decoding");
  // A dropped range would shift every later range onto the wrong kernel.
  if (dec.numOfRangeDropped)
    return make_error(TC_ERR_DISPATCH, "CUPTI dropped %zu range(s) of this session (more kernels than the %zu the "
                      "counter data holds)", size_t(dec.numOfRangeDropped), s.max_ranges);
  CUpti_RangeProfiler_GetCounterDataInfo_Params info{};
  info.structSize = CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE;
  info.pCounterDataImage = s.counter_data.data();
  info.counterDataImageSize = s.counter_data.size();
  CUPTI_TRY(g_cupti.cuptiRangeProfilerGetCounterDataInfo(&info), "counter data info");
  for (size_t i = 0; i < info.numTotalRanges; i++) {
    PmuRange r;
    CUpti_RangeProfiler_CounterData_GetRangeInfo_Params ri{};
    ri.structSize = CUpti_RangeProfiler_CounterData_GetRangeInfo_Params_STRUCT_SIZE;
    ri.pCounterDataImage = s.counter_data.data();
    ri.counterDataImageSize = s.counter_data.size();
    ri.rangeIndex = i;
    ri.rangeDelimiter = "/";
    // (the range's number in auto range mode: kept for messages only)
    if (g_cupti.cuptiRangeProfilerCounterDataGetRangeInfo(&ri) == CUPTI_SUCCESS && ri.rangeName) r.name = ri.rangeName;
    double values[8] = {};
    CUpti_Profiler_Host_EvaluateToGpuValues_Params ev{};
    ev.structSize = CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE;
    ev.pHostObject = s.host;
    ev.pCounterDataImage = s.counter_data.data();
    ev.counterDataImageSize = s.counter_data.size();
    ev.rangeIndex = i;
    ev.ppMetricNames = s.metrics.data();
    ev.numMetrics = s.metrics.size();
    ev.pMetricValues = values;
    CUPTI_TRY(g_cupti.cuptiProfilerHostEvaluateToGpuValues(&ev), "evaluating metrics");
    for (size_t m = 0; m < 8 && m < s.metrics.size(); m++) r.values[m] = values[m];
    out->push_back(r);
  }
  return {};
}

}  // namespace cuda
}  // namespace simpler

#else  // CUPTI's range profiler headers were not found at build time

namespace simpler {
namespace cuda {

const std::vector<std::string>& pmu_metric_names(int) {
  static const std::vector<std::string> none;
  return none;
}

struct PmuSession::Impl {};
PmuSession::PmuSession() : impl_(new Impl()) {}
PmuSession::~PmuSession() = default;

Error PmuSession::open(CUcontext, int, int, size_t) {
  return make_error(TC_ERR_UNSUPPORTED, "enable_pmu on cuda needs CUPTI's range profiler headers (CUDA 12.6 or "
                                        "later), which this build did not find");
}

Error PmuSession::finish(std::vector<PmuRange>*) { return {}; }

}  // namespace cuda
}  // namespace simpler

#endif
