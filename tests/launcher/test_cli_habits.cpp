// A llama.cpp user's habits at the `hotcold` command line (docs/for-llama-cpp-users.md), and the
// command-line defects a hostile probe found: each a case that failed before.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/launcher/cli_run.hpp"

namespace hotcold::test {
namespace {

// --seed as llama.cpp takes it: -1 is a random seed (drawn and printed, as when none is given); 2^64
// and beyond, or below -1, are refused naming the flag (they were clamped to 2^64 - 1 silently).
TEST(CliHabits, SeedMinusOneIsRandomAndTooLargeIsRefused) {
  const std::vector<std::string> base{"run", "-m", small_model(), "-p", "Once", "-n", "4", "--temp", "1"};
  auto with = [&](const std::string& seed) {
    auto a = base;
    a.insert(a.end(), {"--seed", seed});
    return run(a);
  };
  const auto random = with("-1");
  EXPECT_EQ(random.code, 0) << random.err;
  EXPECT_NE(random.err.find("hotcold: seed "), std::string::npos) << random.err;
  const auto largest = with("18446744073709551615");
  EXPECT_EQ(largest.code, 0) << largest.err;
  EXPECT_EQ(largest.err.find("hotcold: seed "), std::string::npos) << "a seed given is not printed: " << largest.err;
  EXPECT_EQ(with("18446744073709551615").out, largest.out);
  for (const char* bad : {"18446744073709551616", "99999999999999999999999", "-2", "1.5"}) {
    const auto r = with(bad);
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find(std::string("--seed: '") + bad + "' is not a seed"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace hotcold::test
