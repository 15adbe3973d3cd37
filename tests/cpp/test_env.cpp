// The spelling rule of on/off environment switches (core/env.h).
#include <gtest/gtest.h>
#include <stdlib.h>

#include "core/env.h"

TEST(Env, OnOffAndUnset) {
  const char* name = "TC_TEST_ENV_SWITCH";
  unsetenv(name);
  EXPECT_FALSE(tc::env_on(name));
  EXPECT_FALSE(tc::env_off(name));
  setenv(name, "", 1);
  EXPECT_FALSE(tc::env_on(name));
  EXPECT_FALSE(tc::env_off(name));
  for (const char* on : {"1", "yes", "on", "true", "2"}) {
    setenv(name, on, 1);
    EXPECT_TRUE(tc::env_on(name)) << on;
    EXPECT_FALSE(tc::env_off(name)) << on;
  }
  for (const char* off : {"0", "false", "OFF", "No"}) {
    setenv(name, off, 1);
    EXPECT_FALSE(tc::env_on(name)) << off;
    EXPECT_TRUE(tc::env_off(name)) << off;
  }
  unsetenv(name);
}
