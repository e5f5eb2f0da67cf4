// hotcold plan's model (tools/planner): bytes per token counted as the runtime counts them, the plan
// the runtime would make, and predictions that move the way the hardware says they must.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/ram_tier.hpp"
#include "engine/read_costs.hpp"
#include "model/model.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/gen_model.hpp"
#include "tools/planner.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

std::shared_ptr<const model> planner_sparse_model(const load_options& lo = {}) {
  const auto o = test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16);
  auto dense = test::make_model("planner_dense", o);
  const auto path = (test::scratch_dir() / "planner_sparse.gguf").string();
  if (!std::filesystem::exists(path)) tools::write_sparse_model(dense, path, test::random_predictors(o.n_layer, o.n_embd, o.n_ff, 32, 0.0f, 9));
  return model::load(path, lo);
}

tools::planner_options options(const model& m, uint64_t budget) {
  tools::planner_options o;
  o.budget = budget;
  o.ctx = 64;
  o.cpu_gbs = 50, o.gpu_gbs = 1000, o.pcie_gbs = 32;
  const auto& hp = m.hp();
  // Neuron i of every layer fires on a token with probability (i % 10) / 40: some hot, most cold.
  o.tokens = 400;
  for (int64_t l = 0; l < hp.n_layer; ++l)
    for (int64_t i = 0; i < hp.n_ff; ++i) o.firing_counts.push_back(static_cast<uint64_t>(10 * (i % 10)));
  return o;
}

TEST(Planner, CountsBytesAsTheRuntimeDoes) {
  auto m = planner_sparse_model();
  const auto& hp = m->hp();
  auto o = options(*m, 16 << 20);
  const auto p = tools::predict_plan(*m, o);
  // The CPU alone: embedding row, each layer's fixed part, its KV cache at half the context, and the
  // rows of the neurons that fire (gate, up and down of each: read_costs::ffn_rows), and the head.
  const read_costs c(*m);
  double fired = 0;
  for (int64_t i = 0; i < hp.n_ff; ++i) fired += (10.0 * static_cast<double>(i % 10)) / 400.0;
  double want = static_cast<double>(c.embedding_row + c.output);
  for (size_t l = 0; l < c.layer_fixed.size(); ++l)
    want += static_cast<double>(c.layer_fixed[l]) + kv_read_per_token(hp, kv_types{}, 32) + fired * static_cast<double>(c.ffn_rows(l, 1, 1));
  EXPECT_NEAR(p.cpu_only_bytes, want, 1e-6 * want);
  EXPECT_NEAR(p.cpu_only_tokens_per_s, 50e9 / want, 1e-6 * p.cpu_only_tokens_per_s);
  // The hybrid moves bytes, it does not make or lose them: both sides add up to the CPU alone's.
  EXPECT_NEAR(p.host_bytes + p.device_bytes, p.cpu_only_bytes, 1e-6 * p.cpu_only_bytes);
  // Everything on the device (16 MiB holds the whole model here): the host reads an embedding row.
  EXPECT_NEAR(p.host_bytes, static_cast<double>(c.embedding_row), 1.0);
  EXPECT_EQ(p.plan.layers[0].attention, true);
  // A tiny model: the crossings' fixed cost is most of a token, so the GPU makes it slower.
  EXPECT_EQ(p.limited_by, "pcie");
  EXPECT_LT(p.hybrid_tokens_per_s, p.cpu_only_tokens_per_s);
  // Per layer: attention with its predictor, then the hot rows; and the head.
  EXPECT_EQ(p.crossings, 2.0 * static_cast<double>(hp.n_layer) + 1);
  // Their round trips as a GPU runs the runtime's jobs (what sim counts): a layer's attention job with
  // its predictor (Q, K, V, RoPE, attention, output; the sum and the predictor's four: 11 launches, 3
  // copies, 1 wait), its hot rows (3, 4, 1); the head (1, 2, 1); each at its cost.
  const double L = static_cast<double>(hp.n_layer);
  EXPECT_EQ(p.launches, 14 * L + 1);
  EXPECT_EQ(p.copies, 7 * L + 2);
  EXPECT_EQ(p.syncs, 2 * L + 1);
  EXPECT_NEAR(p.round_trip_seconds, (14 * L + 1) * 3e-6 + (7 * L + 2) * 3e-6 + (2 * L + 1) * 10e-6, 1e-12);

  // The FFN's rows at their own CPU rate (10 GB/s), the rest at the products' 50.
  auto slower = o;
  slower.cpu_ffn_gbs = 10;
  double ffn = 0;
  for (size_t l = 0; l < c.layer_fixed.size(); ++l) ffn += fired * static_cast<double>(c.ffn_rows(l, 1, 1));
  const auto q = tools::predict_plan(*m, slower);
  EXPECT_NEAR(q.cpu_only_bytes, want, 1e-6 * want);
  EXPECT_NEAR(1.0 / q.cpu_only_tokens_per_s, (want - ffn) / 50e9 + ffn / 10e9, 1e-9);
  // Predictors that choose twice the neurons that fire: gate and up rows of twice as many, down rows
  // of the same (a neuron's chance of being chosen, capped at 1: here none reaches it).
  auto choosy = o;
  choosy.chosen_per_token.assign(static_cast<size_t>(hp.n_layer), 2 * fired);
  const auto cp = tools::predict_plan(*m, choosy);
  double more = 0;
  for (size_t l = 0; l < c.layer_fixed.size(); ++l) more += fired * static_cast<double>(c.ffn_rows(l, 1, 0));
  EXPECT_NEAR(cp.cpu_only_bytes, want + more, 1e-6 * want);
  EXPECT_NEAR(cp.host_bytes + cp.device_bytes, cp.cpu_only_bytes, 1e-6 * cp.cpu_only_bytes);
}

// The CPU's rates measured on the file's own decoded tokens: each kind of work read something and
// took time, and a sparse FFN's rows are read no faster than a memory system allows.
TEST(Planner, MeasuresTheCpusRatesOnTheFilesOwnWork) {
  auto m = planner_sparse_model();
  const auto r = tools::measure_cpu_rates(m, 2);
  EXPECT_GE(r.passes, 5);
  EXPECT_GE(r.spread, 0.0);
  EXPECT_EQ(r.noisy, r.spread > tools::cpu_rates::noisy_spread);
  EXPECT_EQ(r.tokens, 16 * r.passes);
  ASSERT_EQ(r.chosen_per_token.size(), static_cast<size_t>(m->hp().n_layer));
  for (double n : r.chosen_per_token) {
    EXPECT_GT(n, 0.0);
    EXPECT_LE(n, static_cast<double>(m->hp().n_ff));
  }
  for (double g : {r.products_gbs, r.ffn_gbs}) {
    EXPECT_GT(g, 0.0);
    EXPECT_LT(g, 10000.0);
  }
  EXPECT_GT(r.ffn_bytes_per_token, 0.0);
  EXPECT_LT(r.ffn_bytes_per_token, static_cast<double>(read_costs(*m).ffn_dense[0]) * static_cast<double>(m->hp().n_layer));
}

TEST(Planner, MoreOfAnythingIsNeverSlower) {
  auto m = planner_sparse_model();
  const auto base = options(*m, 1 << 20);
  const auto p0 = tools::predict_plan(*m, base);
  EXPECT_LT(p0.device_bytes, p0.cpu_only_bytes);  // 1 MiB holds a part only
  auto more = base;
  more.budget = 4 << 20;
  const auto p1 = tools::predict_plan(*m, more);
  EXPECT_GE(p1.device_bytes, p0.device_bytes);
  EXPECT_GE(p1.hybrid_tokens_per_s, p0.hybrid_tokens_per_s);
  EXPECT_GE(p1.layer_offload_tokens_per_s, p0.layer_offload_tokens_per_s);
  auto faster_cpu = base;
  faster_cpu.cpu_gbs = 100;
  EXPECT_NEAR(tools::predict_plan(*m, faster_cpu).cpu_only_tokens_per_s, 2 * p0.cpu_only_tokens_per_s, 1e-6 * p0.cpu_only_tokens_per_s);
  auto no_crossing_cost = base;
  no_crossing_cost.crossing_us = 0;
  EXPECT_GT(tools::predict_plan(*m, no_crossing_cost).hybrid_tokens_per_s, p0.hybrid_tokens_per_s);
  auto free_launches = base;
  free_launches.launch_us = 0;
  EXPECT_GT(tools::predict_plan(*m, free_launches).hybrid_tokens_per_s, p0.hybrid_tokens_per_s);
}

TEST(Planner, NamedGpusAndBadOptions) {
  ASSERT_NE(tools::find_gpu("rtx4090"), nullptr);
  EXPECT_EQ(tools::find_gpu("RTX 4090")->bandwidth_gbs, 1008);
  EXPECT_EQ(tools::find_gpu("h200")->bandwidth_gbs, 4800);
  EXPECT_EQ(tools::find_gpu("TPU"), nullptr);
  auto m = planner_sparse_model();
  auto o = options(*m, 1 << 20);
  o.cpu_gbs = 0;
  EXPECT_THROW(tools::predict_plan(*m, o), std::invalid_argument);
  o = options(*m, 1 << 20);
  o.firing_counts.pop_back();
  EXPECT_THROW(tools::predict_plan(*m, o), std::invalid_argument);
}

// The disk tier on paper (plan --ram-budget): with only what must be held, every chosen neuron's rows
// are read a token (and the token's embedding row); with everything held, nothing, at the speed of
// the whole file in memory; a budget between reads less than the same pinned rows would without the
// window, and more memory never reads more. The token's time is the CPU alone's and the reads'.
TEST(Planner, TheDiskTierReadsWhatItsBudgetDoesNotHold) {
  load_options lo;
  lo.ffn_rows_from_disk = true;
  auto m = planner_sparse_model(lo);
  const auto& hp = m->hp();
  const auto o = options(*m, 1 << 20);
  const ram_tier_plan all = plan_ram_tier(*m, ~uint64_t{0} / 2);
  const read_costs c(*m);
  const double embedding = m->embeddings_from_disk() ? static_cast<double>(c.embedding_row) : 0.0;
  double every_chosen = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l)
    for (int64_t i = 0; i < hp.n_ff; ++i) every_chosen += static_cast<double>(i % 10) / 40.0 * static_cast<double>(all.neuron_bytes[static_cast<size_t>(l)]);
  const double in_memory = tools::predict_plan(*m, o).cpu_only_tokens_per_s;

  const auto least = tools::predict_disk_tier(*m, o, all.least_bytes, 2.0);
  EXPECT_EQ(least.pinned_rows, 0);
  EXPECT_EQ(least.window_rows, 0);
  EXPECT_NEAR(least.disk_bytes_per_token, every_chosen + embedding, 1e-9 * every_chosen);
  EXPECT_NEAR(least.ram_hit_rate, 0.0, 1e-12);
  EXPECT_NEAR(least.in_memory_tokens_per_s, in_memory, 1e-9 * in_memory);
  EXPECT_NEAR(1.0 / least.tokens_per_s, 1.0 / in_memory + least.disk_bytes_per_token / 2e9, 1e-12);
  EXPECT_NEAR(least.overlapped_tokens_per_s, 1.0 / std::max(1.0 / in_memory, least.disk_bytes_per_token / 2e9), 1e-9 * in_memory);

  const auto whole = tools::predict_disk_tier(*m, o, all.fixed_bytes + all.row_bytes, 2.0);
  EXPECT_EQ(whole.pinned_rows, hp.n_ff);
  EXPECT_EQ(whole.disk_bytes_per_token, 0.0);
  EXPECT_EQ(whole.ram_hit_rate, 1.0);
  EXPECT_NEAR(whole.tokens_per_s, in_memory, 1e-9 * in_memory);

  double before = least.disk_bytes_per_token;
  for (double share : {0.1, 0.3, 0.6}) {
    SCOPED_TRACE(share);
    const auto p = tools::predict_disk_tier(*m, o, all.least_bytes + static_cast<uint64_t>(share * static_cast<double>(all.row_bytes)), 2.0);
    ASSERT_GT(p.window_rows, 0);
    double pinned_only = embedding;  // (what the same pinned rows would read without a window)
    for (int64_t l = 0; l < hp.n_layer; ++l)
      for (int64_t i = p.pinned_rows; i < hp.n_ff; ++i) pinned_only += static_cast<double>(i % 10) / 40.0 * static_cast<double>(all.neuron_bytes[static_cast<size_t>(l)]);
    EXPECT_LT(p.disk_bytes_per_token, pinned_only);
    EXPECT_GT(p.disk_bytes_per_token, 0.0);
    EXPECT_LE(p.disk_bytes_per_token, before);
    EXPECT_GT(p.ram_hit_rate, 0.0);
    EXPECT_LT(p.ram_hit_rate, 1.0);
    before = p.disk_bytes_per_token;
  }
  // Beside a GPU's plan: each layer's first hot neurons are the GPU's — not read, not the CPU's
  // choices — the pinned ones follow them, and a token's work is the hybrid's.
  const auto gpu = tools::predict_plan(*m, options(*m, 1 << 18));  // (256 KiB: some of each layer's neurons)
  std::vector<int64_t> hot;
  for (const auto& l : gpu.plan.layers) hot.push_back(l.hot_neurons);
  ASSERT_GT(hot[0], 0);
  ASSERT_LT(hot[0], hp.n_ff);
  const auto beside = tools::predict_disk_tier(*m, o, all.least_bytes, 2.0, &gpu);
  EXPECT_EQ(beside.device_rows, hot[0]);
  EXPECT_TRUE(beside.beside_gpu);
  double cold_chosen = 0;
  for (int64_t l = 0; l < hp.n_layer; ++l)
    for (int64_t i = hot[static_cast<size_t>(l)]; i < hp.n_ff; ++i)
      cold_chosen += static_cast<double>(i % 10) / 40.0 * static_cast<double>(all.neuron_bytes[static_cast<size_t>(l)]);
  EXPECT_NEAR(beside.disk_bytes_per_token, cold_chosen + embedding, 1e-9 * cold_chosen);
  EXPECT_NEAR(beside.in_memory_tokens_per_s, gpu.hybrid_tokens_per_s, 1e-9 * gpu.hybrid_tokens_per_s);
  const auto beside_whole = tools::predict_disk_tier(*m, o, all.fixed_bytes + all.row_bytes, 2.0, &gpu);
  EXPECT_EQ(beside_whole.pinned_rows, hp.n_ff - hot[0]);  // (every neuron the GPU does not hold)
  EXPECT_EQ(beside_whole.disk_bytes_per_token, 0.0);
  EXPECT_THROW(tools::predict_disk_tier(*m, o, all.least_bytes, 0.0), std::invalid_argument);
  EXPECT_THROW(tools::predict_disk_tier(*model::load(test::make_model("planner_dense", test::sparse_test_options(architecture::llama, activation::relu, tensor_type::f16))),
                                        o, all.least_bytes, 1.0),
               std::invalid_argument);  // (a dense file: no rows read by neuron)
}

// A mixture's disk tier on paper: with only what must be held, every routed expert (k a layer) read
// whole a token; with every expert held, none; between, a cache for all the layers that reads fewer
// the larger it is, at the CPU alone's speed plus the reads.
TEST(Planner, AMixturesDiskTierReadsTheRoutedExpertsItsCacheDoesNotHold) {
  tools::gen_model_options g;
  g.arch = architecture::qwen2moe, g.type = tensor_type::q8_0, g.act = activation::silu;
  g.n_embd = 64, g.n_ff = 64, g.n_ff_shared = 96, g.n_layer = 4, g.n_head = 4, g.n_head_kv = 2, g.n_experts = 8, g.n_experts_used = 2;
  load_options lo;
  lo.ffn_rows_from_disk = true;
  auto m = model::load(test::make_model("planner_moe", g), lo);
  const auto& hp = m->hp();
  tools::planner_options o;
  o.ctx = 64, o.cpu_gbs = 50;
  const ram_tier_plan all = plan_ram_tier(*m, ~uint64_t{0} / 2);
  ASSERT_TRUE(all.experts);
  const auto parts = expert_part_bytes(m->weights().layers[0], hp.n_expert);
  const double expert = static_cast<double>(parts[0] + parts[1] + parts[2]);
  const read_costs c(*m);
  const double embedding = m->embeddings_from_disk() ? static_cast<double>(c.embedding_row) : 0.0;
  const auto least = tools::predict_disk_tier(*m, o, all.least_bytes, 1.0);
  EXPECT_TRUE(least.experts);
  EXPECT_EQ(least.window_rows, 0);
  EXPECT_NEAR(least.disk_bytes_per_token, 4 * 2 * expert + embedding, 1e-9 * expert);
  EXPECT_NEAR(least.neurons_read_per_token, 8.0, 1e-12);
  const auto whole = tools::predict_disk_tier(*m, o, all.fixed_bytes + all.row_bytes, 1.0);
  EXPECT_EQ(whole.disk_bytes_per_token, 0.0);
  EXPECT_NEAR(whole.tokens_per_s, whole.in_memory_tokens_per_s, 1e-9 * whole.in_memory_tokens_per_s);
  double before = least.disk_bytes_per_token;
  for (int cached : {4, 8, 16}) {
    SCOPED_TRACE(cached);
    const auto p = tools::predict_disk_tier(*m, o, all.least_bytes + static_cast<uint64_t>(cached * expert), 1.0);
    EXPECT_EQ(p.window_rows, cached);
    EXPECT_LT(p.disk_bytes_per_token, before);
    EXPECT_GT(p.disk_bytes_per_token, embedding);
    EXPECT_NEAR(1.0 / p.tokens_per_s, 1.0 / p.in_memory_tokens_per_s + p.disk_bytes_per_token / 1e9, 1e-12);
    before = p.disk_bytes_per_token;
  }
}

// The disk's rate as the tier reads: every piece asked for read, at most one read each.
TEST(Planner, MeasuresTheDisksRateWithTheTiersReads) {
  planner_sparse_model();
  const auto path = (test::scratch_dir() / "planner_sparse.gguf").string();
  const auto r = tools::measure_disk_rate(path, 12288, 32, 100);
  EXPECT_EQ(r.bytes, 128u * 12288u);  // (whole batches)
  EXPECT_GT(r.reads, 0u);
  EXPECT_LE(r.reads, 128u);
  EXPECT_GT(r.gbs, 0.0);
  EXPECT_THROW(tools::measure_disk_rate(path, 1ull << 40, 1, 1), std::invalid_argument);  // (longer than the file)
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// A mixture of experts on paper: the CPU alone reads each layer's fixed part and k experts; the hybrid
// moves bytes between the sides without making or losing any; more of the experts in GPU slots (or
// a higher hit rate) is never slower; llama.cpp's --n-cpu-moe N is the smallest N that fits, and
// with every expert fitting it is 0 and both configurations hold every expert on the GPU.
TEST(Planner, MixtureOfExpertsAgainstNCpuMoe) {
  tools::gen_model_options g;
  g.arch = architecture::qwen2moe, g.type = tensor_type::q8_0, g.act = activation::silu;
  g.n_embd = 64, g.n_ff = 64, g.n_ff_shared = 96, g.n_layer = 4, g.n_head = 4, g.n_head_kv = 2, g.n_experts = 8, g.n_experts_used = 2;
  auto m = model::load(test::make_model("planner_moe", g));
  const auto& hp = m->hp();
  const read_costs c(*m);
  tools::planner_options o;
  o.ctx = 64, o.cpu_gbs = 50, o.gpu_gbs = 1000, o.pcie_gbs = 32;
  o.crossing_us = 0;  // (a file this small is all latency otherwise)
  o.budget = uint64_t{1} << 34;
  const auto all = tools::predict_plan(*m, o);
  double want = static_cast<double>(c.embedding_row + c.output);
  for (size_t l = 0; l < c.layer_fixed.size(); ++l)
    want += static_cast<double>(c.layer_fixed[l]) + kv_read_per_token(hp, kv_types{}, 32) + 2.0 * static_cast<double>(c.neuron[l] * static_cast<uint64_t>(hp.n_ff_exp));
  EXPECT_NEAR(all.cpu_only_bytes, want, 1e-6 * want);
  EXPECT_NEAR(all.host_bytes + all.device_bytes, all.cpu_only_bytes, 1e-6 * all.cpu_only_bytes);
  EXPECT_EQ(all.n_cpu_moe, 0);
  EXPECT_DOUBLE_EQ(all.expert_hit_rate, 1.0);
  // A budget of the rest and a quarter of the experts.
  const uint64_t rest = all.plan.bytes() - all.plan.fixed.experts;
  o.budget = rest + all.plan.fixed.experts / 4;
  const auto quarter = tools::predict_plan(*m, o);
  EXPECT_NEAR(quarter.expert_hit_rate, 0.25, 1e-9);
  EXPECT_NEAR(quarter.host_bytes + quarter.device_bytes, quarter.cpu_only_bytes, 1e-6 * quarter.cpu_only_bytes);
  EXPECT_EQ(quarter.n_cpu_moe, 3);  // one layer's experts fit, with a quarter of all four layers'
  EXPECT_LT(quarter.hybrid_tokens_per_s, all.hybrid_tokens_per_s);
  o.expert_hit_rate = 0.6;
  const auto cached = tools::predict_plan(*m, o);
  EXPECT_GT(cached.hybrid_tokens_per_s, quarter.hybrid_tokens_per_s);
  EXPECT_NEAR(cached.expert_hit_rate, 0.6, 1e-9);
  // Below the attention, KV caches, shared experts and head: no --n-cpu-moe fits.
  o.budget = rest / 2, o.expert_hit_rate = -1;
  EXPECT_EQ(tools::predict_plan(*m, o).n_cpu_moe, -1);
}

}  // namespace
}  // namespace hotcold
