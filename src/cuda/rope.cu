// Rotary position embedding (RoPE), in place, on the GPU. The maths (as the
// CPU kernel, src/cpu/rope.cpp):
//
// X is [batch, heads, seq, D] (D = head_dim, even); cos_t and sin_t are f32
// [seq, D/2]. Row r (position s = r mod seq) holds D/2 pairs (a_k, b_k),
// rotated by theta_{s,k}:
//   forward:   a' = a cos - b sin,   b' = b cos + a sin
//   backward:  a' = a cos + b sin,   b' = b cos - a sin     (rotation by -theta)
// with pairs
//   half rotation (GPT-NeoX, HF LLaMA):  a_k = x[k],  b_k = x[k + D/2]
//   interleaved (GGUF / Meta LLaMA):     a_k = x[2k], b_k = x[2k + 1]
//
// Memory: one read and one write of X in 16-byte vectors (a thread takes E
// consecutive elements: E pairs of the half layout, from both halves, or
// E/2 pairs of the interleaved one); the tables are small and re-read from
// L1/L2 for every batch and head, also in 16-byte loads. Blocks are bx x by threads: bx threads
// over a row's vectors (bx a power of two >= the vectors of a row, up to
// 256), by rows side by side, rows taken with a grid stride. Rows whose
// length or alignment does not allow 16-byte accesses use one element at a time.
#include "core/error.h"
#include "cuda/device.h"
#include "cuda/rows.cuh"

namespace tc {
namespace cuda {
namespace {

constexpr int kThreads = 256;

template <class T, int E, bool Vec>
__device__ __forceinline__ void load_f(const T* p, float* f) {
  if constexpr (Vec) {
    const Pack<T, E> q = load<T, E>(p);
#pragma unroll
    for (int e = 0; e < E; ++e) f[e] = q.f(e);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) f[e] = to_f(p[e]);
  }
}
template <class T, int E, bool Vec>
__device__ __forceinline__ void store_f(T* p, const float* f) {
  if constexpr (Vec) {
    Pack<T, E> q;
#pragma unroll
    for (int e = 0; e < E; ++e) q.set(e, f[e]);
    store(p, q);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) p[e] = from_f<T>(f[e]);
  }
}

// n consecutive table values; with Vec in 16-byte (or, for n = 2, 8-byte)
// loads: one scalar load per value would cost more L1 wavefronts than the
// 16-byte accesses of X they serve.
template <int n, bool Vec>
__device__ __forceinline__ void load_table(const float* __restrict__ p, float* f) {
  if constexpr (Vec && n % 4 == 0) {
#pragma unroll
    for (int i = 0; i < n; i += 4) {
      const Pack<float, 4> q = load<float, 4>(p + i);
#pragma unroll
      for (int e = 0; e < 4; ++e) f[i + e] = q.v[e];
    }
  } else if constexpr (Vec && n == 2) {
    const Pack<float, 2> q = load<float, 2>(p);
    f[0] = q.v[0];
    f[1] = q.v[1];
  } else {
#pragma unroll
    for (int e = 0; e < n; ++e) f[e] = __ldg(p + e);
  }
}

__device__ __forceinline__ void rotate(bool inverse, float a, float b, float c, float s, float* ra, float* rb) {
  if (inverse) {
    *ra = fmaf(b, s, a * c);
    *rb = b * c - a * s;
  } else {
    *ra = a * c - b * s;
    *rb = fmaf(a, s, b * c);
  }
}

// Half rotation: vector v of a row covers pairs [v E, v E + E).
template <class T, int E, bool Vec, bool Inverse>
__global__ void __launch_bounds__(kThreads)
    rope_half_k(T* x, const float* __restrict__ cos_t, const float* __restrict__ sin_t, int64_t rows, int64_t S,
                int64_t D) {
  const int64_t H = D / 2, vpr = H / E;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += int64_t(gridDim.x) * blockDim.y) {
    T* xr = x + row * D;
    const float* c = cos_t + (row % S) * H;
    const float* s = sin_t + (row % S) * H;
    for (int64_t v = threadIdx.x; v < vpr; v += blockDim.x) {
      const int64_t k = v * E;
      float a[E], b[E], cv[E], sv[E];
      load_f<T, E, Vec>(xr + k, a);
      load_f<T, E, Vec>(xr + H + k, b);
      load_table<E, Vec>(c + k, cv);
      load_table<E, Vec>(s + k, sv);
#pragma unroll
      for (int e = 0; e < E; ++e) rotate(Inverse, a[e], b[e], cv[e], sv[e], &a[e], &b[e]);
      store_f<T, E, Vec>(xr + k, a);
      store_f<T, E, Vec>(xr + H + k, b);
    }
  }
}

