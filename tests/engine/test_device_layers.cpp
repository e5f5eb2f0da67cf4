// What a hot device holds besides hot rows (engine/device_layers.hpp): the forward pass computes the
// layers' attention, predictors and head from the device's copies on its queue, keeps those layers'
// KV cache in the device's buffers, and gives the CPU's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/device_layers.hpp"
#include "engine/forward.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

std::shared_ptr<const model> sparse_model() {
  auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  o.norm_spread = 0.3;
  auto dense = test::make_model("dl_engine_dense", o);
  auto path = (test::scratch_dir() / "dl_engine_sparse.gguf").string();
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 256, 32, -0.5f, 3));
  return model::load(path);
}

std::shared_ptr<devices::device> sim() {
  devices::device_options o;
  o.kind = "sim";
  o.budget = 64 << 20;
  return devices::make_device(o);
}

device_residency layer0_attention_layer1_predictor_head() {
  device_residency r;
  r.attention = {1, 0}, r.predictor = {0, 1}, r.ffn = {0, 0};
  r.output = true;
  r.ctx = 16, r.n_seq = 1;
  return r;
}

std::vector<std::vector<float>> run(std::shared_ptr<const model> m, std::shared_ptr<const device_layers> d, bool batch) {
  inference_context ctx(m, 16, 2, 1);
  ctx.set_mode(ffn_mode::sparse);
  ctx.set_device_layers(std::move(d));
  const std::vector<token_id> tokens = {1, 250, 17, 299, 3, 120};
  std::vector<std::vector<float>> out;
  if (batch) {
    auto all = ctx.forward_batch(tokens, 0, true);
    const size_t nv = all.size() / tokens.size();
    for (size_t t = 0; t < tokens.size(); ++t) out.emplace_back(all.begin() + t * nv, all.begin() + (t + 1) * nv);
  } else {
    for (size_t t = 0; t < tokens.size(); ++t) {
      auto l = ctx.forward(tokens[t], static_cast<int64_t>(t));
      out.emplace_back(l.begin(), l.end());
    }
  }
  return out;
}

// Zeroes the device's copy of a tensor (sim's buffers are host memory).
void spoil(const tensor_view& v) { std::memset(const_cast<uint8_t*>(v.data), 0, v.bytes()); }

TEST(DeviceLayers, ComputeFromTheDevicesCopiesAndGiveTheCpusLogits) {
  auto m = sparse_model();
  for (bool batch : {false, true}) {
    SCOPED_TRACE(batch ? "a batch" : "one token at a time");
    const auto cpu = run(m, nullptr, batch);
    auto dev = sim();
    auto held = std::make_shared<const device_layers>(m, layer0_attention_layer1_predictor_head(), dev, tensor_type::f16);
    EXPECT_LT(test::rel_diff(run(m, held, batch), cpu), 1e-6);
    // Layer 0's keys went to the device's cache (its buffers start unwritten; the six positions hold halves).
    const int64_t kv = m->hp().n_embd_kv();
    const auto* k = reinterpret_cast<const uint16_t*>(held->k_cache(0));
    EXPECT_TRUE(std::any_of(k, k + 6 * kv, [](uint16_t h) { return h != 0; }));
    EXPECT_THROW(held->k_cache(1), std::exception);  // layer 1's cache stays on the host
    // Each copy is what the pass reads: spoil it and the logits move (the model's own weights are untouched).
    for (int which = 0; which < 3; ++which) {
      auto fresh = std::make_shared<const device_layers>(m, layer0_attention_layer1_predictor_head(), sim(), tensor_type::f16);
      const char* name = which == 0 ? "layer 0's attention output" : which == 1 ? "layer 1's predictor" : "the head";
      spoil(which == 0 ? fresh->layer(0).wo : which == 1 ? fresh->layer(1).pred_fc2 : fresh->output_weights());
      EXPECT_GT(test::rel_diff(run(m, fresh, batch), cpu), 1e-3) << name << " was not read from the device's copy";
    }
    EXPECT_LT(test::rel_diff(run(m, nullptr, batch), cpu), 1e-6) << "spoiling a copy reached the model";
  }
}

// The device's buffers are the plan's: a budget one byte short of them is refused, naming what did
// not fit; the device's KV cache must be the context's.
TEST(DeviceLayers, RefuseWhatDoesNotFitOrMatch) {
  auto m = sparse_model();
  auto r = layer0_attention_layer1_predictor_head();
  auto dev = sim();
  const auto held = std::make_shared<const device_layers>(m, r, dev, tensor_type::f16);
  const uint64_t need = dev->used();
  EXPECT_EQ(held->bytes(), need);
  devices::device_options o;
  o.kind = "sim";
  o.budget = need - 1;
  EXPECT_THROW(device_layers(m, r, devices::make_device(o), tensor_type::f16), devices::out_of_device_memory);
  inference_context other_ctx(m, 32, 2, 1);  // another context length
  EXPECT_THROW(other_ctx.set_device_layers(held), std::invalid_argument);
  inference_context f32(m, 16, 2, 1, tensor_type::f32);  // another cache type
  EXPECT_THROW(f32.set_device_layers(held), std::invalid_argument);
  inference_context started(m, 16, 2, 1);
  started.forward(1, 0);
  EXPECT_THROW(started.set_device_layers(held), std::logic_error);  // the cache would be split mid-sequence
  r.attention = {1};  // one layer of two
  EXPECT_THROW(device_layers(m, r, sim(), tensor_type::f16), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold
