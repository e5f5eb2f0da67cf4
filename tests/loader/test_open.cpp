// Opening a model for running (loader::open_for_running): what the device holds is what the plan
// says, a sparse file's placement is planned from the firing counts it is given (the most frequent
// neurons hot), written beside the file and used as it is the next time, and impossible requests are
// refused by name.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <numeric>

#include "loader/open.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

std::shared_ptr<devices::device> sim(uint64_t budget) {
  devices::device_options o;
  o.kind = "sim";
  o.budget = budget;
  return devices::make_device(o);
}

// A sparse file of its own folder (a placement is written beside it).
std::string sparse_file(const std::string& name) {
  const auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  const auto dense = test::make_model("open_dense", o);
  const auto dir = test::scratch_dir() / (name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = (dir / "sparse.gguf").string();
  tools::write_sparse_model(dense, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9));
  return path;
}

// Layer 1's neurons 100..109 fire 100 times, every other neuron once (a plan that ignored the counts
// would take the first neurons of layer 0).
std::vector<uint64_t> counts_with_ten_popular(const hparams& hp) {
  std::vector<uint64_t> c(static_cast<size_t>(hp.n_layer * hp.n_ff), 1);
  for (int64_t i = 100; i < 110; ++i) c[static_cast<size_t>(hp.n_ff + i)] = 100;
  return c;
}

// The neurons of `layer` whose rows the device holds.
std::vector<int32_t> hot_neurons(const hot_rows& rows, const hparams& hp, int64_t layer) {
  std::vector<int32_t> all(static_cast<size_t>(hp.n_ff));
  std::iota(all.begin(), all.end(), 0);
  ffn_split s;
  rows.split(layer, all, s);
  return s.hot_ids;
}

TEST(OpenForRunning, SparseFileHoldsThePlannedPlacementAndReusesIt) {
  const auto path = sparse_file("open_sparse");
  const auto m = model::load(path);
  const auto& hp = m->hp();
  int plans = 0;
  std::vector<std::string> lines;
  loader::open_options o;
  o.ctx = 64;
  o.threads = 2;
  o.placement.cache_dir = (std::filesystem::path(path).parent_path() / "cache").string();
  o.placement.firing_counts = [&](const std::string& p, const model& mm) {
    EXPECT_EQ(p, path);
    ++plans;
    return counts_with_ten_popular(mm.hp());
  };
  o.log = [&](const std::string& line) { lines.push_back(line); };

  // Room for everything: the plan holds attention, predictors and the head, every neuron hot.
  const auto roomy = loader::open_for_running(m, sim(64 << 20), o);
  ASSERT_TRUE(roomy.plan && roomy.device && roomy.hot && roomy.split);
  EXPECT_EQ(plans, 1);
  EXPECT_EQ(roomy.ctx->n_ctx(), 64);
  EXPECT_EQ(roomy.ctx->mode(), ffn_mode::sparse);
  EXPECT_EQ(roomy.ctx->pool().size(), 2u);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    EXPECT_TRUE(roomy.device->attention(l) && roomy.device->predictor(l)) << l;
    EXPECT_EQ(hot_neurons(*roomy.hot, hp, l).size(), static_cast<size_t>(hp.n_ff)) << l;
  }
  EXPECT_TRUE(roomy.device->output());
  EXPECT_EQ(roomy.hot->bytes(), roomy.plan->solution.bytes);
  EXPECT_TRUE(std::filesystem::exists(placement_path(path)));
  bool told = false;
  for (const auto& l : lines) told |= l.find("planned a placement for") != std::string::npos && l.find(placement_path(path)) != std::string::npos;
  EXPECT_TRUE(told) << "the log does not say that a placement was planned and where it went";

  // Room for the fixed part and ten neurons' rows: the ten that fire most, and the file is planned
  // again (it was made for another budget).
  const uint64_t neuron = roomy.plan->layers[0].hot_bytes / static_cast<uint64_t>(roomy.plan->layers[0].hot_neurons);
  const uint64_t tight = roomy.plan->fixed.total() + 10 * neuron + neuron / 2;
  const auto again = loader::open_for_running(model::load(path), sim(tight), o);
  EXPECT_EQ(plans, 2);
  std::vector<int32_t> ten(10);
  std::iota(ten.begin(), ten.end(), 100);
  EXPECT_TRUE(hot_neurons(*again.hot, hp, 0).empty());
  EXPECT_EQ(hot_neurons(*again.hot, hp, 1), ten);
  for (int64_t l = 0; l < hp.n_layer; ++l) EXPECT_EQ(again.device->attention(l), again.plan->layers[static_cast<size_t>(l)].attention);

  // The same budget once more: the placement beside the file is used as it is, no counts asked for.
  const auto reused = loader::open_for_running(model::load(path), sim(tight), o);
  EXPECT_EQ(plans, 2);
  EXPECT_EQ(hot_neurons(*reused.hot, hp, 1), ten);
}

