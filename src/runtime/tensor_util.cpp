// The overlap test works in bytes. A view with byte strides B_k, extents n_k
// and byte offset O covers the set
//     { O + sum_k i_k B_k + j : 0 <= i_k < n_k, 0 <= j < e }      (e = element bytes)
// i.e. one more "dimension" of stride 1 and extent e. When the strides of
// both views, pooled and sorted descending (S_0 > S_1 > ... > S_m = 1), each
// divide the previous one, and each view's offset splits as
//     O = sum_k c_k S_k   with   (c_k + n_k) S_k <= S_{k-1}  for k >= 1
// (a dimension a view lacks has extent 1), then each view is the box
// prod_k [c_k, c_k + n_k) in mixed radix and two views overlap iff their
// intervals meet in every dimension. Otherwise the test falls back to the
// bounding byte ranges, which can only add dependencies, never drop one.
#include "runtime/tensor_util.h"

#include "core/dtypes.h"

#include <algorithm>
#include <cstdio>

namespace simpler {

const char* dtype_name(int32_t dtype) {
  const tc::DtypeInfo* d = tc::dtype_of_simpler(dtype);
  return d ? d->name : "dtype?";
}

uint64_t numel(const ChipTensor& t) {
  uint64_t n = 1;
  for (uint32_t k = 0; k < t.ndims && k < SIMPLER_MAX_TENSOR_DIMS; k++) n *= t.shapes[k];
  return n;
}

bool check_view(const ChipTensor& t, std::string* why) {
  char buf[256];
  if (t.ndims < 1 || t.ndims > SIMPLER_MAX_TENSOR_DIMS) {
    std::snprintf(buf, sizeof buf, "ndims = %u (must be 1..%d)", t.ndims, SIMPLER_MAX_TENSOR_DIMS);
    *why = buf;
    return false;
  }
  if (elem_size(t) == 0) {
    std::snprintf(buf, sizeof buf, "unknown dtype %d", static_cast<int>(t.dtype));
    *why = buf;
    return false;
  }
  uint64_t last = t.start_offset;  // offset of the last element, in elements
  bool empty = false;
  for (uint32_t k = 0; k < t.ndims; k++) {
    if (t.strides[k] < 0) {
      std::snprintf(buf, sizeof buf, "stride[%u] = %lld is negative", k, (long long)t.strides[k]);
      *why = buf;
      return false;
    }
    if (t.shapes[k] == 0) empty = true;
    uint64_t step;
    if (t.shapes[k] > 0 &&
        (__builtin_mul_overflow(uint64_t(t.shapes[k] - 1), uint64_t(t.strides[k]), &step) ||
         __builtin_add_overflow(last, step, &last))) {
      *why = "the view's extent overflows 64 bits";
      return false;
    }
  }
  if (empty) return true;
  uint64_t end;
  if (__builtin_add_overflow(last, 1, &end) || __builtin_mul_overflow(end, uint64_t(elem_size(t)), &end)) {
    *why = "the view's extent overflows 64 bits";
    return false;
  }
  if (end > t.buffer.size) {
    std::snprintf(buf, sizeof buf, "the view reaches byte %llu but its allocation has %llu bytes",
                  (unsigned long long)end, (unsigned long long)t.buffer.size);
    *why = buf;
    return false;
  }
  return true;
}

ByteRange byte_range(const ChipTensor& t) {
  const uint64_t e = elem_size(t);
  uint64_t last = t.start_offset;
  for (uint32_t k = 0; k < t.ndims; k++) {
    if (t.shapes[k] == 0) return {t.start_offset * e, t.start_offset * e};
    last += uint64_t(t.shapes[k] - 1) * uint64_t(t.strides[k]);
  }
  return {t.start_offset * e, (last + 1) * e};
}

bool is_contiguous(const ChipTensor& t) {
  const ByteRange r = byte_range(t);
  return r.hi - r.lo == numel(t) * elem_size(t);
}

const char* overlap_name(Overlap o) {
  switch (o) {
    case Overlap::None: return "none";
    case Overlap::Exact: return "exact";
    case Overlap::Range: return "range";
    case Overlap::Box: return "box";
    case Overlap::Bounding: return "bounding";
  }
  return "?";
}

namespace {

constexpr int kMaxLevels = 2 * SIMPLER_MAX_TENSOR_DIMS + 1;

struct Levels {
  uint64_t stride[kMaxLevels];
  int n = 0;
  void add(uint64_t s) {
    for (int i = 0; i < n; i++)
      if (stride[i] == s) return;
    stride[n++] = s;
  }
};

// Splits the view over the pooled strides; false when it is not a box there.
bool to_box(const ChipTensor& t, const Levels& lv, uint64_t* lo, uint64_t* ext) {
  const uint64_t e = elem_size(t);
  for (int i = 0; i < lv.n; i++) ext[i] = 1;
  for (uint32_t k = 0; k < t.ndims; k++) {
    if (t.shapes[k] <= 1) continue;
    const uint64_t s = uint64_t(t.strides[k]) * e;
    for (int i = 0; i < lv.n; i++)
      if (lv.stride[i] == s) {
        if (ext[i] != 1) return false;  // two dimensions of one stride
        ext[i] = t.shapes[k];
      }
  }
  for (int i = 0; i < lv.n; i++)
    if (lv.stride[i] == 1) ext[i] = ext[i] == 1 ? e : ext[i] * e;  // stride-1 bytes form the element
  uint64_t rem = t.start_offset * e;
  for (int i = 0; i < lv.n; i++) {
    lo[i] = rem / lv.stride[i];
    rem %= lv.stride[i];
    if (i > 0 && (lo[i] + ext[i]) * lv.stride[i] > lv.stride[i - 1]) return false;
  }
  return true;
}

bool same_view(const ChipTensor& a, const ChipTensor& b) {
  if (a.ndims != b.ndims || a.start_offset != b.start_offset || elem_size(a) != elem_size(b)) return false;
  for (uint32_t k = 0; k < a.ndims; k++)
    if (a.shapes[k] != b.shapes[k] || (a.shapes[k] > 1 && a.strides[k] != b.strides[k])) return false;
  return true;
}

}  // namespace

Overlap overlap(const ChipTensor& a, const ByteRange& ra, const ChipTensor& b, const ByteRange& rb) {
  if (ra.lo == ra.hi || rb.lo == rb.hi) return Overlap::None;
  if (ra.hi <= rb.lo || rb.hi <= ra.lo) return Overlap::None;
  if (same_view(a, b)) return Overlap::Exact;
  if (is_contiguous(a) && is_contiguous(b)) return Overlap::Range;
  Levels lv;
  for (const ChipTensor* t : {&a, &b})
    for (uint32_t k = 0; k < t->ndims; k++)
      if (t->shapes[k] > 1) {
        if (t->strides[k] == 0) return Overlap::Bounding;
        lv.add(uint64_t(t->strides[k]) * elem_size(*t));
      }
  lv.add(1);
  std::sort(lv.stride, lv.stride + lv.n, [](uint64_t x, uint64_t y) { return x > y; });
  for (int i = 1; i < lv.n; i++)
    if (lv.stride[i - 1] % lv.stride[i] != 0) return Overlap::Bounding;
  uint64_t alo[kMaxLevels], aext[kMaxLevels], blo[kMaxLevels], bext[kMaxLevels];
  if (!to_box(a, lv, alo, aext) || !to_box(b, lv, blo, bext)) return Overlap::Bounding;
  for (int i = 0; i < lv.n; i++)
    if (alo[i] + aext[i] <= blo[i] || blo[i] + bext[i] <= alo[i]) return Overlap::None;
  return Overlap::Box;
}

std::string describe(const ChipTensor& t) {
  char buf[256];
  int n = std::snprintf(buf, sizeof buf, "%s[", dtype_name(static_cast<int32_t>(t.dtype)));
  for (uint32_t k = 0; k < t.ndims && k < SIMPLER_MAX_TENSOR_DIMS; k++)
    n += std::snprintf(buf + n, sizeof buf - n, k ? "x%u" : "%u", t.shapes[k]);
  std::snprintf(buf + n, sizeof buf - n, "]@+%llu of 0x%llx (%llu B)", (unsigned long long)t.start_offset,
                (unsigned long long)t.buffer.addr, (unsigned long long)t.buffer.size);
  return buf;
}

}  // namespace simpler
