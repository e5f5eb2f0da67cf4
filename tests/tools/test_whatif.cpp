// hotcold replay --activations: the activation file round trip, its errors, and the estimates against
// sums done here by brute force on a record whose timing follows known rates.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "model/model.hpp"
#include "model/placement_file.hpp"
#include "engine/trace.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/whatif.hpp"

namespace hotcold {
namespace {

struct fixture {
  std::string model_path, record_path;
  int64_t n_layer = 0, n_ff = 0;
  std::vector<std::vector<std::vector<uint8_t>>> chosen;  // [step][layer] tokens x n_ff
  std::vector<int64_t> tokens;                             // per step
  placement_data recorded_hot;
};

fixture make_record(const std::string& name) {
  fixture f;
  f.model_path = test::make_model("wi_dense", test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16));
  auto m = model::load(f.model_path);
  f.n_layer = m->hp().n_layer, f.n_ff = m->hp().n_ff;
  std::mt19937 rng(11);
  trace_recorder t;
  f.recorded_hot = test::every_third_hot(f.n_layer, f.n_ff);
  t.set_hot_neurons(f.recorded_hot.hot);
  for (int64_t s = 0; s < 12; ++s) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3);
    f.tokens.push_back(n);
    f.chosen.emplace_back();
    for (int64_t l = 0; l < f.n_layer; ++l) {
      std::vector<uint8_t> c(static_cast<size_t>(n * f.n_ff));
      for (auto& x : c) x = (rng() % 100) < static_cast<unsigned>(5 + 20 * l) ? 1 : 0;  // layers differ in how many fire
      t.record_active(s, l, n, f.n_ff, c.data());
      f.chosen.back().push_back(std::move(c));
    }
  }
  f.record_path = (test::scratch_dir() / (name + ".activations")).string();
  t.write_activations(f.record_path);
  return f;
}

TEST(WhatIf, ActivationFileRoundTrips) {
  auto f = make_record("wi_roundtrip");
  auto r = loader::read_activation_record(f.record_path);
  EXPECT_EQ(r.n_layer, f.n_layer);
  EXPECT_EQ(r.n_ff, f.n_ff);
  EXPECT_EQ(r.hot, f.recorded_hot.hot);
  ASSERT_EQ(r.entries.size(), static_cast<size_t>(12 * f.n_layer));
  for (const auto& e : r.entries) {
    const auto& want = f.chosen[static_cast<size_t>(e.step)][static_cast<size_t>(e.layer)];
    ASSERT_EQ(e.tokens, f.tokens[static_cast<size_t>(e.step)]);
    for (int64_t t = 0; t < e.tokens; ++t)
      for (int64_t i = 0; i < f.n_ff; ++i)
        ASSERT_EQ((e.bits[static_cast<size_t>(t * ((f.n_ff + 7) / 8) + i / 8)] >> (i % 8)) & 1, want[static_cast<size_t>(t * f.n_ff + i)]);
  }
}

