// Building blocks shared by the CPU attention kernels (attention.cpp,
// attention_backward.cpp): SIMD vectors, a vector exp, one register-blocked
// tile product, mask geometry and row loading.
//
// The vector code is written once with GCC vector extensions, templated on
// the width W (floats per vector), and compiled three times: inside
// functions marked target("avx512f,...") with W = 16, target("avx2,fma")
// with W = 8, and the baseline ISA with W = 4. Everything vector-valued is
// always_inline so that it takes the ISA of the function it lands in; the
// ISA is chosen at run time from cpu/cpu_features.h (TC_CPU_ISA caps it).
//
// FMA contraction: the build uses -std=gnu++17, whose default
// -ffp-contract=fast turns `acc += a * b` into one fused multiply-add.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "core/half.h"
#include "cpu/convert.h"
#include "cpu/cpu_features.h"
#include "tensorcore/types.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // wide vectors only ever live inside target functions

#define TC_AI inline __attribute__((always_inline))
#define TC_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#define TC_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tc {
namespace cpu {
namespace att {

// Tile sizes: query rows x key columns processed together. Multiples of every
// W, so that padded rows are whole vectors.
constexpr int64_t kBr = 64;
constexpr int64_t kBc = 64;
constexpr int64_t kMaxD = 256;

template <int W>
struct Vec {
  typedef float f __attribute__((vector_size(W * 4)));
  typedef float fu __attribute__((vector_size(W * 4), aligned(4)));  // unaligned access
  typedef int32_t i __attribute__((vector_size(W * 4)));
};

template <int W>
TC_AI typename Vec<W>::f load(const float* p) {
  return *reinterpret_cast<const typename Vec<W>::fu*>(p);
}
template <int W>
TC_AI void store(float* p, typename Vec<W>::f v) {
  *reinterpret_cast<typename Vec<W>::fu*>(p) = v;
}
// A broadcast. Written as a shuffle: GCC 12 expands the obvious `s - F{}` of
// a value loaded from memory into one masked load per lane once inlined.
template <int W>
TC_AI typename Vec<W>::f splat(float s) {
  typename Vec<W>::f v = {s};
  if constexpr (W == 16) return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  else if constexpr (W == 8) return __builtin_shufflevector(v, v, 0, 0, 0, 0, 0, 0, 0, 0);
  else return __builtin_shufflevector(v, v, 0, 0, 0, 0);
}
template <int W>
TC_AI typename Vec<W>::f vmax(typename Vec<W>::f a, typename Vec<W>::f b) {
  return a > b ? a : b;
}

// exp(x) for a vector, Cephes' expf: x = n ln2 + r with |r| <= ln2/2,
// exp(r) by a degree-7 polynomial (relative error ~1e-7), 2^n built in the
// exponent bits. x < -87.3 (including -inf for masked scores) gives 0.
template <int W>
TC_AI typename Vec<W>::f vexp(typename Vec<W>::f x) {
  typedef typename Vec<W>::f F;
  typedef typename Vec<W>::i I;
  const F lo = splat<W>(-87.33654f), hi = splat<W>(88.3762626647949f);
  const I dead = x < lo;
  F xc = vmax<W>(x, lo);
  xc = xc < hi ? xc : hi;
  const F magic = splat<W>(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  F t = xc * 1.44269504088896341f + magic;
  F n = t - magic;
  F r = xc - n * 0.693359375f;  // ln2 in two parts, so r is exact
  r = r - n * -2.12194440e-4f;
  F p = splat<W>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  I bits = (((I)t - (I)magic) + 127) << 23;  // the low bits of t hold n; vector casts reinterpret
  F y = p * (F)bits;
  return dead ? F{} : y;
}

// The one product every step of attention is made of:
//
//   out[r][0:N] (=|+=) sum_k c[r*cr + k*ck] * z[k*ldz + 0:N]   r < rows, k < kdim
//
// with N = nvec * W and, for mode kScaled, out[r] first multiplied by
// row_scale[r]. c is read one scalar at a time (broadcast), z and out as
// whole vectors, so c may be any strided view (a transposed tile is cr = 1).
// Registers hold an MR x NV block of out across the whole k loop.
enum GemmInit { kZero, kAccumulate, kScaled };

struct TileGemm {
  float* out;
  int64_t ldo;
  const float* c;
  int64_t cr, ck;
  const float* z;
  int64_t ldz;
  int64_t rows, kdim, nvec;
  GemmInit init;
  const float* row_scale;
};

template <int W, int MR, int NV>
TC_AI void gemm_block(const TileGemm& g, int64_t r0, int64_t v0) {
  typedef typename Vec<W>::f F;
  F acc[MR][NV];
  float* out = g.out + r0 * g.ldo + v0 * W;
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      if (g.init == kZero) acc[r][v] = F{};
      else if (g.init == kAccumulate) acc[r][v] = load<W>(out + r * g.ldo + v * W);
      else acc[r][v] = load<W>(out + r * g.ldo + v * W) * g.row_scale[r0 + r];
    }
  const float* c = g.c + r0 * g.cr;
  const float* z = g.z + v0 * W;
  for (int64_t k = 0; k < g.kdim; ++k) {
    F zv[NV];
    for (int v = 0; v < NV; ++v) zv[v] = load<W>(z + k * g.ldz + v * W);
    for (int r = 0; r < MR; ++r) {
      F cb = splat<W>(c[r * g.cr + k * g.ck]);
      for (int v = 0; v < NV; ++v) acc[r][v] += cb * zv[v];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) store<W>(out + r * g.ldo + v * W, acc[r][v]);
}

// Register budgets: AVX-512 has 32 vector registers (6 x 4 accumulators),
// AVX2 and SSE 16 (4 x 3).
template <int W>
struct Blocking {
  static constexpr int MR = W == 16 ? 6 : 4;
  static constexpr int NV = W == 16 ? 4 : 3;
};

template <int W, int NV>
TC_AI void gemm_cols(const TileGemm& g, int64_t v0) {
  constexpr int MR = Blocking<W>::MR;
  int64_t r = 0;
  for (; r + MR <= g.rows; r += MR) gemm_block<W, MR, NV>(g, r, v0);
  switch (g.rows - r) {
    case 1: gemm_block<W, 1, NV>(g, r, v0); break;
    case 2: gemm_block<W, 2, NV>(g, r, v0); break;
    case 3: gemm_block<W, 3, NV>(g, r, v0); break;
    case 4: if constexpr (MR > 4) gemm_block<W, 4, NV>(g, r, v0); break;
    case 5: if constexpr (MR > 5) gemm_block<W, 5, NV>(g, r, v0); break;
    default: break;
  }
}

template <int W>
TC_AI void tile_gemm(const TileGemm& g) {
  constexpr int NV = Blocking<W>::NV;
  int64_t v = 0;
  for (; v + NV <= g.nvec; v += NV) gemm_cols<W, NV>(g, v);
  switch (g.nvec - v) {
    case 1: gemm_cols<W, 1>(g, v); break;
    case 2: gemm_cols<W, 2>(g, v); break;
    case 3: if constexpr (NV > 3) gemm_cols<W, 3>(g, v); break;
    default: break;
  }
}

// One non-inlined copy of tile_gemm per ISA; the kernels reach it through
// the ISA tag below.
void tile_gemm_avx512(const TileGemm& g);
void tile_gemm_avx2(const TileGemm& g);
void tile_gemm_portable(const TileGemm& g);

struct IsaAvx512 {
  static constexpr int W = 16;
  static void gemm(const TileGemm& g) { tile_gemm_avx512(g); }
};
struct IsaAvx2 {
  static constexpr int W = 8;
  static void gemm(const TileGemm& g) { tile_gemm_avx2(g); }
};
struct IsaPortable {
  static constexpr int W = 4;
  static void gemm(const TileGemm& g) { tile_gemm_portable(g); }
};

enum class Isa { Avx512, Avx2, Portable };
Isa pick_isa();  // the best that features() (capped by TC_CPU_ISA) allows

// Which keys a query sees. A query at absolute position p = i + off
// (off = Skv - Sq) sees keys j with
//   j <= p        when causal or windowed,
//   j >  p - W    when windowed (W > 0),
// intersected with [0, Skv). key_begin/key_end give [begin, end) for a row;
// both are nondecreasing in i, so a block of rows sees the union
// [key_begin(first), key_end(last)).
struct MaskGeometry {
  int64_t off, skv, window;
  bool upper;  // causal || window > 0

  MaskGeometry(int64_t sq, int64_t skv_, bool causal, int64_t w)
      : off(skv_ - sq), skv(skv_), window(w), upper(causal || w > 0) {}

  int64_t key_begin(int64_t i) const {
    return window > 0 ? std::clamp<int64_t>(i + off - window + 1, 0, skv) : 0;
  }
  int64_t key_end(int64_t i) const { return upper ? std::clamp<int64_t>(i + off + 1, 0, skv) : skv; }
  // Rows i in [row_begin(j), row_end(j)) see key j (clamped to [0, sq) by the caller).
  int64_t row_begin(int64_t j) const { return upper ? j - off : std::numeric_limits<int64_t>::min() / 4; }
  int64_t row_end(int64_t j) const {
    return window > 0 ? j - off + window : std::numeric_limits<int64_t>::max() / 4;
  }
};

// n elements of a row in the io dtype into f32, zeroing [n, npad).
inline void load_row(int32_t dtype, const void* base, int64_t index, int64_t n, float* dst, int64_t npad) {
  if (dtype == TC_DTYPE_F32) {
    std::memcpy(dst, static_cast<const float*>(base) + index, size_t(n) * 4);
  } else {
    widen_row(dtype == TC_DTYPE_BF16, static_cast<const uint16_t*>(base) + index, dst, n);
  }
  for (int64_t k = n; k < npad; ++k) dst[k] = 0.0f;
}

// n f32 values into a row of the io dtype.
inline void store_row(int32_t dtype, const float* src, int64_t n, void* base, int64_t index) {
  if (dtype == TC_DTYPE_F32) {
    std::memcpy(static_cast<float*>(base) + index, src, size_t(n) * 4);
  } else {
    narrow_row(dtype == TC_DTYPE_BF16, src, static_cast<uint16_t*>(base) + index, n);
  }
}

// `rows` consecutive rows of n elements starting at element `index`, as f32
// rows of pitch ld >= n (zero-padded). Where the rows can be read in place
// (f32 and ld == n) the source is returned and nothing is copied; else
// they land in dst, converted in one call when unpadded.
inline const float* load_rows(int32_t dtype, const void* base, int64_t index, int64_t rows, int64_t n,
                              float* dst, int64_t ld) {
  if (ld == n) {
    if (dtype == TC_DTYPE_F32) return static_cast<const float*>(base) + index;
    widen_row(dtype == TC_DTYPE_BF16, static_cast<const uint16_t*>(base) + index, dst, rows * n);
    return dst;
  }
  for (int64_t r = 0; r < rows; ++r) load_row(dtype, base, index + r * n, n, dst + r * ld, ld);
  return dst;
}

// 64-byte aligned f32 scratch, one per worker.
class Scratch {
 public:
  float* get(size_t n) {
    if (n > cap_) {
      void* p = std::aligned_alloc(64, (n * 4 + 63) & ~size_t(63));
      if (!p) throw std::bad_alloc();
      buf_.reset(static_cast<float*>(p));
      cap_ = n;
    }
    return buf_.get();
  }

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float, Free> buf_;
  size_t cap_ = 0;
};

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace att
}  // namespace cpu
}  // namespace tc
