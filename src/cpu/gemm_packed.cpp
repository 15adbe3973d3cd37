// Driver of the packed GEMM (plan in gemm_packed.h): scratch memory, the
// split of the work over the thread pool, and the epilogues.
#include "cpu/gemm_packed.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/half.h"
#include "cpu/convert.h"
#include "cpu/cpu_features.h"
#include "cpu/thread_pool.h"

namespace tc {
namespace cpu {
namespace {

// Aligned scratch kept by the calling thread between calls (packing 4 MiB
// afresh costs a page fault per 4 KiB, a tenth of a small GEMM). Requests
// above kKeepBytes are served and freed per call instead of being kept.
constexpr size_t kKeepBytes = size_t(64) << 20;

struct ScratchCache {
  void* p = nullptr;
  size_t n = 0;
  ~ScratchCache() { std::free(p); }
};
thread_local ScratchCache t_cache;

class Scratch {
 public:
  explicit Scratch(size_t bytes) {
    bytes = (bytes + 63) & ~size_t(63);
    if (bytes <= t_cache.n) {
      p_ = t_cache.p;
      return;
    }
    void* fresh = std::aligned_alloc(64, bytes);
    if (!fresh) throw std::bad_alloc();
    if (bytes <= kKeepBytes) {
      std::free(t_cache.p);
      t_cache.p = fresh;
      t_cache.n = bytes;
    } else {
      owned_ = fresh;
    }
    p_ = fresh;
  }
  ~Scratch() { std::free(owned_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
  void* owned_ = nullptr;
};

// ---- epilogues -------------------------------------------------------------

struct Epi {
  tc_dtype dtype;
  void* c;
  int64_t ldc;
  double alpha, beta;
};

// i32: C = alpha * (t + corr) + beta * C, all mod 2^32.
void epi_i32_scalar(const int32_t* t, int nr, const int32_t* corr, int64_t rows, int64_t cols, int32_t* c,
                    int64_t ldc, uint32_t alpha, uint32_t beta) {
  for (int64_t r = 0; r < rows; ++r, t += nr, c += ldc)
    for (int64_t j = 0; j < cols; ++j) {
      uint32_t v = uint32_t(t[j]) + (corr ? uint32_t(corr[j]) : 0u);
      v *= alpha;
      if (beta) v += beta * uint32_t(c[j]);
      c[j] = int32_t(v);
    }
}

__attribute__((target("avx2"))) void epi_i32_avx2(const int32_t* t, int nr, const int32_t* corr, int64_t rows,
                                                   int64_t cols, int32_t* c, int64_t ldc, uint32_t alpha,
                                                   uint32_t beta) {
  const __m256i va = _mm256_set1_epi32(int32_t(alpha)), vb = _mm256_set1_epi32(int32_t(beta));
  const int64_t cols8 = cols & ~int64_t(7);
  for (int64_t r = 0; r < rows; ++r, t += nr, c += ldc) {
    for (int64_t j = 0; j < cols8; j += 8) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t + j));
      if (corr) v = _mm256_add_epi32(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + j)));
      if (alpha != 1) v = _mm256_mullo_epi32(v, va);
      __m256i* cp = reinterpret_cast<__m256i*>(c + j);
      if (beta) v = _mm256_add_epi32(v, _mm256_mullo_epi32(_mm256_loadu_si256(cp), vb));
      _mm256_storeu_si256(cp, v);
    }
    if (cols8 < cols)
      epi_i32_scalar(t + cols8, nr, corr ? corr + cols8 : nullptr, 1, cols - cols8, c + cols8, ldc, alpha, beta);
  }
}

