// The type -> kernel table: every entry computes with its own type's layout. Each row is written by
// that type's quantizer from known floats, and each kernel is checked against plain arithmetic on the
// row's own values (read back with the type's definition, not through the table): an entry wired to
// another type's kernel, or a Q8_0/Q4_0 entry reading the floats instead of the quantized input,
// gives other numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_kernels.hpp"

using namespace hotcold;
using namespace hotcold::kernels;

namespace {

constexpr int64_t n = 512;  // two Q6_K blocks, sixteen Q8_0/Q4_0 blocks

// A row of type t from floats, and its values as that type stores them.
struct typed_row {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

typed_row make_row(tensor_type t, const std::vector<float>& src) {
  typed_row r;
  r.values.resize(n);
  switch (t) {
    case tensor_type::f32:
      r.bytes.resize(n * 4);
      std::memcpy(r.bytes.data(), src.data(), n * 4);
      r.values = src;
      break;
    case tensor_type::f16: {
      std::vector<uint16_t> h(n);
      fp32_to_fp16_row(src.data(), h.data(), n);
      r.bytes.resize(n * 2);
      std::memcpy(r.bytes.data(), h.data(), n * 2);
      for (int64_t i = 0; i < n; ++i) r.values[i] = fp16_to_fp32(h[i]);
      break;
    }
    case tensor_type::bf16: {
      std::vector<uint16_t> h(n);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      r.bytes.resize(n * 2);
      std::memcpy(r.bytes.data(), h.data(), n * 2);
      for (int64_t i = 0; i < n; ++i) r.values[i] = bf16_to_fp32(h[i]);
      break;
    }
    case tensor_type::q8_0: {
      std::vector<block_q8_0> b(n / qk8_0);
      quantize_row_q8_0(src.data(), b.data(), n);
      r.bytes.resize(b.size() * sizeof(block_q8_0));
      std::memcpy(r.bytes.data(), b.data(), r.bytes.size());
      for (size_t k = 0; k < b.size(); ++k)
        for (int i = 0; i < qk8_0; ++i) r.values[k * qk8_0 + i] = fp16_to_fp32(b[k].d) * b[k].qs[i];
      break;
    }
    case tensor_type::q4_0: {
      std::vector<block_q4_0> b(n / qk4_0);
      quantize_row_q4_0(src.data(), b.data(), n);
      r.bytes.resize(b.size() * sizeof(block_q4_0));
      std::memcpy(r.bytes.data(), b.data(), r.bytes.size());
      for (size_t k = 0; k < b.size(); ++k)
        for (int j = 0; j < qk4_0 / 2; ++j) {
          r.values[k * qk4_0 + j] = fp16_to_fp32(b[k].d) * ((b[k].qs[j] & 0x0F) - 8);
          r.values[k * qk4_0 + j + qk4_0 / 2] = fp16_to_fp32(b[k].d) * ((b[k].qs[j] >> 4) - 8);
        }
      break;
    }
    case tensor_type::q6_k: {
      std::vector<block_q6_k> b(n / qk_k);
      quantize_row_q6_k(src.data(), b.data(), n);
      r.bytes.resize(b.size() * sizeof(block_q6_k));
      std::memcpy(r.bytes.data(), b.data(), r.bytes.size());
      dequantize_row_q6_k(b.data(), r.values.data(), n);  // Q6_K's layout is checked in test_quants
      break;
    }
    case tensor_type::q4_k: {
      std::vector<block_q4_k> b(n / qk_k);
      quantize_row_q4_k(src.data(), b.data(), n);
      r.bytes.resize(b.size() * sizeof(block_q4_k));
      std::memcpy(r.bytes.data(), b.data(), r.bytes.size());
      dequantize_row_q4_k(b.data(), r.values.data(), n);  // the K-quants' layouts are checked in test_quants
      break;
    }
    case tensor_type::q5_k: {
      std::vector<block_q5_k> b(n / qk_k);
      quantize_row_q5_k(src.data(), b.data(), n);
      r.bytes.resize(b.size() * sizeof(block_q5_k));
      std::memcpy(r.bytes.data(), b.data(), r.bytes.size());
      dequantize_row_q5_k(b.data(), r.values.data(), n);
      break;
    }
    default: ADD_FAILURE() << "no row maker for " << tensor_type_name(t);
  }
  return r;
}

}  // namespace

TEST(RowKernels, EachTypeComputesWithItsOwnLayout) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto random = [&] {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng);
    return v;
  };
  const std::vector<float> x = random();
  std::vector<block_q8_0> xq(n / qk8_0);
  quantize_row_q8_0(x.data(), xq.data(), n);
  std::vector<float> xq_values(n);
  for (int64_t k = 0; k < n / qk8_0; ++k)
    for (int i = 0; i < qk8_0; ++i) xq_values[k * qk8_0 + i] = fp16_to_fp32(xq[k].d) * xq[k].qs[i];

  for (tensor_type t : {tensor_type::f32, tensor_type::f16, tensor_type::bf16, tensor_type::q8_0, tensor_type::q4_0, tensor_type::q6_k, tensor_type::q4_k,
                        tensor_type::q5_k}) {
    SCOPED_TRACE(std::string(tensor_type_name(t)));
    const row_kernels* k = row_kernels_for(t);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->type, t);
    EXPECT_EQ(k->block_size, traits(t).block_size);
    EXPECT_EQ(k->block_bytes, traits(t).block_bytes);
    EXPECT_EQ(k->input == input_format::q8_0, t == tensor_type::q8_0 || t == tensor_type::q4_0);
    typed_row rows[4] = {make_row(t, random()), make_row(t, random()), make_row(t, random()), make_row(t, random())};

    // to_float: the stored values.
    std::vector<float> got(n);
    k->to_float(rows[0].bytes.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], rows[0].values[i], 1e-6 * (1 + std::fabs(rows[0].values[i]))) << i;

    // dot: against the quantized input where the type reads it, else the floats.
    const std::vector<float>& in = k->input == input_format::q8_0 ? xq_values : x;
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += double(rows[0].values[i]) * in[i];
    EXPECT_NEAR(k->dot(rows[0].bytes.data(), x.data(), xq.data(), n), want, 1e-3 * (1 + std::fabs(want)));

    // axpy and axpy4.
    std::vector<float> y(n, 0.5f), y4(n, 0.5f);
    const float a[4] = {0.75f, -1.25f, 2.0f, 0.125f};
    for (int r = 0; r < 4; ++r) k->axpy(a[r], rows[r].bytes.data(), y.data(), n);
    const void* ptrs[4] = {rows[0].bytes.data(), rows[1].bytes.data(), rows[2].bytes.data(), rows[3].bytes.data()};
    k->axpy4(a, ptrs, y4.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double w = 0.5;
      for (int r = 0; r < 4; ++r) w += double(a[r]) * rows[r].values[i];
      ASSERT_NEAR(y[i], w, 1e-4 * (1 + std::fabs(w))) << "axpy " << i;
      ASSERT_NEAR(y4[i], w, 1e-4 * (1 + std::fabs(w))) << "axpy4 " << i;
    }
  }
  // Types the engine does not compute with have no entry.
  EXPECT_EQ(row_kernels_for(tensor_type::q3_k), nullptr);
  EXPECT_EQ(row_kernels_for(tensor_type::i32), nullptr);
}
