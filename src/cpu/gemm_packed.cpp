// Driver of the packed GEMM (plan in gemm_packed.h): scratch memory, the
// split of the work over the thread pool, and the epilogues.
#include "cpu/gemm_packed.h"

#include <immintrin.h>
#include <unistd.h>

// GCC 12 flags the AVX-512 intrinsics' own _mm512_undefined_*() (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/half.h"
#include "core/tiers.h"
#include "cpu/convert.h"
#include "cpu/cpu_features.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

// Scratch (gemm_packed.h): the calling thread keeps its largest block up to
// kKeepBytes between calls, one block per nesting level (the f16/bf16
// widening path holds its f32 copies while sgemm's own kernels take theirs);
// larger requests, and deeper levels, are served and freed per call.
constexpr size_t kKeepBytes = size_t(64) << 20;
constexpr int kKeptLevels = 2;

struct ScratchCache {
  void* p[kKeptLevels] = {};
  size_t n[kKeptLevels] = {};
  int live = 0;  // Scratch objects alive in this thread
  ~ScratchCache() {
    for (void* q : p) std::free(q);
  }
};
thread_local ScratchCache t_cache;

}  // namespace

Scratch::Scratch(size_t bytes) {
  bytes = (bytes + 63) & ~size_t(63);
  const int level = t_cache.live;
  if (level < kKeptLevels && bytes <= t_cache.n[level]) {
    p_ = t_cache.p[level];
    ++t_cache.live;
    return;
  }
  // Large scratch on transparent huge pages, as the buffers (backend.cpp).
  const size_t align = bytes >= kHugeBytes ? kHugeBytes : 64;
  bytes = (bytes + align - 1) & ~(align - 1);
  void* fresh = std::aligned_alloc(align, bytes);
  if (!fresh) throw std::bad_alloc();
  tiers::advise_huge(fresh, bytes);
  if (level < kKeptLevels && bytes <= kKeepBytes) {
    std::free(t_cache.p[level]);
    t_cache.p[level] = fresh;
    t_cache.n[level] = bytes;
  } else {
    owned_ = fresh;
  }
  p_ = fresh;
  ++t_cache.live;
}

Scratch::~Scratch() {
  std::free(owned_);
  --t_cache.live;
}

namespace {

// ---- epilogues -------------------------------------------------------------
// Write the valid rows x cols of an mr x nr tile (row pitch nr) to C at
// (i0, j0). Chosen once per call: AVX-512 (masked tails), AVX2, or plain.

struct Epi {
  void* c;
  int64_t ldc;
  double alpha, beta;
  const void* tile;
  int nr;
  bool stream;  // non-temporal stores (AVX-512 epilogues; see run_packed_gemm)
};
using EpiFn = void (*)(const Epi& e, const int32_t* corr, int64_t i0, int64_t j0, int64_t rows, int64_t cols);

// i32: C = alpha * (t + corr) + beta * C, all mod 2^32.
void i32_rows_scalar(const int32_t* t, int nr, const int32_t* corr, int64_t rows, int64_t cols, int32_t* c,
                     int64_t ldc, uint32_t alpha, uint32_t beta) {
  for (int64_t r = 0; r < rows; ++r, t += nr, c += ldc)
    for (int64_t j = 0; j < cols; ++j) {
      uint32_t v = uint32_t(t[j]) + (corr ? uint32_t(corr[j]) : 0u);
      v *= alpha;
      if (beta) v += beta * uint32_t(c[j]);
      c[j] = int32_t(v);
    }
}

void epi_i32_scalar(const Epi& e, const int32_t* corr, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  i32_rows_scalar(static_cast<const int32_t*>(e.tile), e.nr, corr, rows, cols,
                  static_cast<int32_t*>(e.c) + i0 * e.ldc + j0, e.ldc, uint32_t(int64_t(e.alpha)),
                  uint32_t(int64_t(e.beta)));
}

__attribute__((target("avx2"))) void epi_i32_avx2(const Epi& e, const int32_t* corr, int64_t i0, int64_t j0,
                                                   int64_t rows, int64_t cols) {
  const uint32_t alpha = uint32_t(int64_t(e.alpha)), beta = uint32_t(int64_t(e.beta));
  const __m256i va = _mm256_set1_epi32(int32_t(alpha)), vb = _mm256_set1_epi32(int32_t(beta));
  const int32_t* t = static_cast<const int32_t*>(e.tile);
  int32_t* c = static_cast<int32_t*>(e.c) + i0 * e.ldc + j0;
  const int64_t cols8 = cols & ~int64_t(7);
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc) {
    for (int64_t j = 0; j < cols8; j += 8) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + j));
      if (corr) v = _mm256_add_epi32(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + j)));
      if (alpha != 1) v = _mm256_mullo_epi32(v, va);
      __m256i* cp = reinterpret_cast<__m256i*>(c + j);
      if (beta) v = _mm256_add_epi32(v, _mm256_mullo_epi32(_mm256_loadu_si256(cp), vb));
      _mm256_storeu_si256(cp, v);
    }
    if (cols8 < cols)
      i32_rows_scalar(t + cols8, e.nr, corr ? corr + cols8 : nullptr, 1, cols - cols8, c + cols8, e.ldc, alpha, beta);
  }
}

