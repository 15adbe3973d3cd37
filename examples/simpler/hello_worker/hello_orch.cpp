// An orchestration that submits nothing: it reports its arguments.
#include "pto_orchestration_api.h"

extern "C" __attribute__((visibility("default"))) void hello_orchestration(const ChipTaskArgs& args) {
  LOG_WARN("hello from the orchestration: %u tensor(s), %u scalar(s), first scalar %llu", args.tensor_count(),
           args.scalar_count(), (unsigned long long)(args.scalar_count() ? args.scalar(0) : 0));
}
