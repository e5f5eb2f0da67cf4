// The disk tier (engine/ram_tier): a sparse file's FFN rows left in the file and read into place as
// tokens choose them (or a layer ahead) give the same bits as the whole file in memory, whatever the budget, for one
// token at a time and for a batch, bundled or plain rows, F16 or Q4_0 (rows that share pages); only
// the rows chosen are read, and no more than the budget stays; a file changed while running is an error
// naming it.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <set>

#include <fmt/format.h>

#include "engine/forward.hpp"
#include "engine/layer_ops.hpp"
#include "engine/predictor.hpp"
#include "engine/ram_tier.hpp"
#include "model/recipe.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

// A 3-layer llama of 256 x 1024 with random predictors: ReLU, or (thresholded) SiLU with activation
// thresholds, whose gate rows every token reads and so stay in memory whole.
std::string tier_model(const std::string& name, tensor_type type, bool bundle, bool thresholded = false) {
  const auto path = (test::scratch_dir() / (name + ".gguf")).string();
  if (std::filesystem::exists(path)) return path;
  tools::gen_model_options o;
  o.n_embd = 256, o.n_ff = 1024, o.n_layer = 3, o.n_head = 4, o.n_head_kv = 2, o.active = 0.15, o.type = type;
  if (thresholded) o.act = activation::silu;
  const auto dense = test::make_model(name + "_dense", o);
  tools::sparse_file_options so;
  so.bundle = bundle;
  if (thresholded) so.act_thresholds = {0.02f, 0.02f, 0.02f};
  tools::write_sparse_model(dense, path, test::random_predictors(3, 256, 1024, 32, 1.2f, 11), so);
  return path;
}

std::shared_ptr<const model> on_disk(const std::string& path) {
  load_options lo;
  lo.ffn_rows_from_disk = true;
  return model::load(path, lo);
}

// The plan of what must be held and `share` of the rows (biggest: the plan that holds everything),
// beside a device that holds each layer's first device_rows.
ram_tier_plan plan_at(const model& m, const ram_tier_plan& biggest, double share, std::span<const int64_t> device_rows = {}) {
  return plan_ram_tier(m, biggest.least_bytes + static_cast<uint64_t>(share * static_cast<double>(biggest.row_bytes)), device_rows);
}

struct run_result {
  std::vector<std::vector<float>> tokens, batch;
};
// Six tokens a forward() each, then the same prompt as one batch in a second context sharing the tier.
run_result run(std::shared_ptr<const model> m, std::shared_ptr<ram_tier> tier, ffn_mode mode) {
  const std::vector<token_id> prompt = {1, 250, 17, 299, 3, 120, 44, 201, 9, 77, 212, 5};
  run_result r;
  for (bool batch : {false, true}) {
    inference_context ctx(m, 16, 2, 1, tensor_type::f32);
    ctx.set_mode(mode);
    ctx.set_disk_tier(tier);
    (batch ? r.batch : r.tokens) = test::run_tokens(ctx, batch ? prompt : std::vector<token_id>(prompt.begin(), prompt.begin() + 6), batch);
  }
  return r;
}

// Resident pages of the per-neuron rows (mincore), those wholly inside the tensors (a page at an
// edge is shared with the tensor beside it, which was read); with a tier, its shared window's pages
// (the same memory at every layer's window rows) counted once.
uint64_t resident_row_pages(const model& m, const ram_tier* tier = nullptr) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t n = 0;
  bool window_counted = false;
  auto count = [&](uint64_t lo, uint64_t hi) {
    lo = (lo + page - 1) / page * page, hi = hi / page * page;
    if (hi <= lo) return;
    std::vector<unsigned char> v((hi - lo) / page);
    if (mincore(reinterpret_cast<void*>(lo), hi - lo, v.data()) != 0) n = ~uint64_t{0} / 2;
    for (unsigned char c : v) n += c & 1;
  };
  for (int64_t il = 0; il < m.hp().n_layer; ++il) {
    const int64_t p = tier ? tier->first_pinned(il) + tier->pinned_rows(il) : 0, w = tier ? tier->window_rows(il) : 0;
    for (const tensor_view* t : neuron_row_tensors(m.weights().layers[static_cast<size_t>(il)])) {
      const auto a = reinterpret_cast<uint64_t>(t->data), wlo = a + static_cast<uint64_t>(p) * t->row_bytes, whi = wlo + static_cast<uint64_t>(w) * t->row_bytes;
      if (w == 0) {
        count(a, a + t->bytes());
        continue;
      }
      count(a, wlo), count(whi, a + t->bytes());
      if (!window_counted) count(wlo, whi);
    }
    window_counted = window_counted || w > 0;
  }
  return n;
}

