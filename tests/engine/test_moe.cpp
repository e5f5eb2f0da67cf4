// Mixtures of experts (docs/moe.md): the router's rule, the engine against model/reference on files
// of the three architectures and the weight types, a batch grouped by expert against one token at a
// time, and bad files with one clear error each.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <cstring>
#include <algorithm>

#include "engine/forward.hpp"
#include "model/reference.hpp"
#include "tests/model/edited_files.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/gen_model.hpp"

namespace hotcold {
namespace {

// Softmax, the k most probable (ties to the lower number, most probable first), and their weights:
// renormalized to sum 1 (llama, qwen3moe) or the probabilities as they are (qwen2moe).
TEST(MoeRouter, PicksTheMostProbableAndWeighsThem) {
  hparams hp;
  hp.n_expert = 4, hp.n_expert_used = 2;
  const float logits[8] = {0.0f, 2.0f, 1.0f, 2.0f,  // experts 1 and 3 tie: 1 first
                           3.0f, -1.0f, 0.5f, 2.5f};
  const double z0 = 1 + 2 * std::exp(2.0) + std::exp(1.0), z1 = std::exp(3.0) + std::exp(-1.0) + std::exp(0.5) + std::exp(2.5);
  int32_t e[4];
  float w[4];
  hp.expert_weights_norm = true;
  route_experts(hp, logits, 2, e, w);
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[1], 3);
  EXPECT_EQ(e[2], 0);
  EXPECT_EQ(e[3], 3);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  EXPECT_FLOAT_EQ(w[2], static_cast<float>(std::exp(3.0) / (std::exp(3.0) + std::exp(2.5))));
  EXPECT_FLOAT_EQ(w[3], static_cast<float>(std::exp(2.5) / (std::exp(3.0) + std::exp(2.5))));
  hp.expert_weights_norm = false;
  route_experts(hp, logits, 2, e, w);
  EXPECT_FLOAT_EQ(w[0], static_cast<float>(std::exp(2.0) / z0));
  EXPECT_FLOAT_EQ(w[1], static_cast<float>(std::exp(2.0) / z0));
  EXPECT_FLOAT_EQ(w[2], static_cast<float>(std::exp(3.0) / z1));
  EXPECT_FLOAT_EQ(w[3], static_cast<float>(std::exp(2.5) / z1));
}

struct moe_case {
  std::string name;
  architecture arch;
  tensor_type type;
  bool k_mix = false;  // llama.cpp's _M mix: some layers' down experts Q6_K
};
void PrintTo(const moe_case& c, std::ostream* os) { *os << c.name; }

tools::gen_model_options moe_options(const moe_case& c) {
  tools::gen_model_options o;
  o.arch = c.arch, o.type = c.type, o.act = activation::silu, o.k_mix = c.k_mix;
  const bool k_quant = c.type == tensor_type::q4_k;
  o.n_embd = k_quant ? 256 : 64, o.n_ff = k_quant ? 256 : 64, o.n_ff_shared = k_quant ? 256 : 96;
  o.n_layer = 2, o.n_head = 4, o.n_head_kv = 2;
  o.n_experts = 8, o.n_experts_used = 2;
  o.norm_spread = 0.2;
  return o;
}

class MoePath : public testing::TestWithParam<moe_case> {};

// The engine, one token at a time and as one batch, against model/reference (the file's definition,
// written apart from the engine), each with an F16 KV cache: float files as the reference routes
// them; quantized ones — whose rounding may tip a near tie between two experts — held to the experts
// the engine chose, weighted by the reference's probabilities.
TEST_P(MoePath, MatchesTheReference) {
  const auto& c = GetParam();
  const auto path = test::make_model("moe_" + c.name, moe_options(c));
  auto m = model::load(path);
  ASSERT_TRUE(m->hp().moe());
  EXPECT_EQ(m->hp().expert_weights_norm, c.arch != architecture::qwen2moe);
  const auto file = gguf::file::open(path);
  const reference_model oracle(file, tensor_type::f16);
  std::vector<token_id> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(static_cast<token_id>(1 + (i * 53) % 290));
  const bool float_rows = c.type == tensor_type::f32 || c.type == tensor_type::f16;
  const auto plain = oracle.logits(tokens);
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "batch" : "one at a time");
    inference_context ctx(m, 32, 2);
    reference_model::neuron_mask chosen;
    test::record_neuron_mask(ctx, tokens.size(), chosen);
    const auto got = test::run_tokens(ctx, tokens, batch);
    ASSERT_EQ(chosen.size(), tokens.size());
    ASSERT_EQ(chosen[0][0].size(), static_cast<size_t>(m->hp().n_expert));
    EXPECT_EQ(std::count(chosen[3][1].begin(), chosen[3][1].end(), true), m->hp().n_expert_used);
    if (float_rows) EXPECT_LT(test::rel_diff(got, plain), test::f16_kv_tolerance);
    // Pure Q4_K (no _M mix) rounds more than the dense suite's Q4_K_M files (2.5e-2 there): measured
    // with `eval --vs-oracle` on 16 tokens, a dense qwen3 Q4_K file of this shape stands 1.55e-2 from
    // the reference and its qwen3moe twin 1.57e-2 (llama.cpp's logits: 0.85e-2 and 0.93e-2 from ours).
    else EXPECT_LT(test::rel_diff(got, oracle.logits(tokens, &chosen)), c.type == tensor_type::q4_k ? 3e-2 : 1.5e-2);
  }
}

