#include "kernels/cpu/dot.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/lanes.hpp"
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

}  // namespace scalar



void axpy_q6_k(float a, const block_q6_k* x, float* y, int64_t n) {
  float tmp[qk_k];
  for (int64_t b = 0; b < n / qk_k; ++b, y += qk_k) {
    dequantize_row_q6_k(x + b, tmp, qk_k);
    for (int i = 0; i < qk_k; ++i) y[i] += a * tmp[i];
  }
}



// ---- AVX2 + FMA + F16C ------------------------------------------------------------------------

namespace avx2 {

// One half to float with the F16C instruction (the scalar conversion is a dozen branches).
HOTCOLD_AVX2 static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

HOTCOLD_AVX2 static inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

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

// Sum of int8 products of 32 pairs as 8 int32 lanes, converted to float.
HOTCOLD_AVX2 static inline __m256 dot_i8_32(__m256i a, __m256i b) {
  // maddubs needs unsigned x signed: move a's sign onto b.
  __m256i ua = _mm256_sign_epi8(a, a);
  __m256i sb = _mm256_sign_epi8(b, a);
  __m256i p16 = _mm256_maddubs_epi16(ua, sb);
  __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
  return _mm256_cvtepi32_ps(p32);
}

HOTCOLD_AVX2 static inline __m256 q8_0_block(const block_q8_0& w, const block_q8_0& x) {
  __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs));
  __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  return _mm256_mul_ps(_mm256_set1_ps(h2f(w.d) * h2f(x.d)), dot_i8_32(qa, qb));
}

// Sums block(w[b], x[b]) over the blocks with two accumulators, so consecutive blocks do not wait on
// one another's additions.
template <typename W, __m256 (*block)(const W&, const block_q8_0&)>
HOTCOLD_AVX2 static inline float sum_blocks(const W* w, const block_q8_0* x, int64_t nb) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    acc0 = _mm256_add_ps(acc0, block(w[b], x[b]));
    acc1 = _mm256_add_ps(acc1, block(w[b + 1], x[b + 1]));
  }
  if (b < nb) acc0 = _mm256_add_ps(acc0, block(w[b], x[b]));
  return hsum(_mm256_add_ps(acc0, acc1));
}

HOTCOLD_AVX2 float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n) { return sum_blocks<block_q8_0, q8_0_block>(w, x, n / qk8_0); }

HOTCOLD_AVX2 static inline __m256 q4_0_block(const block_q4_0& w, const block_q8_0& x) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs));
  // Low nibbles are values 0..15, high nibbles values 16..31.
  __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  __m256i qa = _mm256_sub_epi8(_mm256_and_si256(both, low4), eight);
  __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs));
  return _mm256_mul_ps(_mm256_set1_ps(h2f(w.d) * h2f(x.d)), dot_i8_32(qa, qb));
}

HOTCOLD_AVX2 float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n) { return sum_blocks<block_q4_0, q4_0_block>(w, x, n / qk4_0); }

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

HOTCOLD_AVX2 static inline __m256 int8x8_to_ps(const int8_t* q) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
}

HOTCOLD_AVX2 void axpy_q8_0(float a, const block_q8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b, y += qk8_0) {
    __m256 s = _mm256_set1_ps(a * h2f(x[b].d));
    for (int j = 0; j < qk8_0; j += 8) _mm256_storeu_ps(y + j, _mm256_fmadd_ps(s, int8x8_to_ps(x[b].qs + j), _mm256_loadu_ps(y + j)));
  }
}

HOTCOLD_AVX2 void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n) {
  const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  alignas(16) int8_t q[32];
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
    _mm_store_si128(reinterpret_cast<__m128i*>(q), _mm_sub_epi8(_mm_and_si128(v, m4), eight));                       // values 0..15
    _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m4), eight));  // 16..31
    __m256 s = _mm256_set1_ps(a * h2f(x[b].d));
    for (int j = 0; j < 32; j += 8) _mm256_storeu_ps(y + j, _mm256_fmadd_ps(s, int8x8_to_ps(q + j), _mm256_loadu_ps(y + j)));
  }
}

// Q6_K: unpack a block's 256 six-bit values to int8 with vector shifts (value v = 128 h + 32 q + l,
// as dequantize_row_q6_k reads them), then multiply in groups of 16 sharing the scale scales[v / 16].
HOTCOLD_AVX2 float dot_q6_k(const block_q6_k* w, const float* x, int64_t n) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
  alignas(32) int8_t q[qk_k];
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    const uint8_t* ql = w[b].ql;
    const uint8_t* qh = w[b].qh;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32) {
      __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      __m256i* out = reinterpret_cast<__m256i*>(q + 128 * h);
      _mm256_store_si256(out + 0, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 0), m3), 4)), k32));
      _mm256_store_si256(out + 1, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), m3), 4)), k32));
      _mm256_store_si256(out + 2, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), m3), 4)), k32));
      _mm256_store_si256(out + 3, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), m3), 4)), k32));
    }
    const float d = h2f(w[b].d);
    for (int g = 0; g < qk_k / 16; ++g) {
      __m256 sc = _mm256_set1_ps(d * static_cast<float>(w[b].scales[g]));
      acc0 = _mm256_fmadd_ps(_mm256_mul_ps(sc, int8x8_to_ps(q + 16 * g)), _mm256_loadu_ps(x + 16 * g), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_mul_ps(sc, int8x8_to_ps(q + 16 * g + 8)), _mm256_loadu_ps(x + 16 * g + 8), acc1);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

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
  switch (nx) {
    case 1: return dot2n<1>(r0, r1, x, n, out0, out1);
    case 2: return dot2n<2>(r0, r1, x, n, out0, out1);
    case 3: return dot2n<3>(r0, r1, x, n, out0, out1);
    default: return dot2n<4>(r0, r1, x, n, out0, out1);
  }
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

HOTCOLD_AVX2 void axpy4_q8_0(const float* a, const block_q8_0* const* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b, y += qk8_0) {
    __m256 s[4];
    for (int r = 0; r < 4; ++r) s[r] = _mm256_set1_ps(a[r] * h2f(x[r][b].d));
    for (int j = 0; j < qk8_0; j += 8) {
      __m256 v = _mm256_loadu_ps(y + j);
      for (int r = 0; r < 4; ++r) v = _mm256_fmadd_ps(s[r], int8x8_to_ps(x[r][b].qs + j), v);
      _mm256_storeu_ps(y + j, v);
    }
  }
}

HOTCOLD_AVX2 void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n) {
  const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  alignas(16) int8_t q[4][32];
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    __m256 s[4];
    for (int r = 0; r < 4; ++r) {
      __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][b].qs));
      _mm_store_si128(reinterpret_cast<__m128i*>(q[r]), _mm_sub_epi8(_mm_and_si128(v, m4), eight));
      _mm_store_si128(reinterpret_cast<__m128i*>(q[r] + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(v, 4), m4), eight));
      s[r] = _mm256_set1_ps(a[r] * h2f(x[r][b].d));
    }
    for (int j = 0; j < 32; j += 8) {
      __m256 v = _mm256_loadu_ps(y + j);
      for (int r = 0; r < 4; ++r) v = _mm256_fmadd_ps(s[r], int8x8_to_ps(q[r] + j), v);
      _mm256_storeu_ps(y + j, v);
    }
  }
}

}  // namespace avx2

// ---- AVX-512 VNNI (Zen 4/5, Ice Lake and later) ---------------------------------------------

HOTCOLD_AVX512_BEGIN

namespace avx512vnni {

// Two blocks per 512-bit step: dpbusd multiplies unsigned bytes by signed bytes, so Q4_0's nibbles
// (0..15) go in as they are and the -8 offset comes off as 8 * sum(x) (a second dpbusd with 8s).
HOTCOLD_VNNI float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), eights = _mm512_set1_epi8(8);
  __m512 acc = _mm512_setzero_ps();
  const int64_t nb = n / qk4_0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b + 1].qs));
    // bytes: [block b low nibbles | block b high | block b+1 low | block b+1 high]
    __m512i packed = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_set_m128i(p0, p0)), _mm256_set_m128i(p1, p1), 1);
    __m512i shifted = _mm512_srli_epi16(packed, 4);
    // lanes 0-15 and 32-47 take the low nibbles, 16-31 and 48-63 the high ones
    __m512i nib = _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, packed, shifted), low4);
    __m512i xq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs))),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].qs)), 1);
    __m512i dot = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), nib, xq), _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, xq));
    __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(w[b].d) * _cvtsh_ss(x[b].d)),
                                      _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * _cvtsh_ss(x[b + 1].d)), 1);
    acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  if (b < nb) s += avx2::dot_q4_0(w + b, x + b, qk4_0);
  return s;
}

// Q8_0 x Q8_0: w's sign moves onto x so that dpbusd sees |w| (unsigned) times sign(w) x.
HOTCOLD_VNNI float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  const int64_t nb = n / qk8_0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m512i wq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs))),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs)), 1);
    __m512i xq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs))),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].qs)), 1);
    __m512i aw = _mm512_abs_epi8(wq);
    // sign(w) * x: negate x where w < 0 (w == 0 contributes 0 through |w| anyway)
    __m512i sx = _mm512_mask_sub_epi8(xq, _mm512_movepi8_mask(wq), _mm512_setzero_si512(), xq);
    __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sx);
    __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(w[b].d) * _cvtsh_ss(x[b].d)),
                                      _mm256_set1_ps(_cvtsh_ss(w[b + 1].d) * _cvtsh_ss(x[b + 1].d)), 1);
    acc = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc);
  }
  float s = _mm512_reduce_add_ps(acc);
  if (b < nb) s += avx2::dot_q8_0(w + b, x + b, qk8_0);
  return s;
}

// One Q4_0 row against up to four Q8_0 vectors: the row's nibbles are unpacked once per two blocks
// and serve every vector.
HOTCOLD_VNNI void dotn_q4_0(const block_q4_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), eights = _mm512_set1_epi8(8);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t nb = n / qk4_0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b + 1].qs));
    __m512i packed = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_set_m128i(p0, p0)), _mm256_set_m128i(p1, p1), 1);
    __m512i nib = _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, packed, _mm512_srli_epi16(packed, 4)), low4);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    for (int j = 0; j < nx; ++j) {
      const block_q8_0* xj = x[j];
      __m512i xq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xj[b].qs))),
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xj[b + 1].qs)), 1);
      __m512i dot = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), nib, xq), _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, xq));
      __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(d0 * _cvtsh_ss(xj[b].d)), _mm256_set1_ps(d1 * _cvtsh_ss(xj[b + 1].d)), 1);
      acc[j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[j]);
    }
  }
  for (int j = 0; j < nx; ++j) {
    float s = _mm512_reduce_add_ps(acc[j]);
    if (b < nb) s += avx2::dot_q4_0(w + b, x[j] + b, qk4_0);
    out[j] = s;
  }
}

// Four Q4_0 rows against one Q8_0 vector (a matrix-vector product): the vector's side of each pair
// of blocks — its bytes, 8 x their sum (Q4_0's offset) and its scales — is done once for the four
// rows, and the four sums are independent chains.
HOTCOLD_VNNI void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out) {
  const __m512i low4 = _mm512_set1_epi8(0x0F), eights = _mm512_set1_epi8(8);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t nb = n / qk4_0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m512i xq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs))),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].qs)), 1);
    const __m512i offset = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, xq);
    const __m512 xd = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(x[b].d)), _mm256_set1_ps(_cvtsh_ss(x[b + 1].d)), 1);
    for (int r = 0; r < 4; ++r) {
      const block_q4_0* wr = w[r];
      __m128i p0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[b].qs));
      __m128i p1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr[b + 1].qs));
      __m512i packed = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_set_m128i(p0, p0)), _mm256_set_m128i(p1, p1), 1);
      __m512i nib = _mm512_and_si512(_mm512_mask_blend_epi64(0xCC, packed, _mm512_srli_epi16(packed, 4)), low4);
      __m512i dot = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), nib, xq), offset);
      __m512 wd = _mm512_insertf32x8(_mm512_set1_ps(_cvtsh_ss(wr[b].d)), _mm256_set1_ps(_cvtsh_ss(wr[b + 1].d)), 1);
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xd), _mm512_cvtepi32_ps(dot), acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    float s = _mm512_reduce_add_ps(acc[r]);
    if (b < nb) s += avx2::dot_q4_0(w[r] + b, x + b, qk4_0);
    out[r] = s;
  }
}

