// A built-in orchestration that submits a fixed list of tasks described as
// data, so a graph of built-in kernels (tensorcore ops) runs with no
// compiler at all. Python builds the description (ChipCallable.from_tasks).
//
// Text format, one item per line:
//   simpler-task-list 1
//   task <func_id> <block_num>              starts a task
//   t <access> arg <index> [<ndims> <offsets...> <shapes...>]    a chip argument (or a box of it)
//   t <access> out <task> <output> [<ndims> <offsets...> <shapes...>]   an output created by an earlier task
//   t 2 new <ndims> <dtype> <shapes...>     an output the runtime allocates
//   s <u64>                                 a scalar
//   scope_begin <mode> | scope_end
// <access>: 1 IN, 2 OUT, 3 INOUT. Tasks are numbered from 0 in order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "simpler/orchestration.h"

namespace simpler {

struct TaskList {
  struct Tensor {
    uint8_t access;
    enum Kind { Arg, Out, New } kind;
    uint32_t a = 0, b = 0;  // Arg: index; Out: task, output
    uint32_t ndims = 0;     // view box (0: whole) or New's shape
    uint32_t offsets[SIMPLER_MAX_TENSOR_DIMS] = {};
    uint32_t shapes[SIMPLER_MAX_TENSOR_DIMS] = {};
    int32_t dtype = 0;
  };
  struct Item {
    enum Kind { Task, ScopeBegin, ScopeEnd } kind;
    int32_t func_id = 0;
    uint32_t block_num = 1;
    int32_t mode = 0;
    std::vector<Tensor> tensors;
    std::vector<uint64_t> scalars;
  };
  std::vector<Item> items;
  uint32_t task_count = 0;
};

// Parses and checks a description (`chip_tensors`: tensor entries of the
// ChipCallable's signature).
Error parse_task_list(const std::string& text, uint32_t chip_tensors, std::shared_ptr<const TaskList>* out);

// The orchestration entry of task lists; runs the list set for this thread.
void task_list_orchestration(const ::ChipTaskArgs& args);
void set_current_task_list(const TaskList* list);

}  // namespace simpler
