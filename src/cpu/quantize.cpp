// Quantising and dequantising whole matrices on the CPU, row by row in
// parallel, with the reference row functions of src/quant (bit-identical to
// ggml): a source row is widened to f32 first, a dequantised row narrowed
// to the output dtype last (round to nearest even).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/half.h"
#include "cpu/convert.h"
#include "cpu/ops.h"
#include "cpu/thread_pool.h"
#include "quant/formats.h"

namespace tc {
namespace cpu {

tc_status quantize_weights(const QuantizeWeightsArgs& a) {
  const quant::FormatInfo& f = *quant::format_info(a.fmt);
  const size_t es = dtype_size(a.src_dtype);
  const uint64_t row_bytes = uint64_t(a.K / f.block_elems) * uint64_t(f.block_bytes);
  parallel_for(a.N, std::max<int64_t>(1, 65536 / a.K), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(a.K));
    for (int64_t r = r0; r < r1; ++r) {
      const char* src = static_cast<const char*>(a.src) + size_t(r * a.K) * es;
      if (a.src_dtype == TC_DTYPE_F32) std::memcpy(row.data(), src, size_t(a.K) * 4);
      else widen_row(a.src_dtype == TC_DTYPE_BF16, reinterpret_cast<const uint16_t*>(src), row.data(), a.K);
      quant::quantize_row(a.fmt, row.data(), static_cast<uint8_t*>(a.dst) + uint64_t(r) * row_bytes, a.K);
    }
  });
  return TC_OK;
}

tc_status dequantize_weights(const DequantizeWeightsArgs& a) {
  const quant::FormatInfo& f = *quant::format_info(a.fmt);
  const size_t es = dtype_size(a.dtype);
  const uint64_t row_bytes = uint64_t(a.K / f.block_elems) * uint64_t(f.block_bytes);
  parallel_for(a.N, std::max<int64_t>(1, 65536 / a.K), [&](int64_t r0, int64_t r1) {
    std::vector<float> row(size_t(a.K));
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = static_cast<const uint8_t*>(a.src) + uint64_t(r) * row_bytes;
      char* dst = static_cast<char*>(a.dst) + size_t(r * a.K) * es;
      if (a.dtype == TC_DTYPE_F32) {
        quant::dequantize_row(a.fmt, src, reinterpret_cast<float*>(dst), a.K);
      } else {
        quant::dequantize_row(a.fmt, src, row.data(), a.K);
        narrow_row(a.dtype == TC_DTYPE_BF16, row.data(), reinterpret_cast<uint16_t*>(dst), a.K);
      }
    }
  });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