// f32 tile to f16/bf16: C = round(alpha * t + beta * C), f32 arithmetic.
void epi_half(const float* t, int nr, int64_t rows, int64_t cols, uint16_t* c, int64_t ldc, bool bf16, float alpha,
              float beta) {
  float row[64], old[64];
  for (int64_t r = 0; r < rows; ++r, t += nr, c += ldc) {
    for (int64_t j0 = 0; j0 < cols; j0 += 64) {
      const int64_t n = std::min<int64_t>(64, cols - j0);
      if (beta != 0.0f) {
        widen_row(bf16, c + j0, old, n);
        for (int64_t j = 0; j < n; ++j) row[j] = alpha * t[j0 + j] + beta * old[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] = alpha * t[j0 + j];
      }
      narrow_row(bf16, row, c + j0, n);
    }
  }
}

void epilogue(const Epi& e, const void* tile, int nr, const int32_t* corr, int64_t i0, int64_t j0, int64_t rows,
              int64_t cols) {
  if (e.dtype == TC_DTYPE_I8) {
    int32_t* c = static_cast<int32_t*>(e.c) + i0 * e.ldc + j0;
    const uint32_t alpha = uint32_t(int64_t(e.alpha)), beta = uint32_t(int64_t(e.beta));
    const int32_t* t = static_cast<const int32_t*>(tile);
    if (features().avx2) epi_i32_avx2(t, nr, corr, rows, cols, c, e.ldc, alpha, beta);
    else epi_i32_scalar(t, nr, corr, rows, cols, c, e.ldc, alpha, beta);
  } else {
    uint16_t* c = static_cast<uint16_t*>(e.c) + i0 * e.ldc + j0;
    epi_half(static_cast<const float*>(tile), nr, rows, cols, c, e.ldc, e.dtype == TC_DTYPE_BF16, float(e.alpha),
             float(e.beta));
  }
}

}  // namespace

Operands make_operands(const tc_gemm_desc& d, const void* a, const void* b) {
  Operands op;
  op.a = a;
  op.a_rs = d.transpose_a ? 1 : d.lda;
  op.a_cs = d.transpose_a ? d.lda : 1;
  op.b = b;
  op.b_rs = d.transpose_b ? d.ldb : 1;
  op.b_cs = d.transpose_b ? 1 : d.ldb;
  op.M = d.M;
  op.N = d.N;
  op.K = d.K;
  return op;
}

void run_packed_gemm(const KernelSet& ks, const Operands& op, tc_dtype c_dtype, void* c, int64_t ldc, double alpha,
                     double beta) {
  const int64_t M = op.M, N = op.N;
  const int64_t depth = ks.depth(op.K);
  const size_t a_bytes = ks.a_bytes(depth), b_bytes = ks.b_bytes(depth);
  const size_t corr_off = ks.corr_offset ? ks.corr_offset(depth) : 0;
  const int64_t panels = (N + ks.nr - 1) / ks.nr;
  const int nt = num_threads();

  // Rows per work item, a whole number of micro-panels: packed A of about
  // 512 KiB (half of a 1-2 MiB L2), at least one micro-panel, at most 256 rows.
  int64_t mpanels = int64_t((size_t(512) << 10) / a_bytes);
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
  const size_t a_block = size_t(mpanels) * a_bytes;
  Scratch scratch(b_total + size_t(nt) * a_block);
  char* bp = scratch.get();
  char* ap_all = bp + b_total;

  parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t j0 = p * ks.nr;
      ks.pack_b(op, j0, std::min<int64_t>(ks.nr, N - j0), depth, bp + size_t(p) * b_bytes);
    }
  });

  const Epi epi{c_dtype, c, ldc, alpha, beta};
  std::atomic<int64_t> next{0};
  parallel_run([&](int t, int) {
    char* ap = ap_all + size_t(t) * a_block;
    alignas(64) int32_t tile[32 * 64];  // mr * nr <= 2048 for every kernel set
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
        for (int64_t q = 0; q < mp; ++q) {
          const int64_t r0 = q * ks.mr;
          ks.micro(ap + size_t(q) * a_bytes, panel, depth, tile);
          epilogue(epi, tile, ks.nr, corr, i0 + r0, j0, std::min<int64_t>(ks.mr, rows - r0), cols);
        }
      }
    }
    if (begun && ks.end) ks.end();
  });
}

}  // namespace cpu
}  // namespace tc
