// Rows of float types — F32, F16, BF16 — against activation vectors: dot products of one row, of one
// row with up to four vectors, of two and four rows at once, and AXPYs (y += a row), the scalar
// references first, then the AVX2 (with FMA and F16C) and AVX-512 (F, VL) versions. Which of them
// runs: rows.cpp's choice into the kernel table.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot_isa.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

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

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

}  // namespace scalar

namespace avx2 {

HOTCOLD_AVX2 float dot_f32(const float* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += w[i] * x[i];
  return s;
}

HOTCOLD_AVX2 static inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// BF16 is the top half of an F32: widen each 16-bit value to 32 bits and shift it into place.
HOTCOLD_AVX2 static inline __m256 load_bf16(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

// One 16-bit float row (F16 or BF16: load converts eight) against x, four independent sums.
template <__m256 (*load)(const uint16_t*), float (*one)(uint16_t)>
HOTCOLD_AVX2 static inline float dot_half(const uint16_t* w, const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(load(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    a2 = _mm256_fmadd_ps(load(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
    a3 = _mm256_fmadd_ps(load(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
  }
  for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load(w + i), _mm256_loadu_ps(x + i), a0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < n; ++i) s += one(w[i]) * x[i];
  return s;
}
HOTCOLD_AVX2 float dot_f16(const uint16_t* w, const float* x, int64_t n) { return dot_half<load_f16, h2f>(w, x, n); }
HOTCOLD_AVX2 float dot_bf16(const uint16_t* w, const float* x, int64_t n) { return dot_half<load_bf16, bf16_to_fp32>(w, x, n); }

HOTCOLD_AVX2 void axpy_f32(float a, const float* x, float* y, int64_t n) {
  __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

template <__m256 (*load)(const uint16_t*), float (*one)(uint16_t)>
HOTCOLD_AVX2 static inline void axpy_half(float a, const uint16_t* x, float* y, int64_t n) {
  __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * one(x[i]);
}
HOTCOLD_AVX2 void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) { axpy_half<load_f16, h2f>(a, x, y, n); }
HOTCOLD_AVX2 void axpy_bf16(float a, const uint16_t* x, float* y, int64_t n) { axpy_half<load_bf16, bf16_to_fp32>(a, x, y, n); }

// Row loaders for dotn: eight floats of a row at element i.
struct f32_row {
  const float* w;
  HOTCOLD_AVX2 __m256 operator()(int64_t i) const { return _mm256_loadu_ps(w + i); }
  HOTCOLD_AVX2 float at(int64_t i) const { return w[i]; }
};
struct f16_row {
  const uint16_t* w;
  HOTCOLD_AVX2 __m256 operator()(int64_t i) const { return load_f16(w + i); }
  HOTCOLD_AVX2 float at(int64_t i) const { return h2f(w[i]); }
};
struct bf16_row {
  const uint16_t* w;
  HOTCOLD_AVX2 __m256 operator()(int64_t i) const { return load_bf16(w + i); }
  HOTCOLD_AVX2 float at(int64_t i) const { return bf16_to_fp32(w[i]); }
};

template <typename Row>
HOTCOLD_AVX2 static inline void dotn(Row row, const float* const* x, int nx, int64_t n, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 w = row(i);
    for (int j = 0; j < nx; ++j) acc[j] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x[j] + i), acc[j]);
  }
  for (int j = 0; j < nx; ++j) {
    float s = hsum(acc[j]);
    for (int64_t k = i; k < n; ++k) s += row.at(k) * x[j][k];
    out[j] = s;
  }
}

HOTCOLD_AVX2 void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out) { dotn(f32_row{w}, x, nx, n, out); }
HOTCOLD_AVX2 void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { dotn(f16_row{w}, x, nx, n, out); }
HOTCOLD_AVX2 void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { dotn(bf16_row{w}, x, nx, n, out); }

// Two rows against NX vectors: 2 x NX independent accumulators keep the FMA units busy, and each
// vector load serves both rows.
// With next0 (and next1), the same offsets of those rows are asked for as this reads (dot2_f16_ahead).
template <int NX, typename Row>
HOTCOLD_AVX2 static inline void dot2n(Row r0, Row r1, const float* const* x, int64_t n, float* out0, float* out1, const char* next0 = nullptr,
                                      const char* next1 = nullptr) {
  constexpr int64_t eb = sizeof(*r0.w);
  __m256 a0[NX], a1[NX];
  for (int j = 0; j < NX; ++j) a0[j] = _mm256_setzero_ps(), a1[j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (next0 && (i * eb) % 64 == 0) _mm_prefetch(next0 + i * eb, _MM_HINT_T0), _mm_prefetch(next1 + i * eb, _MM_HINT_T0);
    const __m256 w0 = r0(i), w1 = r1(i);
    for (int j = 0; j < NX; ++j) {
      const __m256 v = _mm256_loadu_ps(x[j] + i);
      a0[j] = _mm256_fmadd_ps(w0, v, a0[j]);
      a1[j] = _mm256_fmadd_ps(w1, v, a1[j]);
    }
  }
  for (int j = 0; j < NX; ++j) {
    float s0 = hsum(a0[j]), s1 = hsum(a1[j]);
    for (int64_t k = i; k < n; ++k) s0 += r0.at(k) * x[j][k], s1 += r1.at(k) * x[j][k];
    out0[j] = s0, out1[j] = s1;
  }
}

template <typename Row>
HOTCOLD_AVX2 static inline void dot2n_any(Row r0, Row r1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  for_vector_count(nx, [&](auto k) { dot2n<decltype(k)::value>(r0, r1, x, n, out0, out1); });
}

HOTCOLD_AVX2 void dot2n_f32(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  dot2n_any(f32_row{w0}, f32_row{w1}, x, nx, n, out0, out1);
}
HOTCOLD_AVX2 void dot2n_f16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  dot2n_any(f16_row{w0}, f16_row{w1}, x, nx, n, out0, out1);
}
HOTCOLD_AVX2 void dot2n_bf16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  dot2n_any(bf16_row{w0}, bf16_row{w1}, x, nx, n, out0, out1);
}

