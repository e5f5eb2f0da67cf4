// The actor pipeline against the engine's forward pass called directly (same logits within 1e-5
// relative, same tokens) and against model/reference (the dense file's logits; a sparse file's
// given the neurons the actors chose), for several requests at once — continuous batching, chunked prompts, a split between
// a sim device and the cold pool — plus cancellation, bad requests, and an injected fault that the
// supervisor recovers from.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>
#include <set>

#include <nlohmann/json.hpp>

#include "actors/pipeline.hpp"
#include "tests/actors/greedy_request.hpp"
#include "devices/device_info.hpp"
#include "devices/gpu_jobs.hpp"
#include "engine/device_layers.hpp"
#include "loader/open.hpp"
#include "model/reference.hpp"
#include "model/sampler.hpp"
#include "tests/engine/overlap_latch.hpp"
#include "tests/model/edited_files.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::actors {
namespace {

struct outcome {
  std::vector<std::vector<float>> logits;  // the prompt's positions, when asked for
  std::vector<token_id> tokens;
  done_event done;
  std::vector<int64_t> order;  // the event counter at each token
  int64_t first_index = 0;     // of the first token read here
};

// Reads events until `n` requests are done (a minute at most: nothing may hang).
std::map<int64_t, outcome> drain(pipeline& p, size_t n, int64_t* counter = nullptr) {
  std::map<int64_t, outcome> out;
  size_t done = 0;
  int64_t events = 0;
  while (done < n) {
    auto ev = p.next(std::chrono::seconds(60));
    if (!ev) {
      ADD_FAILURE() << "no event for a minute: " << done << " of " << n << " requests done";
      break;
    }
    ++events;
    if (auto* t = std::get_if<token_event>(&*ev)) {
      auto& o = out[t->request];
      if (o.tokens.empty()) o.first_index = t->index;
      EXPECT_EQ(t->index, o.first_index + static_cast<int64_t>(o.tokens.size())) << "tokens of a request arrive in order";
      o.tokens.push_back(t->token);
      o.order.push_back(events);
    } else if (auto* l = std::get_if<logits_event>(&*ev)) {
      auto& o = out[l->request];
      EXPECT_EQ(l->first_position, static_cast<int64_t>(o.logits.size()));
      for (int64_t r = 0; r < l->logits.rows; ++r) o.logits.emplace_back(l->logits.row(r), l->logits.row(r) + l->logits.cols);
    } else {
      auto& d = std::get<done_event>(*ev);
      auto& o = out[d.request];
      EXPECT_EQ(o.done.finish, "") << "one done event per request";
      o.done = d;
      ++done;
    }
  }
  if (counter) *counter = events;
  return out;
}

struct reference_run {
  std::vector<std::vector<float>> logits;
  std::vector<token_id> tokens;
};

// The reference: one forward() per token on a context of its own, the same sampler chain.
reference_run reference(std::shared_ptr<const model> m, ffn_mode mode, const generation_request& r, std::shared_ptr<ffn_executor> executor = nullptr) {
  inference_context ctx(m, 64, 2);
  ctx.set_mode(mode);
  ctx.set_ffn_executor(std::move(executor));
  sampler smp(r.sampling);
  reference_run out;
  std::span<const float> logits;
  int64_t pos = 0;
  for (token_id t : r.prompt) {
    smp.accept(t);
    logits = ctx.forward(t, pos++);
    out.logits.emplace_back(logits.begin(), logits.end());
  }
  while (static_cast<int32_t>(out.tokens.size()) < r.n_predict && pos < ctx.n_ctx()) {
    const token_id next = smp.sample(logits);
    if (m->vocabulary().is_end_of_generation(next)) break;
    smp.accept(next);
    out.tokens.push_back(next);
    if (pos >= ctx.n_ctx()) break;
    logits = ctx.forward(next, pos++);
  }
  return out;
}

using test::greedy;

std::vector<generation_request> three_requests(int64_t n_vocab) {
  std::vector<generation_request> rs(3);
  for (int k = 0; k < 3; ++k) {
    auto& r = rs[static_cast<size_t>(k)];
    for (int i = 0; i < 3 + 5 * k; ++i) r.prompt.push_back(static_cast<token_id>((11 + 37 * i + 101 * k) % n_vocab));
    r.prompt[0] = 1;
    r.n_predict = 6 + 2 * k;
    r.all_logits = true;
    r.cache_prompt = false;  // every position's logits held against the reference (tests/actors/test_prefix_reuse.cpp reuses)
    r.sampling.temperature = k == 1 ? 0.8f : 0.0f;  // one request samples, with its own seed
    r.sampling.seed = 42 + static_cast<uint64_t>(k);
  }
  return rs;
}

// A sparse file in PowerInfer's conventions: magic PWRI, ffn_down_t, blk.N.fc1 / fc2, one threshold key.
std::string split_file() {
  auto dense = test::make_model("pl_dense_relu", test::sparse_test_options(architecture::llama, hotcold::activation::relu, tensor_type::f16));
  auto path = (test::scratch_dir() / "pl_sparse.gguf").string();
  tools::sparse_file_options o;
  o.kind = gguf::file_kind::powerinfer;
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 256, 32, -0.5f, 3), o);
  return path;
}

std::shared_ptr<devices::device> sim_device(uint64_t budget) {
  devices::device_options o;
  o.kind = "sim";
  o.budget = budget;
  return devices::make_device(o);
}

// A 64 MiB device that computes as a GPU does: sim's kernels (--sim-kernels), or, with `real_gpu`
// and a GPU present, the GPU itself.
std::shared_ptr<devices::device> gpu_like_device(bool real_gpu = false) {
  devices::device_options o;
  o.kind = "sim";
  o.budget = 64 << 20;
  o.sim_kernels = true;
  if (real_gpu && !devices::probe_cuda().devices.empty()) o.kind = "auto", o.sim_kernels = false;
  return devices::make_device(o);
}

// What a test puts on a hot device.
struct on_device {
  std::shared_ptr<devices::device> dev;  // null: a 256 MiB sim device of its own
  std::optional<placement_data> hot;     // a sparse file's hot neurons
  device_residency residency;            // what else the device holds (nothing by default)
};

// Every third neuron of each layer hot on a 64 MiB sim device (or on `dev`), and what `r` names.
on_device third_hot(const model& m, std::shared_ptr<devices::device> dev = nullptr, const device_residency& r = {}) {
  return {dev ? std::move(dev) : sim_device(64 << 20), test::every_third_hot(m.hp().n_layer, m.hp().n_ff), r};
}

// The model opened as every command opens one (loader::open_for_running): a context of 64 positions
// for n_seq sequences on `threads` CPU workers, and what `d` puts on its device (the CPU alone when null).
loader::opened_model open_model(std::shared_ptr<const model> m, ffn_mode mode, int64_t n_seq, const on_device* d = nullptr, int threads = 2,
                                bool trace = false) {
  loader::open_options o;
  o.ctx = 64;
  o.n_seq = n_seq;
  o.threads = threads;
  o.mode = mode;
  o.trace = trace;
  std::shared_ptr<devices::device> dev;
  if (d) {
    dev = d->dev ? d->dev : sim_device(256 << 20);
    o.hot = d->hot;
    o.residency = d->residency;
  }
  return loader::open_for_running(std::move(m), std::move(dev), o);
}

// The pipeline over what open_model opened, as the commands make it.
pipeline_options options_for(const loader::opened_model& opened) {
  pipeline_options o;
  o.hot = opened.hot;
  o.trace = opened.trace.get();
  return o;
}

void expect_matches_reference(std::shared_ptr<const model> m, ffn_mode mode, const on_device* d = nullptr, int micro_batches = 1,
                              double oracle_tolerance = test::f16_kv_tolerance) {
  const auto opened = open_model(m, mode, 3, d);
  const auto& ctx = opened.ctx;
  pipeline_options o = options_for(opened);
  o.micro_batches = micro_batches;
  o.prefill_chunk = 3;  // prompts in chunks, sharing steps with sequences already decoding
  pipeline p(ctx, o);
  auto rs = three_requests(m->hp().n_vocab);
  std::vector<int64_t> ids;
  for (const auto& r : rs) ids.push_back(p.submit(r));
  auto got = drain(p, rs.size());
  const auto file = gguf::file::open(m->path());
  const reference_model oracle(file, tensor_type::f16, ctx->n_ctx());  // the context's F16 KV cache (and its size: Phi-3's RoPE factors)
  for (size_t k = 0; k < rs.size(); ++k) {
    SCOPED_TRACE(k);
    auto want = reference(m, mode, rs[k]);
    const auto& o = got[ids[k]];
    ASSERT_EQ(o.logits.size(), want.logits.size());
    EXPECT_LT(test::rel_diff(o.logits, want.logits), test::f16_kv_tolerance);
    if (mode == ffn_mode::dense) {  // and the prompt's logits are the model's own (model/reference)
      EXPECT_LT(test::rel_diff(o.logits, oracle.logits(rs[k].prompt)), oracle_tolerance);
    }
    EXPECT_EQ(o.tokens, want.tokens);
    EXPECT_EQ(o.done.finish, static_cast<int32_t>(want.tokens.size()) == rs[k].n_predict ? "length" : "stop");
    EXPECT_EQ(o.done.prompt_tokens, static_cast<int64_t>(rs[k].prompt.size()));
    EXPECT_EQ(o.done.generated_tokens, static_cast<int64_t>(want.tokens.size()));
    EXPECT_EQ(o.done.time_to_first_token_s > 0, !want.tokens.empty());
  }
  auto t = p.totals();
  EXPECT_EQ(t.requests_done, 3);
  EXPECT_EQ(t.restarts, 0);
  // Steps were shared: fewer steps than tokens.
  EXPECT_LT(t.steps, t.prompt_tokens + t.generated_tokens);
}


// One request through the actors, sparse, against model/reference given the neurons the actors chose:
// the trace's active sets, step by step (one sequence: a step's rows are its next positions), are
// the reference's neuron mask. The prompt's logits agree within test::f16_kv_tolerance, and each greedy token is the
// reference's best at its position (or ties it).
void expect_oracle_with_chosen(std::shared_ptr<const model> m, const on_device* d = nullptr, double tolerance = test::f16_kv_tolerance) {
  const auto& hp = m->hp();
  const auto opened = open_model(m, ffn_mode::sparse, 1, d, 2, /*trace=*/true);
  const auto& ctx = opened.ctx;
  const trace_recorder& trace = *opened.trace;
  pipeline_options o = options_for(opened);
  o.prefill_chunk = 3;  // the prompt in three steps
  generation_request r;
  for (int i = 0; i < 7; ++i) r.prompt.push_back(static_cast<token_id>((5 + 41 * i) % hp.n_vocab));
  r.prompt[0] = 1;
  r.n_predict = 6;
  r.ignore_eos = true;
  r.all_logits = true;
  r.cache_prompt = false;
  r.sampling.temperature = 0;
  outcome got;
  {
    pipeline p(ctx, o);
    const int64_t id = p.submit(r);
    got = drain(p, 1)[id];
  }
  ASSERT_EQ(got.tokens.size(), 6u);
  ASSERT_EQ(got.logits.size(), r.prompt.size());
  // The positions the model ran: the prompt, then each generated token but the last.
  std::vector<token_id> run = r.prompt;
  run.insert(run.end(), got.tokens.begin(), got.tokens.end() - 1);
  const auto mask = trace.sequence_mask(static_cast<int64_t>(run.size()), hp.n_layer, hp.n_ff);
  int64_t chosen = 0;
  for (const auto& position : mask)
    for (const auto& layer : position) chosen += std::count(layer.begin(), layer.end(), true);
  ASSERT_GT(chosen, 0);
  ASSERT_LT(chosen, static_cast<int64_t>(run.size()) * hp.n_layer * hp.n_ff) << "the predictor left no neuron out";
  const auto file = gguf::file::open(m->path());
  const auto want = reference_model(file, tensor_type::f16).logits(run, &mask);
  const double rel = test::rel_diff(got.logits, std::vector<std::vector<double>>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(r.prompt.size())));
  EXPECT_LT(rel, tolerance);
  testing::Test::RecordProperty("relative_rms_vs_reference", testing::PrintToString(rel));
  for (size_t j = 0; j < got.tokens.size(); ++j) {
    const auto& l = want[r.prompt.size() - 1 + j];
    const double best = *std::max_element(l.begin(), l.end());
    if (tolerance <= 1e-4) {  // (quantized rows meet quantized activations, which the reference does not)
      EXPECT_GE(l[static_cast<size_t>(got.tokens[j])], best - 1e-6 * (1 + std::fabs(best))) << "generated token " << j;
    }
  }
}

TEST(Pipeline, DenseFileGivesTheReferenceLogitsAndTokens) {
  auto m = model::load(test::make_model("pl_dense", test::small_options(2, 2)));
  expect_matches_reference(m, ffn_mode::dense, nullptr);
}

TEST(Pipeline, SparseFileSplitWithSimGivesTheReferenceLogitsAndTokens) {
  auto m = model::load(split_file());
  const auto hot = third_hot(*m);
  expect_matches_reference(m, ffn_mode::sparse, &hot);
  expect_oracle_with_chosen(m, &hot);
}

// The same with the hot rows on a CUDA GPU (hotcold's kernels on the device's stream, the cold share
// on the CPU meanwhile); skipped where there is none.
TEST(Pipeline, SparseFileSplitWithCudaGivesTheReferenceLogitsAndTokens) {
  if (devices::probe_cuda().devices.empty()) GTEST_SKIP() << "no CUDA device: " << devices::probe_cuda().unavailable;
  auto m = model::load(split_file());
  devices::device_options o;
  o.kind = "cuda";
  o.budget = 64 << 20;
  const auto hot = third_hot(*m, devices::make_device(o));
  expect_matches_reference(m, ffn_mode::sparse, &hot);
  expect_oracle_with_chosen(m, &hot);
  // And layer 0's attention with its KV cache, the predictors and the head there too.
  device_residency r;
  r.attention = {1, 0}, r.predictor = {0, 0}, r.ffn = {0, 0};
  r.output = true;
  r.compute_bytes = 1 << 20;
  const auto hot_too = third_hot(*m, devices::make_device(o), r);
  expect_matches_reference(m, ffn_mode::sparse, &hot_too);
  expect_oracle_with_chosen(m, &hot_too);
}

// A hot device holding more than hot rows: the attention (with its KV cache) of layer 0, the
// predictor of layer 1 and the output head on a sim device, every third neuron of each layer hot
// there, the rest on the CPU. The actors give the CPU forward pass's logits and tokens (every row type,
// Q4_0 included), and model/reference's given the neurons they chose (float rows within the F16-cache
// tolerance; Q4_0 rows meet Q8_0 activations, as in llama.cpp, which the reference does not
// quantize), for PowerInfer-style files of every architecture, norms with weights and biases of their
// own (a norm read from the wrong copy shows).
struct device_case {
  const char* name;
  architecture arch;
  hotcold::activation act;
  tensor_type type;
  int64_t kv_heads;
  float act_threshold = 0;  // a thresholded SiLU file's per-layer threshold (0: none)
};
class DeviceLayers : public testing::TestWithParam<device_case> {};