#define TC_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

TC_AVX512 inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1); }

TC_AVX512 void epi_i32_avx512(const Epi& e, const int32_t* corr, int64_t i0, int64_t j0, int64_t rows,
                              int64_t cols) {
  const uint32_t alpha = uint32_t(int64_t(e.alpha)), beta = uint32_t(int64_t(e.beta));
  const __m512i va = _mm512_set1_epi32(int32_t(alpha)), vb = _mm512_set1_epi32(int32_t(beta));
  const int32_t* t = static_cast<const int32_t*>(e.tile);
  int32_t* c = static_cast<int32_t*>(e.c) + i0 * e.ldc + j0;
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc)
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      __m512i v = _mm512_maskz_loadu_epi32(m, t + j);
      if (corr) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, corr + j));
      if (alpha != 1) v = _mm512_mullo_epi32(v, va);
      if (beta) v = _mm512_add_epi32(v, _mm512_mullo_epi32(_mm512_maskz_loadu_epi32(m, c + j), vb));
      if (e.stream && m == 0xffff && (uintptr_t(c + j) & 63) == 0)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(c + j), v);
      else
        _mm512_mask_storeu_epi32(c + j, m, v);
    }
}

// f32 tile to f16/bf16: C = round(alpha * t + beta * C), f32 arithmetic.
template <bool kBf16>
void epi_half(const Epi& e, const int32_t*, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const float alpha = float(e.alpha), beta = float(e.beta);
  const float* t = static_cast<const float*>(e.tile);
  uint16_t* c = static_cast<uint16_t*>(e.c) + i0 * e.ldc + j0;
  float row[64], old[64];
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc) {
    for (int64_t j0 = 0; j0 < cols; j0 += 64) {
      const int64_t n = std::min<int64_t>(64, cols - j0);
      if (beta != 0.0f) {
        widen_row(kBf16, c + j0, old, n);
        for (int64_t j = 0; j < n; ++j) row[j] = alpha * t[j0 + j] + beta * old[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] = alpha * t[j0 + j];
      }
      narrow_row(kBf16, row, c + j0, n);
    }
  }
}

// bf16 rounding as f32_to_bf16 (nearest even, NaN kept quiet), 16 lanes.
TC_AVX512 inline __m256i f32_to_bf16_avx512(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

template <bool kBf16>
TC_AVX512 void epi_half_avx512(const Epi& e, const int32_t*, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const __m512 va = _mm512_set1_ps(float(e.alpha)), vb = _mm512_set1_ps(float(e.beta));
  const bool has_beta = e.beta != 0.0;
  const float* t = static_cast<const float*>(e.tile);
  uint16_t* c = static_cast<uint16_t*>(e.c) + i0 * e.ldc + j0;
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc)
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      __m512 x = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, t + j));
      if (has_beta) {
        const __m256i h = _mm256_maskz_loadu_epi16(m, c + j);
        const __m512 old = kBf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                                 : _mm512_cvtph_ps(h);
        x = _mm512_add_ps(x, _mm512_mul_ps(vb, old));
      }
      const __m256i out = kBf16 ? f32_to_bf16_avx512(x) : _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      if (e.stream && m == 0xffff && (uintptr_t(c + j) & 31) == 0)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(c + j), out);
      else
        _mm256_mask_storeu_epi16(c + j, m, out);
    }
}

// f32: C = alpha * t + beta * C, f32 arithmetic as a BLAS does it.
void epi_f32(const Epi& e, const int32_t*, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const float alpha = float(e.alpha), beta = float(e.beta);
  const float* t = static_cast<const float*>(e.tile);
  float* c = static_cast<float*>(e.c) + i0 * e.ldc + j0;
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc) {
    if (beta == 0.0f) {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * t[j];
    } else {
      for (int64_t j = 0; j < cols; ++j) c[j] = alpha * t[j] + beta * c[j];
    }
  }
}