// Four Q4_0 rows against a rearranged vector: the 72 bytes of four blocks (a full register and 8
// bytes) permuted so that block j's 16 quant bytes sit at 16 j, the four scales spread to their
// lanes by a 16-bit permute (they sit at bytes 0, 18, 36, 54), then two dpbusd (low and high
// nibbles, starting from minus the lanes' offsets) and one multiply-add per row per 128 values.
// The permutes' indices, made once: byte b of the quant register is byte 18 (b / 16) + 2 + b % 16 of
// the four blocks; 16-bit lane k of the scales is the scale of block k / 4 (16-bit lane 9 (k / 4)).
struct x4_indices {
  alignas(64) uint8_t nibbles[64];
  alignas(64) uint16_t scales[32];
  constexpr x4_indices() : nibbles(), scales() {
    for (int b = 0; b < 64; ++b) nibbles[b] = static_cast<uint8_t>(18 * (b / 16) + 2 + b % 16);
    for (int k = 0; k < 32; ++k) scales[k] = static_cast<uint16_t>(9 * ((k % 16) / 4));
  }
};
constexpr x4_indices x4_index;

// With next: rows next[0..3]'s lines asked for at the offsets read, each line once (prefetch_until).
HOTCOLD_VBMI void dot4r_q4_0_x4(const block_q4_0* const* w, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next = nullptr) {
  const __m512i nib = _mm512_load_si512(x4_index.nibbles), scx = _mm512_load_si512(x4_index.scales), m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t groups = n / 128;
  uintptr_t line[4] = {0, 0, 0, 0};
  if (next)
    for (int r = 0; r < 4; ++r) line[r] = stream_line(next[r], 0);
  for (int64_t g = 0; g < groups; ++g) {
    if (next)
      for (int r = 0; r < 4; ++r) prefetch_until(line[r], reinterpret_cast<uintptr_t>(next[r] + 4 * g + 4));
    const q8_0_x4& x = x4[g];
    const __m512i xlo = _mm512_load_si512(x.lo), xhi = _mm512_load_si512(x.hi);
    const __m512i offset = _mm512_load_si512(x.offset);
    const __m512 xd = _mm512_load_ps(x.d);
    for (int r = 0; r < 4; ++r) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(w[r] + 4 * g);
      const __m512i r0 = _mm512_loadu_si512(p), r1 = _mm512_maskz_loadu_epi8(0xFF, p + 64);
      const __m512i q = _mm512_permutex2var_epi8(r0, nib, r1);
      __m512i s = _mm512_dpbusd_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), offset), _mm512_and_si512(q, m4), xlo);
      s = _mm512_dpbusd_epi32(s, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4), xhi);
      const __m512 wd = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scx, r0)));
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd, xd), _mm512_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// One Q8_0 row against up to four Q8_0 vectors: |w| and w's sign mask computed once per two blocks.
HOTCOLD_VNNI void dotn_q8_0(const block_q8_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t nb = n / qk8_0;
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    __m512i wq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs))),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs)), 1);
    const __m512i aw = _mm512_abs_epi8(wq);
    const __mmask64 negative = _mm512_movepi8_mask(wq);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    for (int j = 0; j < nx; ++j) {
      const block_q8_0* xj = x[j];
      __m512i xq = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xj[b].qs))),
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xj[b + 1].qs)), 1);
      __m512i sx = _mm512_mask_sub_epi8(xq, negative, _mm512_setzero_si512(), xq);
      __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), aw, sx);
      __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(d0 * _cvtsh_ss(xj[b].d)), _mm256_set1_ps(d1 * _cvtsh_ss(xj[b + 1].d)), 1);
      acc[j] = _mm512_fmadd_ps(scale, _mm512_cvtepi32_ps(dot), acc[j]);
    }
  }
  for (int j = 0; j < nx; ++j) {
    float s = _mm512_reduce_add_ps(acc[j]);
    if (b < nb) s += avx2::dot_q8_0(w + b, x[j] + b, qk8_0);
    out[j] = s;
  }
}

}  // namespace avx512vnni


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
  switch (nx) {
    case 1: return dotn<1>(row, x, n, out);
    case 2: return dotn<2>(row, x, n, out);
    case 3: return dotn<3>(row, x, n, out);
    default: return dotn<4>(row, x, n, out);
  }
}
HOTCOLD_AVX512 void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out) { dotn_any(f32_row16{w}, x, nx, n, out); }
HOTCOLD_AVX512 void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { dotn_any(f16_row16{w}, x, nx, n, out); }
HOTCOLD_AVX512 void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) { dotn_any(bf16_row16{w}, x, nx, n, out); }

