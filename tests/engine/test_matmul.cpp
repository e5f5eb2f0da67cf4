// Matrix products of every weight type and layout against each row's own dot product, with any
// number of tokens and threads: the split across threads, the row groups and tails, and the token
// tiles must not change a single row's result.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "engine/matmul.hpp"
#include "engine/sparse_ffn.hpp"

namespace hotcold {
namespace {

using namespace kernels;

struct q4_matrix {
  std::vector<block_q4_0> blocks;
  tensor_view view;
};

q4_matrix random_q4_0(int64_t d, int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  q4_matrix m;
  m.blocks.resize(static_cast<size_t>(rows * d / qk4_0));
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = 0.25f + static_cast<float>(r % 5);
    for (auto& x : row) x = scale * dist(rng);
    quantize_row_q4_0(row.data(), m.blocks.data() + r * (d / qk4_0), d);
  }
  m.view.type = tensor_type::q4_0;
  m.view.ne0 = d;
  m.view.ne1 = rows;
  m.view.row_bytes = static_cast<size_t>(d / qk4_0) * sizeof(block_q4_0);
  m.view.data = reinterpret_cast<const uint8_t*>(m.blocks.data());
  return m;
}

// Interleaves m's full groups of sixteen rows in place, as model::load does.
tensor_view interleaved(q4_matrix& m) {
  const int64_t nb = m.view.ne0 / qk4_0;
  for (int64_t g = 0; g < m.view.ne1 / 16; ++g) {
    std::vector<block_q4_0> group(m.blocks.begin() + g * 16 * nb, m.blocks.begin() + (g + 1) * 16 * nb);
    interleave_q4_0x16(group.data(), nb, reinterpret_cast<block_q4_0x16*>(m.blocks.data() + g * 16 * nb));
  }
  tensor_view v = m.view;
  v.interleaved16 = true;
  return v;
}

TEST(Matmul, InterleavedQ4_0EqualsEachRowsDotProduct) {
  const int64_t d = 256;
  for (int64_t rows : {16, 40, 100, 102}) {  // no tail, a tail of 8, a tail of 4; and of 2 past the four streams
    q4_matrix plain = random_q4_0(d, rows, static_cast<uint32_t>(rows));
    q4_matrix packed = random_q4_0(d, rows, static_cast<uint32_t>(rows));
    const tensor_view pv = interleaved(packed);
    // The same rows as a view into bundles (a sparse file's ffn_bundle): each row followed by another's bytes.
    std::vector<uint8_t> bundles(plain.view.row_bytes * 3 * static_cast<size_t>(rows), 0xA5);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(bundles.data() + 3 * r * plain.view.row_bytes + plain.view.row_bytes, plain.view.row(r), plain.view.row_bytes);
    tensor_view strided = plain.view;
    strided.data = bundles.data() + plain.view.row_bytes;
    strided.stride = 3 * plain.view.row_bytes;
    ASSERT_EQ(pv.interleaved_rows(), rows - rows % 16);
    for (int64_t n : {1, 3, 37}) {
      std::mt19937 rng(static_cast<uint32_t>(n));
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(n * d));
      for (auto& v : x) v = dist(rng);
      std::vector<float> want(static_cast<size_t>(n * rows));
      std::vector<block_q8_0> xq(static_cast<size_t>(d / qk8_0));
      for (int64_t t = 0; t < n; ++t) {
        quantize_row_q8_0(x.data() + t * d, xq.data(), d);
        for (int64_t r = 0; r < rows; ++r) want[static_cast<size_t>(t * rows + r)] = dot_q4_0(plain.blocks.data() + r * (d / qk4_0), xq.data(), d);
      }
      for (int threads : {1, 2, 3}) {
        thread_pool pool(threads);
        std::vector<block_q8_0> scratch;
        std::vector<float> got(want.size()), got_plain(want.size()), got_strided(want.size());
        matmul(pool, pv, x.data(), n, got.data(), scratch);
        matmul(pool, plain.view, x.data(), n, got_plain.data(), scratch);
        matmul(pool, strided, x.data(), n, got_strided.data(), scratch);
        for (size_t i = 0; i < want.size(); ++i) {
          SCOPED_TRACE(testing::Message() << rows << " rows, " << n << " tokens, " << threads << " threads, output " << i);
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::abs(want[i])));
          ASSERT_NEAR(got_plain[i], want[i], 1e-4f * (1 + std::abs(want[i])));
          ASSERT_EQ(got_strided[i], got_plain[i]);
        }
      }
    }
  }
}

