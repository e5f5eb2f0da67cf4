// Corrupt and hostile GGUF files: each is refused with an error naming the field and its offset.
// The cases follow llama.cpp's test-gguf list and extend it.
#include <gtest/gtest.h>

#include <limits>

#include "model/gguf.hpp"
#include "tests/model/gguf_bytes.hpp"

namespace hotcold {
namespace {

using test::gguf_bytes;

struct failure {
  std::string message;
  std::string field;
  uint64_t offset = 0;
};

failure parse_failure(const std::vector<uint8_t>& bytes) {
  try {
    gguf::file::parse(bytes, "bad.gguf");
  } catch (const gguf::format_error& e) {
    return {e.what(), e.field(), e.offset()};
  }
  ADD_FAILURE() << "the file was accepted";
  return {};
}

#define EXPECT_REFUSED(bytes, field_text, problem_text)                                  \
  do {                                                                                   \
    failure f_ = parse_failure(bytes);                                                   \
    EXPECT_NE(f_.field.find(field_text), std::string::npos) << f_.message;               \
    EXPECT_NE(f_.message.find(problem_text), std::string::npos) << f_.message;           \
    EXPECT_NE(f_.message.find("bad.gguf"), std::string::npos) << f_.message;             \
  } while (0)

// A valid two-tensor file to corrupt: F32 [8] at 0, F32 [8] at 32, alignment 32.
gguf_bytes valid_prefix(uint64_t n_tensors = 2, uint64_t n_kv = 1) {
  gguf_bytes g;
  g.header(n_tensors, n_kv).kv_str("general.name", "t");
  return g;
}

std::vector<uint8_t> finish(gguf_bytes g, size_t data_bytes = 64) {
  g.pad_to(32).zeros(data_bytes);
  return g.b;
}

std::vector<uint8_t> valid_file() {
  auto g = valid_prefix();
  g.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 32);
  return finish(g);
}

TEST(GgufCorrupt, TheBaseFileIsValid) {
  auto f = gguf::file::parse(valid_file());
  EXPECT_EQ(f.tensors().size(), 2u);
}

TEST(GgufCorrupt, EmptyFile) { EXPECT_REFUSED(std::vector<uint8_t>{}, "header.magic", "too small"); }

TEST(GgufCorrupt, BadMagic) {
  auto b = valid_file();
  b[3] = 'X';
  auto f = parse_failure(b);
  EXPECT_EQ(f.field, "header.magic");
  EXPECT_EQ(f.offset, 0u);
  EXPECT_NE(f.message.find("expected \"GGUF\" or \"PWRI\", found \"GGUX\""), std::string::npos) << f.message;
}

TEST(GgufCorrupt, VersionOne) {
  gguf_bytes g;
  g.header(0, 0, 1);
  auto f = parse_failure(g.b);
  EXPECT_EQ(f.field, "header.version");
  EXPECT_EQ(f.offset, 4u);
  EXPECT_NE(f.message.find("version 1"), std::string::npos) << f.message;
}

TEST(GgufCorrupt, VersionZeroAndFutureVersions) {
  for (uint32_t v : {0u, 4u, 1000u}) {
    gguf_bytes g;
    g.header(0, 0, v);
    EXPECT_REFUSED(g.b, "header.version", "version " + std::to_string(v) + " is not supported");
  }
}

TEST(GgufCorrupt, BigEndianFile) {
  gguf_bytes g;
  g.header(0, 0, 0x03000000u);
  EXPECT_REFUSED(g.b, "header.version", "big-endian");
}

TEST(GgufCorrupt, AbsurdTensorCount) {
  for (uint64_t n : {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 40, uint64_t{1000}}) {
    gguf_bytes g;
    g.header(n, 0);
    auto f = parse_failure(g.b);
    EXPECT_EQ(f.field, "header.n_tensors");
    EXPECT_EQ(f.offset, 8u);
    EXPECT_NE(f.message.find("cannot fit"), std::string::npos) << f.message;
  }
}

TEST(GgufCorrupt, AbsurdKeyValueCount) {
  for (uint64_t n : {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 33, uint64_t{5}}) {
    gguf_bytes g;
    g.header(0, n).kv_str("general.name", "t");
    auto f = parse_failure(g.b);
    EXPECT_EQ(f.field, "header.n_kv");
    EXPECT_EQ(f.offset, 16u);
    EXPECT_NE(f.message.find("cannot fit"), std::string::npos) << f.message;
  }
}

TEST(GgufCorrupt, BadKeyLength) {
  gguf_bytes g;
  g.header(0, 1).u64(std::numeric_limits<uint64_t>::max()).raw("general.name").u32(4).u32(1);
  auto f = parse_failure(g.b);
  EXPECT_EQ(f.field, "kv[0].key length");
  EXPECT_EQ(f.offset, 24u);
  EXPECT_NE(f.message.find("runs past the end"), std::string::npos) << f.message;
}

TEST(GgufCorrupt, KeyLongerThanTheSpecAllows) {
  gguf_bytes g;
  g.header(0, 1).str(std::string(70000, 'k')).u32(4).u32(1);
  EXPECT_REFUSED(g.b, "kv[0].key length", "exceeds the limit of 65535");
}

TEST(GgufCorrupt, EmptyKey) {
  gguf_bytes g;
  g.header(0, 1).str("").u32(4).u32(1);
  EXPECT_REFUSED(g.b, "kv[0].key", "empty key");
}

TEST(GgufCorrupt, UnknownValueType) {
  gguf_bytes g;
  g.header(0, 1).str("general.x").u32(13).u32(1);
  auto f = parse_failure(g.b);
  EXPECT_NE(f.field.find("\"general.x\" value type"), std::string::npos) << f.message;
  EXPECT_EQ(f.offset, 24u + 8 + 9);
  EXPECT_NE(f.message.find("unknown value type 13"), std::string::npos) << f.message;
}

TEST(GgufCorrupt, UnknownArrayElementType) {
  gguf_bytes g;
  g.header(0, 1).str("general.x").u32(9).u32(77).u64(1).u32(0);
  EXPECT_REFUSED(g.b, "element type", "unknown value type 77");
}

TEST(GgufCorrupt, AbsurdArrayCounts) {
  for (uint32_t elem : {0u, 4u, 8u, 9u}) {  // u8, u32, strings, arrays
    gguf_bytes g;
    g.header(0, 1).str("general.x").u32(9).u32(elem).u64(uint64_t{1} << 61).zeros(64);
    EXPECT_REFUSED(g.b, "\"general.x\" value count", "cannot fit");
  }
}

TEST(GgufCorrupt, StringLongerThanTheFile) {
  gguf_bytes g;
  g.header(0, 1).str("general.name").u32(8).u64(1000).raw("short");
  EXPECT_REFUSED(g.b, "\"general.name\" value length", "runs past the end");
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
  gguf_bytes g;
  g.header(0, 1).str("general.x").u32(9);
  for (int i = 0; i < 20; ++i) g.u32(9).u64(1);
  g.u32(0).u64(0);
  EXPECT_REFUSED(g.b, "general.x", "nested deeper than");
}

TEST(GgufCorrupt, BoolThatIsNeitherZeroNorOne) {
  gguf_bytes g;
  g.header(0, 1).str("general.flag").u32(7).put<uint8_t>(2);
  EXPECT_REFUSED(g.b, "general.flag", "neither 0 nor 1");
}

TEST(GgufCorrupt, DuplicateKey) {
  gguf_bytes g;
  g.header(0, 2).kv_u32("general.x", 1).kv_u32("general.x", 2);
  auto f = parse_failure(g.b);
  EXPECT_EQ(f.field, "kv[1].key");
  EXPECT_NE(f.message.find("duplicate key \"general.x\" (first at byte 24)"), std::string::npos) << f.message;
}

TEST(GgufCorrupt, BadAlignment) {
  for (uint32_t a : {0u, 3u, 33u, 48u}) {
    gguf_bytes g;
    g.header(0, 1).kv_u32("general.alignment", a);
    EXPECT_REFUSED(g.b, "general.alignment", "not a power of two");
  }
  gguf_bytes g;
  g.header(0, 1).str("general.alignment").u32(10).u64(32);
  EXPECT_REFUSED(g.b, "general.alignment", "must be u32, found u64");
}

TEST(GgufCorrupt, BadTensorNameLength) {
  auto g = valid_prefix(1);
  g.tensor(std::string(64, 'n'), {8}, 0, 0);
  EXPECT_REFUSED(finish(g), "tensor[0].name", "exceeds ggml's limit of 63");
  auto e = valid_prefix(1);
  e.tensor("", {8}, 0, 0);
  EXPECT_REFUSED(finish(e), "tensor[0].name", "empty tensor name");
  auto h = valid_prefix(1);
  h.u64(uint64_t{1} << 62).raw("x");
  EXPECT_REFUSED(finish(h), "tensor[0].name length", "runs past the end");
}

TEST(GgufCorrupt, TooManyDimensions) {
  auto g = valid_prefix(1);
  g.tensor("a", {2, 2, 2, 1, 1}, 0, 0);
  EXPECT_REFUSED(finish(g), "tensor[0] \"a\" n_dims", "5 dimensions, at most 4");
}

TEST(GgufCorrupt, NegativeDimension) {
  auto g = valid_prefix(1);
  g.tensor("a", {8, static_cast<uint64_t>(-3)}, 0, 0);
  EXPECT_REFUSED(finish(g), "tensor[0] \"a\" ne[1]", "negative dimension -3");
}

TEST(GgufCorrupt, OverflowingShape) {
  auto g = valid_prefix(1);
  g.tensor("a", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0);
  EXPECT_REFUSED(finish(g), "tensor[0] \"a\" ne[1]", "overflows int64");
  // Element count fits int64 but the byte size does not fit 64 bits.
  auto h = valid_prefix(1);
  h.tensor("a", {uint64_t{1} << 31, uint64_t{1} << 31}, 0, 0);
  EXPECT_REFUSED(finish(h), "tensor[0] \"a\" type", "byte size overflows 64 bits");
}

TEST(GgufCorrupt, UnknownTensorType) {
  for (uint32_t t : {4u, 5u, 31u, 36u, 40u, 1000u}) {
    auto g = valid_prefix(1);
    g.tensor("a", {32}, t, 0);
    EXPECT_REFUSED(finish(g), "tensor[0] \"a\" type", "unknown tensor type " + std::to_string(t));
  }
}

TEST(GgufCorrupt, RowNotAMultipleOfTheBlock) {
  auto g = valid_prefix(1);
  g.tensor("a", {31}, 8, 0);  // Q8_0 blocks hold 32
  EXPECT_REFUSED(finish(g), "tensor[0] \"a\" ne[0]", "not a multiple of the Q8_0 block size 32");
}

TEST(GgufCorrupt, MisalignedOffset) {
  auto g = valid_prefix();
  g.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 36);
  EXPECT_REFUSED(finish(g, 96), "tensor[1] \"b\" offset", "not a multiple of the alignment 32");
}

TEST(GgufCorrupt, OverlappingTensors) {
  auto g = valid_prefix();
  g.tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32);  // a spans [0, 64)
  EXPECT_REFUSED(finish(g, 96), "tensor \"b\" offset", "overlaps tensor \"a\"");
}

TEST(GgufCorrupt, OffsetOutsideTheFile) {
  auto g = valid_prefix();
  g.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, uint64_t{1} << 40);
  EXPECT_REFUSED(finish(g), "tensor \"b\" offset", "runs past the end of the file");
  auto h = valid_prefix();
  h.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, std::numeric_limits<uint64_t>::max() - 31);
  EXPECT_REFUSED(finish(h), "tensor \"b\" offset", "runs past the end of the file");
}

TEST(GgufCorrupt, DuplicateTensorName) {
  auto g = valid_prefix();
  g.tensor("a", {8}, 0, 0).tensor("a", {8}, 0, 32);
  EXPECT_REFUSED(finish(g), "tensor[1].name", "duplicate tensor name \"a\"");
}

TEST(GgufCorrupt, TruncatedData) {
  auto b = valid_file();
  b.resize(b.size() - 1);
  EXPECT_REFUSED(b, "tensor \"b\" offset", "truncated");
}

TEST(GgufCorrupt, DataSectionPastTheEnd) {
  auto g = valid_prefix();
  g.tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 32);
  auto b = g.b;  // infos end unaligned and the file stops there
  ASSERT_NE(b.size() % 32, 0u);
  EXPECT_REFUSED(b, "data section", "past the end of the file");
}

// Every proper prefix of a valid file with tensors is refused cleanly (never a crash).
TEST(GgufCorrupt, EveryTruncationIsRefused) {
  auto b = valid_file();
  for (size_t n = 0; n < b.size(); ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<ptrdiff_t>(n));
    EXPECT_THROW(gguf::file::parse(cut), gguf::format_error) << "prefix of " << n << " bytes";
  }
}

// Flipping any single byte of the header region either still parses or fails with format_error.
TEST(GgufCorrupt, ByteFlipsNeverEscapeTheErrorType) {
  auto b = valid_file();
  for (size_t i = 0; i < b.size() - 64; ++i) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      auto c = b;
      c[i] ^= x;
      try {
        gguf::file::parse(c);
      } catch (const gguf::format_error&) {
      }
    }
  }
}

}  // namespace
}  // namespace hotcold
