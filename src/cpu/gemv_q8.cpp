// The decode step's one-row products on 8-bit activations (core/backend.h,
// QuantizeQ8Args / GemvQ8Args), on the CPU: plain loops, the reference the
// device kernels are tested against (the LLaMA harness takes this path only
// on devices; on the host its products run the quantized GEMV).
//
//   quantize_q8: v = x or rmsnorm(x) * gamma (f64 sum of squares), then per
//     block of 32: dx = max|v| / 127, xq = rne(v * (1 / dx)), sx = dx sum(xq)
//   gemv_q8:     r[n] = sum_b d_b (dx_b sum_i q_i xq_i + c sx_b)  (c = -8 Q4_0, 0 Q8_0)
//                then y = r, y += r, or y[n] = silu(r[n]) r[n + N/2]
//   repack_q8:   GGUF blocks into the split layout (quants and scales apart)
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/backend.h"
#include "core/error.h"
#include "core/half.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "quant/formats.h"

namespace tc {
namespace cpu {

tc_status quantize_q8(const QuantizeQ8Args& a) {
  const int64_t K = a.K;
  float rstd = 1.0f;
  if (a.gamma) {
    double ss = 0.0;
    for (int64_t k = 0; k < K; ++k) ss += double(a.x[k]) * double(a.x[k]);
    rstd = float(1.0 / std::sqrt(ss / double(K) + double(a.eps)));
  }
  for (int64_t b = 0; b < K / 32; ++b) {
    float v[32], amax = 0.0f;
    for (int i = 0; i < 32; ++i) {
      const int64_t k = b * 32 + i;
      v[i] = a.gamma ? (a.x[k] * rstd) * a.gamma[k] : a.x[k];
      amax = std::max(amax, std::fabs(v[i]));
    }
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = std::max(-128, std::min(127, int(std::nearbyint(v[i] * id))));
      a.xq[b * 32 + i] = int8_t(q);
      sum += q;
    }
    a.xd[2 * b] = d, a.xd[2 * b + 1] = d * float(sum);
  }
  return TC_OK;
}

namespace {

// Block i of W (i = n * K/32 + b): its quants and its scale, in either layout.
const uint8_t* block_at(const GemvQ8Args& a, int64_t i, uint16_t* d) {
  if (a.wd) {
    *d = a.wd[i];
    return static_cast<const uint8_t*>(a.w) + i * quant::split_quant_bytes(a.fmt);
  }
  if (a.fmt == quant::Q4_0) {
    const auto* blk = static_cast<const quant::BlockQ4_0*>(a.w) + i;
    *d = blk->d;
    return blk->qs;
  }
  const auto* blk = static_cast<const quant::BlockQ8_0*>(a.w) + i;
  *d = blk->d;
  return reinterpret_cast<const uint8_t*>(blk->qs);
}

// Row n's r (see the top of the file).
float row_q8(const GemvQ8Args& a, int64_t n) {
  const int64_t nb = a.K / 32;
  float r = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* xq = a.xq + b * 32;
    const float dx = a.xd[2 * b], sx = a.xd[2 * b + 1];
    uint16_t d;
    const uint8_t* qs = block_at(a, n * nb + b, &d);
    int s = 0;
    if (a.fmt == quant::Q4_0) {
      for (int i = 0; i < 16; ++i) s += (qs[i] & 15) * xq[i] + (qs[i] >> 4) * xq[16 + i];
      r += f16_to_f32(d) * (dx * float(s) - 8.0f * sx);
    } else {
      for (int i = 0; i < 32; ++i) s += int8_t(qs[i]) * xq[i];
      r += f16_to_f32(d) * (dx * float(s));
    }
  }
  return r;
}

bool q8_format(int32_t fmt) { return fmt == quant::Q4_0 || fmt == quant::Q8_0; }

}  // namespace

tc_status gemv_q8(const GemvQ8Args& a) {
  if (!q8_format(a.fmt)) return fail(TC_ERR_UNSUPPORTED, "%s: gemv_q8 takes Q4_0 or Q8_0 weights", a.info.name);
  const int64_t rows = a.epilogue == GemvQ8Args::kSwiglu ? a.N / 2 : a.N;
  parallel_for(rows, 64, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float r = row_q8(a, n);
      if (a.epilogue == GemvQ8Args::kStore) a.y[n] = r;
      else if (a.epilogue == GemvQ8Args::kAdd) a.y[n] += r;
      else {
        const float u = row_q8(a, n + rows);
        const float s = 1.0f / (1.0f + std::exp(std::min(87.0f, -r)));
        a.y[n] = r * s * u;
      }
    }
  });
  return TC_OK;
}

tc_status repack_q8(const RepackQ8Args& a) {
  if (!q8_format(a.fmt)) return fail(TC_ERR_UNSUPPORTED, "%s: repack_q8 takes Q4_0 or Q8_0 weights", a.info.name);
  const int64_t blocks = a.N * (a.K / 32), qb = quant::split_quant_bytes(a.fmt);
  const auto* w = static_cast<const uint8_t*>(a.w);
  auto* qs = static_cast<uint8_t*>(a.qs);
  parallel_for(blocks, 4096, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::memcpy(&a.d[b], w + b * (qb + 2), 2);
      std::memcpy(qs + b * qb, w + b * (qb + 2) + 2, size_t(qb));
    }
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
