// What a hot device holds besides hot rows (engine/device_layers.hpp): the forward pass computes the
// layers' attention, predictors and head from the device's copies on its queue, keeps those layers'
// KV cache in the device's buffers, and gives the CPU's logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "engine/device_layers.hpp"
#include "engine/forward.hpp"
#include "engine/predictor.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

// A ReLU llama with norms of its own (their weights drawn away from 1).
std::string dense_model() {
  auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  o.norm_spread = 0.3;
  return test::make_model("dl_engine_dense", o);
}

std::shared_ptr<const model> sparse_model() {
  auto dense = dense_model();
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
  return test::run_tokens(ctx, test::logits_of_tokens(), batch);
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

// A GPU's predictor jobs (sim computing as a GPU does) choose what the CPU's predictor does, for F16
// and Q4_0 predictors whose rows the private copy interleaved (the device's copy is put back in plain
// order): Q4_0 rows meet float activations there and Q8_0 ones on the CPU, so a few neurons at the
// threshold may differ; rows read in the wrong order would disagree on a large share. A thresholded
// SiLU file's predictors too, whose scores are pre-activations chosen by |silu(score)| >= threshold
// (a job comparing the score itself would choose another set).
TEST(DeviceLayers, GpuPredictorJobsChooseWhatTheCpuDoes) {
  for (const auto& [type, thresholded] : {std::pair{tensor_type::f16, false}, {tensor_type::q4_0, false}, {tensor_type::f16, true}}) {
    SCOPED_TRACE(std::string(tensor_type_name(type)) + (thresholded ? " thresholded SiLU" : ""));
    auto o = test::sparse_test_options(architecture::llama, thresholded ? activation::silu : activation::relu, tensor_type::f16);
    auto dense = test::make_model(thresholded ? "dl_engine_dense_silu" : "dl_engine_dense_plain", o);
    auto path = (test::scratch_dir() / (std::string("dl_engine_predictors_") + std::string(tensor_type_name(type)) + (thresholded ? "_t" : "") + ".gguf")).string();
    tools::sparse_file_options so;
    so.predictor_type = type;
    if (thresholded) so.act_thresholds = {0.1f, 0.15f};
    if (!std::filesystem::exists(path))
      tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 256, 32, thresholded ? 0.12f : -0.2f, 11), so);
    auto m = model::load(path);
    ASSERT_TRUE(m->weights().layers[1].pred_fc2.interleaved16);
    devices::device_options d;
    d.kind = "sim";
    d.budget = 16 << 20;
    d.sim_kernels = true;
    device_residency r;
    r.attention = {0, 0}, r.predictor = {1, 1}, r.ffn = {0, 0};
    r.compute_bytes = 1 << 20;
    auto held = std::make_shared<const device_layers>(m, r, devices::make_device(d), tensor_type::f16);
    thread_pool pool(2);
    predictor_runner cpu(*m, pool), gpu(*m, pool);
    gpu.set_device_layers(held);
    const int64_t n = 4, n_ff = m->hp().n_ff, dim = m->hp().n_embd;
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n * dim));
    for (auto& v : x) v = dist(rng);
    int64_t differ = 0, chosen = 0;
    for (int64_t layer = 0; layer < 2; ++layer) {
      std::vector<uint8_t> a(static_cast<size_t>(n * n_ff)), b(a.size());
      std::vector<int32_t> ua, ub;
      cpu.predict(layer, x.data(), n, a.data(), ua);
      gpu.predict(layer, x.data(), n, b.data(), ub);
      for (size_t k = 0; k < a.size(); ++k) differ += a[k] != b[k], chosen += b[k];
      // The union is the neurons any token chose.
      std::vector<int32_t> want;
      for (int32_t i = 0; i < n_ff; ++i)
        for (int64_t t = 0; t < n; ++t)
          if (b[static_cast<size_t>(t * n_ff + i)]) {
            want.push_back(i);
            break;
          }
      EXPECT_EQ(ub, want);
    }
    EXPECT_GT(gpu.device_read(), 0u);
    EXPECT_GT(chosen, n * n_ff / 20) << "the predictors chose almost nothing: the comparison says little";
    EXPECT_LT(chosen, 2 * n * n_ff * 19 / 20);
    EXPECT_LE(differ, type == tensor_type::f16 ? 0 : 2 * n * n_ff / 50) << "of " << 2 * n * n_ff << " decisions";
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

// A device's new memory holds whatever was there (sim: 0xff bytes, NaN as F16), the CPU's cache starts
// at zero: the device's KV cache is zeroed when it is made.
TEST(DeviceLayers, TheDevicesKvCacheStartsAtZero) {
  auto m = sparse_model();
  auto dev = sim();
  {
    auto fresh = dev->allocate(64, "fresh");
    const auto* b = static_cast<const uint8_t*>(fresh->data());
    EXPECT_TRUE(std::all_of(b, b + 64, [](uint8_t x) { return x == 0xff; })) << "sim's new memory is not the GPU-like garbage the test needs";
  }
  const auto held = std::make_shared<const device_layers>(m, layer0_attention_layer1_predictor_head(), dev, tensor_type::f16);
  const auto& hp = m->hp();
  const size_t bytes = static_cast<size_t>(16 * hp.n_embd_kv()) * 2;  // (n_seq 1) x ctx 16 x n_embd_kv F16 values
  for (const uint8_t* c : {held->k_cache(0), held->v_cache(0)})
    EXPECT_TRUE(std::all_of(c, c + bytes, [](uint8_t x) { return x == 0; }));
}

}  // namespace
}  // namespace hotcold