struct tier_case {
  const char* name;
  tensor_type type;
  bool bundle;
  bool thresholded = false;
};
class RamTier : public testing::TestWithParam<tier_case> {};

TEST_P(RamTier, AnyBudgetGivesTheSameBits) {
  const auto path = tier_model(GetParam().name, GetParam().type, GetParam().bundle, GetParam().thresholded);
  const auto whole = model::load(path);
  const auto want_sparse = run(whole, nullptr, ffn_mode::sparse), want_dense = run(whole, nullptr, ffn_mode::dense);
  const auto probe = on_disk(path);
  const ram_tier_plan biggest = plan_ram_tier(*probe, ~uint64_t{0} / 2);
  ASSERT_GT(biggest.row_bytes, 0u);
  EXPECT_EQ(biggest.pinned_rows[0], probe->hp().n_ff);
  for (double share : {0.0, 0.05, 0.3, 1.0}) {
    SCOPED_TRACE(share);
    const auto m = on_disk(path);
    EXPECT_EQ(resident_row_pages(*m), 0u) << "rows read at load";
    auto tier = std::make_shared<ram_tier>(m, plan_at(*m, biggest, share));
    const auto got = run(m, tier, ffn_mode::sparse);
    EXPECT_EQ(got.tokens, want_sparse.tokens);  // (bit for bit)
    EXPECT_EQ(got.batch, want_sparse.batch);
    const auto c = tier->counted();
    EXPECT_GT(c.lookups, 0u);
    if (share == 1.0) {
      EXPECT_EQ(c.hits, c.lookups);  // (all pinned: nothing read while running)
    }
    if (share == 0.0) {
      EXPECT_LT(c.hits, c.lookups);
    }
    // The read-ahead (each layer's guess of the next's choice, submitted while it computes, into the
    // window: none at a budget of nothing) brought rows the next layer then used; what it missed was
    // read when asked.
    if (share > 0.0 && share < 1.0) {
      EXPECT_GT(c.ahead, 0u);
    }
    EXPECT_EQ(c.ahead + c.missed <= c.lookups, true);
    EXPECT_EQ(run(m, tier, ffn_mode::dense).tokens, want_dense.tokens);
  }
}

