// The blocked, packed GEMM shared by our own CPU kernels (i8 x i8 -> i32 on
// AVX2 / AVX-VNNI / AVX512-VNNI / AMX-INT8, bf16 and f16 -> f32 on AMX-BF16,
// f32 on AVX-512F / AVX2+FMA / plain C++ where no BLAS does it).
//
//   C = alpha * op(A) @ op(B) + beta * C,  A: M x K, B: K x N (after op)
//
// Plan (one matrix of a batch):
//   1. op(B) is packed once into panels of NR columns, each holding all of K
//      in the kernel's layout (padded with zeros to NR columns and to the
//      kernel's depth granule). Panels are packed in parallel.
//   2. The rows of C are cut into blocks of MC rows (and, when there are too
//      few blocks to feed every thread, the panels into column ranges). Each
//      work item packs its MC rows of op(A) into micro-panels of MR rows and
//      then, panel by panel, row micro-panel by row micro-panel, runs the
//      micro-kernel: an MR x NR tile of 32-bit accumulators, kept in
//      registers (or AMX tiles) over a chunk of KC depth steps, then stored
//      to a per-thread buffer and reloaded for the next chunk. Chunking keeps
//      the KC x NR slice of the panel in L1 while the MC / MR micro-panels of
//      A stream past it from L2 (without it the whole panel comes from L2 or
//      further for every micro-panel, and AMX runs at half speed).
//   3. After the last chunk the epilogue writes the valid part of each tile:
//        i32:   C = alpha * (tile + corr[j]) + beta * C   (wrapping int32)
//        f16/bf16: C = round(alpha * tile + beta * C)     (f32 arithmetic)
//        f32:   C = alpha * tile + beta * C               (f32 arithmetic)
//      beta == 0 never reads C. corr is a per-column correction a kernel may
//      attach to its B panels (the "+128" trick of the VNNI kernels).
// Packed A for one item stays in L2 while every panel of B streams past it.
// Accumulators stay 32-bit across chunks: f32 sums are never rounded to 16
// bits part-way, int32 sums are exact.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensorcore/gemm.h"

namespace tc {
namespace cpu {

// op(A) and op(B) as the packers read them, in elements:
//   op(A)(i, k) = a[i * a_rs + k * a_cs]      op(B)(k, j) = b[j * b_rs + k * b_cs]
// so "row r, depth k" addressing is the same for both operands.
struct Operands {
  const void* a;
  int64_t a_rs, a_cs;
  const void* b;
  int64_t b_rs, b_cs;
  int64_t M, N, K;
};

// A micro-kernel with its packers. The driver knows nothing of layouts.
struct KernelSet {
  const char* name;
  int mr, nr;  // tile: mr rows of A by nr columns of B
  int64_t kc;  // depth steps per chunk, a multiple of the packing granule
  int64_t (*depth)(int64_t K);         // packed depth for K (padding, f16 split)
  size_t (*a_bytes)(int64_t depth);    // one packed A micro-panel of mr rows
  size_t (*b_bytes)(int64_t depth);    // one packed B panel of nr columns, with corrections
  // Packs rows [i0, i0 + rows) of op(A), rows <= mr, zero-filling the rest.
  void (*pack_a)(const Operands& op, int64_t i0, int64_t rows, int64_t depth, void* out);
  // Packs columns [j0, j0 + cols) of op(B), cols <= nr, zero-filling the rest.
  void (*pack_b)(const Operands& op, int64_t j0, int64_t cols, int64_t depth, void* out);
  // tile[r * nr + c] (+)= the sum over depth steps [k0, k0 + kn) of packed
  // panels a and b (of the full depth), as int32 or f32; `accumulate` adds
  // to the tile's contents, else they are overwritten.
  void (*micro)(const void* a, const void* b, int64_t depth, int64_t k0, int64_t kn, void* tile, bool accumulate);
  // Byte offset of the nr int32 column corrections in a B panel; 0 = none.
  size_t (*corr_offset)(int64_t depth);
  // Called by each thread around its share of the work (AMX tile config).
  void (*begin)();
  void (*end)();
};

// Runs the plan above. C's element type is int32 for i8 and `c_dtype`
// (F16, BF16 or F32) for the f32-accumulating kernels.
void run_packed_gemm(const KernelSet& ks, const Operands& op, tc_dtype c_dtype, void* c, int64_t ldc, double alpha,
                     double beta);

// Operands of one matrix of d (normalised by capi): strides from the
// transposes and pitches.
Operands make_operands(const tc_gemm_desc& d, const void* a, const void* b);
Operands make_operands(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, const void* a,
                       int64_t lda, const void* b, int64_t ldb);

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Aligned scratch memory owned by the calling thread and kept between calls
// (allocating it afresh costs a page fault per 4 KiB, a tenth of a small
// GEMM), on transparent huge pages from 2 MiB. Scratch objects of one thread
// nest (destroyed in reverse order of construction); each of the first two
// levels has its own kept block. Allocation failure throws std::bad_alloc:
// take it before any work is handed to the thread pool.
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
  void* owned_ = nullptr;
};

// Kernel sets, each valid only where the processor has its ISA.
const KernelSet& i8_avx2_kernels();
const KernelSet& i8_avx_vnni_kernels();
const KernelSet& i8_avx512_kernels();
const KernelSet& i8_amx_kernels();
const KernelSet& bf16_amx_kernels();
const KernelSet& f16_amx_kernels();
const KernelSet& f32_avx512_kernels();
const KernelSet& f32_avx2_kernels();
const KernelSet& f32_plain_kernels();  // any x86-64

}  // namespace cpu
}  // namespace tc
