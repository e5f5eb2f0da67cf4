// The block attention kernel against a double-precision causal attention written out in full.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {
namespace {

struct case_data {
  int64_t hd, stride, pos0;
  int nq;
  std::vector<float> q, k, v;
};

case_data make_case(int64_t hd, int64_t stride, int64_t pos0, int nq, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  case_data c{hd, stride, pos0, nq, {}, {}, {}};
  c.q.resize(static_cast<size_t>(nq * hd));
  c.k.resize(static_cast<size_t>((pos0 + nq) * stride));
  c.v.resize(c.k.size());
  for (auto& x : c.q) x = 2.0f * dist(rng);  // peaked softmaxes as well as flat ones
  for (auto& x : c.k) x = dist(rng);
  for (auto& x : c.v) x = dist(rng);
  return c;
}

// out[j][e] in double: each query over the keys up to its own position.
std::vector<double> reference(const case_data& c, float scale) {
  std::vector<double> out(static_cast<size_t>(c.nq * c.hd));
  for (int j = 0; j < c.nq; ++j) {
    const int64_t last = c.pos0 + j;
    std::vector<double> s(static_cast<size_t>(last + 1));
    double m = -INFINITY;
    for (int64_t t = 0; t <= last; ++t) {
      double dot = 0;
      for (int64_t e = 0; e < c.hd; ++e) dot += double(c.q[j * c.hd + e]) * c.k[t * c.stride + e];
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (int64_t t = 0; t <= last; ++t)
      for (int64_t e = 0; e < c.hd; ++e) out[j * c.hd + e] += s[t] / sum * c.v[t * c.stride + e];
  }
  return out;
}

std::vector<float> run(const case_data& c, float scale, bool vector_kernel) {
  std::vector<float> out(static_cast<size_t>(c.nq * c.hd), -1.0f);
  std::vector<const float*> qs;
  std::vector<float*> outs;
  for (int j = 0; j < c.nq; ++j) qs.push_back(c.q.data() + j * c.hd), outs.push_back(out.data() + j * c.hd);
  std::vector<float> scratch(static_cast<size_t>(attend_block_scratch(c.pos0 + c.nq, c.hd)));
  if (vector_kernel) attend_block(qs.data(), c.nq, c.k.data(), c.v.data(), c.stride, c.hd, c.pos0, scale, outs.data(), scratch.data());
  else scalar::attend_block(qs.data(), c.nq, c.k.data(), c.v.data(), c.stride, c.hd, c.pos0, scale, outs.data(), scratch.data());
  return out;
}

TEST(AttendBlock, MatchesDoubleCausalAttention) {
  // Head sizes with and without a 64-wide tail, blocks of 1 to 32 queries (tails of the six-query
  // and twelve-key tiles), starting at the first position or after a cache, strides wider than a head.
  const int64_t hds[] = {16, 64, 80, 128};
  const int nqs[] = {1, 5, 6, 13, 32};
  const int64_t pos0s[] = {0, 3, 100};
  uint32_t seed = 1;
  for (int64_t hd : hds)
    for (int nq : nqs)
      for (int64_t pos0 : pos0s) {
        const case_data c = make_case(hd, hd * 3, pos0, nq, seed++);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const std::vector<double> want = reference(c, scale);
        for (bool vec : {false, true}) {
          const std::vector<float> got = run(c, scale, vec);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "hd " << hd << " nq " << nq << " pos0 " << pos0 << " vector " << vec << " at " << i;
        }
      }
}

TEST(AttendOne, MatchesDoubleAttention) {
  // Decode: one query against 1 to 300 keys (tails of the sixteen-key tiles), head sizes with and
  // without a 64-wide tail; the vector kernel and the scalar reference both.
  uint32_t seed = 500;
  for (int64_t hd : {16, 64, 80, 128})
    for (int64_t keys : {1, 15, 16, 17, 300}) {
      const case_data c = make_case(hd, hd * 2, keys - 1, 1, seed++);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const std::vector<double> want = reference(c, scale);
      for (bool vec : {false, true}) {
        std::vector<float> out(static_cast<size_t>(hd), -1.0f), scores(static_cast<size_t>(keys) + 1, 7.0f);
        if (vec) attend_one(c.q.data(), c.k.data(), c.v.data(), c.stride, hd, keys, scale, out.data(), scores.data());
        else scalar::attend_one(c.q.data(), c.k.data(), c.v.data(), c.stride, hd, keys, scale, out.data(), scores.data());
        for (int64_t e = 0; e < hd; ++e)
          ASSERT_NEAR(out[static_cast<size_t>(e)], want[static_cast<size_t>(e)], 2e-5 * (1 + std::abs(want[static_cast<size_t>(e)])))
              << "hd " << hd << " keys " << keys << " vector " << vec << " at " << e;
        EXPECT_EQ(scores[static_cast<size_t>(keys)], 7.0f) << "wrote past its keys";
      }
    }
}

TEST(AttendF16Cache, MatchesDoubleAttentionOverTheHalves) {
  // An F16 cache (the engine's default): every kernel reads the halves as the floats they are, so
  // the result is the double attention over the rounded keys and values, blocks and decode alike.
  uint32_t seed = 900;
  for (int64_t hd : {16, 64, 80, 128})
    for (auto [pos0, nq] : {std::pair<int64_t, int>{0, 1}, {40, 1}, {0, 7}, {100, 32}, {13, 13}}) {
      case_data c = make_case(hd, hd * 2, pos0, nq, seed++);
      std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
      fp32_to_fp16_row(c.k.data(), k16.data(), c.k.size());
      fp32_to_fp16_row(c.v.data(), v16.data(), c.v.size());
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const std::vector<double> unrounded = reference(c, scale);
      fp16_to_fp32_row(k16.data(), c.k.data(), c.k.size());
      fp16_to_fp32_row(v16.data(), c.v.data(), c.v.size());
      const std::vector<double> want = reference(c, scale);
      double moved = 0;
      for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::abs(want[i] - unrounded[i]));
      EXPECT_GT(moved, 1e-4) << "the halves' rounding would not show";
      for (bool vec : {false, true}) {
        std::vector<float> out(static_cast<size_t>(nq * hd), -1.0f);
        std::vector<const float*> qs;
        std::vector<float*> outs;
        for (int j = 0; j < nq; ++j) qs.push_back(c.q.data() + j * hd), outs.push_back(out.data() + j * hd);
        std::vector<float> scratch(static_cast<size_t>(attend_block_scratch(pos0 + nq, hd) + pos0 + nq));
        if (nq == 1 && vec) attend_one(qs[0], k16.data(), v16.data(), c.stride, hd, pos0 + 1, scale, outs[0], scratch.data());
        else if (nq == 1) scalar::attend_one(qs[0], k16.data(), v16.data(), c.stride, hd, pos0 + 1, scale, outs[0], scratch.data());
        else if (vec) attend_block(qs.data(), nq, k16.data(), v16.data(), c.stride, hd, pos0, scale, outs.data(), scratch.data());
        else scalar::attend_block(qs.data(), nq, k16.data(), v16.data(), c.stride, hd, pos0, scale, outs.data(), scratch.data());
        for (size_t i = 0; i < out.size(); ++i)
          ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "hd " << hd << " nq " << nq << " pos0 " << pos0 << " vector " << vec << " at " << i;
      }
    }
}

TEST(AttendBlock, LaterKeysDoNotReachEarlierQueries) {
  // Causality: changing the block's last key and value changes only the last query's output.
  case_data c = make_case(64, 64, 10, 8, 99);
  const std::vector<float> before = run(c, 0.125f, true);
  for (int64_t e = 0; e < 64; ++e) c.k[17 * 64 + e] += 3.0f, c.v[17 * 64 + e] -= 5.0f;
  const std::vector<float> after = run(c, 0.125f, true);
  for (int j = 0; j < 8; ++j) {
    bool same = std::equal(before.begin() + j * 64, before.begin() + (j + 1) * 64, after.begin() + j * 64);
    EXPECT_EQ(same, j < 7) << "query " << j;
  }
}

}  // namespace
}  // namespace hotcold::kernels