// A request reads the pages of the rows it names — not the layer's — and what stays afterwards is
// within the window the budget allows, the pinned rows and the pages at tensors' edges; the run's
// lookups and hits count neurons.
TEST_P(RamTier, ReadsTheChosenRowsAndKeepsToTheBudget) {
  const auto path = tier_model(GetParam().name, GetParam().type, GetParam().bundle, GetParam().thresholded);
  const auto m = on_disk(path);
  const auto& hp = m->hp();
  const ram_tier_plan all = plan_ram_tier(*m, ~uint64_t{0} / 2);
  const ram_tier_plan plan = plan_ram_tier(*m, all.least_bytes + all.row_bytes / 3);
  ram_tier tier(m, plan);
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // (each layer's pinned rows: the plan's, rounded down to where its window's rows start on a page)
  int64_t pinned = 0;
  uint64_t pinned_rows = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    EXPECT_LE(tier.pinned_rows(il), plan.pinned_rows[static_cast<size_t>(il)]);
    EXPECT_EQ(tier.window_rows(il), tier.window_rows(0));
    pinned = std::max(pinned, tier.pinned_rows(il)), pinned_rows += static_cast<uint64_t>(tier.pinned_rows(il));
  }
  EXPECT_GT(tier.window_rows(0), 0);
  ASSERT_GT(pinned, 0);
  ASSERT_LT(pinned, hp.n_ff / 2);
  const uint64_t per_neuron = all.row_bytes / static_cast<uint64_t>(hp.n_layer * hp.n_ff);
  std::vector<int32_t> ids;
  for (int32_t i = static_cast<int32_t>(pinned) + 40; i < hp.n_ff; i += 37) ids.push_back(i);  // (scattered: a read each)
  const auto before = tier.counted();
  { auto in = tier.rows(1, ids); }
  const auto after = tier.counted();
  EXPECT_EQ(after.lookups - before.lookups, ids.size());
  EXPECT_EQ(after.hits - before.hits, 0u);
  // Each row's bytes, and at most a direct-I/O block on either side of each.
  EXPECT_GE(after.disk_bytes - before.disk_bytes, ids.size() * per_neuron);
  EXPECT_LE(after.disk_bytes - before.disk_bytes, ids.size() * (per_neuron + 2 * 4096 * 3));
  EXPECT_LT(after.disk_bytes - before.disk_bytes, all.row_bytes / static_cast<uint64_t>(hp.n_layer) / 4);  // (not the layer's)
  { auto again = tier.rows(1, ids); }
  EXPECT_EQ(tier.counted().hits - after.hits, ids.size());  // (in memory now)
  EXPECT_EQ(tier.counted().disk_bytes, after.disk_bytes);
  { auto hot = tier.rows(2, std::vector<int32_t>{0, 1, static_cast<int32_t>(pinned - 1)}); }
  EXPECT_EQ(tier.counted().disk_bytes, after.disk_bytes);  // (pinned rows: read at the start)
  // Many requests of a few rows each, across the layers: the window's slots are reused, nothing more
  // stays.
  const auto whole = model::load(path);
  for (int r = 0; r < 200; ++r) {
    const int64_t il = r % hp.n_layer;
    std::vector<int32_t> some;
    for (int k = 0; k < 12; ++k) some.push_back(static_cast<int32_t>(pinned + (r * 131 + k * 59) % (hp.n_ff - pinned)));
    auto in = tier.rows(il, some);
    // Each neuron's rows where the use says: the bytes of the file's rows of that neuron.
    const auto mine = neuron_row_tensors(m->weights().layers[static_cast<size_t>(il)]);
    const auto theirs = neuron_row_tensors(whole->weights().layers[static_cast<size_t>(il)]);
    ASSERT_EQ(in.rows().size(), some.size());
    for (size_t k = 0; k < some.size(); ++k) {
      ASSERT_GE(in.rows()[k], static_cast<int32_t>(tier.pinned_rows(il)));
      for (size_t j = 0; j < mine.size(); ++j)
        ASSERT_EQ(std::memcmp(mine[j]->row(in.rows()[k]), theirs[j]->row(some[k]), mine[j]->row_bytes), 0) << "layer " << il << " neuron " << some[k];
    }
  }
  const uint64_t pinned_bytes = per_neuron * pinned_rows;
  const uint64_t edges = 2 * page * 3 * static_cast<uint64_t>(hp.n_layer);  // (pages at a slot region's ends)
  EXPECT_LE(tier.counted().held_bytes, plan.window_bytes + pinned_bytes);
  EXPECT_LE(resident_row_pages(*m, &tier) * page, plan.window_bytes + pinned_bytes + edges);
  // A step that needs more than the window takes overflow slots for its length; they go back after.
  std::vector<int32_t> rest;
  for (int32_t i = static_cast<int32_t>(pinned); i < hp.n_ff; ++i) rest.push_back(i);
  { auto big = tier.rows(0, rest); }
  EXPECT_GT(tier.counted().released_pages, 0u);
  EXPECT_LE(tier.counted().held_bytes, plan.window_bytes + pinned_bytes);
  EXPECT_LE(resident_row_pages(*m, &tier) * page, plan.window_bytes + pinned_bytes + edges);
  EXPECT_THROW(tier.rows(0, std::vector<int32_t>{static_cast<int32_t>(hp.n_ff)}), std::out_of_range);
}

INSTANTIATE_TEST_SUITE_P(Files, RamTier,
                         testing::Values(tier_case{"tier_f16_bundle", tensor_type::f16, true}, tier_case{"tier_f16_rows", tensor_type::f16, false},
                                         tier_case{"tier_q4_0_bundle", tensor_type::q4_0, true},
                                         tier_case{"tier_silu_thresholded", tensor_type::f16, true, true}),
                         [](const testing::TestParamInfo<tier_case>& i) { return std::string(i.param.name).substr(5); });

