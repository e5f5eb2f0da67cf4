// The FFN split by placement: hot rows on a sim device computed on its own thread while the cold
// pool computes the rest gives the reference's logits, counts every row's bytes against the budget,
// refuses what does not fit, and runs the two sides of every layer at the same time.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/hot_cold_ffn.hpp"
#include "engine/trace.hpp"
#include "model/reference.hpp"
#include "tests/engine/overlap_latch.hpp"
#include "kernels/cpu/quants.hpp"
#include "model/tensor_convert.hpp"
#include "tests/model/edited_files.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::actors {
namespace {

struct split_case {
  const char* name;
  architecture arch;
  activation act;
  tensor_type type;
};

class HotCold : public testing::TestWithParam<split_case> {};

std::string sparse_file(const split_case& c) {
  auto dense = test::make_model(std::string("hc_dense_") + c.name, test::sparse_test_options(c.arch, c.act, c.type));
  auto path = (test::scratch_dir() / (std::string("hc_sparse_") + c.name + ".gguf")).string();
  tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 256, 32, -0.5f, 3));
  return path;
}

TEST_P(HotCold, SplitGivesTheReferenceLogits) {
  auto m = model::load(sparse_file(GetParam()));
  const auto& hp = m->hp();
  devices::device_options o;
  o.kind = "sim";
  o.budget = 64 << 20;
  auto sim = devices::make_device(o);
  auto split = std::make_shared<hot_cold_ffn>(m, test::every_third_hot(hp.n_layer, hp.n_ff), sim, 2);
  // The device holds exactly the hot rows.
  uint64_t rows = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const auto& l = m->weights().layers[static_cast<size_t>(il)];
    int64_t hot = (hp.n_ff - il % 3 + 2) / 3;
    rows += static_cast<uint64_t>(hot) * ((hp.gated_ffn ? l.ffn_gate.row_bytes : 0) + l.ffn_up.row_bytes + l.ffn_down_t.row_bytes);
  }
  EXPECT_EQ(split->hot_bytes(), rows);
  EXPECT_EQ(sim->used(), rows);

  for (ffn_mode mode : {ffn_mode::sparse, ffn_mode::oracle}) {
    auto want = test::logits_of(m, mode);
    auto got = test::logits_of(m, mode, 2, split);
    EXPECT_LT(test::rel_diff(got, want), 1e-5) << (mode == ffn_mode::sparse ? "sparse" : "oracle");
  }
  // And against model/reference given the neurons the split computed (Q8_0/Q4_0 rows meet activations
  // quantized to Q8_0, which the reference does not do).
  {
    std::vector<std::vector<std::vector<bool>>> mask;
    auto got = test::logits_and_mask_of(m, ffn_mode::sparse, split, mask);
    const auto file = gguf::file::open(m->path());
    const bool float_rows = GetParam().type == tensor_type::f32 || GetParam().type == tensor_type::f16;
    EXPECT_LT(test::rel_diff(got, reference_model(file, tensor_type::f16).logits(test::logits_of_tokens(), &mask)), float_rows ? test::f16_kv_tolerance : 1.5e-2) << "against model/reference";
  }
  // Prompt batches split the same way: each token's own choice, hot rows from the device.
  const token_id prompt[] = {1, 250, 17, 299, 3, 120, 8, 9};
  auto batch = [&](std::shared_ptr<ffn_executor> e) {
    inference_context ctx(m, 16, 2);
    ctx.set_mode(ffn_mode::sparse);
    ctx.set_ffn_executor(std::move(e));
    auto l = ctx.forward_batch(prompt, 0, true);
    return std::vector<std::vector<float>>{std::vector<float>(l.begin(), l.end())};
  };
  const auto before = split->computed().hot;
  const bool quantized = GetParam().type == tensor_type::q8_0 || GetParam().type == tensor_type::q4_0;
  EXPECT_LT(test::rel_diff(batch(split), batch(nullptr)), quantized ? 2e-3 : 1e-4);
  EXPECT_GT(split->computed().hot, before);
  // Both sides did work.
  EXPECT_GT(split->computed().hot, 0);
  EXPECT_GT(split->computed().cold, 0);
}

