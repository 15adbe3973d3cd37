// Task graphs for the per-task overhead benchmark (empty kernels, func_id 0
// takes one INOUT tensor, func_id 1 one OUT tensor, func_id 2 one IN tensor):
//
//   bench_chain  n tasks each updating the same one-element tensor: every
//                task depends on the one before (read-after-write).
//   bench_fan    n independent tasks each writing its own element of y, then
//                one task reading all of y (it depends on every writer not
//                yet finished).
//
// Tasks are submitted in scopes of `per_scope` (scalar 1) so finished ones
// retire and the rings are reused.
#include "pto_orchestration_api.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void bench_chain(const ChipTaskArgs& args) {
  const ChipTensor& x = args.tensor(0).ref();
  const uint64_t n = args.scalar(0), per_scope = args.scalar(1);
  for (uint64_t i = 0; i < n;) {
    PTO2_SCOPE() {
      for (uint64_t end = i + per_scope < n ? i + per_scope : n; i < end; i++) {
        CoreTaskArgs p;
        p.add_inout(x);
        rt_submit_task(0, p);
      }
    }
  }
}

EXPORT void bench_fan(const ChipTaskArgs& args) {
  const ChipTensor& y = args.tensor(1).ref();
  const uint64_t n = args.scalar(0), per_scope = args.scalar(1);
  uint32_t one = 1;
  for (uint64_t i = 0; i < n;) {
    PTO2_SCOPE() {
      for (uint64_t end = i + per_scope < n ? i + per_scope : n; i < end; i++) {
        uint32_t off = uint32_t(i);
        CoreTaskArgs p;
        p.add_output(make_view(y, &one, &off));
        rt_submit_task(1, p);
      }
    }
  }
  CoreTaskArgs sink;
  sink.add_input(y);
  rt_submit_task(2, sink);
}