// Interleaved: vector v of a row covers elements [v E, v E + E), pairs
// [v E / 2, v E / 2 + E / 2). E is even.
template <class T, int E, bool Vec, bool Inverse>
__global__ void __launch_bounds__(kThreads)
    rope_interleaved_k(T* x, const float* __restrict__ cos_t, const float* __restrict__ sin_t, int64_t rows,
                       int64_t S, int64_t D) {
  const int64_t H = D / 2, vpr = D / E;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y; row < rows;
       row += int64_t(gridDim.x) * blockDim.y) {
    T* xr = x + row * D;
    const float* c = cos_t + (row % S) * H;
    const float* s = sin_t + (row % S) * H;
    for (int64_t v = threadIdx.x; v < vpr; v += blockDim.x) {
      const int64_t k = v * E;
      float f[E], cv[E / 2], sv[E / 2];
      load_f<T, E, Vec>(xr + k, f);
      load_table<E / 2, Vec>(c + k / 2, cv);
      load_table<E / 2, Vec>(s + k / 2, sv);
#pragma unroll
      for (int q = 0; q < E / 2; ++q) rotate(Inverse, f[2 * q], f[2 * q + 1], cv[q], sv[q], &f[2 * q], &f[2 * q + 1]);
      store_f<T, E, Vec>(xr + k, f);
    }
  }
}

template <class T, bool Inverse>
void rope_typed(StreamState* s, const RopeArgs& a) {
  constexpr int EV = int(16 / sizeof(T));
  const tc_rope_desc& d = a.d;
  T* x = static_cast<T*>(a.x);
  const int64_t rows = d.batch * d.heads * d.seq, D = d.head_dim, H = D / 2;
  auto go = [&](auto k, int64_t vpr) {
    int bx = 1;
    while (bx < vpr && bx < kThreads) bx *= 2;
    const int by = kThreads / bx;
    const unsigned grid = all_blocks((rows + by - 1) / by);
    k<<<grid, dim3(bx, by), 0, s->stream>>>(x, a.cos_t, a.sin_t, rows, d.seq, D);
  };
  // 16-byte accesses: X's rows and the tables' rows start 16-byte aligned
  // whenever the base pointers are and a row holds whole vectors.
  const bool vec_base = aligned16(x) && aligned16(a.cos_t) && aligned16(a.sin_t);
  if (d.interleaved) {
    s->last_kernel = "rope_interleaved";
    if (vec_base && D % EV == 0) go(rope_interleaved_k<T, EV, true, Inverse>, D / EV);
    else go(rope_interleaved_k<T, 2, false, Inverse>, D / 2);
  } else {
    s->last_kernel = "rope_half";
    if (vec_base && H % EV == 0) go(rope_half_k<T, EV, true, Inverse>, H / EV);
    else go(rope_half_k<T, 1, false, Inverse>, H);
  }
}

}  // namespace

tc_status rope(Device&, StreamState* s, const RopeArgs& a) {
  with_type(a.d.dtype, [&](auto t) {
    using T = decltype(t);
    if (a.inverse) rope_typed<T, true>(s, a);
    else rope_typed<T, false>(s, a);
  });
  return check(cudaGetLastError(), a.inverse ? "rope_backward: launch" : "rope_forward: launch");
}

}  // namespace cuda
}  // namespace tc