template <typename Row>
HOTCOLD_AVX512 static inline void dot2n_any(Row r0, Row r1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  switch (nx) {
    case 1: return dot2n<1>(r0, r1, x, n, out0, out1);
    case 2: return dot2n<2>(r0, r1, x, n, out0, out1);
    case 3: return dot2n<3>(r0, r1, x, n, out0, out1);
    default: return dot2n<4>(r0, r1, x, n, out0, out1);
  }
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
  switch (nx) {
    case 1: return dot4n<1>(w, x, n, out);
    case 2: return dot4n<2>(w, x, n, out);
    case 3: return dot4n<3>(w, x, n, out);
    default: return dot4n<4>(w, x, n, out);
  }
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

// Q4_0 down rows: each nibble, widened to a 32-bit lane, indexes a table of the values -8..7 as
// floats (vpermps reads only an index's low four bits, so neither the high nibble left in a lane nor
// the bits a 16-bit shift brings in needs masking): two widenings, two lookups and two multiply-adds
// per row and block, y loaded and stored once per four rows.
HOTCOLD_AVX512 static inline void q4_0_axpy_block(float a, const block_q4_0& x, __m512 table, __m512& y0, __m512& y1) {
  const __m512 s = _mm512_set1_ps(a * _cvtsh_ss(x.d));
  const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.qs));
  y0 = _mm512_fmadd_ps(s, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(p), table), y0);                      // values 0..15
  y1 = _mm512_fmadd_ps(s, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_srli_epi16(p, 4)), table), y1);  // 16..31
}
HOTCOLD_AVX512 static inline __m512 q4_0_table() { return _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7); }

HOTCOLD_AVX512 void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n) {
  const __m512 table = q4_0_table();
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    __m512 y0 = _mm512_loadu_ps(y), y1 = _mm512_loadu_ps(y + 16);
    for (int r = 0; r < 4; ++r) q4_0_axpy_block(a[r], x[r][b], table, y0, y1);
    _mm512_storeu_ps(y, y0);
    _mm512_storeu_ps(y + 16, y1);
  }
}
// With rows next[0..3]'s lines asked for at the offsets read, each line once.
HOTCOLD_AVX512 void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next) {
  const __m512 table = q4_0_table();
  uintptr_t line[4];
  for (int r = 0; r < 4; ++r) line[r] = stream_line(next[r], 0);
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    for (int r = 0; r < 4; ++r) prefetch_until(line[r], reinterpret_cast<uintptr_t>(next[r] + b + 1));
    __m512 y0 = _mm512_loadu_ps(y), y1 = _mm512_loadu_ps(y + 16);
    for (int r = 0; r < 4; ++r) q4_0_axpy_block(a[r], x[r][b], table, y0, y1);
    _mm512_storeu_ps(y, y0);
    _mm512_storeu_ps(y + 16, y1);
  }
}
HOTCOLD_AVX512 void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n) {
  const __m512 table = q4_0_table();
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    __m512 y0 = _mm512_loadu_ps(y), y1 = _mm512_loadu_ps(y + 16);
    q4_0_axpy_block(a, x[b], table, y0, y1);
    _mm512_storeu_ps(y, y0);
    _mm512_storeu_ps(y + 16, y1);
  }
}
// Q8_0 down rows: bytes widened to 32-bit lanes and converted, sixteen at a time.
HOTCOLD_AVX512 void axpy4_q8_0(const float* a, const block_q8_0* const* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b, y += qk8_0) {
    __m512 y0 = _mm512_loadu_ps(y), y1 = _mm512_loadu_ps(y + 16);
    for (int r = 0; r < 4; ++r) {
      const __m512 s = _mm512_set1_ps(a[r] * _cvtsh_ss(x[r][b].d));
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][b].qs));
      y0 = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), y0);
      y1 = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), y1);
    }
    _mm512_storeu_ps(y, y0);
    _mm512_storeu_ps(y + 16, y1);
  }
}

}  // namespace avx512

