// Sparse inference: the sparse FFN path against the dense one, and the predictor's rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "engine/forward.hpp"
#include "engine/layer_ops.hpp"
#include "engine/sparse_ffn.hpp"
#include "engine/predictor.hpp"
#include "engine/thread_pool.hpp"
#include "model/reference.hpp"
#include "tests/model/edited_files.hpp"
#include "tests/model/tiny_models.hpp"
#include "loader/profile.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

struct sparse_case {
  std::string name;
  architecture arch;
  activation act;
  tensor_type type;
};

void PrintTo(const sparse_case& c, std::ostream* os) { *os << c.name; }

class SparsePath : public testing::TestWithParam<sparse_case> {};

std::string sparse_model(const sparse_case& c, float threshold, gguf::file_kind kind = gguf::file_kind::gguf) {
  auto o = test::sparse_test_options(c.arch, c.act, c.type);
  auto dense = test::make_model("dense_" + c.name, o);
  auto path = (test::scratch_dir() / ("sparse_" + c.name + "_" + std::to_string(threshold) + ".gguf")).string();
  tools::sparse_file_options so;
  so.kind = kind;
  tools::write_sparse_model(dense, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, threshold, 9), so);
  return path;
}

// The sparse engine, one token at a time and as prompt batches, against model/reference given the
// neurons it chose (the tokens' nonzero FFN values: a chosen neuron that did not fire adds nothing
// either way), for every architecture and row type.
TEST_P(SparsePath, MatchesTheReferenceGivenTheNeuronsItChose) {
  // Seven tokens; and 24 with a lower predictor threshold, a batch whose union is nine in ten neurons
  // or more while each token chooses fewer, which goes through the matrix products with each token's
  // unchosen neurons zeroed.
  std::vector<token_id> long_prompt;
  for (int i = 0; i < 24; ++i) long_prompt.push_back(static_cast<token_id>(1 + (i * 37) % 290));
  for (const auto& [tokens, threshold] : {std::pair{std::vector<token_id>{1, 250, 17, 299, 3, 120, 8}, 0.0f}, std::pair{long_prompt, -1.0f}}) {
    const std::string path = sparse_model(GetParam(), threshold);
    auto m = model::load(path);
    const auto& hp = m->hp();
    const auto file = gguf::file::open(path);
    const reference_model oracle(file, tensor_type::f16);  // the context's F16 KV cache
    const auto dense = oracle.logits(tokens);
    const int64_t n = static_cast<int64_t>(tokens.size());
    for (bool batch : {false, true}) {
      SCOPED_TRACE(testing::Message() << (batch ? "a batch of " : "one token at a time, ") << n);
      inference_context ctx(m, 32, 2);
      ctx.set_mode(ffn_mode::sparse);
      reference_model::neuron_mask mask;
      test::record_neuron_mask(ctx, tokens.size(), mask);
      std::vector<std::vector<float>> got;
      if (batch) {
        auto all = ctx.forward_batch(tokens, 0, true);
        for (size_t t = 0; t < tokens.size(); ++t) got.emplace_back(all.begin() + t * hp.n_vocab, all.begin() + (t + 1) * hp.n_vocab);
        if (n >= 8) {
          EXPECT_GE(ctx.totals().rows[0] * 10, hp.n_ff * 9) << "the union is nine in ten neurons or more";
          EXPECT_LT(ctx.totals().computed[0], n * hp.n_ff * 9 / 10) << "each token chooses fewer";
        }
      } else {
        for (size_t t = 0; t < tokens.size(); ++t) {
          auto l = ctx.forward(tokens[t], static_cast<int64_t>(t));
          got.emplace_back(l.begin(), l.end());
        }
      }
      // Q8_0 / Q4_0 rows meet activations quantized to Q8_0 (as llama.cpp does), which the reference
      // does not do: the tolerance of the dense forward tests for those types.
      const bool float_rows = GetParam().type == tensor_type::f32 || GetParam().type == tensor_type::f16;
      EXPECT_LT(test::rel_diff(got, oracle.logits(tokens, &mask)), float_rows ? test::f16_kv_tolerance : 1.5e-2);
      if (float_rows) {
        EXPECT_GT(test::rel_diff(got, dense), 1e-4) << "the predictor left out no neuron that fires: this would not test the mask";
      }
    }
  }
}

// Running only the neurons that truly fire (the oracle mask) gives the dense result.
TEST_P(SparsePath, OracleMaskEqualsDense) {
  auto m = model::load(sparse_model(GetParam(), 0.0f));
  ASSERT_TRUE(m->has_predictors());
  ASSERT_TRUE(m->weights().layers[0].ffn_down_t);
  ASSERT_FALSE(m->weights().layers[0].ffn_down);
  auto dense = test::logits_of(m, ffn_mode::dense);
  EXPECT_LT(test::rel_diff(test::logits_of(m, ffn_mode::oracle), dense), 1e-5);
  EXPECT_LT(test::rel_diff(test::logits_of(m, ffn_mode::oracle, 1), test::logits_of(m, ffn_mode::dense, 1)), 1e-5);
  // Shards change only the order of the float sums of the down rows. Quantized files re-quantize the
  // next layer's input to Q8_0, where a last-bit difference can move one value by a quant step.
  const double shard_tolerance = GetParam().type == tensor_type::q4_0 || GetParam().type == tensor_type::q8_0 ? 1e-3 : 1e-5;
  EXPECT_LT(test::rel_diff(test::logits_of(m, ffn_mode::oracle, 1), dense), shard_tolerance);
}

// The sparse file (down projection as AXPY over ffn_down_t rows) computes what the dense file does
// (matrix-vector product over ffn_down); quantized types are re-quantized after the transposition.
TEST_P(SparsePath, TransposedDownMatchesTheDenseFile) {
  const auto& c = GetParam();
  auto sparse = model::load(sparse_model(c, 0.0f));
  auto dense = model::load((test::scratch_dir() / ("dense_" + c.name + ".gguf")).string());
  // F32 and F16 survive the transposition exactly; a 4-bit row re-quantized along the other axis
  // moves by a few percent (a wrong AXPY kernel would be off by 100%).
  double tolerance = c.type == tensor_type::q4_0 ? 8e-2 : c.type == tensor_type::q8_0 ? 1e-2 : 1e-5;
  EXPECT_LT(test::rel_diff(test::logits_of(sparse, ffn_mode::dense), test::logits_of(dense, ffn_mode::dense)), tolerance);
}

