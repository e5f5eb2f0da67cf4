// The dot-product kernels for AVX-512: F and VL (avx512), and with BW, DQ, VNNI (and VBMI for the
// byte-permuting Q4_0 kernel) for the integer products of quantized rows (avx512vnni).
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot_isa.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

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

}  // namespace hotcold::kernels
