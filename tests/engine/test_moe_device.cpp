// A mixture's experts split between a hot device and the CPU (engine/device_experts.hpp, docs/moe.md):
// sim holding a quarter of the experts — a cache refilled as tokens route — or --n-cpu-moe's fixed
// layers, computing as a host device and as a GPU does (--sim-kernels), gives model/reference's logits;
// the plan fills the device in its order; the slots' policies.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "engine/device_experts.hpp"
#include "engine/forward.hpp"
#include "loader/open.hpp"
#include "model/reference.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/gen_model.hpp"

namespace hotcold {
namespace {

std::string moe_file(architecture arch, tensor_type type) {
  tools::gen_model_options o;
  o.arch = arch, o.type = type, o.act = activation::silu;
  o.n_embd = 64, o.n_ff = 64, o.n_ff_shared = 96;
  o.n_layer = 3, o.n_head = 4, o.n_head_kv = 2;
  o.n_experts = 8, o.n_experts_used = 2;
  o.norm_spread = 0.2;
  return test::make_model(fmt::format("moe_dev_{}_{}", architecture_name(arch), tensor_type_name(type)), o);
}

// A file of moe_file's, its model, and model/reference over the same file (which it reads as it goes).
struct moe_with_reference {
  std::shared_ptr<const model> m;
  gguf::file file;
  reference_model oracle;
  explicit moe_with_reference(architecture arch)
      : m(model::load(moe_file(arch, tensor_type::f16))), file(gguf::file::open(moe_file(arch, tensor_type::f16))), oracle(file, tensor_type::f16) {}
};

// count token ids first, first + step, ... (mod 290: inside the vocabulary's ordinary tokens).
std::vector<token_id> token_ramp(int count, int first, int step) {
  std::vector<token_id> tokens;
  for (int i = 0; i < count; ++i) tokens.push_back(static_cast<token_id>(first + (i * step) % 290));
  return tokens;
}

std::shared_ptr<devices::device> sim(uint64_t budget, bool kernels) {
  devices::device_options d;
  d.kind = "sim", d.budget = budget, d.sim_kernels = kernels;
  return devices::make_device(d);
}

// The plan's bytes for everything but the experts, and what `slots` experts in every layer take (three
// buffers a layer), each buffer as `alloc` charges it (sim with kernels: a GPU's granules).
std::pair<uint64_t, uint64_t> plan_sizes(const model& m, int64_t ctx, int64_t slots, devices::allocation_rule alloc = {}) {
  loader::plan_options po;
  po.ctx = ctx;
  po.alloc = alloc;
  const auto all = loader::plan_device(m, uint64_t{1} << 34, po);
  uint64_t held = 0;
  const auto e = static_cast<uint64_t>(m.hp().n_expert), s = static_cast<uint64_t>(slots);
  for (const auto& l : m.weights().layers)
    held += alloc.charge(l.ffn_gate_exps.bytes() / e * s) + alloc.charge(l.ffn_up_exps.bytes() / e * s) + alloc.charge(l.ffn_down_exps.bytes() / e * s);
  return {all.bytes() - all.fixed.experts, held};
}
devices::allocation_rule charged_by(bool kernels) { return kernels ? devices::gpu_allocation : devices::allocation_rule{}; }

// The experts' cache at a quarter of their bytes: each layer holds 2 of its 8, refilled as the tokens
// route (uploads after a miss and the next layer's guess a layer early); the logits are the
// reference's, one token at a time and as a batch, computing as a host device does and as a GPU does.
TEST(MoeDevice, ACacheOfAQuarterOfTheExpertsGivesTheReference) {
  for (auto arch : {architecture::llama, architecture::qwen2moe, architecture::qwen3moe}) {
    const moe_with_reference f(arch);
    const auto& m = f.m;
    const auto& hp = m->hp();
    const auto tokens = token_ramp(16, 1, 53);
    const auto want = f.oracle.logits(tokens);
    for (bool kernels : {false, true})
      for (bool batch : {false, true}) {
        const auto [rest, quarter] = plan_sizes(*m, 32, 2, charged_by(kernels));
        SCOPED_TRACE(fmt::format("{} {} {}", architecture_name(arch), kernels ? "sim kernels" : "sim", batch ? "batch" : "one at a time"));
        loader::open_options o;
        o.ctx = 32, o.threads = 2;
        auto r = loader::open_for_running(m, sim(rest + quarter, kernels), o);
        ASSERT_TRUE(r.experts);
        for (int64_t l = 0; l < hp.n_layer; ++l) EXPECT_EQ(r.experts->slots(l), 2);
        if (arch == architecture::qwen2moe) {
          EXPECT_TRUE(r.device->shared_expert(0));
        }
        const auto got = test::run_tokens(*r.ctx, tokens, batch);
        EXPECT_LT(test::rel_diff(got, want), 1e-4);
        const auto& c = r.experts->counted();
        EXPECT_EQ(c.lookups, static_cast<int64_t>(tokens.size()) * hp.n_expert_used * hp.n_layer);
        EXPECT_GT(c.hits, 0);
        EXPECT_LT(c.hits, c.lookups);
        EXPECT_GT(c.uploads, 0);
        // Experts other than the first fill (0 and 1) came in, and were read from their slots.
        int64_t uploaded_held = 0;
        for (int64_t l = 0; l < hp.n_layer; ++l)
          for (int32_t e = 2; e < hp.n_expert; ++e) uploaded_held += r.experts->slot_of(l, e) >= 0;
        EXPECT_GT(uploaded_held, 0);
        EXPECT_GT(r.ctx->device_read(), 0u);
      }
  }
}

// The hot experts are read from their slots: two slots whose rows are swapped behind the cache's back
// change the logits (what the test above checks can fail).
TEST(MoeDevice, ExpertsAreReadFromTheirSlots) {
  const moe_with_reference f(architecture::qwen3moe);
  const auto& m = f.m;
  const auto tokens = token_ramp(16, 1, 53);
  const auto [rest, quarter] = plan_sizes(*m, 32, 2);
  loader::open_options o;
  o.ctx = 32, o.threads = 2;
  auto r = loader::open_for_running(m, sim(rest + quarter, false), o);
  ASSERT_TRUE(r.experts);
  // Swap two held slots' rows behind the cache's back (sim's buffers are host memory): expert 0's
  // slot now holds expert 1's rows and the other way round.
  for (int64_t l = 0; l < m->hp().n_layer; ++l) {
    const auto a = r.experts->slot_rows(l, r.experts->slot_of(l, 0)), b = r.experts->slot_rows(l, r.experts->slot_of(l, 1));
    for (auto [x, y] : {std::pair{a.gate, b.gate}, {a.up, b.up}, {a.down, b.down}})
      std::swap_ranges(const_cast<uint8_t*>(x.data), const_cast<uint8_t*>(x.data) + x.bytes(), const_cast<uint8_t*>(y.data));
  }
  EXPECT_GT(test::rel_diff(test::run_tokens(*r.ctx, tokens, false), f.oracle.logits(tokens)), 1e-3);
}

// A prompt batch's cold experts that many of its tokens chose are streamed to the device and computed
// there (before any rate is measured, llama.cpp's rule: 32 tokens or more), the logits still the
// reference's; a fixed set streams nothing.
TEST(MoeDevice, PromptBatchesStreamTheirBusyColdExperts) {
  const moe_with_reference f(architecture::qwen3moe);
  const auto& m = f.m;
  const auto tokens = token_ramp(128, 1, 53);
  const auto [rest, quarter] = plan_sizes(*m, 160, 2);
  for (auto policy : {expert_policy::lfu_decay, expert_policy::fixed}) {
    SCOPED_TRACE(expert_policy_name(policy));
    loader::open_options o;
    o.ctx = 160, o.threads = 2, o.expert_cache_policy = policy;
    auto r = loader::open_for_running(m, sim(rest + quarter, false), o);
    ASSERT_TRUE(r.experts);
    const auto got = test::run_tokens(*r.ctx, tokens, true);
    EXPECT_LT(test::rel_diff(got, f.oracle.logits(tokens)), 1e-4);
    if (policy == expert_policy::fixed) {
      EXPECT_EQ(r.experts->counted().streamed, 0);
    } else {
      EXPECT_GT(r.experts->counted().streamed, 0);
      EXPECT_GT(r.experts->upload_seconds_per_byte(), 0.0);  // timed on the device's queue
    }
  }
}

// --n-cpu-moe N: layers 0..N-1 keep every expert on the CPU, the others hold all of theirs (a fixed
// set: every lookup there a hit, no uploads); --cpu-moe (N = every layer) leaves attention and the
// shared expert on the device; both give the reference's logits. A budget the layers' experts do not
// fit is refused naming the layer.
TEST(MoeDevice, NCpuMoeKeepsTheFirstLayersExpertsOnTheCpu) {
  const moe_with_reference f(architecture::qwen2moe);
  const auto& m = f.m;
  const auto& hp = m->hp();
  const auto tokens = token_ramp(10, 3, 31);
  const auto want = f.oracle.logits(tokens);
  const auto [rest, experts] = plan_sizes(*m, 32, hp.n_expert, devices::gpu_allocation);
  for (int64_t n : {int64_t{1}, hp.n_layer}) {
    SCOPED_TRACE(n);
    loader::open_options o;
    o.ctx = 32, o.threads = 2, o.n_cpu_moe = n;
    auto r = loader::open_for_running(m, sim(rest + experts, true), o);
    ASSERT_TRUE(r.plan);
    for (int64_t l = 0; l < hp.n_layer; ++l) EXPECT_EQ(r.plan->layers[static_cast<size_t>(l)].expert_slots, l < n ? 0 : hp.n_expert);
    EXPECT_TRUE(r.plan->layers[0].shared);
    EXPECT_EQ(static_cast<bool>(r.experts), n < hp.n_layer);
    EXPECT_LT(test::rel_diff(test::run_tokens(*r.ctx, tokens, true), want), 1e-4);
    if (r.experts) {
      const auto& c = r.experts->counted();
      EXPECT_EQ(c.uploads, 0);
      EXPECT_EQ(c.hits, static_cast<int64_t>(tokens.size()) * hp.n_expert_used * (hp.n_layer - n));
      EXPECT_EQ(r.experts->residency().policy, expert_policy::fixed);
    }
  }
  loader::open_options o;
  o.ctx = 32, o.n_cpu_moe = 0;
  try {
    loader::open_for_running(m, sim(rest + experts / 2, false), o);
    ADD_FAILURE() << "experts that do not fit were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--n-cpu-moe 0: layer"), std::string::npos) << e.what();
  }
}

