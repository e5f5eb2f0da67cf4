// replay --experts-cached: a mixture's routings through a device cache of C experts a layer, under
// LRU, LFU with decay and a fixed popular set, on a routing whose answers are worked out by hand.
#include <gtest/gtest.h>

#include <stdexcept>

#include "tools/expert_cache.hpp"

namespace hotcold::tools {
namespace {

// One layer of four experts, one a token: A six times, then B, C alternating ten times each.
activation_record a_then_b_c() {
  activation_record rec;
  rec.n_layer = 1, rec.n_ff = 4, rec.source = "by hand";
  std::vector<int> seq(6, 0);
  for (int i = 0; i < 10; ++i) seq.push_back(1), seq.push_back(2);
  int64_t step = 0;
  for (int e : seq) rec.entries.push_back({step++, 0, 1, {static_cast<uint8_t>(1u << e)}});
  return rec;
}

TEST(ExpertCache, PoliciesOnAKnownRouting) {
  const auto rec = a_then_b_c();
  // LRU, two experts: A misses once then hits five times; B and C miss once each (C evicts A, the
  // least recently used), then hit nine times each: 23 of 26, three uploads.
  const auto lru = replay_expert_cache(rec, expert_policy::lru, 2);
  EXPECT_EQ(lru.tokens, 26);
  EXPECT_DOUBLE_EQ(lru.hit_rate, 23.0 / 26.0);
  EXPECT_DOUBLE_EQ(lru.uploads_per_token, 3.0 / 26.0);
  // Popular: B and C were chosen ten times each, A six: {B, C} held throughout, A never: 20 of 26.
  const auto popular = replay_expert_cache(rec, expert_policy::popular, 2);
  EXPECT_DOUBLE_EQ(popular.hit_rate, 20.0 / 26.0);
  EXPECT_EQ(popular.uploads_per_token, 0.0);
  // LFU with decay keeps the once-frequent A while B and C take turns evicting each other, until A's
  // count has decayed below theirs: fewer hits than LRU here, more uploads.
  const auto lfu = replay_expert_cache(rec, expert_policy::lfu_decay, 2);
  EXPECT_LT(lfu.hit_rate, lru.hit_rate);
  EXPECT_GT(lfu.uploads_per_token, lru.uploads_per_token);
  EXPECT_GT(lfu.hit_rate, 5.0 / 26.0);
  // Room for every expert: only the first use of each misses.
  EXPECT_DOUBLE_EQ(replay_expert_cache(rec, expert_policy::lru, 4).hit_rate, 23.0 / 26.0);
  EXPECT_THROW(replay_expert_cache(rec, expert_policy::lru, 5), std::invalid_argument);
  EXPECT_THROW(replay_expert_cache(rec, expert_policy::lru, 0), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold::tools