// Q4_K, Q5_K and Q6_K matrices interleaved (as model::load does Q4_K and Q5_K: a Q4_K_M / Q5_K_M
// file's attention and FFN), and plain ones (interleaved a group at a time from four tokens on; also as
// views into bundles): each row's own dot product with the token quantized to Q8_K, whatever the tokens
// and threads, tails included; alone and beside another matrix reading the same input.
TEST(Matmul, InterleavedKQuantsEqualEachRowsDotProduct) {
  const int64_t d = 512, nb = d / qk_k;
  for (tensor_type type : {tensor_type::q4_k, tensor_type::q5_k, tensor_type::q6_k})
  for (int64_t rows : {16, 37, 53}) {
    const bool q6 = type == tensor_type::q6_k, q5 = type == tensor_type::q5_k;
    const size_t block = q6 ? sizeof(block_q6_k) : q5 ? sizeof(block_q5_k) : sizeof(block_q4_k);  // one group; two and a tail; three (one token: a pair and one alone) and a tail
    std::vector<uint8_t> plain(static_cast<size_t>(rows * nb) * block);
    std::vector<float> row(static_cast<size_t>(d));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < d; ++k) row[static_cast<size_t>(k)] = (0.2f + 0.1f * static_cast<float>(r % 7)) * std::sin(0.37f * static_cast<float>(k + 13 * r)) + 0.02f * static_cast<float>(k % 64 / 32);
      if (q6) quantize_row_q6_k(row.data(), reinterpret_cast<block_q6_k*>(plain.data()) + r * nb, d);
      else if (q5) quantize_row_q5_k(row.data(), reinterpret_cast<block_q5_k*>(plain.data()) + r * nb, d);
      else quantize_row_q4_k(row.data(), reinterpret_cast<block_q4_k*>(plain.data()) + r * nb, d);
    }
    std::vector<uint8_t> packed = plain;
    for (int64_t g = 0; g < rows / 16; ++g) {
      const size_t at = static_cast<size_t>(g * 16 * nb) * block;
      if (q6) interleave_q6_kx16(reinterpret_cast<const block_q6_k*>(plain.data() + at), nb, reinterpret_cast<block_q6_kx16*>(packed.data() + at));
      else if (q5) interleave_q5_kx16(reinterpret_cast<const block_q5_k*>(plain.data() + at), nb, reinterpret_cast<block_q5_kx16*>(packed.data() + at));
      else interleave_q4_kx16(reinterpret_cast<const block_q4_k*>(plain.data() + at), nb, reinterpret_cast<block_q4_kx16*>(packed.data() + at));
    }
    tensor_view pv, v;
    v.type = type;
    v.ne0 = d;
    v.ne1 = rows;
    v.row_bytes = static_cast<size_t>(nb) * block;
    v.data = reinterpret_cast<const uint8_t*>(plain.data());
    pv = v;
    pv.data = reinterpret_cast<const uint8_t*>(packed.data());
    pv.interleaved16 = true;
    // The same rows as a view into bundles (a sparse file's ffn_bundle): each row followed by another's bytes.
    std::vector<uint8_t> bundles(v.row_bytes * 2 * static_cast<size_t>(rows), 0xA5);
    for (int64_t r = 0; r < rows; ++r) std::memcpy(bundles.data() + 2 * r * v.row_bytes, v.row(r), v.row_bytes);
    tensor_view strided = v;
    strided.data = bundles.data();
    strided.stride = 2 * v.row_bytes;
    for (int64_t n : {1, 3, 6, 21}) {
      std::vector<float> x(static_cast<size_t>(n * d));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.5f * static_cast<float>(i)) + 0.1f * std::cos(0.013f * static_cast<float>(i));
      std::vector<float> want(static_cast<size_t>(n * rows));
      std::vector<block_q8_k> x8(static_cast<size_t>(nb));
      for (int64_t t = 0; t < n; ++t) {
        quantize_row_q8_k(x.data() + t * d, x8.data(), d);
        for (int64_t r = 0; r < rows; ++r)
          want[static_cast<size_t>(t * rows + r)] = q6   ? scalar::dot_q6_k_q8_k(reinterpret_cast<const block_q6_k*>(plain.data()) + r * nb, x8.data(), d)
                                                    : q5 ? scalar::dot_q5_k_q8_k(reinterpret_cast<const block_q5_k*>(plain.data()) + r * nb, x8.data(), d)
                                                         : scalar::dot_q4_k_q8_k(reinterpret_cast<const block_q4_k*>(plain.data()) + r * nb, x8.data(), d);
      }
      for (int threads : {1, 2, 3}) {
        thread_pool pool(threads);
        std::vector<block_q8_0> scratch;
        std::vector<float> got(want.size()), got_plain(want.size()), got_strided(want.size()), together_a(want.size()), together_b(want.size());
        matmul(pool, pv, x.data(), n, got.data(), scratch);
        matmul(pool, v, x.data(), n, got_plain.data(), scratch);
        matmul(pool, strided, x.data(), n, got_strided.data(), scratch);
        const tensor_view* ws[2] = {&pv, &pv};
        float* ys[2] = {together_a.data(), together_b.data()};
        matmul_same_input(pool, ws, x.data(), n, ys, scratch);
        for (size_t i = 0; i < want.size(); ++i) {
          SCOPED_TRACE(testing::Message() << tensor_type_name(type) << ", " << rows << " rows, " << n << " tokens, " << threads << " threads, output " << i);
          ASSERT_NEAR(got[i], want[i], 1e-4f * (1 + std::abs(want[i])));
          ASSERT_NEAR(got_plain[i], want[i], 1e-4f * (1 + std::abs(want[i])));
          ASSERT_EQ(got_strided[i], got_plain[i]);
          ASSERT_EQ(together_a[i], got[i]);
          ASSERT_EQ(together_b[i], got[i]);
        }
      }
    }
  }
}

// F16 matrices interleaved as model::load does (the predictors): each row's own dot product, whatever
// the tokens and threads, tails included.
TEST(Matmul, InterleavedF16EqualsEachRowsDotProduct) {
  const int64_t d = 96;
  for (int64_t rows : {16, 37, 53}) {  // one group; two and a tail; three (one token: a pair and one alone) and a tail
    std::vector<uint16_t> plain(static_cast<size_t>(rows * d));
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = fp32_to_fp16(std::cos(0.11f * static_cast<float>(i)));
    std::vector<uint16_t> packed = plain;
    for (int64_t g = 0; g < rows / 16; ++g) interleave_f16x16(plain.data() + g * 16 * d, d, packed.data() + g * 16 * d);
    tensor_view v;
    v.type = tensor_type::f16;
    v.ne0 = d;
    v.ne1 = rows;
    v.row_bytes = static_cast<size_t>(d) * 2;
    v.data = reinterpret_cast<const uint8_t*>(packed.data());
    v.interleaved16 = true;
    for (int64_t n : {1, 6}) {
      std::vector<float> x(static_cast<size_t>(n * d));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.5f * static_cast<float>(i));
      for (int threads : {1, 2}) {
        thread_pool pool(threads);
        std::vector<block_q8_0> scratch;
        std::vector<float> got(static_cast<size_t>(n * rows));
        matmul(pool, v, x.data(), n, got.data(), scratch);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float want = dot_f16(plain.data() + r * d, x.data() + t * d, d);
            ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], want, 1e-4f * (1 + std::abs(want))) << rows << " rows, token " << t << ", row " << r;
          }
      }
    }
  }
}

