// simpler: the API an orchestration source is written against.
//
// An orchestration is a host shared object exporting
//
//   extern "C" void <func_name>(const ChipTaskArgs& args);
//   extern "C" PTO2OrchestrationConfig <func_name>_config(const ChipTaskArgs& args);   // optional
//
// It reads the chip call's tensors and scalars from `args` and submits
// kernels as tasks:
//
//   CoreTaskArgs p;
//   p.add_input(args.tensor(0).ref());
//   p.add_output(TensorCreateInfo(shapes, 2, DataType::FLOAT32));  // runtime-allocated
//   TaskOutputTensors out = rt_submit_aiv_task(FUNC_ADD, p);
//   const ChipTensor& c = out.get_ref(0);
//
// Dependencies are inferred from the tensors each task reads and writes
// (read-after-write and write-after-write of overlapping ranges; a later
// writer is NOT ordered after earlier readers unless it says add_inout or
// add_dep). PTO2_SCOPE() { ... } opens a scope: tasks submitted in it hold
// their ring slots until the scope ends, so leaf tasks can retire.
//
// The shared object needs no link dependency: every call goes through a
// table of function pointers (simpler_orch_ops) the runtime fills in when it
// loads the object. The header is self-contained apart from tensor.h.
#ifndef SIMPLER_ORCHESTRATION_H
#define SIMPLER_ORCHESTRATION_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tensor.h"

#define SIMPLER_MAX_CORE_TENSORS 32
#define SIMPLER_MAX_CORE_SCALARS 16
#define SIMPLER_MAX_CORE_DEPS 16
#define SIMPLER_MAX_CHIP_TENSORS 256
#define SIMPLER_MAX_CHIP_SCALARS 128

// Access of a tensor argument of a core task (the runtime reads these).
#define SIMPLER_ACCESS_IN 1
#define SIMPLER_ACCESS_OUT 2
#define SIMPLER_ACCESS_INOUT 3

// Core types of the original hardware; kept for diagnostics only (cpu and
// cuda have one kind of core).
#define SIMPLER_CORE_ANY 0
#define SIMPLER_CORE_AIC 1
#define SIMPLER_CORE_AIV 2

// Status codes an orchestration may report (simpler_report_fatal).
#define PTO2_ERROR_INVALID_ARGS (-7)
#define PTO2_ERROR_ORCHESTRATION (-10)

extern "C" {

// The plain data of one core task's arguments, as the runtime reads it.
struct SimplerCoreArgs {
  uint32_t tensor_count;
  uint32_t scalar_count;
  uint32_t dep_count;
  uint32_t block_num;  // SPMD blocks; 0 means 1
  uint8_t access[SIMPLER_MAX_CORE_TENSORS];
  uint8_t created[SIMPLER_MAX_CORE_TENSORS];  // 1: allocated by the runtime (shapes/dtype only)
  ChipTensor tensors[SIMPLER_MAX_CORE_TENSORS];
  uint64_t scalars[SIMPLER_MAX_CORE_SCALARS];
  int64_t deps[SIMPLER_MAX_CORE_DEPS];
  const char* error;  // first builder misuse (too many arguments), or null
};

struct TaskOutputTensors;

// The runtime's side, filled in at load time.
struct SimplerOrchOps {
  uint32_t size;  // sizeof(SimplerOrchOps) of the runtime
  void (*submit)(int32_t func_id, int32_t core_type, const SimplerCoreArgs* args, TaskOutputTensors* out);
  void (*scope_begin)(int32_t mode);
  void (*scope_end)(void);
  int32_t (*is_fatal)(void);
  void (*report_fatal)(int32_t code, const char* func, const char* message);
  void (*log)(int32_t level, const char* func, const char* message);
};

__attribute__((weak, visibility("default"))) const SimplerOrchOps* simpler_orch_ops = 0;

}  // extern "C"

// ---------------------------------------------------------------------------
// Reporting and logging
// ---------------------------------------------------------------------------

#define SIMPLER_LOG_ERROR 0
#define SIMPLER_LOG_WARN 1
#define SIMPLER_LOG_INFO 2
#define SIMPLER_LOG_DEBUG 3

__attribute__((format(printf, 3, 4))) static inline void simpler_orch_log(int32_t level, const char* func,
                                                                          const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (simpler_orch_ops) simpler_orch_ops->log(level, func, buf);
}

// Fails the run with a message; later submits become no-ops.
__attribute__((format(printf, 3, 4))) static inline void simpler_report_fatal(int32_t code, const char* func,
                                                                              const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (simpler_orch_ops) simpler_orch_ops->report_fatal(code, func, buf);
}