// A batch reads each chosen expert once for all the tokens that chose it, and computes what one
// token at a time does (F32 weights and cache: only the order of the sums differs).
TEST(MoeBatch, ReadsEachExpertOnce) {
  int64_t guessed = 0, chosen = 0, used = 0, experts = 0;
  for (auto arch : {architecture::llama, architecture::qwen2moe, architecture::qwen3moe}) {
    const moe_case c{std::string(architecture_name(arch)) + "_f32", arch, tensor_type::f32};
    SCOPED_TRACE(c.name);
    auto m = model::load(test::make_model("moe_" + c.name, moe_options(c)));
    const auto& hp = m->hp();
    std::vector<token_id> tokens;
    for (int i = 0; i < 24; ++i) tokens.push_back(static_cast<token_id>(1 + (i * 37) % 290));
    inference_context a(m, 32, 2, 1, tensor_type::f32), b(m, 32, 2, 1, tensor_type::f32);
    const auto one = test::run_tokens(a, tokens, false), all = test::run_tokens(b, tokens, true);
    EXPECT_LT(test::rel_diff(all, one), 1e-5);
    // The expert guess (the next layer's router on this layer's output): counted from layer 1 on, the
    // same per token in a batch as alone; over the three files, well above chance (k / n_expert).
    EXPECT_EQ(a.totals().experts_chosen[0], 0);
    EXPECT_EQ(a.totals().experts_guessed, b.totals().experts_guessed);
    for (int64_t l = 1; l < hp.n_layer; ++l) {
      EXPECT_EQ(a.totals().experts_chosen[static_cast<size_t>(l)], 24 * hp.n_expert_used);
      guessed += a.totals().experts_guessed[static_cast<size_t>(l)], chosen += a.totals().experts_chosen[static_cast<size_t>(l)];
      EXPECT_LE(a.totals().experts_guessed[static_cast<size_t>(l)], a.totals().experts_chosen[static_cast<size_t>(l)]);
    }
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      EXPECT_EQ(b.totals().computed[static_cast<size_t>(l)], 24 * hp.n_expert_used * hp.n_ff_exp);
      EXPECT_LE(b.totals().rows[static_cast<size_t>(l)], hp.n_expert * hp.n_ff_exp) << "an expert read more than once";
      EXPECT_EQ(a.totals().rows[static_cast<size_t>(l)], 24 * hp.n_expert_used * hp.n_ff_exp);
    }
    used = hp.n_expert_used, experts = hp.n_expert;
  }
  // Here: 30, 14 and 34 of 48 (Mixtral, qwen2moe — whose large attention biases move the stream most —,
  // qwen3moe), against 12 by chance.
  EXPECT_GT(2 * guessed * experts, 3 * chosen * used);
}

std::vector<moe_case> moe_cases() {
  std::vector<moe_case> out;
  for (auto [arch, an] : {std::pair{architecture::llama, "mixtral"}, std::pair{architecture::qwen2moe, "qwen2moe"}, std::pair{architecture::qwen3moe, "qwen3moe"}})
    for (auto [type, tn] : {std::pair{tensor_type::f32, "f32"}, std::pair{tensor_type::f16, "f16"}, std::pair{tensor_type::q8_0, "q8_0"},
                            std::pair{tensor_type::q4_0, "q4_0"}, std::pair{tensor_type::q4_k, "q4_k"}})
      out.push_back({std::string(an) + "_" + tn, arch, type});
  out.push_back({"mixtral_q4_k_m", architecture::llama, tensor_type::q4_k, true});
  return out;
}
INSTANTIATE_TEST_SUITE_P(Files, MoePath, testing::ValuesIn(moe_cases()), [](const testing::TestParamInfo<moe_case>& i) { return i.param.name; });

// qwen2moe's shared expert counts, scaled by its gate: a file whose gate vector is zeroed (scale 1/2
// for every token) computes another model, the reference's of that file.
TEST(MoeSharedExpert, ItsGateScalesIt) {
  const auto base = test::make_model("moe_qwen2moe_f32", moe_options({"qwen2moe_f32", architecture::qwen2moe, tensor_type::f32}));
  test::gguf_edit e;
  e.tensor = [](std::string& name, tensor_type&, std::vector<int64_t>&, std::vector<uint8_t>& bytes) {
    if (name.ends_with("ffn_gate_inp_shexp.weight")) std::fill(bytes.begin(), bytes.end(), uint8_t{0});
    return true;
  };
  const auto edited = test::edited_copy(base, "moe_shexp_gate_zero", e);
  const auto& tokens = test::logits_of_tokens();
  auto a = test::logits_of(model::load(base), ffn_mode::dense), b = test::logits_of(model::load(edited), ffn_mode::dense);
  EXPECT_GT(test::rel_diff(b, a), 1e-3);
  const auto file = gguf::file::open(edited);
  EXPECT_LT(test::rel_diff(b, reference_model(file, tensor_type::f32).logits(tokens)), 1e-5);
}

// Bad mixture files: one clear error each, naming what is wrong.
TEST(MoeErrors, NamedWhereTheFileIsWrong) {
  const auto base = test::make_model("moe_qwen2moe_f32", moe_options({"qwen2moe_f32", architecture::qwen2moe, tensor_type::f32}));
  auto with_key = [&](const std::string& name, const std::string& key, uint32_t v) {
    test::gguf_edit e;
    e.keep_key = [key](std::string_view k) { return k != key; };
    e.add_keys = [key, v](gguf::writer& w) { w.set_u32(key, v); };
    return test::edited_copy(base, name, e);
  };
  test::expect_model_error(with_key("moe_count_0", "qwen2moe.expert_count", 0), "qwen2moe.expert_count is 0");
  test::expect_model_error(with_key("moe_used_9", "qwen2moe.expert_used_count", 9), "qwen2moe.expert_used_count is 9; it must be between 1 and expert_count = 8");
  test::expect_model_error(with_key("moe_used_0", "qwen2moe.expert_used_count", 0), "expert_used_count is 0");
  auto without = [&](const std::string& name, const std::string& tensor) {
    test::gguf_edit e;
    e.tensor = [tensor](std::string& n, tensor_type&, std::vector<int64_t>&, std::vector<uint8_t>&) { return n != tensor; };
    return test::edited_copy(base, name, e);
  };
  test::expect_model_error(without("moe_no_up_exps", "blk.1.ffn_up_exps.weight"), "tensor blk.1.ffn_up_exps.weight is missing");
  test::expect_model_error(without("moe_no_router", "blk.0.ffn_gate_inp.weight"), "tensor blk.0.ffn_gate_inp.weight is missing");
  test::expect_model_error(without("moe_no_shexp", "blk.0.ffn_down_shexp.weight"), "qwen2moe's shared expert");
  {  // seven slices where the file says eight experts
    test::gguf_edit e;
    e.tensor = [](std::string& n, tensor_type&, std::vector<int64_t>& ne, std::vector<uint8_t>& bytes) {
      if (n == "blk.0.ffn_gate_exps.weight") ne[2] = 7, bytes.resize(bytes.size() / 8 * 7);
      return true;
    };
    test::expect_model_error(test::edited_copy(base, "moe_seven_slices", e), "blk.0.ffn_gate_exps.weight has shape [64, 64, 7], expected [64, 64, 8]");
  }
  {  // an expert's tensor in a dense file
    const auto dense = test::make_model("moe_dense_base", test::small_options(1));
    test::gguf_edit e;
    e.add_tensors = [](const gguf::file&) {
      return std::vector<test::gguf_edit::added>{{"blk.0.ffn_gate_inp.weight", tensor_type::f32, {64, 4}, std::vector<uint8_t>(64 * 4 * 4, 0)}};
    };
    test::expect_model_error(test::edited_copy(dense, "moe_router_in_dense", e), "belongs to a mixture of experts, but llama.expert_count is missing or 0");
  }
}

