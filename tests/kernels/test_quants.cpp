// Block formats and dot products against hand-worked values and a double-precision naive sum.
#include <bit>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold::kernels {
namespace {

std::vector<float> random_vector(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

TEST(Quants, Q8_0HandWorkedBlock) {
  block_q8_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i - 16);
  float y[32];
  dequantize_row_q8_0(&b, y, 32);
  EXPECT_EQ(y[0], -8.0f);
  EXPECT_EQ(y[31], 7.5f);
}

TEST(Quants, Q4_0HandWorkedBlock) {
  block_q4_0 b{};
  b.d = fp32_to_fp16(2.0f);
  b.qs[0] = 0x9F;  // value 0: 15 - 8 = 7; value 16: 9 - 8 = 1
  b.qs[15] = 0x08; // value 15: 0; value 31: 0 - 8 = -8
  float y[32];
  dequantize_row_q4_0(&b, y, 32);
  EXPECT_EQ(y[0], 14.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(y[15], 0.0f);
  EXPECT_EQ(y[31], -16.0f);
  EXPECT_EQ(y[1], -16.0f);  // zero byte: both nibbles 0 - 8
}

TEST(Quants, Q6_KHandWorkedBlock) {
  block_q6_k b{};
  std::memset(&b, 0, sizeof b);
  b.d = fp32_to_fp16(1.0f);
  for (auto& s : b.scales) s = 1;
  b.scales[4] = 3;             // the group of values 64..79
  b.ql[0] = 0x21;              // low nibble 1 (value 0), high nibble 2 (value 64)
  b.qh[0] = 0b11100100;        // high bits: value 0 -> 0, value 32 -> 1, value 64 -> 2, value 96 -> 3
  std::vector<float> y(256);
  dequantize_row_q6_k(&b, y.data(), 256);
  EXPECT_EQ(y[0], 1 - 32);
  EXPECT_EQ(y[32], (1 << 4) - 32);
  EXPECT_EQ(y[64], 3.0f * ((2 | (2 << 4)) - 32));
  EXPECT_EQ(y[96], (3 << 4) - 32);
  EXPECT_EQ(y[1], -32);        // everything else is quant 0 -> -32
  EXPECT_EQ(y[255], -32);
  b.ql[64 + 5] = 0x07;         // second half: value 128 + 5
  b.qh[32 + 5] = 0x01;
  dequantize_row_q6_k(&b, y.data(), 256);
  EXPECT_EQ(y[133], (7 | (1 << 4)) - 32);
}

// Q4_K / Q5_K as ggml's block_q4_K / block_q5_K define them: d and dmin, eight 6-bit scales and mins
// packed in 12 bytes (groups 4..7 split across nibbles and top bits), group 2c's quants in the low
// nibbles of qs[32 c ..], group 2c + 1's in the high ones, Q5_K's fifth bit g of qh[l] for group g.
TEST(Quants, Q4_KAndQ5_KHandWorkedBlocks) {
  block_q4_k b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.5f);
  b.scales[0] = 2;     // group 0: scale 2
  b.scales[4] = 4;     // group 0: min 4
  b.scales[1] = 1;     // group 1: scale 1, min 0
  // group 5: scale 37 (0b10'0101), min 19 (0b01'0011): low nibbles in byte 9, top bits in bytes 1 and 5
  b.scales[9] = 0x35;
  b.scales[1] |= 2 << 6;
  b.scales[5] |= 1 << 6;
  b.qs[0] = 0x73;       // value 0 (group 0): 3; value 32 (group 1): 7
  b.qs[64 + 3] = 0xA0;  // value 163 (group 5, high nibble of the third 32 bytes): 10; value 131 (group 4): 0
  std::vector<float> y(256);
  dequantize_row_q4_k(&b, y.data(), 256);
  EXPECT_EQ(y[0], 1 * 2 * 3 - 0.5f * 4);
  EXPECT_EQ(y[1], -0.5f * 4);
  EXPECT_EQ(y[32], 7.0f);
  EXPECT_EQ(y[163], 37.0f * 10 - 0.5f * 19);
  EXPECT_EQ(y[160], -0.5f * 19);
  EXPECT_EQ(y[131], 0.0f);  // group 4: scale and min 0
  uint8_t sc, m;
  k_quant_scale_min(b.scales, 5, sc, m);
  EXPECT_EQ(sc, 37);
  EXPECT_EQ(m, 19);

  block_q5_k c{};
  c.d = b.d, c.dmin = b.dmin;
  std::memcpy(c.scales, b.scales, 12);
  std::memcpy(c.qs, b.qs, 128);
  c.qh[0] = 0b10;       // value 32 (group 1): + 16
  c.qh[3] = 1 << 5;     // value 163 (group 5): + 16
  std::vector<float> z(256);
  dequantize_row_q5_k(&c, z.data(), 256);
  EXPECT_EQ(z[0], 1 * 2 * 3 - 0.5f * 4);
  EXPECT_EQ(z[32], 23.0f);
  EXPECT_EQ(z[163], 37.0f * 26 - 0.5f * 19);
  EXPECT_EQ(z[3], -0.5f * 4);  // qh[3]'s other bits are 0
  EXPECT_EQ(z[35], 0.0f);
}

// (Each type's round trip, row dot, AXPY and to-float: tests/kernels/test_quant_types.cpp's table.)

TEST(Dot, MatchesNaiveDoubleSums) {
  const int64_t n = 4096 + 32;  // not a multiple of 256 for the float paths' tails
  auto w = random_vector(n, 2), x = random_vector(n, 3);
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(w[i]) * x[i];
  EXPECT_NEAR(dot_f32(w.data(), x.data(), n), want, 1e-3);
  EXPECT_NEAR(scalar::dot_f32(w.data(), x.data(), n), want, 1e-3);

  std::vector<uint16_t> h(n), bf(n);
  double want_h = 0, want_bf = 0;
  for (int64_t i = 0; i < n; ++i) {
    h[i] = fp32_to_fp16(w[i]);
    bf[i] = fp32_to_bf16(w[i]);
    want_h += double(fp16_to_fp32(h[i])) * x[i];
    want_bf += double(bf16_to_fp32(bf[i])) * x[i];
  }
  EXPECT_NEAR(dot_f16(h.data(), x.data(), n), want_h, 1e-3);
  EXPECT_NEAR(scalar::dot_f16(h.data(), x.data(), n), want_h, 1e-3);
  EXPECT_NEAR(dot_bf16(bf.data(), x.data(), n), want_bf, 1e-3);
  EXPECT_NEAR(scalar::dot_bf16(bf.data(), x.data(), n), want_bf, 1e-3);
  for (int64_t m : {int64_t{7}, int64_t{37}}) {  // tails only, and a tail after the eight-wide steps
    double want_m = 0;
    for (int64_t i = 0; i < m; ++i) want_m += double(bf16_to_fp32(bf[i])) * x[i];
    EXPECT_NEAR(dot_bf16(bf.data(), x.data(), m), want_m, 1e-4) << m;
  }
}

TEST(Dot, QuantizedRowsMatchDequantizedSums) {
  const int64_t n = 4096;
  auto w = random_vector(n, 4), x = random_vector(n, 5);
  std::vector<block_q8_0> xq(n / 32);
  quantize_row_q8_0(x.data(), xq.data(), n);
  std::vector<float> xd(n), wd(n);
  dequantize_row_q8_0(xq.data(), xd.data(), n);

  std::vector<block_q8_0> w8(n / 32);
  quantize_row_q8_0(w.data(), w8.data(), n);
  dequantize_row_q8_0(w8.data(), wd.data(), n);
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(wd[i]) * xd[i];
  EXPECT_NEAR(dot_q8_0(w8.data(), xq.data(), n), want, 1e-3 * std::sqrt(n));
  EXPECT_NEAR(scalar::dot_q8_0(w8.data(), xq.data(), n), want, 1e-3 * std::sqrt(n));

  std::vector<block_q4_0> w4(n / 32);
  quantize_row_q4_0(w.data(), w4.data(), n);
  dequantize_row_q4_0(w4.data(), wd.data(), n);
  want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(wd[i]) * xd[i];
  EXPECT_NEAR(dot_q4_0(w4.data(), xq.data(), n), want, 1e-3 * std::sqrt(n));
  EXPECT_NEAR(scalar::dot_q4_0(w4.data(), xq.data(), n), want, 1e-3 * std::sqrt(n));

  std::vector<block_q6_k> w6(n / 256);
  quantize_row_q6_k(w.data(), w6.data(), n);
  dequantize_row_q6_k(w6.data(), wd.data(), n);
  want = 0;
  for (int64_t i = 0; i < n; ++i) want += double(wd[i]) * x[i];
  EXPECT_NEAR(dot_q6_k(w6.data(), x.data(), n), want, 1e-3 * std::sqrt(n));
  EXPECT_NEAR(scalar::dot_q6_k(w6.data(), x.data(), n), want, 1e-3 * std::sqrt(n));
  // A block whose six-bit values cover every code and every scale sign: each value's bits and its
  // group's scale must land where dequantize_row_q6_k puts them.
  std::vector<block_q6_k> edge(2);
  for (size_t b = 0; b < edge.size(); ++b) {
    for (int i = 0; i < 128; ++i) edge[b].ql[i] = static_cast<uint8_t>((i * 37 + 11 * b) & 0xFF);
    for (int i = 0; i < 64; ++i) edge[b].qh[i] = static_cast<uint8_t>((i * 101 + 7 * b) & 0xFF);
    for (int i = 0; i < 16; ++i) edge[b].scales[i] = static_cast<int8_t>(i * 17 - 128 + static_cast<int>(b));
    edge[b].d = fp32_to_fp16(0.01f);
  }
  std::vector<float> ed(512);
  dequantize_row_q6_k(edge.data(), ed.data(), 512);
  double want_edge = 0;
  for (int i = 0; i < 512; ++i) want_edge += double(ed[i]) * x[i];
  EXPECT_NEAR(dot_q6_k(edge.data(), x.data(), 512), want_edge, 1e-3 * std::abs(want_edge) + 1e-3);
}

// The dispatched quantized dot products (AVX-512 VNNI where present, two blocks per step) agree with
// the scalar references for even and odd block counts, with extreme codes included.
TEST(Dot, QuantizedDispatchMatchesScalarForAnyBlockCount) {
  for (int64_t n : {32, 64, 96, 4096 + 32}) {
    auto w = random_vector(n, 30), x = random_vector(n, 31);
    w[0] = 10.0f, w[1] = -10.0f, x[2] = -10.0f;  // codes at the ends of the ranges
    std::vector<block_q8_0> xq(n / 32), w8(n / 32);
    std::vector<block_q4_0> w4(n / 32);
    quantize_row_q8_0(x.data(), xq.data(), n);
    quantize_row_q8_0(w.data(), w8.data(), n);
    quantize_row_q4_0(w.data(), w4.data(), n);
    float s8 = scalar::dot_q8_0(w8.data(), xq.data(), n), s4 = scalar::dot_q4_0(w4.data(), xq.data(), n);
    EXPECT_NEAR(dot_q8_0(w8.data(), xq.data(), n), s8, 1e-4 * (1 + std::fabs(s8))) << n << " " << dot_implementation();
    EXPECT_NEAR(dot_q4_0(w4.data(), xq.data(), n), s4, 1e-4 * (1 + std::fabs(s4))) << n << " " << dot_implementation();
  }
}

TEST(Axpy, EveryRowTypeAddsItsDequantizedRow) {
  const int64_t n = 512;
  auto w = random_vector(n, 6), y0 = random_vector(n, 7);
  const float a = -0.75f;
  auto check = [&](const char* what, const std::vector<float>& row, const std::function<void(float*)>& axpy) {
    std::vector<float> y = y0;
    axpy(y.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], y0[i] + a * row[i], 1e-5) << what << " " << i;
  };
  check("f32", w, [&](float* y) { axpy_f32(a, w.data(), y, n); });
  check("f32 scalar", w, [&](float* y) { scalar::axpy_f32(a, w.data(), y, n); });
  std::vector<uint16_t> h(n), bf(n);
  std::vector<float> hd(n), bd(n);
  for (int64_t i = 0; i < n; ++i) {
    h[i] = fp32_to_fp16(w[i]), hd[i] = fp16_to_fp32(h[i]);
    bf[i] = fp32_to_bf16(w[i]), bd[i] = bf16_to_fp32(bf[i]);
  }
  check("f16", hd, [&](float* y) { axpy_f16(a, h.data(), y, n); });
  check("f16 scalar", hd, [&](float* y) { scalar::axpy_f16(a, h.data(), y, n); });
  check("bf16", bd, [&](float* y) { axpy_bf16(a, bf.data(), y, n); });
  check("bf16 scalar", bd, [&](float* y) { scalar::axpy_bf16(a, bf.data(), y, n); });
  std::vector<float> d(n);
  std::vector<block_q8_0> q8(n / 32);
  quantize_row_q8_0(w.data(), q8.data(), n);
  dequantize_row_q8_0(q8.data(), d.data(), n);
  check("q8_0", d, [&](float* y) { axpy_q8_0(a, q8.data(), y, n); });
  check("q8_0 scalar", d, [&](float* y) { scalar::axpy_q8_0(a, q8.data(), y, n); });
  std::vector<block_q4_0> q4(n / 32);
  quantize_row_q4_0(w.data(), q4.data(), n);
  dequantize_row_q4_0(q4.data(), d.data(), n);
  check("q4_0", d, [&](float* y) { axpy_q4_0(a, q4.data(), y, n); });
  check("q4_0 scalar", d, [&](float* y) { scalar::axpy_q4_0(a, q4.data(), y, n); });
  std::vector<block_q6_k> q6(n / 256);
  quantize_row_q6_k(w.data(), q6.data(), n);
  dequantize_row_q6_k(q6.data(), d.data(), n);
  check("q6_k", d, [&](float* y) { axpy_q6_k(a, q6.data(), y, n); });
  if (n % 256 == 0) {
    std::vector<block_q4_k> q4k(n / 256);
    quantize_row_q4_k(w.data(), q4k.data(), n);
    dequantize_row_q4_k(q4k.data(), d.data(), n);
    check("q4_k", d, [&](float* y) { axpy_q4_k(a, q4k.data(), y, n); });
    check("q4_k scalar", d, [&](float* y) { scalar::axpy_q4_k(a, q4k.data(), y, n); });
    std::vector<block_q5_k> q5k(n / 256);
    quantize_row_q5_k(w.data(), q5k.data(), n);
    dequantize_row_q5_k(q5k.data(), d.data(), n);
    check("q5_k", d, [&](float* y) { axpy_q5_k(a, q5k.data(), y, n); });
    check("q5_k scalar", d, [&](float* y) { scalar::axpy_q5_k(a, q5k.data(), y, n); });
  }
}

