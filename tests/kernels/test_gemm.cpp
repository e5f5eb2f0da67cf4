// The prompt batches' register tile and token packing against their scalar references.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/gemm.hpp"

namespace hotcold::kernels {
namespace {

TEST(Gemm, PackTokensEqualsScalarTranspose) {
  // Element tails (kc not a multiple of 16) and token tails (fewer than 32 left: zeros).
  const int64_t d = 90;
  for (int64_t n : {7, 20, 32, 50}) {
    std::vector<float> x(static_cast<size_t>(n * d));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) + 0.5f;
    for (int64_t t0 : {int64_t{0}, int64_t{32}}) {
      if (t0 >= n) continue;
      for (int64_t k0 : {0, 16, 37}) {
        const int64_t kc = std::min<int64_t>(48, d - k0);
        std::vector<float> got(static_cast<size_t>(gemm_tokens * kc), -1.0f), want(got.size(), -2.0f);
        gemm_pack_tokens(x.data(), n, d, t0, k0, kc, got.data());
        scalar::gemm_pack_tokens(x.data(), n, d, t0, k0, kc, want.data());
        ASSERT_EQ(got, want) << "n " << n << " t0 " << t0 << " k0 " << k0;
        // and the layout itself: token t0 + j's element k0 + k at 32 k + j
        for (int64_t k = 0; k < kc; ++k)
          for (int j = 0; j < gemm_tokens; ++j)
            ASSERT_EQ(want[static_cast<size_t>(gemm_tokens * k + j)], t0 + j < n ? x[static_cast<size_t>((t0 + j) * d + k0 + k)] : 0.0f);
      }
    }
  }
}

TEST(Gemm, PackF16ColumnsConvertsThirtyTwoOfEachRow) {
  const int64_t ws = 100, kc = 9;  // rows 100 halves apart, columns 40..71 of each
  std::vector<uint16_t> w(static_cast<size_t>(ws * kc));
  for (size_t i = 0; i < w.size(); ++i) w[i] = fp32_to_fp16(static_cast<float>(i % 997) * 0.25f - 60.0f);
  std::vector<float> got(static_cast<size_t>(gemm_tokens * kc), -1.0f), want(got.size(), -2.0f);
  gemm_pack_f16_columns(w.data() + 40, ws, kc, got.data());
  scalar::gemm_pack_f16_columns(w.data() + 40, ws, kc, want.data());
  EXPECT_EQ(got, want);
  for (int64_t k = 0; k < kc; ++k)
    for (int j = 0; j < gemm_tokens; ++j) ASSERT_EQ(want[static_cast<size_t>(gemm_tokens * k + j)], fp16_to_fp32(w[static_cast<size_t>(k * ws + 40 + j)]));
}

TEST(Gemm, UnpackQ4_0GivesTheBlocksValues) {
  std::vector<block_q4_0> x(3);
  for (size_t b = 0; b < x.size(); ++b) {
    x[b].d = fp32_to_fp16(0.5f + static_cast<float>(b));
    for (int j = 0; j < 16; ++j) x[b].qs[j] = static_cast<uint8_t>((j * 7 + b) & 0xFF);
  }
  std::vector<float> got(96, -1.0f), want(96, -2.0f);
  gemm_unpack_q4_0(x.data(), got.data(), 96);
  dequantize_row_q4_0(x.data(), want.data(), 96);
  EXPECT_EQ(got, want);
  EXPECT_EQ(want[16], (0.5f) * static_cast<float>((0 >> 4) - 8));  // block 0, value 16: byte 0's high nibble
  EXPECT_EQ(want[32 + 17], 1.5f * static_cast<float>(((7 + 1) >> 4) - 8));
}

TEST(Gemm, TileEqualsScalarSums) {
  const int64_t kc = 70, ws = 75, cs = 40;
  std::vector<float> w(static_cast<size_t>(gemm_rows * ws)), xp(static_cast<size_t>(gemm_tokens * kc));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.3f * static_cast<float>(i));
  for (size_t i = 0; i < xp.size(); ++i) xp[i] = std::cos(0.7f * static_cast<float>(i));
  for (bool first : {true, false}) {
    std::vector<float> got(static_cast<size_t>(gemm_rows * cs), 0.25f), want = got;
    gemm_tile(w.data(), ws, xp.data(), kc, got.data(), cs, first);
    scalar::gemm_tile(w.data(), ws, xp.data(), kc, want.data(), cs, first);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i << (first ? " first" : " accumulating");
    // Columns past the 32 tokens of the tile are left alone.
    for (int i = 0; i < gemm_rows; ++i)
      for (int64_t t = gemm_tokens; t < cs; ++t) ASSERT_EQ(got[static_cast<size_t>(i * cs + t)], 0.25f);
  }
}

}  // namespace
}  // namespace hotcold::kernels
