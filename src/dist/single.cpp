// The world-of-one backend: collectives are their single-rank identities
// (allreduce of one buffer is itself, allgather/reduce_scatter copy).
#include <cstring>

#include "core/backend.h"
#include "core/half.h"
#include "dist/comm.h"

namespace tc {
namespace dist {

namespace {

class SingleComm final : public Comm {
 public:
  explicit SingleComm(Backend* device) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void set_timeout_ms(int64_t) override {}
  tc_status allreduce(void*, size_t, tc_dtype, int32_t) override { return TC_OK; }
  tc_status broadcast(void*, size_t, tc_dtype, int) override { return TC_OK; }
  tc_status allgather(const void* src, void* dst, size_t n, tc_dtype dtype) override {
    return copy(dst, src, n * dtype_size(dtype));
  }
  tc_status reduce_scatter(const void* src, void* dst, size_t n, tc_dtype dtype, int32_t) override {
    return copy(dst, src, n * dtype_size(dtype));
  }
  tc_status barrier() override { return TC_OK; }
  // DiLoCo's exchanges are on host arrays.
  tc_status fork(std::unique_ptr<Comm>* out) override {
    *out = make_single_comm(nullptr);
    return TC_OK;
  }

 private:
  tc_status copy(void* dst, const void* src, size_t bytes) {
    if (!bytes || dst == src) return TC_OK;
    if (device_) return device_->copy_in(dst, src, bytes);  // device to device (cudaMemcpyDefault)
    std::memmove(dst, src, bytes);
    return TC_OK;
  }
  Backend* device_;
};

}  // namespace

std::unique_ptr<Comm> make_single_comm(Backend* device) { return std::make_unique<SingleComm>(device); }

uint64_t wire_bytes_allreduce(uint64_t bytes, int n) { return n <= 1 ? 0 : 2 * (uint64_t(n) - 1) * bytes / uint64_t(n); }
uint64_t wire_bytes_allgather(uint64_t bytes_per_rank, int n) { return n <= 1 ? 0 : (uint64_t(n) - 1) * bytes_per_rank; }
uint64_t wire_bytes_reduce_scatter(uint64_t bytes_per_rank, int n) {
  return n <= 1 ? 0 : (uint64_t(n) - 1) * bytes_per_rank;
}
// gloo and NCCL broadcast from the root to each other rank.
uint64_t wire_bytes_broadcast(uint64_t bytes, int n, bool root) { return n <= 1 || !root ? 0 : (uint64_t(n) - 1) * bytes; }

}  // namespace dist
}  // namespace tc