// One row against up to four vectors gives each one's dot product (tails past a multiple of 8 too).
TEST(Dot, OneRowAgainstSeveralVectors) {
  for (int64_t n : {8, 61, 2048}) {
    auto w = random_vector(n, 40);
    std::vector<uint16_t> h(static_cast<size_t>(n)), bf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) h[static_cast<size_t>(i)] = fp32_to_fp16(w[static_cast<size_t>(i)]), bf[static_cast<size_t>(i)] = fp32_to_bf16(w[static_cast<size_t>(i)]);
    std::vector<std::vector<float>> xs;
    for (int j = 0; j < 4; ++j) xs.push_back(random_vector(n, static_cast<uint32_t>(41 + j)));
    const float* px[4] = {xs[0].data(), xs[1].data(), xs[2].data(), xs[3].data()};
    for (int nx = 1; nx <= 4; ++nx) {
      float o32[4], o16[4], ob16[4];
      dotn_f32(w.data(), px, nx, n, o32);
      dotn_f16(h.data(), px, nx, n, o16);
      dotn_bf16(bf.data(), px, nx, n, ob16);
      for (int j = 0; j < nx; ++j) {
        EXPECT_NEAR(o32[j], scalar::dot_f32(w.data(), px[j], n), 1e-3) << n << " " << nx << " " << j;
        EXPECT_NEAR(o16[j], scalar::dot_f16(h.data(), px[j], n), 1e-3) << n << " " << nx << " " << j;
        EXPECT_NEAR(ob16[j], scalar::dot_bf16(bf.data(), px[j], n), 1e-3) << n << " " << nx << " " << j;
      }
    }
  }
}

// Two and four rows against up to four vectors: every (row, vector) dot product, tails included (n
// not a multiple of 16), on the AVX-512, AVX2 or scalar path the CPU picks.
TEST(Dot, SeveralRowsAgainstSeveralVectors) {
  for (int64_t n : {16, 61, 2048}) {
    std::vector<std::vector<float>> w;
    std::vector<std::vector<uint16_t>> h, bf;
    for (int r = 0; r < 4; ++r) {
      w.push_back(random_vector(n, static_cast<uint32_t>(50 + r)));
      h.emplace_back(static_cast<size_t>(n));
      bf.emplace_back(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        h.back()[static_cast<size_t>(i)] = fp32_to_fp16(w.back()[static_cast<size_t>(i)]), bf.back()[static_cast<size_t>(i)] = fp32_to_bf16(w.back()[static_cast<size_t>(i)]);
    }
    std::vector<std::vector<float>> xs;
    for (int j = 0; j < 4; ++j) xs.push_back(random_vector(n, static_cast<uint32_t>(60 + j)));
    const float* px[4] = {xs[0].data(), xs[1].data(), xs[2].data(), xs[3].data()};
    const float* pw[4] = {w[0].data(), w[1].data(), w[2].data(), w[3].data()};
    const uint16_t* ph[4] = {h[0].data(), h[1].data(), h[2].data(), h[3].data()};
    const uint16_t* pb[4] = {bf[0].data(), bf[1].data(), bf[2].data(), bf[3].data()};
    for (int nx = 1; nx <= 4; ++nx) {
      float a32[4], b32[4], a16[4], b16[4], ab[4], bb[4], f32[16], f16[16], fb[16];
      dot2n_f32(pw[0], pw[1], px, nx, n, a32, b32);
      dot2n_f16(ph[0], ph[1], px, nx, n, a16, b16);
      dot2n_bf16(pb[0], pb[1], px, nx, n, ab, bb);
      dot4n_f32(pw, px, nx, n, f32);
      dot4n_f16(ph, px, nx, n, f16);
      dot4n_bf16(pb, px, nx, n, fb);
      for (int j = 0; j < nx; ++j) {
        SCOPED_TRACE(testing::Message() << n << " " << nx << " " << j);
        EXPECT_NEAR(a32[j], scalar::dot_f32(pw[0], px[j], n), 1e-3);
        EXPECT_NEAR(b32[j], scalar::dot_f32(pw[1], px[j], n), 1e-3);
        EXPECT_NEAR(a16[j], scalar::dot_f16(ph[0], px[j], n), 1e-3);
        EXPECT_NEAR(b16[j], scalar::dot_f16(ph[1], px[j], n), 1e-3);
        EXPECT_NEAR(ab[j], scalar::dot_bf16(pb[0], px[j], n), 1e-3);
        EXPECT_NEAR(bb[j], scalar::dot_bf16(pb[1], px[j], n), 1e-3);
        for (int r = 0; r < 4; ++r) {
          EXPECT_NEAR(f32[4 * r + j], scalar::dot_f32(pw[r], px[j], n), 1e-3) << r;
          EXPECT_NEAR(f16[4 * r + j], scalar::dot_f16(ph[r], px[j], n), 1e-3) << r;
          EXPECT_NEAR(fb[4 * r + j], scalar::dot_bf16(pb[r], px[j], n), 1e-3) << r;
        }
      }
    }
  }
}

// A quantized row against up to four Q8_0 vectors: each one's dot product, as one at a time gives it
// (n with an odd number of blocks: the last block goes the single-vector way).
TEST(Dot, QuantizedRowAgainstSeveralVectors) {
  for (int64_t n : {32, 96, 2048}) {
    auto w = random_vector(n, 70);
    std::vector<block_q8_0> w8(static_cast<size_t>(n / qk8_0));
    std::vector<block_q4_0> w4(static_cast<size_t>(n / qk4_0));
    quantize_row_q8_0(w.data(), w8.data(), n);
    quantize_row_q4_0(w.data(), w4.data(), n);
    std::vector<std::vector<block_q8_0>> xs;
    for (int j = 0; j < 4; ++j) {
      auto v = random_vector(n, static_cast<uint32_t>(71 + j));
      xs.emplace_back(static_cast<size_t>(n / qk8_0));
      quantize_row_q8_0(v.data(), xs.back().data(), n);
    }
    const block_q8_0* px[4] = {xs[0].data(), xs[1].data(), xs[2].data(), xs[3].data()};
    for (int nx = 1; nx <= 4; ++nx) {
      float o8[4], o4[4];
      dotn_q8_0(w8.data(), px, nx, n, o8);
      dotn_q4_0(w4.data(), px, nx, n, o4);
      for (int j = 0; j < nx; ++j) {
        SCOPED_TRACE(testing::Message() << n << " " << nx << " " << j);
        EXPECT_NEAR(o8[j], scalar::dot_q8_0(w8.data(), px[j], n), 1e-3);
        EXPECT_NEAR(o4[j], scalar::dot_q4_0(w4.data(), px[j], n), 1e-3);
      }
    }
  }
}

// Four Q4_0 rows against one vector give each row's own dot product (an odd block count takes the tail).
TEST(Dot, FourQuantizedRowsAgainstOneVector) {
  for (int64_t n : {32, 96, 2048}) {
    std::vector<std::vector<block_q4_0>> rows;
    for (int r = 0; r < 4; ++r) {
      auto w = random_vector(n, static_cast<uint32_t>(80 + r));
      rows.emplace_back(static_cast<size_t>(n / qk4_0));
      quantize_row_q4_0(w.data(), rows.back().data(), n);
    }
    auto v = random_vector(n, 85);
    std::vector<block_q8_0> x(static_cast<size_t>(n / qk8_0));
    quantize_row_q8_0(v.data(), x.data(), n);
    const block_q4_0* w4[4] = {rows[0].data(), rows[1].data(), rows[2].data(), rows[3].data()};
    float o[4];
    dot4r_q4_0(w4, x.data(), n, o);
    for (int r = 0; r < 4; ++r) {
      SCOPED_TRACE(testing::Message() << n << " row " << r);
      const float want = scalar::dot_q4_0(w4[r], x.data(), n);
      EXPECT_NEAR(o[r], want, 1e-4 * (1 + std::abs(want)));
    }
  }
}

// Interleaving sixteen Q4_0 rows and back gives the same bytes; the interleaved product of each row
// with up to four vectors equals that row's own Q4_0 dot product, in every implementation.
TEST(Dot, SixteenInterleavedRowsAgainstSeveralVectors) {
  for (int64_t n : {32, 64, 2048}) {
    const int64_t nb = n / qk4_0;
    std::vector<block_q4_0> rows(static_cast<size_t>(16 * nb));
    for (int r = 0; r < 16; ++r) {
      auto w = random_vector(n, static_cast<uint32_t>(300 + r), 0.5f + r);  // scales differ per row
      quantize_row_q4_0(w.data(), rows.data() + r * nb, n);
    }
    std::vector<block_q4_0x16> packed(static_cast<size_t>(nb));
    interleave_q4_0x16(rows.data(), nb, packed.data());
    std::vector<block_q4_0> back(rows.size());
    deinterleave_q4_0x16(packed.data(), nb, back.data());
    ASSERT_EQ(0, std::memcmp(back.data(), rows.data(), rows.size() * sizeof(block_q4_0)));

    std::vector<std::vector<block_q8_0>> xs(4, std::vector<block_q8_0>(static_cast<size_t>(nb)));
    std::vector<std::vector<q8_0_terms>> sums(4, std::vector<q8_0_terms>(static_cast<size_t>(nb)));
    const block_q8_0* px[4];
    const q8_0_terms* ps[4];
    for (int j = 0; j < 4; ++j) {
      auto v = random_vector(n, static_cast<uint32_t>(400 + j));
      quantize_row_q8_0(v.data(), xs[j].data(), n);
      q8_0_block_terms(xs[j].data(), nb, sums[j].data());
      px[j] = xs[j].data();
      ps[j] = sums[j].data();
    }
    {
      // Two groups at once (decode's two streams): each group's result as when it is alone.
      std::vector<block_q4_0x16> other(packed.rbegin(), packed.rend());
      float a[16], b[16], alone_a[16], alone_b[16];
      dot16r2_q4_0(packed.data(), other.data(), px[0], ps[0], n, a, b);
      dot16r_q4_0(packed.data(), px, ps, 1, n, alone_a);
      dot16r_q4_0(other.data(), px, ps, 1, n, alone_b);
      for (int r = 0; r < 16; ++r) {
        EXPECT_EQ(a[r], alone_a[r]) << n << " row " << r;
        EXPECT_EQ(b[r], alone_b[r]) << n << " row " << r;
      }
    }
    for (int nx = 1; nx <= 4; ++nx) {
      float got[64], ref[64];
      dot16r_q4_0(packed.data(), px, ps, nx, n, got);
      scalar::dot16r_q4_0(packed.data(), px, ps, nx, n, ref);
      for (int j = 0; j < nx; ++j)
        for (int r = 0; r < 16; ++r) {
          SCOPED_TRACE(testing::Message() << n << " nx " << nx << " vector " << j << " row " << r);
          const float want = scalar::dot_q4_0(rows.data() + r * nb, px[j], n);
          EXPECT_NEAR(got[16 * j + r], want, 1e-4 * (1 + std::abs(want)));
          EXPECT_NEAR(ref[16 * j + r], want, 1e-4 * (1 + std::abs(want)));
        }
    }
  }
}

// The sixteen-row products over listed blocks only (a sparse layer's down product, blocks of 32
// neurons none of which fired left out): each row's sum over exactly those blocks, block b of the rows
// against block b of the vector (a kernel reading the vector's blocks packed, or every block, gets
// other sums: every block of the vector here is non-zero); and over the non-zero blocks of a vector
// whose other blocks are zero, bit for bit what the product over every block gives.
TEST(Dot, SixteenRowsOverListedBlocks) {
  const int64_t n = 2048, nb = n / qk4_0;
  std::vector<block_q4_0> rows(static_cast<size_t>(16 * nb));
  for (int r = 0; r < 16; ++r) {
    auto w = random_vector(n, static_cast<uint32_t>(500 + r), 0.5f + r);
    quantize_row_q4_0(w.data(), rows.data() + r * nb, n);
  }
  std::vector<block_q4_0x16> a(static_cast<size_t>(nb)), b(static_cast<size_t>(nb));
  interleave_q4_0x16(rows.data(), nb, a.data());
  std::vector<block_q4_0> reversed(rows.rbegin(), rows.rend());
  interleave_q4_0x16(reversed.data(), nb, b.data());
  std::vector<std::vector<block_q8_0>> xs(4, std::vector<block_q8_0>(static_cast<size_t>(nb)));
  std::vector<std::vector<q8_0_terms>> ts(4, std::vector<q8_0_terms>(static_cast<size_t>(nb)));
  const block_q8_0* px[4];
  const q8_0_terms* pt[4];
  for (int j = 0; j < 4; ++j) {
    auto v = random_vector(n, static_cast<uint32_t>(600 + j));
    quantize_row_q8_0(v.data(), xs[j].data(), n);
    q8_0_block_terms(xs[j].data(), nb, ts[j].data());
    px[j] = xs[j].data(), pt[j] = ts[j].data();
  }
  const std::vector<int32_t> list = {5, 0, 63, 17, 18, 40, 41, 2};
  const int64_t count = static_cast<int64_t>(list.size());
  for (int nx = 1; nx <= 4; ++nx) {
    float got[64], ref[64];
    dot16r_q4_0_at(a.data(), px, pt, nx, list.data(), count, got);
    scalar::dot16r_q4_0_at(a.data(), px, pt, nx, list.data(), count, ref);
    for (int j = 0; j < nx; ++j)
      for (int r = 0; r < 16; ++r) {
        float want = 0;
        for (int32_t blk : list) want += scalar::dot_q4_0(rows.data() + r * nb + blk, px[j] + blk, qk4_0);
        SCOPED_TRACE(testing::Message() << "nx " << nx << " vector " << j << " row " << r);
        EXPECT_NEAR(got[16 * j + r], want, 1e-4 * (1 + std::abs(want)));
        EXPECT_NEAR(ref[16 * j + r], want, 1e-4 * (1 + std::abs(want)));
      }
  }
  {
    float two_a[16], two_b[16], alone_a[16], alone_b[16];
    dot16r2_q4_0_at(a.data(), b.data(), px[0], pt[0], list.data(), count, two_a, two_b);
    dot16r_q4_0_at(a.data(), px, pt, 1, list.data(), count, alone_a);
    dot16r_q4_0_at(b.data(), px, pt, 1, list.data(), count, alone_b);
    for (int r = 0; r < 16; ++r) {
      EXPECT_EQ(two_a[r], alone_a[r]);
      EXPECT_EQ(two_b[r], alone_b[r]);
    }
    EXPECT_NE(std::vector<float>(two_a, two_a + 16), std::vector<float>(two_b, two_b + 16));
  }
  // Only the listed blocks of the vector non-zero (in ascending order, as the engine lists them).
  std::vector<int32_t> ascending = list;
  std::sort(ascending.begin(), ascending.end());
  auto v = random_vector(n, 700);
  for (int64_t k = 0; k < n; ++k)
    if (!std::binary_search(ascending.begin(), ascending.end(), static_cast<int32_t>(k / qk4_0))) v[static_cast<size_t>(k)] = 0.0f;
  std::vector<block_q8_0> x(static_cast<size_t>(nb));
  std::vector<q8_0_terms> t(static_cast<size_t>(nb));
  quantize_row_q8_0(v.data(), x.data(), n);
  q8_0_block_terms(x.data(), nb, t.data());
  const block_q8_0* x1[1] = {x.data()};
  const q8_0_terms* t1[1] = {t.data()};
  float every[16], listed[16], every2[16], listed2[16], other[16];
  dot16r_q4_0(a.data(), x1, t1, 1, n, every);
  dot16r_q4_0_at(a.data(), x1, t1, 1, ascending.data(), count, listed);
  dot16r2_q4_0(b.data(), a.data(), x.data(), t.data(), n, other, every2);
  dot16r2_q4_0_at(b.data(), a.data(), x.data(), t.data(), ascending.data(), count, other, listed2);
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(listed[r], every[r]) << "row " << r;
    EXPECT_EQ(listed2[r], every2[r]) << "row " << r;
    EXPECT_NE(every[r], 0.0f);
  }
}