// predictors: their type in the file (F32 as PowerInfer's converter writes them, or F16, which a GPU reads).
std::shared_ptr<const model> device_case_model(const device_case& c, tensor_type predictors = tensor_type::f32) {
  auto o = test::sparse_test_options(c.arch, c.act, c.type);
  o.n_head_kv = c.kv_heads;  // falcon with 2: the Falcon-40B layout (attn_norm_2)
  o.norm_spread = 0.3;
  auto dense = test::make_model(std::string("dl_dense_") + c.name, o);
  auto path = (test::scratch_dir() / (std::string("dl_sparse_") + c.name + (predictors == tensor_type::f32 ? "" : "_f16_predictors") + ".gguf")).string();
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  if (predictors != tensor_type::f32) so.predictor_type = predictors;
  float predictor_threshold = -0.5f;
  if (c.act_threshold > 0) {  // hotcold's own thresholded file: |act(gate)| below it is 0, the predictors' scores are pre-activations
    so.kind = gguf::file_kind::gguf;
    so.act_thresholds = {c.act_threshold, c.act_threshold};
    predictor_threshold = 0.12f;
  }
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 256, 32, predictor_threshold, 3), so);
  return model::load(path);
}

TEST_P(DeviceLayers, AttentionPredictorAndHeadOnSimGiveTheReference) {
  const auto& c = GetParam();
  auto m = device_case_model(c);
  device_residency r;
  r.attention = {1, 0}, r.predictor = {0, 1}, r.ffn = {0, 0};
  r.output = true;
  const auto hot = third_hot(*m, nullptr, r);
  expect_matches_reference(m, ffn_mode::sparse, &hot);  // the CPU engine's logits and tokens, every row type
  const bool float_rows = c.type == tensor_type::f16 || c.type == tensor_type::f32;
  expect_oracle_with_chosen(m, &hot, float_rows ? test::f16_kv_tolerance : 1.5e-2);
}

// The same on a device that computes as a GPU does (sim's kernels): layer 0's attention through the
// attention job (norms on the host: Falcon-40B's two norms, layer norms with biases; fused or separate
// Q/K/V; NeoX or adjacent RoPE pairs; grouped-query heads; the F16 cache on the device),
// layer 0's predictor (F16) in the same job on the input it reads (the residual stream after
// attention, or the layer's input in a parallel layer), layer 1's through the predict job, hot rows
// through FFN-rows jobs, the head through a product job. F32 weights are not what a GPU's kernels
// read: refused.
TEST_P(DeviceLayers, AttentionOnAGpuLikeSimGivesTheReference) {
  const auto& c = GetParam();
  auto m = device_case_model(c, tensor_type::f16);
  device_residency r;
  r.attention = {1, 0}, r.predictor = {1, 1}, r.ffn = {0, 0};
  r.output = true;
  r.compute_bytes = 1 << 20;
  auto gpu_like = gpu_like_device(/*real_gpu=*/true);  // the real kernels where there is a GPU
  if (c.type == tensor_type::f32) {
    device_residency here = r;
    here.ctx = 64;
    EXPECT_THROW(device_layers(m, here, gpu_like, tensor_type::f16), std::invalid_argument);
    return;
  }
  const auto hot = third_hot(*m, gpu_like, r);
  const bool float_rows = c.type == tensor_type::f16;
  if (float_rows) expect_matches_reference(m, ffn_mode::sparse, &hot);
  expect_oracle_with_chosen(m, &hot, float_rows ? test::f16_kv_tolerance : 1.5e-2);
  const auto opened = open_model(m, ffn_mode::sparse, 1, &hot);
  opened.ctx->forward(1, 0);
  // Layer 0's choice came with its attention; a thresholded file's predictor reads the FFN's normalized
  // input, made after that job, so it runs as a predict job of its own (|silu(score)| >= threshold).
  EXPECT_EQ(opened.ctx->device()->choices_taken(), c.act_threshold > 0 ? 0 : 1);
}

INSTANTIATE_TEST_SUITE_P(Models, DeviceLayers,
                         testing::Values(device_case{"llama_relu_f16", architecture::llama, hotcold::activation::relu, tensor_type::f16, 2},
                                         device_case{"llama_relu_q4_0", architecture::llama, hotcold::activation::relu, tensor_type::q4_0, 2},
                                         device_case{"bamboo_drelu_f16", architecture::bamboo, hotcold::activation::drelu, tensor_type::f16, 2},
                                         device_case{"falcon7b_relu_f32", architecture::falcon, hotcold::activation::relu, tensor_type::f32, 1},
                                         device_case{"falcon40b_relu_f16", architecture::falcon, hotcold::activation::relu, tensor_type::f16, 2},
                                         device_case{"llama_silu_thresholded_f16", architecture::llama, hotcold::activation::silu, tensor_type::f16, 2, 0.1f}),
                         [](const testing::TestParamInfo<device_case>& i) { return i.param.name; });

// The round trips a GPU makes for the pass (devices::gpu_traffic), counted by sim computing as a GPU
// does: with both layers' attention and predictors and the head on the device, a decoded token costs
// each layer one attention job — the Q, K and V products, RoPE with the store, the attention, the output
// product, then the predictor fused in (the sum and its four kernels): 11 launches, the inputs in and
// the output and choices out (3 copies), 1 wait — and the head 1 launch, 2 copies, 1 wait. A batch of
// 12 whose scratch holds 5 tokens goes through in 3 chunks a layer (each 7 launches and the predictor's
// 4 for the whole chunk, 3 copies, 1 wait), the head the last token's. A GPU, where there is one,
// counts its own calls: the same (the bundle's check runs this).
TEST(Pipeline, RoundTripsAreCountedAsAGpuMakesThem) {
  auto m = device_case_model({"llama_relu_f16", architecture::llama, hotcold::activation::relu, tensor_type::f16, 2}, tensor_type::f16);
  const auto& hp = m->hp();
  device_residency r;
  r.attention = {1, 1}, r.predictor = {1, 1}, r.ffn = {0, 0};
  r.output = true;
  r.ctx = 16, r.n_seq = 1;
  const int64_t rank = m->weights().layers[0].pred_fc1.ne1;
  const uint64_t per_token = devices::attention_scratch_per_token(hp.n_embd, hp.n_embd, hp.n_embd_kv(), hp.n_rot, hp.n_ff, rank);
  r.compute_bytes = std::max<uint64_t>(5 * per_token + 16 * devices::scratch_align, 4 * static_cast<uint64_t>(hp.n_embd + hp.n_vocab));
  ASSERT_LT(r.compute_bytes, 6 * per_token) << "the head's scratch would let more than 5 tokens through";
  for (bool real : {false, true}) {
    if (real && devices::probe_cuda().devices.empty()) continue;
    SCOPED_TRACE(real ? "the GPU" : "sim");
    // Both layers' attention, predictors and the head on the device, for a context of n_ctx.
    auto on_device = [&](int64_t n_ctx) {
      r.ctx = n_ctx;
      auto dev = gpu_like_device(real);
      auto ctx = std::make_unique<inference_context>(m, n_ctx, 2, 1);
      ctx->set_mode(ffn_mode::sparse);
      ctx->set_device_layers(std::make_shared<const device_layers>(m, r, dev, tensor_type::f16));
      return std::pair{dev, std::move(ctx)};
    };
    auto [dev, ctx] = on_device(16);
    const auto before = dev->traffic();
    ctx->forward(1, 0);
    EXPECT_EQ(dev->traffic() - before, (devices::device_traffic{2 * 11 + 1, 2 * 3 + 2, 2 * 1 + 1}));
    const auto second = dev->traffic();
    std::vector<token_id> batch(12);
    for (size_t i = 0; i < batch.size(); ++i) batch[i] = static_cast<token_id>(100 + i);
    ctx->forward_batch(batch, 1);
    const devices::device_traffic per_layer{3 * (7 + 4), 3 * 3, 3};  // (the predictor's four kernels once a chunk)
    EXPECT_EQ(dev->traffic() - second, (devices::device_traffic{2 * per_layer.launches + 1, 2 * per_layer.copies + 2, 2 * per_layer.syncs + 1}));
    // A long past (flash-decoding): a token at position 300 splits each head's 301 positions across
    // blocks of at least 128 — three — and joins them, one launch more a layer; at position 200, two
    // splits; at 100, none.
    auto [long_dev, long_ctx] = on_device(512);
    for (int32_t pos : {100, 200, 300}) {
      const auto at = long_dev->traffic();
      long_ctx->forward(1, pos);
      const uint64_t attend = pos >= 128 ? 2 : 1;
      EXPECT_EQ(long_dev->traffic() - at, (devices::device_traffic{2 * (10 + attend) + 1, 2 * 3 + 2, 2 * 1 + 1})) << pos;
    }
  }
}

