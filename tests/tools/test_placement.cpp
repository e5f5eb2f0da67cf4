// The placement solver against brute force on small instances, and placement files.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "model/model.hpp"
#include "tests/model/tiny_models.hpp"
#include "model/placement_file.hpp"
#include "tools/placement.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

uint64_t brute_force(const tools::placement_problem& p) {
  std::vector<std::pair<uint64_t, uint64_t>> items;  // bytes, value
  for (size_t l = 0; l < p.bytes.size(); ++l)
    for (uint64_t c : p.counts[l]) items.push_back({p.bytes[l], c});
  uint64_t best = 0;
  for (uint32_t mask = 0; mask < (1u << items.size()); ++mask) {
    uint64_t bytes = 0, value = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (mask >> i & 1) bytes += items[i].first, value += items[i].second;
    if (bytes <= p.budget) best = std::max(best, value);
  }
  return best;
}

TEST(Placement, MatchesBruteForce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    tools::placement_problem p;
    int layers = 1 + static_cast<int>(rng() % 3);
    bool equal = trial % 2 == 0;
    int size = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < layers; ++l) {
      p.bytes.push_back(equal ? static_cast<uint64_t>(size) * 1000 : 1000 * (1 + rng() % 5));
      std::vector<uint64_t> c(1 + rng() % 5);
      for (auto& x : c) x = rng() % 20;
      p.counts.push_back(c);
    }
    p.budget = 1000 * (rng() % 16) + rng() % 1000;
    auto s = tools::solve_placement(p);
    ASSERT_TRUE(s.exact);
    ASSERT_LE(s.bytes, p.budget);
    uint64_t value = 0;
    for (size_t l = 0; l < p.bytes.size(); ++l)
      for (int32_t i : s.hot[l]) value += p.counts[l][static_cast<size_t>(i)];
    ASSERT_EQ(value, s.value);
    ASSERT_EQ(s.value, brute_force(p)) << "trial " << trial;
  }
}

TEST(Placement, LayersAreNumbersNotStrings) {
  // Layer 10 must stay layer 10 (PowerInfer sorted "blk.10" before "blk.2").
  tools::placement_problem p;
  for (int l = 0; l < 12; ++l) {
    p.bytes.push_back(100);
    p.counts.push_back({static_cast<uint64_t>(l == 10 ? 1000 : 1), 0});
  }
  p.budget = 100;
  auto s = tools::solve_placement(p);
  ASSERT_EQ(s.hot[10], std::vector<int32_t>{0});
  for (int l = 0; l < 12; ++l) {
    if (l != 10) {
      EXPECT_TRUE(s.hot[static_cast<size_t>(l)].empty());
    }
  }
}

TEST(Placement, FilesRoundTrip) {
  tools::placement_plan plan;
  plan.solution.hot = {{1, 5, 7}, {}, {0}};
  plan.solution.bytes = 12345;
  plan.budget = 1 << 20;
  plan.ctx = 256;
  const auto model_path = (test::scratch_dir() / "m.gguf").string();
  std::ofstream(model_path) << "not a model, but a file with a size and a time";
  auto path = (test::scratch_dir() / "m.gguf.generated.gpuidx").string();
  tools::write_placement(plan, path, 8, model_path);
  auto f = gguf::file::open(path);
  EXPECT_EQ(f.kind(), gguf::file_kind::powerinfer);
  EXPECT_EQ(f.find("split.vram_capacity")->as_u64(), 12345u);
  auto back = read_placement_file(path, 3, 8);
  EXPECT_EQ(back.hot, plan.solution.hot);
  EXPECT_EQ(back.vram_capacity, 12345u);
  // What it was made for comes back, and tells another budget, context or file apart.
  EXPECT_TRUE(back.origin.known);
  EXPECT_EQ(back.origin, placement_origin_of(model_path, 1 << 20, 256));
  EXPECT_NE(back.origin, placement_origin_of(model_path, 2 << 20, 256));
  EXPECT_NE(back.origin, placement_origin_of(model_path, 1 << 20, 512));
  std::ofstream(model_path, std::ios::app) << " changed";
  EXPECT_NE(back.origin, placement_origin_of(model_path, 1 << 20, 256));
  // Without hotcold's keys (PowerInfer's files), the origin is unknown.
  write_placement_file({1, plan.solution.hot, {}}, path, 8);
  EXPECT_FALSE(read_placement_file(path, 3, 8).origin.known);
  EXPECT_THROW(read_placement_file(path, 3, 9), std::runtime_error);
}

TEST(Placement, ModelsReadTheirPlacementFile) {
  auto path = test::make_model("placed", test::small_options(2));
  EXPECT_EQ(model::load(path)->placement(), nullptr);
  placement_data p{640, {{3, 9}, {}}};
  write_placement_file(p, placement_path(path), 128);
  auto m = model::load(path);
  ASSERT_NE(m->placement(), nullptr);
  EXPECT_EQ(m->placement()->hot, p.hot);
  write_placement_file(p, placement_path(path), 64);  // wrong neuron count
  EXPECT_THROW(model::load(path), model_error);
  std::filesystem::remove(placement_path(path));
}

// The plan fills the device in PowerInfer's order, each kind front to back, with exact bytes: for
// every budget from the compute buffers alone to all of it, attention (with its KV cache) is a prefix
// of the layers; predictors come only once every layer's attention is there, FFN norms only after
// every predictor, the head after every norm, hot FFN rows only after the head; the bytes per layer
// are the tensors' own (KV: F16 K and V at the context); nothing passes the budget.
TEST(Placement, PlanFillsTheDeviceInOrder) {
  const auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  auto dense = test::make_model("plan_dense", o);
  const auto path = (test::scratch_dir() / "plan_sparse.gguf").string();
  tools::write_sparse_model(dense, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9));
  auto m = model::load(path);
  const auto& hp = m->hp();
  std::vector<uint64_t> counts(static_cast<size_t>(hp.n_layer * hp.n_ff));
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = (i * 7919) % 101;
  const int64_t ctx = 64;
  EXPECT_THROW(tools::plan_placement(*m, counts, 1.0 / (1 << 30), ctx), std::invalid_argument);  // one byte: not even the buffers
  int64_t last_attention = -1;
  bool saw_partial_attention = false, saw_hot = false;
  for (double kib = 4; kib < 4096; kib *= 1.25) {
    SCOPED_TRACE(kib);
    tools::placement_plan p;
    try {
      p = tools::plan_placement(*m, counts, kib / (1 << 20), ctx);
    } catch (const std::invalid_argument&) {
      continue;  // below the compute buffers
    }
    ASSERT_EQ(p.layers.size(), static_cast<size_t>(hp.n_layer));
    EXPECT_LE(p.bytes(), p.budget);
    uint64_t sum = p.fixed.compute + (p.output ? m->weights().output.bytes() + m->weights().output_norm.bytes() : 0);
    int64_t attention = 0;
    for (size_t l = 0; l < p.layers.size(); ++l) {
      const auto& pl = p.layers[l];
      const auto& w = m->weights().layers[l];
      sum += pl.bytes();
      if (pl.attention) {
        EXPECT_EQ(attention, static_cast<int64_t>(l)) << "attention is a prefix of the layers";
        ++attention;
        EXPECT_EQ(pl.attention_bytes, w.wq.bytes() + w.wk.bytes() + w.wv.bytes() + w.wo.bytes() + w.attn_norm.bytes());
        EXPECT_EQ(pl.kv_bytes, static_cast<uint64_t>(ctx * hp.n_embd_kv() * 2 * 2));
      }
      if (pl.predictor) EXPECT_TRUE(p.layers.back().attention) << "a predictor before every layer's attention";
      if (pl.ffn_norm) EXPECT_TRUE(p.layers.back().predictor) << "an FFN norm before every predictor";
      EXPECT_EQ(pl.hot_neurons, static_cast<int64_t>(p.solution.hot[l].size()));
      if (pl.hot_neurons > 0) EXPECT_TRUE(p.output) << "hot FFN rows before the head";
    }
    if (p.output) EXPECT_TRUE(p.layers.back().ffn_norm) << "the head before every FFN norm";
    EXPECT_EQ(sum, p.bytes());
    EXPECT_GE(attention, last_attention) << "more budget, fewer layers' attention";
    last_attention = attention;
    saw_partial_attention |= attention > 0 && attention < hp.n_layer;
    saw_hot |= p.solution.bytes > 0;
    EXPECT_NE(p.table().find("| total |"), std::string::npos);
  }
  EXPECT_TRUE(saw_partial_attention) << "no budget held only some layers' attention: the sweep tests nothing";
  EXPECT_TRUE(saw_hot);
}

}  // namespace
}  // namespace hotcold
