// Products of interleaved F16 rows (sixteen rows, element k of row i at 16 k + i) with float
// vectors: per element k, one 32-byte load of the sixteen rows' halves, one conversion and one
// multiply-add per vector with x[k] broadcast; no horizontal sums.
#include <immintrin.h>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {

void interleave_f16x16(const uint16_t* rows, int64_t n, uint16_t* out) {
  for (int64_t k = 0; k < n; ++k)
    for (int i = 0; i < 16; ++i) out[16 * k + i] = rows[i * n + k];
}

void deinterleave_f16x16(const uint16_t* in, int64_t n, uint16_t* rows) {
  for (int64_t k = 0; k < n; ++k)
    for (int i = 0; i < 16; ++i) rows[i * n + k] = in[16 * k + i];
}

namespace scalar {

void dot16r_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) {
  for (int j = 0; j < nx; ++j)
    for (int i = 0; i < 16; ++i) {
      float s = 0.0f;
      for (int64_t k = 0; k < n; ++k) s += fp16_to_fp32(w[16 * k + i]) * x[j][k];
      out[16 * j + i] = s;
    }
}

}  // namespace scalar

namespace avx2 {

// Two halves of eight rows; four elements a step into four independent sums per vector.
template <int NX>
HOTCOLD_AVX2 static void dot16r(const uint16_t* w, const float* const* x, int64_t n, float* out) {
  for (int h = 0; h < 2; ++h) {
    __m256 acc[NX][2];
    for (int j = 0; j < NX; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 2 <= n; k += 2) {
      const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * k + 8 * h)));
      const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * (k + 1) + 8 * h)));
      for (int j = 0; j < NX; ++j) {
        acc[j][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[j][k]), acc[j][0]);
        acc[j][1] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[j][k + 1]), acc[j][1]);
      }
    }
    for (; k < n; ++k) {
      const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16 * k + 8 * h)));
      for (int j = 0; j < NX; ++j) acc[j][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[j][k]), acc[j][0]);
    }
    for (int j = 0; j < NX; ++j) _mm256_storeu_ps(out + 16 * j + 8 * h, _mm256_add_ps(acc[j][0], acc[j][1]));
  }
}

HOTCOLD_AVX2 void dot16r_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, n, out); });
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

namespace avx512 {

// All sixteen rows in one register; two elements a step into two independent sums per vector (four
// for one vector, whose chain would otherwise wait on each multiply-add).
template <int NX>
HOTCOLD_AVX512 static void dot16r(const uint16_t* w, const float* const* x, int64_t n, float* out) {
  constexpr int chains = NX == 1 ? 4 : 2;
  __m512 acc[NX][chains];
  for (int j = 0; j < NX; ++j)
    for (int c = 0; c < chains; ++c) acc[j][c] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + chains <= n; k += chains) {
    for (int c = 0; c < chains; ++c) {
      const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * (k + c))));
      for (int j = 0; j < NX; ++j) acc[j][c] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[j][k + c]), acc[j][c]);
    }
  }
  for (; k < n; ++k) {
    const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 * k)));
    for (int j = 0; j < NX; ++j) acc[j][0] = _mm512_fmadd_ps(wv, _mm512_set1_ps(x[j][k]), acc[j][0]);
  }
  for (int j = 0; j < NX; ++j) {
    __m512 s = acc[j][0];
    for (int c = 1; c < chains; ++c) s = _mm512_add_ps(s, acc[j][c]);
    _mm512_storeu_ps(out + 16 * j, s);
  }
}

HOTCOLD_AVX512 void dot16r_f16(const uint16_t* w, const float* const* x, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, n, out); });
}

// Two groups against one vector: the same four chains per group as dot16r<1> (so the same sums),
// two streams from memory; where the CPU wants it (cpu().stream_ahead), each stream's lines asked for
// that far ahead as it is read (into the next group of the stream, which is adjacent; prefetches
// past the weights' end do not fault).
HOTCOLD_AVX512 void dot16r2_f16(const uint16_t* wa, const uint16_t* wb, const float* x, int64_t n, float* oa, float* ob) {
  __m512 a[4], b[4];
  for (int c = 0; c < 4; ++c) a[c] = b[c] = _mm512_setzero_ps();
  const int64_t ahead = cpu().stream_ahead;
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) {
    if (ahead) {
      const char* pa = reinterpret_cast<const char*>(wa + 16 * k) + ahead;
      const char* pb = reinterpret_cast<const char*>(wb + 16 * k) + ahead;
      _mm_prefetch(pa, _MM_HINT_T0), _mm_prefetch(pa + 64, _MM_HINT_T0), _mm_prefetch(pb, _MM_HINT_T0), _mm_prefetch(pb + 64, _MM_HINT_T0);
    }
    for (int c = 0; c < 4; ++c) {
      const __m512 xv = _mm512_set1_ps(x[k + c]);
      a[c] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wa + 16 * (k + c)))), xv, a[c]);
      b[c] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 16 * (k + c)))), xv, b[c]);
    }
  }
  for (; k < n; ++k) {
    const __m512 xv = _mm512_set1_ps(x[k]);
    a[0] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wa + 16 * k))), xv, a[0]);
    b[0] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 16 * k))), xv, b[0]);
  }
  __m512 sa = a[0], sb = b[0];
  for (int c = 1; c < 4; ++c) sa = _mm512_add_ps(sa, a[c]), sb = _mm512_add_ps(sb, b[c]);
  _mm512_storeu_ps(oa, sa);
  _mm512_storeu_ps(ob, sb);
}

}  // namespace avx512

HOTCOLD_AVX512_END

namespace {
// Two groups as one after the other (the same sums), where the CPU has no two-stream version.
void dot16r2_f16_as_two(const uint16_t* wa, const uint16_t* wb, const float* x, int64_t n, float* oa, float* ob) {
  cpu_kernels().dot16r_f16(wa, &x, 1, n, oa);
  cpu_kernels().dot16r_f16(wb, &x, 1, n, ob);
}
}  // namespace

void choose_f16x16_kernels(kernel_table& k, const cpu_features& f) {
  k.dot16r_f16 = f.avx512 ? avx512::dot16r_f16 : f.avx2 ? avx2::dot16r_f16 : scalar::dot16r_f16;
  k.dot16r2_f16 = f.avx512 ? avx512::dot16r2_f16 : dot16r2_f16_as_two;
}

}  // namespace hotcold::kernels
