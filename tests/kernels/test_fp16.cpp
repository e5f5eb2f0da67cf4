// Half-precision conversions against exact references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>
#include <limits>

#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {
namespace {

// Reference: the value of a binary16 bit pattern computed from its definition in double.
double half_value(uint16_t h) {
  int sign = h >> 15 ? -1 : 1;
  int exp = (h >> 10) & 0x1F;
  int mant = h & 0x3FF;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Fp16, EveryHalfConvertsToItsExactValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    double want = half_value(static_cast<uint16_t>(h));
    float got = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << "half 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << h;
  }
}

TEST(Fp16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 0x1F) == 31 && (h & 0x3FF)) continue;  // NaN payloads may be quieted
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);  // largest half
  EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // ties to even: overflow to infinity
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie, even stays
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie, odd rounds up
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: zero
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie, rounds to even 2
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
  // Against double rounding of many random floats in the half range.
  uint32_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 1664525u + 1013904223u;
    float f = std::ldexp(static_cast<float>(x >> 8) / 16777216.0f, static_cast<int>(x % 40) - 26);
    uint16_t h = fp32_to_fp16(f);
    double err = std::abs(half_value(h) - f);
    // No other half is closer.
    for (int d : {-1, 1}) {
      uint16_t n = static_cast<uint16_t>(h + d);
      if ((n & 0x7C00) == 0x7C00) continue;
      ASSERT_LE(err, std::abs(half_value(n) - f)) << f;
    }
  }
}

TEST(Bf16, ConvertsAndRounds) {
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xC000), -2.0f);
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  float tie;  // 1 + 2^-8 exactly halfway between two bf16 values: rounds to even (1.0)
  uint32_t bits = 0x3F808000;
  std::memcpy(&tie, &bits, 4);
  EXPECT_EQ(fp32_to_bf16(tie), 0x3F80);
  bits = 0x3F818000;  // halfway above an odd value: rounds up
  std::memcpy(&tie, &bits, 4);
  EXPECT_EQ(fp32_to_bf16(tie), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t b = 0; b < 65536; ++b) {
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F)) continue;  // NaN
    ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(static_cast<uint16_t>(b))), b);
  }
}

// The row conversion (F16C where present) gives every half's exact value, tails included.
TEST(Fp16, RowConversionMatchesScalarForEveryHalf) {
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> row(all.size());
  fp16_to_fp32_row(all.data(), row.data(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    float want = fp16_to_fp32(all[i]);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(row[i])) << i;
      continue;
    }
    uint32_t a, b;
    std::memcpy(&a, &row[i], 4);
    std::memcpy(&b, &want, 4);
    ASSERT_EQ(a, b) << "half 0x" << std::hex << all[i];
  }
}

}  // namespace
}  // namespace hotcold::kernels
