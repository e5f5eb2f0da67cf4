// The conventions of qwen2, qwen3 and phi3 files each change the model: the same file with one of them
// undone (biases zeroed, q's and k's norms swapped, phi3's gate and up halves swapped, the short RoPE
// factors instead of the long ones) has other logits in model/reference, so a path that ignored one
// could not agree with the reference (tests/engine/test_forward.cpp: the engine agrees on every one of
// these files, one token at a time and as a batch, in every weight type). And a file missing what its
// architecture requires is refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "engine/forward.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/reference.hpp"
#include "tests/model/tiny_models.hpp"

namespace hotcold {
namespace {

// A copy of `path` with each tensor's bytes passed through `edit` (by name), `drop`'s tensors and
// `drop_keys`' metadata left out.
std::string rewrite(const std::string& path, const std::string& name, const std::function<void(std::string_view, std::vector<uint8_t>&)>& edit,
                    const std::set<std::string>& drop = {}, const std::set<std::string>& drop_keys = {}) {
  const auto out = (test::scratch_dir() / (name + ".gguf")).string();
  const auto f = gguf::file::open(path);
  gguf::writer w;
  for (const auto& kv : f.metadata())
    if (!drop_keys.contains(std::string(kv.key))) w.set_value(kv.key, kv.val);
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    if (drop.contains(std::string(t.name))) continue;
    storage.emplace_back(t.data, t.data + t.n_bytes);
    edit(t.name, storage.back());
    w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims), storage.back());
  }
  w.write(out);
  return out;
}

tools::gen_model_options arch_options(architecture a) {
  auto o = test::small_options(2, 2);
  o.arch = a;
  o.act = activation::silu;
  o.n_ctx = 64;
  o.norm_spread = 0.3;
  o.seed = 11;
  return o;
}

const std::vector<token_id> tokens{1, 250, 17, 299, 3, 120, 44, 9};

double logits_apart(const std::string& a, const std::string& b, int64_t n_ctx_a = 0, int64_t n_ctx_b = 0) {
  const auto fa = gguf::file::open(a), fb = gguf::file::open(b);
  return test::rel_diff(reference_model(fb, tensor_type::f32, n_ctx_b).logits(tokens), reference_model(fa, tensor_type::f32, n_ctx_a).logits(tokens));
}

constexpr double apart = 20 * test::f16_kv_tolerance;  // far beyond any agreement the suite accepts for float weights

TEST(Qwen2, BiasesOnQKVChangeTheModel) {
  auto o = arch_options(architecture::qwen2);
  const auto path = test::make_model("arch_qwen2", o);
  const auto hp = read_hparams(gguf::file::open(path));
  EXPECT_EQ(hp.rope, rope_style::neox);
  for (const char* which : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
    const auto zeroed = rewrite(path, std::string("arch_qwen2_no_") + which, [&](std::string_view n, std::vector<uint8_t>& b) {
      if (n.ends_with(which)) std::fill(b.begin(), b.end(), 0);
    });
    EXPECT_GT(logits_apart(path, zeroed), apart) << which;
  }
  // And a qwen2 file without them is refused.
  const auto missing = rewrite(path, "arch_qwen2_missing_bias", [](std::string_view, std::vector<uint8_t>&) {}, {"blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"});
  try {
    model::load(missing);
    ADD_FAILURE() << "a qwen2 file without biases loaded";
  } catch (const model_error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.attn_q.bias"), std::string::npos) << e.what();
  }
}

TEST(Qwen3, PerHeadNormsOfQAndKChangeTheModelAndHeadsMayBeWiderThanTheEmbedding) {
  auto o = arch_options(architecture::qwen3);
  o.head_dim = 24;  // 4 heads of 24: q is 96 wide for an embedding of 64
  o.tied_output = true;
  const auto path = test::make_model("arch_qwen3", o);
  const auto f = gguf::file::open(path);
  const auto hp = read_hparams(f);
  EXPECT_EQ(hp.head_dim(), 24);
  EXPECT_EQ(hp.n_embd_q(), 96);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  auto m = model::load(path);
  EXPECT_TRUE(m->tied_output());
  EXPECT_EQ(m->weights().layers[0].wo.ne0, 96);
  const auto swapped = rewrite(path, "arch_qwen3_swapped_norms", [&](std::string_view n, std::vector<uint8_t>& b) {
    if (!n.ends_with("attn_q_norm.weight") && !n.ends_with("attn_k_norm.weight")) return;
    const auto other = std::string(n).replace(n.find(n.ends_with("attn_q_norm.weight") ? "_q_" : "_k_"), 3, n.ends_with("attn_q_norm.weight") ? "_k_" : "_q_");
    const auto* t = f.find_tensor(other);
    std::memcpy(b.data(), t->data, b.size());
  });
  // (q.k multiplies the two weights channel by channel, so swapping them moves only what RoPE mixes
  // across a pair: small, but beyond any agreement.)
  EXPECT_GT(logits_apart(path, swapped), apart);
  const auto unit = rewrite(path, "arch_qwen3_unit_norms", [](std::string_view n, std::vector<uint8_t>& b) {
    if (!n.ends_with("_norm.weight") || !(n.find("attn_q") != std::string_view::npos || n.find("attn_k") != std::string_view::npos)) return;
    for (size_t i = 0; i < b.size(); i += 4) {
      const float one = 1.0f;
      std::memcpy(b.data() + i, &one, 4);
    }
  });
  EXPECT_GT(logits_apart(path, unit), apart) << "the norms' weights matter, not only the normalization";
  const auto missing = rewrite(path, "arch_qwen3_missing_norm", [](std::string_view, std::vector<uint8_t>&) {}, {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight"});
  EXPECT_THROW(model::load(missing), model_error);
}

TEST(Phi3, FusedProductsAndLongRopeFollowLlamaCpp) {
  auto o = arch_options(architecture::phi3);
  o.phi3_rope_orig_ctx = 8;
  const auto path = test::make_model("arch_phi3", o);
  const auto f = gguf::file::open(path);
  ASSERT_TRUE(f.find_tensor("blk.0.attn_qkv.weight"));
  ASSERT_EQ(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_up.weight")->ne[1], 2 * o.n_ff);
  const auto hp = read_hparams(f);
  EXPECT_EQ(hp.n_ctx_orig, 8);
  EXPECT_GT(hp.rope_attn_factor, 1.0f);
  EXPECT_EQ(&hp.rope_factors_for(8), &hp.rope_factors_short) << "at the original context: the short factors";
  EXPECT_EQ(&hp.rope_factors_for(9), &hp.rope_factors_long) << "above it: the long ones (llama.cpp: n_ctx_seq > n_ctx_orig_yarn)";
  // The gate is the first half of ffn_up (ggml_swiglu's order): the halves the other way round are another model.
  const auto swapped = rewrite(path, "arch_phi3_halves_swapped", [&](std::string_view n, std::vector<uint8_t>& b) {
    if (!n.ends_with("ffn_up.weight")) return;
    std::rotate(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b.size() / 2), b.end());
  });
  EXPECT_GT(logits_apart(path, swapped), apart);
  // Long and short factors give other models, and the engine follows its context's size.
  EXPECT_GT(logits_apart(path, path, 16, 8), apart);
  for (int64_t n_ctx : {8, 16}) {
    SCOPED_TRACE(n_ctx);
    inference_context ctx(model::load(path), n_ctx, 2, 1, tensor_type::f32);
    EXPECT_LT(test::rel_diff(test::run_tokens(ctx, tokens, true), reference_model(f, tensor_type::f32, n_ctx).logits(tokens)), 1e-5);
  }
  // The attention factor scales what RoPE turns.
  const auto no_factor = rewrite(path, "arch_phi3_no_attn_factor", [](std::string_view, std::vector<uint8_t>&) {}, {}, {"phi3.rope.scaling.attn_factor"});
  ASSERT_EQ(read_hparams(gguf::file::open(no_factor)).rope_attn_factor, 1.0f);
  EXPECT_GT(logits_apart(path, no_factor, 16, 16), apart);
}

}  // namespace
}  // namespace hotcold

