// The attention kernels (a prompt's block, decode's key ranges) against a double-precision attention
// written out in full.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/kv_rows.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {
namespace {

struct case_data {
  int64_t hd, stride, pos0;
  int nq;
  std::vector<float> q, k, v;
};

case_data make_case(int64_t hd, int64_t stride, int64_t pos0, int nq, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  case_data c{hd, stride, pos0, nq, {}, {}, {}};
  c.q.resize(static_cast<size_t>(nq * hd));
  c.k.resize(static_cast<size_t>((pos0 + nq) * stride));
  c.v.resize(c.k.size());
  for (auto& x : c.q) x = 2.0f * dist(rng);  // peaked softmaxes as well as flat ones
  for (auto& x : c.k) x = dist(rng);
  for (auto& x : c.v) x = dist(rng);
  return c;
}

// out[j][e] in double: each query over the keys up to its own position.
std::vector<double> reference(const case_data& c, float scale) {
  std::vector<double> out(static_cast<size_t>(c.nq * c.hd));
  for (int j = 0; j < c.nq; ++j) {
    const int64_t last = c.pos0 + j;
    std::vector<double> s(static_cast<size_t>(last + 1));
    double m = -INFINITY;
    for (int64_t t = 0; t <= last; ++t) {
      double dot = 0;
      for (int64_t e = 0; e < c.hd; ++e) dot += double(c.q[j * c.hd + e]) * c.k[t * c.stride + e];
      s[t] = dot * scale;
      m = std::max(m, s[t]);
    }
    double sum = 0;
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (int64_t t = 0; t <= last; ++t)
      for (int64_t e = 0; e < c.hd; ++e) out[j * c.hd + e] += s[t] / sum * c.v[t * c.stride + e];
  }
  return out;
}

std::vector<float> run(const case_data& c, float scale, bool vector_kernel) {
  std::vector<float> out(static_cast<size_t>(c.nq * c.hd), -1.0f);
  std::vector<const float*> qs;
  std::vector<float*> outs;
  for (int j = 0; j < c.nq; ++j) qs.push_back(c.q.data() + j * c.hd), outs.push_back(out.data() + j * c.hd);
  std::vector<float> scratch(static_cast<size_t>(attend_block_scratch(c.pos0 + c.nq, c.hd)));
  if (vector_kernel) attend_block(qs.data(), c.nq, c.k.data(), c.v.data(), c.stride, c.hd, c.pos0, scale, outs.data(), scratch.data());
  else scalar::attend_block(qs.data(), c.nq, c.k.data(), c.v.data(), c.stride, c.hd, c.pos0, scale, outs.data(), scratch.data());
  return out;
}

TEST(AttendBlock, MatchesDoubleCausalAttention) {
  // Head sizes with and without a 64-wide tail, blocks of 1 to 32 queries (tails of the six-query
  // and twelve-key tiles), starting at the first position or after a cache, strides wider than a head.
  const int64_t hds[] = {16, 64, 80, 128};
  const int nqs[] = {1, 5, 6, 13, 32};
  const int64_t pos0s[] = {0, 3, 100};
  uint32_t seed = 1;
  for (int64_t hd : hds)
    for (int nq : nqs)
      for (int64_t pos0 : pos0s) {
        const case_data c = make_case(hd, hd * 3, pos0, nq, seed++);
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const std::vector<double> want = reference(c, scale);
        for (bool vec : {false, true}) {
          const std::vector<float> got = run(c, scale, vec);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "hd " << hd << " nq " << nq << " pos0 " << pos0 << " vector " << vec << " at " << i;
        }
      }
}

TEST(AttendF16Cache, MatchesDoubleAttentionOverTheHalves) {
  // An F16 cache (the engine's default): every kernel reads the halves as the floats they are, so
  // the result is the double attention over the rounded keys and values, blocks and decode alike.
  uint32_t seed = 900;
  for (int64_t hd : {16, 64, 80, 128})
    for (auto [pos0, nq] : {std::pair<int64_t, int>{0, 1}, {40, 1}, {0, 7}, {100, 32}, {13, 13}}) {
      case_data c = make_case(hd, hd * 2, pos0, nq, seed++);
      std::vector<uint16_t> k16(c.k.size()), v16(c.v.size());
      fp32_to_fp16_row(c.k.data(), k16.data(), c.k.size());
      fp32_to_fp16_row(c.v.data(), v16.data(), c.v.size());
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      const std::vector<double> unrounded = reference(c, scale);
      fp16_to_fp32_row(k16.data(), c.k.data(), c.k.size());
      fp16_to_fp32_row(v16.data(), c.v.data(), c.v.size());
      const std::vector<double> want = reference(c, scale);
      double moved = 0;
      for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, std::abs(want[i] - unrounded[i]));
      EXPECT_GT(moved, 1e-4) << "the halves' rounding would not show";
      for (bool vec : {false, true}) {
        std::vector<float> out(static_cast<size_t>(nq * hd), -1.0f);
        std::vector<const float*> qs;
        std::vector<float*> outs;
        for (int j = 0; j < nq; ++j) qs.push_back(c.q.data() + j * hd), outs.push_back(out.data() + j * hd);
        std::vector<float> scratch(static_cast<size_t>(attend_block_scratch(pos0 + nq, hd) + pos0 + nq));
        if (nq == 1) {  // decode: one head over one KV head (attend_keys with n_head = n_kv = 1), one range
          std::vector<float> m(1), l(1), o(static_cast<size_t>(hd)), keys_scratch(static_cast<size_t>(attend_keys_scratch(1, hd)));
          const key_range_sums sums{m.data(), l.data(), o.data()};
          if (vec) attend_keys(qs[0], k16.data(), v16.data(), c.stride, 1, 1, hd, 0, pos0 + 1, scale, sums, keys_scratch.data());
          else scalar::attend_keys(qs[0], k16.data(), v16.data(), c.stride, 1, 1, hd, 0, pos0 + 1, scale, sums, keys_scratch.data());
          merge_key_ranges(&sums, 1, 1, hd, outs[0]);
        } else if (vec) attend_block(qs.data(), nq, k16.data(), v16.data(), c.stride, hd, pos0, scale, outs.data(), scratch.data());
        else scalar::attend_block(qs.data(), nq, k16.data(), v16.data(), c.stride, hd, pos0, scale, outs.data(), scratch.data());
        for (size_t i = 0; i < out.size(); ++i)
          ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "hd " << hd << " nq " << nq << " pos0 " << pos0 << " vector " << vec << " at " << i;
      }
    }
}

