// Model files hotcold cannot run give one error naming what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "model/page_buffer.hpp"
#include "tests/model/edited_files.hpp"
#include "tests/model/tiny_models.hpp"

namespace hotcold {
namespace {

using edit = test::gguf_edit;
using test::expect_model_error;

// A copy of a small generated llama file with one thing changed.
std::string edited_model(const std::string& name, const edit& e) {
  auto o = test::small_options(2, 2);
  o.type = tensor_type::f32;
  return test::edited_copy(test::make_model("errors_base", o), name, e);
}

TEST(ModelErrors, MissingTensor) {
  edit e;
  e.tensor = [](std::string& n, tensor_type&, std::vector<int64_t>&, std::vector<uint8_t>&) { return n != "blk.1.ffn_up.weight"; };
  expect_model_error(edited_model("missing", e), "tensor blk.1.ffn_up.weight is missing");
}

TEST(ModelErrors, WrongShape) {
  edit e;
  e.tensor = [](std::string& n, tensor_type&, std::vector<int64_t>& ne, std::vector<uint8_t>&) {
    if (n == "blk.0.attn_k.weight") std::swap(ne[0], ne[1]);
    return true;
  };
  expect_model_error(edited_model("shape", e), "tensor blk.0.attn_k.weight has shape [32, 64], expected [64, 32]");
}

TEST(ModelErrors, UnsupportedType) {
  edit e;
  e.tensor = [](std::string& n, tensor_type& t, std::vector<int64_t>& ne, std::vector<uint8_t>& bytes) {
    if (n == "blk.0.ffn_down.weight") {
      t = tensor_type::q5_0;
      bytes.assign(static_cast<size_t>(ne[0] * ne[1] / 32 * 22), 0);
    }
    return true;
  };
  expect_model_error(edited_model("type", e), "tensor blk.0.ffn_down.weight has type Q5_0, which hotcold does not compute with");
}

TEST(ModelErrors, UnknownArchitecture) {
  edit e;
  e.keep_key = [](std::string_view k) { return k != "general.architecture"; };
  e.add_keys = [](gguf::writer& w) { w.set_string("general.architecture", "gptj"); };
  expect_model_error(edited_model("arch", e), "unknown architecture 'gptj'");
}

TEST(ModelErrors, MissingHyperParameter) {
  edit e;
  e.keep_key = [](std::string_view k) { return k != "llama.block_count"; };
  expect_model_error(edited_model("hparam", e), "metadata key llama.block_count is missing");
}

// A count larger than the tensors present is refused by name before anything is sized by it (a
// block count of 2^32 - 1 grew a process past 8 GB before).
TEST(ModelErrors, BlockCountLargerThanTheTensors) {
  for (uint32_t n : {4294967295u, 3u, 0u}) {
    edit e;
    e.keep_key = [](std::string_view k) { return k != "llama.block_count"; };
    e.add_keys = [n](gguf::writer& w) { w.set_u32("llama.block_count", n); };
    expect_model_error(edited_model("blocks" + std::to_string(n), e),
                       n == 0 ? "llama.block_count = 0 must be positive" : fmt::format("llama.block_count is {}, but the file's tensors hold 2 blocks (blk.0 .. blk.1)", n));
  }
}

// Values that cannot be right are refused by name: a NaN or negative epsilon, a RoPE base that is not
// positive, a negative scaling factor.
TEST(ModelErrors, ValuesThatCannotBeRight) {
  struct bad {
    const char* key;
    float value;
    const char* says;
  };
  for (const bad& b : {bad{"llama.attention.layer_norm_rms_epsilon", NAN, "llama.attention.layer_norm_rms_epsilon = nan is not a norm's epsilon"},
                       bad{"llama.attention.layer_norm_rms_epsilon", -1e-5f, "is not a norm's epsilon"},
                       bad{"llama.rope.freq_base", -10000.0f, "llama.rope.freq_base = -10000 is not a RoPE base"},
                       bad{"llama.rope.freq_base", 0.0f, "llama.rope.freq_base = 0 is not a RoPE base"},
                       bad{"llama.rope.scaling.factor", -2.0f, "rope.scaling.factor = -2 is not a scaling factor"}}) {
    edit e;
    const std::string key = b.key;
    e.keep_key = [key](std::string_view k) { return k != key; };
    e.add_keys = [b](gguf::writer& w) { w.set_f32(b.key, b.value); };
    expect_model_error(edited_model("value", e), b.says);
  }
}

TEST(ModelErrors, BadActivationKey) {
  edit e;
  e.keep_key = [](std::string_view k) { return k != "hotcold.activation"; };
  e.add_keys = [](gguf::writer& w) { w.set_string("hotcold.activation", "swish"); };
  expect_model_error(edited_model("act", e), "hotcold.activation = 'swish' is not one of");
}

TEST(ModelErrors, ActivationDefaults) {
  // Without hotcold's key a llama.cpp llama file means SiLU; a PowerInfer (PWRI) file means ReLU.
  edit e;
  e.keep_key = [](std::string_view k) { return k != "hotcold.activation"; };
  auto m = model::load(edited_model("no_act", e));
  EXPECT_EQ(m->hp().act, activation::silu);
  EXPECT_EQ(m->hp().rope, rope_style::adjacent_pairs);
  EXPECT_FALSE(m->tied_output());
}

TEST(ModelErrors, TiedEmbeddingsWhenOutputIsAbsent) {
  edit e;
  e.tensor = [](std::string& n, tensor_type&, std::vector<int64_t>&, std::vector<uint8_t>&) { return n != "output.weight"; };
  auto m = model::load(edited_model("tied", e));
  EXPECT_TRUE(m->tied_output());
  EXPECT_EQ(m->weights().output.data, m->weights().token_embd.data);
}

TEST(ModelErrors, MmapAndPrivateCopyAgree) {
  auto path = test::make_model("mmap_vs_copy", test::small_options(1));
  auto a = model::load(path, {false});
  auto b = model::load(path, {true});
  const auto& ta = a->weights().layers[0].ffn_up;
  const auto& tb = b->weights().layers[0].ffn_up;
  ASSERT_EQ(ta.row_bytes, tb.row_bytes);
  EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.row_bytes * ta.ne1), 0);
  EXPECT_NE(ta.data, tb.data);
}

// The weights' copy and the KV cache live in page buffers: zeroed, writable end to end, owned by one
// buffer at a time (a move leaves the source empty, so nothing is unmapped twice).
TEST(PageBuffer, ZeroedWritableAndMovedNotCopied) {
  const size_t bytes = (size_t{3} << 20) + 100;  // more than one 2 MB page, not a multiple of one
  page_buffer a(bytes, "a test");
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), bytes);
  auto* p = static_cast<unsigned char*>(a.data());
  size_t nonzero = 0;
  for (size_t i = 0; i < bytes; i += 4096) nonzero += p[i] != 0;
  EXPECT_EQ(nonzero, 0u);
  p[0] = 1, p[bytes - 1] = 2;
  page_buffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  ASSERT_EQ(b.data(), p);
  EXPECT_EQ(static_cast<unsigned char*>(b.data())[bytes - 1], 2);
  page_buffer c(16, "another test");
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(static_cast<unsigned char*>(c.data())[0], 1);
}

}  // namespace
}  // namespace hotcold
