// Bulk copies (cp.async.bulk, the Hopper TMA's one-dimensional form) into
// shared memory, completing on mbarriers: the data movement of the
// streaming products (gemv_q8_stream.cu) and of the decode-step probe that
// measures it without their arithmetic (bench/cuda/decode_read_chain.cu).
// sm_90 and later only: callers compile these inside sm_90 code paths.
//
// A stage's barrier takes one arrival a phase (the issuing thread's, with
// the bytes it expects); the copies' completed bytes finish the phase, and
// consumers wait on the phase's parity.
#pragma once

#include <cstdint>

namespace tc {
namespace cuda {
namespace bulk {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// A barrier of one arrival a phase.
__device__ __forceinline__ void bar_init(uint64_t* b) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_addr(b)) : "memory");
}
// The one arrival of a stage's phase, expecting `bytes` of bulk copies.
__device__ __forceinline__ void bar_expect(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
// Until the phase of the given parity has completed.
__device__ __forceinline__ void bar_wait(uint64_t* b, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(b)), "r"(parity)
        : "memory");
}
// `bytes` (a multiple of 16; src and dst 16-byte aligned) from global memory
// into shared memory, counted on barrier b, with an L2 cache policy.
__device__ __forceinline__ void copy(void* dst, const void* src, uint32_t bytes, uint64_t* b, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(b)), "l"(policy)
      : "memory");
}
// Orders this CTA's generic-proxy accesses of shared memory (barrier
// initialisation, reads of a stage) before later bulk copies into it.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// L2 evict-first: data read once must not push out what is read again.
__device__ __forceinline__ uint64_t evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}

}  // namespace bulk
}  // namespace cuda
}  // namespace tc