namespace hotcold {
namespace {

// A copy of `path` with f32 metadata `key` set to `value` (its tensors as they are).
std::string with_f32_key(const std::string& path, const std::string& name, const std::string& key, float value) {
  const auto out = (test::scratch_dir() / (name + ".gguf")).string();
  const auto f = gguf::file::open(path);
  gguf::writer w;
  for (const auto& kv : f.metadata())
    if (kv.key != key) w.set_value(kv.key, kv.val);
  w.set_f32(key, value);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, std::span<const int64_t>(t.ne.data(), t.n_dims), {t.data, static_cast<size_t>(t.n_bytes)});
  w.write(out);
  return out;
}

// Gemma 2 as llama.cpp reads it: the keys' defaults and the query scale's rule by the file's size; and
// each of its conventions changes the model — the window, the caps of scores and logits, the norms after
// attention and after the FFN — so a path ignoring one could not agree with model/reference (the
// engine does, on every path: tests/engine/test_forward.cpp, the actors and workers' tests).
TEST(Gemma2, WindowCapsAndPostNormsChangeTheModel) {
  auto o = arch_options(architecture::gemma2);
  o.act = activation::gelu;
  o.sliding_window = 3;
  o.attn_softcap = 2.0f, o.final_softcap = 3.0f;
  const auto path = test::make_model("arch_gemma2", o);
  const auto f = gguf::file::open(path);
  const auto hp = read_hparams(f);
  EXPECT_EQ(hp.rope, rope_style::neox);
  EXPECT_EQ(hp.act, activation::gelu);
  EXPECT_TRUE(hp.embd_scaled);
  EXPECT_EQ(hp.n_swa, 3);
  EXPECT_TRUE(hp.sliding(0) && !hp.sliding(1)) << "llama.cpp slides layers 0, 2, 4, ...";
  EXPECT_FLOAT_EQ(hp.q_scale, 1.0f / std::sqrt(16.0f)) << "1 / sqrt(head_dim) but in a file of 46 layers";
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_TRUE(model::load(path)->tied_output());
  // Without the keys: Gemma 2's window and caps.
  const auto bare = rewrite(path, "arch_gemma2_bare", [](std::string_view, std::vector<uint8_t>&) {}, {},
                            {"gemma2.attention.sliding_window", "gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping"});
  const auto hb = read_hparams(gguf::file::open(bare));
  EXPECT_EQ(hb.n_swa, 4096);
  EXPECT_FLOAT_EQ(hb.attn_softcap, 50.0f);
  EXPECT_FLOAT_EQ(hb.final_softcap, 30.0f);
  // Each convention undone is another model (the 8 tokens pass the window of 3).
  EXPECT_GT(logits_apart(path, with_f32_key(path, "arch_gemma2_no_attn_cap", "gemma2.attn_logit_softcapping", 1e6f)), apart);
  EXPECT_GT(logits_apart(path, with_f32_key(path, "arch_gemma2_no_final_cap", "gemma2.final_logit_softcapping", 1e6f)), apart);
  EXPECT_GT(logits_apart(path, bare), apart) << "the window of 3 against 4096 (and the caps)";
  for (const char* which : {"post_attention_norm.weight", "post_ffw_norm.weight"}) {
    const auto unit = rewrite(path, std::string("arch_gemma2_unit_") + which, [&](std::string_view n, std::vector<uint8_t>& b) {
      if (!n.ends_with(which)) return;
      for (size_t i = 0; i < b.size(); i += 4) {
        const float one = 1.0f;
        std::memcpy(b.data() + i, &one, 4);
      }
    });
    EXPECT_GT(logits_apart(path, unit), apart) << which;
  }
  // A file missing a post-norm is refused by name.
  const auto missing = rewrite(path, "arch_gemma2_missing_post_norm", [](std::string_view, std::vector<uint8_t>&) {}, {"blk.1.post_ffw_norm.weight"});
  try {
    model::load(missing);
    ADD_FAILURE() << "a gemma2 file without its post-FFN norm loaded";
  } catch (const model_error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.1.post_ffw_norm.weight"), std::string::npos) << e.what();
  }
  // 46 layers (Gemma 2 27B's count): llama.cpp scales the queries by 1 / sqrt(n_embd / n_head)
  // instead, here 1 / sqrt(64 / 4) against heads of 24 — and the engine follows the reference there.
  auto big = arch_options(architecture::gemma2);
  big.act = activation::gelu, big.n_layer = 46, big.head_dim = 24, big.n_ff = 32;
  const auto big_path = test::make_model("arch_gemma2_46", big);
  const auto bf = gguf::file::open(big_path);
  EXPECT_FLOAT_EQ(read_hparams(bf).q_scale, 1.0f / 4.0f);
  inference_context ctx(model::load(big_path), 16, 2, 1, tensor_type::f32);
  EXPECT_LT(test::rel_diff(test::run_tokens(ctx, tokens, true), reference_model(bf, tensor_type::f32, 16).logits(tokens)), 1e-5);
}

}  // namespace
}  // namespace hotcold
