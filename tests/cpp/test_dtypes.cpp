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
    EXPECT_EQ(simpler_dtype_size(d.simpler), d.bytes) << d.name;
    EXPECT_TRUE(simpler_seen.insert(d.simpler).second) << d.name;
    if (d.tc < 0) continue;
    EXPECT_TRUE(tc_seen.insert(d.tc).second) << d.name;
    EXPECT_EQ(std::string(tc_dtype_name(d.tc)), d.name);
    EXPECT_EQ(tc::dtype_size(d.tc), d.bytes) << d.name;
    EXPECT_EQ(tc::tc_from_simpler(d.simpler), d.tc) << d.name;
    EXPECT_EQ(tc::simpler_from_tc(d.tc), d.simpler) << d.name;
  }
  EXPECT_EQ(simpler_seen.size(), size_t(SIMPLER_DT_COUNT));
  EXPECT_EQ(tc_seen, (std::set<int32_t>{TC_DTYPE_F16, TC_DTYPE_BF16, TC_DTYPE_F32, TC_DTYPE_I8, TC_DTYPE_I32,
                                        TC_DTYPE_F64}));
  EXPECT_EQ(simpler_dtype_size(SIMPLER_DT_COUNT), 0u);
  EXPECT_EQ(tc::dtype_size(42), 0u);
  EXPECT_EQ(tc::tc_from_simpler(SIMPLER_DT_BOOL), -1);
  EXPECT_STREQ(tc_dtype_name(42), "unknown");
}
