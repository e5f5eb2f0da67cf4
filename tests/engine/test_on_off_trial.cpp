// engine/on_off_trial: epochs on, off, on, off, each scored after its warm-up, the better kept (on
// unless off wins by more than the margin), both tried again after the retrial epochs.
#include <gtest/gtest.h>

#include "engine/on_off_trial.hpp"

namespace hotcold {
namespace {

// Runs `tokens` decoded tokens through t, each scoring `on_rate` or `off_rate` (units a token: the
// numerator grows by the rate, the denominator by 1), and returns the state each token ran in.
std::vector<bool> drive(on_off_trial& t, int64_t tokens, double on_rate, double off_rate, double& num, double& den) {
  std::vector<bool> states;
  for (int64_t k = 0; k < tokens; ++k) {
    t.token(num, den);
    states.push_back(t.on());
    num += t.on() ? on_rate : off_rate, den += 1;
  }
  return states;
}

TEST(OnOffTrial, KeepsTheBetterWayAndTriesAgain) {
  const on_off_trial::rules r{4, 1, 3, 0.05, true};
  for (const auto& [on_rate, off_rate, keep_on] : {std::tuple{10.0, 9.0, true}, std::tuple{10.0, 10.4, true}, std::tuple{10.0, 11.0, false}}) {
    SCOPED_TRACE(off_rate);
    on_off_trial t(r);
    double num = 0, den = 0;
    const auto states = drive(t, 4 * 4, on_rate, off_rate, num, den);
    for (int64_t k = 0; k < 16; ++k) EXPECT_EQ(states[static_cast<size_t>(k)], (k / 4) % 2 == 0) << k;  // (on, off, on, off)
    EXPECT_EQ(t.tokens_on, 8);
    EXPECT_EQ(t.tokens_off, 8);
    // The fifth epoch's first token decides: each trial epoch's tokens after the first (warm-up).
    const auto next = drive(t, 3 * 4, on_rate, off_rate, num, den);
    EXPECT_NEAR(t.on_score, on_rate, 1e-12);
    EXPECT_NEAR(t.off_score, off_rate, 1e-12);
    for (bool s : next) EXPECT_EQ(s, keep_on);
    // After the retrial epochs, a new cycle starts on.
    const auto again = drive(t, 1, on_rate, off_rate, num, den);
    EXPECT_TRUE(again[0]);
    EXPECT_EQ(t.epoch, 0);
  }
  // An absolute margin (a hit rate's).
  on_off_trial a({4, 1, 3, 0.01, false});
  double num = 0, den = 0;
  drive(a, 17, 0.50, 0.505, num, den);
  EXPECT_TRUE(a.on());
  on_off_trial b({4, 1, 3, 0.01, false});
  num = 0, den = 0;
  drive(b, 17, 0.50, 0.52, num, den);
  EXPECT_FALSE(b.on());
}

}  // namespace
}  // namespace hotcold
