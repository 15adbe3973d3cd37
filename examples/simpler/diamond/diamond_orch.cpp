// f = (a + b + 1) * (a + b + 2) + (a + b)
//
//        c = a + b                (outer scope)
//       /          \
//   d = c + 1    e = c + 2        (inner scope: d, e, g and the last task)
//       \          /
//        g = d * e
//            |
//        f = g + c
//
// c, d, e and g are allocated by the runtime (TensorCreateInfo); the
// dependencies come from the TensorMap.
#include "pto_orchestration_api.h"

#define FUNC_ADD 0
#define FUNC_ADD_SCALAR 1
#define FUNC_MUL 2

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig diamond_orchestration_config(const ChipTaskArgs&) {
  return PTO2OrchestrationConfig{.expected_arg_count = 3};
}

__attribute__((visibility("default"))) void diamond_orchestration(const ChipTaskArgs& args) {
  const ChipTensor& a = args.tensor(0).ref();
  const ChipTensor& b = args.tensor(1).ref();
  const ChipTensor& f = args.tensor(2).ref();
  const uint32_t n = a.shapes[0];
  TensorCreateInfo ci(&n, 1, DataType::FLOAT32);

  PTO2_SCOPE() {
    CoreTaskArgs p0;
    p0.add_input(a);
    p0.add_input(b);
    p0.add_output(ci);
    TaskOutputTensors t0 = rt_submit_aiv_task(FUNC_ADD, p0);
    const ChipTensor& c = t0.get_ref(0);

    // d, e and g live in the inner scope (a created tensor is valid inside
    // the scope that created it); c belongs to the outer one.
    PTO2_SCOPE() {
      CoreTaskArgs p1;
      p1.add_input(c);
      p1.add_output(ci);
      p1.add_scalar(1.0f);
      TaskOutputTensors t1 = rt_submit_aiv_task(FUNC_ADD_SCALAR, p1);

      CoreTaskArgs p2;
      p2.add_input(c);
      p2.add_output(ci);
      p2.add_scalar(2.0f);
      TaskOutputTensors t2 = rt_submit_aiv_task(FUNC_ADD_SCALAR, p2);

      CoreTaskArgs p3;
      p3.add_input(t1.get_ref(0));
      p3.add_input(t2.get_ref(0));
      p3.add_output(ci);
      TaskOutputTensors t3 = rt_submit_aiv_task(FUNC_MUL, p3);

      CoreTaskArgs p4;
      p4.add_input(t3.get_ref(0));
      p4.add_input(c);
      p4.add_output(f);
      rt_submit_aiv_task(FUNC_ADD, p4);
    }
  }
}

}  // extern "C"