// Sixteen Q4_K (Q5_K) rows interleaved and back give the same bytes; the interleaved product of each
// row with up to four Q8_K vectors equals that row's own Q4_K (Q5_K) x Q8_K dot product, in every
// implementation (this binary runs again under HOTCOLD_NO_AVX512 for the AVX2 one). The blocks' order
// matters (the reversed group gives other sums, those of the reversed rows), and so do the rows' lanes
// (each row its own scales).
template <typename Row, typename Group>
struct k_x16 {
  void (*quantize)(const float*, Row*, int64_t);
  void (*interleave)(const Row*, int64_t, Group*);
  void (*deinterleave)(const Group*, int64_t, Row*);
  void (*dot16r)(const Group*, const block_q8_k* const*, const q8_k_group_sums* const*, int, int64_t, float*);
  void (*dot16r_scalar)(const Group*, const block_q8_k* const*, const q8_k_group_sums* const*, int, int64_t, float*);
  void (*dot16r2)(const Group*, const Group*, const block_q8_k*, const q8_k_group_sums*, int64_t, float*, float*);
  float (*row_dot)(const Row*, const block_q8_k*, int64_t);
  uint32_t seed;                 // rows' seeds seed + r, the vectors' seed + 50 + j
  float (*vary)(float, int64_t);  // value k of a row as the test shapes it (groups' scales or mins differ)
};

