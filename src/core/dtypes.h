// The element types of both runtimes in one table: tensorcore's TC_DTYPE_*
// (include/tensorcore/types.h) and simpler's SIMPLER_DT_* (include/simpler/
// tensor.h) number them differently, and both numberings are ABI. Sizes,
// names and the translation between the two come from here; the
// static_asserts below and tests/cpp/test_dtypes.cpp hold the headers to it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "simpler/tensor.h"
#include "tensorcore/types.h"

namespace tc {

struct DtypeInfo {
  const char* name;  // as tc_dtype_name and simpler's messages spell it
  uint32_t bytes;    // per element, or per block of a block type
  int32_t tc;        // TC_DTYPE_*, -1 where tensorcore has no such type
  int32_t simpler;   // SIMPLER_DT_*, -1 where simpler has no such type
  uint32_t block = 1;  // elements per block: 1, or QK8_0 = 32 for TC_DTYPE_Q8_0 (quant::BlockQ8_0)
};

inline constexpr DtypeInfo kDtypes[] = {
    {"f16", 2, TC_DTYPE_F16, SIMPLER_DT_FLOAT16},  {"bf16", 2, TC_DTYPE_BF16, SIMPLER_DT_BFLOAT16},
    {"f32", 4, TC_DTYPE_F32, SIMPLER_DT_FLOAT32},  {"i8", 1, TC_DTYPE_I8, SIMPLER_DT_INT8},
    {"i32", 4, TC_DTYPE_I32, SIMPLER_DT_INT32},    {"f64", 8, TC_DTYPE_F64, SIMPLER_DT_FLOAT64},
    {"i16", 2, -1, SIMPLER_DT_INT16},              {"i64", 8, -1, SIMPLER_DT_INT64},
    {"u8", 1, -1, SIMPLER_DT_UINT8},               {"u16", 2, -1, SIMPLER_DT_UINT16},
    {"u32", 4, -1, SIMPLER_DT_UINT32},             {"u64", 8, -1, SIMPLER_DT_UINT64},
    {"bool", 1, -1, SIMPLER_DT_BOOL},              {"q8_0", 34, TC_DTYPE_Q8_0, -1, 32},
};
inline constexpr size_t kDtypeCount = sizeof kDtypes / sizeof kDtypes[0];

// Index in kDtypes, or -1. (Indices rather than pointers: GCC's
// UndefinedBehaviorSanitizer makes a pointer's null test non-constant, which
// would break the static_asserts below in a sanitizer build.)
constexpr int index_of_tc(int32_t tc) {
  for (size_t i = 0; i < kDtypeCount; ++i)
    if (kDtypes[i].tc >= 0 && kDtypes[i].tc == tc) return int(i);
  return -1;
}
constexpr int index_of_simpler(int32_t simpler) {
  for (size_t i = 0; i < kDtypeCount; ++i)
    if (kDtypes[i].simpler >= 0 && kDtypes[i].simpler == simpler) return int(i);
  return -1;
}
constexpr const DtypeInfo* dtype_of_tc(int32_t tc) { return index_of_tc(tc) < 0 ? nullptr : &kDtypes[index_of_tc(tc)]; }
constexpr const DtypeInfo* dtype_of_simpler(int32_t simpler) {
  return index_of_simpler(simpler) < 0 ? nullptr : &kDtypes[index_of_simpler(simpler)];
}

// Bytes per element of a TC_DTYPE_*; 0 for a value outside the table and
// for a block type (TC_DTYPE_Q8_0), which has no per-element size, so every
// path sized by elements refuses it.
constexpr size_t dtype_size(int32_t tc) {
  const int i = index_of_tc(tc);
  return i < 0 ? 0 : kDtypes[i].block == 1 ? kDtypes[i].bytes : 0;
}
// Elements per block (1 for the plain types; 0 outside the table).
constexpr int64_t dtype_block(int32_t tc) { return index_of_tc(tc) < 0 ? 0 : kDtypes[index_of_tc(tc)].block; }
// Bytes of n consecutive elements of any TC_DTYPE_* in the table, n a
// multiple of its block (block types: whole blocks).
constexpr size_t dtype_bytes(int32_t tc, int64_t n) {
  const int i = index_of_tc(tc);
  return i < 0 ? 0 : size_t(n / kDtypes[i].block) * kDtypes[i].bytes;
}

// simpler's number of a tensorcore dtype and back; -1 where there is none.
constexpr int32_t simpler_from_tc(int32_t tc) { return index_of_tc(tc) < 0 ? -1 : kDtypes[index_of_tc(tc)].simpler; }
constexpr int32_t tc_from_simpler(int32_t simpler) {
  return index_of_simpler(simpler) < 0 ? -1 : kDtypes[index_of_simpler(simpler)].tc;
}

namespace dtypes_check {
constexpr bool simpler_numbers_are_the_table() {
  size_t with_simpler = 0;
  for (size_t i = 0; i < kDtypeCount; ++i) with_simpler += kDtypes[i].simpler >= 0;
  if (with_simpler != size_t(SIMPLER_DT_COUNT)) return false;
  for (int32_t i = 0; i < SIMPLER_DT_COUNT; ++i)
    if (index_of_simpler(i) < 0) return false;
  return true;
}
constexpr bool tc_numbers_are_the_table() {
  for (int32_t i = TC_DTYPE_F16; i <= TC_DTYPE_F64; ++i)
    if (index_of_tc(i) < 0) return false;
  return index_of_tc(TC_DTYPE_Q8_0) >= 0;
}
}  // namespace dtypes_check
static_assert(dtypes_check::simpler_numbers_are_the_table(), "every SIMPLER_DT_* is in kDtypes once");
static_assert(dtypes_check::tc_numbers_are_the_table(), "every TC_DTYPE_* is in kDtypes");
static_assert(tc_from_simpler(SIMPLER_DT_BFLOAT16) == TC_DTYPE_BF16 && simpler_from_tc(TC_DTYPE_F32) == SIMPLER_DT_FLOAT32,
              "the two numberings translate through kDtypes");
static_assert(dtype_size(TC_DTYPE_Q8_0) == 0 && dtype_bytes(TC_DTYPE_Q8_0, 64) == 68 && dtype_bytes(TC_DTYPE_F16, 3) == 6,
              "block types have whole-block sizes only");

}  // namespace tc
