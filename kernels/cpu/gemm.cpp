// The 12 x 32 register tile of the prompt batches' float matrix products (see gemm.hpp).
#include "kernels/cpu/gemm.hpp"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/dispatch.hpp"

namespace hotcold::kernels {

bool gemm_tile_vectorized() { return cpu().avx512; }

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

namespace scalar {

void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first) {
  for (int i = 0; i < gemm_rows; ++i)
    for (int t = 0; t < gemm_tokens; ++t) {
      float s = first ? 0.0f : c[i * cs + t];
      for (int64_t k = 0; k < kc; ++k) s += w[i * ws + k] * xp[gemm_tokens * k + t];
      c[i * cs + t] = s;
    }
}

}  // namespace scalar

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

}  // namespace avx512
HOTCOLD_AVX512_END

void gemm_tile(const float* w, int64_t ws, const float* xp, int64_t kc, float* c, int64_t cs, bool first) {
  if (gemm_tile_vectorized()) return avx512::gemm_tile(w, ws, xp, kc, c, cs, first);
  scalar::gemm_tile(w, ws, xp, kc, c, cs, first);
}

}  // namespace hotcold::kernels
