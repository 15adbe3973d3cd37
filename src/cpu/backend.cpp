// The portable CPU backend: host memory, worker-thread streams, and the
// kernels of src/cpu.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/backend.h"
#include "cpu/cpu_features.h"
#include "cpu/ops.h"
#include "cpu/queue.h"
#include "cpu/thread_pool.h"
#include "quant/formats.h"

namespace tc {
namespace {

class CpuBackend final : public Backend {
 public:
  tc_backend kind() const override { return TC_BACKEND_PORTABLE_CPU; }

  void device_info(struct tc_device_info* out) const override {
    std::memset(out, 0, sizeof *out);
    std::snprintf(out->name, sizeof out->name, "%s", cpu::processor_name().c_str());
    std::snprintf(out->family, sizeof out->family, "cpu");
    std::snprintf(out->features, sizeof out->features, "%s", cpu::features_string().c_str());
    out->backend = TC_BACKEND_PORTABLE_CPU;
    out->device_index = 0;
    out->compute_units = cpu::num_threads();
    out->compute_capability = 0;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  }

  // Every op of core/ops.def has a CPU kernel.
  bool supports_op(OpId) const override { return true; }
  // The 8-bit products (f16 / bf16 X) on AVX512-VNNI read Q4_0, Q4_1, Q5_0,
  // Q5_1, Q8_0, Q4_K, Q5_K and Q6_K rows interleaved by eight.
  bool reads_rows8(int32_t fmt, tc_dtype dtype) const override {
    const cpu::Features& f = cpu::features();
    return quant::has_rows8(fmt) && dtype != TC_DTYPE_F32 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512_vnni && f.fma && f.f16c;
  }
  // Pairs of groups of eight rows (stored interleaved: quant::rows8_paired)
  // are independent: the pool's threads take ranges of them (and so share
  // the page faults of the new copy, most of its cost).
  void make_rows8(int32_t fmt, const void* src, int64_t N, int64_t K, void* dst) override {
    const quant::FormatInfo* f = quant::format_info(fmt);
    const int64_t row_bytes = K / f->block_elems * f->block_bytes, group_bytes = int64_t(quant::rows8_bytes(fmt, 8, K));
    const int64_t groups = N / 8;
    cpu::parallel_for((groups + 1) / 2, std::max<int64_t>(1, (1 << 20) / (2 * group_bytes)), [&](int64_t p0, int64_t p1) {
      const int64_t g0 = 2 * p0, g1 = std::min(groups, 2 * p1);
      quant::repack_rows8(fmt, static_cast<const uint8_t*>(src) + g0 * 8 * row_bytes, (g1 - g0) * 8, K,
                          static_cast<uint8_t*>(dst) + g0 * group_bytes);
    });
  }
  uint64_t extra_capabilities() const override { return TC_CAPABILITY_STREAMS | TC_CAPABILITY_GGUF; }

  // Host memory as the L1 tier gets it (core/tiers.cpp): 2 MiB aligned with
  // transparent huge pages from 2 MiB up. GEMM reads its operands through
  // the TLB; OpenBLAS's sgemm ran ~5% slower on 4 KiB pages than on the huge
  // pages NumPy asks for its own arrays (bench/results/gemm-cpu.md).
  void* alloc(size_t nbytes) override { return alloc_host(nbytes); }
  void release(void* ptr) override { release_host(ptr); }
  bool host_accessible() const override { return true; }
  tc_status copy_in(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return TC_OK;
  }
  tc_status copy_out(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
    return TC_OK;
  }

  std::unique_ptr<Queue> create_queue() override { return std::make_unique<cpu::WorkQueue>(); }

  // Each op runs cpu::<op> (cpu/ops.h) on the stream's worker thread, or now.
#define TC_OP(name, Args, caps) \
  tc_status name(const Args& a, Queue* q) override { return cpu::run_on(q, a, cpu::name); }
#include "core/ops.def"
#undef TC_OP

  // ---- Memory tiers (core/tiers.h) -------------------------------------------
  // L0 and L1 are both RAM here (separately budgeted); a move on a stream
  // runs on the stream's worker thread, in order with its ops.
  bool supports_tiers() const override { return true; }
  tc_status copy_async(void* dst, const void* src, size_t n, bool, Queue* q) override {
    if (!q) return copy_parallel(dst, src, n);
    static_cast<cpu::WorkQueue*>(q)->enqueue([dst, src, n] { return copy_parallel(dst, src, n); });
    return TC_OK;
  }
  // Large copies in 1 MiB pieces on the pool: the target's first-touch page
  // faults dominate, and they run in parallel.
  static tc_status copy_parallel(void* dst, const void* src, size_t n) {
    constexpr int64_t kPiece = 1 << 20;
    cpu::parallel_for(int64_t((n + kPiece - 1) / kPiece), 4, [&](int64_t b, int64_t e) {
      size_t lo = size_t(b) * kPiece, hi = std::min(n, size_t(e) * kPiece);
      std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
    });
    return TC_OK;
  }
  tc_status run_host(Queue* q, std::function<tc_status()> fn) override {
    if (!q) return fn();
    static_cast<cpu::WorkQueue*>(q)->enqueue(std::move(fn));
    return TC_OK;
  }

};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tc