std::vector<split_case> cases() {
  return {{"llama_relu_f16", architecture::llama, activation::relu, tensor_type::f16},
          {"llama_relu_q4_0", architecture::llama, activation::relu, tensor_type::q4_0},
          {"bamboo_drelu_q8_0", architecture::bamboo, activation::drelu, tensor_type::q8_0},
          {"falcon_relu_f32", architecture::falcon, activation::relu, tensor_type::f32}};
}

INSTANTIATE_TEST_SUITE_P(Models, HotCold, testing::ValuesIn(cases()), [](const testing::TestParamInfo<split_case>& i) { return i.param.name; });

// A sparse file whose down rows are Q8_0 beside Q4_0 gate and up rows: a host device (the CPU's
// routine) splits it and gives the CPU's logits; a device that computes as a GPU does (its FFN-rows
// job reads one type for all three) refuses it, naming the layer and the types.
TEST(HotColdSplit, MixedRowTypesRunOnAHostDeviceAndAreRefusedByAGpuLikeOne) {
  const auto dense = test::make_model("hc_mixed_q8", test::sparse_test_options(architecture::llama, activation::relu, tensor_type::q8_0));
  test::gguf_edit e;
  e.tensor = [](std::string& name, tensor_type& type, std::vector<int64_t>& ne, std::vector<uint8_t>& bytes) {
    if (name.find("ffn_gate") == std::string::npos && name.find("ffn_up") == std::string::npos) return true;
    std::vector<float> values(static_cast<size_t>(ne[0] * ne[1]));
    kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(bytes.data()), values.data(), ne[0] * ne[1]);
    bytes = convert_rows(values, ne[0], tensor_type::q4_0);
    type = tensor_type::q4_0;
    return true;
  };
  const auto mixed_dense = test::edited_copy(dense, "hc_mixed_dense", e);
  const auto path = (test::scratch_dir() / "hc_mixed_sparse.gguf").string();
  tools::write_sparse_model(mixed_dense, path, test::random_predictors(2, 64, 256, 32, -0.5f, 3));
  auto m = model::load(path);
  const auto& l0 = m->weights().layers[0];
  ASSERT_EQ(l0.ffn_up.type, tensor_type::q4_0);
  ASSERT_EQ(l0.ffn_down_t.type, tensor_type::q8_0);
  const auto& hp = m->hp();
  devices::device_options o;
  o.kind = "sim";
  o.budget = 64 << 20;
  auto split = std::make_shared<hot_cold_ffn>(m, test::every_third_hot(hp.n_layer, hp.n_ff), devices::make_device(o), 2);
  EXPECT_LT(test::rel_diff(test::logits_of(m, ffn_mode::sparse, 2, split), test::logits_of(m, ffn_mode::sparse)), 1e-5);
  o.sim_kernels = true;
  try {
    hot_rows(m, test::every_third_hot(hp.n_layer, hp.n_ff), devices::make_device(o));
    ADD_FAILURE() << "mixed row types were taken by a GPU-like device";
  } catch (const std::invalid_argument& err) {
    EXPECT_NE(std::string(err.what()).find("layer 0's FFN rows are of mixed types (gate Q4_0, up Q4_0, down Q8_0)"), std::string::npos) << err.what();
  }
}