#define LOG_ERROR(...) simpler_orch_log(SIMPLER_LOG_ERROR, __FUNCTION__, __VA_ARGS__)
#define LOG_WARN(...) simpler_orch_log(SIMPLER_LOG_WARN, __FUNCTION__, __VA_ARGS__)
#define LOG_INFO(...) simpler_orch_log(SIMPLER_LOG_INFO, __FUNCTION__, __VA_ARGS__)
#define LOG_DEBUG(...) simpler_orch_log(SIMPLER_LOG_DEBUG, __FUNCTION__, __VA_ARGS__)
#define rt_report_fatal(code, ...) simpler_report_fatal((code), __FUNCTION__, __VA_ARGS__)
#define pto2_rt_report_fatal rt_report_fatal

static inline bool rt_is_fatal() { return simpler_orch_ops == 0 || simpler_orch_ops->is_fatal() != 0; }
static inline bool pto2_rt_is_fatal() { return rt_is_fatal(); }

// A tensor with a zero address, returned where a real one cannot be.
static inline const ChipTensor& simpler_null_tensor() {
  static const ChipTensor t = {};
  return t;
}

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

// The chip call's arguments: the tensors and scalars run() was given.
struct ChipTaskArgs {
  const ChipTensor* tensors_;
  const uint64_t* scalars_;
  uint32_t tensor_count_;
  uint32_t scalar_count_;

  uint32_t tensor_count() const { return tensor_count_; }
  uint32_t scalar_count() const { return scalar_count_; }
  const ChipTensor& tensor(uint32_t i) const {
    if (i < tensor_count_) return tensors_[i];
    simpler_report_fatal(PTO2_ERROR_INVALID_ARGS, "ChipTaskArgs::tensor",
                         "tensor(%u) asked for, the call has %u tensor(s)", i, tensor_count_);
    return simpler_null_tensor();
  }
  uint64_t scalar(uint32_t i) const {
    if (i < scalar_count_) return scalars_[i];
    simpler_report_fatal(PTO2_ERROR_INVALID_ARGS, "ChipTaskArgs::scalar",
                         "scalar(%u) asked for, the call has %u scalar(s)", i, scalar_count_);
    return 0;
  }
};

struct PTO2OrchestrationConfig {
  int32_t expected_arg_count;  // tensors + scalars the orchestration expects; < 0 = any
};

// Shape and dtype of a tensor the runtime allocates for a task's output.
struct TensorCreateInfo {
  uint32_t shapes[SIMPLER_MAX_TENSOR_DIMS];
  uint32_t ndims;
  DataType dtype;

  TensorCreateInfo(const uint32_t* s, uint32_t n, DataType dt = DataType::FLOAT32) : shapes{}, ndims(n), dtype(dt) {
    for (uint32_t k = 0; k < n && k < SIMPLER_MAX_TENSOR_DIMS; k++) shapes[k] = s[k];
  }
};

// Outputs the runtime allocated for one task (those added from a
// TensorCreateInfo, in add_output order), and the task's id for add_dep.
struct TaskOutputTensors {
  TaskOutputTensors() : id_(-1), output_count(0) {}

  int64_t id_;
  uint32_t output_count;

  int64_t task_id() const { return id_; }
  bool empty() const { return output_count == 0; }
  uint32_t size() const { return output_count; }

  const ChipTensor& get_ref(uint32_t i) const& {
    if (i < output_count) return *reinterpret_cast<const ChipTensor*>(storage_ + i * sizeof(ChipTensor));
    if (!rt_is_fatal())
      simpler_report_fatal(PTO2_ERROR_INVALID_ARGS, "TaskOutputTensors::get_ref",
                           "get_ref(%u) asked for, the task (id %lld) created %u output(s)", i, (long long)id_,
                           output_count);
    return simpler_null_tensor();
  }
  // Borrowing from a temporary would dangle.
  const ChipTensor& get_ref(uint32_t i) const&& = delete;

  ChipTensor* output_ptr(uint32_t i) { return reinterpret_cast<ChipTensor*>(storage_ + i * sizeof(ChipTensor)); }

 private:
  // Left uninitialised: only output_count entries are ever written or read.
  alignas(ChipTensor) unsigned char storage_[SIMPLER_MAX_CORE_TENSORS * sizeof(ChipTensor)];
};

// Builder for one core task's arguments. Tensors are added in the kernel
// signature's order, scalars after them.
class CoreTaskArgs {
 public:
  CoreTaskArgs() {
    a_.tensor_count = a_.scalar_count = a_.dep_count = 0;
    a_.block_num = 1;
    a_.error = 0;
  }

