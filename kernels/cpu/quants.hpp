#pragma once
// GGUF block formats hotcold computes with, bit-exact with the file layout, and their reference
// (scalar) quantize / dequantize. Shapes: n is a multiple of the block size.
#include <cstdint>

namespace hotcold::kernels {

constexpr int64_t qk8_0 = 32;
constexpr int64_t qk4_0 = 32;
constexpr int64_t qk_k = 256;

// Q8_0: x[i] = d * qs[i]
struct block_q8_0 {
  uint16_t d;  // f16 scale
  int8_t qs[qk8_0];
};
// Q4_0: x[j] = d * ((qs[j] & 15) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8)
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[qk4_0 / 2];
};
// Q6_K: 256 values in 16 groups of 16, 6-bit quants (low 4 bits in ql, high 2 in qh) minus 32,
// times an int8 group scale, times the f16 super-block scale d.
struct block_q6_k {
  uint8_t ql[qk_k / 2];
  uint8_t qh[qk_k / 4];
  int8_t scales[qk_k / 16];
  uint16_t d;
};
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q6_k) == 210);

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n);

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n);
void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n);
void dequantize_row_q6_k(const block_q6_k* x, float* y, int64_t n);

}  // namespace hotcold::kernels