// y += a[0] r0 + ... + a[3] r3 for rows of any float-convertible type (the row loaders above).
template <typename Row>
HOTCOLD_AVX2 static inline void axpy4(const float* a, const Row (&r)[4], float* y, int64_t n) {
  const __m256 a0 = _mm256_set1_ps(a[0]), a1 = _mm256_set1_ps(a[1]), a2 = _mm256_set1_ps(a[2]), a3 = _mm256_set1_ps(a[3]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_fmadd_ps(a0, r[0](i), _mm256_loadu_ps(y + i));
    v = _mm256_fmadd_ps(a1, r[1](i), v);
    v = _mm256_fmadd_ps(a2, r[2](i), v);
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a3, r[3](i), v));
  }
  for (; i < n; ++i) y[i] += a[0] * r[0].at(i) + a[1] * r[1].at(i) + a[2] * r[2].at(i) + a[3] * r[3].at(i);
}

HOTCOLD_AVX2 void axpy4_f32(const float* a, const float* const* x, float* y, int64_t n) {
  const f32_row r[4] = {{x[0]}, {x[1]}, {x[2]}, {x[3]}};
  axpy4(a, r, y, n);
}

HOTCOLD_AVX2 void axpy4_f16(const float* a, const uint16_t* const* x, float* y, int64_t n) {
  const f16_row r[4] = {{x[0]}, {x[1]}, {x[2]}, {x[3]}};
  axpy4(a, r, y, n);
}
HOTCOLD_AVX2 void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0,
                                 const uint16_t* next1) {
  dot2n<1>(f16_row{w0}, f16_row{w1}, &x, n, out0, out1, reinterpret_cast<const char*>(next0), reinterpret_cast<const char*>(next1));
}
HOTCOLD_AVX2 void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next) {
  // In pieces of 32 values (64 bytes of each row), each piece's lines of the next rows asked for first.
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int r = 0; r < 4; ++r) _mm_prefetch(reinterpret_cast<const char*>(next[r] + i), _MM_HINT_T0);
    const f16_row r[4] = {{x[0] + i}, {x[1] + i}, {x[2] + i}, {x[3] + i}};
    axpy4(a, r, y + i, 32);
  }
  const f16_row r[4] = {{x[0] + i}, {x[1] + i}, {x[2] + i}, {x[3] + i}};
  axpy4(a, r, y + i, n - i);
}

