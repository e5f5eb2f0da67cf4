// The placement solver against brute force on small instances, and placement files.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "devices/device.hpp"
#include "engine/device_layers.hpp"
#include "engine/hot_cold_ffn.hpp"
#include "model/model.hpp"
#include "tests/model/tiny_models.hpp"
#include "model/placement_file.hpp"
#include "loader/auto_placement.hpp"
#include "loader/placement.hpp"
#include "loader/profile.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

uint64_t brute_force(const loader::placement_problem& p) {
  std::vector<std::pair<uint64_t, uint64_t>> items;  // bytes, value
  for (size_t l = 0; l < p.bytes.size(); ++l)
    for (uint64_t c : p.counts[l]) items.push_back({p.bytes[l], c});
  uint64_t best = 0;
  for (uint32_t mask = 0; mask < (1u << items.size()); ++mask) {
    uint64_t bytes = 0, value = 0;
    for (size_t i = 0; i < items.size(); ++i)
      if (mask >> i & 1) bytes += items[i].first, value += items[i].second;
    if (bytes <= p.budget) best = std::max(best, value);
  }
  return best;
}

// The plan tests' sparse file, made once a process under `name`: the small two-layer ReLU llama
// with random low-rank predictors (of so's types).
std::shared_ptr<const model> plan_sparse_model(const std::string& name, const tools::sparse_file_options& so = {}) {
  const auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  const auto dense = test::make_model("plan_dense", o);
  const auto path = (test::scratch_dir() / (name + ".gguf")).string();
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9), so);
  return model::load(path);
}

// Firing counts for every neuron of the model, cycling over least .. least + 100.
std::vector<uint64_t> cycling_counts(const hparams& hp, uint64_t least = 0) {
  std::vector<uint64_t> counts(static_cast<size_t>(hp.n_layer * hp.n_ff));
  for (size_t i = 0; i < counts.size(); ++i) counts[i] = least + (i * 7919) % 101;
  return counts;
}

TEST(Placement, MatchesBruteForce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    loader::placement_problem p;
    int layers = 1 + static_cast<int>(rng() % 3);
    bool equal = trial % 2 == 0;
    int size = 1 + static_cast<int>(rng() % 4);
    for (int l = 0; l < layers; ++l) {
      p.bytes.push_back(equal ? static_cast<uint64_t>(size) * 1000 : 1000 * (1 + rng() % 5));
      std::vector<uint64_t> c(1 + rng() % 5);
      for (auto& x : c) x = rng() % 20;
      p.counts.push_back(c);
    }
    p.budget = 1000 * (rng() % 16) + rng() % 1000;
    auto s = loader::solve_placement(p);
    ASSERT_TRUE(s.exact);
    ASSERT_LE(s.bytes, p.budget);
    uint64_t value = 0;
    for (size_t l = 0; l < p.bytes.size(); ++l)
      for (int32_t i : s.hot[l]) value += p.counts[l][static_cast<size_t>(i)];
    ASSERT_EQ(value, s.value);
    ASSERT_EQ(s.value, brute_force(p)) << "trial " << trial;
  }
}

TEST(Placement, LayersAreNumbersNotStrings) {
  // Layer 10 must stay layer 10 (PowerInfer sorted "blk.10" before "blk.2").
  loader::placement_problem p;
  for (int l = 0; l < 12; ++l) {
    p.bytes.push_back(100);
    p.counts.push_back({static_cast<uint64_t>(l == 10 ? 1000 : 1), 0});
  }
  p.budget = 100;
  auto s = loader::solve_placement(p);
  ASSERT_EQ(s.hot[10], std::vector<int32_t>{0});
  for (int l = 0; l < 12; ++l) {
    if (l != 10) {
      EXPECT_TRUE(s.hot[static_cast<size_t>(l)].empty());
    }
  }
}