// A predictor that selects every neuron is the dense model; one that selects none removes the FFN.
TEST_P(SparsePath, PredictorThresholdDecides) {
  auto all = model::load(sparse_model(GetParam(), -1e30f));
  EXPECT_LT(test::rel_diff(test::logits_of(all, ffn_mode::sparse), test::logits_of(all, ffn_mode::dense)), 1e-5);
  auto none = model::load(sparse_model(GetParam(), 1e30f));
  inference_context ctx(none, 4, 2);
  ctx.set_mode(ffn_mode::sparse);
  int64_t nonzero = 0;
  ctx.set_observer([&](std::string_view name, int64_t, std::span<const float> v) {
    if (name == "ffn_act")
      for (float x : v) nonzero += x != 0.0f;
  });
  ctx.forward(1, 0);
  EXPECT_EQ(nonzero, 0);
}

// The predictor chooses neuron i for token t exactly where fc2 . relu(fc1 . x_t) reaches the layer's
// threshold, and lists the neurons any token chose, ascending, once each (one token and three).
TEST_P(SparsePath, PredictorChoosesWhereTheScoreReachesTheThreshold) {
  auto m = model::load(sparse_model(GetParam(), 0.0f));
  const hparams& hp = m->hp();
  const layer_weights& l = m->weights().layers[1];
  ASSERT_FALSE(wants_q8_input(l.pred_fc1.type));
  const int64_t d = hp.n_embd, n_ff = hp.n_ff, rank = l.pred_fc1.ne1;
  thread_pool pool(2);
  predictor_runner runner(*m, pool);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : {1, 3}) {
    std::vector<float> x(static_cast<size_t>(n * d));
    for (float& v : x) v = normal(rng);
    std::vector<uint8_t> chosen(static_cast<size_t>(n * n_ff), 7);
    std::vector<int32_t> ids{-1, -2};
    runner.predict(1, x.data(), n, chosen.data(), ids);
    std::vector<uint8_t> any(static_cast<size_t>(n_ff), 0);
    int64_t checked = 0, picked = 0;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> h(static_cast<size_t>(rank));
      for (int64_t j = 0; j < rank; ++j) h[static_cast<size_t>(j)] = std::max(0.0f, row_dot(l.pred_fc1, j, x.data() + t * d, nullptr));
      for (int64_t i = 0; i < n_ff; ++i) {
        const uint8_t c = chosen[static_cast<size_t>(t * n_ff + i)];
        ASSERT_LE(c, 1) << "token " << t << ", neuron " << i;
        any[static_cast<size_t>(i)] |= c;
        picked += c;
        const float s = row_dot(l.pred_fc2, i, h.data(), nullptr), threshold = hp.sparse_threshold[1];
        if (std::fabs(s - threshold) < 1e-4f * (1.0f + std::fabs(s))) continue;  // the sums' order may tip it
        EXPECT_EQ(c, s >= threshold ? 1 : 0) << "token " << t << ", neuron " << i << ": score " << s;
        ++checked;
      }
    }
    EXPECT_GT(checked, n * n_ff * 9 / 10);
    EXPECT_GT(picked, 0);
    EXPECT_LT(picked, n * n_ff);
    std::vector<int32_t> want;
    for (int64_t i = 0; i < n_ff; ++i)
      if (any[static_cast<size_t>(i)]) want.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(ids, want) << n << " tokens";
  }
}

// With a real threshold, exactly the neurons whose score passes are computed, each with its dense value.
TEST_P(SparsePath, OnlyPredictedNeuronsRun) {
  auto m = model::load(sparse_model(GetParam(), 0.0f));
  inference_context sparse(m, 4, 2), dense(m, 4, 2);
  sparse.set_mode(ffn_mode::sparse);
  std::vector<std::vector<float>> got, want;
  sparse.set_observer([&](std::string_view name, int64_t, std::span<const float> v) {
    if (name == "ffn_act") got.emplace_back(v.begin(), v.end());
  });
  dense.set_observer([&](std::string_view name, int64_t, std::span<const float> v) {
    if (name == "ffn_act") want.emplace_back(v.begin(), v.end());
  });
  sparse.forward(1, 0);
  dense.forward(1, 0);
  ASSERT_EQ(got.size(), 2u);
  // Layer 0 sees the same input in both, so every computed neuron matches its dense value exactly
  // up to rounding, and the skipped ones are zero.
  int64_t computed = 0;
  for (size_t i = 0; i < got[0].size(); ++i) {
    if (got[0][i] == 0.0f) continue;
    ++computed;
    EXPECT_NEAR(got[0][i], want[0][i], 1e-4 * (1 + std::fabs(want[0][i])));
  }
  EXPECT_GT(computed, 0);
  EXPECT_LT(computed, static_cast<int64_t>(got[0].size()));
}

// The down rows read (transposed rows: the neurons' that fired) against the values the FFN computed:
// one token counts its computed neurons that fired — its chosen ones (sparse) or of all (dense) —;
// a batch, the neurons that fired for any of its tokens.
TEST_P(SparsePath, DownRowsReadAreTheFiredNeurons) {
  auto m = model::load(sparse_model(GetParam(), 0.0f));
  const int64_t n_ff = m->hp().n_ff, layers = m->hp().n_layer;
  for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::dense}) {
    inference_context ctx(m, 8, 2);
    ctx.set_mode(mode);
    std::vector<int64_t> fired(static_cast<size_t>(layers), 0);
    ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> v) {
      if (name == "ffn_act") fired[static_cast<size_t>(layer)] += std::count_if(v.begin(), v.end(), [](float h) { return h != 0.0f; });
    });
    ctx.forward(1, 0);
    ctx.forward(250, 1);
    for (int64_t l = 0; l < layers; ++l) {
      EXPECT_EQ(ctx.totals().down_rows[static_cast<size_t>(l)], fired[static_cast<size_t>(l)]) << (mode == ffn_mode::sparse ? "sparse" : "dense") << " layer " << l;
      EXPECT_LT(fired[static_cast<size_t>(l)], ctx.totals().rows[static_cast<size_t>(l)]);  // some chosen neurons did not fire
    }
  }
  // A batch of three tokens: the union of the neurons that fired for each.
  for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::dense}) {
    inference_context ctx(m, 8, 2);
    ctx.set_mode(mode);
    std::vector<std::vector<uint8_t>> any(static_cast<size_t>(layers), std::vector<uint8_t>(static_cast<size_t>(n_ff), 0));
    ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> v) {
      if (name != "ffn_act") return;
      for (int64_t i = 0; i < n_ff; ++i) any[static_cast<size_t>(layer)][static_cast<size_t>(i)] |= v[static_cast<size_t>(i)] != 0.0f;
    });
    const token_id tokens[] = {1, 250, 17};
    ctx.forward_batch(tokens, 0);
    for (int64_t l = 0; l < layers; ++l) {
      const auto& a = any[static_cast<size_t>(l)];
      EXPECT_EQ(ctx.totals().down_rows[static_cast<size_t>(l)], std::count(a.begin(), a.end(), uint8_t{1})) << "batch layer " << l;
    }
  }
}

