// The placement solver against brute force on small instances, and placement files.
#include <gtest/gtest.h>

#include <random>

#include "model/model.hpp"
#include "tests/model/tiny_models.hpp"
#include "model/placement_file.hpp"
#include "tools/placement.hpp"

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
  auto path = (test::scratch_dir() / "m.gguf.generated.gpuidx").string();
  tools::write_placement(plan, path, 8);
  auto f = gguf::file::open(path);
  EXPECT_EQ(f.kind(), gguf::file_kind::powerinfer);
  EXPECT_EQ(f.find("split.vram_capacity")->as_u64(), 12345u);
  auto back = read_placement_file(path, 3, 8);
  EXPECT_EQ(back.hot, plan.solution.hot);
  EXPECT_EQ(back.vram_capacity, 12345u);
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

}  // namespace
}  // namespace hotcold
