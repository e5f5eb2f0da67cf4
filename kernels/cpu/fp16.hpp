#pragma once
// Half-precision conversions: IEEE binary16 (F16) and bfloat16 (BF16) <-> float32.
// float -> half rounds to nearest, ties to even, as hardware converters do.
#include <cstddef>
#include <cstdint>

namespace hotcold::kernels {

float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t b);
uint16_t fp32_to_bf16(float f);

void fp16_to_fp32_row(const uint16_t* src, float* dst, size_t n);
void fp32_to_fp16_row(const float* src, uint16_t* dst, size_t n);
void bf16_to_fp32_row(const uint16_t* src, float* dst, size_t n);

}  // namespace hotcold::kernels
