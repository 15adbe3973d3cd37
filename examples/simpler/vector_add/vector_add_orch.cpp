// out = a + b: one task of four SPMD blocks.
#include "pto_orchestration_api.h"

#define FUNC_ADD 0

extern "C" {

__attribute__((visibility("default"))) PTO2OrchestrationConfig vector_add_orchestration_config(const ChipTaskArgs&) {
  return PTO2OrchestrationConfig{.expected_arg_count = 3};
}

__attribute__((visibility("default"))) void vector_add_orchestration(const ChipTaskArgs& args) {
  CoreTaskArgs p;
  p.add_input(args.tensor(0).ref());
  p.add_input(args.tensor(1).ref());
  p.add_output(args.tensor(2).ref());
  p.launch_spec.set_block_num(4);
  rt_submit_aiv_task(FUNC_ADD, p);
}

}  // extern "C"
