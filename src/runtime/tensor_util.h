// Geometry of ChipTensor views: validity, the bytes a view can touch, and
// whether two views of one allocation overlap.
#pragma once

#include <cstdint>
#include <string>

#include "simpler/tensor.h"

namespace simpler {

inline uint32_t elem_size(const ChipTensor& t) { return simpler_dtype_size(static_cast<int32_t>(t.dtype)); }
const char* dtype_name(int32_t dtype);
uint64_t numel(const ChipTensor& t);

// Byte range [lo, hi) relative to buffer.addr that holds every element of
// the view; lo == hi for an empty view.
struct ByteRange {
  uint64_t lo = 0, hi = 0;
};

// Checks ndims, dtype, strides and that the view lies within
// [0, buffer.size); on failure returns false with the reason.
bool check_view(const ChipTensor& t, std::string* why);
// Only valid after check_view succeeded.
ByteRange byte_range(const ChipTensor& t);
// True when the view's elements fill its byte range with no gaps.
bool is_contiguous(const ChipTensor& t);

// How two views of one allocation were found to overlap.
enum class Overlap {
  None,
  Exact,     // the same elements
  Range,     // both contiguous and their ranges intersect
  Box,       // per-dimension boxes intersect in every dimension
  Bounding,  // bounding ranges intersect and no finer test applies (conservative)
};
const char* overlap_name(Overlap o);

// Exact where both views decompose into boxes over a common set of nested
// strides, else conservative (Bounding). a and b must be valid views.
Overlap overlap(const ChipTensor& a, const ByteRange& ra, const ChipTensor& b, const ByteRange& rb);

// A short text of a view for messages: "f32[4x8]@+128 of 0x7f..(4096 B)".
std::string describe(const ChipTensor& t);

}  // namespace simpler
