// gen-model's sparsity, measured on text the model reads and generates: the mean active fraction is
// within 20% of --active and the most frequent 20% of neurons take at least 60% of the firings.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "engine/forward.hpp"
#include "model/sampler.hpp"
#include "tests/model/edited_files.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/gen_model.hpp"
#include "loader/text_corpus.hpp"

namespace hotcold {
namespace {

TEST(PowerLaw, HitsTheMeanAndTheShare) {
  double alpha = 0;
  auto p = tools::power_law_probabilities(1000, 0.1, 0.7, &alpha);
  ASSERT_EQ(p.size(), 1000u);
  EXPECT_NEAR(std::accumulate(p.begin(), p.end(), 0.0) / 1000, 0.1, 1e-6);
  EXPECT_TRUE(std::is_sorted(p.rbegin(), p.rend()));
  double top = std::accumulate(p.begin(), p.begin() + 200, 0.0) / std::accumulate(p.begin(), p.end(), 0.0);
  EXPECT_NEAR(top, 0.7, 0.01);
  EXPECT_GT(alpha, 0.0);
  EXPECT_LE(p.front(), 0.97);
}

struct firing_stats {
  double mean_active = 0;
  std::vector<double> top20_share;  // per layer
};

// Reads a real text prompt and samples a continuation, counting which FFN neurons fire.
firing_stats measure(const std::string& path) {
  auto m = model::load(path);
  const auto& hp = m->hp();
  inference_context ctx(m, 256, 2);
  std::vector<std::vector<int64_t>> counts(hp.n_layer, std::vector<int64_t>(hp.n_ff, 0));
  int64_t active = 0, observed = 0;
  ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> v) {
    if (name != "ffn_act") return;
    for (size_t j = 0; j < v.size(); ++j)
      if (v[j] != 0.0f) ++counts[layer][j], ++active;
    observed += static_cast<int64_t>(v.size());
  });
  auto prompt = m->vocabulary().tokenize(loader::mixed_text(400, 11), true);
  prompt.resize(std::min<size_t>(prompt.size(), 96));
  int64_t pos = 0;
  std::span<const float> logits;
  for (token_id t : prompt) logits = ctx.forward(t, pos++);
  sampling_params sp;
  sp.temperature = 1.0f;
  sp.seed = 3;
  sampler smp(sp);
  while (pos < 192) logits = ctx.forward(smp.sample(logits), pos++);

  firing_stats s;
  s.mean_active = static_cast<double>(active) / static_cast<double>(observed);
  for (auto& c : counts) {
    std::sort(c.rbegin(), c.rend());
    double all = std::accumulate(c.begin(), c.end(), 0.0);
    s.top20_share.push_back(std::accumulate(c.begin(), c.begin() + static_cast<ptrdiff_t>(c.size() / 5), 0.0) / all);
  }
  return s;
}

struct sparsity_case {
  const char* name;
  architecture arch;
  activation act;
  double active;
};

class Sparsity : public testing::TestWithParam<sparsity_case> {};

TEST_P(Sparsity, PowerLawOnGeneratedText) {
  const auto& c = GetParam();
  tools::gen_model_options o;
  o.arch = c.arch;
  o.act = c.act;
  o.n_embd = 256;
  o.n_layer = 4;
  o.n_ff = 1024;
  o.n_head = 8;
  o.n_head_kv = c.arch == architecture::falcon ? 1 : 4;
  o.active = c.active;
  o.type = tensor_type::f16;
  o.seed = 5;
  o.vocab_path = HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf";
  auto stats = measure(test::make_model(c.name, o));
  EXPECT_NEAR(stats.mean_active, c.active, 0.2 * c.active);
  for (size_t l = 0; l < stats.top20_share.size(); ++l) EXPECT_GE(stats.top20_share[l], 0.6) << "layer " << l;
  RecordProperty("mean_active", testing::PrintToString(stats.mean_active));
  RecordProperty("top20_share_layer0", testing::PrintToString(stats.top20_share[0]));
}

INSTANTIATE_TEST_SUITE_P(Models, Sparsity,
                         testing::Values(sparsity_case{"llama_relu_10", architecture::llama, activation::relu, 0.10},
                                         sparsity_case{"llama_relu_05", architecture::llama, activation::relu, 0.05},
                                         sparsity_case{"bamboo_drelu_10", architecture::bamboo, activation::drelu, 0.10},
                                         sparsity_case{"falcon_relu_10", architecture::falcon, activation::relu, 0.10}),
                         [](const testing::TestParamInfo<sparsity_case>& i) { return std::string(i.param.name); });

TEST(Sparsity, DenseActivationsAreDense) {
  auto o = test::small_options(1);
  o.act = activation::silu;
  auto stats = measure(test::make_model("llama_silu_dense", o));
  EXPECT_GT(stats.mean_active, 0.99);
}

TEST(GenModel, RefusesImpossibleOptions) {
  tools::gen_model_options o;
  o.vocab_path = test::tiny_vocab();
  o.out_path = (test::scratch_dir() / "never.gguf").string();
  auto expect = test::expect_gen_model_error;
  auto b = o;
  b.n_head = 7;
  expect(b, "--heads 7 must divide --embd 256");
  b = o;
  b.n_head_kv = 3;
  expect(b, "--kv-heads 3 must divide --heads 8");
  b = o;
  b.active = 1.5;
  expect(b, "--active 1.5 must be between 0 and 1");
  b = o;
  b.arch = architecture::falcon;
  b.act = activation::drelu;
  expect(b, "--act drelu needs a gated FFN");
  b = o;
  b.type = tensor_type::q4_0;
  b.n_ff = 1000;
  expect(b, "must be multiples of it");
  EXPECT_FALSE(std::filesystem::exists(o.out_path));
}

}  // namespace
}  // namespace hotcold
