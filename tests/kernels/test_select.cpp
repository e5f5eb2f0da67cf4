// The predictor's choice kernel against its scalar reference and against the rule itself.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/select.hpp"

namespace hotcold::kernels {
namespace {

// Every length 0..80 and a layer's 5632 (vector steps and tails), thresholds that choose none, some
// and all, ties at the threshold and NaN scores.
TEST(Select, ChoosesTheScoresAtLeastTheThresholdInOrder) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 80; ++n) lengths.push_back(n);
  lengths.push_back(5632);
  for (int64_t n : lengths)
    for (float threshold : {-1e30f, -0.5f, 0.0f, 0.8f, 1e30f}) {
      std::vector<float> s(static_cast<size_t>(n));
      for (auto& v : s) v = normal(rng);
      if (n > 3) s[1] = threshold, s[2] = std::numeric_limits<float>::quiet_NaN(), s[3] = std::nextafter(threshold, -INFINITY);
      std::vector<uint8_t> chosen(static_cast<size_t>(n), 9), chosen_ref(static_cast<size_t>(n), 9);
      std::vector<int32_t> ids(static_cast<size_t>(n + 16), -1), ids_ref(static_cast<size_t>(n + 16), -1);
      const int64_t count = select_at_least(s.data(), n, threshold, chosen.data(), ids.data());
      const int64_t count_ref = select_at_least_scalar(s.data(), n, threshold, chosen_ref.data(), ids_ref.data());
      SCOPED_TRACE(testing::Message() << "n " << n << ", threshold " << threshold);
      std::vector<int32_t> want;
      for (int64_t i = 0; i < n; ++i) {
        const bool c = s[static_cast<size_t>(i)] >= threshold;
        if (c) want.push_back(static_cast<int32_t>(i));
        ASSERT_EQ(chosen[static_cast<size_t>(i)], c ? 1 : 0) << "score " << i;
        ASSERT_EQ(chosen_ref[static_cast<size_t>(i)], c ? 1 : 0) << "score " << i;
      }
      ASSERT_EQ(count, static_cast<int64_t>(want.size()));
      ASSERT_EQ(count_ref, static_cast<int64_t>(want.size()));
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_EQ(ids[k], want[k]) << "id " << k;
        ASSERT_EQ(ids_ref[k], want[k]) << "id " << k;
      }
      if (n > 3) {
        EXPECT_EQ(chosen[1], 1);  // a tie is chosen
        EXPECT_EQ(chosen[2], 0);  // NaN is not
        EXPECT_EQ(chosen[3], 0);  // just under is not
      }
    }
}

}  // namespace
}  // namespace hotcold::kernels