__attribute__((target("avx2,fma"))) void epi_f32_avx2(const Epi& e, const int32_t*, int64_t i0, int64_t j0,
                                                       int64_t rows, int64_t cols) {
  const float alpha = float(e.alpha), beta = float(e.beta);
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  const float* t = static_cast<const float*>(e.tile);
  float* c = static_cast<float*>(e.c) + i0 * e.ldc + j0;
  const int64_t cols8 = cols & ~int64_t(7);
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc) {
    for (int64_t j = 0; j < cols8; j += 8) {
      __m256 x = _mm256_mul_ps(va, _mm256_loadu_ps(t + j));
      if (beta != 0.0f) x = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + j), x);
      _mm256_storeu_ps(c + j, x);
    }
    for (int64_t j = cols8; j < cols; ++j) c[j] = beta == 0.0f ? alpha * t[j] : alpha * t[j] + beta * c[j];
  }
}

TC_AVX512 void epi_f32_avx512(const Epi& e, const int32_t*, int64_t i0, int64_t j0, int64_t rows, int64_t cols) {
  const __m512 va = _mm512_set1_ps(float(e.alpha)), vb = _mm512_set1_ps(float(e.beta));
  const bool has_beta = e.beta != 0.0;
  const float* t = static_cast<const float*>(e.tile);
  float* c = static_cast<float*>(e.c) + i0 * e.ldc + j0;
  for (int64_t r = 0; r < rows; ++r, t += e.nr, c += e.ldc)
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 m = tail_mask(cols - j);
      __m512 x = _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, t + j));
      if (has_beta) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, c + j), x);
      if (e.stream && m == 0xffff && (uintptr_t(c + j) & 63) == 0)
        _mm512_stream_ps(c + j, x);
      else
        _mm512_mask_storeu_ps(c + j, m, x);
    }
}

EpiFn pick_epilogue(tc_dtype dtype) {
  const Features& f = features();
  const bool avx512 = f.avx512f && f.avx512bw && f.avx512vl;
  switch (dtype) {
    case TC_DTYPE_I8: return avx512 ? epi_i32_avx512 : f.avx2 ? epi_i32_avx2 : epi_i32_scalar;
    case TC_DTYPE_F32: return avx512 ? epi_f32_avx512 : f.avx2 && f.fma ? epi_f32_avx2 : epi_f32;
    case TC_DTYPE_BF16: return avx512 ? epi_half_avx512<true> : epi_half<true>;
    default: return avx512 ? epi_half_avx512<false> : epi_half<false>;
  }
}

// Per-core L2 size from the C library (CPUID), 1 MiB when it does not say.
size_t l2_bytes() {
  static const size_t n = [] {
    long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return v >= (128 << 10) && v <= (64 << 20) ? size_t(v) : size_t(1) << 20;
  }();
  return n;
}

}  // namespace

Operands make_operands(bool transpose_a, bool transpose_b, int64_t M, int64_t N, int64_t K, const void* a,
                       int64_t lda, const void* b, int64_t ldb) {
  Operands op;
  op.a = a;
  op.a_rs = transpose_a ? 1 : lda;
  op.a_cs = transpose_a ? lda : 1;
  op.b = b;
  op.b_rs = transpose_b ? ldb : 1;
  op.b_cs = transpose_b ? 1 : ldb;
  op.M = M;
  op.N = N;
  op.K = K;
  return op;
}

Operands make_operands(const tc_gemm_desc& d, const void* a, const void* b) {
  return make_operands(d.transpose_a, d.transpose_b, d.M, d.N, d.K, a, d.lda, b, d.ldb);
}

