// Prompt beginnings reused across requests: the prefix index (exact tokens behind the hash, least
// recently used blocks evicted within the capacity, leaves first) and the actors reusing a slot's rows,
// the store's blocks and another running sequence's rows — every reuse giving the tokens of the same
// request computed from nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "actors/pipeline.hpp"
#include "actors/prefix_reuse.hpp"
#include "devices/device.hpp"
#include "engine/device_layers.hpp"
#include "engine/prefix_index.hpp"
#include "model/sampler.hpp"
#include "tests/actors/greedy_request.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"
#include "model/gguf.hpp"
#include <filesystem>

namespace hotcold {
namespace {

std::vector<token_id> run_of(int64_t n, int seed, int64_t vocab = 290) {
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::vector<token_id> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(static_cast<token_id>(1 + rng() % static_cast<unsigned>(vocab - 1)));
  return t;
}
std::vector<token_id> cat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(PrefixIndex, MatchesWholeBlocksOfTheSameTokensOnly) {
  prefix_index ix(4, 16);
  const auto a = run_of(10, 1);
  const auto s = ix.insert(a);
  ASSERT_EQ(s.ids.size(), 2u);  // 10 tokens: two whole blocks of 4, the last 2 not kept
  EXPECT_EQ(s.fresh, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(ix.match(a), s.ids);
  auto b = a;
  b[5] += 1;  // differs in the second block
  EXPECT_EQ(ix.match(b), std::vector<int32_t>{s.ids[0]});
  b[0] += 1;
  EXPECT_TRUE(ix.match(b).empty());
  // The same tokens after a different first block are a different block.
  auto c = a;
  c[1] += 1;
  const auto sc = ix.insert(c);
  EXPECT_EQ(sc.fresh, (std::vector<uint8_t>{1, 1}));
  EXPECT_NE(sc.ids[1], s.ids[1]);
  EXPECT_EQ(ix.insert(a).fresh, (std::vector<uint8_t>{0, 0}));  // already there
}

// Every block hashes alike: the exact comparison alone tells them apart, and a block never answers for
// other tokens.
TEST(PrefixIndex, CollidingHashesNeverAnswerForOtherTokens) {
  prefix_index ix(4, 64, [](int32_t, std::span<const token_id>) { return uint64_t{7}; });
  std::vector<std::vector<token_id>> runs;
  std::vector<std::vector<int32_t>> ids;
  for (int k = 0; k < 10; ++k) {
    runs.push_back(run_of(12, 100 + k));
    ids.push_back(ix.insert(runs.back()).ids);
  }
  for (int k = 0; k < 10; ++k) EXPECT_EQ(ix.match(runs[static_cast<size_t>(k)]), ids[static_cast<size_t>(k)]);
  auto other = runs[3];
  other[11] += 1;
  EXPECT_EQ(ix.match(other).size(), 2u);
  EXPECT_TRUE(ix.match(run_of(12, 999)).empty());
}

// 10,000 distinct prompts through a store of 50 blocks: never more than 50 held, the least recently
// used evicted (a prompt matched now and then stays), and a parent never before its children.
TEST(PrefixIndex, StaysWithinItsCapacityOverTenThousandPrompts) {
  prefix_index ix(8, 50);
  const auto kept = run_of(24, 5);
  const auto kept_ids = ix.insert(kept).ids;
  for (int k = 0; k < 10000; ++k) {
    ix.insert(cat(run_of(16, 6 + k % 3), run_of(16, 1000 + k)));  // three shared beginnings, distinct ends
    ASSERT_LE(ix.size(), 50);
    if (k % 10 == 0) {
      ASSERT_EQ(ix.match(kept), kept_ids) << "at prompt " << k;
    }
  }
  EXPECT_GT(ix.evictions(), 9000u);
  EXPECT_EQ(ix.match(cat(run_of(16, 6), {})).size(), 2u);  // a shared beginning, used throughout
  // A chain longer than the store stops where nothing is left to evict.
  prefix_index small(4, 3);
  EXPECT_EQ(small.insert(run_of(40, 8)).ids.size(), 3u);
  EXPECT_LE(small.size(), 3);
}

TEST(PrefixIndex, NothingKeptWithoutCapacity) {
  prefix_index ix(4, 0);
  EXPECT_TRUE(ix.insert(run_of(12, 1)).ids.empty());
  EXPECT_TRUE(ix.match(run_of(12, 1)).empty());
  EXPECT_THROW(prefix_index(0, 4), std::invalid_argument);
}

}  // namespace
}  // namespace hotcold

namespace hotcold::actors {
namespace {

struct result {
  std::vector<token_id> tokens;
  std::map<int64_t, std::vector<float>> logits;  // by prompt position: those computed
  done_event done;
};

std::map<int64_t, result> drain(pipeline& p, size_t n) {
  std::map<int64_t, result> out;
  size_t done = 0;
  while (done < n) {
    auto ev = p.next(std::chrono::seconds(60));
    if (!ev) {
      ADD_FAILURE() << "no event for a minute";
      break;
    }
    if (auto* t = std::get_if<token_event>(&*ev)) out[t->request].tokens.push_back(t->token);
    else if (auto* l = std::get_if<logits_event>(&*ev))
      for (int64_t r = 0; r < l->logits.rows; ++r) out[l->request].logits[l->first_position + r].assign(l->logits.row(r), l->logits.row(r) + l->logits.cols);
    else if (auto* d = std::get_if<done_event>(&*ev)) out[d->request].done = *d, ++done;
  }
  return out;
}

result one(pipeline& p, const generation_request& r) {
  const int64_t id = p.submit(r);
  return drain(p, 1)[id];
}

std::shared_ptr<const model> small_model() {
  auto o = test::small_options(2, 2);
  o.n_ctx = 512;
  return model::load(test::make_model("prefix_reuse", o));
}

// The request on a pipeline of its own that reuses nothing: the same tokens, and the same logits at
// every prompt position the reusing request computed (its rows in the cache, reused or not, are
// those of the same tokens: up to the summation order of the batches they were computed in).
// kv: the cache's types (the same as the reusing pipeline's); tolerance: of the logits' relative RMS.
void same_as_fresh(std::shared_ptr<const model> m, generation_request r, const result& got, const std::string& what, ffn_mode mode = ffn_mode::dense,
                   kv_types kv = {}, double tolerance = 1e-5) {
  pipeline_options o;
  o.reuse_prefixes = false;
  auto ctx = std::make_shared<inference_context>(m, 256, 2, 1, kv);
  ctx->set_mode(mode);
  pipeline p(ctx, o);
  r.all_logits = true;
  const result want = one(p, r);
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.logits.size(), r.prompt.size() - static_cast<size_t>(got.done.cached_tokens)) << what;
  double worst = 0;
  for (const auto& [pos, row] : got.logits) {
    const auto& w = want.logits.at(pos);
    double d = 0, n = 0;
    for (size_t i = 0; i < row.size(); ++i) d += (row[i] - w[i]) * (row[i] - w[i]), n += w[i] * w[i];
    worst = std::max(worst, std::sqrt(d / n));
  }
  EXPECT_LT(worst, tolerance) << what << ": the logits' relative RMS";
}

generation_request asking(std::vector<token_id> prompt, int32_t n) {
  auto r = test::greedy(std::move(prompt), n);
  r.all_logits = true;
  return r;
}

// A conversation turn by turn, each turn's prompt the history so far plus new tokens (as a chat
// client sends it): every turn reuses the slot's rows of the turn before — its prompt and the tokens
// it generated — computes only the rest, and gives the tokens of the same prompt computed whole.
TEST(PrefixReuse, ATurnReusesTheTurnBefore) {
  auto m = small_model();
  pipeline p(std::make_shared<inference_context>(m, 256, 2, 2), {});
  std::vector<token_id> history = run_of(40, 1);
  for (int turn = 0; turn < 3; ++turn) {
    auto r = asking(history, 8);
    const result got = one(p, r);
    same_as_fresh(m, r, got, "turn " + std::to_string(turn));
    if (turn > 0) {
      // the history before this turn's new tokens, but for the last generated token (never computed)
      EXPECT_EQ(got.done.cached_tokens, static_cast<int64_t>(history.size()) - 12 - 1) << "turn " << turn;
    } else {
      EXPECT_EQ(got.done.cached_tokens, 0);
    }
    history = cat(cat(history, got.tokens), run_of(12, 10 + turn));
  }
  // Without cache_prompt nothing is reused.
  auto r = test::greedy(history, 4);
  r.cache_prompt = false;
  EXPECT_EQ(one(p, r).done.cached_tokens, 0);
  // The identical request again: everything but the last prompt token.
  auto same = asking(history, 4);
  const result again = one(p, same);
  EXPECT_EQ(again.done.cached_tokens, static_cast<int64_t>(history.size()) - 1);
  same_as_fresh(m, same, again, "again");
}

// One slot, two conversations taking turns: each turn finds its history in the store's blocks (the
// slot holds the other conversation's; b's first turn reuses the 20 tokens it shares with a from the
// slot, to the token), with every block's hash alike so that only the exact tokens tell them apart.
TEST(PrefixReuse, TheStoreKeepsConversationsASlotLost) {
  auto m = small_model();
  pipeline_options o;
  o.prefix_store_bytes = 64 << 20;
  o.prefix_hash = [](int32_t, std::span<const token_id>) { return uint64_t{1}; };
  auto ctx = std::make_shared<inference_context>(m, 256, 2, 1);
  pipeline p(ctx, o);
  EXPECT_GT(ctx->prefix_store_blocks(), 0);
  std::vector<token_id> a = run_of(50, 2), b = cat(std::vector<token_id>(a.begin(), a.begin() + 20), run_of(30, 3));  // b shares a's first 20
  for (int turn = 0; turn < 3; ++turn)
    for (auto* h : {&a, &b}) {
      auto r = asking(*h, 6);
      const result got = one(p, r);
      same_as_fresh(m, r, got, "turn " + std::to_string(turn));
      const int64_t whole = turn == 0 ? (h == &b ? 20 : 0) : (static_cast<int64_t>(h->size()) - 10 - 1) / 16 * 16;
      EXPECT_EQ(got.done.cached_tokens, whole) << "turn " << turn << (h == &a ? " a" : " b");
      *h = cat(cat(*h, got.tokens), run_of(10, 20 + turn));
    }
}

// Quantized caches (q8_0, and q4_0 keys with q8_0 values): the store's blocks and a slot's rows are
// moved in their types, two conversations taking turns in one slot reuse their history from the store,
// and the text and logits are those of the same prompts computed whole with the same cache (within
// 1e-5; here the same bits: a row is quantized from the same floats whichever batch computed it).
TEST(PrefixReuse, QuantizedCachesReuseTheirRows) {
  auto o32 = test::small_options(2, 2);
  o32.n_embd = 128, o32.n_ctx = 512;  // heads of 32: a block each
  auto m = model::load(test::make_model("prefix_reuse_heads32", o32));
  for (const kv_types t : {kv_types{tensor_type::q8_0}, kv_types{tensor_type::q4_0, tensor_type::q8_0}}) {
    SCOPED_TRACE(kv_types_name(t));
    pipeline_options o;
    o.prefix_store_bytes = 16 << 20;
    o.prefix_hash = [](int32_t, std::span<const token_id>) { return uint64_t{1}; };
    auto ctx = std::make_shared<inference_context>(m, 256, 2, 1, t);
    pipeline p(ctx, o);
    std::vector<token_id> a = run_of(50, 5), b = run_of(40, 6);
    for (int turn = 0; turn < 2; ++turn)
      for (auto* h : {&a, &b}) {
        auto r = asking(*h, 6);
        const result got = one(p, r);
        same_as_fresh(m, r, got, "turn " + std::to_string(turn), ffn_mode::dense, t);
        if (turn > 0) {
          EXPECT_EQ(got.done.cached_tokens, (static_cast<int64_t>(h->size()) - 10 - 1) / 16 * 16) << "turn " << turn;
        }
        *h = cat(cat(*h, got.tokens), run_of(10, 20 + turn));
      }
  }
}

// Clients sending the same long system prompt at once: the first computes it, the others wait for it
// and copy its rows, each computing only its own tail; every answer is the one computed whole. Then
// one more, after all have ended, finds it in the store.
TEST(PrefixReuse, ConcurrentClientsComputeASharedPromptOnce) {
  auto m = small_model();
  pipeline_options o;
  o.prefix_store_bytes = 64 << 20;
  o.prefill_chunk = 16;
  auto ctx = std::make_shared<inference_context>(m, 256, 2, 4);
  pipeline p(ctx, o);
  const auto system = run_of(100, 4);
  std::vector<generation_request> rs;
  std::vector<int64_t> ids;
  for (int k = 0; k < 4; ++k) {
    rs.push_back(asking(cat(system, run_of(10, 40 + k)), 5));
    ids.push_back(p.submit(rs.back()));
  }
  auto got = drain(p, 4);
  int64_t cached = 0;
  for (int k = 0; k < 4; ++k) {
    same_as_fresh(m, rs[static_cast<size_t>(k)], got[ids[static_cast<size_t>(k)]], "client " + std::to_string(k));
    cached += got[ids[static_cast<size_t>(k)]].done.cached_tokens;
  }
  EXPECT_EQ(cached, 3 * 100);
  EXPECT_EQ(p.totals().prompt_tokens, 4 * 110 - 300);
  auto late = asking(cat(system, run_of(10, 50)), 5);
  const result l = one(p, late);
  EXPECT_GE(l.done.cached_tokens, 96);
  same_as_fresh(m, late, l, "late");
}

// A sparse file (PowerInfer's, its predictors choosing each token's neurons) and a mixture of experts
// (each token's experts): what a token computes is its own, so rows reused from a turn before or from
// another client are those computed again.
TEST(PrefixReuse, SparseAndMixtureFilesToo) {
  auto dense = test::make_model("pr_dense_relu", test::sparse_test_options(architecture::llama, hotcold::activation::relu, tensor_type::f16));
  const std::string sparse_path = (test::scratch_dir() / "pr_sparse.gguf").string();
  tools::sparse_file_options so;
  so.kind = gguf::file_kind::powerinfer;
  if (!std::filesystem::exists(sparse_path)) tools::write_sparse_model(dense, sparse_path, test::random_predictors(2, 64, 256, 32, -0.5f, 3), so);
  auto moe = test::small_options(2, 2);
  moe.n_experts = 4, moe.n_experts_used = 2, moe.n_ctx = 512, moe.act = hotcold::activation::silu;
  const std::pair<std::shared_ptr<const model>, ffn_mode> files[] = {{model::load(sparse_path), ffn_mode::sparse},
                                                                     {model::load(test::make_model("pr_moe", moe)), ffn_mode::dense}};
  for (const auto& [m, mode] : files) {
    const std::string name = mode == ffn_mode::sparse ? "sparse" : "mixture";
    pipeline_options o;
    o.prefix_store_bytes = 16 << 20;
    auto ctx = std::make_shared<inference_context>(m, 256, 2, 2);
    ctx->set_mode(mode);
    pipeline p(ctx, o);
    std::vector<token_id> history = run_of(40, 61);
    for (int turn = 0; turn < 2; ++turn) {
      auto r = asking(history, 6);
      const result got = one(p, r);
      if (turn > 0) {
        EXPECT_GT(got.done.cached_tokens, 40) << name;
      }
      same_as_fresh(m, r, got, name + " turn " + std::to_string(turn), mode);
      history = cat(cat(history, got.tokens), run_of(8, 62 + turn));
    }
    auto other = asking(cat(std::vector<token_id>(history.begin(), history.begin() + 35), run_of(9, 70)), 5);  // another client, the same beginning
    const result o2 = one(p, other);
    EXPECT_GE(o2.done.cached_tokens, 32) << name;
    same_as_fresh(m, other, o2, name + " another client", mode);
  }
}

// A follower whose leader is cancelled before it computed the shared beginning computes it itself.
TEST(PrefixReuse, ALeaderCancelledLeavesItsFollowersWhole) {
  auto m = small_model();
  pipeline_options o;
  o.prefill_chunk = 8;
  pipeline p(std::make_shared<inference_context>(m, 256, 2, 2), o);
  const auto system = run_of(120, 6);
  auto lead = asking(cat(system, run_of(5, 7)), 20), follow = asking(cat(system, run_of(5, 8)), 6);
  const int64_t a = p.submit(lead), b = p.submit(follow);
  p.cancel(a);
  auto got = drain(p, 2);
  EXPECT_EQ(got[a].done.finish, "cancelled");
  EXPECT_EQ(got[b].done.finish, "length");
  same_as_fresh(m, follow, got[b], "the follower");
}

// A hot device that holds attention and its cache (sim): rows move through its copies.
TEST(PrefixReuse, RowsMoveThroughADevicesCache) {
  auto m = small_model();
  device_residency r;
  const int64_t layers = m->hp().n_layer;
  r.attention.assign(static_cast<size_t>(layers), 0);
  r.predictor.assign(static_cast<size_t>(layers), 0);
  r.ffn.assign(static_cast<size_t>(layers), 0);
  r.attention[1] = 1;  // layer 1's cache on the device, layer 0's on the host
  r.ctx = 256, r.n_seq = 1;
  devices::device_options dopt;
  dopt.kind = "sim";
  dopt.budget = 64 << 20;
  auto dev = devices::make_device(dopt);
  auto ctx = std::make_shared<inference_context>(m, 256, 2, 1);
  ctx->set_device_layers(std::make_shared<device_layers>(m, r, dev, tensor_type::f16));
  pipeline_options o;
  o.prefix_store_bytes = 16 << 20;
  pipeline p(ctx, o);
  std::vector<token_id> a = run_of(40, 9), b = run_of(40, 10);
  const result a1 = one(p, asking(a, 4));
  one(p, asking(b, 4));  // the slot now holds b; a is in the store
  auto again = asking(cat(cat(a, a1.tokens), run_of(6, 11)), 6);
  const result a2 = one(p, again);
  EXPECT_EQ(a2.done.cached_tokens, 32);
  same_as_fresh(m, again, a2, "a's second turn");
}

}  // namespace
}  // namespace hotcold::actors