template <typename Row, typename Group>
void check_interleaved_k_rows(const k_x16<Row, Group>& k) {
  for (int64_t n : {256, 512, 2048}) {
    const int64_t nb = n / qk_k;
    std::vector<Row> rows(static_cast<size_t>(16 * nb));
    for (int r = 0; r < 16; ++r) {
      auto w = random_vector(n, k.seed + static_cast<uint32_t>(r), 0.3f + 0.2f * r);
      for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i)] = k.vary(w[static_cast<size_t>(i)], i);
      k.quantize(w.data(), rows.data() + r * nb, n);
    }
    std::vector<Group> packed(static_cast<size_t>(nb));
    k.interleave(rows.data(), nb, packed.data());
    std::vector<Row> back(rows.size());
    k.deinterleave(packed.data(), nb, back.data());
    ASSERT_EQ(0, std::memcmp(back.data(), rows.data(), rows.size() * sizeof(Row)));

    std::vector<std::vector<block_q8_k>> xs(4, std::vector<block_q8_k>(static_cast<size_t>(nb)));
    std::vector<std::vector<q8_k_group_sums>> sums(4, std::vector<q8_k_group_sums>(static_cast<size_t>(nb)));
    const block_q8_k* px[4];
    const q8_k_group_sums* pg[4];
    for (int j = 0; j < 4; ++j) {
      auto v = random_vector(n, k.seed + 50 + static_cast<uint32_t>(j));
      quantize_row_q8_k(v.data(), xs[j].data(), n);
      q8_k_block_group_sums(xs[j].data(), nb, sums[j].data());
      px[j] = xs[j].data();
      pg[j] = sums[j].data();
    }
    for (int nx = 1; nx <= 4; ++nx) {
      float got[64], ref[64];
      k.dot16r(packed.data(), px, pg, nx, n, got);
      k.dot16r_scalar(packed.data(), px, pg, nx, n, ref);
      for (int j = 0; j < nx; ++j)
        for (int r = 0; r < 16; ++r) {
          SCOPED_TRACE(testing::Message() << n << " nx " << nx << " vector " << j << " row " << r);
          const float want = k.row_dot(rows.data() + r * nb, px[j], n);
          EXPECT_NEAR(got[16 * j + r], want, 1e-4 * (1 + std::abs(want)));
          EXPECT_NEAR(ref[16 * j + r], want, 1e-4 * (1 + std::abs(want)));
        }
    }
    // Two groups at once (decode's two streams): each group's result as when it is alone; the
    // reversed group is the reversed rows' product, which differs from the group's (nb > 1).
    std::vector<Group> reversed(packed.rbegin(), packed.rend());
    float a[16], b[16], alone_a[16], alone_b[16];
    k.dot16r2(packed.data(), reversed.data(), px[0], pg[0], n, a, b);
    k.dot16r(packed.data(), px, pg, 1, n, alone_a);
    k.dot16r(reversed.data(), px, pg, 1, n, alone_b);
    int differ = 0;
    for (int r = 0; r < 16; ++r) {
      EXPECT_EQ(a[r], alone_a[r]) << n << " row " << r;
      EXPECT_EQ(b[r], alone_b[r]) << n << " row " << r;
      std::vector<Row> row_reversed(rows.begin() + r * nb, rows.begin() + (r + 1) * nb);
      std::reverse(row_reversed.begin(), row_reversed.end());
      const float want = k.row_dot(row_reversed.data(), px[0], n);
      EXPECT_NEAR(b[r], want, 1e-4 * (1 + std::abs(want))) << n << " row " << r;
      differ += std::abs(b[r] - a[r]) > 1e-3f * (1 + std::abs(a[r]));
    }
    if (nb > 1) {
      EXPECT_GE(differ, 12) << n;
    }
  }
}

// A Q8_K block of -128s (scale 1), and its group sums.
block_q8_k all_minus_128(q8_k_group_sums& g) {
  block_q8_k x;
  x.d = 1.0f;
  std::memset(x.qs, 0x80, sizeof x.qs);
  for (auto& s : x.bsums) s = -16 * 128;
  q8_k_block_group_sums(&x, 1, &g);
  return x;
}

// Q5_K's extremes: every value 31 (qh all ones), every scale and min 63, against -128s: four steps of
// a group in the AVX2 kernel's 16-bit lanes reach 4 x 2 x 31 x -128 = -31744 (eight would not fit).
TEST(Dot, InterleavedQ5_KAtTheExtremes) {
  std::vector<block_q5_k> rows(16);
  for (auto& r : rows) {
    r.d = fp32_to_fp16(1.0f), r.dmin = fp32_to_fp16(1.0f);
    std::memset(r.scales, 0xFF, sizeof r.scales);
    std::memset(r.qs, 0xFF, sizeof r.qs);
    std::memset(r.qh, 0xFF, sizeof r.qh);
  }
  rows[9].qh[3] = 0;  // one row's values 3 of every group without their fifth bit
  block_q5_kx16 packed;
  interleave_q5_kx16(rows.data(), 1, &packed);
  q8_k_group_sums g;
  const block_q8_k x = all_minus_128(g);
  const block_q8_k* px[1] = {&x};
  const q8_k_group_sums* pg[1] = {&g};
  float got[16], ref[16];
  dot16r_q5_k(&packed, px, pg, 1, qk_k, got);
  scalar::dot16r_q5_k(&packed, px, pg, 1, qk_k, ref);
  const double msum = 8.0 * 63 * 32 * -128;
  for (int r = 0; r < 16; ++r) {
    const double isum = 8.0 * 63 * (32 * 31 - (r == 9 ? 16 : 0)) * -128, want = isum - msum;
    EXPECT_NEAR(got[r], want, 1e-6 * std::abs(want)) << r;
    EXPECT_NEAR(ref[r], want, 1e-6 * std::abs(want)) << r;
    EXPECT_NEAR(scalar::dot_q5_k_q8_k(&rows[static_cast<size_t>(r)], &x, qk_k), want, 1e-6 * std::abs(want)) << r;
  }
}

// Q6_K's extremes: every quant 63 (+31 after the offset) or 0 (-32), scales of 127 and -128, against
// vectors of -128s and of 127s: two steps' sums in the AVX2 kernel's 16-bit lanes reach 2 x 2 x 63 x
// 128 = 32256 (fits); every implementation gives the exact integer result.
TEST(Dot, InterleavedQ6_KAtTheExtremes) {
  std::vector<block_q6_k> rows(16);
  for (int r = 0; r < 16; ++r) {
    auto& b = rows[static_cast<size_t>(r)];
    b.d = fp32_to_fp16(r == 7 ? 0.5f : 1.0f);
    std::memset(b.ql, r % 2 ? 0xFF : 0x00, sizeof b.ql);
    std::memset(b.qh, r % 2 ? 0xFF : 0x00, sizeof b.qh);
    for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -128 : 127);
  }
  block_q6_kx16 packed;
  interleave_q6_kx16(rows.data(), 1, &packed);
  for (int8_t xv : {static_cast<int8_t>(-128), static_cast<int8_t>(127)}) {
    block_q8_k x;
    x.d = 1.0f;
    std::memset(x.qs, static_cast<uint8_t>(xv), sizeof x.qs);
    for (auto& s : x.bsums) s = static_cast<int16_t>(16 * xv);
    const block_q8_k* px[1] = {&x};
    float got[16], ref[16];
    dot16r_q6_k(&packed, px, 1, qk_k, got);
    scalar::dot16r_q6_k(&packed, px, 1, qk_k, ref);
    for (int r = 0; r < 16; ++r) {
      const double q = r % 2 ? 31 : -32, group = 16.0 * q * xv, want = (r == 7 ? 0.5 : 1.0) * 8 * (127 - 128) * group;
      EXPECT_NEAR(got[r], want, 1e-6 * std::abs(want) + 1e-3) << r << " x " << int(xv);
      EXPECT_NEAR(ref[r], want, 1e-6 * std::abs(want) + 1e-3) << r << " x " << int(xv);
    }
  }
}

float mins_differ(float w, int64_t k) { return w + 0.05f * static_cast<float>((k / 32) % 8) - 0.1f; }

TEST(Dot, SixteenInterleavedQ4_KRowsAgainstSeveralVectors) {
  check_interleaved_k_rows<block_q4_k, block_q4_kx16>({quantize_row_q4_k, interleave_q4_kx16, deinterleave_q4_kx16, dot16r_q4_k, scalar::dot16r_q4_k,
                                                       dot16r2_q4_k, scalar::dot_q4_k_q8_k, 900, mins_differ});
}
TEST(Dot, SixteenInterleavedQ5_KRowsAgainstSeveralVectors) {
  check_interleaved_k_rows<block_q5_k, block_q5_kx16>({quantize_row_q5_k, interleave_q5_kx16, deinterleave_q5_kx16, dot16r_q5_k, scalar::dot16r_q5_k,
                                                       dot16r2_q5_k, scalar::dot_q5_k_q8_k, 900, mins_differ});
}
// Q6_K likewise (no mins: its kernels take no group sums).
TEST(Dot, SixteenInterleavedQ6_KRowsAgainstSeveralVectors) {
  check_interleaved_k_rows<block_q6_k, block_q6_kx16>(
      {quantize_row_q6_k, interleave_q6_kx16, deinterleave_q6_kx16,
       [](const block_q6_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const*, int nx, int64_t n, float* out) { dot16r_q6_k(w, x, nx, n, out); },
       [](const block_q6_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const*, int nx, int64_t n, float* out) {
         scalar::dot16r_q6_k(w, x, nx, n, out);
       },
       [](const block_q6_kx16* wa, const block_q6_kx16* wb, const block_q8_k* x, const q8_k_group_sums*, int64_t n, float* oa, float* ob) {
         dot16r2_q6_k(wa, wb, x, n, oa, ob);
       },
       scalar::dot_q6_k_q8_k, 1100, [](float w, int64_t k) { return w * (0.5f + 0.1f * static_cast<float>((k / 16) % 11)); }});  // groups' scales differ
}

// The extremes: every quant 15, every scale and min 63, against a vector of -128s: a group's eight
// steps sum to 8 x 2 x 15 x -128 = -30720 in the AVX2 kernel's 16-bit lanes (one more would not
// fit); every implementation gives the exact integer result.
TEST(Dot, InterleavedQ4_KAtTheExtremes) {
  std::vector<block_q4_k> rows(16);
  for (auto& r : rows) {
    r.d = fp32_to_fp16(1.0f), r.dmin = fp32_to_fp16(1.0f);
    std::memset(r.scales, 0xFF, sizeof r.scales);
    std::memset(r.qs, 0xFF, sizeof r.qs);
  }
  rows[5].d = fp32_to_fp16(2.0f);  // one row's own scale, to see the lanes kept apart
  block_q4_kx16 packed;
  interleave_q4_kx16(rows.data(), 1, &packed);
  q8_k_group_sums g;
  const block_q8_k x = all_minus_128(g);
  const block_q8_k* px[1] = {&x};
  const q8_k_group_sums* pg[1] = {&g};
  float got[16], ref[16];
  dot16r_q4_k(&packed, px, pg, 1, qk_k, got);
  scalar::dot16r_q4_k(&packed, px, pg, 1, qk_k, ref);
  const double isum = 8.0 * 63 * 32 * 15 * -128, msum = 8.0 * 63 * 32 * -128;
  for (int r = 0; r < 16; ++r) {
    const double want = (r == 5 ? 2.0 : 1.0) * isum - msum;
    EXPECT_NEAR(got[r], want, 1e-6 * std::abs(want)) << r;
    EXPECT_NEAR(ref[r], want, 1e-6 * std::abs(want)) << r;
    EXPECT_NEAR(scalar::dot_q4_k_q8_k(&rows[static_cast<size_t>(r)], &x, qk_k), want, 1e-6 * std::abs(want)) << r;
  }
}

// Q6_K rows against Q8_K activations: every implementation gives the dot product of the dequantized
// row with the dequantized activations (exact integer sums, so up to float rounding), and the
// product is close to the float-activation one.
TEST(Dot, Q6_KAgainstQ8_KActivations) {
  for (int64_t n : {256, 512, 2048}) {
    auto w = random_vector(n, 500, 0.7f);
    auto v = random_vector(n, 501);
    std::vector<block_q6_k> wq(static_cast<size_t>(n / qk_k));
    std::vector<block_q8_k> xq(static_cast<size_t>(n / qk_k));
    quantize_row_q6_k(w.data(), wq.data(), n);
    quantize_row_q8_k(v.data(), xq.data(), n);
    std::vector<float> wd(static_cast<size_t>(n));
    dequantize_row_q6_k(wq.data(), wd.data(), n);
    double want = 0, want_float_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto& blk = xq[static_cast<size_t>(i / qk_k)];
      want += double(wd[i]) * blk.d * blk.qs[i % qk_k];
      want_float_x += double(wd[i]) * v[i];
    }
    for (const auto& blk : xq) {  // the group sums are the quants' sums
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += blk.qs[16 * g + i];
        ASSERT_EQ(blk.bsums[g], s);
      }
    }
    SCOPED_TRACE(testing::Message() << n);
    EXPECT_NEAR(dot_q6_k_q8_k(wq.data(), xq.data(), n), want, 1e-4 * (1 + std::abs(want)));
    EXPECT_NEAR(scalar::dot_q6_k_q8_k(wq.data(), xq.data(), n), want, 1e-4 * (1 + std::abs(want)));
    EXPECT_NEAR(dot_q6_k_q8_k(wq.data(), xq.data(), n), want_float_x, 0.02 * std::sqrt(double(n)));
  }
}

// One row of values quantized as Q4_K and as Q5_K.
std::pair<std::vector<block_q4_k>, std::vector<block_q5_k>> q4_k_and_q5_k_rows(const std::vector<float>& w) {
  const auto n = static_cast<int64_t>(w.size());
  std::vector<block_q4_k> w4(static_cast<size_t>(n / qk_k));
  std::vector<block_q5_k> w5(static_cast<size_t>(n / qk_k));
  quantize_row_q4_k(w.data(), w4.data(), n);
  quantize_row_q5_k(w.data(), w5.data(), n);
  return {std::move(w4), std::move(w5)};
}

// Q4_K / Q5_K rows against float and Q8_K activations: every implementation gives the dot product of
// the dequantized row (with the floats, or with the dequantized Q8_K values), mins included.
TEST(Dot, Q4_KAndQ5_KRows) {
  for (int64_t n : {256, 512, 2048}) {
    auto w = random_vector(n, 510, 0.7f);
    for (int64_t i = 0; i < n; i += 7) w[static_cast<size_t>(i)] += 1.5f;  // groups not centred on zero: the mins matter
    auto v = random_vector(n, 511);
    std::vector<block_q8_k> xq(static_cast<size_t>(n / qk_k));
    quantize_row_q8_k(v.data(), xq.data(), n);
    const auto [w4, w5] = q4_k_and_q5_k_rows(w);
    std::vector<float> d4(static_cast<size_t>(n)), d5(static_cast<size_t>(n));
    dequantize_row_q4_k(w4.data(), d4.data(), n);
    dequantize_row_q5_k(w5.data(), d5.data(), n);
    double f4 = 0, f5 = 0, q4 = 0, q5 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const auto& blk = xq[static_cast<size_t>(i / qk_k)];
      const double xi = double(blk.d) * blk.qs[i % qk_k];
      f4 += double(d4[i]) * v[i], f5 += double(d5[i]) * v[i];
      q4 += double(d4[i]) * xi, q5 += double(d5[i]) * xi;
    }
    SCOPED_TRACE(testing::Message() << n);
    const double tol = 1e-4 * std::sqrt(double(n));
    EXPECT_NEAR(dot_q4_k(w4.data(), v.data(), n), f4, tol * (1 + std::abs(f4)));
    EXPECT_NEAR(scalar::dot_q4_k(w4.data(), v.data(), n), f4, tol * (1 + std::abs(f4)));
    EXPECT_NEAR(dot_q5_k(w5.data(), v.data(), n), f5, tol * (1 + std::abs(f5)));
    EXPECT_NEAR(scalar::dot_q5_k(w5.data(), v.data(), n), f5, tol * (1 + std::abs(f5)));
    EXPECT_NEAR(dot_q4_k_q8_k(w4.data(), xq.data(), n), q4, tol * (1 + std::abs(q4)));
    EXPECT_NEAR(scalar::dot_q4_k_q8_k(w4.data(), xq.data(), n), q4, tol * (1 + std::abs(q4)));
    EXPECT_NEAR(dot_q5_k_q8_k(w5.data(), xq.data(), n), q5, tol * (1 + std::abs(q5)));
    EXPECT_NEAR(scalar::dot_q5_k_q8_k(w5.data(), xq.data(), n), q5, tol * (1 + std::abs(q5)));
  }
}

// A Q6_K row against four tokens: each token's product exactly as the one-token kernel gives it, in
// the token's own place (tokens that differ: a kernel that mixed them up would be caught).
TEST(Dot, Q6_KRowAgainstFourTokens) {
  const int64_t n = 4 * qk_k;
  auto w = random_vector(n, 530, 0.8f);
  std::vector<block_q6_k> wq(static_cast<size_t>(n / qk_k));
  quantize_row_q6_k(w.data(), wq.data(), n);
  std::vector<std::vector<block_q8_k>> xq(4, std::vector<block_q8_k>(static_cast<size_t>(n / qk_k)));
  const block_q8_k* xs[4];
  for (int t = 0; t < 4; ++t) {
    auto v = random_vector(n, 531 + t, 0.5f + t);
    quantize_row_q8_k(v.data(), xq[static_cast<size_t>(t)].data(), n);
    xs[t] = xq[static_cast<size_t>(t)].data();
  }
  float out[4];
  dot4t_q6_k_q8_k(wq.data(), xs, n, out);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(out[t], dot_q6_k_q8_k(wq.data(), xs[t], n)) << t;
    EXPECT_NEAR(out[t], scalar::dot_q6_k_q8_k(wq.data(), xs[t], n), 1e-3 * (1 + std::abs(out[t]))) << t;
  }
  EXPECT_NE(out[0], out[1]);
}

// Rows of Q4_K / Q5_K to floats as a prompt's products convert them: the reference dequantization's
// values bit for bit, block after block in order (the kernel on this CPU; the scalar one is that
// reference).
TEST(Dot, Q4_KAndQ5_KToFloatIsTheReference) {
  const int64_t n = 8 * qk_k;
  auto w = random_vector(n, 520, 0.9f);
  for (int64_t i = 0; i < n; i += 5) w[static_cast<size_t>(i)] += 2.0f;
  const auto [w4, w5] = q4_k_and_q5_k_rows(w);
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  dequantize_row_q4_k(w4.data(), want.data(), n);
  to_float_q4_k(w4.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "Q4_K value " << i;
  dequantize_row_q5_k(w5.data(), want.data(), n);
  to_float_q5_k(w5.data(), got.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << "Q5_K value " << i;
}

// The vector quantization gives the reference's bytes (ties to even both), including all-zero blocks.
TEST(Quants, Q8_0VectorCodeMatchesTheReference) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto v = random_vector(1024, 600 + seed, 0.1f + seed);
    std::fill(v.begin() + 64, v.begin() + 96, 0.0f);
    for (int i = 0; i < 32; ++i) v[static_cast<size_t>(128 + i)] = static_cast<float>(i - 16) * 0.5f;  // exact ties at x id = k + 1/2
    std::vector<block_q8_0> got(32), want(32);
    quantize_row_q8_0(v.data(), got.data(), 1024);
    scalar::quantize_row_q8_0(v.data(), want.data(), 1024);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(block_q8_0) * 32)) << "seed " << seed;
  }
}

// Likewise Q8_K: the same quants, scale and sums of 16 (an all-zero block, exact ties, and a block
// whose largest value is negative, so that -127 appears).
TEST(Quants, Q8_KVectorCodeMatchesTheReference) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto v = random_vector(1024, 650 + seed, 0.1f + seed);
    std::fill(v.begin() + 256, v.begin() + 512, 0.0f);
    for (int i = 0; i < 256; ++i) v[static_cast<size_t>(512 + i)] = static_cast<float>(i % 64 - 32) * 0.5f * 127.0f / 32.0f;  // ties at x id = k + 1/2
    v[900] = -1000.0f;
    std::vector<block_q8_k> got(4), want(4);
    quantize_row_q8_k(v.data(), got.data(), 1024);
    scalar::quantize_row_q8_k(v.data(), want.data(), 1024);
    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), sizeof(block_q8_k) * 4)) << "seed " << seed;
    ASSERT_EQ(got[3].qs[900 - 768], -127);
  }
}

// Four Q4_0 rows against the rearranged vector: each row's own dot product (and the rearrangement's
// offsets are 8 x the sums of the values each lane meets).
TEST(Dot, FourQuantizedRowsAgainstTheRearrangedVector) {
  for (int64_t n : {128, 2048}) {
    const int64_t nb = n / qk4_0;
    std::vector<std::vector<block_q4_0>> rows;
    for (int r = 0; r < 4; ++r) {
      auto w = random_vector(n, static_cast<uint32_t>(700 + r), 0.3f + r);
      rows.emplace_back(static_cast<size_t>(nb));
      quantize_row_q4_0(w.data(), rows.back().data(), n);
    }
    auto v = random_vector(n, 710);
    std::vector<block_q8_0> x(static_cast<size_t>(nb));
    quantize_row_q8_0(v.data(), x.data(), n);
    std::vector<q8_0_x4> x4(static_cast<size_t>(nb / 4));
    q8_0_to_x4(x.data(), nb, x4.data());
    int32_t all = 0, offsets = 0;
    for (const auto& b : x) for (int8_t q : b.qs) all += q;
    for (const auto& g : x4) for (int32_t o : g.offset) offsets += o;
    ASSERT_EQ(offsets, 8 * all);
    const block_q4_0* w4[4] = {rows[0].data(), rows[1].data(), rows[2].data(), rows[3].data()};
    float o[4];
    dot4r_q4_0_x4(w4, x.data(), x4.data(), n, o);
    // Asking for the next rows as it reads (here the same rows backwards) keeps the sums, bit for bit.
    const block_q4_0* next[4] = {rows[3].data(), rows[2].data(), rows[1].data(), rows[0].data()};
    float o_ahead[4];
    dot4r_q4_0_x4_ahead(w4, x.data(), x4.data(), n, o_ahead, next);
    // And the down rows' kernel likewise.
    const float a[4] = {0.5f, -1.25f, 2.0f, 0.0625f};
    auto y = random_vector(n, 711), y0 = y;
    axpy4_q4_0_ahead(a, w4, y.data(), n, next);
    axpy4_q4_0(a, w4, y0.data(), n);
    EXPECT_EQ(y, y0) << n;
    EXPECT_NE(y, random_vector(n, 711)) << n;
    for (int r = 0; r < 4; ++r) {
      SCOPED_TRACE(testing::Message() << n << " row " << r);
      const float want = scalar::dot_q4_0(w4[r], x.data(), n);
      EXPECT_NEAR(o[r], want, 1e-4 * (1 + std::abs(want)));
      EXPECT_EQ(o_ahead[r], o[r]);
    }
  }
}

// One Q4_0 row against up to four rearranged vectors (a shared neuron in a batch): each vector's product
// in its own place, bit for bit what the four-row kernel gives that row against that vector alone,
// and near the reference; lengths not a multiple of 128 go the plain way.
TEST(Dot, OneQuantizedRowAgainstRearrangedVectors) {
  for (int64_t n : {128, 2048, 96}) {
    const int64_t nb = n / qk4_0;
    auto w = random_vector(n, 720, 0.6f);
    std::vector<block_q4_0> row(static_cast<size_t>(nb));
    quantize_row_q4_0(w.data(), row.data(), n);
    std::vector<std::vector<block_q8_0>> xq(4, std::vector<block_q8_0>(static_cast<size_t>(nb)));
    std::vector<std::vector<q8_0_x4>> x4(4, std::vector<q8_0_x4>(static_cast<size_t>((nb + 3) / 4)));
    const block_q8_0* xs[4];
    const q8_0_x4* x4s[4];
    for (int j = 0; j < 4; ++j) {
      auto v = random_vector(n, static_cast<uint32_t>(721 + j), 0.4f + j);
      quantize_row_q8_0(v.data(), xq[static_cast<size_t>(j)].data(), n);
      if (nb % 4 == 0) q8_0_to_x4(xq[static_cast<size_t>(j)].data(), nb, x4[static_cast<size_t>(j)].data());
      xs[j] = xq[static_cast<size_t>(j)].data();
      x4s[j] = x4[static_cast<size_t>(j)].data();
    }
    for (int nx = 1; nx <= 4; ++nx) {
      float o[4], plain[4];
      dotn_q4_0_x4(row.data(), xs, x4s, nx, n, o);
      dotn_q4_0(row.data(), xs, nx, n, plain);
      for (int j = 0; j < nx; ++j) {
        SCOPED_TRACE(testing::Message() << n << " vectors " << nx << " vector " << j);
        const block_q4_0* four[4] = {row.data(), row.data(), row.data(), row.data()};
        float alone[4];
        if (nb % 4 == 0) dot4r_q4_0_x4(four, xs[j], x4s[j], n, alone);
        // (Where the CPU has no byte permutes the plain kernel serves both.)
        EXPECT_EQ(o[j], cpu().vbmi && nb % 4 == 0 ? alone[0] : plain[j]);
        const float want = scalar::dot_q4_0(row.data(), xs[j], n);
        EXPECT_NEAR(o[j], want, 1e-4 * (1 + std::abs(want)));
      }
    }
  }
}

// Sixteen interleaved F16 rows: the layout round-trips, and each row against up to four vectors is its
// own dot product, in every implementation (odd lengths take the tails).
TEST(Dot, SixteenInterleavedF16RowsAgainstSeveralVectors) {
  for (int64_t n : {1, 7, 256, 2048}) {
    std::vector<uint16_t> rows(static_cast<size_t>(16 * n));
    auto w = random_vector(16 * n, 800);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = fp32_to_fp16(w[i]);
    std::vector<uint16_t> packed(rows.size()), back(rows.size());
    interleave_f16x16(rows.data(), n, packed.data());
    deinterleave_f16x16(packed.data(), n, back.data());
    ASSERT_EQ(back, rows);
    std::vector<std::vector<float>> xs;
    const float* px[4];
    for (int j = 0; j < 4; ++j) {
      xs.push_back(random_vector(n, static_cast<uint32_t>(810 + j)));
      px[j] = xs.back().data();
    }
    for (int nx = 1; nx <= 4; ++nx) {
      float got[64], ref[64];
      dot16r_f16(packed.data(), px, nx, n, got);
      scalar::dot16r_f16(packed.data(), px, nx, n, ref);
      for (int j = 0; j < nx; ++j)
        for (int r = 0; r < 16; ++r) {
          SCOPED_TRACE(testing::Message() << n << " nx " << nx << " vector " << j << " row " << r);
          double want = 0;
          for (int64_t k = 0; k < n; ++k) want += double(fp16_to_fp32(rows[static_cast<size_t>(r * n + k)])) * px[j][k];
          EXPECT_NEAR(got[16 * j + r], want, 1e-4 * (1 + std::sqrt(double(n))));
          EXPECT_NEAR(ref[16 * j + r], want, 1e-4 * (1 + std::sqrt(double(n))));
        }
    }
    // Two groups at once (the one-token product's two streams): each group's sums exactly what it
    // gives alone, the other group's rows reversed so that a mixed-up pair cannot pass.
    std::vector<uint16_t> other(packed.size());
    for (int64_t k = 0; k < n; ++k)
      for (int r = 0; r < 16; ++r) other[static_cast<size_t>(16 * k + r)] = packed[static_cast<size_t>(16 * k + 15 - r)];
    float a[16], b[16], alone_a[16], alone_b[16];
    dot16r2_f16(packed.data(), other.data(), px[0], n, a, b);
    dot16r_f16(packed.data(), px, 1, n, alone_a);
    dot16r_f16(other.data(), px, 1, n, alone_b);
    for (int r = 0; r < 16; ++r) {
      EXPECT_EQ(a[r], alone_a[r]) << n << " row " << r;
      EXPECT_EQ(b[r], alone_b[r]) << n << " row " << r;
      if (n > 1) {
        EXPECT_NE(a[r], b[r]) << n << " row " << r;
      }
    }
  }
}

