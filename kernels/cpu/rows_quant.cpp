// Rows of quantized types — Q8_0, Q4_0, Q6_K — against activation vectors (Q8_0 and Q4_0 rows against
// vectors quantized to Q8_0, as llama.cpp's CPU kernels compute them; Q6_K rows against floats):
// dot products of one row, of one row with up to four vectors, of four rows at once, and AXPYs, the
// scalar references first, then the AVX2 versions and the AVX-512 ones (VNNI and VBMI for the integer
// products). Which of them runs: rows.cpp's choice into the kernel table.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot_isa.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace scalar {

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

namespace avx2 {

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

HOTCOLD_AVX512_BEGIN

// ---- AVX-512 VNNI (Zen 4/5, Ice Lake and later) ---------------------------------------------

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

// Four consecutive blocks of a Q4_0 row (at w) as the rearranged vector meets them: their low and high
// nibbles in its byte order, and each 32-bit lane's block scale.
struct q4_0_x4_row {
  __m512i lo, hi;
  __m512 d;
};
HOTCOLD_VBMI inline q4_0_x4_row gather_x4(const block_q4_0* w, __m512i nib, __m512i scx, __m512i m4) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(w);
  const __m512i r0 = _mm512_loadu_si512(p), r1 = _mm512_maskz_loadu_epi8(0xFF, p + 64);
  const __m512i q = _mm512_permutex2var_epi8(r0, nib, r1);
  return {_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_srli_epi16(q, 4), m4), _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scx, r0)))};
}
// acc + those 128 values . a group of the rearranged vector (its bytes, offsets and scales given).
HOTCOLD_VBMI inline __m512 x4_fmadd(const q4_0_x4_row& w, __m512i xlo, __m512i xhi, __m512i offset, __m512 xd, __m512 acc) {
  __m512i s = _mm512_dpbusd_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), offset), w.lo, xlo);
  s = _mm512_dpbusd_epi32(s, w.hi, xhi);
  return _mm512_fmadd_ps(_mm512_mul_ps(w.d, xd), _mm512_cvtepi32_ps(s), acc);
}

// With next: rows next[0..3]'s lines asked for at the offsets read, each line once (prefetch_until).
HOTCOLD_VBMI void dot4r_q4_0_x4(const block_q4_0* const* w, const q8_0_x4* x4, int64_t n, float* out, const block_q4_0* const* next) {
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
    for (int r = 0; r < 4; ++r) acc[r] = x4_fmadd(gather_x4(w[r] + 4 * g, nib, scx, m4), xlo, xhi, offset, xd, acc[r]);
  }
  for (int r = 0; r < 4; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

// One Q4_0 row against up to four vectors rearranged (q8_0_to_x4; n a multiple of 128): the row's four
// blocks gathered, split into nibbles and their scales converted once per 128 values for every
// vector; each vector's sums exactly as dot4r_q4_0_x4 makes one row's (a shared neuron's products in a
// batch equal one token's).
HOTCOLD_VBMI void dotn_q4_0_x4(const block_q4_0* w, const q8_0_x4* const* x4, int nx, int64_t n, float* out) {
  const __m512i nib = _mm512_load_si512(x4_index.nibbles), scx = _mm512_load_si512(x4_index.scales), m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  const int64_t groups = n / 128;
  for (int64_t g = 0; g < groups; ++g) {
    const q4_0_x4_row row = gather_x4(w + 4 * g, nib, scx, m4);
    for (int j = 0; j < nx; ++j) {
      const q8_0_x4& x = x4[j][g];
      acc[j] = x4_fmadd(row, _mm512_load_si512(x.lo), _mm512_load_si512(x.hi), _mm512_load_si512(x.offset), _mm512_load_ps(x.d), acc[j]);
    }
  }
  for (int j = 0; j < nx; ++j) out[j] = _mm512_reduce_add_ps(acc[j]);
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

}  // namespace hotcold::kernels
