// The 12 x 32 register tile of the prompt batches' float matrix products (see gemm.hpp).
#include "kernels/cpu/gemm.hpp"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {

bool gemm_tile_vectorized() { return cpu_kernels().gemm_vectorized; }

namespace scalar {

void gemm_pack_tokens(const float* x, int64_t n, int64_t d, int64_t t0, int64_t k0, int64_t kc, float* xp) {
  for (int j = 0; j < gemm_tokens; ++j) {
    if (t0 + j >= n) {
      for (int64_t k = 0; k < kc; ++k) xp[gemm_tokens * k + j] = 0.0f;
      continue;
    }
    const float* s = x + (t0 + j) * d + k0;
    for (int64_t k = 0; k < kc; ++k) xp[gemm_tokens * k + j] = s[k];
  }
}

void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first) {
  for (int i = 0; i < gemm_rows; ++i)
    for (int t = 0; t < gemm_tokens; ++t) {
      float s = first ? 0.0f : c[i * cs + t];
      for (int64_t k = 0; k < kc; ++k) s += w[i * ws + k] * xp[gemm_tokens * k + t];
      c[i * cs + t] = s;
    }
}

void gemm_pack_f16_columns(const uint16_t* w, int64_t ws, int64_t kc, float* xp) {
  for (int64_t k = 0; k < kc; ++k) fp16_to_fp32_row(w + k * ws, xp + k * gemm_tokens, gemm_tokens);
}

}  // namespace scalar

namespace avx2 {

// Sixteen 256-bit registers hold a quarter of the tile at a time: six rows by sixteen tokens (twelve
// sums, two vectors of tokens, one broadcast weight), in four passes over the panel (rows 0-5 and 6-11,
// tokens 0-15 and 16-31), which stays in L1 between them.
HOTCOLD_AVX2 static void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first) {
  constexpr int rows = gemm_rows / 2;
  for (int ih = 0; ih < 2; ++ih)
    for (int th = 0; th < 2; ++th) {
      const float* wi = w + ih * rows * ws;
      const float* xt = xp + 16 * th;
      float* ci = c + ih * rows * cs + 16 * th;
      __m256 a[rows][2];
#pragma GCC unroll 6
      for (int i = 0; i < rows; ++i)
        for (int v = 0; v < 2; ++v) a[i][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(ci + i * cs + 8 * v);
      for (int64_t k = 0; k < kc; ++k) {
        const __m256 x0 = _mm256_loadu_ps(xt + gemm_tokens * k), x1 = _mm256_loadu_ps(xt + gemm_tokens * k + 8);
#pragma GCC unroll 6
        for (int i = 0; i < rows; ++i) {
          const __m256 b = _mm256_broadcast_ss(wi + i * ws + k);
          a[i][0] = _mm256_fmadd_ps(b, x0, a[i][0]);
          a[i][1] = _mm256_fmadd_ps(b, x1, a[i][1]);
        }
      }
#pragma GCC unroll 6
      for (int i = 0; i < rows; ++i)
        for (int v = 0; v < 2; ++v) _mm256_storeu_ps(ci + i * cs + 8 * v, a[i][v]);
    }
}

HOTCOLD_AVX2 static void gemm_pack_f16_columns(const uint16_t* w, int64_t ws, int64_t kc, float* xp) {
  for (int64_t k = 0; k < kc; ++k, w += ws, xp += gemm_tokens)
    for (int v = 0; v < 4; ++v) _mm256_storeu_ps(xp + 8 * v, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8 * v))));
}