  void add_input(const ChipTensor& t) { add(t, SIMPLER_ACCESS_IN, 0); }
  void add_output(const ChipTensor& t) { add(t, SIMPLER_ACCESS_OUT, 0); }
  void add_inout(const ChipTensor& t) { add(t, SIMPLER_ACCESS_INOUT, 0); }
  void add_output(const TensorCreateInfo& ci) {
    ChipTensor t = {};
    t.ndims = ci.ndims;
    t.dtype = ci.dtype;
    for (uint32_t k = 0; k < SIMPLER_MAX_TENSOR_DIMS; k++) t.shapes[k] = ci.shapes[k];
    add(t, SIMPLER_ACCESS_OUT, 1);
  }

  void add_scalar(uint64_t v) {
    if (a_.scalar_count >= SIMPLER_MAX_CORE_SCALARS) return set_error("more than 16 scalars in one task");
    a_.scalars[a_.scalar_count++] = v;
  }
  void add_scalar(int64_t v) { add_scalar(static_cast<uint64_t>(v)); }
  void add_scalar(int32_t v) { add_scalar(static_cast<uint64_t>(static_cast<int64_t>(v))); }
  void add_scalar(uint32_t v) { add_scalar(static_cast<uint64_t>(v)); }
  // A float travels as its 32-bit pattern in the low half, a double as its 64 bits.
  void add_scalar(float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    add_scalar(static_cast<uint64_t>(bits));
  }
  void add_scalar(double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    add_scalar(bits);
  }

  // Orders this task after another one (by the id a submit returned).
  void add_dep(int64_t task_id) {
    if (a_.dep_count >= SIMPLER_MAX_CORE_DEPS) return set_error("more than 16 explicit dependencies in one task");
    a_.deps[a_.dep_count++] = task_id;
  }
  void add_dep(const TaskOutputTensors& producer) { add_dep(producer.task_id()); }

  // SPMD launch width: the kernel runs once per block (cpu cores / CUDA blocks).
  void set_block_num(uint32_t n) { a_.block_num = n; }
  struct LaunchSpec {
    CoreTaskArgs* owner;
    void set_block_num(uint32_t n) { owner->set_block_num(n); }
    uint32_t block_num() const { return owner->a_.block_num; }
  };
  LaunchSpec launch_spec{this};

  bool has_error() const { return a_.error != 0; }
  const char* error_msg() const { return a_.error; }
  uint32_t tensor_count() const { return a_.tensor_count; }
  uint32_t scalar_count() const { return a_.scalar_count; }
  const SimplerCoreArgs& raw() const { return a_; }

  CoreTaskArgs(const CoreTaskArgs& o) : launch_spec{this}, a_(o.a_) {}
  CoreTaskArgs& operator=(const CoreTaskArgs& o) {
    a_ = o.a_;
    return *this;
  }

 private:
  void add(const ChipTensor& t, uint8_t access, uint8_t created) {
    if (a_.tensor_count >= SIMPLER_MAX_CORE_TENSORS) return set_error("more than 32 tensors in one task");
    a_.access[a_.tensor_count] = access;
    a_.created[a_.tensor_count] = created;
    a_.tensors[a_.tensor_count++] = t;
  }
  void set_error(const char* msg) {
    if (!a_.error) a_.error = msg;
  }

  SimplerCoreArgs a_;
};

// ---------------------------------------------------------------------------
// Submitting and scopes
// ---------------------------------------------------------------------------

static inline TaskOutputTensors simpler_submit(int32_t func_id, int32_t core_type, const CoreTaskArgs& args) {
  TaskOutputTensors out;
  if (!rt_is_fatal()) simpler_orch_ops->submit(func_id, core_type, &args.raw(), &out);
  return out;
}

static inline TaskOutputTensors rt_submit_task(int32_t func_id, const CoreTaskArgs& args) {
  return simpler_submit(func_id, SIMPLER_CORE_ANY, args);
}
static inline TaskOutputTensors rt_submit_aiv_task(int32_t func_id, const CoreTaskArgs& args) {
  return simpler_submit(func_id, SIMPLER_CORE_AIV, args);
}
static inline TaskOutputTensors rt_submit_aic_task(int32_t func_id, const CoreTaskArgs& args) {
  return simpler_submit(func_id, SIMPLER_CORE_AIC, args);
}

// Runtime-allocated tensors with no kernel: a task that only creates its
// outputs. Later tasks that use them depend on nothing.
static inline TaskOutputTensors alloc_tensors(const TensorCreateInfo* infos, uint32_t count) {
  CoreTaskArgs a;
  for (uint32_t i = 0; i < count; i++) a.add_output(infos[i]);
  return simpler_submit(-1, SIMPLER_CORE_ANY, a);
}
static inline TaskOutputTensors alloc_tensors(const TensorCreateInfo& info) { return alloc_tensors(&info, 1); }