void run_packed_gemm(const KernelSet& ks, const Operands& op, tc_dtype c_dtype, void* c, int64_t ldc, double alpha,
                     double beta) {
  const int64_t M = op.M, N = op.N;
  const int64_t depth = ks.depth(op.K);
  const size_t a_bytes = ks.a_bytes(depth), b_bytes = ks.b_bytes(depth);
  const size_t corr_off = ks.corr_offset ? ks.corr_offset(depth) : 0;
  const int64_t panels = (N + ks.nr - 1) / ks.nr;
  // Below ~32M multiply-adds (about 320^3) waking the pool costs more than
  // the second thread gives back: run on the calling thread alone.
  const bool serial = double(M) * double(N) * double(op.K) < double(1 << 25);
  const int nt = serial ? 1 : num_threads();

  // Rows per work item, a whole number of micro-panels: packed A of half the
  // L2 cache (it is swept once per panel), at least one micro-panel, at most
  // 256 rows.
  int64_t mpanels = int64_t(l2_bytes() / 2 / a_bytes);
  mpanels = std::max<int64_t>(1, std::min<int64_t>({mpanels, 256 / ks.mr, (M + ks.mr - 1) / ks.mr}));
  const int64_t mc = mpanels * ks.mr;
  const int64_t mblocks = (M + mc - 1) / mc;
  // Too few row blocks to keep every thread busy (a few per thread lets the
  // dynamic split even out): cut the panels into column ranges too.
  int64_t nsplit = 1;
  if (mblocks < 4 * nt) nsplit = std::min(panels, (4 * nt + mblocks - 1) / mblocks);
  const int64_t items = mblocks * nsplit;

  // All scratch is taken here, in the calling thread, so that an allocation
  // failure is an exception the API turns into TC_ERR_ALLOC.
  const size_t b_total = size_t(panels) * b_bytes;
  const size_t tile_bytes = size_t(ks.mr) * size_t(ks.nr) * 4;
  const size_t a_block = size_t(round_up(mpanels * int64_t(a_bytes), 64)), acc_block = size_t(mpanels) * tile_bytes;
  Scratch scratch(b_total + size_t(nt) * (a_block + acc_block));
  char* bp = scratch.get();
  char* ap_all = bp + b_total;

  auto pack_b = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t j0 = p * ks.nr;
      ks.pack_b(op, j0, std::min<int64_t>(ks.nr, N - j0), depth, bp + size_t(p) * b_bytes);
    }
  };
  if (serial) pack_b(0, panels);
  else parallel_for(panels, 1, pack_b);

  const EpiFn epilogue = pick_epilogue(c_dtype);
  // A C larger than the L2 caches would be written back to memory anyway:
  // streaming stores skip reading each line first (write-allocate), a third
  // of the traffic of a large i8 or f32 product. Only when C is not read (beta 0).
  const size_t c_bytes = size_t(M) * size_t(N) * (c_dtype == TC_DTYPE_I8 || c_dtype == TC_DTYPE_F32 ? 4 : 2);
  const bool stream = beta == 0.0 && c_bytes >= (size_t(4) << 20);
  std::atomic<int64_t> next{0};
  auto work = [&](int t, int) {
    char* ap = ap_all + size_t(t) * (a_block + acc_block);
    char* acc = ap + a_block;  // one tile of accumulators per micro-panel of A
    bool begun = false;
    for (;;) {
      const int64_t item = next.fetch_add(1);
      if (item >= items) break;
      if (!begun && ks.begin) ks.begin();
      begun = true;
      const int64_t i0 = (item / nsplit) * mc, rows = std::min(mc, M - i0);
      const int64_t s = item % nsplit;
      const int64_t pb = panels * s / nsplit, pe = panels * (s + 1) / nsplit;
      const int64_t mp = (rows + ks.mr - 1) / ks.mr;
      for (int64_t q = 0; q < mp; ++q) {
        const int64_t r0 = q * ks.mr;
        ks.pack_a(op, i0 + r0, std::min<int64_t>(ks.mr, rows - r0), depth, ap + size_t(q) * a_bytes);
      }
      for (int64_t p = pb; p < pe; ++p) {
        const char* panel = bp + size_t(p) * b_bytes;
        const int32_t* corr = corr_off ? reinterpret_cast<const int32_t*>(panel + corr_off) : nullptr;
        const int64_t j0 = p * ks.nr, cols = std::min<int64_t>(ks.nr, N - j0);
        for (int64_t k0 = 0; k0 < depth; k0 += ks.kc)
          for (int64_t q = 0; q < mp; ++q)
            ks.micro(ap + size_t(q) * a_bytes, panel, depth, k0, std::min(ks.kc, depth - k0),
                     acc + size_t(q) * tile_bytes, k0 > 0);
        for (int64_t q = 0; q < mp; ++q) {
          const int64_t r0 = q * ks.mr;
          const Epi epi{c, ldc, alpha, beta, acc + size_t(q) * tile_bytes, ks.nr, stream};
          epilogue(epi, corr, i0 + r0, j0, std::min<int64_t>(ks.mr, rows - r0), cols);
        }
      }
    }
    if (begun && ks.end) ks.end();
    if (stream) _mm_sfence();  // each thread orders its streaming stores before it reports done
  };
  if (serial) work(0, 1);
  else parallel_run(work);
}

}  // namespace cpu
}  // namespace tc