// gen-model refuses impossible mixtures, naming the flag.
TEST(MoeErrors, GenModelNamesTheFlag) {
  auto o = moe_options({"x", architecture::qwen3moe, tensor_type::f32});
  o.vocab_path = test::tiny_vocab();
  o.out_path = (test::scratch_dir() / "moe_never.gguf").string();
  auto throws = test::expect_gen_model_error;
  auto b = o;
  b.n_experts_used = 9;
  throws(b, "--experts-used 9 must be between 1 and --experts 8");
  b = o, b.n_experts = 0;
  throws(b, "give --experts N");
  b = o, b.act = activation::relu;
  throws(b, "--act silu");
  b = o, b.arch = architecture::falcon;
  throws(b, "not falcon");
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// How a file routes a stream of tokens: per layer, the share of a token's experts that the token
// before also chose (temporal locality), and the most chosen expert's share of all choices (popularity).
struct routing_figures {
  double reuse = 0, top_share = 0;
};
routing_figures routing_of(const std::string& path, int64_t n_tokens) {
  auto m = model::load(path);
  const auto& hp = m->hp();
  inference_context ctx(m, n_tokens, 2);
  std::vector<std::vector<std::vector<bool>>> chosen;  // [layer][token][expert]
  chosen.resize(static_cast<size_t>(hp.n_layer));
  ctx.set_observer([&](std::string_view name, int64_t layer, std::span<const float> w) {
    if (name != "ffn_act") return;
    std::vector<bool> c(w.size());
    for (size_t e = 0; e < w.size(); ++e) c[e] = w[e] != 0.0f;
    chosen[static_cast<size_t>(layer)].push_back(c);
  });
  std::mt19937 rng(7);
  for (int64_t t = 0; t < n_tokens; ++t) ctx.forward(static_cast<token_id>(3 + rng() % 280), t);
  routing_figures f;
  for (const auto& layer : chosen) {
    int64_t again = 0, total = 0;
    std::vector<int64_t> count(static_cast<size_t>(hp.n_expert), 0);
    for (size_t t = 0; t < layer.size(); ++t)
      for (size_t e = 0; e < layer[t].size(); ++e) {
        if (!layer[t][e]) continue;
        ++count[e], ++total;
        again += t > 0 && layer[t - 1][e];
      }
    f.reuse += static_cast<double>(again) / static_cast<double>(total - hp.n_expert_used);
    f.top_share += static_cast<double>(*std::max_element(count.begin(), count.end())) / static_cast<double>(total);
  }
  f.reuse /= static_cast<double>(hp.n_layer), f.top_share /= static_cast<double>(hp.n_layer);
  return f;
}

// gen-model's routing knobs do what they say (docs/moe.md): more locality, more experts kept from
// one token to the next; more skew, a more popular top expert.
TEST(MoeSynthetic, LocalityAndSkewKnobsShapeTheRouting) {
  auto file = [](const std::string& name, double locality, double skew) {
    auto o = moe_options({name, architecture::qwen3moe, tensor_type::f32});
    o.n_layer = 4, o.expert_locality = locality, o.expert_skew = skew;
    return test::make_model("moe_knobs_" + name, o);
  };
  const auto plain = routing_of(file("plain", 0.0, 0.0), 96), local = routing_of(file("local", 0.9, 0.0), 96),
             skewed = routing_of(file("skewed", 0.0, 2.0), 96);
  std::printf("reuse %.3f / %.3f / %.3f, top share %.3f / %.3f / %.3f (plain / locality 0.9 / skew 2)\n", plain.reuse, local.reuse, skewed.reuse,
              plain.top_share, local.top_share, skewed.top_share);
  EXPECT_GT(local.reuse, plain.reuse + 0.15);
  EXPECT_GT(skewed.top_share, plain.top_share + 0.1);
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// A trace records each token's routing as a sparse layer's chosen neurons: n_expert bits a token, the
// router's experts set (the ones the observer saw), one record per layer per step.
TEST(MoeTrace, RecordsTheRouting) {
  const moe_case c{"qwen3moe_f32", architecture::qwen3moe, tensor_type::f32};
  auto m = model::load(test::make_model("moe_" + c.name, moe_options(c)));
  const auto& hp = m->hp();
  inference_context ctx(m, 32, 2);
  trace_recorder rec;
  ctx.set_trace(&rec);
  std::vector<std::vector<float>> seen;  // per (token, layer) in order
  ctx.set_observer([&](std::string_view name, int64_t, std::span<const float> w) {
    if (name == "ffn_act") seen.emplace_back(w.begin(), w.end());
  });
  const std::vector<token_id> tokens = {1, 250, 17, 299, 3};
  test::run_tokens(ctx, tokens, false);
  const auto sets = rec.active_sets();
  ASSERT_EQ(sets.size(), tokens.size() * static_cast<size_t>(hp.n_layer));
  ASSERT_EQ(seen.size(), sets.size());
  for (size_t r = 0; r < sets.size(); ++r) {
    EXPECT_EQ(sets[r].n_ff, hp.n_expert);
    EXPECT_EQ(sets[r].tokens, 1);
    int64_t on = 0;
    for (int64_t e = 0; e < hp.n_expert; ++e) {
      const bool bit = (sets[r].bits[static_cast<size_t>(e / 8)] >> (e % 8)) & 1;
      on += bit;
      EXPECT_EQ(bit, seen[r][static_cast<size_t>(e)] != 0.0f) << "record " << r << " expert " << e;
    }
    EXPECT_EQ(on, hp.n_expert_used);
  }
}

}  // namespace
}  // namespace hotcold
