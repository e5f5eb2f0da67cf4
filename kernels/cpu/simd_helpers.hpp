#pragma once
// Helpers the vector kernels share: one half to float and a vector's sum (AVX2), across-lane sums
// (AVX-512), asking for a stream's lines ahead, and four bytes as one 32-bit word (to broadcast).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/dispatch.hpp"

namespace hotcold::kernels {

// Four bytes at p as one 32-bit word (what a broadcast of four vector bytes loads).
inline int32_t four_bytes(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

namespace avx2 {

// One half to float with the F16C instruction (the scalar conversion is a dozen branches).
HOTCOLD_AVX2 inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

HOTCOLD_AVX2 inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

// Lane i of the result is the sum of v[i]'s sixteen lanes: a transposing tree of adds, 45
// instructions for sixteen sums.
HOTCOLD_AVX512 inline __m512 reduce16(const __m512 (&v)[16]) {
  // Pairs: per 128-bit lane [a0+a2, b0+b2, a1+a3, b1+b3].
  __m512 p[8];
  for (int k = 0; k < 8; ++k) p[k] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * k], v[2 * k + 1]), _mm512_unpackhi_ps(v[2 * k], v[2 * k + 1]));
  // Quads: per 128-bit lane the lane's sums of four vectors [a, b, c, d].
  __m512 q[4];
  for (int k = 0; k < 4; ++k)
    q[k] = _mm512_add_ps(_mm512_shuffle_ps(p[2 * k], p[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_ps(p[2 * k], p[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Across the four 128-bit lanes: lane k of the result gathers q[k]'s lanes.
  const __m512 y01 = _mm512_add_ps(_mm512_shuffle_f32x4(q[0], q[1], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(q[0], q[1], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 y23 = _mm512_add_ps(_mm512_shuffle_f32x4(q[2], q[3], _MM_SHUFFLE(1, 0, 1, 0)), _mm512_shuffle_f32x4(q[2], q[3], _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_f32x4(y01, y23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// e^x for x <= 0 (scores minus their maximum): 2^n e^r with n = round(x log2 e) and |r| <= ln 2 / 2,
// e^r by its Taylor polynomial to degree 6 (relative error ~1e-7), 2^n applied by vscalefps.
HOTCOLD_AVX512 inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);  // ln 2 in two parts: n ln2_hi is exact
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

HOTCOLD_AVX512_END

// A stream's lines asked for into L1 once each, however its blocks fall across lines: `next` starts
// at stream_line(p, ahead) (the line `ahead` bytes past p), and prefetch_until(next, end) asks for
// every line before `end` not yet asked for (prefetches past the weights' end do not fault).
inline uintptr_t stream_line(const void* p, int64_t ahead) { return (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(ahead)) & ~uintptr_t{63}; }
inline void prefetch_until(uintptr_t& next, uintptr_t end) {
  for (; next < end; next += 64) _mm_prefetch(reinterpret_cast<const char*>(next), _MM_HINT_T0);
}

}  // namespace hotcold::kernels