// The layer-early guess on trial: four epochs of 32 decoded tokens, on, off, on, off — no guessed
// upload in an off epoch — then kept on unless the hit rate without it was higher by more than the
// margin; forced on, it never pauses.
TEST(MoeDevice, TheGuessIsTriedBothWaysAndKeptWhereItPays) {
  const auto m = model::load(moe_file(architecture::qwen3moe, tensor_type::f16));
  const auto [rest, quarter] = plan_sizes(*m, 160, 2);
  for (bool trial : {true, false}) {
    SCOPED_TRACE(trial ? "auto" : "on");
    loader::open_options o;
    o.ctx = 160, o.threads = 2, o.expert_prefetch_on_trial = trial;
    auto r = loader::open_for_running(m, sim(rest + quarter, false), o);
    ASSERT_TRUE(r.experts);
    const int64_t epoch = device_experts::guess_epoch;
    const auto tokens = token_ramp(static_cast<int>(4 * epoch + 8), 7, 41);
    std::vector<int64_t> prefetched_in_epoch(5, 0);
    for (size_t t = 0; t < tokens.size(); ++t) {
      const int64_t before = r.experts->counted().prefetched;
      r.ctx->forward(tokens[t], static_cast<int64_t>(t));
      prefetched_in_epoch[std::min<size_t>(4, t / static_cast<size_t>(epoch))] += r.experts->counted().prefetched - before;
    }
    const auto& g = r.experts->guess_trials();
    if (!trial) {
      EXPECT_TRUE(r.experts->guessing());
      EXPECT_EQ(g.tokens_off, 0);
      for (int k = 0; k < 4; ++k) EXPECT_GT(prefetched_in_epoch[static_cast<size_t>(k)], 0) << k;
      continue;
    }
    // (Epoch k's first token is decided as epoch k - 1 ends: off in epochs 1 and 3, but for that token.)
    EXPECT_GT(prefetched_in_epoch[0], 0);
    EXPECT_GT(prefetched_in_epoch[2], 0);
    EXPECT_EQ(prefetched_in_epoch[1], 0);
    EXPECT_EQ(prefetched_in_epoch[3], 0);
    ASSERT_GE(g.on_score, 0.0);
    ASSERT_GE(g.off_score, 0.0);
    EXPECT_EQ(g.tokens_on, 2 * epoch + 8 * (g.on_now ? 1 : 0));
    const bool keep = !(g.off_score > g.on_score + device_experts::guess_margin);
    EXPECT_EQ(r.experts->guessing(), keep);
    EXPECT_EQ(g.on_now, keep);
    EXPECT_GT(g.on_score, 0.0);  // (measured: hits after each epoch's warm-in)
  }
}

