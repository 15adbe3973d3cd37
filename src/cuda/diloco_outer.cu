// DiLoCo's outer step on the GPU: the ops of core/backend.h ("DiLoCo"). The
// CPU kernels are src/cpu/diloco_outer.cpp, and the host path
// (src/dist/diloco_outer.cpp) is what both reproduce bit for bit: every
// product, sum, quotient and square root is an explicitly rounded intrinsic
// (__fmul_rn, __fadd_rn, ...), which nvcc never contracts into a fused
// multiply-add, in the host code's order of operations. n ranks:
//
//   prepare  Delta = anchor - f32(theta), then
//              kDelta          out = Delta
//              kFp16           s = (Delta + e) * (1/n); q = f16(s); out = (s - f32(q)) * n
//              kErrorFeedback  out = Delta + e
//   update   SGD       a = a - lr g
//            NESTEROV  v = mu v + g;  a = a - lr (g + mu v)
//            ADAM      m = mu m + (1-mu) g;  v = b2 v + ((1-b2) g) g;
//                      a = a - (lr m/bc1) / (sqrt(v/bc2) + eps)
//            then theta = narrow(a) (round to nearest even)
//   commit   theta = narrow(a + (f32(theta) - theta_at_launch))
//   combine  g = 0; then one launch per rank, in rank order: g[i] += v (1/n)
//            for each of the rank's pairs (i, v). A rank names an index at
//            most once, so a launch has no two threads on one element, and
//            every element adds the ranks' values in rank order, as the host.
//
//   topk     the k largest |u_i|, ties to the lower index: the magnitude's
//            float bits (sign cleared) order as unsigned integers order the
//            magnitudes, so the k-th largest key T is found by radix select,
//            most significant byte first: four passes, each a 256-bin
//            histogram of the next byte among the keys that match the
//            prefix found so far, then one thread walks the bins from the
//            top until they hold the `remaining` keys still wanted (the
//            bins above are taken whole). After the fourth pass T is known
//            and `remaining` = how many keys equal to T are taken: the
//            first ones in index order, since ties go to the lower index.
//            The chosen set is then {key > T} plus those, and a stable
//            compaction writes it in index order:
//              tiles of 4096 elements (256 threads x 16 consecutive ones);
//              per tile the counts (gt, eq) of keys > T and == T, packed in
//              one 64-bit word (each count < 2^32) so one scan carries both;
//              an exclusive scan over the tiles; then per thread, in index
//              order, an element with gt_before keys > T and eq_before keys
//              == T before it is chosen when key > T, or key == T and
//              eq_before < remaining, and lands at
//                pos = gt_before + min(eq_before, remaining)
//              as the pair (i, u_i); u_i is zeroed (u becomes the residual).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/error.h"
#include "cuda/device.h"
#include "cuda/rows.cuh"
#include "tensorcore/diloco.h"