TEST(HotColdSplit, RefusesWhatDoesNotFit) {
  split_case c{"llama_relu_f16", architecture::llama, activation::relu, tensor_type::f16};
  auto m = model::load(sparse_file(c));
  devices::device_options o;
  o.kind = "sim";
  o.budget = 10000;  // less than one layer's hot rows
  auto sim = devices::make_device(o);
  EXPECT_THROW(hot_cold_ffn(m, test::every_third_hot(2, 256), sim, 2), devices::out_of_device_memory);
  EXPECT_EQ(sim->used(), 0u);  // what was allocated before the refusal is given back
  placement_data wrong = test::every_third_hot(1, 256);
  o.budget = 64 << 20;
  EXPECT_THROW(hot_cold_ffn(m, wrong, devices::make_device(o), 2), std::invalid_argument);
  wrong = test::every_third_hot(2, 256);
  wrong.hot[1].push_back(256);
  EXPECT_THROW(hot_cold_ffn(m, wrong, devices::make_device(o), 2), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold::actors

namespace hotcold::actors {
namespace {

// A trace of the split shows the hot side (the sim device's thread) and the cold side (the pool)
// working at the same time in most (step, layer) pairs, in Chrome's trace-event format.
TEST(HotColdSplit, HotAndColdOverlapInTheTrace) {
  tools::gen_model_options o;
  o.n_embd = 256;
  o.n_ff = 2048;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 4;
  o.active = 0.3;
  auto dense = test::make_model("hc_overlap_dense", o);
  auto path = (test::scratch_dir() / "hc_overlap_sparse.gguf").string();
  tools::write_sparse_model(dense, path, test::random_predictors(2, 256, 2048, 32, -1e30f, 5));  // every neuron chosen
  auto m = model::load(path);
  devices::device_options d;
  d.kind = "sim";
  d.budget = 64 << 20;
  auto sim = devices::make_device(d);
  // Half the neurons hot: the two sides have the same work.
  placement_data p;
  for (int l = 0; l < 2; ++l) {
    p.hot.emplace_back();
    for (int32_t i = 0; i < 2048; i += 2) p.hot.back().push_back(i);
  }
  auto split = std::make_shared<hot_cold_ffn>(m, p, sim, 1);
  trace_recorder trace;
  test::overlap_latch latch;  // each side of a layer held until the other has begun
  latch.attach(trace);
  split->set_trace(&trace);
  inference_context ctx(m, 64, 1);
  ctx.set_mode(ffn_mode::sparse);
  ctx.set_ffn_executor(split);
  ctx.set_trace(&trace);
  const int steps = 24;
  for (int i = 0; i < steps; ++i) ctx.forward(static_cast<token_id>((1 + 37 * i) % m->hp().n_vocab), i);

  std::map<std::pair<int64_t, int64_t>, std::vector<trace_recorder::interval>> hot, cold;
  std::set<std::string> names;
  for (const auto& e : trace.entries()) {
    names.insert(e.span.name);
    auto key = std::make_pair(e.span.step, e.span.layer);
    if (std::string(e.span.name) == "hot_ffn") hot[key].push_back(e.span);
    if (std::string(e.span.name) == "cold_ffn") cold[key].push_back(e.span);
  }
  EXPECT_EQ(names, (std::set<std::string>{"attention", "predict", "hot_ffn", "cold_ffn", "output"}));
  ASSERT_EQ(hot.size(), static_cast<size_t>(steps * 2));
  ASSERT_EQ(cold.size(), static_cast<size_t>(steps * 2));
  EXPECT_EQ(latch.misses(), 0) << "a side of a layer never began while the other waited: the two sides ran one after the other";
  EXPECT_EQ(latch.pairs_met(), static_cast<size_t>(steps * 2));

  // The JSON: thread names, and complete events carrying step, layer and seqs.
  auto j = nlohmann::json::parse(trace.chrome_json());
  std::set<std::string> threads;
  int complete = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M") threads.insert(e.at("args").at("name").get<std::string>());
    if (e.at("ph") == "X") {
      ++complete;
      EXPECT_TRUE(e.at("args").contains("step") && e.at("args").contains("layer") && e.at("args").contains("seqs"));
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(threads.count("hotcold-sim")) << j.dump().substr(0, 400);
  EXPECT_EQ(complete, static_cast<int>(trace.entries().size()));
}

}  // namespace
}  // namespace hotcold::actors
