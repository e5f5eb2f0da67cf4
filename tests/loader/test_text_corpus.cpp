#include <gtest/gtest.h>

#include "loader/text_corpus.hpp"

namespace hotcold::loader {
namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

TEST(TextCorpus, DeterministicValidMixedUtf8) {
  auto a = mixed_text(100000, 9);
  EXPECT_EQ(a, mixed_text(100000, 9));
  EXPECT_NE(a, mixed_text(100000, 10));
  EXPECT_GE(a.size(), 100000u);
  EXPECT_LT(a.size(), 100004u);
  EXPECT_TRUE(valid_utf8(a));
  EXPECT_NE(a.find("我"), std::string::npos);
  EXPECT_NE(a.find("\t"), std::string::npos);
  EXPECT_NE(a.find("🚀"), std::string::npos);
}

}  // namespace
}  // namespace hotcold::loader