enum class PTO2ScopeMode : int32_t {
  AUTO = 0,    // dependencies from the TensorMap plus explicit ones
  MANUAL = 1,  // explicit dependencies (add_dep) only; the TensorMap is skipped
};

static inline void rt_scope_begin(PTO2ScopeMode mode = PTO2ScopeMode::AUTO) {
  if (!rt_is_fatal()) simpler_orch_ops->scope_begin(static_cast<int32_t>(mode));
}
static inline void rt_scope_end() {
  if (simpler_orch_ops) simpler_orch_ops->scope_end();
}

class PTO2ScopeGuard {
 public:
  PTO2ScopeGuard(PTO2ScopeMode mode = PTO2ScopeMode::AUTO) { rt_scope_begin(mode); }
  ~PTO2ScopeGuard() { rt_scope_end(); }
  PTO2ScopeGuard(const PTO2ScopeGuard&) = delete;
  PTO2ScopeGuard& operator=(const PTO2ScopeGuard&) = delete;
};

#define SIMPLER_CONCAT_IMPL(x, y) x##y
#define SIMPLER_CONCAT(x, y) SIMPLER_CONCAT_IMPL(x, y)
// PTO2_SCOPE() { ... } or PTO2_SCOPE(PTO2ScopeMode::MANUAL) { ... }
#define PTO2_SCOPE(...) \
  if (PTO2ScopeGuard SIMPLER_CONCAT(pto2_scope_guard_, __COUNTER__){__VA_ARGS__}; true)
#define PTO2_SCOPE_GUARD(...) \
  [[maybe_unused]] PTO2ScopeGuard SIMPLER_CONCAT(pto2_scope_guard_, __COUNTER__) { __VA_ARGS__ }

// Spellings of the original API, so existing orchestration code ports unchanged.
using Arg = CoreTaskArgs;
using L0TaskArgs = CoreTaskArgs;
using L2TaskArgs = ChipTaskArgs;
using Tensor = ChipTensor;
static inline TaskOutputTensors pto2_rt_submit_task(int32_t func_id, const CoreTaskArgs& a) { return rt_submit_task(func_id, a); }
static inline TaskOutputTensors pto2_rt_submit_aiv_task(int32_t func_id, const CoreTaskArgs& a) {
  return rt_submit_aiv_task(func_id, a);
}
static inline TaskOutputTensors pto2_rt_submit_aic_task(int32_t func_id, const CoreTaskArgs& a) {
  return rt_submit_aic_task(func_id, a);
}
static inline void pto2_rt_scope_begin(PTO2ScopeMode mode = PTO2ScopeMode::AUTO) { rt_scope_begin(mode); }
static inline void pto2_rt_scope_end() { rt_scope_end(); }

// ---------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------

// A contiguous row-major tensor over `addr` (inside a chip argument's or a
// Worker.malloc allocation; the runtime rebases it onto that allocation).
static inline ChipTensor make_tensor_external(void* addr, const uint32_t shapes[], uint32_t ndims,
                                              DataType dtype = DataType::FLOAT32) {
  ChipTensor t = {};
  t.buffer.addr = reinterpret_cast<uint64_t>(addr);
  t.ndims = ndims;
  t.dtype = dtype;
  uint64_t n = 1;
  for (int k = static_cast<int>(ndims) - 1; k >= 0; k--) {
    t.shapes[k] = shapes[k];
    t.strides[k] = static_cast<int64_t>(n);
    n *= shapes[k];
  }
  t.buffer.size = n * simpler_dtype_size(static_cast<int32_t>(dtype));
  return t;
}

// The sub-box [offsets, offsets + shapes) of `t` (same number of dimensions).
static inline ChipTensor make_view(const ChipTensor& t, const uint32_t shapes[], const uint32_t offsets[]) {
  ChipTensor v = t;
  for (uint32_t k = 0; k < t.ndims; k++) {
    if (offsets[k] + static_cast<uint64_t>(shapes[k]) > t.shapes[k]) {
      simpler_report_fatal(PTO2_ERROR_INVALID_ARGS, "make_view",
                           "dimension %u: view [%u, %u + %u) exceeds the tensor's %u elements", k, offsets[k],
                           offsets[k], shapes[k], t.shapes[k]);
      return simpler_null_tensor();
    }
    v.start_offset += static_cast<uint64_t>(offsets[k]) * static_cast<uint64_t>(t.strides[k]);
    v.shapes[k] = shapes[k];
  }
  return v;
}

#endif  // SIMPLER_ORCHESTRATION_H
