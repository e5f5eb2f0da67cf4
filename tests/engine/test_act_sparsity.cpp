// Sparsity without retraining (prepare --sparsity): a SiLU / GELU file with a threshold t_l per layer
// means neuron k of layer l counts only where |act(gate_k . x)| >= t_l (no gate: |act(up_k . x)|).
// Every path computes that model: the engine dense, oracle and sparse (with the predictor's choice)
// against model/reference, which applies the rule from the file; the thresholds change the logits, per
// layer; calibration skips the fraction asked for; files that cannot mean the rule are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "engine/forward.hpp"
#include "engine/hot_cold_ffn.hpp"
#include "engine/layer_ops.hpp"
#include "engine/sparse_ffn.hpp"
#include "model/gguf.hpp"
#include "model/reference.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"
#include "tools/sparsity.hpp"

namespace hotcold {
namespace {

tools::gen_model_options silu_options(architecture a) {
  auto o = test::sparse_test_options(a, a == architecture::falcon ? activation::gelu : activation::silu, tensor_type::f16);
  o.norm_spread = 0.3;
  o.seed = 5;
  return o;
}

// A sparse file of the dense one with the given thresholds (and random predictors).
std::string thresholded(const std::string& dense, const std::string& name, std::vector<float> t, int64_t n_ff = 256) {
  const auto path = (test::scratch_dir() / (name + ".gguf")).string();
  tools::sparse_file_options so;
  so.act_thresholds = std::move(t);
  so.sparsity_target = 0.5f;
  tools::write_sparse_model(dense, path, test::random_predictors(2, 64, n_ff, 16, -0.2f, 9), so);
  return path;
}

std::vector<std::vector<double>> reference_logits(const std::string& path, int64_t n_ctx, const std::vector<std::vector<std::vector<bool>>>* mask = nullptr,
                                                   tensor_type kv = tensor_type::f32) {
  const auto f = gguf::file::open(path);
  return reference_model(f, kv, n_ctx).logits(test::logits_of_tokens(), mask);
}

TEST(ActSparsity, TheRuleHoldsOnEveryPathAndMatters) {
  for (const auto arch : {architecture::llama, architecture::falcon}) {
    SCOPED_TRACE(std::string(architecture_name(arch)));
    const std::string name(architecture_name(arch));
    const auto dense = test::make_model("act_sparsity_" + name, silu_options(arch));
    // Thresholds near the median |act| of each layer, different per layer: a rule applied with the
    // wrong layer's threshold, or not at all, computes another model.
    const auto path = thresholded(dense, "act_sparsity_t_" + name, {0.08f, 0.2f});
    const auto swapped = thresholded(dense, "act_sparsity_swapped_" + name, {0.2f, 0.08f});
    auto m = model::load(path);
    ASSERT_EQ(m->hp().act_threshold.size(), 2u);
    EXPECT_FLOAT_EQ(m->hp().act_threshold_of(1), 0.2f);
    EXPECT_FLOAT_EQ(m->hp().sparsity_target, 0.5f);
    EXPECT_TRUE(m->hp().sparse_activation());
    const auto want = reference_logits(path, 16);
    EXPECT_LT(test::rel_diff(test::logits_of(m, ffn_mode::dense), want), 1e-5);
    EXPECT_LT(test::rel_diff(test::logits_of(m, ffn_mode::oracle), want), 1e-5);  // the neurons that fire, computed alone
    // Not the unthresholded model, nor the one with the layers' thresholds swapped.
    EXPECT_GT(test::rel_diff(test::logits_of(m, ffn_mode::dense), reference_logits(dense, 16)), 1e-3);
    EXPECT_GT(test::rel_diff(test::logits_of(m, ffn_mode::dense), reference_logits(swapped, 16)), 1e-3);
    // As a batch, F32 cache.
    inference_context ctx(m, 16, 2, 1, tensor_type::f32);
    ctx.set_mode(ffn_mode::dense);
    const std::vector<token_id> toks(test::logits_of_tokens().begin(), test::logits_of_tokens().end());
    EXPECT_LT(test::rel_diff(test::run_tokens(ctx, toks, true), want), 1e-5);
    // Sparse: the predictor's choice, each chosen neuron still under the rule — the reference given
    // the neurons that came out nonzero (an F16 cache both sides).
    std::vector<std::vector<std::vector<bool>>> mask;
    const auto got = test::logits_and_mask_of(m, ffn_mode::sparse, nullptr, mask);
    EXPECT_LT(test::rel_diff(got, reference_logits(path, 16, &mask, tensor_type::f16)), test::f16_kv_tolerance);
    // About half of each layer's neurons count (the thresholds were picked near the median).
    int64_t on = 0, all = 0;
    for (const auto& tok : mask)
      for (const auto& layer : tok)
        for (bool b : layer) on += b, ++all;
    EXPECT_GT(on, 0);
    EXPECT_LT(on, all);
  }
}

// A thresholded file's predictor estimates each neuron's pre-activation from the FFN's normalized input
// (hotcold.sparse.predictor_input = ffn_input), and a neuron is chosen where |act(score)| >= the
// layer's predictor threshold. Predictors that compute the pre-activation exactly — fc1 = [I; -I],
// fc2 = [W, -W], W the gate rows (falcon: up) — with the file's t_l as threshold choose exactly the
// neurons the rule keeps, on both sides of SiLU's (GELU's) dip: sparse mode then computes the kept
// neurons only and gives the exact variant's logits. A predictor read on the input before the norm,
// or a choice of score >= threshold, would choose other neurons.
TEST(ActSparsity, PredictorsOfThePreActivationChooseByTheRule) {
  for (const auto arch : {architecture::llama, architecture::falcon}) {
    SCOPED_TRACE(std::string(architecture_name(arch)));
    const std::string name(architecture_name(arch));
    const auto dense = test::make_model("act_sparsity_" + name, silu_options(arch));
    const auto dm = model::load(dense);
    const int64_t d = dm->hp().n_embd, n_ff = dm->hp().n_ff;
    const std::vector<float> t{0.08f, 0.2f};
    std::vector<tools::layer_predictor> exact(2);
    for (int64_t l = 0; l < 2; ++l) {
      const auto& lw = dm->weights().layers[static_cast<size_t>(l)];
      const tensor_view& w = arch == architecture::falcon ? lw.ffn_up : lw.ffn_gate;
      auto& p = exact[static_cast<size_t>(l)];
      p.rank = 2 * d;
      p.threshold = t[static_cast<size_t>(l)];
      p.fc1.assign(static_cast<size_t>(2 * d * d), 0.0f);
      for (int64_t k = 0; k < d; ++k) p.fc1[static_cast<size_t>(k * d + k)] = 1.0f, p.fc1[static_cast<size_t>((d + k) * d + k)] = -1.0f;
      p.fc2.resize(static_cast<size_t>(n_ff * 2 * d));
      std::vector<float> row(static_cast<size_t>(d));
      for (int64_t i = 0; i < n_ff; ++i) {
        dequantize_row(w, i, row.data());
        for (int64_t k = 0; k < d; ++k) p.fc2[static_cast<size_t>(i * 2 * d + k)] = row[static_cast<size_t>(k)], p.fc2[static_cast<size_t>(i * 2 * d + d + k)] = -row[static_cast<size_t>(k)];
      }
    }
    tools::sparse_file_options so;
    so.act_thresholds = t;
    so.sparsity_target = 0.5f;
    const auto path = (test::scratch_dir() / ("act_sparsity_exact_predictors_" + name + ".gguf")).string();
    tools::write_sparse_model(dense, path, exact, so);
    const auto m = model::load(path);
    EXPECT_EQ(m->hp().pred_input, predictor_input::ffn_input);
    inference_context ctx(m, 16, 2, 1, tensor_type::f32);
    ctx.set_mode(ffn_mode::sparse);
    ctx.enable_stats(true);
    std::vector<std::vector<float>> got;
    for (size_t i = 0; i < test::logits_of_tokens().size(); ++i) {
      auto lg = ctx.forward(test::logits_of_tokens()[i], static_cast<int64_t>(i));
      got.emplace_back(lg.begin(), lg.end());
    }
    int64_t kept = 0, computed = 0, kept_computed = 0, neurons = 0;
    for (const auto& st : ctx.stats()) kept += st.truly_active, computed += st.computed, kept_computed += st.active_computed, neurons += st.neurons;
    // (Sums in another order may flip a neuron at the boundary: at most a few.)
    EXPECT_LE(kept - kept_computed, 2);
    EXPECT_LE(computed - kept, 2);
    EXPECT_GT(kept, neurons / 5);
    EXPECT_LT(kept, neurons * 4 / 5);
    EXPECT_LT(test::rel_diff(got, test::logits_of(m, ffn_mode::dense)), 1e-4);
  }
}

// A thresholded llama file of 640 neurons a layer (0.08, 0.2): `use` names the test's own files.
std::string wide_thresholded(const std::string& use, tensor_type type) {
  auto o = silu_options(architecture::llama);
  o.type = type;
  o.n_ff = 640;
  const std::string name = use + "_" + std::string(tensor_type_name(type));
  return thresholded(test::make_model("act_sparsity_wide_" + name, o), "act_sparsity_wide_t_" + name, {0.08f, 0.2f}, 640);
}

// A prompt batch of a thresholded layer keeps about half its neurons: its down rows go as one matrix
// product (twelve-token tiles and a tile of the last tokens; 640 neurons: blocks of 256 summed), which gives what one token at a time
// computes, in F16, Q8_0, Q4_0 and BF16 (the product converts each type's rows itself) and with the
// reference for F16.
TEST(ActSparsity, PromptBatchesGiveWhatTokensOneByOneGive) {
  const std::vector<token_id> toks{1, 250, 17, 299, 3, 120, 45, 7, 88, 160, 201, 33, 9, 140, 260, 61, 5, 77, 19, 222, 11, 130, 58, 290, 4, 100, 36};  // 27: two tiles and three
  for (const auto type : {tensor_type::f16, tensor_type::q8_0, tensor_type::q4_0, tensor_type::bf16}) {
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const auto path = wide_thresholded("batch", type);
    const auto m = model::load(path);
    inference_context one(m, 32, 2, 1, tensor_type::f32), batch(m, 32, 2, 1, tensor_type::f32);
    one.set_mode(ffn_mode::dense), batch.set_mode(ffn_mode::dense);
    batch.enable_stats(true);
    const auto by_token = test::run_tokens(one, toks, false), together = test::run_tokens(batch, toks, true);
    EXPECT_LT(test::rel_diff(together, by_token), 1e-5);
    int64_t kept = 0, all = 0;
    for (const auto& st : batch.stats()) kept += st.truly_active, all += st.neurons;
    EXPECT_GT(kept * 5, all * 2);  // enough fired for the product (40%)
    if (type == tensor_type::f16) {
      const auto f = gguf::file::open(path);
      EXPECT_LT(test::rel_diff(together, reference_model(f, tensor_type::f32, 32).logits(toks)), 1e-5);
    }
  }
}

// The cold pool's share of a thresholded layer's prompt batch, every neuron chosen by some token: gate
// and up as matrix products, each token's chosen neurons kept under the rule, the down rows as one
// product — the same values and sums as the neuron-by-neuron pass (batch_neurons), in F16 and Q4_0
// (whose rows meet the tokens rounded to Q8_0 either way). A choice ignored, or the rule, would differ.
TEST(ActSparsity, TheColdShareOfAPromptBatchIsTheNeuronByNeuronPass) {
  for (const auto type : {tensor_type::f16, tensor_type::q4_0}) {
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const auto m = model::load(wide_thresholded("cold", type));
    const hparams& hp = m->hp();
    const int64_t n = 20, d = hp.n_embd, n_ff = hp.n_ff;
    std::mt19937 rng(7);
    std::normal_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> in(static_cast<size_t>(n * d));
    for (auto& v : in) v = unit(rng);
    std::vector<uint8_t> chosen(static_cast<size_t>(n * n_ff));
    for (auto& c : chosen) c = rng() % 3 != 0;  // two thirds of each token's neurons
    std::vector<int32_t> ids(static_cast<size_t>(n_ff));
    for (int32_t i = 0; i < n_ff; ++i) ids[static_cast<size_t>(i)] = i;
    for (int64_t layer = 0; layer < 2; ++layer) {
      const layer_weights& l = m->weights().layers[static_cast<size_t>(layer)];
      const auto xq = quantize_for_rows(l.ffn_up, in.data(), n, d);
      const batch_ffn_input x{in.data(), xq ? xq->data() : nullptr, chosen.data(), n, d, n_ff};
      std::vector<float> h_want(static_cast<size_t>(n * n_ff), 0.0f), want(static_cast<size_t>(n * d), 0.0f), h_got(h_want.size(), 0.0f), got(want.size(), 9.0f);
      batch_neurons(hp, hp.act_threshold_of(layer), {l.ffn_gate, l.ffn_up, l.ffn_down_t}, {ids.data(), ids.data(), n_ff}, x, h_want.data(), want.data());
      thread_pool pool(2);
      std::vector<float> acc;
      cold_share(pool, *m, {nullptr, step_part::cold_ffn, 0, layer}, {{ids.data(), ids.data(), n_ff}}, x, h_got.data(), acc, got.data());
      int64_t kept = 0, differ = 0;
      for (size_t k = 0; k < h_want.size(); ++k) kept += h_want[k] != 0.0f, differ += std::fabs(h_got[k] - h_want[k]) > 1e-5f * (1 + std::fabs(h_want[k]));
      EXPECT_EQ(differ, 0);
      EXPECT_GT(kept, n * n_ff / 5);
      EXPECT_LT(kept, n * n_ff * 2 / 3);
      EXPECT_LT(test::rel_diff(std::vector<std::vector<float>>{got}, std::vector<std::vector<float>>{want}), 1e-5);
    }
  }
}

// The predictor's choice |act(s)| >= theta as bands of s (no exp a score): equal to the rule on a grid
// of scores, for thresholds with and without a negative band (SiLU's dip is 0.278 deep, GELU's 0.170).
TEST(ActSparsity, BandsOfScoresAreTheRule) {
  hparams hp;
  hp.gated_ffn = false;
  for (const auto act : {activation::silu, activation::gelu}) {
    hp.act = act;
    for (const float theta : {0.0f, 0.05f, 0.15f, 0.2f, 0.27f, 0.3f, 2.0f}) {
      const act_band b = act_band_of(act, theta);
      int64_t negative_kept = 0;
      for (int i = -40000; i <= 40000; ++i) {
        const float s = static_cast<float>(i) * 5e-4f;
        const float a = std::fabs(hidden_value(hp, 0.0f, 0.0f, s));  // |act(s)|
        if (std::fabs(a - theta) < 1e-6f) continue;                    // the boundary's last bit
        ASSERT_EQ(b.in_band(s), a >= theta) << activation_name(act) << " theta " << theta << " s " << s;
        negative_kept += s < 0 && b.in_band(s);
      }
      const float dip = act == activation::silu ? 0.278f : 0.170f;
      if (theta > 0 && theta < dip - 0.01f) {
        EXPECT_GT(negative_kept, 0) << theta;
      }
      if (theta > dip) {
        EXPECT_EQ(negative_kept, 0) << theta;
      }
    }
    std::vector<float> v{-1.3f, 0.01f, 3.0f};
    mark_band(act_band_of(act, 0.1f), v.data(), 3);
    EXPECT_EQ(v, (std::vector<float>{1.0f, 0.0f, 1.0f}));
  }
}

TEST(ActSparsity, TheNeuronRuleAndItsMargin) {
  hparams hp;
  hp.act = activation::silu;
  hp.gated_ffn = true;
  const float g = -1.0f, silu = g / (1 + std::exp(-g));  // |silu(-1)| = 0.269
  EXPECT_FLOAT_EQ(hidden_value(hp, 0.25f, g, 3.0f), silu * 3.0f);  // kept: the value as SiLU's
  EXPECT_EQ(hidden_value(hp, 0.3f, g, 3.0f), 0.0f);
  EXPECT_NEAR(firing_margin(hp, 0.25f, g, 3.0f), std::fabs(silu) - 0.25f, 1e-7);
  EXPECT_FLOAT_EQ(hidden_value(hp, 0.0f, g, 3.0f), silu * 3.0f);  // no threshold: every neuron
  hp.gated_ffn = false;
  hp.act = activation::gelu;
  EXPECT_EQ(hidden_value(hp, 10.0f, 0.0f, 2.0f), 0.0f);  // no gate: the rule on act(up)
  EXPECT_GT(hidden_value(hp, 1.0f, 0.0f, 2.0f), 1.9f);
}

TEST(ActSparsity, CalibrationSkipsTheFractionAskedFor) {
  const auto dense = test::make_model("act_sparsity_calibrate", silu_options(architecture::llama));
  tools::sparsity_options o;
  o.model_path = dense;
  o.tokens = 48;
  o.chunk = 16;
  o.threads = 2;
  for (double s : {0.3, 0.6}) {
    o.target = s;
    const auto r = tools::calibrate_act_thresholds(o);
    ASSERT_EQ(r.thresholds.size(), 2u);
    for (size_t l = 0; l < 2; ++l) {
      EXPECT_GT(r.thresholds[l], 0.0f);
      EXPECT_NEAR(r.skipped[l], s, 0.01) << l;
    }
    // The thresholded model skips about that fraction on the same tokens (the thresholds shift the
    // later layers' inputs a little).
    const auto path = thresholded(dense, "act_sparsity_calibrated_" + std::to_string(static_cast<int>(100 * s)), r.thresholds);
    inference_context ctx(model::load(path), 16, 2);
    ctx.set_mode(ffn_mode::dense);
    ctx.enable_stats(true);
    for (int64_t t = 0; t < 16; ++t) ctx.forward(static_cast<token_id>(1 + 37 * t % 300), t);
    for (const auto& st : ctx.stats()) EXPECT_NEAR(1.0 - static_cast<double>(st.truly_active) / static_cast<double>(st.neurons), s, 0.1);
  }
  o.target = 1.5;
  EXPECT_THROW(tools::calibrate_act_thresholds(o), std::invalid_argument);
  o.target = 0.5;
  o.model_path = test::make_model("act_sparsity_relu", test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16));
  EXPECT_THROW(tools::calibrate_act_thresholds(o), std::invalid_argument);  // ReLU files are sparse already
}

// model::load refuses the file with a model_error whose message names `what`.
void expect_refused(const std::string& path, const std::string& what) {
  try {
    model::load(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const model_error& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(ActSparsity, FilesThatCannotMeanTheRuleAreRefused) {
  const auto relu = test::make_model("act_sparsity_relu", test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16));
  const std::vector<float> two{0.1f, 0.2f};
  EXPECT_THROW(model::load(relu, {}, two), model_error);
  const auto silu = test::make_model("act_sparsity_llama", silu_options(architecture::llama));
  EXPECT_THROW(model::load(silu, {}, std::vector<float>{0.1f}), model_error);  // one per layer
  // In a file: a ReLU file with thresholds, a wrong count, a negative one.
  tools::sparse_file_options so;
  so.act_thresholds = two;
  const auto bad_relu = (test::scratch_dir() / "act_sparsity_bad_relu.gguf").string();
  tools::write_sparse_model(relu, bad_relu, test::random_predictors(2, 64, 256, 16, -0.2f, 9), so);
  expect_refused(bad_relu, "hotcold.sparsity.act_thresholds");
  so.act_thresholds = {0.1f, -0.2f};
  const auto negative = (test::scratch_dir() / "act_sparsity_negative.gguf").string();
  tools::write_sparse_model(silu, negative, test::random_predictors(2, 64, 256, 16, -0.2f, 9), so);
  expect_refused(negative, "[1]");
  so.act_thresholds = {0.1f, 0.2f, 0.3f};
  EXPECT_THROW(tools::write_sparse_model(silu, negative, test::random_predictors(2, 64, 256, 16, -0.2f, 9), so), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold
