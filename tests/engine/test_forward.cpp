// The engine's forward pass against model/reference (double precision, per element, no KV cache,
// weights dequantized from the file's blocks). One case per architecture x activation x weight type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <algorithm>
#include <map>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "engine/embeddings.hpp"
#include "engine/forward.hpp"
#include "model/gguf.hpp"
#include "model/reference.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

using vec = std::vector<double>;

struct forward_case {
  std::string name;
  architecture arch;
  activation act;
  tensor_type type;
  int64_t n_head_kv;
  double tolerance;  // relative RMS of the logits
  bool k_mix = false;  // llama.cpp's _M mix over the K type
};

std::ostream& operator<<(std::ostream& os, const forward_case& c) { return os << c.name; }

class ForwardPass : public testing::TestWithParam<forward_case> {};

TEST_P(ForwardPass, MatchesTheIndependentComputation) {
  const auto& c = GetParam();
  tools::gen_model_options o;
  o.arch = c.arch;
  o.act = c.act;
  o.type = c.type;
  o.k_mix = c.k_mix;
  const bool q4 = c.type == tensor_type::q4_0, k = c.type == tensor_type::q4_k || c.type == tensor_type::q5_k;
  o.n_embd = q4 || k ? 256 : 64;  // Q4_0 files store the output head as Q6_K, which needs rows of 256 (as do K-quant rows)
  o.n_ff = q4 || k ? 256 : 128;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = c.n_head_kv;
  o.n_ctx = 64;
  o.active = 0.25;
  o.seed = 7;
  o.norm_spread = 0.3;  // every norm its own weights and biases: a norm read in the wrong place shows
  // Each architecture's own conventions, present so that a path ignoring one computes another model
  // (tests/engine/test_architectures.cpp shows each changes the logits): qwen2's biases and a bias on
  // the head, qwen3's per-head norms with heads wider than n_embd / n_head and a tied head, phi3's
  // fused products and LongRoPE with this test's contexts (16) above its original context (long factors),
  // gemma2's scaled embeddings, post-norms, sliding window and soft caps.
  if (c.arch == architecture::qwen2) o.output_bias = true;
  if (c.arch == architecture::qwen3) o.head_dim = (k ? 2 : 3) * o.n_embd / o.n_head / (k ? 1 : 2), o.tied_output = true;  // K: q's width a multiple of 256
  if (c.arch == architecture::phi3) o.phi3_rope_orig_ctx = 8;
  // gemma2: a window of 3 in layer 0 (these 7 tokens pass it), caps small enough to bite.
  if (c.arch == architecture::gemma2) o.sliding_window = 3, o.attn_softcap = 2.0f, o.final_softcap = 3.0f;
  const int64_t n_ctx = 16;
  auto path = test::make_model(c.name, o);

  auto m = model::load(path);
  if ((q4 || k) && c.arch != architecture::falcon) {  // the presets' head (or the tied embeddings) in Q6_K
    EXPECT_EQ(m->tied_output() ? m->weights().token_embd.type : m->weights().output.type, tensor_type::q6_k);
  }
  if (k) {  // the _M mix: layer 1 of 2 is one use_more_bits picks, layer 0 is not
    const auto& l = m->weights().layers;
    EXPECT_EQ(l[1].ffn_down.type, c.arch == architecture::falcon && c.type == tensor_type::q4_k ? tensor_type::q5_k : tensor_type::q6_k);
    EXPECT_EQ(l[0].ffn_down.type, c.type);
    EXPECT_EQ(l[0].ffn_up.type, c.type);
  }
  inference_context ctx(m, n_ctx, 2);
  std::vector<token_id> tokens{1, 299, 42, 7, 290, 123, 5};
  std::vector<std::vector<float>> got;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto l = ctx.forward(tokens[i], static_cast<int64_t>(i));
    got.emplace_back(l.begin(), l.end());
  }
  // The context's KV cache is F16 by default: the reference rounds its keys and values the same way.
  auto file = gguf::file::open(path);
  // A key the engine computes in float and the reference in double can round to neighbouring halves
  // now and then: float weights get 2.5e-5 here, where the two references are further apart still.
  auto want = reference_model(file, tensor_type::f16, n_ctx).logits(tokens);
  const double f16_tolerance = std::max(c.tolerance, test::f16_kv_tolerance);
  const double rel = test::rel_diff(got, want);
  EXPECT_LT(rel, f16_tolerance) << c.name;
  RecordProperty("relative_rms", testing::PrintToString(rel));

  // The prompt as one batch (the stages' path) with an F32 cache computes the unrounded reference's
  // logits.
  const auto want_f32 = reference_model(file, tensor_type::f32, n_ctx).logits(tokens);
  // (qwen3's normalized keys round to halves more evenly; gemma2's capped logits shrink what they move)
  if (c.tolerance < f16_tolerance && c.arch != architecture::qwen3 && c.arch != architecture::gemma2) {
    EXPECT_GT(test::rel_diff(want, want_f32), 1.2 * f16_tolerance) << "an F16 cache would pass for an F32 one here";
  }
  want = want_f32;
  inference_context batch_ctx(m, n_ctx, 2, 1, tensor_type::f32);
  auto all = batch_ctx.forward_batch(tokens, 0, true);
  const size_t nv = want[0].size();
  ASSERT_EQ(all.size(), tokens.size() * nv);
  std::vector<std::vector<float>> rows;
  for (size_t t = 0; t < tokens.size(); ++t) rows.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(t * nv), all.begin() + static_cast<std::ptrdiff_t>((t + 1) * nv));
  EXPECT_LT(test::rel_diff(rows, want), c.tolerance) << c.name << " as one batch, F32 cache";
}

std::vector<forward_case> cases() {
  std::vector<forward_case> out;
  struct type_tol { tensor_type t; const char* name; double tol; bool k_mix = false; };
  // Float weights: only float-vs-double rounding separates the two. Q8_0 / Q4_0 rows are multiplied
  // with activations quantized to Q8_0 (as llama.cpp does), which the double computation does not do.
  std::vector<type_tol> types{{tensor_type::f32, "f32", 1e-5}, {tensor_type::f16, "f16", 1e-5}, {tensor_type::bf16, "bf16", 1e-5},
                              {tensor_type::q8_0, "q8_0", 1.5e-2}, {tensor_type::q4_0, "q4_0", 1.5e-2},
                              // K-quant rows meet activations quantized to Q8_K (256 values a scale, as llama.cpp does): coarser
                              {tensor_type::q4_k, "q4_k_m", 2.5e-2, true}, {tensor_type::q5_k, "q5_k_m", 2.5e-2, true}};
  struct arch_act { architecture a; activation act; int64_t kv; const char* name; };
  std::vector<arch_act> combos{
      {architecture::llama, activation::silu, 2, "llama_silu"},   {architecture::llama, activation::relu, 2, "llama_relu"},
      {architecture::llama, activation::drelu, 4, "llama_drelu"}, {architecture::bamboo, activation::drelu, 2, "bamboo_drelu"},
      {architecture::falcon, activation::gelu, 1, "falcon7b_gelu"}, {architecture::falcon, activation::relu, 1, "falcon7b_relu"},
      {architecture::falcon, activation::relu, 2, "falcon40b_relu"},
      {architecture::qwen2, activation::silu, 2, "qwen2_silu"},   {architecture::qwen3, activation::silu, 2, "qwen3_silu"},
      {architecture::phi3, activation::silu, 4, "phi3_silu"},     {architecture::gemma2, activation::gelu, 2, "gemma2_gelu"},
  };
  for (const auto& c : combos)
    for (const auto& t : types) out.push_back({std::string(c.name) + "_" + t.name, c.a, c.act, t.t, c.kv, t.tol, t.k_mix});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, ForwardPass, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<forward_case>& i) { return i.param.name; });

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// Dense Q4_0, Q4_K_M and Q5_K_M files: model::load interleaves attention, gate, up and down (the Q4_0,
// Q4_K or Q5_K ones) sixteen rows at a time in its private copy. Every path over them — prompt batches of every
// size (the matrix products from 8 tokens, the per-neuron path below), single tokens — must give the
// logits of the file's own row layout (load_options::interleave off), up to float summation order.
class InterleavedDense : public testing::TestWithParam<tensor_type> {};

TEST_P(InterleavedDense, GivesTheFileLayoutsLogits) {
  const bool k = GetParam() == tensor_type::q4_k || GetParam() == tensor_type::q5_k;
  auto o = test::sparse_test_options(architecture::llama, activation::relu, GetParam());
  if (k) o.k_mix = true, o.n_embd = 256, o.n_ff = 512;  // Q4_K_M / Q5_K_M: Q4_K / Q5_K rows of 256 values, some Q6_K
  auto path = test::make_model(std::string("interleave_parity_") + std::string(tensor_type_name(GetParam())), o);
  load_options plain_opts;
  plain_opts.interleave = false;
  auto interleaved = model::load(path);
  auto plain = model::load(path, plain_opts);
  ASSERT_TRUE(interleaved->weights().layers[0].ffn_gate.interleaved16);
  ASSERT_TRUE(interleaved->weights().layers[0].wq.interleaved16);
  if (k) {  // the Q6_K head (the Q4_0 file here is too narrow for one: Q8_0) stays plain; its prompts interleave a group at a time
    ASSERT_EQ(interleaved->weights().output.type, tensor_type::q6_k);
    ASSERT_FALSE(interleaved->weights().output.interleaved16);
  }
  ASSERT_EQ(interleaved->weights().layers[0].ffn_gate.type, GetParam());
  ASSERT_FALSE(plain->weights().layers[0].ffn_gate.interleaved16);
  const int64_t n_vocab = plain->hp().n_vocab;
  for (int64_t n : {1, 3, 9}) {
    std::vector<token_id> tokens;
    for (int64_t t = 0; t < n; ++t) tokens.push_back(static_cast<token_id>((5 + 7 * t) % n_vocab));
    inference_context a(interleaved, 64, 2), b(plain, 64, 2);
    const auto la = a.forward_batch(tokens, 0, true);
    const std::vector<float> got(la.begin(), la.end());
    const auto lb = b.forward_batch(tokens, 0, true);
    ASSERT_EQ(got.size(), lb.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], lb[i], 1e-3 * (1 + std::abs(lb[i]))) << n << " tokens, logit " << i;
    // And a token after the prompt, one at a time.
    const auto da = a.forward(11, n);
    const std::vector<float> next(da.begin(), da.end());
    const auto db = b.forward(11, n);
    for (size_t i = 0; i < next.size(); ++i) ASSERT_NEAR(next[i], db[i], 1e-3 * (1 + std::abs(db[i]))) << "after " << n << " tokens, logit " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Forward, InterleavedDense, testing::Values(tensor_type::q4_0, tensor_type::q4_k, tensor_type::q5_k),
                         [](const testing::TestParamInfo<tensor_type>& i) {
                           return i.param == tensor_type::q4_k ? "Q4_K_M" : i.param == tensor_type::q5_k ? "Q5_K_M" : "Q4_0";
                         });

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// Falcon-40B's layout: each layer has attn_norm and attn_norm_2, here with different weights and
// non-zero biases. llama.cpp and PowerInfer feed the attention from attn_norm_2 and the FFN from
// attn_norm; the dense file and its PowerInfer sparse file (predictor on the layer input) must
// compute that model, one token at a time and as a batch. Feeding the branches the other way
// round moves the logits by tens of percent.
// Llama 3.1's RoPE frequency factors (rope_freqs.weight) and a large frequency base: the engine's
// logits are model/reference's, one token at a time and as a batch, and differ from those of the
// same weights without the factors (a path that ignored them would compute another model).
TEST(Llama31, RopeFrequencyFactorsTurnEachPairAtItsOwnRate) {
  auto o = test::small_options(2, 2);
  o.n_ctx = 64;
  o.rope_freq_base = 500000.0f;
  o.norm_spread = 0.3;
  auto plain_path = test::make_model("llama31_plain_rope", o);
  o.llama3_rope_ctx = 40;  // wavelengths 6.3, 32.5, 168...: the first keeps its rate, the second blends, the rest 8x slower
  auto path = test::make_model("llama31_rope_freqs", o);
  auto file = gguf::file::open(path);
  const auto hp = read_hparams(file);
  ASSERT_EQ(hp.rope_freq_factors.size(), static_cast<size_t>(hp.n_rot / 2));
  EXPECT_EQ(hp.rope_freq_base, 500000.0f);
  EXPECT_EQ(hp.rope_freq_factors.front(), 1.0f);  // the fastest pair keeps its frequency
  EXPECT_EQ(hp.rope_freq_factors.back(), 8.0f);   // the slowest turns 8 times slower
  EXPECT_TRUE(std::any_of(hp.rope_freq_factors.begin(), hp.rope_freq_factors.end(), [](float f) { return f > 1.0f && f < 8.0f; }));

  const std::vector<token_id> tokens{1, 250, 17, 299, 3, 120, 44, 9, 200, 31, 77, 5};
  const auto want = reference_model(file, tensor_type::f16).logits(tokens);
  auto run = [&](const std::string& p, bool batch) {
    inference_context ctx(model::load(p), 16, 2);
    return test::run_tokens(ctx, tokens, batch);
  };
  EXPECT_LT(test::rel_diff(run(path, false), want), test::f16_kv_tolerance) << "one token at a time";
  EXPECT_LT(test::rel_diff(run(path, true), want), test::f16_kv_tolerance) << "a prompt batch";
  EXPECT_GT(test::rel_diff(run(plain_path, false), want), 100 * test::f16_kv_tolerance) << "the factors change the model";
}

// hidden_states (what embeddings pool): every token's state after the final norm, the vectors the head
// multiplies: the head's rows times them are forward_batch's logits, over more tokens than a batch.
TEST(HiddenStates, AreWhatTheHeadReads) {
  auto o = test::small_options(2, 2);
  o.type = tensor_type::f32;
  o.n_ctx = 512;
  o.norm_spread = 0.3;
  auto m = model::load(test::make_model("hidden_states_f32", o));
  const auto& hp = m->hp();
  std::vector<token_id> tokens;
  for (int i = 0; i < static_cast<int>(inference_context::max_batch) + 9; ++i) tokens.push_back(static_cast<token_id>((i * 37 + 5) % hp.n_vocab));
  inference_context ctx(m, 512, 2);
  const auto hidden = ctx.hidden_states(tokens);
  ASSERT_EQ(hidden.size(), tokens.size() * static_cast<size_t>(hp.n_embd));
  const auto all = ctx.forward_batch(tokens, 0, true);
  const std::vector<float> logits(all.begin(), all.end());
  const float* w = m->weights().output.f32();
  double worst = 0, scale = 0;
  for (size_t t : {size_t{0}, size_t{5}, tokens.size() - 1})
    for (int64_t i = 0; i < hp.n_vocab; i += 7) {
      double dot = 0;
      for (int64_t k = 0; k < hp.n_embd; ++k) dot += static_cast<double>(w[i * hp.n_embd + k]) * hidden[t * static_cast<size_t>(hp.n_embd) + static_cast<size_t>(k)];
      worst = std::max(worst, std::abs(dot - logits[t * static_cast<size_t>(hp.n_vocab) + static_cast<size_t>(i)]));
      scale = std::max(scale, std::abs(dot));
    }
  EXPECT_LT(worst, 1e-4 * std::max(1.0, scale));
  EXPECT_GT(scale, 0.0);
  EXPECT_THROW(ctx.hidden_states({}), std::invalid_argument);
}

// Pooling (llama-server's --pooling): mean, the first token (cls) or the last, then length 1.
TEST(HiddenStates, PooledAsAsked) {
  const std::vector<float> h{1, 0, 0, 2, 3, 4};  // three tokens of two values
  auto near = [](const std::vector<float>& got, std::vector<double> want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
  };
  near(pooled(h, 3, 2, pooling::mean), {4 / std::sqrt(52.0), 6 / std::sqrt(52.0)});
  near(pooled(h, 3, 2, pooling::last), {0.6, 0.8});
  near(pooled(h, 3, 2, pooling::cls), {1, 0});
  near(pooled(std::vector<float>{0, 0}, 1, 2, pooling::mean), {0, 0});
  EXPECT_EQ(pooling_from_name("last"), pooling::last);
  EXPECT_FALSE(pooling_from_name("max"));
  EXPECT_THROW(pooled(h, 2, 2, pooling::mean), std::invalid_argument);
}

TEST(Falcon40B, TwoNormsFeedTheirOwnBranches) {
  auto o = test::sparse_test_options(architecture::falcon, activation::relu, tensor_type::f32);
  o.n_head_kv = 2;  // grouped KV: gen-model writes the 40B layout
  o.norm_spread = 0.4;
  auto dense_path = test::make_model("falcon40b_two_norms", o);
  auto file = gguf::file::open(dense_path);
  ASSERT_TRUE(file.find_tensor("blk.0.attn_norm_2.weight"));
  const std::vector<token_id> tokens{1, 250, 17, 299, 3, 120};
  const auto want = reference_model(file, tensor_type::f16).logits(tokens);  // the contexts' F16 KV cache

  auto dense = model::load(dense_path);
  {
    inference_context ctx(dense, 16, 2);
    std::vector<std::vector<float>> got;
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto l = ctx.forward(tokens[i], static_cast<int64_t>(i));
      got.emplace_back(l.begin(), l.end());
    }
    EXPECT_LT(test::rel_diff(got, want), test::f16_kv_tolerance) << "dense, one token at a time";
  }

  // PowerInfer's file: predictors read the layer's input; the mask each token's FFN ran with is
  // read back through the observer and given to the double computation.
  auto sparse_path = (test::scratch_dir() / "falcon40b_two_norms_pwri.gguf").string();
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  tools::write_sparse_model(dense_path, sparse_path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9), so);
  auto sparse = model::load(sparse_path);
  ASSERT_TRUE(sparse->has_predictors());
  EXPECT_EQ(sparse->hp().pred_input, predictor_input::layer_input);
  for (bool batch : {false, true}) {
    inference_context ctx(sparse, 16, 2);
    ctx.set_mode(ffn_mode::sparse);
    std::vector<std::vector<std::vector<bool>>> mask;
    int64_t chosen = 0;
    test::record_neuron_mask(ctx, tokens.size(), mask, &chosen);
    const auto got = test::run_tokens(ctx, tokens, batch);
    const int64_t fired_dense = [&] {
      int64_t n = 0;
      inference_context d(dense, 16, 2);
      d.set_observer([&](std::string_view name, int64_t, std::span<const float> v) {
        if (name == "ffn_act") for (float x : v) n += x != 0.0f;
      });
      for (size_t i = 0; i < tokens.size(); ++i) d.forward(tokens[i], static_cast<int64_t>(i));
      return n;
    }();
    ASSERT_GT(chosen, 0);
    ASSERT_LT(chosen, fired_dense) << "the predictor left no neuron out: the sparse case would be the dense one";
    // The reference reads the sparse file itself (its down projection stored by neuron).
    const auto sparse_file = gguf::file::open(sparse_path);
    EXPECT_LT(test::rel_diff(got, reference_model(sparse_file, tensor_type::f16).logits(tokens, &mask)), test::f16_kv_tolerance) << (batch ? "sparse, as a batch" : "sparse, one token at a time");
  }
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// The reference reads a sparse file (ffn_down_t: the down projection by neuron) as the model its
// dense file is: F32 rows survive the transposition exactly.
TEST(Reference, SparseFileMeansItsDenseModel) {
  auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f32);
  o.norm_spread = 0.2;
  const auto dense_path = test::make_model("reference_sparse_llama", o);
  const auto sparse_path = (test::scratch_dir() / "reference_sparse_llama_pwri.gguf").string();
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  tools::write_sparse_model(dense_path, sparse_path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 16, 0.0f, 3), so);
  const auto dense = gguf::file::open(dense_path), sparse = gguf::file::open(sparse_path);
  ASSERT_FALSE(sparse.find_tensor("blk.0.ffn_down.weight"));
  const std::vector<token_id> tokens{1, 42, 250, 7};
  const auto a = reference_model(dense).logits(tokens), b = reference_model(sparse).logits(tokens);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) worst = std::max(worst, std::abs(a[t][i] - b[t][i])), scale = std::max(scale, std::abs(a[t][i]));
  EXPECT_LT(worst, 1e-9 * scale);
  EXPECT_GT(scale, 0);
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// Decode at depth: a token alone in its step reads its cache in key ranges, one a worker, merged
// after (engine attend_decoded over kernels::attend_keys). 3 workers cut 400 keys into three ranges
// of uneven ends; the logits must be the independent computation's, with F32 and F16 caches, and
// the same with one worker (one range, nothing merged).
TEST(LongContext, DecodedKeyRangesMergeToTheIndependentLogits) {
  tools::gen_model_options o;
  o.arch = architecture::llama;
  o.act = activation::silu;
  o.type = tensor_type::f32;
  o.n_embd = 64, o.n_ff = 128, o.n_layer = 2, o.n_head = 4, o.n_head_kv = 2, o.n_ctx = 1024, o.seed = 19;
  auto path = test::make_model("long_context", o);
  auto m = model::load(path);
  const int64_t n_ctx = 448, n = 400;
  std::vector<token_id> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<token_id>(1 + (i * 7919) % 298));
  auto file = gguf::file::open(path);
  for (tensor_type kv : {tensor_type::f32, tensor_type::f16}) {
    const auto want = reference_model(file, kv, n_ctx).logits(tokens);
    std::vector<std::vector<float>> by_threads[2];
    for (int threads : {3, 1}) {
      inference_context ctx(m, n_ctx, threads, 1, kv);
      auto& got = by_threads[threads == 3 ? 0 : 1];
      for (int64_t i = 0; i < n; ++i) {
        auto l = ctx.forward(tokens[static_cast<size_t>(i)], i);
        if (i >= n - 8) got.emplace_back(l.begin(), l.end());
      }
      const std::vector<std::vector<double>> tail(want.end() - 8, want.end());
      EXPECT_LT(test::rel_diff(got, tail), kv == tensor_type::f32 ? 1e-5 : test::f16_kv_tolerance) << threads << " workers, " << tensor_type_name(kv);
    }
    EXPECT_LT(test::rel_diff(by_threads[0], by_threads[1]), 1e-5) << "three ranges merged against one";
  }
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// llama.cpp's context shift: the first `keep` positions stay, the next `discard` go, the rest move
// down with their keys turned back by RoPE — then a layer's cache is the one the kept tokens would
// have made at their new positions wherever its rows did not see the dropped ones: the first layer's
// everywhere (a deeper layer's rows attended to the dropped tokens when they were made, as in
// llama.cpp), so a one-layer model's next logits are exactly those of the kept tokens. Phi-3's LongRoPE (a context
// above its original one: long factors and an attention factor, which the turn must not apply twice)
// and Qwen3's normed keys wider than n_embd / n_head too; F32 and F16 caches (keys rounded again
// after the turn). (Without the turn the logits are 6% away; with Phi-3's factor applied again, 0.7%.)
TEST(ContextShift, TheShiftedCacheIsTheKeptTokensAtTheirNewPositions) {
  for (architecture arch : {architecture::llama, architecture::phi3, architecture::qwen3}) {
    tools::gen_model_options o;
    o.arch = arch;
    o.act = activation::silu;
    o.type = tensor_type::f32;
    o.n_embd = 64, o.n_ff = 128, o.n_layer = 1, o.n_head = 4, o.n_head_kv = 2, o.n_ctx = 64, o.seed = 23;
    if (arch == architecture::phi3) o.phi3_rope_orig_ctx = 16;
    if (arch == architecture::qwen3) o.head_dim = 24;
    auto m = model::load(test::make_model(std::string("shift_") + std::string(architecture_name(arch)), o));
    if (arch == architecture::phi3) {
      ASSERT_NE(m->hp().rope_attn_factor, 1.0f);
    }
    std::vector<token_id> tokens;
    for (int i = 0; i < 60; ++i) tokens.push_back(static_cast<token_id>(1 + (i * 37) % 250));
    const int64_t keep = 4, discard = 28, next = 77;
    for (tensor_type kv : {tensor_type::f32, tensor_type::f16}) {
      inference_context shifted(m, 64, 2, 1, kv);
      for (size_t i = 0; i < tokens.size(); ++i) shifted.forward(tokens[i], static_cast<int64_t>(i));
      const cache_op op{cache_op::kind::shift, 0, static_cast<int64_t>(tokens.size()), keep, discard};
      shifted.apply(std::span(&op, 1));
      auto got = shifted.forward(next, static_cast<int64_t>(tokens.size()) - discard);
      const std::vector<std::vector<float>> a{{got.begin(), got.end()}};

      std::vector<token_id> kept(tokens.begin(), tokens.begin() + keep);
      kept.insert(kept.end(), tokens.begin() + keep + discard, tokens.end());
      inference_context fresh(m, 64, 2, 1, kv);
      for (size_t i = 0; i < kept.size(); ++i) fresh.forward(kept[i], static_cast<int64_t>(i));
      auto want = fresh.forward(next, static_cast<int64_t>(kept.size()));
      const std::vector<std::vector<float>> b{{want.begin(), want.end()}};
      const std::string what = std::string(architecture_name(arch)) + " " + std::string(tensor_type_name(kv));
      EXPECT_LT(test::rel_diff(a, b), kv == tensor_type::f32 ? 1e-5 : 2e-3) << what;
    }
  }
}

}  // namespace
}  // namespace hotcold
