// The one dtype table (src/core/dtypes.h) against both public headers: the
// numbers are ABI on each side, so the table must describe them exactly.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/dtypes.h"
#include "simpler/tensor.h"
#include "tensorcore/tensorcore.h"

TEST(Dtypes, TableAgreesWithBothHeaders) {
  std::set<int32_t> tc_seen, simpler_seen;
  for (const tc::DtypeInfo& d : tc::kDtypes) {
    if (d.simpler >= 0) {
      EXPECT_EQ(simpler_dtype_size(d.simpler), d.bytes) << d.name;
      EXPECT_TRUE(simpler_seen.insert(d.simpler).second) << d.name;
    }
    if (d.tc < 0) continue;
    EXPECT_TRUE(tc_seen.insert(d.tc).second) << d.name;
    EXPECT_EQ(std::string(tc_dtype_name(d.tc)), d.name);
    // A block type has no per-element size: only whole blocks have bytes.
    EXPECT_EQ(tc::dtype_size(d.tc), d.block == 1 ? d.bytes : 0u) << d.name;
    EXPECT_EQ(tc::dtype_bytes(d.tc, 3 * int64_t(d.block)), 3u * d.bytes) << d.name;
    EXPECT_EQ(tc::tc_from_simpler(d.simpler), d.simpler < 0 ? -1 : d.tc) << d.name;
    EXPECT_EQ(tc::simpler_from_tc(d.tc), d.simpler) << d.name;
  }
  EXPECT_EQ(simpler_seen.size(), size_t(SIMPLER_DT_COUNT));
  EXPECT_EQ(tc_seen, (std::set<int32_t>{TC_DTYPE_F16, TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_I8, TC_DTYPE_I32,
                                        TC_DTYPE_F64, TC_DTYPE_Q8_0}));
  EXPECT_STREQ(tc_dtype_name(TC_DTYPE_Q8_0), "q8_0");
  EXPECT_EQ(tc::dtype_block(TC_DTYPE_Q8_0), 32);
  EXPECT_EQ(tc::tc_from_simpler(-1), -1);
  EXPECT_EQ(simpler_dtype_size(SIMPLER_DT_COUNT), 0u);
  EXPECT_EQ(tc::dtype_size(42), 0u);
  EXPECT_EQ(tc::tc_from_simpler(SIMPLER_DT_BOOL), -1);
  EXPECT_STREQ(tc_dtype_name(42), "unknown");
}