// Matrices sharing an input in one pass give what each gives alone (rows of different counts, with
// and without tails; and a plain matrix among them falls back to one product each).
TEST(Matmul, PromptBatchFloatRowsEqualEachRowsDotProduct) {
  // The register-tile path (16 tokens and more): tails of rows (not a multiple of 12 or of the
  // block) and of tokens (not a multiple of 32), an inner dimension with a block tail (300 = 2 x 128
  // + 44), row blocks shrunk for small matrices, 1 to 3 threads. Below 16 tokens the older path runs:
  // both must agree with each row's own dot product.
  const int64_t d = 300;
  for (int64_t rows : {5, 37, 250}) {
    std::vector<uint16_t> h(static_cast<size_t>(rows * d)), bf(h.size());
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = fp32_to_fp16(std::cos(0.37f * static_cast<float>(i)));
      bf[i] = fp32_to_bf16(std::cos(0.41f * static_cast<float>(i)));
      f[i] = std::sin(0.23f * static_cast<float>(i));
    }
    for (tensor_type type : {tensor_type::f16, tensor_type::bf16, tensor_type::f32}) {
      tensor_view v;
      v.type = type;
      v.ne0 = d;
      v.ne1 = rows;
      v.row_bytes = static_cast<size_t>(d) * (type == tensor_type::f32 ? 4 : 2);
      v.data = type == tensor_type::f16    ? reinterpret_cast<const uint8_t*>(h.data())
               : type == tensor_type::bf16 ? reinterpret_cast<const uint8_t*>(bf.data())
                                           : reinterpret_cast<const uint8_t*>(f.data());
      for (int64_t n : {1, 3, 15, 16, 45, 70}) {
        std::vector<float> x(static_cast<size_t>(n * d));
        for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.5f * static_cast<float>(i)) + 0.1f;
        for (int threads : {1, 3}) {
          thread_pool pool(threads);
          std::vector<block_q8_0> scratch;
          std::vector<float> got(static_cast<size_t>(n * rows), -7.0f);
          matmul(pool, v, x.data(), n, got.data(), scratch);
          for (int64_t t = 0; t < n; ++t)
            for (int64_t r = 0; r < rows; ++r) {
              const float* xt = x.data() + t * d;
              const float want = type == tensor_type::f16    ? scalar::dot_f16(h.data() + r * d, xt, d)
                                 : type == tensor_type::bf16 ? scalar::dot_bf16(bf.data() + r * d, xt, d)
                                                             : scalar::dot_f32(f.data() + r * d, xt, d);
              ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], want, 1e-4f * (1 + std::abs(want)))
                  << tensor_type_name(type) << " " << rows << " rows, " << n << " tokens, token " << t << ", row " << r;
            }
        }
      }
    }
  }
}

// Q8_0 rows against prompt batches: from 16 tokens the register tiles over rows dequantized in cache
// and the tokens rounded to Q8_0 once; below, the integer kernels. Both equal each row's integer dot
// product with the token quantized to Q8_0 (as one token's decode computes it), up to float order.
TEST(Matmul, PromptBatchQ8_0EqualsEachRowsIntegerDotProduct) {
  const int64_t d = 320;  // a block of 256 and a tail of 64
  for (int64_t rows : {5, 37, 250}) {
    std::vector<float> w(static_cast<size_t>(rows * d));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.29f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
    std::vector<block_q8_0> q(static_cast<size_t>(rows * d / qk8_0));
    for (int64_t r = 0; r < rows; ++r) quantize_row_q8_0(w.data() + r * d, q.data() + r * d / qk8_0, d);
    tensor_view v;
    v.type = tensor_type::q8_0;
    v.ne0 = d;
    v.ne1 = rows;
    v.row_bytes = static_cast<size_t>(d / qk8_0) * sizeof(block_q8_0);
    v.data = reinterpret_cast<const uint8_t*>(q.data());
    for (int64_t n : {1, 3, 15, 16, 45, 70}) {
      std::vector<float> x(static_cast<size_t>(n * d));
      for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.5f * static_cast<float>(i)) + 0.1f;
      std::vector<block_q8_0> xq(static_cast<size_t>(d / qk8_0));
      for (int threads : {1, 3}) {
        thread_pool pool(threads);
        std::vector<block_q8_0> scratch;
        std::vector<float> got(static_cast<size_t>(n * rows), -7.0f);
        matmul(pool, v, x.data(), n, got.data(), scratch);
        for (int64_t t = 0; t < n; ++t) {
          quantize_row_q8_0(x.data() + t * d, xq.data(), d);
          for (int64_t r = 0; r < rows; ++r) {
            const float want = scalar::dot_q8_0(q.data() + r * d / qk8_0, xq.data(), d);
            ASSERT_NEAR(got[static_cast<size_t>(t * rows + r)], want, 1e-4f * (1 + std::abs(want))) << rows << " rows, " << n << " tokens, token " << t << ", row " << r;
          }
        }
      }
    }
  }
}

TEST(Matmul, SameInputProductsEqualSeparateOnes) {
  const int64_t d = 128;
  q4_matrix a = random_q4_0(d, 48, 1), b = random_q4_0(d, 40, 2), c = random_q4_0(d, 16, 3), plain = random_q4_0(d, 24, 4);
  const tensor_view va = interleaved(a), vb = interleaved(b), vc = interleaved(c);
  for (int64_t n : {1, 5}) {
    std::vector<float> x(static_cast<size_t>(n * d));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
    thread_pool pool(2);
    std::vector<block_q8_0> scratch;
    for (const tensor_view* third : {&vc, static_cast<const tensor_view*>(&plain.view)}) {
      const tensor_view* ws[3] = {&va, &vb, third};
      std::vector<std::vector<float>> together(3), alone(3);
      float* ys[3];
      for (int m = 0; m < 3; ++m) {
        together[m].assign(static_cast<size_t>(n * ws[m]->ne1), -1.0f);
        alone[m].resize(together[m].size());
        ys[m] = together[m].data();
        matmul(pool, *ws[m], x.data(), n, alone[m].data(), scratch);
      }
      matmul_same_input(pool, ws, x.data(), n, ys, scratch);
      for (int m = 0; m < 3; ++m) EXPECT_EQ(together[m], alone[m]) << "matrix " << m << ", " << n << " tokens";
    }
  }
}

// Long F16 rows sharing an input (attention's q, k, v of F16 files): one two-stream pass over the
// three gives each one's own product (an odd row count takes its last row alone).
TEST(Matmul, SameInputLongF16RowsEqualSeparateOnes) {
  // One token: the two-stream path; 40 tokens: the register tiles, with row blocks that run across
  // the matrices' boundaries in the shared split.
  const int64_t d = 1024;  // 2 KiB rows
  const int64_t counts[3] = {64, 65, 128};
  std::vector<std::vector<uint16_t>> data(3);
  tensor_view views[3];
  for (int m = 0; m < 3; ++m) {
    data[m].resize(static_cast<size_t>(counts[m] * d));
    for (size_t i = 0; i < data[m].size(); ++i) data[m][i] = fp32_to_fp16(std::sin(0.013f * static_cast<float>(i) + static_cast<float>(m)));
    views[m].type = tensor_type::f16;
    views[m].ne0 = d;
    views[m].ne1 = counts[m];
    views[m].row_bytes = static_cast<size_t>(d) * 2;
    views[m].data = reinterpret_cast<const uint8_t*>(data[m].data());
  }
  for (int64_t n : {1, 40}) {
    std::vector<float> x(static_cast<size_t>(n * d));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.7f * static_cast<float>(i));
    thread_pool pool(2);
    std::vector<block_q8_0> scratch;
    const tensor_view* ws[3] = {&views[0], &views[1], &views[2]};
    std::vector<std::vector<float>> together(3);
    float* ys[3];
    for (int m = 0; m < 3; ++m) together[m].assign(static_cast<size_t>(n * counts[m]), -1.0f), ys[m] = together[m].data();
    matmul_same_input(pool, ws, x.data(), n, ys, scratch);
    for (int m = 0; m < 3; ++m) {
      std::vector<float> alone(static_cast<size_t>(n * counts[m]));
      matmul(pool, views[m], x.data(), n, alone.data(), scratch);
      EXPECT_EQ(together[m], alone) << "matrix " << m << ", " << n << " tokens";
      for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < counts[m]; ++r) {
          const float want = dot_f16(data[m].data() + r * d, x.data() + t * d, d);
          ASSERT_NEAR(together[m][static_cast<size_t>(t * counts[m] + r)], want, 1e-3f * (1 + std::abs(want))) << "matrix " << m << " token " << t << " row " << r;
        }
    }
  }
}