// A sparse file whose shares of a layer (2048 neurons of F16 rows a side) take a few hundred
// microseconds, well above the time a message takes to wake a sleeping actor's thread; every neuron
// chosen. And a placement with every other neuron hot: the two sides have the same work.
std::shared_ptr<const model> busy_sparse_model() {
  tools::gen_model_options o;
  o.n_embd = 512;
  o.n_ff = 4096;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_head_kv = 4;
  o.active = 0.3;
  o.type = tensor_type::f16;
  auto dense = test::make_model("pl_overlap_dense", o);
  auto path = (test::scratch_dir() / "pl_overlap_sparse.gguf").string();
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 512, 4096, 32, -1e30f, 5));
  return model::load(path);
}
placement_data every_other_hot() {
  placement_data half;
  for (int l = 0; l < 2; ++l) {
    half.hot.emplace_back();
    for (int32_t i = 0; i < 4096; i += 2) half.hot.back().push_back(i);
  }
  return half;
}

// Proves by construction, not by the clock, that a micro-batch's device work runs while another's cold
// share waits for the cold pool. The compute actors' fault hook sees each stage begin with its requests
// (a micro-batch's own). The first stage is held until the scheduler has taken every request, so that
// later steps hold them all. Then the first cold share of layer 0 of a first micro-batch — one with the
// first request (its token comes first in every step) and several requests (a step not split has one
// sequence) — is held until the device has begun layer 0's attention, after this micro-batch's own, for
// requests of another micro-batch. A runtime that ran the micro-batches one after the other (or not at
// all) never begins it while the share is held, and the wait gives up after `patience`, far beyond any
// scheduling delay.
class micro_batch_overlap {
 public:
  explicit micro_batch_overlap(int64_t first_request, std::chrono::seconds patience = std::chrono::seconds(60))
      : first_request_(first_request), patience_(patience) {}
  fault_hook hook() {
    return [this](step_part s, int64_t layer, const std::vector<int64_t>& requests) { seen(s, layer, std::set<int64_t>(requests.begin(), requests.end())); };
  }
  void release_first_stage() {
    std::lock_guard<std::mutex> l(m_);
    released_ = true;
    cv_.notify_all();
  }
  bool cold_share_held() const { std::lock_guard<std::mutex> l(m_); return !held_for_.empty(); }
  bool overlapped() const { std::lock_guard<std::mutex> l(m_); return overlap(); }

 private:
  static bool disjoint(const std::set<int64_t>& a, const std::set<int64_t>& b) {
    return std::none_of(a.begin(), a.end(), [&](int64_t r) { return b.count(r) > 0; });
  }
  bool overlap() const {
    if (held_for_.empty()) return false;
    size_t own = attended_.size();  // the held micro-batch's latest attention of layer 0
    for (size_t k = attended_.size(); k-- > 0;)
      if (attended_[k] == held_for_) {
        own = k;
        break;
      }
    for (size_t k = own + 1; k < attended_.size(); ++k)
      if (disjoint(attended_[k], held_for_)) return true;
    return false;
  }
  void seen(step_part s, int64_t layer, std::set<int64_t> requests) {
    std::unique_lock<std::mutex> l(m_);
    if (!first_seen_) {
      first_seen_ = true;
      cv_.wait_for(l, patience_, [&] { return released_; });
    }
    if (layer != 0) return;
    if (s == step_part::attention) {
      attended_.push_back(std::move(requests));
      cv_.notify_all();
    } else if (s == step_part::cold_ffn && held_for_.empty() && requests.size() >= 2 && requests.count(first_request_) > 0) {
      held_for_ = std::move(requests);
      cv_.wait_for(l, patience_, [&] { return overlap(); });
    }
  }
  const int64_t first_request_;
  const std::chrono::seconds patience_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool first_seen_ = false, released_ = false;
  std::set<int64_t> held_for_;                // the held cold share's requests
  std::vector<std::set<int64_t>> attended_;   // layer 0's attentions in the order they began, by their requests
};

// Steps of several sequences split into micro-batches (the device holding every layer's attention
// and predictor): the same logits and tokens as the forward pass, and the device works on one
// micro-batch while the cold pool works on another (micro_batch_overlap).
TEST(Pipeline, MicroBatchesGiveTheReferenceAndOverlap) {
  auto m = model::load(split_file());
  device_residency r;
  r.attention = {1, 1}, r.predictor = {1, 1}, r.ffn = {0, 0};
  r.output = true;
  const auto hot = third_hot(*m, sim_device(256 << 20), r);
  for (int micro : {2, 3}) {
    SCOPED_TRACE(micro);
    expect_matches_reference(m, ffn_mode::sparse, &hot, micro);
  }
  const on_device half{sim_device(128 << 20), every_other_hot(), r};
  const auto opened = open_model(busy_sparse_model(), ffn_mode::sparse, 4, &half);
  pipeline_options o = options_for(opened);
  o.micro_batches = 2;
  const int64_t first = 0;  // the pipeline numbers its requests from 0
  micro_batch_overlap probe(first);
  o.fault = probe.hook();
  pipeline p(opened.ctx, o);
  for (int k = 0; k < 4; ++k) ASSERT_EQ(p.submit(greedy({1, static_cast<token_id>(20 + k)}, 8)), first + k);
  // A request the scheduler refuses at once: its answer comes after it took the four before it (one
  // sender's messages arrive in order), and before any token (the first stage is held).
  const int64_t marker = p.submit(generation_request{});
  const auto ev = p.next(std::chrono::seconds(60));
  ASSERT_TRUE(ev && std::holds_alternative<done_event>(*ev) && std::get<done_event>(*ev).request == marker);
  probe.release_first_stage();
  const auto got = drain(p, 4);
  for (const auto& [id, out] : got) EXPECT_EQ(out.tokens.size(), 8u) << id;
  EXPECT_TRUE(probe.cold_share_held()) << "no cold share of layer 0 of a first micro-batch";
  EXPECT_TRUE(probe.overlapped()) << "no micro-batch's attention began while another's cold share was held";
}

// A device lost to a sticky error (a GPU context that faulted answers every later call with the same
// error): the requests in flight end with that error, new ones end at once with it, and the runtime
// neither retries them one by one nor restarts its actors on a dead device.
TEST(Pipeline, LostDeviceFailsEveryRequestWithItsErrorAndStopsRetrying) {
  auto m = model::load(split_file());
  device_residency r;
  r.attention = {1, 0}, r.predictor = {0, 0}, r.ffn = {0, 0};
  const auto hot = third_hot(*m, nullptr, r);
  const auto opened = open_model(m, ffn_mode::sparse, 3, &hot);
  const auto& ctx = opened.ctx;
  auto steps = std::make_shared<std::atomic<int>>(0);
  devices::device* dev = opened.dev.get();
  pipeline_options o = options_for(opened);
  o.fault = [steps, dev](step_part s, int64_t layer, const std::vector<int64_t>&) {
    if (s != step_part::attention || layer != 1 || ++*steps < 4) return;
    dev->lose("an illegal memory access (simulated)");
    throw devices::device_lost(dev->lost());
  };
  pipeline p(ctx, o);
  for (int k = 0; k < 2; ++k) p.submit(greedy({1, static_cast<token_id>(30 + k)}, 20));
  auto got = drain(p, 2);
  for (const auto& [id, out] : got) {
    EXPECT_EQ(out.done.finish, "error") << id;
    EXPECT_NE(out.done.error.find("sim was lost: an illegal memory access (simulated)"), std::string::npos) << out.done.error;
  }
  generation_request late;
  late.prompt = {1, 2, 3};
  late.n_predict = 4;
  const int64_t id = p.submit(late);
  auto after = drain(p, 1);
  EXPECT_EQ(after[id].done.finish, "error");
  EXPECT_NE(after[id].done.error.find("sim was lost"), std::string::npos) << after[id].done.error;
  EXPECT_TRUE(after[id].tokens.empty());
  EXPECT_EQ(p.totals().restarts, 0) << "actors restarted on a dead device";
  EXPECT_THROW(dev->allocate(16, "after the loss"), devices::device_lost);
}

// Everything above a GPU's kernels, on sim computing as a GPU does (device_options::sim_kernels: no
// host work, the operation table's jobs from its plain copies): the predictors (their interleaved
// rows put back in order) and the head on the device through predict and matvec jobs, hot rows
// through FFN-rows jobs, against model/reference given the neurons chosen; attention, which has no
// GPU kernels yet, is refused there.
void expect_gpu_jobs_on_sim_give_the_reference(tensor_type predictors) {
  SCOPED_TRACE(tensor_type_name(predictors));
  auto dense = test::make_model("pl_dense_relu", test::sparse_test_options(architecture::llama, hotcold::activation::relu, tensor_type::f16));
  const auto path = (test::scratch_dir() / (std::string("pl_sparse_") + std::string(tensor_type_name(predictors)) + "_predictors.gguf")).string();
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  so.predictor_type = predictors;
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 256, 32, -0.5f, 3), so);
  auto m = model::load(path);
  ASSERT_EQ(m->weights().layers[0].pred_fc1.type, predictors);
  EXPECT_TRUE(m->weights().layers[0].pred_fc2.interleaved16);
  auto gpu_like = gpu_like_device(/*real_gpu=*/true);  // the real kernels where there is a GPU
  EXPECT_FALSE(gpu_like->runs_host_work());
  // Layer 0's attention through the device's attention job (its products, RoPE, the F16 cache on the
  // device, the softmax), layer 1's on the host.
  device_residency r;
  r.attention = {1, 0}, r.predictor = {1, 1}, r.ffn = {0, 0};
  r.output = true;
  r.compute_bytes = 1 << 20;
  const auto hot = third_hot(*m, gpu_like, r);
  expect_oracle_with_chosen(m, &hot, predictors == tensor_type::f16 ? test::f16_kv_tolerance : 1.5e-2);
  // And F16 predictors choose what the CPU's do (their rows read in the right order): the CPU
  // engine's logits and tokens. (Q4_0 predictors meet float activations on a GPU and Q8_0 ones on
  // the CPU, so neurons at the threshold may go either way: DeviceLayers.GpuPredictorJobsChooseWhatTheCpuDoes.)
  if (predictors == tensor_type::f16) expect_matches_reference(m, ffn_mode::sparse, &hot);
  // Layer 0's predictor ran inside its attention's job (one crossing for both): each token's choice
  // was taken from there, not computed again; layer 1's (attention on the host) by its own job.
  {
    const auto opened = open_model(m, ffn_mode::sparse, 1, &hot);
    opened.ctx->forward(1, 0);
    opened.ctx->forward(7, 1);
    EXPECT_EQ(opened.ctx->device()->choices_taken(), 2);
  }
  // A GPU's dense FFN job reads a down matrix, which a sparse file does not have (its down rows are
  // transposed): a whole FFN of this file is refused there, by name.
  device_residency whole = r;
  whole.ffn = {1, 0};
  whole.ctx = 64;
  try {
    device_layers refused(m, whole, gpu_like, tensor_type::f16);
    ADD_FAILURE() << "a sparse file's whole FFN was put on a GPU-like device";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer 0's whole FFN"), std::string::npos) << e.what();
  }
}

TEST(Pipeline, GpuJobsOnSimGiveTheReference) {
  // F16 predictors (fc2's short rows interleaved in the private copy), and Q4_0 ones as PowerInfer's
  // quantize writes them (interleaved too).
  expect_gpu_jobs_on_sim_give_the_reference(tensor_type::f16);
  expect_gpu_jobs_on_sim_give_the_reference(tensor_type::q4_0);
}

// A dense file with its first layer whole (attention, KV cache, FFN) and the head on a sim device:
// the actors give the forward pass's logits and tokens and the model's own logits.
TEST(Pipeline, DenseFileWithALayerOnSimGivesTheReferenceLogitsAndTokens) {
  auto o = test::small_options(2, 2);
  o.norm_spread = 0.3;
  auto m = model::load(test::make_model("pl_dense_spread", o));
  device_residency r;
  r.attention = {1, 0}, r.predictor = {0, 0}, r.ffn = {1, 0};
  r.output = true;
  const on_device layer0{nullptr, std::nullopt, r};
  expect_matches_reference(m, ffn_mode::dense, &layer0);
}

// The same on a device that computes as a GPU does (sim's kernels): layer 0's attention and whole
// FFN, and the head, through the device's attention, dense FFN and product jobs — for a llama
// (separate Q/K/V, RMS norms, grouped-query heads) and a Falcon-7B layout (fused QKV, layer norms with
// biases, parallel attention and FFN, GELU, NeoX RoPE) with F16, Q8_0 and Q4_0 weights (and a Q6_K head).
TEST(Pipeline, DenseFileWithALayerOnGpuLikeSimGivesTheReference) {
  for (const auto arch : {architecture::llama, architecture::falcon})
    for (const auto type : {tensor_type::f16, tensor_type::q8_0, tensor_type::q4_0}) {
      SCOPED_TRACE(std::string(arch == architecture::llama ? "llama " : "falcon ") + std::string(tensor_type_name(type)));
      auto o = test::small_options(2, arch == architecture::falcon ? 1 : 2);
      o.arch = arch;
      o.act = arch == architecture::falcon ? activation::gelu : activation::relu;
      o.type = type;
      o.norm_spread = 0.3;
      if (type == tensor_type::q4_0) o.n_embd = 256;  // then the head is Q6_K, as llama.cpp's Q4_0 preset makes it
      auto m = model::load(test::make_model(std::string("pl_dense_gpu_") + (arch == architecture::llama ? "llama_" : "falcon_") +
                                                std::string(tensor_type_name(type)), o));
      auto gpu_like = gpu_like_device(/*real_gpu=*/true);  // the real kernels where there is a GPU
      device_residency r;
      r.attention = {1, 0}, r.predictor = {0, 0}, r.ffn = {1, 0};
      r.output = true;
      r.compute_bytes = 1 << 20;
      if (type == tensor_type::q4_0) {  // llama.cpp's Q4_0 preset: a Q6_K head, Q8_0 for falcon
        EXPECT_EQ(m->weights().output.type, arch == architecture::falcon ? tensor_type::q8_0 : tensor_type::q6_k);
      }
      const on_device layer0{gpu_like, std::nullopt, r};
      if (type == tensor_type::f16) {
        expect_matches_reference(m, ffn_mode::dense, &layer0);
      } else {
        // Quantized rows meet float activations on a GPU and Q8_0 ones on the CPU: the model's own
        // logits (model/reference, float activations) within the quantization's reach.
        const auto opened = open_model(m, ffn_mode::dense, 1, &layer0);
        const std::vector<token_id> prompt{1, 7, 42, 9, 3};
        const auto got = opened.ctx->forward_batch(prompt, 0, true);
        const int64_t v = m->hp().n_vocab;
        std::vector<std::vector<float>> rows;
        for (size_t t = 0; t < prompt.size(); ++t) rows.emplace_back(got.begin() + static_cast<int64_t>(t) * v, got.begin() + static_cast<int64_t>(t + 1) * v);
        const auto file = gguf::file::open(m->path());
        const reference_model oracle(file, tensor_type::f16);
        const double err = test::rel_diff(rows, oracle.logits(prompt));
        EXPECT_LT(err, 2e-2);
        RecordProperty(std::string(arch == architecture::llama ? "llama_" : "falcon_") + std::string(tensor_type_name(type)) + "_rel_rms", std::to_string(err));
      }
    }
}

// qwen2, qwen3 and phi3 through the actors: on the CPU alone, then with layer 0 whole and the head on a
// device that computes as a GPU does — the attention job's biases, per-head norms of q and k, queries
// wider than the embedding, NeoX RoPE with Phi-3's long factors, phi3's halves of ffn_up as the dense
// FFN job's gate and up (the real kernels where there is a GPU).
TEST(Pipeline, Qwen2Qwen3Phi3GiveTheReferenceOnTheActorsAndAGpuLikeDevice) {
  for (const auto arch : {architecture::qwen2, architecture::qwen3, architecture::phi3}) {
    const std::string name(architecture_name(arch));
    SCOPED_TRACE(name);
    auto o = test::small_options(2, 2);
    o.arch = arch;
    o.act = activation::silu;
    o.norm_spread = 0.3;
    if (arch == architecture::qwen2) o.output_bias = true;
    if (arch == architecture::qwen3) o.head_dim = 24, o.tied_output = true;
    if (arch == architecture::phi3) o.phi3_rope_orig_ctx = 32;  // the actors' contexts (64) rotate by the long factors
    auto m = model::load(test::make_model("pl_arch_" + name, o));
    expect_matches_reference(m, ffn_mode::dense, nullptr);
    device_residency r;
    r.attention = {1, 0}, r.predictor = {0, 0}, r.ffn = {1, 0};
    r.output = true;
    r.compute_bytes = 1 << 20;
    const on_device layer0{gpu_like_device(/*real_gpu=*/true), std::nullopt, r};
    expect_matches_reference(m, ffn_mode::dense, &layer0);
  }
}

// Gemma 2 (a window of 3, caps that bite) on the actors: dense on the CPU; a host-computing device
// holding layer 0's attention and FFN; a GPU-like device holding the head (a GPU's attention job has no
// caps or window: Gemma 2's attention stays on the host there); and thresholded (its GELU gates) with hot
// rows on a device beside the cold pool.
TEST(Pipeline, Gemma2GivesTheReferenceOnTheActorsAndDevices) {
  auto o = test::small_options(2, 2);
  o.arch = architecture::gemma2;
  o.act = activation::gelu;
  o.norm_spread = 0.3;
  o.sliding_window = 3, o.attn_softcap = 2.0f, o.final_softcap = 3.0f;
  const auto dense = test::make_model("pl_gemma2", o);
  auto m = model::load(dense);
  expect_matches_reference(m, ffn_mode::dense, nullptr);
  device_residency r;
  r.attention = {1, 0}, r.predictor = {0, 0}, r.ffn = {1, 0};
  const on_device host_device{sim_device(64 << 20), std::nullopt, r};
  expect_matches_reference(m, ffn_mode::dense, &host_device);
  device_residency head_only;
  head_only.attention = {0, 0}, head_only.predictor = {0, 0}, head_only.ffn = {0, 0};
  head_only.output = true, head_only.compute_bytes = 1 << 20;
  const on_device gpu_head{gpu_like_device(/*real_gpu=*/true), std::nullopt, head_only};
  expect_matches_reference(m, ffn_mode::dense, &gpu_head);
  const auto path = (test::scratch_dir() / "pl_gemma2_sparse.gguf").string();
  tools::sparse_file_options so;
  so.act_thresholds = {0.05f, 0.05f};
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 64, 128, 16, -0.5f, 3), so);
  auto sparse = model::load(path);
  ASSERT_FALSE(sparse->hp().act_threshold.empty());
  const auto hot = third_hot(*sparse);
  expect_matches_reference(sparse, ffn_mode::sparse, &hot);
}

// A Q4_K_M file (Q4_K, Q6_K attn_v / ffn_down on layer 1, a Q6_K head) on the actors: dense, then
// sparse with hot rows on a host-computing device beside the cold pool.
TEST(Pipeline, KQuantMixGivesTheReferenceOnTheActors) {
  auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::q4_k);
  o.k_mix = true;
  o.n_embd = 256;
  o.norm_spread = 0.3;
  const auto dense = test::make_model("pl_q4_k_m", o);
  auto m = model::load(dense);
  EXPECT_EQ(m->weights().layers[1].ffn_down.type, tensor_type::q6_k);
  EXPECT_EQ(m->weights().output.type, tensor_type::q6_k);
  // (K-quant rows meet the activations quantized to Q8_K, which model/reference does not do.)
  expect_matches_reference(m, ffn_mode::dense, nullptr, 1, 2.5e-2);
  const auto path = (test::scratch_dir() / "pl_q4_k_m_sparse.gguf").string();
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(2, 256, 256, 32, -0.5f, 3), {});
  auto sparse = model::load(path);
  EXPECT_EQ(sparse->weights().layers[0].ffn_down_t.type, tensor_type::q4_k);
  const auto hot = third_hot(*sparse);
  expect_matches_reference(sparse, ffn_mode::sparse, &hot);
}

// With every fixed part on the device and every neuron hot there, a decoded token reads only its
// embedding row on the host: attention, the FFN norms, the predictors and the head are all read on
// the device (what bench's host_bytes_per_token and /metrics count).
TEST(Pipeline, HostReadsNoneOfWhatTheDeviceHolds) {
  auto m = model::load(split_file());
  const auto& hp = m->hp();
  device_residency r;
  r.attention = {1, 1}, r.predictor = {1, 1}, r.ffn = {0, 0};
  r.output = true;
  placement_data all;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    all.hot.emplace_back();
    for (int32_t i = 0; i < hp.n_ff; ++i) all.hot.back().push_back(i);
  }
  const on_device everything{sim_device(64 << 20), all, r};
  const auto opened = open_model(m, ffn_mode::sparse, 1, &everything);
  pipeline p(opened.ctx, options_for(opened));
  const int64_t id = p.submit(greedy({1}, 6));
  auto got = drain(p, 1)[id];
  ASSERT_EQ(got.tokens.size(), 6u);
  const auto v = p.stats()->read();
  const auto& costs = p.stats()->costs();
  EXPECT_EQ(v.host_bytes, costs.embedding_row * static_cast<uint64_t>(v.tokens));
  uint64_t fixed = costs.output;
  for (int64_t l = 0; l < hp.n_layer; ++l) fixed += costs.layer_fixed[static_cast<size_t>(l)];
  EXPECT_GE(v.device_bytes, fixed * static_cast<uint64_t>(v.tokens));
}

TEST(Pipeline, SparseFileOnTheCpuAloneGivesTheReferenceLogitsAndTokens) {
  auto m = model::load(split_file());
  expect_matches_reference(m, ffn_mode::sparse);
  expect_oracle_with_chosen(m);
}