TEST(Placement, FilesRoundTrip) {
  loader::placement_plan plan;
  plan.solution.hot = {{1, 5, 7}, {}, {0}};
  plan.solution.bytes = 12345;
  plan.budget = 1 << 20;
  plan.ctx = 256;
  const auto model_path = (test::scratch_dir() / "m.gguf").string();
  std::ofstream(model_path) << "not a model, but a file with a size and a time";
  auto path = (test::scratch_dir() / "m.gguf.generated.gpuidx").string();
  loader::write_placement(plan, path, 8, model_path);
  auto f = gguf::file::open(path);
  EXPECT_EQ(f.kind(), gguf::file_kind::powerinfer);
  EXPECT_EQ(f.find("split.vram_capacity")->as_u64(), 12345u);
  auto back = read_placement_file(path, 3, 8);
  EXPECT_EQ(back.hot, plan.solution.hot);
  EXPECT_EQ(back.vram_capacity, 12345u);
  // What it was made for comes back, and tells another budget, context or file apart.
  EXPECT_TRUE(back.origin.known);
  EXPECT_EQ(back.origin, placement_origin_of(model_path, 1 << 20, 256));
  EXPECT_NE(back.origin, placement_origin_of(model_path, 2 << 20, 256));
  EXPECT_NE(back.origin, placement_origin_of(model_path, 1 << 20, 512));
  std::ofstream(model_path, std::ios::app) << " changed";
  EXPECT_NE(back.origin, placement_origin_of(model_path, 1 << 20, 256));
  // Without hotcold's keys (PowerInfer's files), the origin is unknown.
  write_placement_file({1, plan.solution.hot, {}}, path, 8);
  EXPECT_FALSE(read_placement_file(path, 3, 8).origin.known);
  EXPECT_THROW(read_placement_file(path, 3, 9), std::runtime_error);
}

TEST(Placement, ModelsReadTheirPlacementFile) {
  auto path = test::make_model("placed", test::small_options(2));
  EXPECT_EQ(model::load(path)->placement(), nullptr);
  placement_data p{640, {{3, 9}, {}}, {}};
  write_placement_file(p, placement_path(path), 128);
  auto m = model::load(path);
  ASSERT_NE(m->placement(), nullptr);
  EXPECT_EQ(m->placement()->hot, p.hot);
  write_placement_file(p, placement_path(path), 64);  // wrong neuron count
  EXPECT_THROW(model::load(path), model_error);
  std::filesystem::remove(placement_path(path));
}

std::shared_ptr<devices::device> sim_device(uint64_t budget) {
  devices::device_options o;
  o.kind = "sim";
  o.budget = budget;
  return devices::make_device(o);
}

// A dense file (no predictors) is offloaded whole layers at a time, front to back — attention with its
// KV cache and FFN norm, then the layer's FFN — and then the head; --n-gpu-layers forces the count
// (an error when it does not fit or passes the model's layers). The runtime allocates the plan.
TEST(Placement, DenseFilesOffloadWholeLayers) {
  auto o = test::small_options(4, 2);
  auto m = model::load(test::make_model("plan_dense_layers", o));
  const auto& hp = m->hp();
  ASSERT_FALSE(m->has_predictors());
  const auto& W = m->weights();
  loader::plan_options po;
  po.ctx = 32;
  const uint64_t kv = static_cast<uint64_t>(po.ctx * hp.n_embd_kv() * 2 * 2);
  auto layer = [&](size_t l) {
    const auto& w = W.layers[l];
    return w.wq.bytes() + w.wk.bytes() + w.wv.bytes() + w.wo.bytes() + w.attn_norm.bytes() + w.ffn_norm.bytes() + kv + w.ffn_gate.bytes() +
           w.ffn_up.bytes() + w.ffn_down.bytes();
  };
  const uint64_t compute = loader::compute_buffer_bytes(*m, po.ctx);
  int seen_partial = 0;
  for (int64_t want = 0; want <= hp.n_layer; ++want) {
    SCOPED_TRACE(want);
    uint64_t bytes = compute;
    for (int64_t l = 0; l < want; ++l) bytes += layer(static_cast<size_t>(l));
    // Room for `want` layers and not one more.
    const loader::placement_plan p = loader::plan_device(*m, bytes + (want < hp.n_layer ? layer(static_cast<size_t>(want)) - 1 : 0), po);
    EXPECT_TRUE(p.whole_layers);
    for (int64_t l = 0; l < hp.n_layer; ++l) {
      EXPECT_EQ(p.layers[static_cast<size_t>(l)].attention, l < want);
      EXPECT_EQ(p.layers[static_cast<size_t>(l)].ffn, l < want);
      EXPECT_FALSE(p.layers[static_cast<size_t>(l)].predictor);
    }
    seen_partial += want > 0 && want < hp.n_layer;
    auto sim = sim_device(p.budget);
    device_layers held(m, p.residency(), sim, tensor_type::f16);
    EXPECT_EQ(sim->used(), p.bytes());
  }
  EXPECT_GT(seen_partial, 0);
  // Forced counts.
  po.n_gpu_layers = 1;
  const auto one = loader::plan_device(*m, 1 << 30, po);
  EXPECT_TRUE(one.layers[0].ffn);
  EXPECT_FALSE(one.layers[1].attention);
  po.n_gpu_layers = hp.n_layer + 1;
  EXPECT_THROW(loader::plan_device(*m, 1 << 30, po), std::invalid_argument);
  po.n_gpu_layers = 2;
  EXPECT_THROW(loader::plan_device(*m, compute + layer(0), po), std::invalid_argument);  // the second does not fit
}

