// The KV cache's types (--cache-type-k, --cache-type-v): f32, f16, q8_0 and q4_0, keys' apart from
// values'. Each is held to model/reference rounding its keys and values (and, for quantized keys, the
// query) the same way; the rows move through the prefix store byte for byte; a context shift turns
// quantized keys; a device that runs host work holds such a cache, a GPU's attention leaves it on the CPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "devices/device.hpp"
#include "engine/forward.hpp"
#include "engine/kv_cache.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "loader/open.hpp"
#include "model/gguf.hpp"
#include "model/reference.hpp"
#include "tests/model/tiny_models.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold {
namespace {

// Heads of 64 (blocks of 32 fit them), two KV heads for four query heads, two layers.
std::string model_of_heads_64(int64_t n_layer = 2, uint32_t seed = 5, activation act = activation::silu, tensor_type type = tensor_type::f32) {
  tools::gen_model_options o;
  o.arch = architecture::llama;
  o.act = act;
  o.type = type;
  o.n_embd = 256, o.n_ff = 256, o.n_layer = n_layer, o.n_head = 4, o.n_head_kv = 2, o.n_ctx = 512, o.seed = seed;
  return test::make_model("kv_heads64_" + std::to_string(n_layer) + "_" + std::to_string(seed) + std::string(activation_name(act)) + std::string(tensor_type_name(type)), o);
}

std::vector<token_id> tokens_of(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<token_id> t{1};
  while (t.size() < n) t.push_back(static_cast<token_id>(3 + rng() % 250));
  return t;
}

const kv_types every_pair[] = {{tensor_type::q8_0}, {tensor_type::q4_0}, {tensor_type::q8_0, tensor_type::f16}, {tensor_type::f16, tensor_type::q4_0},
                               {tensor_type::f32, tensor_type::q8_0}};

// 300 tokens one at a time (decode: past 256 keys, two ranges of keys a token and several tiles
// each) and as one batch (the prompt's blocks, each KV head's rows widened): both the reference with
// the same rounding, which is far from the one of an F16 cache (a cache that ignored its type, or
// quantized keys meeting an unrounded query, 0.8-1.3e-3 away, would fail; float and double keys near a
// quantization step round apart now and then: 3.5e-5 here).
TEST(KvTypes, QuantizedCachesComputeTheirRoundingOfTheModel) {
  const auto path = model_of_heads_64();
  const auto m = model::load(path);
  const auto file = gguf::file::open(path);
  const auto tokens = tokens_of(300, 1);
  const auto f16 = reference_model(file, tensor_type::f16, 320).logits(tokens);
  for (const kv_types t : every_pair) {
    const auto want = reference_model(file, t, 320).logits(tokens);
    EXPECT_GT(test::rel_diff(want, f16), 3e-4) << kv_types_name(t) << ": its rounding would not show";
    for (bool batch : {false, true}) {
      inference_context ctx(m, 320, 2, 1, t);
      EXPECT_EQ(ctx.cache_types(), t);
      EXPECT_LT(test::rel_diff(test::run_tokens(ctx, tokens, batch), want), 1e-4) << kv_types_name(t) << (batch ? " as a batch" : " a token at a time");
    }
  }
}

// A quantized type whose blocks of 32 would cross a head (heads of 16) is refused by name, as llama.cpp
// refuses it; so is a type the cache does not hold.
TEST(KvTypes, RefusedWhereTheBlocksCrossAHead) {
  auto m = model::load(test::make_model("kv_heads16", test::small_options(1, 2)));
  ASSERT_EQ(m->hp().head_dim(), 16);
  try {
    inference_context ctx(m, 16, 1, 1, kv_types{tensor_type::f16, tensor_type::q8_0});
    ADD_FAILURE() << "a q8_0 cache of heads of 16 was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("values' cache of q8_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(inference_context(m, 16, 1, 1, tensor_type::q4_k), std::invalid_argument);
  EXPECT_NO_THROW(inference_context(m, 16, 1, 1, kv_types{tensor_type::f32, tensor_type::f16}));
}

// Keys of q4_0 (rows of 72 bytes) or of f16 (kept in tiles of sixteen positions) and values of f32
// (rows of 1,024 bytes): a slot's rows saved into the prefix store, loaded into another slot and
// copied into a third arrive byte for byte, each layer's keys and values where they belong; so do
// sixteen positions saved from inside two tiles and loaded at a tile's start, and a copy that starts
// and ends inside tiles.
TEST(KvTypes, RowsMoveThroughTheStoreByteForByte) {
  const auto m = model::load(model_of_heads_64());
  const hparams& hp = m->hp();
  for (const kv_types t : {kv_types{tensor_type::q4_0, tensor_type::f32}, kv_types{tensor_type::f16, tensor_type::f32}}) {
    SCOPED_TRACE(kv_types_name(t));
    kv_cache kv(hp, 64, 4, t);
    EXPECT_EQ(kv.k_tiled(0), t.k == tensor_type::f16 && kernels::cpu_kernels().attend_key_tiles);  // (tiles with AVX-512's kernel)
    ASSERT_EQ(kv.row_bytes(false), t.k == tensor_type::q4_0 ? hp.n_embd_kv() / 32 * 18 : hp.n_embd_kv() * 2);
    ASSERT_EQ(kv.row_bytes(true), hp.n_embd_kv() * 4);
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(hp.n_embd_kv()));
    for (int64_t il = 0; il < hp.n_layer; ++il)
      for (int64_t p = 0; p < 40; ++p) {
        for (auto& x : row) x = d(rng);
        kv.store_k(0, il, p, row.data());
        for (auto& x : row) x = d(rng);
        kv.store_v(kv.v_row(0, il, p), row.data());
      }
    {  // the keys read back as rows are those stored, in their type (whatever the layout): position 39 of layer 1
      std::vector<float> k39(static_cast<size_t>(hp.n_embd_kv()));
      for (auto& x : k39) x = d(rng);
      kv.store_k(0, 1, 39, k39.data());
      std::vector<uint8_t> want(static_cast<size_t>(kv.row_bytes(false))), got(want.size());
      kernels::kv_store_row(t.k, k39.data(), want.data(), hp.n_embd_kv());
      kv.read_rows(0, 1, false, 39, 1, got.data());
      EXPECT_EQ(got, want);
    }
    kv.reserve_store(4, 16);
    EXPECT_EQ(kv.block_bytes(), static_cast<uint64_t>(16 * hp.n_layer * (kv.row_bytes(false) + kv.row_bytes(true))));
    kv.apply({cache_op::kind::save, 0, 2, 16, 0});  // slot 0's positions 16..31 into block 2
    kv.apply({cache_op::kind::load, 1, 2, 0, 0});   // block 2 into slot 1's positions 0..15
    kv.apply({cache_op::kind::copy, 2, 0, 0, 40});  // slot 0's 40 positions into slot 2
    kv.apply({cache_op::kind::save, 0, 3, 8, 0});   // slot 0's positions 8..23 (inside two tiles) into block 3
    kv.apply({cache_op::kind::load, 1, 3, 32, 0});  // block 3 into slot 1's positions 32..47
    kv.apply({cache_op::kind::copy, 3, 0, 5, 30});  // slot 0's positions 5..34 into slot 3
    for (int64_t il = 0; il < hp.n_layer; ++il)
      for (bool values : {false, true}) {
        const int64_t rb = kv.row_bytes(values);
        std::vector<uint8_t> a(static_cast<size_t>(40 * rb)), b(a.size()), c(static_cast<size_t>(16 * rb)), e(c.size()), f(static_cast<size_t>(30 * rb));
        kv.read_rows(0, il, values, 0, 40, a.data());
        kv.read_rows(2, il, values, 0, 40, b.data());
        kv.read_rows(1, il, values, 0, 16, c.data());
        kv.read_rows(1, il, values, 32, 16, e.data());
        kv.read_rows(3, il, values, 5, 30, f.data());
        const std::string what = "layer " + std::to_string(il) + (values ? " values" : " keys");
        EXPECT_EQ(a, b) << what << ": the copy";
        EXPECT_EQ(std::memcmp(c.data(), a.data() + 16 * rb, c.size()), 0) << what << ": through the store";
        EXPECT_EQ(std::memcmp(e.data(), a.data() + 8 * rb, e.size()), 0) << what << ": through the store from inside two tiles";
        EXPECT_EQ(std::memcmp(f.data(), a.data() + 5 * rb, f.size()), 0) << what << ": a copy inside tiles";
      }
  }
}

// A context shift widens each moved quantized key, turns it and quantizes it again (as llama.cpp's
// shift does): the next logits are those of the kept tokens computed at their new positions, within
// what quantizing the turned keys again moves (without the turn they are 6% away).
TEST(KvTypes, AContextShiftTurnsQuantizedKeys) {
  const auto m = model::load(model_of_heads_64(1, 9));
  const auto tokens = tokens_of(60, 4);
  const int64_t keep = 4, discard = 28;
  const token_id next = 77;
  for (const kv_types t : {kv_types{tensor_type::q8_0}, kv_types{tensor_type::q4_0, tensor_type::q8_0}}) {
    inference_context shifted(m, 64, 2, 1, t);
    for (size_t i = 0; i < tokens.size(); ++i) shifted.forward(tokens[i], static_cast<int64_t>(i));
    const cache_op op{cache_op::kind::shift, 0, static_cast<int64_t>(tokens.size()), keep, discard};
    shifted.apply(std::span(&op, 1));
    const auto got = shifted.forward(next, static_cast<int64_t>(tokens.size()) - discard);
    const std::vector<std::vector<float>> a{{got.begin(), got.end()}};
    std::vector<token_id> kept(tokens.begin(), tokens.begin() + keep);
    kept.insert(kept.end(), tokens.begin() + keep + discard, tokens.end());
    inference_context fresh(m, 64, 2, 1, t);
    for (size_t i = 0; i < kept.size(); ++i) fresh.forward(kept[i], static_cast<int64_t>(i));
    const auto want = fresh.forward(next, static_cast<int64_t>(kept.size()));
    const std::vector<std::vector<float>> b{{want.begin(), want.end()}};
    EXPECT_LT(test::rel_diff(a, b), t.k == tensor_type::q8_0 ? 5e-3 : 3e-2) << kv_types_name(t);
  }
}

std::shared_ptr<devices::device> sim(bool gpu_like) {
  devices::device_options o;
  o.kind = "sim";
  o.budget = 256 << 20;
  o.sim_kernels = gpu_like;
  return devices::make_device(o);
}

// A sim device running host work holds attention with a q8_0 cache (its logits are the CPU's); one
// that computes as a GPU does keeps attention and the cache on the CPU for a sparse file, and refuses a
// dense file's whole layers by name.
TEST(KvTypes, ADeviceHoldsAQuantizedCacheOrLeavesItOnTheCpu) {
  const auto path = model_of_heads_64();
  const auto m = model::load(path);
  const auto tokens = tokens_of(40, 6);
  loader::open_options o;
  o.ctx = 64, o.threads = 2, o.kv = kv_types{tensor_type::q8_0};
  inference_context cpu(m, 64, 2, 1, o.kv);
  const auto want = test::run_tokens(cpu, tokens, false);
  auto held = loader::open_for_running(m, sim(false), o);
  ASSERT_TRUE(held.device);
  EXPECT_TRUE(held.device->attention(0));
  EXPECT_EQ(held.ctx->cache_types(), o.kv);
  EXPECT_LT(test::rel_diff(test::run_tokens(*held.ctx, tokens, false), want), 1e-6);
  try {
    loader::open_for_running(m, sim(true), o);
    ADD_FAILURE() << "a GPU-like device took a dense file's layers with a q8_0 cache";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("f16 or f32 cache, not q8_0"), std::string::npos) << e.what();
  }
}