// What the actors measure for /metrics: one request in one-token steps through the sim split, with a
// recall check at every step, against the engine's forward pass called directly with its stats on (the same tokens,
// the same predictors): neurons computed per layer, candidates, recall, and the bytes of weights read
// from host and device memory, which one-token steps make exact.
TEST(Pipeline, LiveStatsCountWhatTheStepsDid) {
  auto m = model::load(split_file());
  const auto& hp = m->hp();
  const auto hot = third_hot(*m);
  const auto opened = open_model(m, ffn_mode::sparse, 1, &hot);
  const auto& ctx = opened.ctx;
  pipeline_options o = options_for(opened);
  o.recall_every = 1;
  pipeline p(ctx, o);
  generation_request r = three_requests(hp.n_vocab)[0];
  r.sampling.temperature = 0;
  r.prompt.resize(1);  // (a prompt alone runs as one step)
  r.n_predict = 8;
  const int64_t id = p.submit(r);
  auto got = drain(p, 1)[id];
  const auto v = p.stats()->read();

  inference_context ref(m, 64, 2);
  ref.set_mode(ffn_mode::sparse);
  ref.enable_stats(true);
  int64_t pos = 0;
  for (token_id t : r.prompt) ref.forward(t, pos++);
  for (size_t k = 0; k + 1 < got.tokens.size(); ++k) ref.forward(got.tokens[k], pos++);  // the last token was sampled, never run
  const int64_t tokens = pos;
  ASSERT_EQ(v.tokens, tokens);
  ASSERT_EQ(v.steps, tokens);

  const auto& costs = p.stats()->costs();
  uint64_t bytes = 0, device_bytes = 0, device_down = 0, slack = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    SCOPED_TRACE(l);
    const auto& L = v.layers[static_cast<size_t>(l)];
    const auto& want = ref.stats()[static_cast<size_t>(l)];
    EXPECT_EQ(L.candidates, tokens * hp.n_ff);
    EXPECT_EQ(L.computed, want.computed);
    EXPECT_GT(L.hot, L.computed / 5);  // every third neuron is hot
    EXPECT_LT(L.hot, L.computed / 2);
    EXPECT_NEAR(static_cast<double>(L.truly_active), static_cast<double>(want.truly_active), 0.01 * static_cast<double>(want.truly_active) + 2);
    EXPECT_NEAR(static_cast<double>(L.found) / static_cast<double>(L.truly_active),
                static_cast<double>(want.active_computed) / static_cast<double>(want.truly_active), 0.01);
    for (step_part st : {step_part::attention, step_part::predict, step_part::hot_ffn, step_part::cold_ffn}) EXPECT_GT(L.seconds[static_cast<size_t>(st)], 0) << step_part_name(st);
    EXPECT_EQ(L.seconds[static_cast<size_t>(step_part::ffn)], 0);
    // One token a step: the rows read are the gate and up rows of the neurons it chose and the down
    // rows of those that fired (the reference's computed and truly active ones; a value on the
    // rounding edge of zero may fall the other way in one of the two, hence the slack below).
    const uint64_t down = costs.down_row[static_cast<size_t>(l)], in_rows = costs.neuron[static_cast<size_t>(l)] - down;
    bytes += static_cast<uint64_t>(tokens) * costs.layer_fixed[static_cast<size_t>(l)] + static_cast<uint64_t>(L.computed) * in_rows +
             static_cast<uint64_t>(want.active_computed) * down;
    device_bytes += static_cast<uint64_t>(L.hot) * in_rows;  // and the down rows of the hot ones that fired
    device_down += static_cast<uint64_t>(L.hot) * down;
    slack += 2 * down;
  }
  bytes += static_cast<uint64_t>(tokens) * (costs.output + costs.embedding_row);
  EXPECT_GT(v.layers.back().seconds[static_cast<size_t>(step_part::output)], 0);
  EXPECT_NEAR(static_cast<double>(v.host_bytes + v.device_bytes), static_cast<double>(bytes), static_cast<double>(slack));
  EXPECT_GT(v.device_bytes, device_bytes);
  EXPECT_LT(v.device_bytes, device_bytes + device_down);  // not every hot neuron fired
  EXPECT_NEAR(v.recent_bytes_per_token, static_cast<double>(v.host_bytes + v.device_bytes) / static_cast<double>(tokens), 1.0);
  EXPECT_GT(v.recent_host_bytes_per_second, 0);
}

// A long prompt arriving while another sequence decodes is fed in chunks: the running stream keeps
// producing tokens meanwhile.
TEST(Pipeline, LongPromptDoesNotStallRunningStreams) {
  auto m = model::load(test::make_model("pl_dense", test::small_options(2, 2)));
  auto ctx = std::make_shared<inference_context>(m, 128, 2, 2);
  pipeline_options o;
  o.prefill_chunk = 4;
  pipeline p(ctx, o);
  generation_request a;
  a.prompt = {1, 20, 30};
  a.n_predict = 40;
  a.ignore_eos = true;
  a.sampling.temperature = 0;
  const int64_t ida = p.submit(a);
  // Wait for a's first token, then send b with a 48-token prompt.
  auto first = p.next(std::chrono::seconds(60));
  ASSERT_TRUE(first && std::holds_alternative<token_event>(*first));
  generation_request b;
  for (int i = 0; i < 48; ++i) b.prompt.push_back(static_cast<token_id>(3 + i));
  b.n_predict = 2;
  b.ignore_eos = true;
  const int64_t idb = p.submit(b);
  int64_t events = 0;
  auto got = drain(p, 2, &events);
  ASSERT_FALSE(got[idb].order.empty());
  const int64_t b_first = got[idb].order.front();
  int64_t a_before = 0;
  for (int64_t e : got[ida].order) a_before += e < b_first;
  // 48 prompt tokens at 4 a step: a decodes during those 12 steps.
  EXPECT_GE(a_before, 10) << "tokens of the running stream before the long prompt's first token";
  EXPECT_EQ(got[ida].tokens.size() + 1, 40u);  // +1: the first token, read above
}

TEST(Pipeline, BadRequestsEndAloneWithAnError) {
  auto m = model::load(test::make_model("pl_dense", test::small_options(2, 2)));
  auto ctx = std::make_shared<inference_context>(m, 32, 2, 2);
  pipeline p(ctx, {});
  generation_request empty, unknown, too_long, good;
  unknown.prompt = {1, 5, 100000};
  too_long.prompt.assign(33, 5);
  good.prompt = {1, 7, 9};
  good.n_predict = 4;
  good.sampling.temperature = 0;
  good.ignore_eos = true;
  const int64_t ids[] = {p.submit(empty), p.submit(unknown), p.submit(too_long), p.submit(good)};
  auto got = drain(p, 4);
  EXPECT_EQ(got[ids[0]].done.finish, "error");
  EXPECT_NE(got[ids[0]].done.error.find("empty"), std::string::npos);
  EXPECT_NE(got[ids[1]].done.error.find("100000"), std::string::npos);
  EXPECT_NE(got[ids[2]].done.error.find("33 tokens"), std::string::npos);
  EXPECT_EQ(got[ids[3]].done.finish, "length");
  EXPECT_EQ(got[ids[3]].tokens, reference(m, ffn_mode::dense, good).tokens);
}

// Logits with a NaN are an error, never text: a file whose embedding row of token 5 is NaN fails the
// request whose prompt holds it, naming the NaN, while a request beside it in the same steps gives the
// reference's tokens.
TEST(Pipeline, NanLogitsFailTheirRequestAlone) {
  auto o = test::small_options(2, 2);
  o.type = tensor_type::f32;
  test::gguf_edit e;
  e.tensor = [](std::string& n, tensor_type&, std::vector<int64_t>& ne, std::vector<uint8_t>& bytes) {
    if (n == "token_embd.weight") std::fill_n(reinterpret_cast<float*>(bytes.data()) + 5 * ne[0], ne[0], NAN);
    return true;
  };
  auto m = model::load(test::edited_copy(test::make_model("pl_nan_base", o), "pl_nan", e));
  auto ctx = std::make_shared<inference_context>(m, 32, 2, 2);
  pipeline p(ctx, {});
  generation_request bad, good;
  bad.prompt = {1, 5, 9};
  good.prompt = {1, 7, 9};
  for (auto* r : {&bad, &good}) r->n_predict = 4, r->sampling.temperature = 0, r->ignore_eos = true;
  const int64_t ids[] = {p.submit(bad), p.submit(good)};
  auto got = drain(p, 2);
  EXPECT_EQ(got[ids[0]].done.finish, "error");
  EXPECT_NE(got[ids[0]].done.error.find("logit of nan"), std::string::npos) << got[ids[0]].done.error;
  EXPECT_TRUE(got[ids[0]].tokens.empty());
  EXPECT_EQ(got[ids[1]].done.finish, "length") << got[ids[1]].done.error;
  EXPECT_EQ(got[ids[1]].tokens, reference(m, ffn_mode::dense, good).tokens);
}

TEST(Pipeline, CancelledRequestLeavesAtAStepBoundary) {
  auto m = model::load(test::make_model("pl_dense", test::small_options(2, 2)));
  auto ctx = std::make_shared<inference_context>(m, 128, 2, 2);
  pipeline p(ctx, {});
  generation_request r;
  r.prompt = {1, 7, 9};
  r.n_predict = 100;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  const int64_t a = p.submit(r), b = p.submit(r);
  int a_tokens = 0;
  while (a_tokens < 3) {
    auto ev = p.next(std::chrono::seconds(60));
    ASSERT_TRUE(ev);
    if (auto* t = std::get_if<token_event>(&*ev)) a_tokens += t->request == a;
  }
  p.cancel(a);
  auto got = drain(p, 2);
  EXPECT_EQ(got[a].done.finish, "cancelled");
  EXPECT_LT(got[a].done.generated_tokens, 100);
  EXPECT_EQ(got[b].done.finish, "length");
  EXPECT_EQ(got[b].done.generated_tokens, 100);
}

// A fault in the cold share whenever request B is in the step: the supervisor restarts the compute
// actors, retries the step's sequences one at a time, and only B gets an error; A and C give the
// reference's tokens. A fault that happens once costs a restart and nothing else. With a hot device
// the fault is in the cold pool actor; without one, in the hot executor that runs the chain itself.
TEST(Pipeline, FaultyExecutorIsRestartedAndOnlyItsSequenceFails) {
  auto m = model::load(split_file());
  const auto hot = third_hot(*m);
  for (auto [persistent, with_device] : {std::pair{true, true}, std::pair{false, true}, std::pair{true, false}, std::pair{false, false}}) {
    SCOPED_TRACE(persistent ? "persistent fault" : "one fault");
    SCOPED_TRACE(with_device ? "hot device" : "no hot device");
    const auto opened = open_model(m, ffn_mode::sparse, 3, with_device ? &hot : nullptr);
    const auto& ctx = opened.ctx;
    pipeline_options o = options_for(opened);
    auto faults = std::make_shared<std::atomic<int>>(0);
    const int64_t victim = 1;  // the second request submitted
    o.fault = [faults, persistent, victim](step_part s, int64_t layer, const std::vector<int64_t>& requests) {
      if (s != step_part::cold_ffn || layer != 1 || std::find(requests.begin(), requests.end(), victim) == requests.end()) return;
      if (!persistent && faults->load() > 0) return;
      ++*faults;
      throw std::runtime_error("injected fault");
    };
    pipeline p(ctx, o);
    auto rs = three_requests(m->hp().n_vocab);
    std::vector<int64_t> ids;
    for (auto& r : rs) {
      r.all_logits = false;
      ids.push_back(p.submit(r));
    }
    ASSERT_EQ(ids[1], victim);
    auto got = drain(p, 3);
    for (size_t k = 0; k < 3; ++k) {
      SCOPED_TRACE(k);
      if (persistent && k == 1) {
        EXPECT_EQ(got[ids[k]].done.finish, "error");
        EXPECT_NE(got[ids[k]].done.error.find("injected fault"), std::string::npos) << got[ids[k]].done.error;
        continue;
      }
      EXPECT_EQ(got[ids[k]].tokens, reference(m, ffn_mode::sparse, rs[k]).tokens);
      EXPECT_NE(got[ids[k]].done.finish, "error") << got[ids[k]].done.error;
    }
    auto t = p.totals();
    EXPECT_EQ(t.restarts, faults->load());
    EXPECT_EQ(t.failed_steps, faults->load());
    EXPECT_GE(faults->load(), persistent ? 2 : 1);
    // The pipeline still serves.
    generation_request again = rs[0];
    const int64_t id = p.submit(again);
    auto after = drain(p, 1);
    EXPECT_EQ(after[id].tokens, reference(m, ffn_mode::sparse, again).tokens);
  }
}

// Through the actors, the hot share (the sim device's thread) and the cold share (the cold pool)
// run at the same time in every (step, layer) pair, with layer 0's attention, layer 1's predictor
// and the head on the same device, and the trace names the actors' threads.
TEST(Pipeline, HotAndColdOverlapInTheTrace) {
  auto m = busy_sparse_model();
  // Each side of a layer is held until the other has begun (test::overlap_latch): the generation
  // gets through only if the two run at the same time, however busy the machine is.
  const int pairs = 24 * 2;
  std::unique_ptr<trace_recorder> kept;
  test::overlap_latch latch;
  {
    device_residency held;
    held.attention = {1, 0}, held.predictor = {0, 1}, held.ffn = {0, 0};
    held.output = true;
    const on_device half{sim_device(64 << 20), every_other_hot(), held};
    auto opened = open_model(m, ffn_mode::sparse, 2, &half, 1, /*trace=*/true);
    latch.attach(*opened.trace);
    pipeline p(opened.ctx, options_for(opened));
    generation_request r;
    r.prompt = {1};
    r.n_predict = 24;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    p.submit(r);
    auto got = drain(p, 1);
    ASSERT_EQ(got.begin()->second.tokens.size(), 24u);
    kept = std::move(opened.trace);
  }
  std::set<std::string> names;
  std::map<std::pair<int64_t, int64_t>, int> hot, cold;
  for (const auto& e : kept->entries()) {
    names.insert(e.span.name);
    auto key = std::make_pair(e.span.step, e.span.layer);
    if (std::string(e.span.name) == "hot_ffn") ++hot[key];
    if (std::string(e.span.name) == "cold_ffn") ++cold[key];
  }
  EXPECT_EQ(hot.size(), static_cast<size_t>(pairs));
  EXPECT_EQ(cold.size(), static_cast<size_t>(pairs));
  EXPECT_EQ(names, (std::set<std::string>{"attention", "predict", "hot_ffn", "cold_ffn", "output", "sample"}));
  EXPECT_EQ(latch.misses(), 0) << "a side of a layer never began while the other waited: the two sides ran one after the other";
  EXPECT_EQ(latch.pairs_met(), static_cast<size_t>(pairs));
  trace_recorder& trace = *kept;
  if (const char* keep = std::getenv("HOTCOLD_TEST_TRACE")) trace.write(keep);
  auto j = nlohmann::json::parse(trace.chrome_json());
  std::set<std::string> threads;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M") threads.insert(e.at("args").at("name").get<std::string>());
  for (const char* t : {"hot_executor", "predictor", "cold_pool", "hotcold-sim"}) EXPECT_TRUE(threads.count(t)) << t << " in " << j.dump().substr(0, 300);
}

}  // namespace
}  // namespace hotcold::actors