// A prompt crosses a device's whole layers in the chunks the plan's compute buffers hold: up to 128
// tokens, at most 1/16 of the layers' bytes — here (4 layers of 256 x 2048, F16) 20-odd tokens where a
// decode step's buffers (vocabulary-sized logits, the scores over the context) would take 10. Counted
// on sim computing as a GPU does: a wait a layer a chunk, then the head's.
TEST(Placement, ComputeBuffersHoldAPromptChunk) {
  auto o = test::small_options(4, 4);
  o.n_embd = 256, o.n_ff = 2048;
  auto m = model::load(test::make_model("plan_prompt_chunk", o));
  const auto& hp = m->hp();
  const int64_t tokens = loader::compute_buffer_prompt_tokens(*m);
  const uint64_t per_token = devices::attention_scratch_per_token(hp.n_embd, hp.n_embd_q(), hp.n_embd_kv(), hp.n_rot, hp.n_ff) +
                             devices::dense_ffn_scratch_per_token(hp.n_embd, hp.n_ff) + 8 * static_cast<uint64_t>(hp.n_embd);
  loader::plan_options po;
  po.ctx = 128;
  const uint64_t step_only = 2 * 4 * static_cast<uint64_t>(4 * hp.n_embd + 2 * hp.n_embd_q() + 2 * hp.n_embd_kv() + hp.n_head * po.ctx + 3 * hp.n_ff + hp.n_vocab);
  const int64_t step_tokens = static_cast<int64_t>(step_only / per_token);
  EXPECT_GE(tokens, 20);
  EXPECT_LT(step_tokens, tokens / 2);
  const loader::placement_plan p = loader::plan_device(*m, 1ull << 30, po);
  ASSERT_TRUE(p.whole_layers);
  EXPECT_GE(p.fixed.compute, static_cast<uint64_t>(tokens) * per_token);
  for (const auto& l : p.layers) ASSERT_TRUE(l.ffn);
  devices::device_options dopt;
  dopt.kind = "sim", dopt.budget = 1ull << 30, dopt.sim_kernels = true;
  auto sim = devices::make_device(dopt);
  inference_context ctx(m, po.ctx, 2, 1);
  ctx.set_device_layers(std::make_shared<const device_layers>(m, p.residency(), sim, tensor_type::f16));
  std::vector<token_id> prompt(static_cast<size_t>(2 * tokens + tokens / 2));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<token_id>(100 + i);
  const auto before = sim->traffic();
  ctx.forward_batch(prompt, 0);
  // At most 3 chunks a layer (the device's allocator may round the buffers up: fewer), and the head;
  // a decode step's buffers alone would take 5 or more.
  const uint64_t syncs = (sim->traffic() - before).syncs;
  EXPECT_LE(syncs, static_cast<uint64_t>(hp.n_layer * 3 + 1));
  EXPECT_LT(syncs, static_cast<uint64_t>(hp.n_layer * ((static_cast<int64_t>(prompt.size()) + step_tokens - 1) / step_tokens) + 1));
}

