// The switch registry through the C ABI (tensorcore/config.h): the spelling
// rule of bools, enums and ranges, the warning for a value a switch does not
// accept, and TC_CPU_ISA capping what the CPU backend reports.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>

#include "tensorcore/tensorcore.h"

namespace {

struct Value {
  int64_t number = -1;
  std::string text;
  bool from_env = false;
};

Value get(const char* name) {
  Value v;
  const char* text = nullptr;
  int32_t from_env = 0;
  EXPECT_EQ(tc_config_get(name, &v.number, &text, &from_env), TC_OK) << name;
  v.text = text ? text : "";
  v.from_env = from_env != 0;
  return v;
}

// Restores a variable after a test.
struct Restore {
  const char* name;
  std::string old;
  bool had;
  explicit Restore(const char* n) : name(n), had(getenv(n) != nullptr) {
    if (had) old = getenv(n);
  }
  ~Restore() {
    if (had) setenv(name, old.c_str(), 1);
    else unsetenv(name);
  }
};

}  // namespace

TEST(Config, BoolSpellingAndUnset) {
  Restore r("TC_CUDA_PDL");  // per call, default on
  unsetenv("TC_CUDA_PDL");
  EXPECT_EQ(get("TC_CUDA_PDL").number, 1);
  EXPECT_FALSE(get("TC_CUDA_PDL").from_env);
  setenv("TC_CUDA_PDL", "", 1);
  EXPECT_EQ(get("TC_CUDA_PDL").number, 1);
  for (const char* off : {"0", "false", "OFF", "No"}) {
    setenv("TC_CUDA_PDL", off, 1);
    EXPECT_EQ(get("TC_CUDA_PDL").number, 0) << off;
    EXPECT_TRUE(get("TC_CUDA_PDL").from_env) << off;
  }
  for (const char* on : {"1", "yes", "On", "true"}) {
    setenv("TC_CUDA_PDL", on, 1);
    EXPECT_EQ(get("TC_CUDA_PDL").number, 1) << on;
  }
}

TEST(Config, UnknownValueWarnsOnceAndGivesTheDefault) {
  Restore r("TC_CUDA_PDL");
  setenv("TC_CUDA_PDL", "maybe", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(get("TC_CUDA_PDL").number, 1);
  EXPECT_FALSE(get("TC_CUDA_PDL").from_env);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("TC_CUDA_PDL=maybe"), std::string::npos) << err;
  EXPECT_NE(err.find("0/false/off/no"), std::string::npos) << err;
  EXPECT_EQ(err.find("TC_CUDA_PDL=maybe"), err.rfind("TC_CUDA_PDL=maybe")) << "warned twice: " << err;
}

TEST(Config, EnumNamesTheAllowedValues) {
  Restore r("TC_CPU_ISA");
  setenv("TC_CPU_ISA", "avx9", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(get("TC_CPU_ISA").text, "amx");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("TC_CPU_ISA=avx9"), std::string::npos) << err;
  EXPECT_NE(err.find("portable|avx2|avx_vnni|avx512|avx512_vnni|avx512_bf16|amx"), std::string::npos) << err;
  const char* names[] = {"portable", "avx2", "avx_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"};
  for (int i = 0; i < 7; ++i) {
    setenv("TC_CPU_ISA", names[i], 1);
    EXPECT_EQ(get("TC_CPU_ISA").number, i) << names[i];
  }
}

TEST(Config, IntRange) {
  Restore r("TC_DIST_TIMEOUT_MS");  // per call
  unsetenv("TC_DIST_TIMEOUT_MS");
  EXPECT_EQ(get("TC_DIST_TIMEOUT_MS").number, 120000);
  setenv("TC_DIST_TIMEOUT_MS", "5000", 1);
  EXPECT_EQ(get("TC_DIST_TIMEOUT_MS").number, 5000);
  testing::internal::CaptureStderr();
  for (const char* bad : {"0", "-3", "12x", "99999999999999999999"}) {
    setenv("TC_DIST_TIMEOUT_MS", bad, 1);
    EXPECT_EQ(get("TC_DIST_TIMEOUT_MS").number, 120000) << bad;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("TC_DIST_TIMEOUT_MS=12x"), std::string::npos) << err;
}

TEST(Config, PortableCapsTheReportedFeatures) {
  Restore r("TC_CPU_ISA");
  tc_context ctx;
  ASSERT_EQ(tc_init_device("cpu", &ctx), TC_OK);
  struct tc_device_info info;
  setenv("TC_CPU_ISA", "portable", 1);
  ASSERT_EQ(tc_device_info(ctx, &info), TC_OK);
  EXPECT_STREQ(info.features, "");
  setenv("TC_CPU_ISA", "avx512", 1);
  ASSERT_EQ(tc_device_info(ctx, &info), TC_OK);
  const std::string f = std::string(",") + info.features + ",";
  EXPECT_EQ(f.find(",avx512_vnni,"), std::string::npos) << f;
  EXPECT_EQ(f.find(",avx512_bf16,"), std::string::npos) << f;
  EXPECT_EQ(f.find(",amx_int8,"), std::string::npos) << f;
  EXPECT_EQ(tc_shutdown(ctx), TC_OK);
}

TEST(Config, EveryNameIsDeclaredOnce) {
  const int32_t n = tc_config_count();
  ASSERT_GT(n, 20);
  for (int32_t i = 0; i < n; ++i) {
    struct tc_config_switch s;
    ASSERT_EQ(tc_config_at(i, &s), TC_OK);
    for (int32_t j = 0; j < i; ++j) {
      struct tc_config_switch t;
      ASSERT_EQ(tc_config_at(j, &t), TC_OK);
      EXPECT_STRNE(s.name, t.name);
    }
    EXPECT_GT(std::strlen(s.description), 10u) << s.name;
  }
  struct tc_config_switch s;
  EXPECT_EQ(tc_config_at(n, &s), TC_ERR_INVALID_ARG);
  EXPECT_EQ(tc_config_get("TC_NOT_A_SWITCH", nullptr, nullptr, nullptr), TC_ERR_INVALID_ARG);
}
