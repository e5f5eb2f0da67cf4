#pragma once
// The instruction sets' versions of the row kernels (rows_float.cpp, rows_quant.cpp), for their
// choice into the kernel table (rows.cpp) and for the versions that call each other.
#include "kernels/cpu/dot.hpp"

namespace hotcold::kernels {

namespace avx2 {
float dot_f32(const float* w, const float* x, int64_t n);
float dot_f16(const uint16_t* w, const float* x, int64_t n);
float dot_bf16(const uint16_t* w, const float* x, int64_t n);
float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n);
float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n);
void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out);
void dot4r_q4_0_ahead(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out, const block_q4_0* const* next);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void axpy_bf16(float a, const uint16_t* x, float* y, int64_t n);
void axpy_q8_0(float a, const block_q8_0* x, float* y, int64_t n);
void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n);
float dot_q6_k(const block_q6_k* w, const float* x, int64_t n);
void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out);
void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
void dot2n_f32(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
void dot2n_f16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
void dot2n_bf16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
void axpy4_f32(const float* a, const float* const* x, float* y, int64_t n);
void axpy4_f16(const float* a, const uint16_t* const* x, float* y, int64_t n);
void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0, const uint16_t* next1);
void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next);
void axpy4_bf16(const float* a, const uint16_t* const* x, float* y, int64_t n);
void axpy4_q8_0(const float* a, const block_q8_0* const* x, float* y, int64_t n);
void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n);
void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next);
}  // namespace avx2

namespace avx512vnni {
float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n);
float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n);
void dotn_q4_0(const block_q4_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out);
void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out);
void dot4r_q4_0_x4(const block_q4_0* const* w, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next);
void dotn_q4_0_x4(const block_q4_0* w, const q8_0_x4* const* x4, int nx, int64_t n, float* out);
void dotn_q8_0(const block_q8_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out);
}  // namespace avx512vnni

namespace avx512 {
void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out);
void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out);
void dot2n_f32(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
void dot4n_f32(const float* const* w, const float* const* x, int nx, int64_t n, float* out);
void dot4n_f16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out);
void dot2n_f16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0, const uint16_t* next1);
void dot4_f16_ahead(const uint16_t* const* w, const float* x, int64_t n, float* out, const uint16_t* const* next);
void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next);
void dot4n_bf16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out);
void dot2n_bf16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1);
void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n);
void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next);
void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n);
void axpy4_q8_0(const float* a, const block_q8_0* const* x, float* y, int64_t n);
}  // namespace avx512

}  // namespace hotcold::kernels