// The plan fills the device in PowerInfer's order with exact bytes: for every budget from the compute
// buffers alone to all of it, each kind (attention with its KV cache and FFN norm, predictors, the
// head) is a prefix of the layers, and where a kind stops, its next layer did not fit in what the kinds
// before it had left; the hot rows take at most what the head left; the bytes per layer are the
// tensors' own (KV: F16 K and V at the context); nothing passes the budget; and the runtime's
// allocation on a sim device of that budget is the plan, byte for byte.
TEST(Placement, PlanFillsTheDeviceInOrder) {
  auto m = plan_sparse_model("plan_sparse");
  const auto& hp = m->hp();
  const auto& W = m->weights();
  const auto counts = cycling_counts(hp);
  const int64_t ctx = 64;
  const uint64_t kv = static_cast<uint64_t>(ctx * hp.n_embd_kv() * 2 * 2);
  EXPECT_THROW(loader::plan_placement(*m, counts, 1.0 / (1 << 30), ctx), std::invalid_argument);  // one byte: not even the buffers
  // Each kind's bytes in layer l, as the tensors say.
  auto attention = [&](size_t l) { const auto& w = W.layers[l]; return w.wq.bytes() + w.wk.bytes() + w.wv.bytes() + w.wo.bytes() + w.attn_norm.bytes() + kv; };
  auto predictor = [&](size_t l) { return W.layers[l].pred_fc1.bytes() + W.layers[l].pred_fc2.bytes(); };
  auto ffn_norm = [&](size_t l) { return W.layers[l].ffn_norm.bytes(); };
  const uint64_t head = W.output.bytes() + W.output_norm.bytes();
  int64_t last_attention = -1;
  bool saw_partial_attention = false, saw_hot = false, saw_stop = false;
  for (double kib = 4; kib < 4096; kib *= 1.25) {
    SCOPED_TRACE(kib);
    loader::placement_plan p;
    try {
      p = loader::plan_placement(*m, counts, kib / (1 << 20), ctx);
    } catch (const std::invalid_argument&) {
      continue;  // below the compute buffers
    }
    ASSERT_EQ(p.layers.size(), static_cast<size_t>(hp.n_layer));
    EXPECT_LE(p.bytes(), p.budget);
    uint64_t left = p.budget - p.fixed.compute;
    // One kind: a prefix of the layers, each with its own bytes, stopped only by a layer that did not fit.
    auto kind = [&](const char* name, bool loader::layer_placement::*on, uint64_t loader::layer_placement::*bytes, auto field, auto unit) {
      SCOPED_TRACE(name);
      size_t l = 0;
      for (; l < p.layers.size() && p.layers[l].*on; ++l) {
        EXPECT_EQ(p.layers[l].*bytes, field(l));
        left -= unit(l);
      }
      if (l < p.layers.size()) {
        EXPECT_GT(unit(l), left) << "layer " << l << " fitted but was left out";
        saw_stop = true;
      }
      for (; l < p.layers.size(); ++l) EXPECT_FALSE(p.layers[l].*on) << "not a prefix: layer " << l;
    };
    // A layer's attention goes with its KV cache and its FFN norm (applied where attention leaves the
    // residual stream).
    kind("attention", &loader::layer_placement::attention, &loader::layer_placement::attention_bytes, [&](size_t l) { return attention(l) - kv; },
         [&](size_t l) { return attention(l) + ffn_norm(l); });
    for (size_t l = 0; l < p.layers.size(); ++l) {
      EXPECT_EQ(p.layers[l].kv_bytes, p.layers[l].attention ? kv : 0);
      EXPECT_EQ(p.layers[l].ffn_norm, p.layers[l].attention);
      EXPECT_EQ(p.layers[l].ffn_norm_bytes, p.layers[l].attention ? ffn_norm(l) : 0);
    }
    const int64_t n_attention = std::count_if(p.layers.begin(), p.layers.end(), [](const auto& pl) { return pl.attention; });
    kind("predictors", &loader::layer_placement::predictor, &loader::layer_placement::predictor_bytes, predictor, predictor);
    if (p.output) left -= head;
    else EXPECT_GT(head, left) << "the head fitted but was left out";
    EXPECT_LE(p.solution.bytes, left) << "hot rows beyond what the head left";
    uint64_t sum = p.fixed.compute + (p.output ? head : 0);
    for (size_t l = 0; l < p.layers.size(); ++l) {
      sum += p.layers[l].bytes();
      EXPECT_EQ(p.layers[l].hot_neurons, static_cast<int64_t>(p.solution.hot[l].size()));
    }
    EXPECT_EQ(sum, p.bytes());
    EXPECT_GE(n_attention, last_attention) << "more budget, fewer layers' attention";
    last_attention = n_attention;
    saw_partial_attention |= n_attention > 0 && n_attention < hp.n_layer;
    saw_hot |= p.solution.bytes > 0;
    EXPECT_NE(p.table().find("| total |"), std::string::npos);
    // The runtime allocates exactly the plan on a device of the plan's budget (sim's is exact):
    // compute buffers, attention with its KV cache, predictors, the head, then the hot rows.
    auto sim = sim_device(p.budget);
    device_layers held(m, p.residency(), sim, tensor_type::f16);
    hot_rows rows(m, placement_data{p.solution.bytes, p.solution.hot, {}}, sim);
    EXPECT_EQ(sim->used(), p.bytes()) << p.table();
    EXPECT_EQ(held.bytes() + rows.bytes(), p.bytes());
  }
  EXPECT_TRUE(saw_partial_attention) << "no budget held only some layers' attention: the sweep tests nothing";
  EXPECT_TRUE(saw_hot);
  EXPECT_TRUE(saw_stop);
}