TEST(WhatIf, BadFilesAreRefusedByName) {
  auto f = make_record("wi_bad");
  std::ifstream in(f.record_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto write = [](const std::string& path, const std::string& b) { std::ofstream(path, std::ios::binary) << b; };
  const auto cut = (test::scratch_dir() / "wi_cut.activations").string();
  write(cut, bytes.substr(0, bytes.size() - 5));
  try {
    loader::read_activation_record(cut);
    ADD_FAILURE() << "a truncated file was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("wi_cut.activations: truncated"), std::string::npos) << e.what();
  }
  const auto junk = (test::scratch_dir() / "wi_junk.activations").string();
  write(junk, "not an activation file at all");
  EXPECT_THROW(loader::read_activation_record(junk), std::runtime_error);
  EXPECT_THROW(loader::read_activation_record((test::scratch_dir() / "wi_missing.json").string()), std::runtime_error);
}

// The trace says the cold side reads at 2 GB/s plus 5 us a layer and the hot side at 8 GB/s: the
// estimate for another placement is the recorded time with each layer's FFN re-costed at those rates.
TEST(WhatIf, EstimatesFollowTheRatesTheTraceShows) {
  auto f = make_record("wi_rates");
  auto m = model::load(f.model_path);
  const auto& L0 = m->weights().layers[0];
  const double nb = static_cast<double>((L0.ffn_gate.bytes() + L0.ffn_up.bytes() + L0.ffn_down.bytes() + L0.ffn_down_t.bytes()) / static_cast<uint64_t>(f.n_ff));
  auto rows = [&](int64_t s, int64_t l, const std::vector<std::vector<int32_t>>& hot, bool want_hot) {
    std::vector<uint8_t> is_hot(static_cast<size_t>(f.n_ff), 0);
    for (int32_t i : hot[static_cast<size_t>(l)]) is_hot[static_cast<size_t>(i)] = 1;
    int64_t n = 0;
    for (int64_t i = 0; i < f.n_ff; ++i) {
      bool any = false;
      for (int64_t t = 0; t < f.tokens[static_cast<size_t>(s)]; ++t) any |= f.chosen[static_cast<size_t>(s)][static_cast<size_t>(l)][static_cast<size_t>(t * f.n_ff + i)] != 0;
      n += any && (is_hot[static_cast<size_t>(i)] != 0) == want_hot;
    }
    return static_cast<double>(n);
  };
  auto cold_us = [&](double r) { return r > 0 ? 5.0 + r * nb / 2e3 : 0.0; };  // 2 GB/s = 2e3 bytes/us
  auto hot_us = [&](double r) { return r > 0 ? r * nb / 8e3 : 0.0; };
  std::vector<std::pair<int64_t, tools::step_timing>> timing;
  double wall = 0;
  for (int64_t s = 0; s < 12; ++s) {
    tools::step_timing t;
    t.begin_us = 1000.0 * static_cast<double>(s);
    double ffn = 0;
    for (int64_t l = 0; l < f.n_layer; ++l) {
      t.hot_us.push_back(hot_us(rows(s, l, f.recorded_hot.hot, true)));
      t.cold_us.push_back(cold_us(rows(s, l, f.recorded_hot.hot, false)));
      ffn += std::max(t.hot_us.back(), t.cold_us.back());
    }
    t.end_us = t.begin_us + 40.0 + ffn;  // 40 us of everything else
    wall += t.end_us - t.begin_us;
    timing.emplace_back(s, t);
  }
  // Another placement: every other neuron of layer 0, none of layer 1.
  placement_data other;
  other.hot.resize(static_cast<size_t>(f.n_layer));
  for (int32_t i = 0; i < f.n_ff; i += 2) other.hot[0].push_back(i);
  const auto placement = (test::scratch_dir() / "wi_other.gpuidx").string();
  write_placement_file(other, placement, f.n_ff);

  tools::whatif_options o;
  o.model_path = f.model_path;
  o.placements = {placement};
  auto r = tools::estimate_whatif(loader::read_activation_record(f.record_path), timing, o);
  ASSERT_TRUE(r.timed);
  EXPECT_NEAR(r.cold_gbps, 2.0, 1e-6);
  EXPECT_NEAR(r.cold_overhead_us, 5.0, 1e-6);
  EXPECT_NEAR(r.hot_gbps, 8.0, 1e-6);
  int64_t tokens = 0;
  for (int64_t n : f.tokens) tokens += n;
  EXPECT_EQ(r.tokens, tokens);
  EXPECT_NEAR(r.recorded_seconds_per_token, wall * 1e-6 / static_cast<double>(tokens), 1e-12);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.rows[0].label, "recorded");
  EXPECT_NEAR(r.rows[0].seconds_per_token, r.recorded_seconds_per_token, 1e-9);  // the recorded split, re-costed, is what was measured

  // Brute force for the other placement: hot-hit over (token, neuron) pairs, time with the rates.
  int64_t hot_pairs = 0, pairs = 0;
  double est = 0;
  for (int64_t s = 0; s < 12; ++s) {
    est += 40.0;
    for (int64_t l = 0; l < f.n_layer; ++l) {
      est += std::max(hot_us(rows(s, l, other.hot, true)), cold_us(rows(s, l, other.hot, false)));
      const auto& c = f.chosen[static_cast<size_t>(s)][static_cast<size_t>(l)];
      for (size_t k = 0; k < c.size(); ++k) {
        pairs += c[k];
        hot_pairs += c[k] && l == 0 && (k % static_cast<size_t>(f.n_ff)) % 2 == 0;
      }
    }
  }
  EXPECT_EQ(r.rows[1].hot_neurons, f.n_ff / 2);
  EXPECT_NEAR(r.rows[1].hot_hit_ratio, static_cast<double>(hot_pairs) / static_cast<double>(pairs), 1e-12);
  EXPECT_NEAR(r.rows[1].seconds_per_token, est * 1e-6 / static_cast<double>(tokens), 1e-9);
  EXPECT_EQ(r.rows[1].layer_hot_hit[1], 0.0);
}

}  // namespace
}  // namespace hotcold