HOTCOLD_AVX512_END

const cpu_features& cpu() {
  static const cpu_features d = [] {
    cpu_features f;
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool allowed = f.avx2 && !std::getenv("HOTCOLD_NO_AVX512");
    f.avx512 = allowed && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    f.vnni = f.avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    f.vbmi = f.vnni && __builtin_cpu_supports("avx512vbmi");
    const bool intel = __builtin_cpu_is("intel");
    f.stream_ahead = intel ? 2048 : 0;
    f.prefetch_nta = !intel;
    if (const char* e = std::getenv("HOTCOLD_STREAM_AHEAD")) f.stream_ahead = std::max(0, std::atoi(e)) / 64 * 64;
    if (const char* e = std::getenv("HOTCOLD_PREFETCH_NTA")) f.prefetch_nta = std::atoi(e) != 0;
    return f;
  }();
  return d;
}

const char* dot_implementation() { return cpu().vnni ? "avx512vnni" : cpu().avx2 ? "avx2" : "scalar"; }

void axpy_f32(float a, const float* x, float* y, int64_t n) { cpu().avx2 ? avx2::axpy_f32(a, x, y, n) : scalar::axpy_f32(a, x, y, n); }
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) { cpu().avx2 ? avx2::axpy_f16(a, x, y, n) : scalar::axpy_f16(a, x, y, n); }
void axpy_bf16(float a, const uint16_t* x, float* y, int64_t n) { cpu().avx2 ? avx2::axpy_bf16(a, x, y, n) : scalar::axpy_bf16(a, x, y, n); }

float dot_f32(const float* w, const float* x, int64_t n) { return cpu().avx2 ? avx2::dot_f32(w, x, n) : scalar::dot_f32(w, x, n); }
float dot_f16(const uint16_t* w, const float* x, int64_t n) { return cpu().avx2 ? avx2::dot_f16(w, x, n) : scalar::dot_f16(w, x, n); }
float dot_bf16(const uint16_t* w, const float* x, int64_t n) { return cpu().avx2 ? avx2::dot_bf16(w, x, n) : scalar::dot_bf16(w, x, n); }
float dot_q8_0(const block_q8_0* w, const block_q8_0* x, int64_t n) {
  return cpu().vnni ? avx512vnni::dot_q8_0(w, x, n) : cpu().avx2 ? avx2::dot_q8_0(w, x, n) : scalar::dot_q8_0(w, x, n);
}
float dot_q4_0(const block_q4_0* w, const block_q8_0* x, int64_t n) {
  return cpu().vnni ? avx512vnni::dot_q4_0(w, x, n) : cpu().avx2 ? avx2::dot_q4_0(w, x, n) : scalar::dot_q4_0(w, x, n);
}
void dotn_f32(const float* w, const float* const* x, int nx, int64_t n, float* out) {
  if (cpu().avx512) return avx512::dotn_f32(w, x, nx, n, out);
  if (cpu().avx2) return avx2::dotn_f32(w, x, nx, n, out);
  for (int j = 0; j < nx; ++j) out[j] = scalar::dot_f32(w, x[j], n);
}
void dotn_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) {
  if (cpu().avx512) return avx512::dotn_f16(w, x, nx, n, out);
  if (cpu().avx2) return avx2::dotn_f16(w, x, nx, n, out);
  for (int j = 0; j < nx; ++j) out[j] = scalar::dot_f16(w, x[j], n);
}
void dotn_bf16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) {
  if (cpu().avx512) return avx512::dotn_bf16(w, x, nx, n, out);
  if (cpu().avx2) return avx2::dotn_bf16(w, x, nx, n, out);
  for (int j = 0; j < nx; ++j) out[j] = scalar::dot_bf16(w, x[j], n);
}
void dot2n_f32(const float* w0, const float* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  if (cpu().avx512) return avx512::dot2n_f32(w0, w1, x, nx, n, out0, out1);
  if (cpu().avx2) return avx2::dot2n_f32(w0, w1, x, nx, n, out0, out1);
  for (int j = 0; j < nx; ++j) out0[j] = scalar::dot_f32(w0, x[j], n), out1[j] = scalar::dot_f32(w1, x[j], n);
}
void dot2n_f16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  if (cpu().avx512) return avx512::dot2n_f16(w0, w1, x, nx, n, out0, out1);
  if (cpu().avx2) return avx2::dot2n_f16(w0, w1, x, nx, n, out0, out1);
  for (int j = 0; j < nx; ++j) out0[j] = scalar::dot_f16(w0, x[j], n), out1[j] = scalar::dot_f16(w1, x[j], n);
}
void dot2_f16_ahead(const uint16_t* w0, const uint16_t* w1, const float* x, int64_t n, float* out0, float* out1, const uint16_t* next0, const uint16_t* next1) {
  if (cpu().avx512) return avx512::dot2_f16_ahead(w0, w1, x, n, out0, out1, next0, next1);
  if (cpu().avx2) return avx2::dot2_f16_ahead(w0, w1, x, n, out0, out1, next0, next1);
  *out0 = scalar::dot_f16(w0, x, n), *out1 = scalar::dot_f16(w1, x, n);
}
void dot4_f16_ahead(const uint16_t* const* w, const float* x, int64_t n, float* out, const uint16_t* const* next) {
  if (cpu().avx512) return avx512::dot4_f16_ahead(w, x, n, out, next);
  // Elsewhere as two pairs, which makes the same sums.
  dot2_f16_ahead(w[0], w[1], x, n, out, out + 1, next[0], next[1]);
  dot2_f16_ahead(w[2], w[3], x, n, out + 2, out + 3, next[2], next[3]);
}
void dot2n_bf16(const uint16_t* w0, const uint16_t* w1, const float* const* x, int nx, int64_t n, float* out0, float* out1) {
  if (cpu().avx512) return avx512::dot2n_bf16(w0, w1, x, nx, n, out0, out1);
  if (cpu().avx2) return avx2::dot2n_bf16(w0, w1, x, nx, n, out0, out1);
  for (int j = 0; j < nx; ++j) out0[j] = scalar::dot_bf16(w0, x[j], n), out1[j] = scalar::dot_bf16(w1, x[j], n);
}
void dotn_q4_0(const block_q4_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) {
  if (cpu().vnni) return avx512vnni::dotn_q4_0(w, x, nx, n, out);
  for (int j = 0; j < nx; ++j) out[j] = dot_q4_0(w, x[j], n);
}
void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out) {
  if (cpu().vnni) return avx512vnni::dot4r_q4_0(w, x, n, out);
  for (int r = 0; r < 4; ++r) out[r] = dot_q4_0(w[r], x, n);
}
void dot4r_q4_0_x4(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out) {
  if (cpu().vbmi && n % 128 == 0) return avx512vnni::dot4r_q4_0_x4(w, x4, n, out);
  dot4r_q4_0(w, xq, n, out);
}
// The fallbacks of the "ahead" Q4_0 kernels: rows next[0..3] of n values asked for whole, each line once.
static void ask_for_whole_q4_0_rows(const block_q4_0* const* next, int64_t n) {
  for (int r = 0; r < 4; ++r) {
    uintptr_t line = stream_line(next[r], 0);
    prefetch_until(line, reinterpret_cast<uintptr_t>(next[r] + n / qk4_0));
  }
}
void dot4r_q4_0_x4_ahead(const block_q4_0* const* w, const block_q8_0* xq, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next) {
  if (cpu().vbmi && n % 128 == 0) return avx512vnni::dot4r_q4_0_x4(w, x4, n, out, next);
  ask_for_whole_q4_0_rows(next, n);  // elsewhere the next rows asked for whole first
  dot4r_q4_0(w, xq, n, out);
}
void dotn_q8_0(const block_q8_0* w, const block_q8_0* const* x, int nx, int64_t n, float* out) {
  if (cpu().vnni) return avx512vnni::dotn_q8_0(w, x, nx, n, out);
  for (int j = 0; j < nx; ++j) out[j] = dot_q8_0(w, x[j], n);
}
void dot4n_f32(const float* const* w, const float* const* x, int nx, int64_t n, float* out) {
  if (cpu().avx512) return avx512::dot4n_f32(w, x, nx, n, out);
  dot2n_f32(w[0], w[1], x, nx, n, out, out + 4);
  dot2n_f32(w[2], w[3], x, nx, n, out + 8, out + 12);
}
void dot4n_f16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) {
  if (cpu().avx512) return avx512::dot4n_f16(w, x, nx, n, out);
  dot2n_f16(w[0], w[1], x, nx, n, out, out + 4);
  dot2n_f16(w[2], w[3], x, nx, n, out + 8, out + 12);
}
void dot4n_bf16(const uint16_t* const* w, const float* const* x, int nx, int64_t n, float* out) {
  if (cpu().avx512) return avx512::dot4n_bf16(w, x, nx, n, out);
  dot2n_bf16(w[0], w[1], x, nx, n, out, out + 4);
  dot2n_bf16(w[2], w[3], x, nx, n, out + 8, out + 12);
}
void axpy4_f32(const float* a, const float* const* x, float* y, int64_t n) {
  if (cpu().avx2) return avx2::axpy4_f32(a, x, y, n);
  for (int r = 0; r < 4; ++r) scalar::axpy_f32(a[r], x[r], y, n);
}
void axpy4_f16(const float* a, const uint16_t* const* x, float* y, int64_t n) {
  if (cpu().avx2) return avx2::axpy4_f16(a, x, y, n);
  for (int r = 0; r < 4; ++r) scalar::axpy_f16(a[r], x[r], y, n);
}
void axpy4_f16_ahead(const float* a, const uint16_t* const* x, float* y, int64_t n, const uint16_t* const* next) {
  if (cpu().avx512) return avx512::axpy4_f16_ahead(a, x, y, n, next);
  if (cpu().avx2) return avx2::axpy4_f16_ahead(a, x, y, n, next);
  for (int r = 0; r < 4; ++r) scalar::axpy_f16(a[r], x[r], y, n);
}
void axpy4_bf16(const float* a, const uint16_t* const* x, float* y, int64_t n) {
  if (cpu().avx2) return avx2::axpy4_bf16(a, x, y, n);
  for (int r = 0; r < 4; ++r) scalar::axpy_bf16(a[r], x[r], y, n);
}
void axpy4_q8_0(const float* a, const block_q8_0* const* x, float* y, int64_t n) {
  if (cpu().avx512) return avx512::axpy4_q8_0(a, x, y, n);
  if (cpu().avx2) return avx2::axpy4_q8_0(a, x, y, n);
  for (int r = 0; r < 4; ++r) scalar::axpy_q8_0(a[r], x[r], y, n);
}
void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next) {
  if (cpu().avx512) return avx512::axpy4_q4_0_ahead(a, x, y, n, next);
  ask_for_whole_q4_0_rows(next, n);  // elsewhere the next rows asked for whole first
  axpy4_q4_0(a, x, y, n);
}
void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n) {
  if (cpu().avx512) return avx512::axpy4_q4_0(a, x, y, n);
  if (cpu().avx2) return avx2::axpy4_q4_0(a, x, y, n);
  for (int r = 0; r < 4; ++r) scalar::axpy_q4_0(a[r], x[r], y, n);
}
float dot_q6_k(const block_q6_k* w, const float* x, int64_t n) { return cpu().avx2 ? avx2::dot_q6_k(w, x, n) : scalar::dot_q6_k(w, x, n); }
void axpy_q8_0(float a, const block_q8_0* x, float* y, int64_t n) { cpu().avx2 ? avx2::axpy_q8_0(a, x, y, n) : scalar::axpy_q8_0(a, x, y, n); }
void axpy_q4_0(float a, const block_q4_0* x, float* y, int64_t n) {
  cpu().avx512 ? avx512::axpy_q4_0(a, x, y, n) : cpu().avx2 ? avx2::axpy_q4_0(a, x, y, n) : scalar::axpy_q4_0(a, x, y, n);
}

}  // namespace hotcold::kernels
