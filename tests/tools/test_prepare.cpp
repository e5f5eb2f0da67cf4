// The offline pipeline on a generated model: profile -> train-predictor -> sparse file, then the
// sparse model on text it was not calibrated on keeps recall >= 0.99 computing at most 20% of neurons.
#include <gtest/gtest.h>

#include <filesystem>
#include <cmath>
#include <fstream>
#include <numeric>

#include "kernels/cpu/fp16.hpp"
#include "engine/forward.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/predictor_train.hpp"
#include "loader/profile.hpp"
#include "tools/sparse_file.hpp"
#include "tools/sparsity.hpp"
#include "loader/text_corpus.hpp"

namespace hotcold {
namespace {

namespace fs = std::filesystem;

// Two layers of 256 / 512 neurons with a real tokenizer (text to tokenize).
tools::gen_model_options two_layers(activation act, uint64_t seed) {
  tools::gen_model_options g;
  g.n_embd = 256;
  g.n_ff = 512;
  g.n_layer = 2;
  g.n_head = 8;
  g.n_head_kv = 4;
  g.act = act;
  g.seed = seed;
  g.vocab_path = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf";
  return g;
}

TEST(Prepare, RecallAndActiveFractionOnUnseenText) {
  auto g = two_layers(activation::relu, 17);
  g.active = 0.1;
  auto dense = test::make_model("prepare_dense", g);

  loader::profile_options po;
  po.model_path = dense;
  po.tokens = 1536;
  po.threads = 2;
  po.out_dir = (test::scratch_dir() / "prepare_profile").string();
  auto prof = loader::run_profile(po);
  ASSERT_EQ(prof.active_fraction.size(), 2u);
  for (double a : prof.active_fraction) EXPECT_NEAR(a, 0.1, 0.02);

  auto data = loader::read_profile(po.out_dir);
  EXPECT_EQ(data.tokens, 1536);
  // The counts agree with the masks: the total firings over all neurons is active fraction x tokens x n_ff.
  uint64_t firings = std::accumulate(data.firing_counts.begin(), data.firing_counts.begin() + 512, uint64_t{0});
  EXPECT_NEAR(static_cast<double>(firings) / (1536.0 * 512.0), prof.active_fraction[0], 1e-9);

  // Each record's margins say what its mask says: positive exactly for the neurons that fired.
  {
    std::ifstream in(data.samples_path(1), std::ios::binary);
    std::vector<char> rec(data.record_bytes());
    int64_t fired = 0;
    for (int64_t t = 0; t < data.tokens; ++t) {
      ASSERT_TRUE(in.read(rec.data(), static_cast<std::streamsize>(rec.size())));
      const auto* mask = reinterpret_cast<const uint8_t*>(rec.data() + data.n_embd * 4);
      const auto* margin = reinterpret_cast<const uint16_t*>(rec.data() + data.n_embd * 4 + (data.n_ff + 7) / 8);
      for (int64_t i = 0; i < data.n_ff; ++i) {
        bool bit = (mask[i / 8] >> (i % 8)) & 1;
        fired += bit;
        ASSERT_EQ(bit, kernels::fp16_to_fp32(margin[i]) > 0.0f) << "token " << t << " neuron " << i;
      }
    }
    EXPECT_NEAR(static_cast<double>(fired) / (1536.0 * 512.0), prof.active_fraction[1], 1e-9);
  }

  tools::train_options to;
  to.threads = 2;
  to.target_recall = 1.5;
  EXPECT_THROW(tools::train_predictors(data, to), std::invalid_argument);
  to.target_recall = tools::train_options{}.target_recall;
  auto p = tools::train_predictors(data, to);
  ASSERT_EQ(p.fits.size(), 2u);
  for (const auto& f : p.fits) EXPECT_GE(f.recall, to.target_recall);

  auto sparse = (test::scratch_dir() / "prepare_sparse.gguf").string();
  tools::write_sparse_model(dense, sparse, p.layers);
  auto m = model::load(sparse);
  ASSERT_TRUE(m->has_predictors());
  inference_context ctx(m, 512, 2);
  ctx.set_mode(ffn_mode::sparse);
  ctx.enable_stats(true);
  auto tokens = m->vocabulary().tokenize(loader::mixed_text(3000, 99), true);
  tokens.resize(std::min<size_t>(tokens.size(), 512));
  for (size_t i = 0; i < tokens.size(); ++i) ctx.forward(tokens[i], static_cast<int64_t>(i));
  int64_t truly = 0, hit = 0, computed = 0, neurons = 0;
  for (const auto& s : ctx.stats()) truly += s.truly_active, hit += s.active_computed, computed += s.computed, neurons += s.neurons;
  double recall = static_cast<double>(hit) / static_cast<double>(truly);
  double active = static_cast<double>(computed) / static_cast<double>(neurons);
  EXPECT_GE(recall, 0.99);
  EXPECT_LE(active, 0.2);
  RecordProperty("recall", testing::PrintToString(recall));
  RecordProperty("active_fraction", testing::PrintToString(active));

  // Saved predictors read back the same.
  auto saved = (test::scratch_dir() / "prepare_predictors.gguf").string();
  tools::save_predictors(p, saved);
  auto back = tools::load_predictors(saved);
  ASSERT_EQ(back.layers.size(), 2u);
  EXPECT_EQ(back.layers[1].fc2, p.layers[1].fc2);
  EXPECT_EQ(back.layers[1].threshold, p.layers[1].threshold);
}

// prepare --sparsity on a SiLU file: thresholds for S = 0.5, a profile of the thresholded model whose
// samples hold each neuron's pre-activation (the gate), predictors that estimate it from the FFN's
// normalized input and choose |silu(estimate)| >= their threshold. The kept set has two sides (large
// positive gates and SiLU's negative dip), which a score compared with a threshold cannot separate:
// a predictor trained on the margin keeps about all neurons to reach the recall. This one keeps recall
// >= 0.98 on text it was not calibrated on, computing few neurons more than are kept.
TEST(Prepare, ThresholdedModelsGetPredictorsOfTheirPreActivations) {
  auto g = two_layers(activation::silu, 23);
  g.norm_spread = 0.3;
  auto dense = test::make_model("prepare_silu_dense", g);
  tools::sparsity_options so;
  so.model_path = dense, so.target = 0.5, so.tokens = 256, so.threads = 2;
  const auto t = tools::calibrate_act_thresholds(so).thresholds;

  loader::profile_options po;
  po.model_path = dense;
  po.tokens = 1024;
  po.threads = 2;
  po.out_dir = (test::scratch_dir() / "prepare_silu_profile").string();
  po.act_thresholds = t;
  loader::run_profile(po);
  auto data = loader::read_profile(po.out_dir);
  ASSERT_TRUE(data.preactivations);
  EXPECT_EQ(data.act, activation::silu);
  {  // Each record: the mask is |silu(value)| >= t_1 (values rounded to F16: the boundary's neighbours skipped).
    std::ifstream in(data.samples_path(1), std::ios::binary);
    std::vector<char> rec(data.record_bytes());
    int64_t checked = 0, negative_kept = 0;
    for (int64_t s = 0; s < data.tokens; ++s) {
      ASSERT_TRUE(in.read(rec.data(), static_cast<std::streamsize>(rec.size())));
      const auto* mask = reinterpret_cast<const uint8_t*>(rec.data() + data.n_embd * 4);
      const auto* value = reinterpret_cast<const uint16_t*>(rec.data() + data.n_embd * 4 + (data.n_ff + 7) / 8);
      for (int64_t i = 0; i < data.n_ff; ++i) {
        const float v = kernels::fp16_to_fp32(value[i]), a = std::fabs(v / (1 + std::exp(-v)));
        if (std::fabs(a - t[1]) < 2e-3f * std::max(1.0f, std::fabs(v))) continue;
        const bool bit = (mask[i / 8] >> (i % 8)) & 1;
        ASSERT_EQ(bit, a >= t[1]) << "token " << s << " neuron " << i << " value " << v;
        negative_kept += bit && v < 0;
        ++checked;
      }
    }
    EXPECT_GT(checked, data.tokens * data.n_ff * 9 / 10);
    EXPECT_GT(negative_kept, checked / 50);  // the dip's side is kept too
  }

  tools::train_options to;
  to.threads = 2;
  to.stored_as = tensor_type::f16;
  auto p = tools::train_predictors(data, to);
  ASSERT_EQ(p.fits.size(), 2u);
  for (const auto& f : p.fits) {
    EXPECT_GE(f.recall, to.target_recall);
    EXPECT_GT(f.precision, 0.62);  // a margin-trained score: about 0.5, nearly every neuron chosen
  }
  tools::sparse_file_options sf;
  sf.act_thresholds = t, sf.sparsity_target = 0.5f, sf.predictor_type = tensor_type::f16;
  auto sparse = (test::scratch_dir() / "prepare_silu_sparse.gguf").string();
  tools::write_sparse_model(dense, sparse, p.layers, sf);
  auto m = model::load(sparse);
  EXPECT_EQ(m->hp().pred_input, predictor_input::ffn_input);
  inference_context ctx(m, 512, 2);
  ctx.set_mode(ffn_mode::sparse);
  ctx.enable_stats(true);
  auto tokens = m->vocabulary().tokenize(loader::mixed_text(3000, 99), true);
  tokens.resize(std::min<size_t>(tokens.size(), 384));
  for (size_t i = 0; i < tokens.size(); ++i) ctx.forward(tokens[i], static_cast<int64_t>(i));
  int64_t truly = 0, hit = 0, computed = 0;
  for (const auto& s : ctx.stats()) truly += s.truly_active, hit += s.active_computed, computed += s.computed;
  const double recall = static_cast<double>(hit) / static_cast<double>(truly), extra = static_cast<double>(computed) / static_cast<double>(truly);
  EXPECT_GE(recall, 0.98);
  EXPECT_LE(extra, 1.6);
  RecordProperty("recall", testing::PrintToString(recall));
  RecordProperty("computed_per_kept", testing::PrintToString(extra));
}

TEST(Prepare, ProfileRefusesWhatItCannotUse) {
  // A dense-activation model has nothing to predict.
  auto g = test::small_options(1);
  g.act = activation::silu;
  loader::profile_options dense;
  dense.model_path = test::make_model("profile_silu", g);
  dense.out_dir = (test::scratch_dir() / "never_silu").string();
  EXPECT_THROW(loader::run_profile(dense), std::invalid_argument);
  // A profile from an older format (no margins) is refused by name.
  auto old_dir = test::scratch_dir() / "old_profile";
  fs::create_directories(old_dir);
  std::ofstream(old_dir / "profile.json") << R"({"format": 1, "n_layer": 1, "n_embd": 8, "n_ff": 8, "tokens": 1})";
  try {
    loader::read_profile(old_dir.string());
    ADD_FAILURE() << "an old profile was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("profile again"), std::string::npos) << e.what();
  }

  loader::profile_options po;
  po.model_path = test::tiny_vocab();  // a vocabulary without weights
  po.out_dir = (test::scratch_dir() / "never").string();
  EXPECT_THROW(loader::run_profile(po), model_error);
  EXPECT_THROW(loader::read_profile((test::scratch_dir() / "no-such-profile").string()), std::runtime_error);
}

}  // namespace
}  // namespace hotcold
