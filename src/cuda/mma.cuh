// Warp-level tensor-core products (mma.sync, sm_80 and later) shared by the
// kernels that use them. Fragment layouts (PTX ISA, m16n8k16, f16 inputs):
// lane = 4 g + t; A (16 x 16, row-major) regs (A[g][2t..2t+1], A[g+8][2t..],
// A[g][2t+8..], A[g+8][2t+8..]); B (16 x 8) regs (B[2t..2t+1][g],
// B[2t+8..2t+9][g]); C (16 x 8, f32) (C[g][2t], C[g][2t+1], C[g+8][2t],
// C[g+8][2t+1]); the lower-indexed element of a pair in the low 16 bits.
#pragma once

#include <cstdint>

namespace tc {
namespace cuda {

// c += A (16 x 16 f16) B (16 x 8 f16), f32 sums.
__device__ __forceinline__ void hmma_k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace cuda
}  // namespace tc