namespace hotcold::actors {
namespace {

// The actors' context shift (--context-shift, --keep): a request that fills its context goes on,
// each shift keeping BOS and `keep` tokens, dropping half of the rest; its tokens are those of the
// forward pass called directly with the same shifts and the same sampler (seeded, at temperature 1:
// this small model's greedy text repeats one token, which no shift would change) — and different with
// another keep. Without it, the request ends "context".
TEST(ContextShift, TheActorsShiftAsTheForwardPassDoes) {
  auto o = test::small_options(2, 2);
  o.n_ctx = 512;
  auto m = model::load(test::make_model("context_shift", o));
  std::vector<token_id> prompt = run_of(12, 31);
  prompt[0] = m->vocabulary().bos();
  const int64_t n_ctx = 32;
  sampling_params sp;
  sp.temperature = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = 5;
  auto request = [&] {
    auto r = test::greedy(prompt, 70);
    r.sampling = sp;
    return r;
  };
  auto direct = [&](int64_t keep, int n) {
    inference_context ctx(m, n_ctx, 2, 1);
    sampler smp(sp);
    for (token_id t : prompt) smp.accept(t);
    auto logits = ctx.forward_batch(prompt, 0);
    int64_t pos = static_cast<int64_t>(prompt.size());
    std::vector<token_id> out;
    for (int i = 0; i < n; ++i) {
      const token_id t = smp.sample(logits);
      smp.accept(t);
      out.push_back(t);
      if (pos >= n_ctx) {
        const cache_op op = context_shift(0, pos, n_ctx, keep, static_cast<int64_t>(prompt.size()), true);
        ctx.apply(std::span(&op, 1));
        pos -= op.count;
      }
      logits = ctx.forward(t, pos++);
    }
    return out;
  };
  for (int64_t keep : {0, 5, -1}) {
    pipeline_options po;
    po.context_shift = true;
    po.keep = keep;
    pipeline p(std::make_shared<inference_context>(m, n_ctx, 2, 1), po);
    const result got = one(p, request());
    EXPECT_EQ(got.done.finish, "length");
    EXPECT_EQ(got.tokens, direct(keep, 70)) << "keep " << keep;
  }
  EXPECT_NE(direct(0, 70), direct(-1, 70));
  pipeline p(std::make_shared<inference_context>(m, n_ctx, 2, 1), {});
  const result ended = one(p, request());
  EXPECT_EQ(ended.done.finish, "context");
  EXPECT_EQ(ended.tokens.size(), static_cast<size_t>(n_ctx) - prompt.size());
}

}  // namespace
}  // namespace hotcold::actors