namespace tc {
namespace cuda {

namespace {

#define GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)


// Runs the statement with T the element type of theta's dtype.
#define WITH_THETA_TYPE(dtype, ...)       \
  do {                                    \
    if ((dtype) == TC_DTYPE_F32) {        \
      using T = float;                    \
      __VA_ARGS__;                        \
    } else if ((dtype) == TC_DTYPE_F16) { \
      using T = __half;                   \
      __VA_ARGS__;                        \
    } else {                              \
      using T = __nv_bfloat16;            \
      __VA_ARGS__;                        \
    }                                     \
  } while (0)

// ---- prepare ------------------------------------------------------------------

template <class T>
__global__ void prepare_kernel(int64_t n, int mode, float inv, float world, const T* theta, const float* anchor,
                               const float* residual, float* out, __half* q) {
  GRID_STRIDE(i, n) {
    const float delta = __fsub_rn(anchor[i], to_f(theta[i]));
    if (mode == DilocoPrepareArgs::kDelta) {
      out[i] = delta;
    } else if (mode == DilocoPrepareArgs::kFp16) {
      const float s = __fmul_rn(__fadd_rn(delta, residual[i]), inv);
      const __half h = __float2half_rn(s);
      q[i] = h;
      out[i] = __fmul_rn(__fsub_rn(s, __half2float(h)), world);
    } else {
      out[i] = __fadd_rn(delta, residual[i]);
    }
  }
}

// ---- update and commit ----------------------------------------------------------

struct UpdateParams {
  int optimizer;
  float lr, mu, one_minus_mu, beta2, one_minus_beta2, eps, bc1, bc2;
};

template <class T>
__global__ void update_kernel(int64_t n, UpdateParams p, const float* g, float* a, float* m1, float* m2, T* theta) {
  GRID_STRIDE(i, n) {
    const float gi = g[i];
    float x = a[i];
    if (p.optimizer == TC_DILOCO_OUTER_SGD) {
      x = __fsub_rn(x, __fmul_rn(p.lr, gi));
    } else if (p.optimizer == TC_DILOCO_OUTER_NESTEROV) {
      const float v = __fadd_rn(__fmul_rn(p.mu, m1[i]), gi);
      m1[i] = v;
      x = __fsub_rn(x, __fmul_rn(p.lr, __fadd_rn(gi, __fmul_rn(p.mu, v))));
    } else {
      const float m = __fadd_rn(__fmul_rn(p.mu, m1[i]), __fmul_rn(p.one_minus_mu, gi));
      const float v = __fadd_rn(__fmul_rn(p.beta2, m2[i]), __fmul_rn(__fmul_rn(p.one_minus_beta2, gi), gi));
      m1[i] = m;
      m2[i] = v;
      const float mh = p.bc1 > 0 ? __fdiv_rn(m, p.bc1) : m;
      const float vh = p.bc2 > 0 ? __fdiv_rn(v, p.bc2) : v;
      x = __fsub_rn(x, __fdiv_rn(__fmul_rn(p.lr, mh), __fadd_rn(__fsqrt_rn(vh), p.eps)));
    }
    a[i] = x;
    if (theta) theta[i] = from_f<T>(x);
  }
}

template <class T>
__global__ void commit_kernel(int64_t n, T* theta, const float* anchor, const float* at_launch) {
  GRID_STRIDE(i, n) theta[i] = from_f<T>(__fadd_rn(anchor[i], __fsub_rn(to_f(theta[i]), at_launch[i])));
}

// ---- combine ---------------------------------------------------------------------

__global__ void combine_rank_kernel(int64_t n, int64_t k, const float* pairs, float inv, float* g) {
  GRID_STRIDE(j, k) {
    const uint32_t i = __float_as_uint(pairs[2 * j]);
    if (int64_t(i) < n) g[i] = __fadd_rn(g[i], __fmul_rn(pairs[2 * j + 1], inv));
  }
}

// ---- top-k -------------------------------------------------------------------------

constexpr int kThreads = 256, kItems = 16;
constexpr int64_t kTile = int64_t(kThreads) * kItems;
typedef unsigned long long u64;

// The radix select's progress, in device memory between the passes.
struct Select {
  uint32_t prefix;     // the bytes of T found so far
  uint32_t remaining;  // keys still wanted among those matching the prefix
};

__device__ __forceinline__ uint32_t magnitude_key(float v) { return __float_as_uint(v) & 0x7fffffffu; }

// Exclusive prefix sum of v over the block (blockDim.x threads, sh as many
// words); *total the block's sum. Every thread of the block calls it.
__device__ u64 block_exclusive_scan(u64 v, u64* sh, u64* total) {
  const int t = threadIdx.x, nt = blockDim.x;
  sh[t] = v;
  __syncthreads();
  for (int off = 1; off < nt; off <<= 1) {
    const u64 add = t >= off ? sh[t - off] : 0;
    __syncthreads();
    sh[t] += add;
    __syncthreads();
  }
  *total = sh[nt - 1];
  const u64 inclusive = sh[t];
  __syncthreads();  // sh may be written again on return
  return inclusive - v;
}

__global__ void select_init_kernel(Select* sel, uint32_t* hist, uint32_t k) {
  hist[threadIdx.x] = 0;
  if (threadIdx.x == 0) *sel = Select{0u, k};
}

// 256 threads: the histogram of byte (key >> shift) among the keys whose
// bytes above it are the prefix's.
__global__ void digit_histogram_kernel(int64_t n, const float* u, const Select* sel, int shift, uint32_t* hist) {
  __shared__ uint32_t sh[256];
  sh[threadIdx.x] = 0;
  __syncthreads();
  const uint32_t above = shift == 24 ? 0u : ~0u << (shift + 8);
  const uint32_t prefix = sel->prefix;
  GRID_STRIDE(i, n) {
    const uint32_t key = magnitude_key(u[i]);
    if (((key ^ prefix) & above) == 0) atomicAdd(&sh[(key >> shift) & 255u], 1u);
  }
  __syncthreads();
  if (sh[threadIdx.x]) atomicAdd(&hist[threadIdx.x], sh[threadIdx.x]);
}

// One thread: the byte at `shift` of T, and the histogram cleared for the next pass.
__global__ void choose_digit_kernel(Select* sel, uint32_t* hist, int shift) {
  uint32_t remaining = sel->remaining;
  for (int d = 255; d >= 0; --d) {
    const uint32_t c = hist[d];
    if (c >= remaining) {
      sel->prefix |= uint32_t(d) << shift;
      break;
    }
    remaining -= c;
  }
  sel->remaining = remaining;
  for (int d = 0; d < 256; ++d) hist[d] = 0;
}

// Per tile: (keys > T) << 32 | (keys == T).
__global__ void tile_counts_kernel(int64_t n, const float* u, const Select* sel, u64* counts) {
  __shared__ u64 sh[kThreads];
  const uint32_t T = sel->prefix;
  const int64_t base = blockIdx.x * kTile;
  u64 c = 0;
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = base + j * kThreads + threadIdx.x;  // coalesced: only the counts matter here
    if (i < n) {
      const uint32_t key = magnitude_key(u[i]);
      c += key > T ? (u64(1) << 32) : key == T ? 1u : 0u;
    }
  }
  u64 total;
  block_exclusive_scan(c, sh, &total);
  if (threadIdx.x == 0) counts[blockIdx.x] = total;
}

// One block of 1024: the tiles' counts become their exclusive prefix sums.
__global__ void scan_tiles_kernel(int64_t tiles, u64* counts) {
  __shared__ u64 sh[1024];
  u64 carry = 0;
  for (int64_t first = 0; first < tiles; first += blockDim.x) {
    const int64_t i = first + threadIdx.x;
    const u64 v = i < tiles ? counts[i] : 0;
    u64 total;
    const u64 before = block_exclusive_scan(v, sh, &total);
    if (i < tiles) counts[i] = carry + before;
    carry += total;
  }
}

__global__ void emit_pairs_kernel(int64_t n, float* u, const Select* sel, const u64* tile_before, float* pairs) {
  __shared__ u64 sh[kThreads];
  const uint32_t T = sel->prefix, take_eq = sel->remaining;
  const int64_t base = blockIdx.x * kTile + int64_t(threadIdx.x) * kItems;  // 16 consecutive elements
  u64 c = 0;
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = base + j;
    if (i < n) {
      const uint32_t key = magnitude_key(u[i]);
      c += key > T ? (u64(1) << 32) : key == T ? 1u : 0u;
    }
  }
  u64 total;
  const u64 before = tile_before[blockIdx.x] + block_exclusive_scan(c, sh, &total);
  uint32_t gt_before = uint32_t(before >> 32), eq_before = uint32_t(before);
  for (int j = 0; j < kItems; ++j) {
    const int64_t i = base + j;
    if (i >= n) break;
    const float v = u[i];
    const uint32_t key = magnitude_key(v);
    const bool gt = key > T, eq = key == T;
    if (gt || (eq && eq_before < take_eq)) {
      const uint32_t pos = gt_before + min(eq_before, take_eq);
      pairs[2 * int64_t(pos)] = __uint_as_float(uint32_t(i));
      pairs[2 * int64_t(pos) + 1] = v;
      u[i] = 0.0f;
    }
    gt_before += gt;
    eq_before += eq;
  }
}

}  // namespace

