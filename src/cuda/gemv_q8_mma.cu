// gemv_q8 for several rows of X (8 and more: a batch of sequences) on the
// tensor cores, in two forms (core/backend.h, GemvQ8Args):
//
// 8-bit X (int8 mma), the one-row kernels' contract (gemv_q8.cu): per
// block b of 32 weights (sub-block j of a K-quant superblock)
//   r[m][n] += s_b(W[n]) dx_b(X[m]) dot(q_b, xq_b) + c_b(W[n]) sx_b(X[m])
// with the block's dot product exact in int32 (mma.sync m16n8k32) and only
// the order of the float sums differing; Q6_K's groups of 16 take their own
// scales (m16n8k16): r[m][n] += d dx_b (sc_lo dot_lo + sc_hi dot_hi).
//
// f16 X (xh; f16 mma): r[m][n] = sum_k w[n][k] x[m][k], w dequantised to
// f16 in registers (one rounding of s (q - o) + c), f32 sums
// (mma.sync m16n8k16). No per-block epilogue: from a few dozen rows this
// costs about half as many instructions per weight as the 8-bit form,
// whose per-block conversion and scaling of every (row, X row) pair
// dominated its time on the H200.
//
// Why tensor cores: the one-row kernels decode each weight once per pass
// of up to 8 rows but multiply it with every row in __dp4a, so their time
// grows with the rows (on the H200 14336 x 4096 Q4_0 took 3.5x one row's
// time at 8 rows, 6.3x at 16; Q4_K 6.4x and 12.5x).
//
// Work split: a CTA (8 warps) takes BN = 64 or 32 rows of W (32 when 64
// would leave SMs idle) and MT rows of X (8, 16, 32 or 64), and walks K in
// stages of 256 weights (8 blocks, one K-quant superblock): cp.async moves
// the stage's raw W bytes (GGUF's layout, or the split one where the model
// keeps it: no copy is made for these kernels) and X (int8 and its (dx, sx),
// or f16) into shared memory, four stages in flight. Warp w takes W rows
// 16 (w % WN) .. + 15 of the CTA and the blocks j = w / WN, w / WN + WK, ...
// of each stage (WN x WK = 8); it unpacks the quants straight from shared
// memory into the A fragments (rows g and g + 8, bytes 4t .. 4t + 3 and
// 16 + 4t .. of the block, g = lane / 4, t = lane % 4) and reads X's B
// fragments the same way (row strides chosen so that neither load has bank
// conflicts). The block scales are decoded once a stage per warp. After the
// last stage the WK partial sums are added in a fixed order in shared
// memory and the epilogue writes Y with consecutive threads on consecutive
// n. Before waiting for the previous kernel (pdl.cuh) a CTA prefetches its
// W rows into L2 and starts the first stages' W copies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>

#include "core/config.h"
#include "cuda/device.h"
#include "cuda/gemv_q8_mma.h"
#include "cuda/mma.cuh"
#include "cuda/pdl.cuh"
#include "cuda/q8_block.cuh"
#include "quant/formats.h"

namespace tc {
namespace cuda {
namespace {

constexpr int kStageK = 256;              // weights of a row a stage
constexpr int kSubs = kStageK / 32;       // blocks of 32 a stage
constexpr int kStages = 4;                // stages in flight
constexpr int kThreads = 256;             // 8 warps
// An X row of a stage in shared memory: int8 values (+ 8 (dx, sx) apart),
// or f16 values. Strides of 4 mod 32 words (int8, 4-byte fragment loads)
// and 8 mod 32 (f16, 8-byte loads) keep the fragment loads conflict-free.
template <bool H>
struct XLayout {
  static constexpr int kRow = H ? 2 * kStageK : kStageK;  // bytes a stage
  static constexpr int kStride = kRow + (H ? 32 : 16);
  static constexpr int kScales = H ? 0 : kSubs * 8;       // (dx, sx) a row
};

__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// c += A (16 x 32, rows g / g + 8 in a0 a2 / a1 a3) B (32 x 8, column g in b0 b1).
__device__ __forceinline__ void mma_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c += A (16 x 16) B (16 x 8): Q6_K's groups of 16, each with its own scale.
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b));
}

// An int32 of magnitude below 2^22 (a block's dot product) as a float, by
// the 1.5 * 2^23 bias: two full-rate instructions instead of a conversion.
__device__ __forceinline__ float small_int_to_float(int c) {
  return __int_as_float(c + 0x4B400000) - 12582912.0f;
}

// Each format: kRowBytes of a W row a stage (at kStride in shared memory),
// kScaleBytes of f16 block scales a stage kept apart (the split layouts),
// scale(row, row_scales, d, j) -> (s, c) of block j, and frag(): the A
// fragment of block j from rows g (r0) and g + 8 (r1), lane t of the group.
// With kHalves the block is two groups of 16 (a0 a1 / a2 a3) and scale()
// returns their two scales.
// The low and the high nibbles of four bytes, as four bytes each.
__device__ __forceinline__ void nibbles(uint32_t w, uint32_t* lo, uint32_t* hi) {
  *lo = w & 0x0F0F0F0Fu, *hi = (w >> 4) & 0x0F0F0F0Fu;
}

struct MQ4_0 {
  static constexpr int kOffH = 8;
  static constexpr uint32_t kXorH = 0u;
  static constexpr bool kBiasH = false;  // split layout: 16 bytes of nibbles a block, d apart
  static constexpr int kRowBytes = 128, kStride = 144, kScaleBytes = 16;
  static constexpr bool kHalves = false, kMin = true, kGlobalD = false;
  // w = d (q - 8): the codes q as they are, c = -8 d.
  __device__ static float2 scale(const uint8_t*, const uint8_t* sc, float, int j) {
    const float d = half_at(sc + 2 * j);
    return make_float2(d, -8.0f * d);
  }
  // Byte i of a block: weight i (low nibble), weight i + 16 (high).
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    nibbles(lds32(r0 + 16 * j + 4 * t), &a[0], &a[2]);
    nibbles(lds32(r1 + 16 * j + 4 * t), &a[1], &a[3]);
  }
};

struct MQ8_0 {
  static constexpr int kOffH = 128;
  static constexpr uint32_t kXorH = 0x80808080u;
  static constexpr bool kBiasH = false;  // split layout: 32 int8 a block, d apart
  static constexpr int kRowBytes = 256, kStride = 272, kScaleBytes = 16;
  static constexpr bool kHalves = false, kMin = false, kGlobalD = false;
  __device__ static float2 scale(const uint8_t*, const uint8_t* sc, float, int j) {
    return make_float2(half_at(sc + 2 * j), 0.0f);
  }
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    a[0] = lds32(r0 + 32 * j + 4 * t), a[2] = lds32(r0 + 32 * j + 16 + 4 * t);
    a[1] = lds32(r1 + 32 * j + 4 * t), a[3] = lds32(r1 + 32 * j + 16 + 4 * t);
  }
};

// GGUF's Q4_0 and Q8_0 blocks (18 and 34 bytes: d, then the quants), 8 to a
// stage (144 and 272 bytes, 16-byte multiples), only 2-byte aligned inside.
__device__ __forceinline__ uint32_t lds32_a2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | uint32_t(h[1]) << 16;
}
struct MQ4_0G {
  static constexpr int kOffH = 8;
  static constexpr uint32_t kXorH = 0u;
  static constexpr bool kBiasH = false;
  static constexpr int kRowBytes = 144, kStride = 144, kScaleBytes = 0;
  static constexpr bool kHalves = false, kMin = true, kGlobalD = false;
  __device__ static float2 scale(const uint8_t* row, const uint8_t*, float, int j) {
    const float d = half_at(row + 18 * j);
    return make_float2(d, -8.0f * d);
  }
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    nibbles(lds32_a2(r0 + 18 * j + 2 + 4 * t), &a[0], &a[2]);
    nibbles(lds32_a2(r1 + 18 * j + 2 + 4 * t), &a[1], &a[3]);
  }
};
struct MQ8_0G {
  static constexpr int kOffH = 128;
  static constexpr uint32_t kXorH = 0x80808080u;
  static constexpr bool kBiasH = false;
  static constexpr int kRowBytes = 272, kStride = 272, kScaleBytes = 0;
  static constexpr bool kHalves = false, kMin = false, kGlobalD = false;
  __device__ static float2 scale(const uint8_t* row, const uint8_t*, float, int j) {
    return make_float2(half_at(row + 34 * j), 0.0f);
  }
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    const int o = 34 * j + 2 + 4 * t;
    a[0] = lds32_a2(r0 + o), a[2] = lds32_a2(r0 + o + 16);
    a[1] = lds32_a2(r1 + o), a[3] = lds32_a2(r1 + o + 16);
  }
};

// Q4_K superblock (GGUF, 144 bytes): d, dmin, 12 scale bytes, qs[128];
// block j = 2c + h: nibble h of qs[32c + l], l < 32; s = d sc_j, c = -dmin m_j.
struct MQ4_K {
  static constexpr int kOffH = 0;
  static constexpr uint32_t kXorH = 0u;
  static constexpr bool kBiasH = true;
  static constexpr int kRowBytes = 144, kStride = 144, kScaleBytes = 0;
  static constexpr bool kHalves = false, kMin = true, kGlobalD = false;
  __device__ static float2 scale(const uint8_t* row, const uint8_t*, float, int j) {
    uint8_t sc, m;
    quant::scale_min_k4(j, row + 4, &sc, &m);
    return make_float2(half_at(row) * float(sc), -half_at(row + 2) * float(m));
  }
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    const int o = 16 + 32 * (j >> 1) + 4 * t, s = 4 * (j & 1);
    a[0] = (lds32(r0 + o) >> s) & 0x0F0F0F0Fu, a[2] = (lds32(r0 + o + 16) >> s) & 0x0F0F0F0Fu;
    a[1] = (lds32(r1 + o) >> s) & 0x0F0F0F0Fu, a[3] = (lds32(r1 + o + 16) >> s) & 0x0F0F0F0Fu;
  }
};

// Q5_K (GGUF, 176 bytes): Q4_K's header, qh[32], qs[128]; weight l of block
// j also has bit j of qh[l] as its fifth bit.
struct MQ5_K {
  static constexpr int kOffH = 0;
  static constexpr uint32_t kXorH = 0u;
  static constexpr bool kBiasH = true;
  static constexpr int kRowBytes = 176, kStride = 176, kScaleBytes = 0;
  static constexpr bool kHalves = false, kMin = true, kGlobalD = false;
  __device__ static float2 scale(const uint8_t* row, const uint8_t* sc, float d, int j) {
    return MQ4_K::scale(row, sc, d, j);
  }
  __device__ static uint32_t q5(const uint8_t* r, int o, int l, int j) {
    return ((lds32(r + o) >> (4 * (j & 1))) & 0x0F0F0F0Fu) | ((lds32(r + 16 + l) >> j) & 0x01010101u) << 4;
  }
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    const int o = 48 + 32 * (j >> 1) + 4 * t;
    a[0] = q5(r0, o, 4 * t, j), a[2] = q5(r0, o + 16, 16 + 4 * t, j);
    a[1] = q5(r1, o, 4 * t, j), a[3] = q5(r1, o + 16, 16 + 4 * t, j);
  }
};

// Q6_K split layout (208 bytes: ql[128], qh[64], int8 scales[16]; d apart,
// read from global memory): block j = 4h + g of half h holds weights l < 32
// with nibble g / 2 of ql[64h + 32 (g % 2) + l], bits 2g of qh[32h + l] as
// bits 4-5, minus 32; its groups of 16 take scales[2j] and scales[2j + 1].
struct MQ6_K {
  static constexpr int kOffH = 128;
  static constexpr uint32_t kXorH = 0x80808080u;
  static constexpr bool kBiasH = false;
  static constexpr int kRowBytes = 208, kStride = 208, kScaleBytes = 0;
  static constexpr bool kHalves = true, kGlobalD = true;
  __device__ static float2 scale(const uint8_t* row, const uint8_t*, float d, int j) {
    return make_float2(d * float(int8_t(row[192 + 2 * j])), d * float(int8_t(row[193 + 2 * j])));
  }
  __device__ static uint32_t q6(const uint8_t* r, int h, int g, int l) {
    const uint32_t lo = (lds32(r + 64 * h + 32 * (g & 1) + l) >> (4 * (g >> 1))) & 0x0F0F0F0Fu;
    const uint32_t hi = ((lds32(r + 128 + 32 * h + l) >> (2 * g)) & 0x03030303u) << 4;
    // q - 32 as a signed byte: q ^ 32 with its bit 5 copied into bits 6-7.
    const uint32_t v = (lo | hi) ^ 0x20202020u;
    return v | (v & 0x20202020u) * 6u;
  }
  __device__ static void frag(const uint8_t* r0, const uint8_t* r1, int j, int t, uint32_t (&a)[4]) {
    const int h = j >> 2, g = j & 3;
    a[0] = q6(r0, h, g, 4 * t), a[2] = q6(r0, h, g, 16 + 4 * t);
    a[1] = q6(r1, h, g, 4 * t), a[3] = q6(r1, h, g, 16 + 4 * t);
  }
};