HOTCOLD_AVX2 void axpy4_bf16(const float* a, const uint16_t* const* x, float* y, int64_t n) {
  const bf16_row r[4] = {{x[0]}, {x[1]}, {x[2]}, {x[3]}};
  axpy4(a, r, y, n);
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

namespace avx512 {

struct f32_row16 {
  const float* w;
  HOTCOLD_AVX512 __m512 operator()(int64_t i) const { return _mm512_loadu_ps(w + i); }
  HOTCOLD_AVX512 float at(int64_t i) const { return w[i]; }
};
struct f16_row16 {
  const uint16_t* w;
  HOTCOLD_AVX512 __m512 operator()(int64_t i) const { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))); }
  HOTCOLD_AVX512 float at(int64_t i) const { return _cvtsh_ss(w[i]); }
};
struct bf16_row16 {  // the top halves of sixteen F32s, widened and shifted into place
  const uint16_t* w;
  HOTCOLD_AVX512 __m512 operator()(int64_t i) const {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i))), 16));
  }
  HOTCOLD_AVX512 float at(int64_t i) const { return bf16_to_fp32(w[i]); }
};

// With next0 (and next1), the same offsets of those rows are asked for as this reads (dot2_f16_ahead).
template <int NX, typename Row>
HOTCOLD_AVX512 static inline void dot2n(Row r0, Row r1, const float* const* x, int64_t n, float* out0, float* out1, const char* next0 = nullptr,
                                        const char* next1 = nullptr) {
  constexpr int64_t eb = sizeof(*r0.w);
  // Two halves of 16 per step: 4 x NX independent sums, enough to cover the FMA latency.
  __m512 a0[NX], a1[NX], b0[NX], b1[NX];
  for (int j = 0; j < NX; ++j) a0[j] = a1[j] = b0[j] = b1[j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (next0)
      for (int64_t b = 0; b < 32 * eb; b += 64) _mm_prefetch(next0 + i * eb + b, _MM_HINT_T0), _mm_prefetch(next1 + i * eb + b, _MM_HINT_T0);
    const __m512 w0 = r0(i), w1 = r1(i), v0 = r0(i + 16), v1 = r1(i + 16);
    for (int j = 0; j < NX; ++j) {
      const __m512 x0 = _mm512_loadu_ps(x[j] + i), x1 = _mm512_loadu_ps(x[j] + i + 16);
      a0[j] = _mm512_fmadd_ps(w0, x0, a0[j]);
      a1[j] = _mm512_fmadd_ps(w1, x0, a1[j]);
      b0[j] = _mm512_fmadd_ps(v0, x1, b0[j]);
      b1[j] = _mm512_fmadd_ps(v1, x1, b1[j]);
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 w0 = r0(i), w1 = r1(i);
    for (int j = 0; j < NX; ++j) {
      const __m512 v = _mm512_loadu_ps(x[j] + i);
      a0[j] = _mm512_fmadd_ps(w0, v, a0[j]);
      a1[j] = _mm512_fmadd_ps(w1, v, a1[j]);
    }
  }
  for (int j = 0; j < NX; ++j) {
    float s0 = _mm512_reduce_add_ps(_mm512_add_ps(a0[j], b0[j])), s1 = _mm512_reduce_add_ps(_mm512_add_ps(a1[j], b1[j]));
    for (int64_t k = i; k < n; ++k) s0 += r0.at(k) * x[j][k], s1 += r1.at(k) * x[j][k];
    out0[j] = s0, out1[j] = s1;
  }
}

// One row against NX vectors, four steps of 16 in flight: one sequential stream through the row.
template <int NX, typename Row>
HOTCOLD_AVX512 static inline void dotn(Row row, const float* const* x, int64_t n, float* out) {
  __m512 a[4][NX];
  for (int u = 0; u < 4; ++u)
    for (int j = 0; j < NX; ++j) a[u][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 64 <= n; i += 64)
    for (int u = 0; u < 4; ++u) {
      const __m512 w = row(i + 16 * u);
      for (int j = 0; j < NX; ++j) a[u][j] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x[j] + i + 16 * u), a[u][j]);
    }
  for (; i + 16 <= n; i += 16) {
    const __m512 w = row(i);
    for (int j = 0; j < NX; ++j) a[0][j] = _mm512_fmadd_ps(w, _mm512_loadu_ps(x[j] + i), a[0][j]);
  }
  for (int j = 0; j < NX; ++j) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0][j], a[1][j]), _mm512_add_ps(a[2][j], a[3][j])));
    for (int64_t k = i; k < n; ++k) s += row.at(k) * x[j][k];
    out[j] = s;
  }
}

