// gguf::writer output read back by gguf::file: metadata, tensors, alignment, magic, files on disk.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace hotcold {
namespace {

using gguf::value_type;

TEST(GgufWriter, RoundTripsMetadata) {
  gguf::writer w;
  w.set_u8("k.u8", 7);
  w.set_i8("k.i8", -7);
  w.set_u16("k.u16", 65535);
  w.set_i16("k.i16", -32768);
  w.set_u32("k.u32", 123456789);
  w.set_i32("k.i32", -123456789);
  w.set_u64("k.u64", 1ull << 60);
  w.set_i64("k.i64", -(1ll << 60));
  w.set_f32("k.f32", 0.1f);
  w.set_f64("k.f64", 0.1);
  w.set_bool("k.bool", false);
  w.set_string("k.str", "multi\nline ▁ text");
  std::vector<std::string> strs{"x", "", "yy"};
  w.set_strings("k.strs", strs);
  std::vector<float> fl{1.0f, -0.5f, 3.25f};
  w.set_array("k.f32s", std::span<const float>(fl));
  std::vector<int32_t> in{-1, 0, 1 << 30};
  w.set_array("k.i32s", std::span<const int32_t>(in));
  // [[5, 6, 7]] as an array of one u32 array
  std::vector<uint32_t> inner{5, 6, 7};
  auto inner_bytes = gguf::writer::encode_array(value_type::u32, 3, {reinterpret_cast<const uint8_t*>(inner.data()), 12});
  w.set_encoded("k.nested", value_type::array, gguf::writer::encode_array(value_type::array, 1, inner_bytes));

  auto bytes = w.to_bytes();
  auto f = gguf::file::parse(bytes);
  EXPECT_EQ(f.metadata().size(), 16u);
  EXPECT_EQ(f.find("k.u8")->type(), value_type::u8);
  EXPECT_EQ(f.get_int("k.u8"), 7);
  EXPECT_EQ(f.get_int("k.i8"), -7);
  EXPECT_EQ(f.get_int("k.u16"), 65535);
  EXPECT_EQ(f.get_int("k.i16"), -32768);
  EXPECT_EQ(f.get_int("k.u32"), 123456789);
  EXPECT_EQ(f.get_int("k.i32"), -123456789);
  EXPECT_EQ(f.find("k.u64")->as_u64(), 1ull << 60);
  EXPECT_EQ(f.get_int("k.i64"), -(1ll << 60));
  EXPECT_EQ(f.get_float("k.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(f.get_float("k.f64"), 0.1);
  EXPECT_EQ(f.get_bool("k.bool"), false);
  EXPECT_EQ(f.get_string("k.str"), "multi\nline ▁ text");
  const auto* s = f.get_array("k.strs", value_type::string);
  ASSERT_EQ(s->size(), 3u);
  EXPECT_EQ(s->string_at(2), "yy");
  EXPECT_EQ(f.get_array("k.f32s", value_type::f32)->number_at(2), 3.25);
  EXPECT_EQ(f.get_array("k.i32s", value_type::i32)->int_at(2), 1 << 30);
  const auto* n = f.get_array("k.nested", value_type::array);
  EXPECT_EQ(n->array_at(0).int_at(2), 7);
}

TEST(GgufWriter, RoundTripsTensorsAtTheirAlignment) {
  gguf::writer w(gguf::file_kind::powerinfer);
  w.set_alignment(64);
  std::vector<float> a(10);
  std::iota(a.begin(), a.end(), 1.0f);
  std::vector<uint8_t> q(2 * 18);  // two Q4_0 blocks
  std::iota(q.begin(), q.end(), uint8_t{100});
  std::vector<uint8_t> h(3 * 4 * 2, 0xAB);  // F16 [3, 4]
  int64_t a_ne[] = {10};
  int64_t q_ne[] = {32, 2};
  int64_t h_ne[] = {3, 4};
  w.add_tensor("a", tensor_type::f32, a_ne, {reinterpret_cast<const uint8_t*>(a.data()), a.size() * 4});
  w.add_tensor("blk.0.q", tensor_type::q4_0, q_ne, q);
  w.add_tensor("h", tensor_type::f16, h_ne, h);
  auto bytes = w.to_bytes();

  auto f = gguf::file::parse(bytes);
  EXPECT_EQ(f.kind(), gguf::file_kind::powerinfer);
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.tensors().size(), 3u);
  for (const auto& t : f.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
  const auto* ta = f.find_tensor("a");
  EXPECT_EQ(std::memcmp(ta->data, a.data(), 40), 0);
  const auto* tq = f.find_tensor("blk.0.q");
  EXPECT_EQ(tq->type, tensor_type::q4_0);
  EXPECT_EQ(tq->ne[1], 2);
  EXPECT_EQ(std::memcmp(tq->data, q.data(), q.size()), 0);
  EXPECT_EQ(f.find_tensor("h")->n_bytes, 24u);

  // write() streams the same bytes to disk.
  auto path = (std::filesystem::temp_directory_path() / "hotcold-writer-test.gguf").string();
  w.write(path);
  auto on_disk = gguf::file::open(path);
  ASSERT_EQ(on_disk.size(), bytes.size());
  EXPECT_EQ(std::memcmp(on_disk.bytes().data(), bytes.data(), bytes.size()), 0);
  std::remove(path.c_str());
}

TEST(GgufWriter, RefusesWhatTheReaderWouldRefuse) {
  gguf::writer w;
  w.set_u32("a", 1);
  EXPECT_THROW(w.set_u32("a", 2), std::invalid_argument);
  EXPECT_THROW(w.set_alignment(48), std::invalid_argument);
  std::vector<uint8_t> d(34);
  int64_t bad_row[] = {31};
  EXPECT_THROW(w.add_tensor("t", tensor_type::q8_0, bad_row, d), std::invalid_argument);
  int64_t ok_row[] = {32};
  EXPECT_THROW(w.add_tensor("t", tensor_type::q8_0, ok_row, std::span<const uint8_t>(d).first(33)), std::invalid_argument);
  w.add_tensor("t", tensor_type::q8_0, ok_row, d);
  EXPECT_THROW(w.add_tensor("t", tensor_type::q8_0, ok_row, d), std::invalid_argument);
  EXPECT_THROW(w.add_tensor(std::string(64, 'x'), tensor_type::q8_0, ok_row, d), std::invalid_argument);
}

TEST(TensorTypes, BlockLayouts) {
  struct expect { tensor_type t; const char* name; uint32_t block, bytes; };
  for (auto e : {expect{tensor_type::f32, "F32", 1, 4}, expect{tensor_type::f16, "F16", 1, 2}, expect{tensor_type::bf16, "BF16", 1, 2},
                 expect{tensor_type::q4_0, "Q4_0", 32, 18}, expect{tensor_type::q4_1, "Q4_1", 32, 20}, expect{tensor_type::q5_0, "Q5_0", 32, 22},
                 expect{tensor_type::q5_1, "Q5_1", 32, 24}, expect{tensor_type::q8_0, "Q8_0", 32, 34}, expect{tensor_type::q8_1, "Q8_1", 32, 36},
                 expect{tensor_type::q2_k, "Q2_K", 256, 84}, expect{tensor_type::q3_k, "Q3_K", 256, 110}, expect{tensor_type::q4_k, "Q4_K", 256, 144},
                 expect{tensor_type::q5_k, "Q5_K", 256, 176}, expect{tensor_type::q6_k, "Q6_K", 256, 210}, expect{tensor_type::q8_k, "Q8_K", 256, 292},
                 expect{tensor_type::i8, "I8", 1, 1}, expect{tensor_type::i16, "I16", 1, 2}, expect{tensor_type::i32, "I32", 1, 4},
                 expect{tensor_type::i64, "I64", 1, 8}, expect{tensor_type::f64, "F64", 1, 8}}) {
    const auto& tr = traits(e.t);
    EXPECT_EQ(tr.name, e.name);
    EXPECT_EQ(tr.block_size, e.block) << e.name;
    EXPECT_EQ(tr.block_bytes, e.bytes) << e.name;
    EXPECT_EQ(tensor_type_from_name(e.name), e.t);
  }
  EXPECT_EQ(tensor_type_from_name("q6_k"), tensor_type::q6_k);
  EXPECT_FALSE(tensor_type_from_name("Q4_2").has_value());
  EXPECT_FALSE(tensor_type_info(4).has_value());
  EXPECT_FALSE(tensor_type_info(40).has_value());
}

}  // namespace
}  // namespace hotcold