std::vector<std::vector<float>> batch_logits_of(std::shared_ptr<const model> m, ffn_mode mode, int threads = 2) {
  inference_context ctx(m, 16, threads, 1, tensor_type::f32);  // as logits_of's
  ctx.set_mode(mode);
  const token_id tokens[] = {1, 250, 17, 299, 3, 120};
  // Two batches (4 + 2 tokens), the second continuing the first's positions.
  std::vector<std::vector<float>> out;
  const int64_t nv = m->hp().n_vocab;
  auto a = ctx.forward_batch(std::span<const token_id>(tokens, 4), 0, true);
  for (int t = 0; t < 4; ++t) out.emplace_back(a.begin() + t * nv, a.begin() + (t + 1) * nv);
  auto b = ctx.forward_batch(std::span<const token_id>(tokens + 4, 2), 4, true);
  for (int t = 0; t < 2; ++t) out.emplace_back(b.begin() + t * nv, b.begin() + (t + 1) * nv);
  return out;
}

// A batch computes what the same tokens one at a time do: dense, and sparse where every token still
// computes exactly the neurons its own prediction chose (the union only decides which rows are read).
TEST_P(SparsePath, BatchEqualsOneTokenAtATime) {
  auto m = model::load(sparse_model(GetParam(), 0.0f));
  // Summation order differs (threads own other shares of the rows), so after layer 0 a predictor score
  // sitting on the threshold can fall the other way in one path, and for Q8_0/Q4_0 rows an activation
  // on a rounding boundary of its Q8_0 quantization can round the other way: those get looser bounds,
  // still far below what separates sparse from dense here.
  const bool quantized = GetParam().type == tensor_type::q8_0 || GetParam().type == tensor_type::q4_0;
  for (ffn_mode mode : {ffn_mode::dense, ffn_mode::sparse}) {
    const double tolerance = mode == ffn_mode::dense && !quantized ? 1e-5 : quantized ? 2e-3 : 1e-3;
    auto one = test::logits_of(m, mode);
    EXPECT_LT(test::rel_diff(batch_logits_of(m, mode), one), tolerance) << (mode == ffn_mode::dense ? "dense" : "sparse");
    EXPECT_LT(test::rel_diff(batch_logits_of(m, mode, 1), one), tolerance);
  }
  // Sparse differs from dense here (the random predictor misses neurons), so the check above can fail.
  EXPECT_GT(test::rel_diff(test::logits_of(m, ffn_mode::sparse), test::logits_of(m, ffn_mode::dense)), 2e-2);

  // The same neurons, token by token.
  auto acts = [&](bool batch) {
    inference_context ctx(m, 16, 2);
    ctx.set_mode(ffn_mode::sparse);
    std::vector<std::vector<float>> got;
    ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> v) {
      if (name == "ffn_act" && layer == 0) got.emplace_back(v.begin(), v.end());
    });
    const token_id tokens[] = {1, 250, 17, 299};
    if (batch) ctx.forward_batch(tokens, 0);
    else
      for (int i = 0; i < 4; ++i) ctx.forward(tokens[i], i);
    return got;
  };
  auto seq = acts(false), bat = acts(true);
  ASSERT_EQ(seq.size(), 4u);
  ASSERT_EQ(bat.size(), 4u);
  for (size_t t = 0; t < 4; ++t)
    for (size_t i = 0; i < seq[t].size(); ++i) {
      EXPECT_EQ(seq[t][i] == 0.0f, bat[t][i] == 0.0f) << "token " << t << " neuron " << i;
      EXPECT_NEAR(seq[t][i], bat[t][i], 1e-4 * (1 + std::fabs(seq[t][i])));
    }
}

std::vector<sparse_case> sparse_cases() {
  std::vector<sparse_case> out;
  for (auto [arch, act, name] : {std::tuple{architecture::llama, activation::relu, "llama_relu"},
                                 std::tuple{architecture::bamboo, activation::drelu, "bamboo_drelu"},
                                 std::tuple{architecture::falcon, activation::relu, "falcon_relu"}})
    for (auto [type, tname] : {std::pair{tensor_type::f32, "f32"}, std::pair{tensor_type::f16, "f16"},
                               std::pair{tensor_type::q8_0, "q8_0"}, std::pair{tensor_type::q4_0, "q4_0"}})
      out.push_back({std::string(name) + "_" + tname, arch, act, type});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, SparsePath, testing::ValuesIn(sparse_cases()),
                         [](const testing::TestParamInfo<sparse_case>& i) { return i.param.name; });

TEST(SparseFiles, PowerInferMagicAndKey) {
  sparse_case c{"pwri", architecture::llama, activation::relu, tensor_type::f16};
  auto path = sparse_model(c, 0.25f, gguf::file_kind::powerinfer);
  auto f = gguf::file::open(path);
  EXPECT_EQ(f.kind(), gguf::file_kind::powerinfer);
  EXPECT_EQ(f.get_float("powerinfer.sparse_threshold"), 0.25);
  auto m = model::load(path);
  EXPECT_EQ(m->hp().sparse_threshold, (std::vector<float>{0.25f, 0.25f}));
  EXPECT_TRUE(m->has_predictors());
}

// Several sequences in one step: each token attends only to its own sequence's cache, sequences join
// late and leave early, and every token's logits are those of the sequence run alone. (F32 caches: a
// key computed in a step of three tokens can round to the other neighbouring half than alone, 4e-5
// at a position here with F16.)
TEST_P(SparsePath, SequencesShareSteps) {
  auto m = model::load(sparse_model(GetParam(), 0.0f));
  const std::vector<std::vector<token_id>> seqs = {{1, 250, 17, 299, 3, 120}, {1, 42, 7, 99}, {1, 280, 5, 66, 12}};
  const int64_t starts[] = {0, 2, 1};  // the step at which each sequence joins
  for (ffn_mode mode : {ffn_mode::dense, ffn_mode::sparse}) {
    // Alone: one context per sequence, one token at a time.
    std::vector<std::vector<std::vector<float>>> alone;
    for (const auto& q : seqs) {
      inference_context ctx(m, 16, 2, 1, tensor_type::f32);
      ctx.set_mode(mode);
      alone.emplace_back();
      for (size_t i = 0; i < q.size(); ++i) {
        auto l = ctx.forward(q[i], static_cast<int64_t>(i));
        alone.back().emplace_back(l.begin(), l.end());
      }
    }
    inference_context ctx(m, 16, 2, 3, tensor_type::f32);
    ctx.set_mode(mode);
    const int64_t nv = m->hp().n_vocab;
    std::vector<std::vector<std::vector<float>>> together(3);
    for (int64_t step = 0; step < 8; ++step) {
      std::vector<token_id> tokens;
      std::vector<int64_t> slots, positions;
      for (int64_t s = 0; s < 3; ++s) {
        int64_t p = step - starts[s];
        if (p < 0 || p >= static_cast<int64_t>(seqs[static_cast<size_t>(s)].size())) continue;
        tokens.push_back(seqs[static_cast<size_t>(s)][static_cast<size_t>(p)]);
        slots.push_back(s);
        positions.push_back(p);
      }
      if (tokens.empty()) continue;
      auto l = ctx.forward_step(tokens, slots, positions);
      for (size_t t = 0; t < tokens.size(); ++t)
        together[static_cast<size_t>(slots[t])].emplace_back(l.begin() + static_cast<int64_t>(t) * nv, l.begin() + static_cast<int64_t>(t + 1) * nv);
    }
    const bool quantized = GetParam().type == tensor_type::q8_0 || GetParam().type == tensor_type::q4_0;
    const double tolerance = mode == ffn_mode::dense && !quantized ? 1e-5 : quantized ? 2e-3 : 1e-3;
    for (size_t s = 0; s < 3; ++s) {
      ASSERT_EQ(together[s].size(), seqs[s].size());
      EXPECT_LT(test::rel_diff(together[s], alone[s]), tolerance) << "sequence " << s << (mode == ffn_mode::dense ? " dense" : " sparse");
    }
  }
  inference_context two(m, 16, 2, 2);
  const token_id t[] = {1};
  const int64_t bad_slot[] = {2}, pos0[] = {0};
  EXPECT_THROW(two.forward_step(t, bad_slot, pos0), std::out_of_range);
  const int64_t slot0[] = {0}, far[] = {16};
  EXPECT_THROW(two.forward_step(t, slot0, far), std::out_of_range);
}

// Stages of layers (a pipeline across hosts): one context runs the embeddings and layers 0..k-1,
// another picks the residual stream up and runs k..L-1 (each holding its own layers' KV caches), and
// the head follows: the logits of every step (a prompt of several sequences, then decode steps) are
// the whole context's, in either mode. Each stage's model holds only its layers' weights (read
// alone: load_options' first_layer, last_layer). A stage given the wrong width, a slot it does not
// hold, or a layer whose weights it did not read is refused.
TEST_P(SparsePath, StagesOfLayersGiveTheWholeContextsLogits) {
  const std::string path = sparse_model(GetParam(), 0.0f);
  auto m = model::load(path);
  const int64_t L = m->hp().n_layer, d = m->hp().n_embd, nv = m->hp().n_vocab, k = L / 2;
  ASSERT_GE(L, 2);
  load_options front, back;
  front.last_layer = k, back.first_layer = k;
  auto m_front = model::load(path, front), m_back = model::load(path, back);
  EXPECT_TRUE(m_front->holds_layer(k - 1) && !m_front->holds_layer(k) && m_back->holds_layer(k) && !m_back->holds_layer(k - 1));
  // A middle stage (a worker's): its layers alone, neither the embeddings nor the head.
  load_options middle;
  middle.first_layer = k, middle.globals = false;
  auto m_middle = model::load(path, middle);
  EXPECT_FALSE(m_middle->holds_globals());
  for (ffn_mode mode : {ffn_mode::dense, ffn_mode::sparse}) {
    SCOPED_TRACE(mode == ffn_mode::dense ? "dense" : "sparse");
    inference_context whole(m, 16, 2, 2), first(m_front, 16, 2, 2), second(m_back, 16, 2, 2);
    for (auto* c : {&whole, &first, &second}) c->set_mode(mode);
    inference_context::step_state a, b;
    const std::vector<std::vector<token_id>> steps = {{1, 250, 17, 1, 42}, {299, 7}, {3, 99}};
    const std::vector<std::vector<int64_t>> slots = {{0, 0, 0, 1, 1}, {0, 1}, {0, 1}}, positions = {{0, 1, 2, 0, 1}, {3, 2}, {4, 3}};
    for (size_t s = 0; s < steps.size(); ++s) {
      const auto want = whole.forward_step(steps[s], slots[s], positions[s]);
      first.step_begin(a, steps[s], slots[s], positions[s]);
      first.step_layers(a, 0, k);
      second.step_begin_hidden(b, std::span<const float>(a.x.data(), steps[s].size() * static_cast<size_t>(d)), slots[s], positions[s]);
      second.step_layers(b, k, L);
      std::vector<int64_t> rows(steps[s].size());
      for (size_t t = 0; t < rows.size(); ++t) rows[t] = static_cast<int64_t>(t);
      const auto got = second.step_logits(b, rows);
      ASSERT_EQ(got.size(), static_cast<size_t>(nv) * rows.size());
      double worst = 0;
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
      EXPECT_LE(worst, 1e-5) << "step " << s;
    }
    const std::vector<float> narrow(static_cast<size_t>(d - 1));
    const int64_t slot0[] = {0}, slot2[] = {2}, pos0[] = {0};
    EXPECT_THROW(second.step_begin_hidden(b, narrow, slot0, pos0), std::invalid_argument);
    const std::vector<float> row(static_cast<size_t>(d));
    EXPECT_THROW(second.step_begin_hidden(b, row, slot2, pos0), std::out_of_range);
    EXPECT_THROW(second.step_layers(b, k, L + 1), std::out_of_range);
    EXPECT_THROW(second.step_layers(b, k - 1, L), std::logic_error);  // (layer k-1's weights were never read here)
    // The middle stage's stream equals the back stage's; it has no head to give logits with.
    inference_context mid(m_middle, 16, 2, 2);
    mid.set_mode(mode);
    inference_context::step_state c;
    const token_id t1[] = {5};
    const int64_t s0[] = {0}, p0[] = {0};
    first.step_begin(a, t1, s0, p0);
    first.step_layers(a, 0, k);
    mid.step_begin_hidden(c, std::span<const float>(a.x.data(), static_cast<size_t>(d)), s0, p0);
    mid.step_layers(c, k, L);
    second.step_begin_hidden(b, std::span<const float>(a.x.data(), static_cast<size_t>(d)), s0, p0);
    second.step_layers(b, k, L);
    for (int64_t i = 0; i < d; ++i) ASSERT_EQ(c.x[static_cast<size_t>(i)], b.x[static_cast<size_t>(i)]) << i;
    const int64_t row0[] = {0};
    EXPECT_THROW(mid.step_logits(c, row0), std::logic_error);
  }
}

// When the predictor chooses every neuron, the union is the whole layer: once measured, the next
// batch of that size skips the predictor and runs dense (the predictor can only add cost).
TEST(SparseBatch, FullUnionGoesDense) {
  sparse_case c{"llama_relu_f32", architecture::llama, activation::relu, tensor_type::f32};
  auto m = model::load(sparse_model(c, -1e30f));
  inference_context ctx(m, 64, 2);
  ctx.set_mode(ffn_mode::sparse);
  const token_id tokens[] = {1, 250, 17, 299, 3, 120, 8, 9};
  ctx.forward_batch(tokens, 0);
  for (const auto& ch : ctx.batch_choices()) {
    EXPECT_EQ(ch.sparse, 1);
    EXPECT_EQ(ch.union_fraction, 1.0);
  }
  ctx.forward_batch(tokens, 8);
  for (const auto& ch : ctx.batch_choices()) EXPECT_EQ(ch.dense, 1);
}

// Longer than one batch: split, and the positions carry on.
TEST(SparseBatch, LongInputsSplitIntoBatches) {
  auto m = model::load(test::make_model("dense_long", test::small_options(1)));
  const int64_t n = inference_context::max_batch + 40;
  std::vector<token_id> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = static_cast<token_id>((i * 37 + 1) % m->hp().n_vocab);
  inference_context one(m, n + 1, 2), batch(m, n + 1, 2);
  auto as_rows = [](std::span<const float> v) { return std::vector<std::vector<float>>{std::vector<float>(v.begin(), v.end())}; };
  std::span<const float> want;
  for (int64_t i = 0; i < n; ++i) want = one.forward(tokens[static_cast<size_t>(i)], i);
  auto want_rows = as_rows(want);
  EXPECT_LT(test::rel_diff(as_rows(batch.forward_batch(tokens, 0)), want_rows), 1e-5);
  // Decoding carries on from the batch's cache.
  auto next_one = as_rows(one.forward(5, n));
  EXPECT_LT(test::rel_diff(as_rows(batch.forward(5, n)), next_one), 1e-5);
  EXPECT_THROW(batch.forward_batch(tokens, 2), std::out_of_range);  // n tokens from position 2 pass the context
  EXPECT_THROW(batch.forward_batch(std::vector<token_id>{-1}, 0), std::out_of_range);
}

// PowerInfer files hold one threshold; per-layer thresholds of one sign are folded into fc2, so the
// PWRI file chooses exactly what the hotcold file with per-layer thresholds does.
TEST(SparseFiles, PowerInferFilesKeepPerLayerThresholds) {
  sparse_case c{"pwri_layers", architecture::llama, activation::relu, tensor_type::f32};
  sparse_model(c, 0.0f);  // makes the dense model
  auto dense = (test::scratch_dir() / "dense_pwri_layers.gguf").string();
  auto ps = test::random_predictors(2, 64, 256, 32, 0.0f, 9);
  ps[0].threshold = -0.5f;
  ps[1].threshold = -2.0f;
  auto ours = (test::scratch_dir() / "layers_gguf.gguf").string(), theirs = (test::scratch_dir() / "layers_pwri.gguf").string();
  tools::write_sparse_model(dense, ours, ps);
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  tools::write_sparse_model(dense, theirs, ps, so);
  auto a = model::load(ours), b = model::load(theirs);
  EXPECT_EQ(b->hp().sparse_threshold, (std::vector<float>{-2.0f, -2.0f}));
  inference_context ca(a, 16, 2), cb(b, 16, 2);
  ca.set_mode(ffn_mode::sparse);
  cb.set_mode(ffn_mode::sparse);
  const token_id tokens[] = {1, 250, 17, 299, 3, 120};
  for (int i = 0; i < 6; ++i) {
    auto la = ca.forward(tokens[i], i);
    std::vector<float> va(la.begin(), la.end());
    auto lb = cb.forward(tokens[i], i);
    EXPECT_LT(test::rel_diff({va}, {std::vector<float>(lb.begin(), lb.end())}), 1e-6);
  }
  EXPECT_EQ(ca.totals().computed, cb.totals().computed);
  // Layer 0's own threshold matters: with the lowest threshold for both layers, layer 0 would compute more.
  auto lowest = ps;
  lowest[0].threshold = -2.0f;
  auto low = (test::scratch_dir() / "layers_low.gguf").string();
  tools::write_sparse_model(dense, low, lowest);
  inference_context cl(model::load(low), 16, 2);
  cl.set_mode(ffn_mode::sparse);
  for (int i = 0; i < 6; ++i) cl.forward(tokens[i], i);
  EXPECT_GT(cl.totals().computed[0], ca.totals().computed[0]);
}

