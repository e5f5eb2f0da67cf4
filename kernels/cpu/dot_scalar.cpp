// The scalar references of the dot-product kernels: what every instruction set's version must match
// (up to float summation order), and what runs on a CPU without AVX2.
#include <algorithm>

#include "kernels/cpu/dot_isa.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {

// ---- scalar references ------------------------------------------------------------------------

namespace scalar {

float dot_f32(const float* w, const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += w[i] * x[i];
  return s;
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(w[i]) * x[i];
  return s;
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += bf16_to_fp32(w[i]) * x[i];
  return s;
}

void axpy_bf16(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * bf16_to_fp32(x[i]);
}

float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / qk8_0; ++b) {
    int32_t acc = 0;
    for (int i = 0; i < qk8_0; ++i) acc += w[b].qs[i] * x[b].qs[i];
    s += fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d) * static_cast<float>(acc);
  }
  return s;
}

float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / qk4_0; ++b) {
    int32_t acc = 0;
    for (int j = 0; j < qk4_0 / 2; ++j) {
      acc += ((w[b].qs[j] & 0x0F) - 8) * x[b].qs[j];
      acc += ((w[b].qs[j] >> 4) - 8) * x[b].qs[j + 16];
    }
    s += fp16_to_fp32(w[b].d) * fp16_to_fp32(x[b].d) * static_cast<float>(acc);
  }
  return s;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

void axpy_q8_0(float a, const block_q8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b, y += qk8_0) {
    float s = a * fp16_to_fp32(x[b].d);
    for (int i = 0; i < qk8_0; ++i) y[i] += s * x[b].qs[i];
  }
}

void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    float s = a * fp16_to_fp32(x[b].d);
    for (int j = 0; j < qk4_0 / 2; ++j) {
      y[j] += s * ((x[b].qs[j] & 0x0F) - 8);
      y[j + 16] += s * ((x[b].qs[j] >> 4) - 8);
    }
  }
}

float dot_q6_k(const block_q6_k* w, const float* x, int64_t n) {
  float s = 0;
  float tmp[qk_k];
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    dequantize_row_q6_k(w + b, tmp, qk_k);
    for (int i = 0; i < qk_k; ++i) s += tmp[i] * x[i];
  }
  return s;
}

void axpy_q6_k(float a, const block_q6_k* x, float* y, int64_t n) {
  float tmp[qk_k];
  for (int64_t b = 0; b < n / qk_k; ++b, y += qk_k) {
    dequantize_row_q6_k(x + b, tmp, qk_k);
    for (int i = 0; i < qk_k; ++i) y[i] += a * tmp[i];
  }
}

}  // namespace scalar

}  // namespace hotcold::kernels