template <typename Row>
HOTCOLD_AVX512 static inline void dotn_any(Row row, const float* const* x, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dotn<decltype(k)::value>(row, x, n, out); });
}
HOTCOLD_AVX512 void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out) { dotn_any(f32_row16{w}, x, nx, n, out); }
HOTCOLD_AVX512 void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { dotn_any(f16_row16{w}, x, nx, n, out); }
HOTCOLD_AVX512 void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { dotn_any(bf16_row16{w}, x, nx, n, out); }

template <typename Row>
HOTCOLD_AVX512 static inline void dot2n_any(Row r0, Row r1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  for_vector_count(nx, [&](auto k) { dot2n<decltype(k)::value>(r0, r1, x, n, out0, out1); });
}

HOTCOLD_AVX512 void dot2n_f32(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  dot2n_any(f32_row16{w0}, f32_row16{w1}, x, nx, n, out0, out1);
}

// Four rows against NX vectors: 4 x NX sums; each converted row value serves NX products and each
// vector load four — enough work per load that the loads keep up with the FMA units.
template <int NX, typename Row>
HOTCOLD_AVX512 static inline void dot4n(const Row (&w)[4], const float* const* x, int64_t n, float* out) {
  __m512 a[4][NX];
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < NX; ++j) a[r][j] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 w0 = w[0](i), w1 = w[1](i), w2 = w[2](i), w3 = w[3](i);
    for (int j = 0; j < NX; ++j) {
      const __m512 v = _mm512_loadu_ps(x[j] + i);
      a[0][j] = _mm512_fmadd_ps(w0, v, a[0][j]);
      a[1][j] = _mm512_fmadd_ps(w1, v, a[1][j]);
      a[2][j] = _mm512_fmadd_ps(w2, v, a[2][j]);
      a[3][j] = _mm512_fmadd_ps(w3, v, a[3][j]);
    }
  }
  // The 16 sums at once: a transpose-and-add network (45 instructions instead of 16 reductions).
  __m512 v[16];
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 4; ++j) v[4 * r + j] = _mm512_setzero_ps();
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < NX; ++j) v[4 * r + j] = a[r][j];
  alignas(64) float sums[16];
  _mm512_store_ps(sums, reduce16(v));
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < NX; ++j) {
      float s = sums[4 * r + j];
      for (int64_t k = i; k < n; ++k) s += w[r].at(k) * x[j][k];
      out[r * 4 + j] = s;
    }
}