TEST(SparseFiles, DenseModelsCannotRunSparse) {
  auto m = model::load(test::make_model("dense_only", test::small_options(1)));
  inference_context ctx(m, 4, 1);
  EXPECT_THROW(ctx.set_mode(ffn_mode::sparse), model_error);
  ctx.set_mode(ffn_mode::oracle);  // needs no predictor
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// prepare's layout (tools::sparse_file_options: the neurons in a recorded order, each one's rows side
// by side in one bundle) against the plain file made from the same dense file and predictors.
struct layout_case {
  std::string name;
  architecture arch;
  activation act;
  tensor_type type;
  bool thresholded;  // activation thresholds: the bundle holds up and down_t, the gate stays apart
};
void PrintTo(const layout_case& c, std::ostream* os) { *os << c.name; }
class SparseLayout : public testing::TestWithParam<layout_case> {};

// A fixed shuffle of each layer's neurons: no neuron where it was.
std::vector<std::vector<int32_t>> shuffled_order(int64_t n_layer, int64_t n_ff) {
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n_layer));
  std::mt19937 rng(41);
  for (auto& o : out) {
    o.resize(static_cast<size_t>(n_ff));
    for (int64_t i = 0; i < n_ff; ++i) o[static_cast<size_t>(i)] = static_cast<int32_t>((i + 1) % n_ff);  // a rotation, then shuffled
    std::shuffle(o.begin(), o.end(), rng);
  }
  return out;
}

std::string layout_file(const layout_case& c, const std::string& tag, bool bundle, const std::vector<std::vector<int32_t>>& order, bool down_blocks = false,
                        float predictor_threshold = 0.0f) {
  auto o = test::sparse_test_options(c.arch, c.act, c.type);
  auto dense = test::make_model("layout_dense_" + c.name, o);
  auto path = (test::scratch_dir() / ("layout_" + c.name + "_" + tag + ".gguf")).string();
  tools::sparse_file_options so;
  so.bundle = bundle, so.order = order, so.down_blocks = down_blocks;
  if (c.thresholded) so.act_thresholds.assign(static_cast<size_t>(o.n_layer), 0.05f);
  tools::write_sparse_model(dense, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, predictor_threshold, 9), so);
  return path;
}

// Layer 0's FFN values of the logits_of tokens (one forward() a token).
std::vector<std::vector<float>> layer0_values(std::shared_ptr<const model> m) {
  inference_context ctx(m, 16, 2, 1, tensor_type::f32);
  ctx.set_mode(ffn_mode::sparse);
  std::vector<std::vector<float>> got;
  ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> v) {
    if (name == "ffn_act" && layer == 0) got.emplace_back(v.begin(), v.end());
  });
  const auto& tokens = test::logits_of_tokens();
  for (size_t t = 0; t < tokens.size(); ++t) ctx.forward(tokens[t], static_cast<int64_t>(t));
  return got;
}

TEST_P(SparseLayout, BundledRowsComputeWhatPlainRowsDo) {
  const auto& c = GetParam();
  const auto plain_path = layout_file(c, "plain", false, {});
  const auto bundled_path = layout_file(c, "bundled", true, {});
  auto plain = model::load(plain_path), bundled = model::load(bundled_path);
  const auto& l = bundled->weights().layers[0];
  ASSERT_TRUE(l.ffn_bundle);
  EXPECT_FALSE(l.ffn_order);
  EXPECT_FALSE(l.ffn_up.packed());
  EXPECT_EQ(l.ffn_up.row(1) - l.ffn_up.row(0), static_cast<std::ptrdiff_t>(l.ffn_bundle.row_bytes));
  EXPECT_EQ(static_cast<bool>(l.ffn_gate) && !l.ffn_gate.packed(), c.arch != architecture::falcon && !c.thresholded) << "the gate in the bundle or apart";
  EXPECT_EQ(bundled->weight_bytes(), plain->weight_bytes());
  // The same rows in the same order: the same sums, bit for bit, in every mode and as a batch.
  for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::dense, ffn_mode::oracle}) EXPECT_EQ(test::logits_of(bundled, mode), test::logits_of(plain, mode));
  // Batches, short and long enough for the matrix paths (the float tile, sixteen-row groups, the
  // transposed down product): they read the bundle's rows through the same views.
  std::vector<token_id> long_prompt;
  for (int i = 0; i < 24; ++i) long_prompt.push_back(static_cast<token_id>(1 + (i * 37) % 290));
  for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::dense})
    for (const std::vector<token_id>* tokens : {&test::logits_of_tokens(), static_cast<const std::vector<token_id>*>(&long_prompt)}) {
      inference_context a(plain, 32, 2), b(bundled, 32, 2);
      a.set_mode(mode), b.set_mode(mode);
      EXPECT_EQ(test::run_tokens(b, *tokens, true), test::run_tokens(a, *tokens, true)) << tokens->size() << " tokens";
    }
  // model/reference reads the bundle by its own definition.
  const auto pf = gguf::file::open(plain_path), bf = gguf::file::open(bundled_path);
  EXPECT_EQ(reference_model(bf, tensor_type::f32).logits(test::logits_of_tokens()), reference_model(pf, tensor_type::f32).logits(test::logits_of_tokens()));
}

TEST_P(SparseLayout, ReorderedNeuronsComputeTheSameTokens) {
  const auto& c = GetParam();
  const auto& hp_src = test::sparse_test_options(c.arch, c.act, c.type);
  const auto order = shuffled_order(hp_src.n_layer, hp_src.n_ff);
  auto plain = model::load(layout_file(c, "plain", false, {}));
  for (bool bundle : {false, true}) {
    SCOPED_TRACE(bundle ? "bundled" : "ordered only");
    auto ordered = model::load(layout_file(c, bundle ? "ordered_bundled" : "ordered", bundle, order));
    const auto& o = ordered->weights().layers[1].ffn_order;
    ASSERT_TRUE(o);
    EXPECT_TRUE(std::equal(order[1].begin(), order[1].end(), reinterpret_cast<const int32_t*>(o.data)));
    // Layer 0 reads the same input: neuron i of the ordered file is neuron order[i] of the plain one,
    // computed by the same row kernels — exactly its value, chosen by the same predictor row.
    const auto pv = layer0_values(plain), ov = layer0_values(ordered);
    ASSERT_EQ(pv.size(), ov.size());
    int64_t fired = 0;
    for (size_t t = 0; t < pv.size(); ++t)
      for (size_t i = 0; i < ov[t].size(); ++i) {
        ASSERT_EQ(ov[t][i], pv[t][static_cast<size_t>(order[0][i])]) << "token " << t << " neuron " << i;
        fired += ov[t][i] != 0.0f;
      }
    EXPECT_GT(fired, 0);
    // Later, only the order of the down rows' sums differs.
    const bool quantized = c.type == tensor_type::q8_0 || c.type == tensor_type::q4_0;
    for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::dense})
      EXPECT_LT(test::rel_diff(test::logits_of(ordered, mode), test::logits_of(plain, mode)), quantized ? 2e-3 : 1e-5);
  }
}

// A matrix of a file as floats, row by row (ne1 rows of ne0).
std::vector<float> file_matrix(const std::string& path, const std::string& name) {
  const auto f = gguf::file::open(path);
  const auto* t = f.find_tensor(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  tensor_view v;
  v.type = t->type, v.ne0 = t->ne[0], v.ne1 = t->ne[1], v.data = t->data;
  v.row_bytes = static_cast<size_t>(t->n_bytes / static_cast<uint64_t>(t->ne[1]));
  std::vector<float> out(static_cast<size_t>(v.ne0 * v.ne1));
  for (int64_t r = 0; r < v.ne1; ++r) dequantize_row(v, r, out.data() + r * v.ne0);
  return out;
}

// prepare --down-layout blocks: the down matrix kept as ffn_down, its columns (the neurons) in the
// file's order; the down product then rounds each token's hidden values to Q8_0 where the matrix is
// quantized and skips the blocks of 32 neurons none of which fired.
TEST_P(SparseLayout, DownBlocksComputeWhatDownRowsDo) {
  const auto& c = GetParam();
  const auto& o = test::sparse_test_options(c.arch, c.act, c.type);
  const auto order = shuffled_order(o.n_layer, o.n_ff);
  const auto blocks_path = layout_file(c, "down_blocks", false, order, true);
  auto blocks = model::load(blocks_path), rows = model::load(layout_file(c, "ordered", false, order));
  const auto& l = blocks->weights().layers[0];
  ASSERT_TRUE(l.ffn_down);
  EXPECT_FALSE(l.ffn_down_t);
  EXPECT_FALSE(l.ffn_bundle);
  ASSERT_TRUE(l.ffn_order);
  // Column i of the file's ffn_down is column order[i] of the dense file's: exactly for float types,
  // within half a quant step of the re-quantized blocks for the others.
  const std::string dense_path = (test::scratch_dir() / ("layout_dense_" + c.name + ".gguf")).string();
  for (int64_t layer = 0; layer < o.n_layer; ++layer) {
    const std::string name = fmt::format("blk.{}.ffn_down.weight", layer);
    const auto got = file_matrix(blocks_path, name), want = file_matrix(dense_path, name);
    ASSERT_EQ(got.size(), want.size());
    const auto& ord = order[static_cast<size_t>(layer)];
    for (int64_t r = 0; r < o.n_embd; ++r) {
      float most = 0;
      for (int64_t i = 0; i < o.n_ff; ++i) most = std::max(most, std::fabs(want[static_cast<size_t>(r * o.n_ff + i)]));
      // Q4_0 reaches -8 steps one way and 7 the other: a value near the far end is off by up to a step.
      const float step = c.type == tensor_type::q4_0 ? most / 7 : c.type == tensor_type::q8_0 ? most / 120 : 0.0f;
      for (int64_t i = 0; i < o.n_ff; ++i)
        ASSERT_LE(std::fabs(got[static_cast<size_t>(r * o.n_ff + i)] - want[static_cast<size_t>(r * o.n_ff + ord[static_cast<size_t>(i)])]), step)
            << "layer " << layer << " row " << r << " neuron " << i;
    }
  }
  // Layer 0's neurons: the same gate and up rows in the same order, the same values.
  EXPECT_EQ(layer0_values(blocks), layer0_values(rows));
  // The logits: the down rows against the down blocks differ only in the down matrix's rounding
  // (re-quantized along the other axis) and in the hidden values' (Q8_0 for a quantized matrix).
  const double tolerance = c.type == tensor_type::q4_0 ? 8e-2 : c.type == tensor_type::q8_0 ? 1e-2 : 1e-5;
  for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::dense, ffn_mode::oracle})
    EXPECT_LT(test::rel_diff(test::logits_of(blocks, mode), test::logits_of(rows, mode)), tolerance) << static_cast<int>(mode);
  // Without an order the dense file's down matrix is copied as it is, bytes and all.
  {
    const auto plain_path = layout_file(c, "down_blocks_plain", false, {}, true);
    const auto pf = gguf::file::open(plain_path), df = gguf::file::open(dense_path);
    const auto *a = pf.find_tensor("blk.1.ffn_down.weight"), *b = df.find_tensor("blk.1.ffn_down.weight");
    ASSERT_TRUE(a && b);
    ASSERT_EQ(a->n_bytes, b->n_bytes);
    EXPECT_EQ(0, std::memcmp(a->data, b->data, static_cast<size_t>(a->n_bytes)));
  }
  // Every neuron chosen: the sparse path is the dense path of the same file, one token at a time and
  // as a batch of 24 (matrix products, the mask all ones).
  auto all = model::load(layout_file(c, "down_blocks_all", false, order, true, -1e30f));
  EXPECT_LT(test::rel_diff(test::logits_of(all, ffn_mode::sparse), test::logits_of(all, ffn_mode::dense)), 1e-5);
  std::vector<token_id> long_prompt;
  for (int i = 0; i < 24; ++i) long_prompt.push_back(static_cast<token_id>(1 + (i * 37) % 290));
  {
    inference_context a(all, 32, 2), b(all, 32, 2);
    a.set_mode(ffn_mode::sparse), b.set_mode(ffn_mode::dense);
    EXPECT_LT(test::rel_diff(test::run_tokens(a, long_prompt, true), test::run_tokens(b, long_prompt, true)), 1e-5);
  }
  // Few neurons chosen: whole blocks of 32 skipped (fewer down columns read than a token's n_ff), and
  // the result is still the reference's given the neurons the engine chose.
  if (!c.thresholded) {
    const auto few_path = layout_file(c, "down_blocks_few", false, order, true, 1.5f);
    auto few = model::load(few_path);
    const auto file = gguf::file::open(few_path);
    const reference_model oracle(file, tensor_type::f16);
    const auto& tokens = test::logits_of_tokens();
    inference_context ctx(few, 16, 2);
    ctx.set_mode(ffn_mode::sparse);
    reference_model::neuron_mask mask;
    int64_t fired = 0;
    test::record_neuron_mask(ctx, tokens.size(), mask, &fired);
    std::vector<std::vector<float>> got;
    for (size_t t = 0; t < tokens.size(); ++t) {
      auto lg = ctx.forward(tokens[t], static_cast<int64_t>(t));
      got.emplace_back(lg.begin(), lg.end());
    }
    EXPECT_GT(fired, 0);
    const int64_t n = static_cast<int64_t>(tokens.size());
    if (c.type == tensor_type::q4_0) {
      EXPECT_LT(ctx.totals().down_rows[0] + ctx.totals().down_rows[1], 2 * n * o.n_ff) << "no block was skipped";
    }
    const bool float_rows = c.type == tensor_type::f32 || c.type == tensor_type::f16;
    EXPECT_LT(test::rel_diff(got, oracle.logits(tokens, &mask)), float_rows ? test::f16_kv_tolerance : 1.5e-2);
  }
}

// A laid-out file whose bundle or order is wrong in one way gives one error naming it.
TEST(SparseLayoutErrors, NamedWhereTheFileIsWrong) {
  const layout_case c{"errors", architecture::llama, activation::relu, tensor_type::f32, false};
  const auto o = test::sparse_test_options(c.arch, c.act, c.type);
  const auto good = layout_file(c, "ordered_bundled", true, shuffled_order(o.n_layer, o.n_ff));
  // good with one tensor's shape or bytes changed.
  auto changed = [&](const std::string& name, const std::string& tensor, const auto& change) {
    test::gguf_edit e;
    e.tensor = [&](std::string& n, tensor_type&, std::vector<int64_t>& ne, std::vector<uint8_t>& b) {
      if (n == tensor) change(ne, b);
      return true;
    };
    return test::edited_copy(good, "layout_error_" + name, e);
  };
  test::expect_model_error(changed("twice", "blk.1.ffn_order", [](std::vector<int64_t>&, std::vector<uint8_t>& b) {
                             std::memcpy(b.data() + 4, b.data(), 4);  // one neuron twice
                           }),
                           "tensor blk.1.ffn_order is not an order of the 256 neurons");
  test::expect_model_error(changed("short_order", "blk.0.ffn_order", [](std::vector<int64_t>& ne, std::vector<uint8_t>& b) { ne[0] = 255, b.resize(255 * 4); }),
                           "tensor blk.0.ffn_order must be I32 of n_ff = 256 values");
  test::expect_model_error(changed("four_parts", "blk.0.ffn_bundle.weight",
                                   [](std::vector<int64_t>& ne, std::vector<uint8_t>& b) { ne[0] = 64 * 4, b.resize(b.size() / 3 * 4); }),
                           "tensor blk.0.ffn_bundle.weight has shape [256, 256]");
  test::gguf_edit both;  // an ffn_up beside the bundle that holds it
  both.add_tensors = [](const gguf::file& f) {
    const auto* b = f.find_tensor("blk.1.ffn_bundle.weight");
    return std::vector<test::gguf_edit::added>{{"blk.1.ffn_up.weight", tensor_type::f32, {64, 256}, std::vector<uint8_t>(b->data, b->data + b->n_bytes / 3)}};
  };
  test::expect_model_error(test::edited_copy(good, "layout_error_both", both), "blk.1 has both ffn_bundle.weight and ffn_up.weight");
}

// A profile of the dense file counts neurons in its order; a file laid out by prepare reads them
// through its recorded order (and a profile of that file itself is in its order already).
TEST(SparseLayoutErrors, ProfileCountsFollowTheFilesOrder) {
  const layout_case c{"counts", architecture::llama, activation::relu, tensor_type::f32, false};
  const auto o = test::sparse_test_options(c.arch, c.act, c.type);
  const auto order = shuffled_order(o.n_layer, o.n_ff);
  auto m = model::load(layout_file(c, "ordered_bundled", true, order));
  loader::profile_data d;
  d.n_layer = o.n_layer, d.n_ff = o.n_ff, d.tokens = 1;
  for (int64_t l = 0; l < o.n_layer; ++l)
    for (int64_t i = 0; i < o.n_ff; ++i) d.firing_counts.push_back(static_cast<uint64_t>(1000 * l + i));
  const auto got = loader::counts_in_order_of(d, *m);
  for (int64_t l = 0; l < o.n_layer; ++l)
    for (int64_t i = 0; i < o.n_ff; ++i)
      ASSERT_EQ(got[static_cast<size_t>(l * o.n_ff + i)], static_cast<uint64_t>(1000 * l + order[static_cast<size_t>(l)][static_cast<size_t>(i)]))
          << "layer " << l << " position " << i;
  d.file_order = true;
  EXPECT_EQ(loader::counts_in_order_of(d, *m), d.firing_counts);
  // prepare's order: most often firing first, ties by number.
  const auto fo = tools::firing_order({5, 9, 9, 0, 7, 1}, 2, 3);
  EXPECT_EQ(fo[0], (std::vector<int32_t>{1, 2, 0}));
  EXPECT_EQ(fo[1], (std::vector<int32_t>{1, 2, 0}));
}

std::vector<layout_case> layout_cases() {
  return {{"llama_relu_f16", architecture::llama, activation::relu, tensor_type::f16, false},
          {"llama_relu_q4_0", architecture::llama, activation::relu, tensor_type::q4_0, false},
          {"bamboo_drelu_q8_0", architecture::bamboo, activation::drelu, tensor_type::q8_0, false},
          {"falcon_relu_f32", architecture::falcon, activation::relu, tensor_type::f32, false},
          {"llama_silu_thresholded_q4_0", architecture::llama, activation::silu, tensor_type::q4_0, true},
          {"llama_silu_thresholded_f16", architecture::llama, activation::silu, tensor_type::f16, true}};
}

INSTANTIATE_TEST_SUITE_P(Files, SparseLayout, testing::ValuesIn(layout_cases()), [](const testing::TestParamInfo<layout_case>& i) { return i.param.name; });

}  // namespace
}  // namespace hotcold