// Four rows at once add what four single AXPYs add (n not a multiple of 8 for the float tails).
TEST(Axpy, FourRowsAtOnce) {
  const float a[4] = {0.5f, -1.25f, 2.0f, 0.0625f};
  auto y0 = random_vector(512, 20);
  std::vector<std::vector<float>> rows;
  for (int r = 0; r < 4; ++r) rows.push_back(random_vector(512, static_cast<uint32_t>(21 + r)));
  auto expect = [&](const char* what, int64_t n, const std::vector<std::vector<float>>& deq, const std::function<void(float*)>& axpy4) {
    std::vector<float> y(y0.begin(), y0.begin() + n);
    axpy4(y.data());
    for (int64_t i = 0; i < n; ++i) {
      double want = y0[i];
      for (int r = 0; r < 4; ++r) want += double(a[r]) * deq[r][i];
      ASSERT_NEAR(y[i], want, 1e-4) << what << " " << i;
    }
  };
  const float* f[4] = {rows[0].data(), rows[1].data(), rows[2].data(), rows[3].data()};
  expect("f32", 509, rows, [&](float* y) { axpy4_f32(a, f, y, 509); });
  std::vector<std::vector<uint16_t>> h(4, std::vector<uint16_t>(512)), bf(4, std::vector<uint16_t>(512));
  std::vector<std::vector<float>> hd(4, std::vector<float>(512)), bd(4, std::vector<float>(512));
  std::vector<std::vector<block_q8_0>> q8(4, std::vector<block_q8_0>(16));
  std::vector<std::vector<block_q4_0>> q4(4, std::vector<block_q4_0>(16));
  std::vector<std::vector<float>> d8(4, std::vector<float>(512)), d4(4, std::vector<float>(512));
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 512; ++i) h[r][i] = fp32_to_fp16(rows[r][i]), hd[r][i] = fp16_to_fp32(h[r][i]);
    for (int i = 0; i < 512; ++i) bf[r][i] = fp32_to_bf16(rows[r][i]), bd[r][i] = bf16_to_fp32(bf[r][i]);
    quantize_row_q8_0(rows[r].data(), q8[r].data(), 512);
    dequantize_row_q8_0(q8[r].data(), d8[r].data(), 512);
    quantize_row_q4_0(rows[r].data(), q4[r].data(), 512);
    dequantize_row_q4_0(q4[r].data(), d4[r].data(), 512);
  }
  const uint16_t* hp[4] = {h[0].data(), h[1].data(), h[2].data(), h[3].data()};
  expect("f16", 509, hd, [&](float* y) { axpy4_f16(a, hp, y, 509); });
  const uint16_t* bp[4] = {bf[0].data(), bf[1].data(), bf[2].data(), bf[3].data()};
  expect("bf16", 509, bd, [&](float* y) { axpy4_bf16(a, bp, y, 509); });
  const block_q8_0* p8[4] = {q8[0].data(), q8[1].data(), q8[2].data(), q8[3].data()};
  expect("q8_0", 512, d8, [&](float* y) { axpy4_q8_0(a, p8, y, 512); });
  const block_q4_0* p4[4] = {q4[0].data(), q4[1].data(), q4[2].data(), q4[3].data()};
  expect("q4_0", 512, d4, [&](float* y) { axpy4_q4_0(a, p4, y, 512); });
}

// The kernels that ask for the next rows as they read (a sparse FFN's F16 rows): the same sums as
// the plain kernels, bit for bit, whatever the length (tails under a vector and under a cache line's
// 32 values included), and the rows asked for do not enter the sums.
TEST(Dot, AskingForTheNextRowsKeepsTheSums) {
  for (int64_t n : {1, 7, 16, 31, 32, 33, 509, 2048, 2072}) {
    std::vector<std::vector<uint16_t>> h(8, std::vector<uint16_t>(static_cast<size_t>(n)));
    for (int r = 0; r < 8; ++r) {
      const auto v = random_vector(static_cast<size_t>(n), static_cast<uint32_t>(40 + r));
      for (int64_t i = 0; i < n; ++i) h[r][static_cast<size_t>(i)] = fp32_to_fp16(v[static_cast<size_t>(i)]);
    }
    const auto x = random_vector(static_cast<size_t>(n), 50);
    const float* px[1] = {x.data()};
    float g = 0, u = 0, g0 = 0, u0 = 0;
    dot2_f16_ahead(h[0].data(), h[1].data(), x.data(), n, &g, &u, h[2].data(), h[3].data());
    dot2n_f16(h[0].data(), h[1].data(), px, 1, n, &g0, &u0);
    EXPECT_EQ(g, g0) << n;
    EXPECT_EQ(u, u0) << n;
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += double(fp16_to_fp32(h[0][static_cast<size_t>(i)])) * x[static_cast<size_t>(i)];
    EXPECT_NEAR(g, want, 1e-4 * (1 + std::sqrt(double(n)))) << n;
    // Two neurons at once: each row's sum as the pair kernel makes it.
    const uint16_t* four[4] = {h[0].data(), h[1].data(), h[2].data(), h[3].data()};
    const uint16_t* ahead[4] = {h[4].data(), h[5].data(), h[6].data(), h[7].data()};
    float o4[4] = {0, 0, 0, 0}, o2[4] = {0, 0, 0, 0};
    dot4_f16_ahead(four, x.data(), n, o4, ahead);
    dot2n_f16(h[0].data(), h[1].data(), px, 1, n, &o2[0], &o2[1]);
    dot2n_f16(h[2].data(), h[3].data(), px, 1, n, &o2[2], &o2[3]);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(o4[r], o2[r]) << n << " row " << r;
    double want3 = 0;
    for (int64_t i = 0; i < n; ++i) want3 += double(fp16_to_fp32(h[3][static_cast<size_t>(i)])) * x[static_cast<size_t>(i)];
    EXPECT_NEAR(o4[3], want3, 1e-4 * (1 + std::sqrt(double(n)))) << n;

    const float a[4] = {0.5f, -1.25f, 2.0f, 0.0625f};
    const uint16_t* rows[4] = {h[0].data(), h[1].data(), h[2].data(), h[3].data()};
    const uint16_t* next[4] = {h[4].data(), h[5].data(), h[6].data(), h[7].data()};
    auto y = random_vector(static_cast<size_t>(n), 51), y0 = y;
    axpy4_f16_ahead(a, rows, y.data(), n, next);
    axpy4_f16(a, rows, y0.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[static_cast<size_t>(i)], y0[static_cast<size_t>(i)]) << n << " at " << i;
  }
}

}  // namespace
}  // namespace hotcold::kernels

namespace hotcold::kernels {
namespace {
// Under HOTCOLD_NO_AVX512=1 (the kernels.avx2_paths run of this binary) the dispatcher keeps AVX2.
TEST(Dot, NoAvx512KeepsTheAvx2Paths) {
  if (!std::getenv("HOTCOLD_NO_AVX512")) GTEST_SKIP() << "runs under HOTCOLD_NO_AVX512=1 (ctest kernels.avx2_paths)";
  EXPECT_STRNE(dot_implementation(), "avx512vnni");
}
}  // namespace
}  // namespace hotcold::kernels