// Every expert in a slot, a token at a time on a GPU's jobs: a layer's hot experts leave their sum on
// the device and the next layer's attention job adds it (its norm there too), so a token waits once a
// layer, once more for the last layer's experts, and once for the head — layers + 2, where an
// attention job and an experts job a layer waited 2 x layers + 1 — and the logits stay the reference's.
TEST(MoeDevice, ATokenWaitsOnceALayerWithEveryExpertInASlot) {
  for (architecture arch : {architecture::qwen2moe, architecture::qwen3moe}) {
    SCOPED_TRACE(architecture_name(arch));
    const moe_with_reference f(arch);
    const auto& m = f.m;
    const auto& hp = m->hp();
    const auto tokens = token_ramp(6, 5, 37);
    const auto want = f.oracle.logits(tokens);
    const auto [rest, experts] = plan_sizes(*m, 32, hp.n_expert, devices::gpu_allocation);
    loader::open_options o;
    o.ctx = 32, o.threads = 2;
    auto r = loader::open_for_running(m, sim(rest + experts, true), o);
    ASSERT_TRUE(r.experts && r.plan && r.plan->output);
    for (int64_t l = 0; l < hp.n_layer; ++l) ASSERT_EQ(r.experts->slots(l), hp.n_expert);
    std::vector<std::vector<float>> got;
    for (size_t t = 0; t < tokens.size(); ++t) {
      const devices::device_traffic before = r.dev->traffic();
      const auto logits = r.ctx->forward(tokens[t], static_cast<int64_t>(t));
      got.emplace_back(logits.begin(), logits.end());
      EXPECT_EQ((r.dev->traffic() - before).syncs, static_cast<uint64_t>(hp.n_layer + 2)) << "token " << t;
    }
    EXPECT_LT(test::rel_diff(got, want), 1e-4);
    // A prompt batch (several tokens a step) waits for its experts as before, and agrees too.
    auto again = loader::open_for_running(m, sim(rest + experts, true), o);
    EXPECT_LT(test::rel_diff(test::run_tokens(*again.ctx, tokens, true), want), 1e-4);
  }
}