TEST(AttendBlock, LaterKeysDoNotReachEarlierQueries) {
  // Causality: changing the block's last key and value changes only the last query's output.
  case_data c = make_case(64, 64, 10, 8, 99);
  const std::vector<float> before = run(c, 0.125f, true);
  for (int64_t e = 0; e < 64; ++e) c.k[17 * 64 + e] += 3.0f, c.v[17 * 64 + e] -= 5.0f;
  const std::vector<float> after = run(c, 0.125f, true);
  for (int j = 0; j < 8; ++j) {
    bool same = std::equal(before.begin() + j * 64, before.begin() + (j + 1) * 64, after.begin() + j * 64);
    EXPECT_EQ(same, j < 7) << "query " << j;
  }
}

}  // namespace
}  // namespace hotcold::kernels

namespace hotcold::kernels {
namespace {

// Decode over a grouped-query cache: every head of one token against keys 0 .. keys - 1, head h
// reading KV head h / (n_head / n_kv) (a row holds every KV head's slice side by side), in double.
std::vector<double> grouped_reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t stride,
                                      int64_t n_head, int64_t n_kv, int64_t hd, int64_t keys, float scale) {
  std::vector<double> out(static_cast<size_t>(n_head * hd));
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t at = h / (n_head / n_kv) * hd;
    std::vector<double> s(static_cast<size_t>(keys));
    double m = -INFINITY, sum = 0;
    for (int64_t t = 0; t < keys; ++t) {
      double dot = 0;
      for (int64_t e = 0; e < hd; ++e) dot += double(q[h * hd + e]) * k[t * stride + at + e];
      m = std::max(m, s[t] = dot * scale);
    }
    for (auto& x : s) sum += (x = std::exp(x - m));
    for (int64_t t = 0; t < keys; ++t)
      for (int64_t e = 0; e < hd; ++e) out[h * hd + e] += s[t] / sum * v[t * stride + at + e];
  }
  return out;
}

