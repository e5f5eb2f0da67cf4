// Every row type through one table (as llama.cpp's test-quantize-fns): a row quantized and read back
// stays within the type's error, and its product with an input in the activation format the row-kernel
// table says the type reads (kernels/cpu/row_kernels.hpp: floats, Q8_0 or Q8_K) stays within the type's
// error of the float product. (Each type's kernels against hand-laid rows: test_row_kernels.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/row_kernels.hpp"

namespace hotcold::kernels {
namespace {

struct quant_type {
  tensor_type type;
  const char* name;
  double max_round_trip;  // relative RMS of a row read back, for normal values (the type's step)
  double min_round_trip;  // ... at least this: the coarser types are coarser
  std::function<std::vector<uint8_t>(const std::vector<float>&)> quantize;
  std::function<void(const uint8_t*, float*, int64_t)> dequantize;
};

template <class Block>
std::vector<uint8_t> blocks(const std::vector<float>& x, void (*q)(const float*, Block*, int64_t), int64_t per_block) {
  std::vector<uint8_t> out(x.size() / static_cast<size_t>(per_block) * sizeof(Block));
  q(x.data(), reinterpret_cast<Block*>(out.data()), static_cast<int64_t>(x.size()));
  return out;
}
template <class Block>
std::function<void(const uint8_t*, float*, int64_t)> from_blocks(void (*d)(const Block*, float*, int64_t)) {
  return [d](const uint8_t* b, float* y, int64_t n) { d(reinterpret_cast<const Block*>(b), y, n); };
}
std::vector<uint8_t> halves(const std::vector<float>& x, uint16_t (*to)(float)) {
  std::vector<uint8_t> out(x.size() * 2);
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t h = to(x[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}
std::function<void(const uint8_t*, float*, int64_t)> from_halves(float (*from)(uint16_t)) {
  return [from](const uint8_t* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      y[i] = from(h);
    }
  };
}

const std::vector<quant_type>& types() {
  static const std::vector<quant_type> t = {
      {tensor_type::f32, "f32", 0, 0,
       [](const std::vector<float>& x) { return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(x.data()), reinterpret_cast<const uint8_t*>(x.data() + x.size())); },
       [](const uint8_t* b, float* y, int64_t n) { std::memcpy(y, b, static_cast<size_t>(n) * 4); }},
      {tensor_type::f16, "f16", 1e-3, 0, [](const std::vector<float>& x) { return halves(x, fp32_to_fp16); }, from_halves(fp16_to_fp32)},
      {tensor_type::bf16, "bf16", 5e-3, 1e-3, [](const std::vector<float>& x) { return halves(x, fp32_to_bf16); }, from_halves(bf16_to_fp32)},
      {tensor_type::q8_0, "q8_0", 0.01, 1e-3, [](const std::vector<float>& x) { return blocks(x, quantize_row_q8_0, qk8_0); }, from_blocks(dequantize_row_q8_0)},
      {tensor_type::q6_k, "q6_k", 0.04, 0.005, [](const std::vector<float>& x) { return blocks(x, quantize_row_q6_k, qk_k); }, from_blocks(dequantize_row_q6_k)},
      {tensor_type::q5_k, "q5_k", 0.06, 0.01, [](const std::vector<float>& x) { return blocks(x, quantize_row_q5_k, qk_k); }, from_blocks(dequantize_row_q5_k)},
      {tensor_type::q4_k, "q4_k", 0.1, 0.02, [](const std::vector<float>& x) { return blocks(x, quantize_row_q4_k, qk_k); }, from_blocks(dequantize_row_q4_k)},
      {tensor_type::q4_0, "q4_0", 0.12, 0.03, [](const std::vector<float>& x) { return blocks(x, quantize_row_q4_0, qk4_0); }, from_blocks(dequantize_row_q4_0)},
  };
  return t;
}

std::vector<float> random_vector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

double rel_rms(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) num += (got[i] - want[i]) * double(got[i] - want[i]), den += want[i] * double(want[i]);
  return std::sqrt(num / den);
}

class QuantTypes : public testing::TestWithParam<quant_type> {};

TEST_P(QuantTypes, RoundTripStaysWithinTheTypesStep) {
  const auto& q = GetParam();
  const auto x = random_vector(4096, 1);
  const auto bytes = q.quantize(x);
  EXPECT_EQ(bytes.size(), 4096 / traits(q.type).block_size * traits(q.type).block_bytes) << "the row's bytes as the type lays them out";
  std::vector<float> y(x.size());
  q.dequantize(bytes.data(), y.data(), 4096);
  const double e = rel_rms(y, x);
  EXPECT_LE(e, q.max_round_trip);
  EXPECT_GE(e, q.min_round_trip);
}

TEST_P(QuantTypes, ProductsInTheTypesActivationFormatStayNearTheFloatProduct) {
  const auto& q = GetParam();
  const row_kernels* k = row_kernels_for(q.type);
  ASSERT_NE(k, nullptr);
  const int64_t n = 4096;
  const auto x = random_vector(n, 5);
  std::vector<float> xr = x;
  std::vector<block_q8_0> xq(static_cast<size_t>(n / qk8_0));
  EXPECT_EQ(k->input, q.type == tensor_type::q8_0 || q.type == tensor_type::q4_0 ? input_format::q8_0
                      : computes_as_k_quant(q.type)                             ? input_format::q8_k
                                                                                : input_format::floats);
  if (k->input == input_format::q8_0) quantize_row_q8_0(x.data(), xq.data(), n);
  if (k->input == input_format::q8_k) round_to_q8_k(xr.data(), n);  // (a K-quant row's float product reads the input so rounded)
  double num = 0, den = 0;
  for (uint32_t r = 0; r < 32; ++r) {
    const auto w = random_vector(n, 100 + r);
    double exact = 0;
    for (int64_t i = 0; i < n; ++i) exact += double(w[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
    const auto row = q.quantize(w);
    const double got = k->dot(row.data(), xr.data(), xq.data(), n);
    num += (got - exact) * (got - exact), den += exact * exact;
  }
  // The row's step and the input's: within twice the round trip's error, and at least an 8-bit input's.
  EXPECT_LE(std::sqrt(num / den), 2 * q.max_round_trip + (k->input == input_format::floats ? 1e-6 : 0.02)) << q.name;
}

INSTANTIATE_TEST_SUITE_P(Kernels, QuantTypes, testing::ValuesIn(types()), [](const testing::TestParamInfo<quant_type>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace hotcold::kernels
