// The row kernels' entries of the kernel table (rows_float.cpp, rows_quant.cpp hold the versions): the
// scalar references, then each instruction set the CPU has; and the kernels made of other entries,
// for instruction sets without a version of their own.
#include <cstdint>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot_isa.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace {

// Kernels made of other entries of the table, for instruction sets without their own version: the
// same sums as the entries they call.
namespace composed {

template <typename W, float (*dot)(const W*, const float*, int64_t)>
void dotn(const W* w, const float* const* x, int nx, int64_t n, float* out) {
  for (int j = 0; j < nx; ++j) out[j] = dot(w, x[j], n);
}
template <typename W, float (*dot)(const W*, const float*, int64_t)>
void dot2n(const W* w0, const W* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  for (int j = 0; j < nx; ++j) out0[j] = dot(w0, x[j], n), out1[j] = dot(w1, x[j], n);
}
template <typename W, void (*axpy)(float, const W*, float*, int64_t)>
void axpy4(const float* a, const W* const* x, float* y, int64_t n) {
  for (int r = 0; r < 4; ++r) axpy(a[r], x[r], y, n);
}
void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t*, const uint16_t*) {
  *out0 = scalar::dot_f16(w0, x, n), *out1 = scalar::dot_f16(w1, x, n);
}
void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const*) { axpy4<uint16_t, scalar::axpy_f16>(a, x, y, n); }
// As two pairs, which makes the same sums.
void dot4_f16_ahead(const uint16_t* const* w, const float* x, int64_t n, float* out, const uint16_t* const* next) {
  cpu_kernels().dot2_f16_ahead(w[0], w[1], x, n, out, out + 1, next[0], next[1]);
  cpu_kernels().dot2_f16_ahead(w[2], w[3], x, n, out + 2, out + 3, next[2], next[3]);
}
template <typename W, void (*dot2n)(const W*, const W*, const float* const*, int, int64_t, float*, float*)>
void dot4n(const W* const* w, const float* const* x, int nx, int64_t n, float* out) {
  dot2n(w[0], w[1], x, nx, n, out, out + 4);
  dot2n(w[2], w[3], x, nx, n, out + 8, out + 12);
}
void dot4n_f32(const float* const* w, const float* const* x, int nx, int64_t n, float* out) { dot4n<float, kernels::dot2n_f32>(w, x, nx, n, out); }
void dot4n_f16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) { dot4n<uint16_t, kernels::dot2n_f16>(w, x, nx, n, out); }
void dot4n_bf16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) { dot4n<uint16_t, kernels::dot2n_bf16>(w, x, nx, n, out); }
void dotn_q4_0(const block_q4_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) {
  for (int j = 0; j < nx; ++j) out[j] = cpu_kernels().dot_q4_0(w, x[j], n);
}
void dotn_q8_0(const block_q8_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) {
  for (int j = 0; j < nx; ++j) out[j] = cpu_kernels().dot_q8_0(w, x[j], n);
}
void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out) {
  for (int r = 0; r < 4; ++r) out[r] = cpu_kernels().dot_q4_0(w[r], x, n);
}
void dot4r_q4_0_x4(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4*, int64_t n, float* out) { cpu_kernels().dot4r_q4_0(w, xq, n, out); }
void dotn_q4_0_x4(const block_q4_0* w, const block_q8_0* const* xq, const q8_0_x4* const*, int nx, int64_t n, float* out) { cpu_kernels().dotn_q4_0(w, xq, nx, n, out); }
// The "ahead" Q4_0 kernels elsewhere: rows next[0..3] of n values asked for whole first, each line once.
void ask_for_whole_q4_0_rows(const block_q4_0* const* next, int64_t n) {
  for (int r = 0; r < 4; ++r) {
    uintptr_t line = stream_line(next[r], 0);
    prefetch_until(line, reinterpret_cast<uintptr_t>(next[r] + n / qk4_0));
  }
}
void dot4r_q4_0_x4_ahead(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4*, int64_t n, float* out, const block_q4_0* const* next) {
  ask_for_whole_q4_0_rows(next, n);
  cpu_kernels().dot4r_q4_0(w, xq, n, out);
}
void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next) {
  ask_for_whole_q4_0_rows(next, n);
  cpu_kernels().axpy4_q4_0(a, x, y, n);
}
// AVX2: the four-row kernel asking for the next rows itself (the rearranged vector unused).
void dot4r_q4_0_x4_ahead_avx2(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4*, int64_t n, float* out, const block_q4_0* const* next) {
  avx2::dot4r_q4_0_ahead(w, xq, n, out, next);
}
// The VBMI kernel takes rows of a multiple of 128 values; others go the VNNI way.
void dot4r_q4_0_x4_vbmi(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out) {
  if (n % 128 == 0) return avx512vnni::dot4r_q4_0_x4(w, x4, n, out, nullptr);
  cpu_kernels().dot4r_q4_0(w, xq, n, out);
}
void dotn_q4_0_x4_vbmi(const block_q4_0* w, const block_q8_0* const* xq, const q8_0_x4* const* x4, int nx, int64_t n, float* out) {
  if (n % 128 == 0) return avx512vnni::dotn_q4_0_x4(w, x4, nx, n, out);
  cpu_kernels().dotn_q4_0(w, xq, nx, n, out);
}
void dot4r_q4_0_x4_ahead_vbmi(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next) {
  if (n % 128 == 0) return avx512vnni::dot4r_q4_0_x4(w, x4, n, out, next);
  composed::dot4r_q4_0_x4_ahead(w, xq, x4, n, out, next);
}

}  // namespace composed

}  // namespace

