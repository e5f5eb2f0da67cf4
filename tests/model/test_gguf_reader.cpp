// Reading well-formed GGUF files: every value type, arrays, nested arrays, tensors, alignment.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gguf.hpp"
#include "tests/model/gguf_bytes.hpp"

namespace hotcold {
namespace {

using gguf::value_type;
using test::gguf_bytes;

// One key of each of the 13 value types, an array of strings, an array of arrays, two tensors.
std::vector<uint8_t> all_types_file(std::string_view magic = "GGUF") {
  gguf_bytes g;
  g.header(2, 16, 3, magic);
  g.str("t.u8").u32(0).put<uint8_t>(200);
  g.str("t.i8").u32(1).put<int8_t>(-100);
  g.str("t.u16").u32(2).put<uint16_t>(60000);
  g.str("t.i16").u32(3).put<int16_t>(-30000);
  g.str("t.u32").u32(4).put<uint32_t>(4000000000u);
  g.str("t.i32").u32(5).put<int32_t>(-2000000000);
  g.str("t.f32").u32(6).put<float>(1.5f);
  g.str("t.bool").u32(7).put<uint8_t>(1);
  g.str("t.string").u32(8).str("héllo");
  g.str("t.u64").u32(10).put<uint64_t>(18000000000000000000ull);
  g.str("t.i64").u32(11).put<int64_t>(-9000000000000000000ll);
  g.str("t.f64").u32(12).put<double>(-0.25);
  g.str("t.strings").u32(9).u32(8).u64(3).str("a").str("").str("ccc");
  g.str("t.floats").u32(9).u32(6).u64(2).put<float>(0.5f).put<float>(-2.0f);
  // [[1, 2], [3]] as u16 arrays
  g.str("t.nested").u32(9).u32(9).u64(2);
  g.u32(2).u64(2).put<uint16_t>(1).put<uint16_t>(2);
  g.u32(2).u64(1).put<uint16_t>(3);
  g.kv_u32("general.alignment", 64);
  g.tensor("w", {4, 2}, 0, 0);     // F32, 32 bytes
  g.tensor("q", {64, 1}, 8, 64);   // Q8_0, 2 blocks of 34 bytes
  g.pad_to(64);
  for (int i = 0; i < 8; ++i) g.put<float>(static_cast<float>(i));
  g.zeros(32);
  for (int i = 0; i < 68; ++i) g.put<uint8_t>(static_cast<uint8_t>(i));
  return g.b;
}

TEST(GgufReader, ReadsEveryValueType) {
  auto bytes = all_types_file();
  auto f = gguf::file::parse(bytes);
  EXPECT_EQ(f.kind(), gguf::file_kind::gguf);
  EXPECT_EQ(f.version(), 3u);
  ASSERT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.find("t.u8")->as_u64(), 200u);
  EXPECT_EQ(f.find("t.i8")->as_i64(), -100);
  EXPECT_EQ(f.find("t.u16")->as_u64(), 60000u);
  EXPECT_EQ(f.find("t.i16")->as_i64(), -30000);
  EXPECT_EQ(f.find("t.u32")->as_u64(), 4000000000u);
  EXPECT_EQ(f.find("t.i32")->as_i64(), -2000000000);
  EXPECT_EQ(f.find("t.f32")->as_f64(), 1.5);
  EXPECT_TRUE(f.find("t.bool")->as_bool());
  EXPECT_EQ(f.find("t.string")->as_string(), "héllo");
  EXPECT_EQ(f.find("t.u64")->as_u64(), 18000000000000000000ull);
  EXPECT_EQ(f.find("t.i64")->as_i64(), -9000000000000000000ll);
  EXPECT_EQ(f.find("t.f64")->as_f64(), -0.25);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_float("t.f32"), 1.5);
  EXPECT_EQ(f.get_string("t.string"), "héllo");
  EXPECT_EQ(f.get_bool("t.bool"), true);
  EXPECT_FALSE(f.get_int("absent").has_value());
  EXPECT_THROW(f.get_int("t.string"), gguf::metadata_error);
  EXPECT_THROW(f.get_int("t.u64"), gguf::metadata_error);  // does not fit int64
  EXPECT_THROW(f.find("t.i8")->as_u64(), gguf::metadata_error);  // negative
}

TEST(GgufReader, ReadsArraysAndNestedArrays) {
  auto bytes = all_types_file();
  auto f = gguf::file::parse(bytes);
  const auto* s = f.get_array("t.strings", value_type::string);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ(s->string_at(0), "a");
  EXPECT_EQ(s->string_at(1), "");
  EXPECT_EQ(s->string_at(2), "ccc");
  EXPECT_THROW(s->string_at(3), gguf::metadata_error);
  const auto* fl = f.get_array("t.floats", value_type::f32);
  ASSERT_NE(fl, nullptr);
  EXPECT_EQ(fl->number_at(1), -2.0);
  EXPECT_THROW(f.get_array("t.floats", value_type::i32), gguf::metadata_error);
  const auto* n = f.get_array("t.nested", value_type::array);
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->size(), 2u);
  EXPECT_EQ(n->array_at(0).element_type(), value_type::u16);
  EXPECT_EQ(n->array_at(0).int_at(1), 2);
  EXPECT_EQ(n->array_at(1).size(), 1u);
  EXPECT_EQ(n->array_at(1).int_at(0), 3);
  EXPECT_EQ(n->to_display(), "[[1, 2], [3]]");
}

TEST(GgufReader, PlacesTensorsAfterTheAlignedInfos) {
  auto bytes = all_types_file();
  auto f = gguf::file::parse(bytes);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const auto* w = f.find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->type, tensor_type::f32);
  EXPECT_EQ(w->n_dims, 2u);
  EXPECT_EQ(w->ne[0], 4);
  EXPECT_EQ(w->ne[1], 2);
  EXPECT_EQ(w->ne[2], 1);
  EXPECT_EQ(w->n_elements, 8u);
  EXPECT_EQ(w->n_bytes, 32u);
  float last;
  std::memcpy(&last, w->data + 28, 4);
  EXPECT_EQ(last, 7.0f);
  const auto* q = f.find_tensor("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->n_bytes, 68u);
  EXPECT_EQ(q->data - bytes.data(), static_cast<ptrdiff_t>(f.data_offset() + 64));
  EXPECT_EQ(q->data[67], 67);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufReader, RemembersPowerInferMagic) {
  auto bytes = all_types_file("PWRI");
  auto f = gguf::file::parse(bytes);
  EXPECT_EQ(f.kind(), gguf::file_kind::powerinfer);
  EXPECT_EQ(f.tensors().size(), 2u);
}

TEST(GgufReader, AcceptsVersionTwo) {
  gguf_bytes g;
  g.header(0, 1, 2).kv_str("general.name", "v2");
  auto f = gguf::file::parse(g.b);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_string("general.name"), "v2");
}

TEST(GgufReader, VocabOnlyFileMayEndWithoutPadding) {
  gguf_bytes g;
  g.header(0, 1).kv_str("tokenizer.ggml.model", "llama");
  ASSERT_NE(g.b.size() % 32, 0u);
  auto f = gguf::file::parse(g.b);
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufReader, OpensFixtureOverMmap) {
  auto f = gguf::file::open(HOTCOLD_FIXTURES_DIR "/vocab/ggml-vocab-llama-spm.gguf");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens", value_type::string)->size(), 32000u);
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens")->string_at(1), "<s>");
}

TEST(GgufReader, OpenReportsMissingFilesAndDirectories) {
  EXPECT_THROW(gguf::file::open("/nonexistent/model.gguf"), std::system_error);
  EXPECT_THROW(gguf::file::open("/tmp"), std::system_error);
}

}  // namespace
}  // namespace hotcold