template <typename Row>
HOTCOLD_AVX512 static inline void dot4n_any(const Row (&w)[4], const float* const* x, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot4n<decltype(k)::value>(w, x, n, out); });
}
HOTCOLD_AVX512 void dot4n_f32(const float* const* w, const float* const* x, int nx, int64_t n, float* out) {
  const f32_row16 r[4] = {{w[0]}, {w[1]}, {w[2]}, {w[3]}};
  dot4n_any(r, x, nx, n, out);
}
HOTCOLD_AVX512 void dot4n_f16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) {
  const f16_row16 r[4] = {{w[0]}, {w[1]}, {w[2]}, {w[3]}};
  dot4n_any(r, x, nx, n, out);
}
HOTCOLD_AVX512 void dot2n_f16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  dot2n_any(f16_row16{w0}, f16_row16{w1}, x, nx, n, out0, out1);
}
HOTCOLD_AVX512 void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0,
                                   const uint16_t* next1) {
  dot2n<1>(f16_row16{w0}, f16_row16{w1}, &x, n, out0, out1, reinterpret_cast<const char*>(next0), reinterpret_cast<const char*>(next1));
}
// Four rows with dot2n<1>'s sums per row: lanes 0-15 of each 32 into a, 16-31 into b, then a + b
// summed across lanes; the 16-value step after the last 32 into a, the rest one value at a time.
HOTCOLD_AVX512 void dot4_f16_ahead(const uint16_t* const* w, const float* x, int64_t n, float* out, const uint16_t* const* next) {
  const f16_row16 r[4] = {{w[0]}, {w[1]}, {w[2]}, {w[3]}};
  __m512 a[4], b[4];
  for (int q = 0; q < 4; ++q) a[q] = b[q] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int q = 0; q < 4; ++q) _mm_prefetch(reinterpret_cast<const char*>(next[q] + i), _MM_HINT_T0);
    const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
    for (int q = 0; q < 4; ++q) a[q] = _mm512_fmadd_ps(r[q](i), x0, a[q]), b[q] = _mm512_fmadd_ps(r[q](i + 16), x1, b[q]);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    for (int q = 0; q < 4; ++q) a[q] = _mm512_fmadd_ps(r[q](i), v, a[q]);
  }
  for (int q = 0; q < 4; ++q) {
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a[q], b[q]));
    for (int64_t k = i; k < n; ++k) s += r[q].at(k) * x[k];
    out[q] = s;
  }
}
// axpy4_f16's sums (each value y + a0 r0 + a1 r1 + a2 r2 + a3 r3 in that order, as the AVX2 kernel
// makes them) sixteen at a time, 64 bytes of each row a step with the next rows' same line asked for;
// what is left (under 32 values) by the AVX2 kernel.
HOTCOLD_AVX512 void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next) {
  const __m512 a0 = _mm512_set1_ps(a[0]), a1 = _mm512_set1_ps(a[1]), a2 = _mm512_set1_ps(a[2]), a3 = _mm512_set1_ps(a[3]);
  const f16_row16 r[4] = {{x[0]}, {x[1]}, {x[2]}, {x[3]}};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) _mm_prefetch(reinterpret_cast<const char*>(next[k] + i), _MM_HINT_T0);
    for (int64_t h = i; h < i + 32; h += 16) {
      __m512 v = _mm512_fmadd_ps(a0, r[0](h), _mm512_loadu_ps(y + h));
      v = _mm512_fmadd_ps(a1, r[1](h), v);
      v = _mm512_fmadd_ps(a2, r[2](h), v);
      _mm512_storeu_ps(y + h, _mm512_fmadd_ps(a3, r[3](h), v));
    }
  }
  if (i < n) {
    const uint16_t* rest[4] = {x[0] + i, x[1] + i, x[2] + i, x[3] + i};
    avx2::axpy4_f16(a, rest, y + i, n - i);
  }
}
HOTCOLD_AVX512 void dot4n_bf16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) {
  const bf16_row16 r[4] = {{w[0]}, {w[1]}, {w[2]}, {w[3]}};
  dot4n_any(r, x, nx, n, out);
}
HOTCOLD_AVX512 void dot2n_bf16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  dot2n_any(bf16_row16{w0}, bf16_row16{w1}, x, nx, n, out0, out1);
}

}  // namespace avx512

HOTCOLD_AVX512_END

}  // namespace hotcold::kernels