tc_status diloco_prepare(Device&, StreamState* s, const DilocoPrepareArgs& a) {
  s->last_kernel = "diloco_prepare";
  WITH_THETA_TYPE(a.dtype, prepare_kernel<<<blocks_for(a.n, 256), 256, 0, s->stream>>>(
                               a.n, int(a.mode), 1.0f / float(a.world), float(a.world), static_cast<const T*>(a.theta),
                               a.anchor, a.residual, a.out, reinterpret_cast<__half*>(a.q)));
  return check(cudaGetLastError(), "diloco_prepare: launch");
}

tc_status diloco_update(Device&, StreamState* s, const DilocoUpdateArgs& a) {
  s->last_kernel = "diloco_update";
  const UpdateParams p{a.optimizer, a.lr, a.mu, 1.0f - a.mu, a.beta2, 1.0f - a.beta2, a.eps, a.bc1, a.bc2};
  WITH_THETA_TYPE(a.dtype, update_kernel<<<blocks_for(a.n, 256), 256, 0, s->stream>>>(a.n, p, a.g, a.anchor, a.m1, a.m2,
                                                                                      static_cast<T*>(a.theta)));
  return check(cudaGetLastError(), "diloco_update: launch");
}

tc_status diloco_commit(Device&, StreamState* s, const DilocoCommitArgs& a) {
  s->last_kernel = "diloco_commit";
  WITH_THETA_TYPE(a.dtype, commit_kernel<<<blocks_for(a.n, 256), 256, 0, s->stream>>>(a.n, static_cast<T*>(a.theta),
                                                                                      a.anchor, a.theta_at_launch));
  return check(cudaGetLastError(), "diloco_commit: launch");
}