// Beside a hot device that holds each layer's first neurons (the hottest), the pinned rows are the
// hottest after them — the budget holds no neuron twice —, and those first neurons, which a dense step
// or a step of the CPU alone may still ask for, are read into the rows below the pinned ones: the same
// bits at every budget, the rows of the neurons asked for, no more than the budget kept.
TEST(RamTier, BesideADeviceThePinnedRowsFollowItsNeurons) {
  const auto path = tier_model("tier_f16_bundle", tensor_type::f16, true);
  const auto whole = model::load(path);
  const auto want_sparse = run(whole, nullptr, ffn_mode::sparse), want_dense = run(whole, nullptr, ffn_mode::dense);
  const auto probe = on_disk(path);
  const auto& hp = probe->hp();
  const ram_tier_plan biggest = plan_ram_tier(*probe, ~uint64_t{0} / 2);
  const int64_t device = hp.n_ff / 4;
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  for (double share : {0.0, 0.3, 1.0}) {
    SCOPED_TRACE(share);
    const auto m = on_disk(path);
    const ram_tier_plan plan = plan_at(*m, biggest, share, std::vector<int64_t>(static_cast<size_t>(hp.n_layer), device));
    auto tier = std::make_shared<ram_tier>(m, plan);
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      EXPECT_LE(tier->first_pinned(il) + tier->pinned_rows(il) + tier->window_rows(il), hp.n_ff);
      if (share == 0.3) {  // (the window rounded down to a page: no further than a page's rows below the device's)
        EXPECT_EQ(tier->first_pinned(il), device);
        EXPECT_GT(tier->pinned_rows(il), 0);
      }
      if (share == 1.0) {
        EXPECT_EQ(tier->first_pinned(il), device);
        EXPECT_EQ(tier->pinned_rows(il), hp.n_ff - device);  // (all but the device's)
      }
    }
    if (share == 0.3) {
      const int64_t lo = tier->first_pinned(1);
      const auto before = tier->counted();
      { auto in = tier->rows(1, std::vector<int32_t>{static_cast<int32_t>(lo), static_cast<int32_t>(lo + tier->pinned_rows(1) - 1)}); }
      EXPECT_EQ(tier->counted().disk_bytes, before.disk_bytes);  // (pinned: the hottest past the device's)
      EXPECT_EQ(tier->counted().hits - before.hits, 2u);
      std::vector<int32_t> low;  // (the device's neurons: read, into rows below the pinned ones or the window's)
      for (int32_t i = 0; i < static_cast<int32_t>(lo); i += 7) low.push_back(i);
      auto in = tier->rows(1, low);
      EXPECT_GT(tier->counted().disk_bytes, before.disk_bytes);
      const auto mine = neuron_row_tensors(m->weights().layers[1]), theirs = neuron_row_tensors(whole->weights().layers[1]);
      for (size_t k = 0; k < low.size(); ++k) {
        EXPECT_FALSE(in.rows()[k] >= lo && in.rows()[k] < lo + tier->pinned_rows(1)) << "a pinned row taken";
        for (size_t j = 0; j < mine.size(); ++j) ASSERT_EQ(std::memcmp(mine[j]->row(in.rows()[k]), theirs[j]->row(low[k]), mine[j]->row_bytes), 0);
      }
    }
    const auto got = run(m, tier, ffn_mode::sparse);
    EXPECT_EQ(got.tokens, want_sparse.tokens);  // (bit for bit)
    EXPECT_EQ(got.batch, want_sparse.batch);
    EXPECT_EQ(run(m, tier, ffn_mode::dense).tokens, want_dense.tokens);  // (every neuron in its own row: the device's too)
    if (share == 1.0) continue;
    // A step asking for every neuron but the pinned ones takes overflow rows on both sides of them and
    // gives them back after.
    std::vector<int32_t> rest;
    for (int32_t i = 0; i < static_cast<int32_t>(hp.n_ff); ++i)
      if (i < tier->first_pinned(0) || i >= tier->first_pinned(0) + tier->pinned_rows(0)) rest.push_back(i);
    const uint64_t released = tier->counted().released_pages;
    { auto big = tier->rows(0, rest); }
    EXPECT_GT(tier->counted().released_pages, released);
    uint64_t pinned_bytes = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) pinned_bytes += static_cast<uint64_t>(tier->pinned_rows(il)) * plan.neuron_bytes[static_cast<size_t>(il)];
    const uint64_t edges = 4 * page * 3 * static_cast<uint64_t>(hp.n_layer);  // (pages at the slot regions' ends)
    const uint64_t tokens = static_cast<uint64_t>(plan.token_rows) * m->weights().token_embd.row_bytes;  // (the runs' embedding rows)
    EXPECT_LE(tier->counted().held_bytes, plan.window_bytes + pinned_bytes + tokens);
    EXPECT_LE(resident_row_pages(*m, tier.get()) * page, plan.window_bytes + pinned_bytes + edges);
  }
}

// The embedding table (a head of its own) stays in the file too: a step reads its tokens' rows, the
// same bytes; past the plan's rows kept, they are given back.
TEST(RamTier, TheEmbeddingTableIsReadByToken) {
  const auto path = tier_model("tier_f16_bundle", tensor_type::f16, true);
  const auto m = on_disk(path), whole = model::load(path);
  ASSERT_TRUE(m->embeddings_from_disk());
  const tensor_view& e = m->weights().token_embd;
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  auto resident = [&] {
    const auto lo = (reinterpret_cast<uint64_t>(e.data) + page - 1) / page * page, hi = (reinterpret_cast<uint64_t>(e.data) + e.bytes()) / page * page;
    std::vector<unsigned char> v((hi - lo) / page);
    EXPECT_EQ(mincore(reinterpret_cast<void*>(lo), hi - lo, v.data()), 0);
    uint64_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
  };
  EXPECT_EQ(resident(), 0u);
  const ram_tier_plan plan = plan_ram_tier(*m, plan_ram_tier(*m, ~uint64_t{0} / 2).least_bytes);
  ASSERT_GT(plan.token_rows, 0);
  ASSERT_LT(plan.token_rows, e.ne1);
  ram_tier tier(m, plan);
  const auto before = tier.counted();
  tier.token_rows(std::vector<int32_t>{5, 200, 5});
  EXPECT_GE(tier.counted().disk_bytes - before.disk_bytes, 2 * e.row_bytes);
  EXPECT_LE(resident() * page, 2 * (e.row_bytes + page));
  for (int32_t id : {5, 200}) EXPECT_EQ(std::memcmp(e.row(id), whole->weights().token_embd.row(id), e.row_bytes), 0);
  const auto read = tier.counted().disk_bytes;
  tier.token_rows(std::vector<int32_t>{200});
  EXPECT_EQ(tier.counted().disk_bytes, read);  // (kept)
  std::vector<int32_t> many;
  for (int32_t id = 0; id < std::min<int64_t>(e.ne1, plan.token_rows + 10); ++id) many.push_back(id);
  tier.token_rows(std::span<const int32_t>(many).first(static_cast<size_t>(plan.token_rows)));
  tier.token_rows(std::span<const int32_t>(many).last(10));
  EXPECT_GT(tier.counted().released_pages, 0u);
  EXPECT_LE(resident() * page, 10 * (e.row_bytes + page));
  for (int32_t id : std::span<const int32_t>(many).last(10)) EXPECT_EQ(std::memcmp(e.row(id), whole->weights().token_embd.row(id), e.row_bytes), 0);
  EXPECT_THROW(tier.token_rows(std::vector<int32_t>{static_cast<int32_t>(e.ne1)}), std::out_of_range);
}

// A mixture's experts (F16 and Q4_0, whose experts the whole file's copy interleaves and the tier
// reads plain, qwen2moe's shared expert held whole) left in the file and read an expert at a time as
// the router chooses them, the next layer's guess read a layer early: the same bits as the whole file
// in memory at every budget, one token at a time and as a batch; only experts are read (a token's
// reads are whole experts), and a budget that holds every expert reads none while running.
TEST(RamTier, AMixturesExpertsAreReadByExpertWithTheSameBits) {
  for (const auto& [arch, type] : {std::pair{architecture::llama, tensor_type::f16}, std::pair{architecture::llama, tensor_type::q4_0},
                                   std::pair{architecture::qwen2moe, tensor_type::f16}}) {
    SCOPED_TRACE(fmt::format("{} {}", architecture_name(arch), tensor_type_name(type)));
    tools::gen_model_options o;
    o.arch = arch, o.act = activation::silu, o.type = type;
    o.n_embd = 256, o.n_ff = 512, o.n_layer = 3, o.n_head = 4, o.n_head_kv = 2, o.n_experts = 8, o.n_experts_used = 2;
    const auto path = test::make_model(fmt::format("tier_moe_{}_{}", architecture_name(arch), tensor_type_name(type)), o);
    const auto whole = model::load(path);
    const auto want = run(whole, nullptr, ffn_mode::dense);
    const auto probe = on_disk(path);
    const ram_tier_plan biggest = plan_ram_tier(*probe, ~uint64_t{0} / 2);
    ASSERT_TRUE(biggest.experts);
    ASSERT_EQ(biggest.pinned_rows[0], 8);
    const uint64_t expert = biggest.neuron_bytes[0];
    const auto parts = expert_part_bytes(probe->weights().layers[0], 8);
    EXPECT_EQ(expert, parts[0] + parts[1] + parts[2]);
    for (double share : {0.0, 0.4, 1.0}) {
      SCOPED_TRACE(share);
      const auto m = on_disk(path);
      auto tier = std::make_shared<ram_tier>(m, plan_at(*m, biggest, share));
      const auto got = run(m, tier, ffn_mode::dense);
      EXPECT_EQ(got.tokens, want.tokens);  // (bit for bit)
      EXPECT_EQ(got.batch, want.batch);
      const auto c = tier->counted();
      EXPECT_GT(c.lookups, 0u);
      if (share == 1.0) {
        EXPECT_EQ(c.hits, c.lookups);
        EXPECT_LT(c.disk_bytes, expert);  // (the tokens' embedding rows alone)
        continue;
      }
      EXPECT_LT(c.hits, c.lookups);
      // Whole experts: each miss an expert's bytes (its gate, up and down).
      EXPECT_GE(c.disk_bytes, (c.lookups - c.hits) * expert);
      if (share > 0.0) {
        EXPECT_GT(tier->window_rows(0), 0);
        EXPECT_GT(c.ahead, 0u);  // (the next layer's guess, read a layer early)
      }
    }
  }
}

// The second guess before a layer's attention: its predictor on the layer's input as the predictor
// reads it — the residual stream as it is (a ReLU file), or through the FFN's norm (a thresholded
// file, whose predictor reads the FFN's normalized input) — reads the rows of exactly what the
// predictor chooses on that input, so a step asking for those finds every one brought ahead.
TEST(RamTier, TheSecondGuessReadsWhatThePredictorChoosesOnTheLayersInput) {
  for (const bool thresholded : {false, true}) {
    SCOPED_TRACE(thresholded);
    const auto path = tier_model(thresholded ? "tier_silu_thresholded" : "tier_f16_bundle", tensor_type::f16, true, thresholded);
    const auto m = on_disk(path);
    const auto& hp = m->hp();
    ram_tier tier(m, plan_ram_tier(*m, plan_ram_tier(*m, ~uint64_t{0} / 2).least_bytes + static_cast<uint64_t>(hp.n_layer * hp.n_ff) * 1536 / 3));
    thread_pool pool(2);
    predictor_runner runner(*m, pool);
    const int64_t n = 1, d = hp.n_embd, il = 1;
    std::vector<float> x(static_cast<size_t>(n * d));
    for (size_t k = 0; k < x.size(); ++k) x[k] = 3.0f * std::sin(0.37f * static_cast<float>(k)) + 0.5f;  // (far from normalized: the norm matters)
    ram_tier::guess_scratch g;
    tier.read_ahead_at_input(il, runner, x.data(), n, g);
    // What the step chooses on the predictor's own input.
    const layer_recipe r = recipe_of(hp, m->weights().layers[il]);
    ASSERT_EQ(r.predictor_reads_ffn_input, thresholded);
    std::vector<float> in = x;
    if (thresholded)
      for (int64_t t = 0; t < n; ++t) apply_norm(r.norm, r.ffn_norm, x.data() + t * d, in.data() + t * d, d, hp.norm_eps);
    std::vector<uint8_t> chosen(static_cast<size_t>(n * hp.n_ff));
    std::vector<int32_t> ids;
    runner.predict(il, in.data(), n, chosen.data(), ids);
    std::vector<int32_t> cold;  // (past the pinned ones)
    for (int32_t id : ids)
      if (id >= tier.first_pinned(il) + tier.pinned_rows(il)) cold.push_back(id);
    ASSERT_GT(cold.size(), 4u);
    const auto before = tier.counted();
    { auto use = tier.rows(il, cold); }
    const auto after = tier.counted();
    // (as many as the window holds, in the guess's order; the rest read when asked)
    const auto fit = std::min<uint64_t>(cold.size(), static_cast<uint64_t>(tier.window_rows(il)));
    EXPECT_EQ(after.ahead - before.ahead, fit);
    EXPECT_EQ(after.missed - before.missed, cold.size() - fit);
  }
}

// The second guess is on trial (engine/on_off_trial): on for the first epoch of decoded tokens, then
// off for the next, when it reads nothing.
TEST(RamTier, TheSecondGuessIsOnTrial) {
  const auto path = tier_model("tier_f16_bundle", tensor_type::f16, true);
  const auto m = on_disk(path);
  const auto& hp = m->hp();
  ram_tier tier(m, plan_ram_tier(*m, plan_ram_tier(*m, ~uint64_t{0} / 2).least_bytes + static_cast<uint64_t>(hp.n_layer * hp.n_ff) * 1536 / 3));
  thread_pool pool(2);
  predictor_runner runner(*m, pool);
  std::vector<float> x(static_cast<size_t>(hp.n_embd)), y(x.size());
  for (size_t k = 0; k < x.size(); ++k) x[k] = std::sin(0.37f * static_cast<float>(k)), y[k] = std::cos(0.91f * static_cast<float>(k));
  ram_tier::guess_scratch g;
  const int64_t epoch = 32;
  for (int64_t t = 0; t < epoch; ++t) tier.read_ahead_at_input(0, runner, x.data(), 1, g);  // (the first layer: each call a decoded token)
  EXPECT_TRUE(tier.input_guess_trial().on());
  EXPECT_GT(tier.counted().reads, 0u);
  const uint64_t reads = tier.counted().reads;
  tier.read_ahead_at_input(0, runner, y.data(), 1, g);  // (the second epoch: off)
  EXPECT_FALSE(tier.input_guess_trial().on());
  EXPECT_EQ(tier.counted().reads, reads);
  EXPECT_EQ(tier.input_guess_trial().tokens_on, epoch);
}

TEST(RamTier, AFileChangedWhileRunningIsAnErrorNamingIt) {
  const auto path = tier_model("tier_f16_bundle", tensor_type::f16, true);
  const auto copy = (test::scratch_dir() / "tier_changed.gguf").string();
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
  const auto m = on_disk(copy);
  auto tier = std::make_shared<ram_tier>(m, plan_ram_tier(*m, plan_ram_tier(*m, ~uint64_t{0} / 2).least_bytes));
  inference_context ctx(m, 16, 2, 1, tensor_type::f32);
  ctx.set_mode(ffn_mode::sparse);
  ctx.set_disk_tier(tier);
  ctx.forward(1, 0);
  struct stat st {};
  ASSERT_EQ(stat(copy.c_str(), &st), 0);
  timespec times[2] = {st.st_atim, st.st_mtim};
  times[1].tv_sec += 5;
  ASSERT_EQ(utimensat(AT_FDCWD, copy.c_str(), times, 0), 0);
  try {
    for (int i = 1; i < 6; ++i) ctx.forward(static_cast<token_id>(100 + i), i);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(copy), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("changed on disk"), std::string::npos) << e.what();
  }
  // A budget below what is held whole is refused by name.
  try {
    plan_ram_tier(*m, 1 << 20);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--ram-budget"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hotcold