// A stage's plan (a worker's layers, docs/distributed.md) holds its layers alone: nothing of the
// others' (attention, predictors, hot neurons), no head, and the hot neurons of its layers are the
// ones the whole model's plan would weigh for them (the most fired first, within the budget).
// place's -ctk/-ctv: the plan leaves room for the KV cache in its types (F32 twice F16's bytes, Q8_0
// 34 bytes a block of 32), so a smaller cache leaves more of the budget to hot neurons.
TEST(Placement, PlanCountsTheCacheInItsTypes) {
  auto m = plan_sparse_model("plan_sparse");
  const auto& hp = m->hp();
  const auto counts = cycling_counts(hp);
  const int64_t ctx = 64;
  for (const kv_types t : {kv_types{}, kv_types{tensor_type::f32}, kv_types{tensor_type::f32, tensor_type::f16}}) {
    const auto p = loader::plan_placement(*m, counts, 1.0, ctx, t);
    const uint64_t want = static_cast<uint64_t>(ctx) * (values_bytes(t.k, hp.n_embd_kv()) + values_bytes(t.v, hp.n_embd_kv()));
    for (const auto& l : p.layers) EXPECT_EQ(l.kv_bytes, l.attention ? want : 0) << kv_types_name(t);
  }
  const auto f16 = loader::plan_placement(*m, counts, 1.0, ctx), f32 = loader::plan_placement(*m, counts, 1.0, ctx, kv_types{tensor_type::f32});
  EXPECT_GT(f32.fixed.kv_cache, f16.fixed.kv_cache);
}

