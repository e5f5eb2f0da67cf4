#include "kernels/cpu/select.hpp"

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hotcold::kernels {

namespace {
// Scores [i, n) one at a time, appending to ids[count..]; returns the new count.
int64_t select_from(const float* scores, int64_t i, int64_t n, float threshold, uint8_t* chosen, int32_t* ids, int64_t count) {
  for (; i < n; ++i) {
    const uint8_t c = scores[i] >= threshold;
    chosen[i] = c;
    ids[count] = static_cast<int32_t>(i);  // kept only where c: the next one overwrites it otherwise
    count += c;
  }
  return count;
}
}  // namespace

int64_t select_at_least_scalar(const float* scores, int64_t n, float threshold, uint8_t* chosen, int32_t* ids) {
  return select_from(scores, 0, n, threshold, chosen, ids, 0);
}

#if defined(__x86_64__)
HOTCOLD_AVX512_BEGIN
// Sixteen scores a step: one compare into a mask, the mask widened to sixteen 0/1 bytes, and the
// chosen indices packed to the front of a register (compress) and stored whole (a fifth of the
// scalar loop's time; docs/performance.md).
HOTCOLD_AVX512 static int64_t select_avx512(const float* scores, int64_t n, float threshold, uint8_t* chosen, int32_t* ids) {
  const __m512 t = _mm512_set1_ps(threshold);
  const __m512i step = _mm512_set1_epi32(16), one = _mm512_set1_epi32(1);
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t count = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = _mm512_cmp_ps_mask(_mm512_loadu_ps(scores + i), t, _CMP_GE_OQ);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(chosen + i), _mm512_cvtepi32_epi8(_mm512_maskz_mov_epi32(m, one)));
    _mm512_storeu_si512(ids + count, _mm512_maskz_compress_epi32(m, index));
    count += __builtin_popcount(m);
    index = _mm512_add_epi32(index, step);
  }
  return select_from(scores, i, n, threshold, chosen, ids, count);
}
HOTCOLD_AVX512_END
#endif

void choose_select_kernels(kernel_table& k, const cpu_features& f) {
  k.select_at_least = select_at_least_scalar;
#if defined(__x86_64__)
  if (f.avx512) k.select_at_least = select_avx512;
#endif
}

int64_t select_at_least(const float* scores, int64_t n, float threshold, uint8_t* chosen, int32_t* ids) {
  return cpu_kernels().select_at_least(scores, n, threshold, chosen, ids);
}

}  // namespace hotcold::kernels