// The f16-X path: the fragment bytes of frag() (values q + kOffH after
// kXorH) as the f16 weights s (q - kOffH) + c of two m16n8k16 A fragments,
// k < 16 and k >= 16 of the block. The bytes of k = 4t .. 4t + 3 become
// the pairs (4t, 4t + 1) and (4t + 2, 4t + 3), which the fragments hold
// at k = 2t, 2t + 1 and 2t + 8, 2t + 9: X's B fragments are loaded in the
// same order, so the sum is the same. 0x64 above a byte is the f16 1024 + byte,
// and subtracting 1024 + kOffH is exact: one rounding, in s (q - kOffH) + c,
// as dequantising to f16 rounds once.
__device__ __forceinline__ __half2 as_h2(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }
__device__ __forceinline__ uint32_t as_u32(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
template <class F>
__device__ __forceinline__ void dequant_h(const uint32_t (&af)[4], float2 sg, float2 sg8, uint32_t (&ah)[2][4]) {
  const __half2 off = __float2half2_rn(-1024.0f - float(F::kOffH));
#pragma unroll
  for (int hf = 0; hf < 2; ++hf)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float2 sc = r ? sg8 : sg;
      const __half2 sh = __float2half2_rn(F::kHalves && hf ? sc.y : sc.x);
      const uint32_t w = af[2 * hf + r] ^ F::kXorH;
      const __half2 lo = __hadd2(as_h2(__byte_perm(w, 0x64646464u, 0x4140)), off);
      const __half2 hi = __hadd2(as_h2(__byte_perm(w, 0x64646464u, 0x4342)), off);
      if constexpr (F::kBiasH) {
        const __half2 ch = __float2half2_rn(sc.y);
        ah[hf][r] = as_u32(__hfma2(lo, sh, ch)), ah[hf][r + 2] = as_u32(__hfma2(hi, sh, ch));
      } else {
        ah[hf][r] = as_u32(__hmul2(lo, sh)), ah[hf][r + 2] = as_u32(__hmul2(hi, sh));
      }
    }
}

// Shared memory of a CTA: kStages stages of [W rows][W scales][X rows][X's
// (dx, sx)], then each warp's block scales for the stage.
template <class F, bool H>
__host__ __device__ constexpr int stage_bytes(int BN, int MT) {
  return BN * F::kStride + BN * F::kScaleBytes + MT * (XLayout<H>::kStride + XLayout<H>::kScales);
}
template <class F, bool H>
__host__ __device__ constexpr int smem_bytes(int BN, int MT) {
  return kStages * stage_bytes<F, H>(BN, MT) + (kThreads / 32) * 16 * kSubs * 8;
}

struct MmaArgs {
  const uint8_t* w;   // quants (split layouts) or GGUF superblocks
  const uint8_t* wd;  // the split layouts' f16 scales, bytes
  int64_t N, K, M;
  const int8_t* xq;
  const float2* xd;
  const uint16_t* xh;  // f16 X instead of xq / xd
  void* y;
  int epilogue;  // GemvQ8Args::Epilogue
  int ytype;     // 0 f32, 1 f16, 2 bf16
};

template <class F>
__device__ __forceinline__ int64_t row_bytes(int64_t K) {
  return K / kStageK * F::kRowBytes;
}

// W row of the CTA's local row r (SwiGLU: gate rows, then their up rows), or -1.
__device__ __forceinline__ int64_t w_row(const MmaArgs& a, int BN, int64_t rb, int r) {
  if (GemvQ8Args::gated(a.epilogue)) {
    const int64_t half = a.N / 2, n = rb * (BN / 2) + (r % (BN / 2));
    return n < half ? n + (r >= BN / 2 ? half : 0) : -1;
  }
  const int64_t n = rb * BN + r;
  return n < a.N ? n : -1;
}

// A thread's share of a stage's copies (the same chunks every stage, so
// their addresses are worked out once): W's 16-byte chunks, the split
// layouts' scales, X's chunks and its (dx, sx); each moves by its stride a
// stage. Chunks past N or M are zero-filled.
template <int C>
struct Copies {
  const uint8_t* src[C];
  int dst[C];
  bool ok[C];
};

template <class F, int BN, int MT, bool H>
struct StagePlan {
  using XL = XLayout<H>;
  static constexpr int kWChunks = BN * (F::kRowBytes / 16) + (F::kScaleBytes ? BN : 0);
  static constexpr int kXChunks = MT * (XL::kRow / 16) + MT * (XL::kScales / 16);
  static constexpr int kW = (kWChunks + kThreads - 1) / kThreads, kX = (kXChunks + kThreads - 1) / kThreads;
  Copies<kW> w;
  Copies<kX> x;

  __device__ void plan(const MmaArgs& a, int64_t rb, int64_t m0) {
    constexpr int kChunks = F::kRowBytes / 16;
    const int64_t rbytes = row_bytes<F>(a.K);
#pragma unroll
    for (int c = 0; c < kW; ++c) {
      const int i = threadIdx.x + kThreads * c;
      w.dst[c] = -1, w.ok[c] = false, w.src[c] = a.w;
      if (i < BN * kChunks) {
        const int r = i / kChunks, ch = i % kChunks;
        const int64_t n = w_row(a, BN, rb, r);
        w.dst[c] = r * F::kStride + 16 * ch, w.ok[c] = n >= 0;
        if (n >= 0) w.src[c] = a.w + n * rbytes + 16 * ch;
      } else if (i < kWChunks) {  // the split layout's 8 scales of row r
        const int r = i - BN * kChunks;
        const int64_t n = w_row(a, BN, rb, r);
        w.dst[c] = BN * F::kStride + r * F::kScaleBytes, w.ok[c] = n >= 0;
        w.src[c] = a.wd;
        if (n >= 0) w.src[c] = a.wd + n * (a.K / 32) * 2;
      }
    }
    const uint8_t* xq = H ? reinterpret_cast<const uint8_t*>(a.xh) : reinterpret_cast<const uint8_t*>(a.xq);
    const uint8_t* xd = reinterpret_cast<const uint8_t*>(a.xd);
    const int xbase = BN * F::kStride + BN * F::kScaleBytes;
    constexpr int kRowChunks = XL::kRow / 16;
#pragma unroll
    for (int c = 0; c < kX; ++c) {
      const int i = threadIdx.x + kThreads * c;
      x.dst[c] = -1, x.ok[c] = false, x.src[c] = xq;
      if (i < MT * kRowChunks) {
        const int m = i / kRowChunks, ch = i % kRowChunks;
        x.dst[c] = xbase + m * XL::kStride + 16 * ch, x.ok[c] = m0 + m < a.M;
        if (x.ok[c]) x.src[c] = xq + (m0 + m) * a.K * (H ? 2 : 1) + 16 * ch;
      } else if (i < kXChunks) {  // 8 (dx, sx) = 64 bytes a row
        const int j = i - MT * kRowChunks, m = j / 4, ch = j % 4;
        x.dst[c] = xbase + MT * XL::kStride + m * 64 + 16 * ch, x.ok[c] = m0 + m < a.M;
        x.src[c] = xd;
        if (x.ok[c]) x.src[c] = xd + (m0 + m) * (a.K / 32) * 8 + 16 * ch;
      }
    }
  }
  // Stage kc's W (and, below, X) bytes: W moves kRowBytes a stage (its
  // scales 16), X 256 bytes (its (dx, sx) 64).
  __device__ __forceinline__ void issue_w(uint8_t* stage, int64_t kc) const {
#pragma unroll
    for (int c = 0; c < kW; ++c) {
      if (w.dst[c] < 0) continue;
      const int64_t step = w.dst[c] >= BN * F::kStride ? kc * F::kScaleBytes : kc * F::kRowBytes;
      cp_async16(stage + w.dst[c], w.ok[c] ? w.src[c] + step : w.src[c], w.ok[c]);
    }
  }
  __device__ __forceinline__ void issue_x(uint8_t* stage, int64_t kc) const {
    const int dbase = BN * F::kStride + BN * F::kScaleBytes + MT * XL::kStride;
#pragma unroll
    for (int c = 0; c < kX; ++c) {
      if (x.dst[c] < 0) continue;
      const int64_t step = x.dst[c] >= dbase ? kc * kSubs * 8 : kc * XL::kRow;
      cp_async16(stage + x.dst[c], x.ok[c] ? x.src[c] + step : x.src[c], x.ok[c]);
    }
  }
};

template <class F, int BN, int MT, int WN, bool H>
__global__ void __launch_bounds__(kThreads, 2) gemv_q8_mma(MmaArgs a) {
  constexpr int WK = (kThreads / 32) / WN, NT = MT / 8, JW = kSubs / WK;
  static_assert(BN == 16 * WN, "a warp takes 16 rows of W");
  extern __shared__ __align__(16) uint8_t smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int rt = warp % WN, ks = warp / WN;
  const int64_t mtiles = (a.M + MT - 1) / MT, rb = blockIdx.x / mtiles, m0 = (blockIdx.x % mtiles) * MT;
  const int64_t nk = a.K / kStageK;
  constexpr int SB = stage_bytes<F, H>(BN, MT);
  using XL = XLayout<H>;
  float2* scl = reinterpret_cast<float2*>(smem + kStages * SB) + warp * 16 * kSubs;

  pdl_trigger();
  // W depends on no earlier kernel: its rows go to L2 and its first stages
  // start moving before the wait (the first M tile's CTA only).
  if (m0 == 0) {
    const int64_t rbytes = row_bytes<F>(a.K);
    for (int r = warp; r < BN; r += kThreads / 32) {
      const int64_t n = w_row(a, BN, rb, r);
      if (n < 0) continue;
      prefetch_l2(a.w + n * rbytes, rbytes, lane);
      if (F::kScaleBytes) prefetch_l2(a.wd + n * (a.K / 32) * 2, a.K / 16, lane);
    }
  }
  StagePlan<F, BN, MT, H> plan;
  plan.plan(a, rb, m0);
  for (int s = 0; s < kStages - 1; ++s)
    if (s < nk) plan.issue_w(smem + s * SB, s);
  pdl_wait();
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) plan.issue_x(smem + s * SB, s);
    cp_async_commit();
  }

  float acc[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  for (int64_t kc = 0; kc < nk; ++kc) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kc has landed; stage kc - 1's buffer is free
    {
      const int64_t next = kc + kStages - 1;
      uint8_t* nb = smem + (next % kStages) * SB;
      if (next < nk) plan.issue_w(nb, next), plan.issue_x(nb, next);
      cp_async_commit();
    }
    const uint8_t* st = smem + (kc % kStages) * SB;
    const uint8_t* ws = st + 16 * rt * F::kStride;
    const uint8_t* wsc = st + BN * F::kStride + 16 * rt * F::kScaleBytes;
    const uint8_t* xs = st + BN * F::kStride + BN * F::kScaleBytes;
    const float2* xds = reinterpret_cast<const float2*>(xs + MT * XL::kStride);

    // This warp's block scales of the stage: 16 rows x JW blocks.
    __syncwarp();
    for (int e = lane; e < 16 * JW; e += 32) {
      const int r = e / JW, i = e % JW, j = ks + WK * i;
      float d = 0.0f;
      if constexpr (F::kGlobalD) {
        const int64_t n = w_row(a, BN, rb, 16 * rt + r);
        if (n >= 0) d = __half2float(__ushort_as_half(reinterpret_cast<const uint16_t*>(a.wd)[n * nk + kc]));
      }
      scl[r * kSubs + i] = F::scale(ws + r * F::kStride, wsc + r * F::kScaleBytes, d, j);
    }
    __syncwarp();

    const uint8_t* r0 = ws + g * F::kStride;
    const uint8_t* r1 = ws + (g + 8) * F::kStride;
    if constexpr (H) {
#pragma unroll
      for (int i = 0; i < JW; ++i) {
        const int j = ks + WK * i;
        uint32_t af[4], ah[2][4];
        F::frag(r0, r1, j, t, af);
        dequant_h<F>(af, scl[g * kSubs + i], scl[(g + 8) * kSubs + i], ah);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint8_t* xr = xs + (8 * nt + g) * XL::kStride + 64 * j + 8 * t;
          const uint2 b0 = *reinterpret_cast<const uint2*>(xr), b1 = *reinterpret_cast<const uint2*>(xr + 32);
          hmma_k16(acc[nt], ah[0], b0.x, b0.y);
          hmma_k16(acc[nt], ah[1], b1.x, b1.y);
        }
      }
    } else {
#pragma unroll
    for (int i = 0; i < JW; ++i) {
      const int j = ks + WK * i;
      uint32_t af[4];
      F::frag(r0, r1, j, t, af);
      const float2 s0 = scl[g * kSubs + i], s1 = scl[(g + 8) * kSubs + i];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint8_t* xr = xs + (8 * nt + g) * XL::kStride + 32 * j;
        const uint32_t b0 = lds32(xr + 4 * t), b1 = lds32(xr + 16 + 4 * t);
        const float2 x0 = xds[(8 * nt + 2 * t) * kSubs + j], x1 = xds[(8 * nt + 2 * t + 1) * kSubs + j];
        if constexpr (F::kHalves) {
          int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
          mma_k16(lo, af[0], af[1], b0);
          mma_k16(hi, af[2], af[3], b1);
          acc[nt][0] += x0.x * fmaf(s0.x, small_int_to_float(lo[0]), s0.y * small_int_to_float(hi[0]));
          acc[nt][1] += x1.x * fmaf(s0.x, small_int_to_float(lo[1]), s0.y * small_int_to_float(hi[1]));
          acc[nt][2] += x0.x * fmaf(s1.x, small_int_to_float(lo[2]), s1.y * small_int_to_float(hi[2]));
          acc[nt][3] += x1.x * fmaf(s1.x, small_int_to_float(lo[3]), s1.y * small_int_to_float(hi[3]));
        } else {
          int c[4] = {0, 0, 0, 0};
          mma_k32(c, af, b0, b1);
          acc[nt][0] = fmaf(s0.x * x0.x, small_int_to_float(c[0]), acc[nt][0]);
          acc[nt][1] = fmaf(s0.x * x1.x, small_int_to_float(c[1]), acc[nt][1]);
          acc[nt][2] = fmaf(s1.x * x0.x, small_int_to_float(c[2]), acc[nt][2]);
          acc[nt][3] = fmaf(s1.x * x1.x, small_int_to_float(c[3]), acc[nt][3]);
          if constexpr (F::kMin) {
            acc[nt][0] = fmaf(s0.y, x0.y, acc[nt][0]), acc[nt][1] = fmaf(s0.y, x1.y, acc[nt][1]);
            acc[nt][2] = fmaf(s1.y, x0.y, acc[nt][2]), acc[nt][3] = fmaf(s1.y, x1.y, acc[nt][3]);
          }
        }
      }
    }
    }
  }

  // The WK partial sums, in order, into out[BN][MT] (over the stages' buffers).
  cp_async_wait<0>();
  __syncthreads();
  constexpr int LDO = MT + 4;
  float* out = reinterpret_cast<float*>(smem);
  for (int k = 0; k < WK; ++k) {
    if (ks == k) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          float* o = out + (16 * rt + g + 8 * (v >> 1)) * LDO + 8 * nt + 2 * t + (v & 1);
          *o = k == 0 ? acc[nt][v] : *o + acc[nt][v];
        }
    }
    __syncthreads();
  }

  const bool gated = GemvQ8Args::gated(a.epilogue);
  const int cols = gated ? BN / 2 : BN;
  const int64_t rows = gated ? a.N / 2 : a.N;
  for (int i = threadIdx.x; i < MT * cols; i += kThreads) {
    const int m = i / cols, r = i % cols;
    const int64_t n = rb * cols + r;
    if (m0 + m >= a.M || n >= rows) continue;
    float v = out[r * LDO + m];
    if (gated) v = gate::glu(a.epilogue == GemvQ8Args::kGeglu, v, out[(r + BN / 2) * LDO + m]);
    const int64_t at = (m0 + m) * rows + n;
    if (a.ytype == 1) q8act::store(static_cast<__half*>(a.y) + at, v);
    else if (a.ytype == 2) q8act::store(static_cast<__nv_bfloat16*>(a.y) + at, v);
    else if (a.epilogue == GemvQ8Args::kAdd) static_cast<float*>(a.y)[at] += v;
    else static_cast<float*>(a.y)[at] = v;
  }
}

// Opts kernel <F, BN, MT, H> into more than 48 KB of dynamic shared memory,
// once a device.
template <class F, int BN, int MT, bool H>
cudaError_t allow_smem(void (*kernel)(MmaArgs), int bytes) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev)) return e;
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)) return e;
  done.fetch_or(bit, std::memory_order_acq_rel);
  return cudaSuccess;
}

template <class F, int BN, int MT, bool H>
cudaError_t launch_bn(const MmaArgs& a, cudaStream_t st) {
  constexpr int WN = BN / 16;
  const int64_t cols = GemvQ8Args::gated(a.epilogue) ? BN / 2 : BN;
  const int64_t rows = GemvQ8Args::gated(a.epilogue) ? a.N / 2 : a.N;
  const int64_t grid = (rows + cols - 1) / cols * ((a.M + MT - 1) / MT);
  if (grid == 0) return cudaSuccess;
  constexpr int smem = smem_bytes<F, H>(BN, MT);
  if (cudaError_t e = allow_smem<F, BN, MT, H>(gemv_q8_mma<F, BN, MT, WN, H>, smem)) return e;
  return launch_pdl(gemv_q8_mma<F, BN, MT, WN, H>, dim3(unsigned(grid)), dim3(kThreads), smem, st, a);
}

// 64 rows of W a CTA unless that leaves SMs idle, then 32.
template <class F, int MT, bool H>
cudaError_t launch_mt(const MmaArgs& a, cudaStream_t st) {
  const int64_t rows = GemvQ8Args::gated(a.epilogue) ? a.N / 2 : a.N;
  const int64_t per64 = GemvQ8Args::gated(a.epilogue) ? 32 : 64;
  const int64_t ctas64 = (rows + per64 - 1) / per64 * ((a.M + MT - 1) / MT);
  if (ctas64 >= sm_count()) return launch_bn<F, 64, MT, H>(a, st);
  return launch_bn<F, 32, MT, H>(a, st);
}

template <class F, bool H>
cudaError_t launch_h(const MmaArgs& a, cudaStream_t st) {
  if (a.M <= 8) return launch_mt<F, 8, H>(a, st);
  if (a.M <= 16) return launch_mt<F, 16, H>(a, st);
  if (a.M <= 32) return launch_mt<F, 32, H>(a, st);
  return launch_mt<F, 64, H>(a, st);
}
template <class F>
cudaError_t launch_f(const MmaArgs& a, cudaStream_t st) {
  return a.xh ? launch_h<F, true>(a, st) : launch_h<F, false>(a, st);
}

}  // namespace

bool gemv_q8_mma_fits(const GemvQ8Args& a, bool any_rows) {
  const int64_t min_rows = config::number(config::Key::kCudaQ8MmaRows);
  if (!any_rows && (min_rows <= 0 || a.M < min_rows)) return false;
  if (a.K % kStageK != 0) return false;
  const bool split = a.wd != nullptr;
  switch (a.fmt) {
    case quant::Q4_0:
    case quant::Q8_0:
      // The split layout's scales move 16 bytes a stage.
      if (split && reinterpret_cast<uintptr_t>(a.wd) % 16 != 0) return false;
      break;
    case quant::Q4_K:
    case quant::Q5_K:
      if (split) return false;
      break;
    case quant::Q6_K:
      if (!split) return false;
      break;
    default:
      return false;
  }
  if (a.xh) return reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && reinterpret_cast<uintptr_t>(a.xh) % 16 == 0;
  return reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && reinterpret_cast<uintptr_t>(a.xq) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(a.xd) % 16 == 0;
}

cudaError_t launch_gemv_q8_mma(const GemvQ8Args& a, void* y, tc_dtype ytype, cudaStream_t st) {
  MmaArgs m;
  m.w = static_cast<const uint8_t*>(a.w);
  m.wd = reinterpret_cast<const uint8_t*>(a.wd);
  m.N = a.N, m.K = a.K, m.M = a.M;
  m.xq = a.xq;
  m.xd = reinterpret_cast<const float2*>(a.xd);
  m.xh = a.xh;
  m.y = y;
  m.epilogue = a.epilogue;
  m.ytype = ytype == TC_DTYPE_F16 ? 1 : ytype == TC_DTYPE_BF16 ? 2 : 0;
  switch (a.fmt) {
    case quant::Q4_0: return a.wd ? launch_f<MQ4_0>(m, st) : launch_f<MQ4_0G>(m, st);
    case quant::Q8_0: return a.wd ? launch_f<MQ8_0>(m, st) : launch_f<MQ8_0G>(m, st);
    case quant::Q4_K: return launch_f<MQ4_K>(m, st);
    case quant::Q5_K: return launch_f<MQ5_K>(m, st);
    default: return launch_f<MQ6_K>(m, st);
  }
}

}  // namespace cuda
}  // namespace tc