TEST(Placement, AStagesPlanHoldsItsLayersAlone) {
  auto m = plan_sparse_model("plan_sparse");
  const auto& hp = m->hp();
  ASSERT_GE(hp.n_layer, 2);
  const auto counts = cycling_counts(hp, 1);  // (every neuron fired: each has a value to the plan)
  loader::plan_options po;
  po.ctx = 64;
  const auto whole = loader::plan_placement(*m, counts, uint64_t{64} << 20, po);
  EXPECT_TRUE(whole.output);
  po.first_layer = 1, po.last_layer = hp.n_layer;  // every layer but the first
  const auto stage = loader::plan_placement(*m, counts, uint64_t{64} << 20, po);
  EXPECT_FALSE(stage.output);
  const auto& first = stage.layers[0];
  EXPECT_FALSE(first.attention || first.predictor || first.ffn_norm);
  EXPECT_EQ(first.hot_neurons, 0);
  EXPECT_EQ(first.bytes(), 0u);
  for (int64_t l = 1; l < hp.n_layer; ++l) {  // (a budget that holds everything: each held layer all of it, as in the whole plan)
    const auto& pl = stage.layers[static_cast<size_t>(l)];
    EXPECT_TRUE(pl.attention && pl.predictor);
    EXPECT_EQ(pl.hot_neurons, hp.n_ff);
    EXPECT_EQ(pl.bytes(), whole.layers[static_cast<size_t>(l)].bytes());
  }
  EXPECT_LT(stage.bytes(), whole.bytes());
  // A budget with room for part of the held layers' neurons: the most fired of those layers only.
  const uint64_t tight = stage.bytes() - stage.solution.bytes / 2;
  const auto part = loader::plan_placement(*m, counts, tight, po);
  EXPECT_TRUE(part.solution.hot[0].empty());
  int64_t hot = 0;
  for (int64_t l = 1; l < hp.n_layer; ++l) hot += part.layers[static_cast<size_t>(l)].hot_neurons;
  EXPECT_GT(hot, 0);
  EXPECT_LT(hot, (hp.n_layer - 1) * hp.n_ff);
  for (int64_t l = 1; l < hp.n_layer; ++l) {  // each chosen neuron fired at least as often as each left out of its layer
    const auto& chosen = part.solution.hot[static_cast<size_t>(l)];
    uint64_t least_in = UINT64_MAX, most_out = 0;
    for (int64_t i = 0; i < hp.n_ff; ++i) {
      const uint64_t c = counts[static_cast<size_t>(l * hp.n_ff + i)];
      if (std::binary_search(chosen.begin(), chosen.end(), static_cast<int32_t>(i))) least_in = std::min(least_in, c);
      else most_out = std::max(most_out, c);
    }
    if (!chosen.empty() && static_cast<int64_t>(chosen.size()) < hp.n_ff) {
      EXPECT_GE(least_in, most_out) << "layer " << l;
    }
  }
}

// A GPU's allocator hands out granules (devices::gpu_allocation: 512 bytes, 2 MiB from 1 MiB on): the
// plan counts each buffer the runtime makes so, and the runtime on a device that charges granules (sim
// with kernels) allocates exactly the plan, within the budget, at every budget of a sweep; a plan that
// summed the tensors' own bytes overruns such a device at a budget it claimed to fit. Pinned host
// memory is reported beside the table.
TEST(Placement, PlanCountsAGpusAllocationGranules) {
  tools::sparse_file_options so;
  so.predictor_type = tensor_type::f16;  // (what a GPU's predictor reads)
  auto m = plan_sparse_model("plan_sparse_f16_predictors", so);
  const auto& hp = m->hp();
  const auto counts = cycling_counts(hp);
  auto gpu_like = [](uint64_t budget) {
    devices::device_options d;
    d.kind = "sim", d.budget = budget, d.sim_kernels = true;
    return devices::make_device(d);
  };
  loader::plan_options granules;
  granules.ctx = 64, granules.alloc = devices::gpu_allocation, granules.output_norm = false;
  loader::plan_options exact = granules;
  exact.alloc = {};
  bool overran = false, hot_seen = false;
  for (double kib = 64; kib < 8192; kib *= 1.3) {
    SCOPED_TRACE(kib);
    const auto budget = static_cast<uint64_t>(kib * 1024);
    loader::placement_plan p, q;
    try {
      p = loader::plan_placement(*m, counts, budget, granules);
      q = loader::plan_placement(*m, counts, budget, exact);
    } catch (const std::invalid_argument&) {
      continue;  // below the compute buffers
    }
    EXPECT_LE(p.bytes(), budget);
    auto dev = gpu_like(budget);
    device_layers held(m, p.residency(), dev, tensor_type::f16);
    hot_rows rows(m, placement_data{p.solution.bytes, p.solution.hot, {}}, dev);
    EXPECT_EQ(dev->used(), p.bytes()) << p.table();
    hot_seen |= p.solution.bytes > 0;
    // The tensors' own bytes: on the granule device, that plan does not fit where it said it did.
    try {
      auto other = gpu_like(budget);
      device_layers q_held(m, q.residency(), other, tensor_type::f16);
      hot_rows q_rows(m, placement_data{q.solution.bytes, q.solution.hot, {}}, other);
    } catch (const devices::out_of_device_memory&) {
      overran = true;
    }
  }
  EXPECT_TRUE(hot_seen);
  EXPECT_TRUE(overran) << "a plan counting bytes, not granules, always fitted: the test shows nothing";
  granules.pinned_bytes = 3u << 20;
  EXPECT_NE(loader::plan_device(*m, 64 << 20, granules).table().find("host memory pinned for the device's copies (outside the budget): 3.00 MiB"),
            std::string::npos);
}

// A GPU's FFN-rows jobs reserve step buffers (devices::device::reserve_bytes): the plan takes them
// first (for a sparse file, whose hot rows use them; a dense file has none), says so in its table,
// and a placement made without them whose hot rows no longer fit what is left is planned again.
TEST(Placement, PlanCountsTheDevicesStepBuffers) {
  const auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  auto dense_path = test::make_model("plan_step_dense", o);
  const auto dir = test::scratch_dir() / ("plan_step_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "sparse.gguf").string();
  tools::write_sparse_model(dense_path, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9));
  auto m = model::load(path);
  loader::plan_options po;
  po.ctx = 64;
  const uint64_t budget = 64 << 20;  // everything fits
  const auto without = loader::plan_device(*m, budget, po);
  po.step_bytes = 123456;
  const auto with = loader::plan_device(*m, budget, po);
  EXPECT_EQ(without.fixed.step, 0u);
  EXPECT_EQ(with.fixed.step, 123456u);
  EXPECT_EQ(with.left + 123456u, without.left);
  EXPECT_EQ(with.bytes(), without.bytes() + 123456u);
  EXPECT_NE(with.table().find("0.12 MiB of FFN-rows step buffers"), std::string::npos) << with.table();
  EXPECT_EQ(without.table().find("step buffers"), std::string::npos);
  EXPECT_EQ(loader::plan_device(*model::load(dense_path), budget, po).fixed.step, 0u);

  // A placement made for a budget whose plan left room for every hot row, then a device whose step
  // buffers take most of that room: planned again, and the reason says why.
  std::vector<uint64_t> counts(static_cast<size_t>(o.n_layer * o.n_ff), 1);
  po.step_bytes = 0;
  const auto fixed = loader::plan_device(*m, budget, po);
  const uint64_t tight = budget - fixed.left + 200 * 1024;  // 200 KiB for hot rows
  const auto first = loader::plan_placement(*m, counts, tight, po);
  ASSERT_GT(first.solution.bytes, 100u * 1024);
  loader::write_placement(first, placement_path(path), o.n_ff, path);
  auto again = model::load(path);
  ASSERT_TRUE(again->placement());
  loader::auto_placement_options ao;
  ao.cache_dir = (dir / "cache").string();
  ao.firing_counts = [&](const std::string& model_path, const model& mm) {
    loader::short_profile_options so;
    so.cache_dir = ao.cache_dir;
    so.tokens = 64;
    so.threads = 1;
    return loader::firing_counts_for(model_path, mm, so);
  };
  const auto same = loader::ensure_placement(path, *again, tight, po, ao);
  EXPECT_FALSE(same.made) << same.reason;
  po.step_bytes = 150 * 1024;
  const auto replanned = loader::ensure_placement(path, *again, tight, po, ao);
  EXPECT_TRUE(replanned.made);
  EXPECT_NE(replanned.reason.find("more than the"), std::string::npos) << replanned.reason;
  EXPECT_LE(replanned.plan.bytes(), tight);
  EXPECT_LT(replanned.plan.solution.bytes, first.solution.bytes);
}

}  // namespace
}  // namespace hotcold