// A sparse file on a device that computes as a GPU does: its attention kernels read f16 or f32, so
// with a q8_0 cache attention and its cache stay on the CPU (said in the log) while the hot rows go to
// the device; the logits are the CPU's.
TEST(KvTypes, AGpuLikeDeviceLeavesAQuantizedCachesAttentionOnTheCpu) {
  const auto dense_path = model_of_heads_64(2, 7, activation::relu, tensor_type::f16);  // (F16 rows: what a GPU's kernels read)
  const std::string sparse_path = (test::scratch_dir() / "kv_heads64_sparse.gguf").string();
  tools::write_sparse_model(dense_path, sparse_path, test::random_predictors(2, 256, 256, 16, 0.0f, 3), {});
  const auto m = model::load(sparse_path);
  ASSERT_TRUE(m->has_predictors());
  const auto tokens = tokens_of(24, 8);
  std::string said;
  loader::open_options o;
  o.ctx = 64, o.threads = 2, o.kv = kv_types{tensor_type::q8_0}, o.mode = ffn_mode::sparse;
  o.hot = test::every_third_hot(2, 256);
  o.log = [&](const std::string& line) { said += line + "\n"; };
  auto held = loader::open_for_running(m, sim(true), o);
  ASSERT_TRUE(held.device);
  EXPECT_FALSE(held.device->attention(0));
  EXPECT_FALSE(held.device->attention(1));
  EXPECT_NE(said.find("attention kernels read an f16 or f32 cache, not q8_0: attention and its cache stay on the CPU"), std::string::npos) << said;
  inference_context cpu(m, 64, 2, 1, o.kv);
  cpu.set_mode(ffn_mode::sparse);
  EXPECT_LT(test::rel_diff(test::run_tokens(*held.ctx, tokens, false), test::run_tokens(cpu, tokens, false)), 1e-4);
}

}  // namespace
}  // namespace hotcold
