#include "kernels/cpu/row_kernels.hpp"

#include <array>
#include <cstring>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {

namespace {

// Each type's entries: its block type B and the dispatched kernels over it.
template <typename B>
const B* as(const void* p) {
  return static_cast<const B*>(p);
}
template <typename B, void (*axpy4_kernel)(const float*, const B* const*, float*, int64_t)>
void axpy4_rows(const float* a, const void* const* rows, float* y, int64_t n) {
  const B* r[4] = {as<B>(rows[0]), as<B>(rows[1]), as<B>(rows[2]), as<B>(rows[3])};
  axpy4_kernel(a, r, y, n);
}
template <typename B, void (*axpy_kernel)(float, const B*, float*, int64_t)>
void axpy4_one_by_one(const float* a, const void* const* rows, float* y, int64_t n) {
  for (int k = 0; k < 4; ++k) axpy_kernel(a[k], as<B>(rows[k]), y, n);
}

const std::array<row_kernels, 8>& table() {
  static const std::array<row_kernels, 8> t = {{
      {tensor_type::f32, 1, 4, input_format::floats, [](const void* r, const float* x, const block_q8_0*, int64_t n) { return dot_f32(as<float>(r), x, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_f32(a, as<float>(r), y, n); }, axpy4_rows<float, axpy4_f32>,
       [](const void* r, float* out, int64_t n) { std::memcpy(out, r, static_cast<size_t>(n) * sizeof(float)); }},
      {tensor_type::f16, 1, 2, input_format::floats, [](const void* r, const float* x, const block_q8_0*, int64_t n) { return dot_f16(as<uint16_t>(r), x, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_f16(a, as<uint16_t>(r), y, n); }, axpy4_rows<uint16_t, axpy4_f16>,
       [](const void* r, float* out, int64_t n) { fp16_to_fp32_row(as<uint16_t>(r), out, static_cast<size_t>(n)); }},
      {tensor_type::bf16, 1, 2, input_format::floats, [](const void* r, const float* x, const block_q8_0*, int64_t n) { return dot_bf16(as<uint16_t>(r), x, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_bf16(a, as<uint16_t>(r), y, n); }, axpy4_rows<uint16_t, axpy4_bf16>,
       [](const void* r, float* out, int64_t n) { bf16_to_fp32_row(as<uint16_t>(r), out, static_cast<size_t>(n)); }},
      {tensor_type::q8_0, qk8_0, sizeof(block_q8_0), input_format::q8_0, [](const void* r, const float*, const block_q8_0* xq, int64_t n) { return dot_q8_0(as<block_q8_0>(r), xq, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_q8_0(a, as<block_q8_0>(r), y, n); }, axpy4_rows<block_q8_0, axpy4_q8_0>,
       [](const void* r, float* out, int64_t n) { dequantize_row_q8_0(as<block_q8_0>(r), out, n); }},
      {tensor_type::q4_0, qk4_0, sizeof(block_q4_0), input_format::q8_0, [](const void* r, const float*, const block_q8_0* xq, int64_t n) { return dot_q4_0(as<block_q4_0>(r), xq, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_q4_0(a, as<block_q4_0>(r), y, n); }, axpy4_rows<block_q4_0, axpy4_q4_0>,
       [](const void* r, float* out, int64_t n) { dequantize_row_q4_0(as<block_q4_0>(r), out, n); }},
      {tensor_type::q6_k, qk_k, sizeof(block_q6_k), input_format::q8_k, [](const void* r, const float* x, const block_q8_0*, int64_t n) { return dot_q6_k(as<block_q6_k>(r), x, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_q6_k(a, as<block_q6_k>(r), y, n); }, axpy4_one_by_one<block_q6_k, axpy_q6_k>,
       [](const void* r, float* out, int64_t n) { dequantize_row_q6_k(as<block_q6_k>(r), out, n); }},
      {tensor_type::q4_k, qk_k, sizeof(block_q4_k), input_format::q8_k, [](const void* r, const float* x, const block_q8_0*, int64_t n) { return dot_q4_k(as<block_q4_k>(r), x, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_q4_k(a, as<block_q4_k>(r), y, n); }, axpy4_one_by_one<block_q4_k, axpy_q4_k>,
       [](const void* r, float* out, int64_t n) { to_float_q4_k(as<block_q4_k>(r), out, n); }},
      {tensor_type::q5_k, qk_k, sizeof(block_q5_k), input_format::q8_k, [](const void* r, const float* x, const block_q8_0*, int64_t n) { return dot_q5_k(as<block_q5_k>(r), x, n); },
       [](float a, const void* r, float* y, int64_t n) { axpy_q5_k(a, as<block_q5_k>(r), y, n); }, axpy4_one_by_one<block_q5_k, axpy_q5_k>,
       [](const void* r, float* out, int64_t n) { to_float_q5_k(as<block_q5_k>(r), out, n); }},
  }};
  return t;
}

}  // namespace

const row_kernels* row_kernels_for(tensor_type t) {
  // By type id (ggml's numbering runs below 64).
  static const std::array<const row_kernels*, 64> by_id = [] {
    std::array<const row_kernels*, 64> a{};
    for (const row_kernels& k : table()) a[static_cast<size_t>(k.type)] = &k;
    return a;
  }();
  const auto id = static_cast<size_t>(t);
  return id < by_id.size() ? by_id[id] : nullptr;
}

}  // namespace hotcold::kernels