tc_status diloco_combine(Device&, StreamState* s, const DilocoCombineArgs& a) {
  s->last_kernel = "diloco_combine";
  if (tc_status st = check(cudaMemsetAsync(a.g, 0, size_t(a.n) * 4, s->stream), "diloco_combine: clear g")) return st;
  const float inv = 1.0f / float(a.world);
  for (int32_t r = 0; r < a.world; ++r) {
    combine_rank_kernel<<<blocks_for(a.k, 256), 256, 0, s->stream>>>(a.n, a.k, a.pairs + size_t(r) * 2 * size_t(a.k),
                                                                     inv, a.g);
    if (tc_status st = check(cudaGetLastError(), "diloco_combine: launch")) return st;
  }
  return TC_OK;
}

tc_status diloco_topk(Device& dev, StreamState* s, const DilocoTopkArgs& a) {
  s->last_kernel = "diloco_topk";
  const int64_t tiles = (a.n + kTile - 1) / kTile;
  void* scratch = nullptr;
  if (tc_status st = stream_scratch(s, 16 + 256 * 4 + size_t(tiles) * 8, "diloco_topk: scratch", &scratch)) return st;
  Select* sel = static_cast<Select*>(scratch);
  uint32_t* hist = reinterpret_cast<uint32_t*>(static_cast<char*>(scratch) + 16);
  u64* counts = reinterpret_cast<u64*>(static_cast<char*>(scratch) + 16 + 256 * 4);
  const unsigned hist_grid = unsigned(
      std::max<int64_t>(1, std::min<int64_t>((a.n + 255) / 256, int64_t(dev.props().multiProcessorCount) * 8)));
  select_init_kernel<<<1, 256, 0, s->stream>>>(sel, hist, uint32_t(a.k));
  for (int shift = 24; shift >= 0; shift -= 8) {
    digit_histogram_kernel<<<hist_grid, 256, 0, s->stream>>>(a.n, a.u, sel, shift, hist);
    choose_digit_kernel<<<1, 1, 0, s->stream>>>(sel, hist, shift);
  }
  tile_counts_kernel<<<unsigned(tiles), kThreads, 0, s->stream>>>(a.n, a.u, sel, counts);
  scan_tiles_kernel<<<1, 1024, 0, s->stream>>>(tiles, counts);
  emit_pairs_kernel<<<unsigned(tiles), kThreads, 0, s->stream>>>(a.n, a.u, sel, counts, a.pairs);
  return check(cudaGetLastError(), "diloco_topk: launch");
}

}  // namespace cuda
}  // namespace tc