// The chosen neurons handed out by shard: every id exactly once, in fixed pieces (each shard — an
// equal share of the chosen, however their ids bunch up — cut in ranges of halving width: a half, a quarter, an eighth, a sixteenth, the rest; none
// crossing a shard), a thread's first piece from its own shard; with threads taking at once the
// pieces still cover every id once; and the pieces' sums add up in piece order, bit for bit the same
// whichever thread took which piece.
TEST(NeuronShards, EveryChosenNeuronOnceInFixedPiecesOwnShardFirst) {
  const int64_t n_ff = 1000;
  std::mt19937 rng(7);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < n_ff; ++i)
    if (rng() % 100 < (i < 300 ? 40u : 8u)) ids.push_back(i);  // bunched in the first ids, as in a file ordered by firing
  const auto count = static_cast<int64_t>(ids.size());
  const double edges[] = {0, 0.5, 0.75, 0.875, 0.9375, 1};  // of a shard's width
  for (int threads : {1, 2, 3, 5}) {
    SCOPED_TRACE(threads);
    // Shard s: the chosen [count s / T, count (s + 1) / T), an equal share however the ids bunch up.
    auto shard_of = [&](int64_t k) {
      int s = 0;
      while (count * (s + 1) / threads <= k) ++s;
      return s;
    };
    neuron_shards pieces(count, threads, 5);
    ASSERT_EQ(pieces.pieces(), 5 * threads);
    std::vector<int> seen(static_cast<size_t>(count), 0), piece_seen(static_cast<size_t>(pieces.pieces()), 0);
    std::vector<bool> first(static_cast<size_t>(threads), true);
    // Round robin over the threads, one piece at a time, until none is left.
    for (bool any = true; any;) {
      any = false;
      for (int t = 0; t < threads; ++t) {
        int64_t k0, k1, p;
        if (!pieces.take(t, k0, k1, p)) continue;
        any = true;
        ASSERT_LT(k0, k1);
        ASSERT_GE(p, 0);
        ASSERT_LT(p, pieces.pieces());
        ++piece_seen[static_cast<size_t>(p)];
        const int s = shard_of(k0);
        EXPECT_EQ(shard_of(k1 - 1), s) << "a piece crosses shards";
        EXPECT_EQ(p / 5, s) << "piece " << p << " is not its shard's";
        const double a = static_cast<double>(count * s / threads), w = static_cast<double>(count * (s + 1) / threads) - a;
        EXPECT_GE(static_cast<double>(k0), a + w * edges[p % 5] - 1) << "piece " << p;
        EXPECT_LT(static_cast<double>(k1 - 1), a + w * edges[p % 5 + 1] + 1) << "piece " << p;
        if (first[static_cast<size_t>(t)]) {
          EXPECT_EQ(s, t) << "thread " << t << " started elsewhere";
        }
        first[static_cast<size_t>(t)] = false;
        for (int64_t k = k0; k < k1; ++k) ++seen[static_cast<size_t>(k)];
      }
    }
    for (int64_t k = 0; k < count; ++k) ASSERT_EQ(seen[static_cast<size_t>(k)], 1) << "id " << ids[static_cast<size_t>(k)];
    for (int p : piece_seen) EXPECT_LE(p, 1);
  }
  // Threads at once.
  for (int rep = 0; rep < 20; ++rep) {
    const int threads = 4;
    neuron_shards pieces(count, threads);
    std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        for (int64_t k0, k1, p; pieces.take(t, k0, k1, p);)
          for (int64_t k = k0; k < k1; ++k) seen[static_cast<size_t>(k)].fetch_add(1);
      });
    for (auto& t : ts) t.join();
    for (int64_t k = 0; k < count; ++k) ASSERT_EQ(seen[static_cast<size_t>(k)].load(), 1) << "rep " << rep << " id " << ids[static_cast<size_t>(k)];
  }
  // The sums: each piece's accumulator holds values that round differently when added in another
  // order; two different orders of taking give the same bits, equal to the sum in piece order.
  const int64_t width = 3;
  std::vector<float> acc(static_cast<size_t>(10 * width));
  for (size_t i = 0; i < acc.size(); ++i) acc[i] = (i % 2 ? 1e8f : 1.0f) * static_cast<float>(1 + i % 5) * (i % 3 ? 1.0f : -1.0f);
  std::vector<float> a(static_cast<size_t>(width)), b(static_cast<size_t>(width)), want(static_cast<size_t>(width), 0.0f);
  {
    neuron_shards pieces(count, 2, 5);
    for (int64_t k0, k1, p; pieces.take(0, k0, k1, p);) {}  // thread 0 takes all
    pieces.sum(acc.data(), width, a.data());
  }
  {
    neuron_shards pieces(count, 2, 5);
    for (int64_t k0, k1, p; pieces.take(1, k0, k1, p);) {}  // thread 1 takes all, its shard first
    pieces.sum(acc.data(), width, b.data());
  }
  for (int64_t p = 0; p < 10; ++p)
    for (int64_t k = 0; k < width; ++k) want[static_cast<size_t>(k)] += acc[static_cast<size_t>(p * width + k)];
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(width)));
  EXPECT_EQ(0, std::memcmp(a.data(), want.data(), sizeof(float) * static_cast<size_t>(width)));
}

}  // namespace
}  // namespace hotcold