// One decoded token's query (n_head x hd values, N(0, 4)) and `keys` key and value rows of `stride`
// values each (N(0, 1)), from `seed`.
struct decode_case {
  std::vector<float> q, k, v;
  decode_case(int64_t n_head, int64_t hd, int64_t keys, int64_t stride, uint32_t seed)
      : q(static_cast<size_t>(n_head * hd)), k(static_cast<size_t>(keys * stride)), v(k.size()) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto& x : q) x = 2.0f * dist(rng);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
  }
};

// The keys split into ranges (one empty, the others uneven, as threads would take them), each range's
// sums computed apart and merged: the grouped attention over all of them, for F32 and F16 caches, the
// vector kernel and the scalar reference.
TEST(AttendKeys, SplitRangesMergeIntoTheGroupedAttention) {
  struct shape {
    int64_t n_head, n_kv, hd;
  };
  uint32_t seed = 2000;
  for (const shape sh : {shape{32, 8, 64}, shape{8, 2, 64}, shape{4, 4, 16}, shape{6, 2, 80}, shape{12, 4, 128}, shape{3, 1, 64}, shape{16, 2, 64}})
    for (int64_t keys : {1, 17, 64, 65, 300}) {
      const int64_t stride = sh.n_kv * sh.hd + 16;  // (a row wider than its heads: the slices must be found by their offsets)
      const auto [q, k, v] = decode_case(sh.n_head, sh.hd, keys, stride, seed++);
      std::vector<uint16_t> k16(k.size()), v16(v.size());
      fp32_to_fp16_row(k.data(), k16.data(), k.size());
      fp32_to_fp16_row(v.data(), v16.data(), v.size());
      const float scale = 1.0f / std::sqrt(static_cast<float>(sh.hd));
      const std::vector<double> want32 = grouped_reference(q, k, v, stride, sh.n_head, sh.n_kv, sh.hd, keys, scale);
      std::vector<float> kr(k.size()), vr(v.size());
      fp16_to_fp32_row(k16.data(), kr.data(), k.size());
      fp16_to_fp32_row(v16.data(), vr.data(), v.size());
      const std::vector<double> want16 = grouped_reference(q, kr, vr, stride, sh.n_head, sh.n_kv, sh.hd, keys, scale);
      const int64_t cuts[] = {0, keys / 3, keys / 3, keys - keys / 5, keys};  // (the second range empty)
      for (bool half : {false, true})
        for (bool vec : {false, true}) {
          std::vector<float> m(4 * sh.n_head), l(4 * sh.n_head), o(static_cast<size_t>(4 * sh.n_head * sh.hd)), scratch(static_cast<size_t>(attend_keys_scratch(sh.n_head, sh.hd)));
          std::vector<key_range_sums> parts;
          for (int r = 0; r < 4; ++r) {
            const key_range_sums p{m.data() + r * sh.n_head, l.data() + r * sh.n_head, o.data() + r * sh.n_head * sh.hd};
            std::fill(p.m, p.m + sh.n_head, -INFINITY);
            if (cuts[r] < cuts[r + 1]) {
              if (half && vec) attend_keys(q.data(), k16.data(), v16.data(), stride, sh.n_head, sh.n_kv, sh.hd, cuts[r], cuts[r + 1], scale, p, scratch.data());
              else if (half) scalar::attend_keys(q.data(), k16.data(), v16.data(), stride, sh.n_head, sh.n_kv, sh.hd, cuts[r], cuts[r + 1], scale, p, scratch.data());
              else if (vec) attend_keys(q.data(), k.data(), v.data(), stride, sh.n_head, sh.n_kv, sh.hd, cuts[r], cuts[r + 1], scale, p, scratch.data());
              else scalar::attend_keys(q.data(), k.data(), v.data(), stride, sh.n_head, sh.n_kv, sh.hd, cuts[r], cuts[r + 1], scale, p, scratch.data());
            }
            parts.push_back(p);
          }
          std::vector<float> out(static_cast<size_t>(sh.n_head * sh.hd), -1.0f);
          merge_key_ranges(parts.data(), 4, sh.n_head, sh.hd, out.data());
          const auto& want = half ? want16 : want32;
          for (size_t i = 0; i < out.size(); ++i)
            ASSERT_NEAR(out[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "heads " << sh.n_head << "/" << sh.n_kv << " hd " << sh.hd << " keys " << keys
                                                                         << " f16 " << half << " vector " << vec << " at " << i;
        }
    }
}

// Quantized caches (and keys and values of two types): the rows kv_store_row writes widen back to
// what the blocks' definitions give (one KV head's slice alone as well), and decode attention over
// them, a tile at a time, is the grouped attention over the widened rows, across tiles and ranges.
TEST(AttendKeys, QuantizedRowsReadATileAtATime) {
  const int64_t n_head = 8, n_kv = 2, hd = 64, width = n_kv * hd, keys = 150;
  const auto [q, k, v] = decode_case(n_head, hd, keys, width, 77);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const kv_types t : {kv_types{tensor_type::q8_0}, kv_types{tensor_type::q4_0}, kv_types{tensor_type::q8_0, tensor_type::f16},
                           kv_types{tensor_type::f32, tensor_type::q4_0}}) {
    const int64_t kb = static_cast<int64_t>(values_bytes(t.k, width)), vb = static_cast<int64_t>(values_bytes(t.v, width));
    std::vector<uint8_t> kq(static_cast<size_t>(keys * kb)), vq(static_cast<size_t>(keys * vb));
    for (int64_t r = 0; r < keys; ++r) {
      kv_store_row(t.k, k.data() + r * width, kq.data() + r * kb, width);
      kv_store_row(t.v, v.data() + r * width, vq.data() + r * vb, width);
    }
    // Widened by the definitions: ggml's dequantization of the whole row.
    std::vector<float> kw(k.size()), vw(v.size());
    auto widen = [](tensor_type ty, const uint8_t* row, float* y, int64_t n) {
      if (ty == tensor_type::q8_0) dequantize_row_q8_0(reinterpret_cast<const block_q8_0*>(row), y, n);
      else if (ty == tensor_type::q4_0) dequantize_row_q4_0(reinterpret_cast<const block_q4_0*>(row), y, n);
      else if (ty == tensor_type::f16) fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(row), y, static_cast<size_t>(n));
      else std::memcpy(y, row, static_cast<size_t>(n) * sizeof(float));
    };
    for (int64_t r = 0; r < keys; ++r) widen(t.k, kq.data() + r * kb, kw.data() + r * width, width), widen(t.v, vq.data() + r * vb, vw.data() + r * width, width);
    if (t.k != tensor_type::f32) {
      EXPECT_GT(std::abs(kw[5] - k[5]) + std::abs(kw[70] - k[70]), 0.0f) << "the keys were not rounded";
    }
    std::vector<float> slice(static_cast<size_t>(keys * hd));  // KV head 1 alone
    kv_load_rows(t.k, kq.data(), kb, hd, hd, keys, slice.data());
    for (int64_t r = 0; r < keys; ++r)
      for (int64_t e = 0; e < hd; ++e) ASSERT_EQ(slice[static_cast<size_t>(r * hd + e)], kw[static_cast<size_t>(r * width + hd + e)]);
    const std::vector<double> want = grouped_reference(q, kw, vw, width, n_head, n_kv, hd, keys, scale);
    std::vector<float> m(2 * n_head), l(2 * n_head), o(static_cast<size_t>(2 * n_head * hd));
    std::vector<float> scratch(static_cast<size_t>(attend_keys_typed_scratch(n_head, n_kv, hd)));
    const int64_t cuts[] = {0, 97, keys};  // two ranges, the first across a tile's end
    std::vector<key_range_sums> parts;
    for (int r = 0; r < 2; ++r) {
      parts.push_back({m.data() + r * n_head, l.data() + r * n_head, o.data() + r * n_head * hd});
      attend_keys_typed(q.data(), t, kq.data(), vq.data(), kb, vb, n_head, n_kv, hd, cuts[r], cuts[r + 1], scale, parts.back(), scratch.data());
    }
    std::vector<float> out(static_cast<size_t>(n_head * hd));
    merge_key_ranges(parts.data(), 2, n_head, hd, out.data());
    // Q8_0 values are summed in integers on a CPU with VNNI, each block of 64 keys' weights rounded to
    // 15 bits against the largest (attend_keys.cpp: a weight's error under 2^-16 of it; over 64 keys, a
    // few parts in 10^4 of the values at worst, where their own rounding is parts in 10^2).
    // (4.7e-5 measured here.)
    const double tolerance = t.v == tensor_type::q8_0 ? 2e-4 : 2e-5;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], tolerance * (1 + std::abs(want[i]))) << kv_types_name(t) << " at " << i;
  }
}

// Keys in tiles of sixteen positions (an F16, F32 or Q8_0 cache's keys in host memory): stored a
// position at a time, widened back to rows (any run of positions and dims, one KV head's alone too),
// copied out to rows as the type's own (Q8_0: ggml's blocks) and back, and decode attention over them
// from ranges that start and end inside tiles is the grouped attention (Q8_0 keys: of the query rounded
// as Q8_0, as the kernels' integer products take it).
TEST(AttendKeys, KeysInTilesOfSixteenPositions) {
  const int64_t n_head = 8, n_kv = 2, hd = 64, width = n_kv * hd, keys = 150;
  const auto [q, k, v] = decode_case(n_head, hd, keys, width, 91);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (const tensor_type kt : {tensor_type::f16, tensor_type::f32, tensor_type::q8_0}) {
    const int64_t row = static_cast<int64_t>(values_bytes(kt, width));
    std::vector<uint8_t> tiles(static_cast<size_t>((keys + 15) / 16 * 16 * row));
    for (int64_t p = 0; p < keys; ++p) store_key_tile(kt, k.data() + p * width, tiles.data(), width, p);
    std::vector<uint8_t> own(static_cast<size_t>(keys * row)), back(tiles.size());  // the rows as the type stores them
    for (int64_t p = 0; p < keys; ++p) kv_store_row(kt, k.data() + p * width, own.data() + p * row, width);
    std::vector<uint8_t> out_rows(own.size());
    key_tiles_to_rows(kt, tiles.data(), width, 0, keys, out_rows.data());
    EXPECT_EQ(out_rows, own) << tensor_type_name(kt);
    rows_to_key_tiles(kt, own.data(), back.data(), width, 0, keys);
    EXPECT_EQ(back, tiles) << tensor_type_name(kt);
    std::vector<uint8_t> some(static_cast<size_t>(100 * row));  // positions 19 .. 118, from inside a tile
    key_tiles_to_rows(kt, tiles.data(), width, 19, 100, some.data());
    EXPECT_EQ(0, std::memcmp(some.data(), own.data() + 19 * row, some.size())) << tensor_type_name(kt);
    std::vector<float> kw(k.size());  // the keys as the tiles hold them
    kv_load_rows(kt, own.data(), row, 0, width, keys, kw.data());
    if (kt != tensor_type::f32) {
      EXPECT_GT(std::abs(kw[5] - k[5]) + std::abs(kw[70] - k[70]), 0.0f) << "the keys were not rounded";
    }
    std::vector<float> rows(static_cast<size_t>(keys * width));
    widen_key_tiles(kt, tiles.data(), width, 0, keys, 0, width, rows.data());
    EXPECT_EQ(rows, kw);
    std::vector<float> part(static_cast<size_t>(100 * hd));  // positions 21 .. 120 of KV head 1
    widen_key_tiles(kt, tiles.data(), width, 21, 100, hd, hd, part.data());
    for (int64_t p = 0; p < 100; ++p)
      for (int64_t e = 0; e < hd; ++e) ASSERT_EQ(part[static_cast<size_t>(p * hd + e)], kw[static_cast<size_t>((21 + p) * width + hd + e)]) << p << " " << e;
    // Values as rows: F16, or Q8_0 beside Q8_0 keys (their integer sums; tolerance as in the test above).
    const tensor_type vt = kt == tensor_type::q8_0 ? tensor_type::q8_0 : tensor_type::f16;
    const int64_t vrow = static_cast<int64_t>(values_bytes(vt, width));
    std::vector<uint8_t> vq(static_cast<size_t>(keys * vrow));
    for (int64_t p = 0; p < keys; ++p) kv_store_row(vt, v.data() + p * width, vq.data() + p * vrow, width);
    std::vector<float> vw(v.size());
    kv_load_rows(vt, vq.data(), vrow, 0, width, keys, vw.data());
    std::vector<float> qr = q;
    if (kt == tensor_type::q8_0) round_to_q8_0(qr.data(), static_cast<int64_t>(qr.size()));
    const std::vector<double> want = grouped_reference(qr, kw, vw, width, n_head, n_kv, hd, keys, scale);
    std::vector<float> m(3 * n_head), l(3 * n_head), o(static_cast<size_t>(3 * n_head * hd));
    std::vector<float> scratch(static_cast<size_t>(attend_keys_typed_scratch(n_head, n_kv, hd)));
    const int64_t cuts[] = {0, 37, 101, keys};  // ranges starting and ending inside tiles and blocks
    std::vector<key_range_sums> parts;
    for (int r = 0; r < 3; ++r) {
      parts.push_back({m.data() + r * n_head, l.data() + r * n_head, o.data() + r * n_head * hd});
      attend_key_tiles(qr.data(), kv_types{kt, vt}, tiles.data(), vq.data(), vrow, n_head, n_kv, hd, cuts[r], cuts[r + 1], scale, parts.back(),
                       scratch.data());
    }
    std::vector<float> out(static_cast<size_t>(n_head * hd));
    merge_key_ranges(parts.data(), 3, n_head, hd, out.data());
    const double tolerance = vt == tensor_type::q8_0 ? 2e-4 : 2e-5;
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], tolerance * (1 + std::abs(want[i]))) << tensor_type_name(kt) << " at " << i;
  }
}

// The query a quantized key meets: Q8_0's rounding of it, block by block.
TEST(AttendKeys, QueryRoundedAsQ8_0) {
  std::vector<float> x(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (i < 32 ? 1.0f : 0.01f);
  std::vector<float> y = x;
  round_to_q8_0(y.data(), 64);
  for (size_t b = 0; b < 2; ++b) {
    float amax = 0;
    for (size_t i = 32 * b; i < 32 * b + 32; ++i) amax = std::max(amax, std::abs(x[i]));
    const float d = fp16_to_fp32(fp32_to_fp16(amax / 127.0f));
    for (size_t i = 32 * b; i < 32 * b + 32; ++i) {
      EXPECT_FLOAT_EQ(y[i], d * std::round(x[i] / (amax / 127.0f))) << i;
      EXPECT_LE(std::abs(y[i] - x[i]), 0.51f * d + 1e-7f) << i;
    }
  }
}

}  // namespace
}  // namespace hotcold::kernels
