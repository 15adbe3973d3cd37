// Orchestrations of the Python failure and diagnostics tests, one entry
// point each. Kernels: 0 inc (INOUT), 1 segv (INOUT), 2 abort (INOUT),
// 3 sleep_ms (INOUT, SCALAR).
#include <stdexcept>

#include "pto_orchestration_api.h"

#define F_INC 0
#define F_SEGV 1
#define F_ABORT 2
#define F_SLEEP 3

#define EXPORT extern "C" __attribute__((visibility("default")))

// x += 1, n times (n = scalar 0), in scopes of 64.
EXPORT void orch_chain(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  const uint64_t n = args.scalar(0);
  for (uint64_t i = 0; i < n;) {
    PTO2_SCOPE() {
      for (uint64_t end = i + 64 < n ? i + 64 : n; i < end; i++) {
        CoreTaskArgs p;
        p.add_inout(x);
        rt_submit_task(F_INC, p);
      }
    }
  }
}

EXPORT PTO2OrchestrationConfig orch_chain_config(const ChipTaskArgs&) { return PTO2OrchestrationConfig{2}; }

// A faulting task, then a dependent increment that must not run.
EXPORT void orch_segv(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  rt_submit_task(F_SEGV, p);
  CoreTaskArgs q;
  q.add_inout(args.tensor(0).ref());
  rt_submit_task(F_INC, q);
}

EXPORT void orch_abort(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  rt_submit_task(F_ABORT, p);
}

EXPORT void orch_throw(const ChipTaskArgs&) { throw std::runtime_error("orchestration refused the input"); }

EXPORT void orch_unknown_func(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  rt_submit_task(42, p);
}

EXPORT void orch_bad_signature(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  p.add_inout(args.tensor(0).ref());
  rt_submit_task(F_INC, p);  // inc takes one tensor
}

EXPORT void orch_outside(const ChipTaskArgs& args) {
  ChipTensor t = args.tensor(0).ref();
  t.start_offset += 1;  // the last element now lies past the allocation
  CoreTaskArgs p;
  p.add_inout(t);
  rt_submit_task(F_INC, p);
}

EXPORT void orch_report(const ChipTaskArgs&) { rt_report_fatal(PTO2_ERROR_INVALID_ARGS, "shape %d is not supported", 7); }

// Sleep `ms` (scalar 0) milliseconds once.
EXPORT void orch_sleep(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_inout(args.tensor(0).ref());
  p.add_scalar(args.scalar(0));
  rt_submit_task(F_SLEEP, p);
}

// n tasks (scalar 0) in one scope, each creating a 1 KiB output: finished
// tasks cannot retire before the scope ends.
EXPORT void orch_one_scope(const ChipTaskArgs& args) {
  uint32_t shape = 256;
  TensorCreateInfo ci(&shape, 1, DataType::FLOAT32);
  PTO2_SCOPE() {
    for (uint64_t i = 0; i < args.scalar(0); i++) {
      TaskOutputTensors t = alloc_tensors(ci);
      CoreTaskArgs q;
      q.add_inout(t.get_ref(0));
      rt_submit_task(F_INC, q);
    }
  }
}

// A slow task, a faulting one after it, and an increment after that: all
// three are submitted before the fault, so the increment is poisoned (not
// run) rather than never submitted.
EXPORT void orch_poison(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  CoreTaskArgs p0;
  p0.add_inout(x);
  p0.add_scalar(args.scalar(0));
  rt_submit_task(F_SLEEP, p0);
  CoreTaskArgs p1;
  p1.add_inout(x);
  rt_submit_task(F_SEGV, p1);
  CoreTaskArgs p2;
  p2.add_inout(x);
  rt_submit_task(F_INC, p2);
}