TEST(OpenForRunning, GivenPlacementAndResidencyAreHeldExactly) {
  const auto m = model::load(sparse_file("open_given"));
  const auto& hp = m->hp();
  loader::open_options o;
  o.ctx = 32;
  o.n_seq = 2;
  o.threads = 1;
  o.hot = test::every_third_hot(hp.n_layer, hp.n_ff);
  device_residency r;
  r.attention = {0, 1}, r.predictor = {1, 0}, r.ffn = {0, 0};
  o.residency = r;
  o.trace = true;
  const auto opened = loader::open_for_running(m, sim(64 << 20), o);
  EXPECT_FALSE(opened.plan) << "a given residency is not planned";
  ASSERT_TRUE(opened.device && opened.hot && opened.trace);
  EXPECT_FALSE(opened.device->attention(0));
  EXPECT_TRUE(opened.device->attention(1));
  EXPECT_TRUE(opened.device->predictor(0));
  EXPECT_FALSE(opened.device->output());
  EXPECT_EQ(opened.device->residency().ctx, 32);
  EXPECT_EQ(opened.device->residency().n_seq, 2);
  EXPECT_EQ(opened.ctx->n_seq(), 2);
  EXPECT_EQ(hot_neurons(*opened.hot, hp, 1), o.hot->hot[1]);
  // Nothing but hot rows: no device layers.
  o.residency = device_residency{};
  EXPECT_FALSE(loader::open_for_running(m, sim(64 << 20), o).device);
}

TEST(OpenForRunning, RefusesWhatCannotRunByName) {
  const auto path = sparse_file("open_refused");
  const auto sparse = model::load(path);
  loader::open_options o;
  o.ctx = 64;
  o.threads = 1;
  // No placement and nothing to plan one from.
  try {
    loader::open_for_running(sparse, sim(64 << 20), o);
    ADD_FAILURE() << "a sparse file without a placement opened with no firing counts to plan one";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("hotcold place"), std::string::npos) << e.what();
  }
  // Whole layers are a dense file's; a CPU holds none.
  o.n_gpu_layers = 1;
  EXPECT_THROW(loader::open_for_running(sparse, sim(64 << 20), o), std::invalid_argument);
  const auto dense = model::load(test::make_model("open_dense_layers", test::small_options(2, 2)));
  EXPECT_THROW(loader::open_for_running(dense, nullptr, o), std::invalid_argument);
  // A dense file with its first layer whole on the device.
  const auto held = loader::open_for_running(dense, sim(64 << 20), o);
  ASSERT_TRUE(held.device);
  EXPECT_TRUE(held.device->attention(0) && held.device->ffn(0));
  EXPECT_FALSE(held.device->attention(1) || held.device->ffn(1));
  EXPECT_FALSE(held.hot);
  EXPECT_EQ(held.ctx->mode(), ffn_mode::dense);
  // A context whose KV cache outgrows this machine's memory.
  o.n_gpu_layers = -1;
  o.ctx = int64_t{1} << 40;
  try {
    loader::open_for_running(dense, nullptr, o);
    ADD_FAILURE() << "a KV cache larger than memory was opened";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("more than this machine's"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotcold
