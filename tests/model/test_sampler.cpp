// Samplers on hand-computed probability vectors, alone and chained.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/sampler.hpp"

namespace hotcold {
namespace {



std::vector<candidate> from_probs(std::vector<double> p) {
  std::vector<candidate> c;
  for (size_t i = 0; i < p.size(); ++i) c.push_back({static_cast<token_id>(i), static_cast<float>(std::log(p[i]))});
  return c;
}

std::vector<token_id> ids(const std::vector<candidate>& c) {
  std::vector<token_id> out;
  for (const auto& x : c) out.push_back(x.id);
  return out;
}

TEST(Sampling, Softmax) {
  std::vector<candidate> c{{0, 1.0f}, {1, 2.0f}, {2, 3.0f}};
  sampling::softmax(c);
  EXPECT_EQ(ids(c), (std::vector<token_id>{2, 1, 0}));
  // e^x / (e + e^2 + e^3)
  EXPECT_NEAR(c[0].p, 0.665241, 1e-6);
  EXPECT_NEAR(c[1].p, 0.244728, 1e-6);
  EXPECT_NEAR(c[2].p, 0.090031, 1e-6);
}

TEST(Sampling, TopK) {
  std::vector<candidate> c{{0, 1.0f}, {1, 2.0f}, {2, 3.0f}, {3, 0.5f}};
  sampling::top_k(c, 2);
  EXPECT_EQ(ids(c), (std::vector<token_id>{2, 1}));
  sampling::top_k(c, 0);  // off
  EXPECT_EQ(c.size(), 2u);
}

TEST(Sampling, TopP) {
  auto c = from_probs({0.05, 0.5, 0.15, 0.3});
  sampling::top_p(c, 0.9f);  // 0.5, 0.8, 0.95: three tokens reach 0.9
  EXPECT_EQ(ids(c), (std::vector<token_id>{1, 3, 2}));
  c = from_probs({0.05, 0.5, 0.15, 0.3});
  sampling::top_p(c, 0.75f);
  EXPECT_EQ(ids(c), (std::vector<token_id>{1, 3}));
  c = from_probs({0.05, 0.5, 0.15, 0.3});
  sampling::top_p(c, 0.1f);  // the first token alone already passes: at least one is kept
  EXPECT_EQ(ids(c), (std::vector<token_id>{1}));
}

TEST(Sampling, MinP) {
  auto c = from_probs({0.05, 0.5, 0.15, 0.3});
  sampling::min_p(c, 0.25f);  // threshold 0.125
  EXPECT_EQ(ids(c), (std::vector<token_id>{1, 3, 2}));
  c = from_probs({0.05, 0.5, 0.15, 0.3});
  sampling::min_p(c, 0.7f);  // threshold 0.35
  EXPECT_EQ(ids(c), (std::vector<token_id>{1}));
}

TEST(Sampling, Temperature) {
  std::vector<candidate> c{{0, 2.0f}, {1, 4.0f}};
  sampling::temperature(c, 2.0f);
  EXPECT_EQ(c[0].logit, 1.0f);
  EXPECT_EQ(c[1].logit, 2.0f);
  sampling::softmax(c);  // e^2 / (e + e^2)
  EXPECT_NEAR(c[0].p, 0.731059, 1e-6);
}

TEST(Sampling, Penalties) {
  std::vector<candidate> c{{0, 3.0f}, {1, -1.0f}, {2, 3.0f}, {3, 1.0f}};
  std::vector<token_id> recent{0, 1, 0, 3};
  sampling::penalties(c, recent, 2.0f, 0.5f, 0.25f);
  EXPECT_FLOAT_EQ(c[0].logit, 3.0f / 2 - 2 * 0.5f - 0.25f);  // twice
  EXPECT_FLOAT_EQ(c[1].logit, -1.0f * 2 - 0.5f - 0.25f);     // negative logits are multiplied
  EXPECT_FLOAT_EQ(c[2].logit, 3.0f);                         // not seen
  EXPECT_FLOAT_EQ(c[3].logit, 1.0f / 2 - 0.5f - 0.25f);
}

TEST(Sampling, ChainDistribution) {
  // top-k 3 keeps {0.5, 0.3, 0.15}; top-p 0.9 keeps all three (0.526, 0.316, 0.158 renormalized);
  // min-p 0.5 (threshold 0.263) keeps two: final probabilities 0.625 and 0.375.
  sampling_params p;
  p.temperature = 1.0f;
  p.top_k = 3;
  p.top_p = 0.9f;
  p.min_p = 0.5f;
  p.seed = 42;
  sampler s(p);
  std::vector<float> logits;
  for (double q : {0.05, 0.5, 0.15, 0.3}) logits.push_back(static_cast<float>(std::log(q)));
  int n1 = 0, n3 = 0, other = 0;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) {
    token_id t = s.sample(logits);
    (t == 1 ? n1 : t == 3 ? n3 : other)++;
  }
  EXPECT_EQ(other, 0);
  EXPECT_NEAR(n1 / double(draws), 0.625, 0.01);
  EXPECT_NEAR(n3 / double(draws), 0.375, 0.01);
}

TEST(Sampling, TemperatureZeroIsGreedyAfterPenalties) {
  sampling_params p;
  p.temperature = 0.0f;
  p.repeat_penalty = 4.0f;
  sampler s(p);
  std::vector<float> logits{1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.sample(logits), 1);
  s.accept(1);  // 3 / 4 = 0.75 now loses to 2
  EXPECT_EQ(s.sample(logits), 2);
}

// Greedy without penalties reads the logits in place: the first of equal best logits wins, wherever
// it lies (in the sixteen-wide part or the tail), and NaNs never win unless the first logit is one.
TEST(Sampling, GreedyTakesTheFirstBestLogit) {
  sampling_params p;
  p.temperature = 0.0f;
  sampler s(p);
  for (size_t n : {1u, 5u, 16u, 37u, 32000u}) {
    std::vector<float> logits(n);
    for (size_t i = 0; i < n; ++i) logits[i] = std::sin(0.37f * static_cast<float>(i));
    const size_t want = std::max_element(logits.begin(), logits.end()) - logits.begin();  // the first maximum
    EXPECT_EQ(s.sample(logits), static_cast<token_id>(want)) << n;
    if (n < 37) continue;
    logits[n - 1] = 5.0f, logits[n - 3] = 5.0f;  // a tie in the tail: the earlier one
    EXPECT_EQ(s.sample(logits), static_cast<token_id>(n - 3)) << n;
    logits[20] = 5.0f;  // and before it, in the vectorized part
    EXPECT_EQ(s.sample(logits), 20) << n;
    logits[2] = std::nanf("");  // (a NaN is an error, never a token: Sampler.NanOrInfiniteLogitsAreAnError)
    EXPECT_THROW(s.sample(logits), logits_error) << n;
  }
}

TEST(Sampling, SeedMakesItReproducible) {
  sampling_params p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    sampler s(p);
    std::vector<token_id> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(logits));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// Logits with a NaN or +infinity cannot be sampled: an error naming the value and the token (greedy,
// sampled and constrained alike); -infinity (a masked token) is fine.
TEST(Sampler, NanOrInfiniteLogitsAreAnError) {
  for (float temperature : {0.0f, 0.8f}) {
    sampling_params params;
    params.temperature = temperature;
    sampler s(params);
    std::vector<float> logits{0.5f, -INFINITY, 2.0f, 1.0f};
    EXPECT_EQ(s.sample(logits), 2);
    logits[3] = NAN;
    try {
      s.sample(logits);
      ADD_FAILURE() << "sampled from a NaN";
    } catch (const logits_error& e) {
      EXPECT_NE(std::string(e.what()).find("a logit of nan (token 3)"), std::string::npos) << e.what();
    }
    logits[3] = INFINITY;
    EXPECT_THROW(s.sample(logits), logits_error);
  }
}

}  // namespace
}  // namespace hotcold