// d (q - 8) for each nibble, sixteen bytes a block: low nibbles values 0..15, high ones 16..31.
HOTCOLD_AVX2 static void gemm_unpack_q4_0(const block_q4_0* x, float* y, int64_t n) {
  const __m128i low = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(x[b].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low), eight), hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low), eight);
    _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(lo, lo)))));
    _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(hi, hi)))));
  }
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN
namespace avx512 {

HOTCOLD_AVX512 static void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first) {
  __m512 a[gemm_rows][2];
#pragma GCC unroll 12
  for (int i = 0; i < gemm_rows; ++i)
    for (int v = 0; v < 2; ++v) a[i][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * cs + 16 * v);
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 x0 = _mm512_loadu_ps(xp + gemm_tokens * k), x1 = _mm512_loadu_ps(xp + gemm_tokens * k + 16);
#pragma GCC unroll 12
    for (int i = 0; i < gemm_rows; ++i) {
      const __m512 b = _mm512_set1_ps(w[i * ws + k]);
      a[i][0] = _mm512_fmadd_ps(b, x0, a[i][0]);
      a[i][1] = _mm512_fmadd_ps(b, x1, a[i][1]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < gemm_rows; ++i)
    for (int v = 0; v < 2; ++v) _mm512_storeu_ps(c + i * cs + 16 * v, a[i][v]);
}

// Sixteen tokens by sixteen elements through a register transpose (four rounds of shuffles), the
// element tail one value at a time.
HOTCOLD_AVX512 static void gemm_pack_tokens(const float* x, int64_t n, int64_t d, int64_t t0, int64_t k0, int64_t kc, float* xp) {
  const int64_t kv = kc / 16 * 16;
  for (int h = 0; h < 2; ++h) {
    const int64_t tb = t0 + 16 * h;
    for (int64_t k = 0; k < kv; k += 16) {
      __m512 r[16], a[16], b[16];
      for (int j = 0; j < 16; ++j) r[j] = tb + j < n ? _mm512_loadu_ps(x + (tb + j) * d + k0 + k) : _mm512_setzero_ps();
      for (int i = 0; i < 8; ++i) {  // pairs of tokens interleaved within each 128-bit lane
        a[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
      }
      for (int g = 0; g < 4; ++g) {  // b[4 g + m], lane L: element 4 L + m of tokens 4 g .. 4 g + 3
        b[4 * g + 0] = _mm512_shuffle_ps(a[4 * g], a[4 * g + 2], 0x44);
        b[4 * g + 1] = _mm512_shuffle_ps(a[4 * g], a[4 * g + 2], 0xEE);
        b[4 * g + 2] = _mm512_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0x44);
        b[4 * g + 3] = _mm512_shuffle_ps(a[4 * g + 1], a[4 * g + 3], 0xEE);
      }
      for (int m = 0; m < 4; ++m) {  // lanes gathered across the four groups of tokens
        const __m512 c0 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88), c1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xDD);
        const __m512 d0 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88), d1 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xDD);
        _mm512_storeu_ps(xp + gemm_tokens * (k + m) + 16 * h, _mm512_shuffle_f32x4(c0, d0, 0x88));
        _mm512_storeu_ps(xp + gemm_tokens * (k + 4 + m) + 16 * h, _mm512_shuffle_f32x4(c1, d1, 0x88));
        _mm512_storeu_ps(xp + gemm_tokens * (k + 8 + m) + 16 * h, _mm512_shuffle_f32x4(c0, d0, 0xDD));
        _mm512_storeu_ps(xp + gemm_tokens * (k + 12 + m) + 16 * h, _mm512_shuffle_f32x4(c1, d1, 0xDD));
      }
    }
    for (int j = 0; j < 16; ++j)
      for (int64_t k = kv; k < kc; ++k) xp[gemm_tokens * k + 16 * h + j] = tb + j < n ? x[(tb + j) * d + k0 + k] : 0.0f;
  }
}

HOTCOLD_AVX512 static void gemm_pack_f16_columns(const uint16_t* w, int64_t ws, int64_t kc, float* xp) {
  for (int64_t k = 0; k < kc; ++k, w += ws, xp += gemm_tokens) {
    _mm512_storeu_ps(xp, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w))));
    _mm512_storeu_ps(xp + 16, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16))));
  }
}

// d (q - 8) for each nibble: the low nibbles of the 16 bytes are values 0..15, the high ones 16..31.
HOTCOLD_AVX512 static void gemm_unpack_q4_0(const block_q4_0* x, float* y, int64_t n) {
  const __m512i low = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(x[b].d));
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs)));
    _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(q, low), eight))));
    _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight))));
  }
}

}  // namespace avx512
HOTCOLD_AVX512_END

void choose_gemm_kernels(kernel_table& k, const cpu_features& f) {
  k.gemm_unpack_q4_0 = f.avx512 ? avx512::gemm_unpack_q4_0 : f.avx2 ? avx2::gemm_unpack_q4_0 : dequantize_row_q4_0;
  k.gemm_pack_f16_columns = f.avx512 ? avx512::gemm_pack_f16_columns : f.avx2 ? avx2::gemm_pack_f16_columns : scalar::gemm_pack_f16_columns;
  k.gemm_pack_tokens = f.avx512 ? avx512::gemm_pack_tokens : scalar::gemm_pack_tokens;
  k.gemm_tile = f.avx512 ? avx512::gemm_tile : f.avx2 ? avx2::gemm_tile : scalar::gemm_tile;
  k.gemm_vectorized = f.avx512 || f.avx2;
}

void gemm_unpack_q4_0(const block_q4_0* x, float* y, int64_t n) { cpu_kernels().gemm_unpack_q4_0(x, y, n); }
void gemm_pack_f16_columns(const uint16_t* w, int64_t ws, int64_t kc, float* xp) { cpu_kernels().gemm_pack_f16_columns(w, ws, kc, xp); }
void gemm_pack_tokens(const float* x, int64_t n, int64_t d, int64_t t0, int64_t k0, int64_t kc, float* xp) { cpu_kernels().gemm_pack_tokens(x, n, d, t0, k0, kc, xp); }
void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first) { cpu_kernels().gemm_tile(w, ws, xp, kc, c, cs, first); }

}  // namespace hotcold::kernels
