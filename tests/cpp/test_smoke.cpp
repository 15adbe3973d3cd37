#include <gtest/gtest.h>

#include "tensorcore/tensorcore.h"

TEST(Smoke, InitAndShutdown) {
  tc_context ctx = nullptr;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  struct tc_device_info info;
  ASSERT_EQ(tc_device_info(ctx, &info), TC_OK);
  EXPECT_STREQ(info.family, "cpu");
  EXPECT_EQ(tc_shutdown(ctx), TC_OK);
}
