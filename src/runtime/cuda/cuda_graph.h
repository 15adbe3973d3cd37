// The pieces of the cuda executor shared with its CUDA Graph builder: the
// layout of a kernel's argument block and the graph of a host_build_graph run.
#pragma once

#include <cuda.h>

#include "runtime/cuda/cuda_util.h"
#include "runtime/engine.h"

namespace simpler {
namespace cuda {

// A kernel's `int64_t* args` in device memory: argv (8 bytes per argument,
// rounded to 16), then one ChipTensor per tensor argument.
uint64_t arg_block_bytes(const TaskSlot& t);
// Writes t's block into `host`, for the device address `dev` it will be at.
void write_arg_block(const TaskSlot& t, char* host, uint64_t dev);

// An instantiated CUDA Graph of a recorded graph (Graph::cuda_graph).
struct GraphState {
  const PrimaryContext* ctx = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CUdeviceptr args = 0;
};
Error build_graph(Graph& g, const PrimaryContext* ctx, int threads, GraphState** out);
void destroy_graph_state(void* state);  // Graph::destroy_cuda_graph

}  // namespace cuda
}  // namespace simpler
