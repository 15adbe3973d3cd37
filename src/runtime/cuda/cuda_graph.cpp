// host_build_graph on cuda: a recorded graph as a CUDA Graph, one kernel node
// per task (an empty node for an alloc-only one), edges from the recorded
// dependencies, every argument block uploaded once into one allocation.
#include "runtime/cuda/cuda_graph.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "runtime/kernel_ref.h"

namespace simpler {
namespace cuda {

uint64_t arg_block_bytes(const TaskSlot& t) {
  uint64_t argv = (uint64_t(t.tensor_count + t.scalar_count) * 8 + 15) / 16 * 16;
  return argv + uint64_t(t.tensor_count) * sizeof(ChipTensor);
}

void write_arg_block(const TaskSlot& t, char* host, uint64_t dev) {
  const uint64_t argv_bytes = (uint64_t(t.tensor_count + t.scalar_count) * 8 + 15) / 16 * 16;
  int64_t* argv = reinterpret_cast<int64_t*>(host);
  ChipTensor* descs = reinterpret_cast<ChipTensor*>(host + argv_bytes);
  for (uint32_t i = 0; i < t.tensor_count; i++) {
    descs[i] = t.tensors[i];
    argv[i] = int64_t(dev + argv_bytes + i * sizeof(ChipTensor));
  }
  for (uint32_t s = 0; s < t.scalar_count; s++) argv[t.tensor_count + s] = t.argv[t.tensor_count + s];
}

void destroy_graph_state(void* p) {
  auto* g = static_cast<GraphState*>(p);
  if (g->ctx) g->ctx->bind();
  if (g->exec) cu().cuGraphExecDestroy(g->exec);
  if (g->graph) cu().cuGraphDestroy(g->graph);
  if (g->args) cu().cuMemFree(g->args);
  delete g;
}

Error build_graph(Graph& g, const PrimaryContext* ctx, int threads, GraphState** out) {
  // destroy_graph_state frees whatever a failed build had made so far.
  std::unique_ptr<GraphState, void (*)(void*)> gs(new GraphState(), destroy_graph_state);
  gs->ctx = ctx;
  std::vector<uint64_t> offs(g.slots.size());
  uint64_t bytes = 0;
  size_t i = 0;
  for (TaskSlot& t : g.slots) {
    offs[i++] = bytes;
    bytes += (arg_block_bytes(t) + 255) / 256 * 256;
  }
  CUresult r = cu().cuMemAlloc(&gs->args, std::max<uint64_t>(bytes, 256));
  if (r != CUDA_SUCCESS) return cu_error(r, "cuMemAlloc (graph arguments)");
  std::vector<char> host(std::max<uint64_t>(bytes, 256));
  i = 0;
  for (TaskSlot& t : g.slots) write_arg_block(t, host.data() + offs[i], gs->args + offs[i]), i++;
  if ((r = cu().cuMemcpyHtoD(gs->args, host.data(), bytes)) != CUDA_SUCCESS) return cu_error(r, "uploading graph arguments");
  if ((r = cu().cuGraphCreate(&gs->graph, 0)) != CUDA_SUCCESS) return cu_error(r, "cuGraphCreate");
  std::vector<CUgraphNode> nodes(g.slots.size(), nullptr);
  std::vector<CUdeviceptr> argp(g.slots.size());
  i = 0;
  for (TaskSlot& t : g.slots) {
    std::vector<CUgraphNode> deps;
    for (uint32_t k = 0; k < t.fanin_count; k++) {
      CUgraphNode n = nodes[size_t(pos_of(t.fanin[k].producer->id))];
      if (n) deps.push_back(n);
    }
    if (!t.kernel) {  // alloc-only: an empty node keeps the ordering
      r = cu().cuGraphAddEmptyNode(&nodes[i], gs->graph, deps.data(), deps.size());
    } else {
      argp[i] = gs->args + offs[i];
      void* params[] = {&argp[i]};
      CUDA_KERNEL_NODE_PARAMS kp;
      std::memset(&kp, 0, sizeof kp);
      kp.func = static_cast<CUfunction>(t.kernel->cuda_function);
      kp.gridDimX = t.block_num, kp.gridDimY = 1, kp.gridDimZ = 1;
      kp.blockDimX = unsigned(threads), kp.blockDimY = 1, kp.blockDimZ = 1;
      kp.kernelParams = params;
      r = cu().cuGraphAddKernelNode(&nodes[i], gs->graph, deps.data(), deps.size(), &kp);
    }
    if (r != CUDA_SUCCESS) return cu_error(r, "building the CUDA Graph");
    i++;
  }
  if ((r = cu().cuGraphInstantiate(&gs->exec, gs->graph, 0)) != CUDA_SUCCESS) return cu_error(r, "cuGraphInstantiate");
  *out = gs.release();
  return {};
}

}  // namespace cuda
}  // namespace simpler
