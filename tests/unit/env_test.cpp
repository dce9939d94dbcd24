// support/env.h: the one parser of settings in the environment.
#include "support/env.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace fusec {
namespace {

using test::errorOf;
using test::ScopedEnv;

constexpr const char* kName = "FUSEC_ENV_TEST_SETTING";

TEST(Env, UnsetOrEmptyIsTheFallback) {
  unsetenv(kName);
  EXPECT_FALSE(envSet(kName));
  EXPECT_EQ(envCount(kName, 7, 100), 7);
  EXPECT_TRUE(envSwitch(kName, true));
  EXPECT_EQ(envInt(kName, -3, -10, 10), -3);
  EXPECT_EQ(envPositive(kName, 2.5), 2.5);
  // `NAME=` clears a setting in the shell: the fallback too, not an error.
  ScopedEnv empty(kName, "");
  EXPECT_FALSE(envSet(kName));
  EXPECT_EQ(envCount(kName, 7, 100), 7);
  EXPECT_FALSE(envSwitch(kName, false));
  EXPECT_EQ(envInt(kName, -3, -10, 10), -3);
  EXPECT_EQ(envPositive(kName, 2.5), 2.5);
}

TEST(Env, CountsAndSwitches) {
  {
    ScopedEnv v(kName, "0");
    EXPECT_FALSE(envSwitch(kName, true));
    EXPECT_EQ(envCount(kName, 5, 9), 0);
  }
  {
    ScopedEnv v(kName, "1");
    EXPECT_TRUE(envSet(kName));
    EXPECT_TRUE(envSwitch(kName, false));
  }
  {
    ScopedEnv v(kName, "65535");
    EXPECT_EQ(envCount(kName, 0, 65535), 65535);
    EXPECT_EQ(errorOf([] { envCount(kName, 0, 65534); }),
              "FUSEC_ENV_TEST_SETTING must be a whole number from 0 to 65534, got '65535'");
  }
  for (const char* bad : {"yes", "2", "-1", " 1", "1.0", "on"}) {
    ScopedEnv v(kName, bad);
    EXPECT_EQ(errorOf([] { envSwitch(kName, true); }), std::string(kName) + " must be 0 or 1, got '" + bad + "'") << bad;
  }
  ScopedEnv huge(kName, "99999999999999999999999");
  EXPECT_EQ(errorOf([] { envCount(kName, 0, int64_t(1) << 31); }),
            std::string(kName) + " must be a whole number from 0 to 2147483648, got '99999999999999999999999'");
}

TEST(Env, IntegersAndPositiveNumbers) {
  {
    ScopedEnv v(kName, "-4");
    EXPECT_EQ(envInt(kName, 0, -10, 10), -4);
    EXPECT_EQ(errorOf([] { envInt(kName, 0, 0, 3); }), std::string(kName) + " must be an integer in 0..3, got '-4'");
    EXPECT_EQ(errorOf([] { envPositive(kName, 1); }), std::string(kName) + " must be a number above 0, got '-4'");
  }
  {
    ScopedEnv v(kName, "0.25");
    EXPECT_EQ(envPositive(kName, 1), 0.25);
    EXPECT_EQ(errorOf([] { envInt(kName, 0, 0, 3); }), std::string(kName) + " must be an integer in 0..3, got '0.25'");
  }
  ScopedEnv v(kName, "12s");
  EXPECT_EQ(errorOf([] { envPositive(kName, 1); }), std::string(kName) + " must be a number above 0, got '12s'");
}

}  // namespace
}  // namespace fusec