void choose_row_kernels(kernel_table& k, const cpu_features& f) {
  // The scalar references, and what is composed of them.
  k.dot_f32 = scalar::dot_f32, k.dot_f16 = scalar::dot_f16, k.dot_bf16 = scalar::dot_bf16;
  k.dot_q8_0 = scalar::dot_q8_0, k.dot_q4_0 = scalar::dot_q4_0, k.dot_q6_k = scalar::dot_q6_k;
  k.axpy_f32 = scalar::axpy_f32, k.axpy_f16 = scalar::axpy_f16, k.axpy_bf16 = scalar::axpy_bf16;
  k.axpy_q8_0 = scalar::axpy_q8_0, k.axpy_q4_0 = scalar::axpy_q4_0, k.axpy_q6_k = scalar::axpy_q6_k;
  k.axpy4_f32 = composed::axpy4<float, scalar::axpy_f32>, k.axpy4_f16 = composed::axpy4<uint16_t, scalar::axpy_f16>;
  k.axpy4_bf16 = composed::axpy4<uint16_t, scalar::axpy_bf16>, k.axpy4_q8_0 = composed::axpy4<block_q8_0, scalar::axpy_q8_0>;
  k.axpy4_q4_0 = composed::axpy4<block_q4_0, scalar::axpy_q4_0>;
  k.axpy4_f16_ahead = composed::axpy4_f16_ahead, k.axpy4_q4_0_ahead = composed::axpy4_q4_0_ahead;
  k.dotn_f32 = composed::dotn<float, scalar::dot_f32>, k.dotn_f16 = composed::dotn<uint16_t, scalar::dot_f16>;
  k.dotn_bf16 = composed::dotn<uint16_t, scalar::dot_bf16>;
  k.dot2n_f32 = composed::dot2n<float, scalar::dot_f32>, k.dot2n_f16 = composed::dot2n<uint16_t, scalar::dot_f16>;
  k.dot2n_bf16 = composed::dot2n<uint16_t, scalar::dot_bf16>;
  k.dot2_f16_ahead = composed::dot2_f16_ahead, k.dot4_f16_ahead = composed::dot4_f16_ahead;
  k.dot4n_f32 = composed::dot4n_f32, k.dot4n_f16 = composed::dot4n_f16, k.dot4n_bf16 = composed::dot4n_bf16;
  k.dotn_q4_0 = composed::dotn_q4_0, k.dotn_q8_0 = composed::dotn_q8_0, k.dot4r_q4_0 = composed::dot4r_q4_0;
  k.dot4r_q4_0_x4 = composed::dot4r_q4_0_x4, k.dot4r_q4_0_x4_ahead = composed::dot4r_q4_0_x4_ahead, k.dotn_q4_0_x4 = composed::dotn_q4_0_x4;
  if (f.avx2) {
    k.dot_f32 = avx2::dot_f32, k.dot_f16 = avx2::dot_f16, k.dot_bf16 = avx2::dot_bf16;
    k.dot_q8_0 = avx2::dot_q8_0, k.dot_q4_0 = avx2::dot_q4_0, k.dot_q6_k = avx2::dot_q6_k;
    k.axpy_f32 = avx2::axpy_f32, k.axpy_f16 = avx2::axpy_f16, k.axpy_bf16 = avx2::axpy_bf16;
    k.axpy_q8_0 = avx2::axpy_q8_0, k.axpy_q4_0 = avx2::axpy_q4_0;
    k.axpy4_f32 = avx2::axpy4_f32, k.axpy4_f16 = avx2::axpy4_f16, k.axpy4_f16_ahead = avx2::axpy4_f16_ahead;
    k.axpy4_bf16 = avx2::axpy4_bf16, k.axpy4_q8_0 = avx2::axpy4_q8_0, k.axpy4_q4_0 = avx2::axpy4_q4_0, k.axpy4_q4_0_ahead = avx2::axpy4_q4_0_ahead;
    k.dotn_f32 = avx2::dotn_f32, k.dotn_f16 = avx2::dotn_f16, k.dotn_bf16 = avx2::dotn_bf16;
    k.dot2n_f32 = avx2::dot2n_f32, k.dot2n_f16 = avx2::dot2n_f16, k.dot2n_bf16 = avx2::dot2n_bf16;
    k.dot2_f16_ahead = avx2::dot2_f16_ahead, k.dot4r_q4_0 = avx2::dot4r_q4_0, k.dot4r_q4_0_x4_ahead = composed::dot4r_q4_0_x4_ahead_avx2;
  }
  if (f.avx512) {
    k.axpy_q4_0 = avx512::axpy_q4_0;
    k.axpy4_f16_ahead = avx512::axpy4_f16_ahead, k.axpy4_q8_0 = avx512::axpy4_q8_0;
    k.axpy4_q4_0 = avx512::axpy4_q4_0, k.axpy4_q4_0_ahead = avx512::axpy4_q4_0_ahead;
    k.dotn_f32 = avx512::dotn_f32, k.dotn_f16 = avx512::dotn_f16, k.dotn_bf16 = avx512::dotn_bf16;
    k.dot2n_f32 = avx512::dot2n_f32, k.dot2n_f16 = avx512::dot2n_f16, k.dot2n_bf16 = avx512::dot2n_bf16;
    k.dot2_f16_ahead = avx512::dot2_f16_ahead, k.dot4_f16_ahead = avx512::dot4_f16_ahead;
    k.dot4n_f32 = avx512::dot4n_f32, k.dot4n_f16 = avx512::dot4n_f16, k.dot4n_bf16 = avx512::dot4n_bf16;
  }
  if (f.vnni) {
    k.dot_q8_0 = avx512vnni::dot_q8_0, k.dot_q4_0 = avx512vnni::dot_q4_0;
    k.dotn_q4_0 = avx512vnni::dotn_q4_0, k.dotn_q8_0 = avx512vnni::dotn_q8_0, k.dot4r_q4_0 = avx512vnni::dot4r_q4_0;
    k.dot4r_q4_0_x4_ahead = composed::dot4r_q4_0_x4_ahead;  // (the VNNI four-row kernel, whole rows asked for first)
  }
  if (f.vbmi)
    k.dot4r_q4_0_x4 = composed::dot4r_q4_0_x4_vbmi, k.dot4r_q4_0_x4_ahead = composed::dot4r_q4_0_x4_ahead_vbmi, k.dotn_q4_0_x4 = composed::dotn_q4_0_x4_vbmi;
}

}  // namespace hotcold::kernels
