// The dot-product kernels for AVX2 with FMA and F16C (Haswell, Zen 1 and later).
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot_isa.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {



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

// Four Q4_0 rows against one vector, block by block: the vector's block loaded once for the four, its
// sum (times 8) once; each row's nibbles taken as they are (0..15, unsigned, as maddubs wants them) and
// the 8 every nibble carries taken off as 8 x the block's sum — no sign juggling a row (the single-row
// kernel moves the row's signs onto the vector's bytes: two more operations a row and block).
// With `next`: four rows read next (a sparse FFN's scattered rows) asked for as these are read, each
// line once, at the offsets being read (asked for whole first, they came in bursts).
HOTCOLD_AVX2 void dot4r_q4_0_ahead(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out, const block_q4_0* const* next) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  uintptr_t line[4] = {};
  if (next)
    for (int r = 0; r < 4; ++r) line[r] = stream_line(next[r], 0);
  for (int64_t b = 0; b < n / qk4_0; ++b) {
    const __m256i xb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
    const __m256i sum8 = _mm256_slli_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xb), ones16), 3);
    const float dx = h2f(x[b].d);
    if (next)
      for (int r = 0; r < 4; ++r) prefetch_until(line[r], reinterpret_cast<uintptr_t>(next[r] + b + 1));
    for (int r = 0; r < 4; ++r) {
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[r][b].qs));
      const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(packed, 4), packed), low4);
      const __m256i s = _mm256_sub_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(q, xb), ones16), sum8);
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(w[r][b].d) * dx), _mm256_cvtepi32_ps(s), acc[r]);
    }
  }
  for (int r = 0; r < 4; ++r) out[r] = hsum(acc[r]);
}
HOTCOLD_AVX2 void dot4r_q4_0(const block_q4_0* const* w, const block_q8_0* x, int64_t n, float* out) { dot4r_q4_0_ahead(w, x, n, out, nullptr); }

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

// With `next`: the four rows added next asked for as these are read, each line once (dot4r_q4_0_ahead).
HOTCOLD_AVX2 void axpy4_q4_0_ahead(const float* a, const block_q4_0* const* x, float* y, int64_t n, const block_q4_0* const* next) {
  const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  alignas(16) int8_t q[4][32];
  uintptr_t line[4] = {};
  if (next)
    for (int r = 0; r < 4; ++r) line[r] = stream_line(next[r], 0);
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    if (next)
      for (int r = 0; r < 4; ++r) prefetch_until(line[r], reinterpret_cast<uintptr_t>(next[r] + b + 1));
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
HOTCOLD_AVX2 void axpy4_q4_0(const float* a, const block_q4_0* const* x, float* y, int64_t n) { avx2::axpy4_q4_0_ahead(a, x, y, n, nullptr); }

}  // namespace avx2

}  // namespace hotcold::kernels