// The plan's order for a mixture: attention with its KV cache, shared experts, the head, then expert
// slots — as many in every layer as fit, then one more a layer front to back.
TEST(MoeDevice, ThePlanFillsTheDeviceInItsOrder) {
  auto m = model::load(moe_file(architecture::qwen2moe, tensor_type::f16));
  const auto& hp = m->hp();
  loader::plan_options po;
  po.ctx = 32;
  const auto all = loader::plan_device(*m, uint64_t{1} << 34, po);
  ASSERT_TRUE(all.experts);
  const uint64_t expert = all.fixed.experts / static_cast<uint64_t>(hp.n_layer * hp.n_expert);
  for (const auto& l : all.layers) EXPECT_TRUE(l.attention && l.shared && l.expert_slots == hp.n_expert);
  EXPECT_TRUE(all.output);
  const uint64_t rest = all.bytes() - all.fixed.experts;
  // Three slots a layer and one more for the first layer.
  const auto some = loader::plan_device(*m, rest + expert * static_cast<uint64_t>(3 * hp.n_layer + 1) + expert / 2, po);
  EXPECT_TRUE(some.output);
  EXPECT_EQ(some.layers[0].expert_slots, 4);
  for (int64_t l = 1; l < hp.n_layer; ++l) EXPECT_EQ(some.layers[static_cast<size_t>(l)].expert_slots, 3);
  const auto slots = some.expert_slots();
  EXPECT_EQ(slots.policy, expert_policy::lfu_decay);
  EXPECT_EQ(slots.upload_bytes_per_token, expert);  // one expert for every fourth layer, at least one
  // Below the head: no experts, no head, attention and shared experts still there.
  const auto tight = loader::plan_device(*m, rest - all.fixed.output, po);
  EXPECT_FALSE(tight.output);
  EXPECT_EQ(tight.fixed.experts, 0u);
  EXPECT_TRUE(tight.layers.back().attention && tight.layers.back().shared);
  EXPECT_NE(some.table().find("| 0 | "), std::string::npos);
  EXPECT_NE(some.table().find("4 of 8"), std::string::npos) << some.table();
}

// The slots' policies: LRU evicts the expert chosen longest ago, LFU with decay the lowest decayed
// count (a popular expert outlives a newer one-off), neither evicts an expert the token keeps, and a
// fixed set takes nothing in.
TEST(MoeDevice, SlotPolicies) {
  expert_slots lru(6, 2, expert_policy::lru), lfu(6, 2, expert_policy::lfu_decay, 0.9);
  for (expert_slots* c : {&lru, &lfu}) {
    for (int32_t e : {0, 0, 0, 1}) {  // expert 0 chosen three tokens running, then expert 1
      c->next_token();
      c->use(e);
      if (!c->holds(e)) {
        EXPECT_EQ(c->admit(e, std::vector<int32_t>{e}), -1);
      }
    }
    c->next_token();
    c->use(2);
  }
  EXPECT_EQ(lru.admit(2, std::vector<int32_t>{2}), 0);  // 0 was chosen longest ago
  EXPECT_EQ(lfu.admit(2, std::vector<int32_t>{2}), 1);  // 0's decayed count (2.2) beats 1's (0.9)
  EXPECT_EQ(lru.admit(3, std::vector<int32_t>{1, 2, 3}), -2);  // every held expert kept
  EXPECT_THROW(lru.admit(2, {}), std::logic_error);
  expert_slots fixed(6, 2, expert_policy::fixed);
  fixed.put(4);
  EXPECT_EQ(fixed.admit(5, {}), -2);
  EXPECT_TRUE(fixed.holds(4));
  EXPECT_FALSE(fixed.holds(5));
  EXPECT_EQ(parse_expert_policy("lfu-decay"), expert_policy::lfu_decay);
  EXPECT_THROW(parse_expert_policy("mru"), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold
