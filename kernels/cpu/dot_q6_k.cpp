// Q6_K rows against Q8_K activations: integer multiply-adds per block, the group scales applied as
// 16-bit multipliers (maddubs then madd/dpwssd), Q6_K's offset of 32 taken off once per block from
// the activations' group sums, one float scale per 256 values.
#include <immintrin.h>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace scalar {

float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t n) {
  float sum = 0;
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const uint8_t* ql = w[b].ql;
    const uint8_t* qh = w[b].qh;
    const int8_t* q8 = x[b].qs;
    int32_t isum = 0;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, q8 += 128) {
      int32_t group[8] = {};  // this half's eight groups of 16
      for (int l = 0; l < 32; ++l) {
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        group[l / 16] += q1 * q8[l];
        group[2 + l / 16] += q2 * q8[l + 32];
        group[4 + l / 16] += q3 * q8[l + 64];
        group[6 + l / 16] += q4 * q8[l + 96];
      }
      for (int g = 0; g < 8; ++g) isum += w[b].scales[8 * h + g] * group[g];
    }
    sum += fp16_to_fp32(w[b].d) * x[b].d * static_cast<float>(isum);
  }
  return sum;
}

}  // namespace scalar

namespace avx2 {

HOTCOLD_AVX2 float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t n) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x30);
  __m256 acc = _mm256_setzero_ps(), acc_offset = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const uint8_t* ql = w[b].ql;
    const uint8_t* qh = w[b].qh;
    const int8_t* q8 = x[b].qs;
    const int8_t* sc = w[b].scales;
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, q8 += 128, sc += 8) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
      // values 0..63 (the offset of 32 comes off below), quarter by quarter of the half
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 4), m3)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hv, 2), m3)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hv, m3)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hv, 2), m3))};
      for (int k = 0; k < 4; ++k) {
        const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * k)));
        const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[2 * k + 1]), _mm_set1_epi16(sc[2 * k]));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
      }
    }
    const __m256i offset = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales))),
                                             _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].bsums)));
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(w[b].d) * x[b].d);
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(isum), acc);
    acc_offset = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(offset), acc_offset);
  }
  acc = _mm256_fnmadd_ps(_mm256_set1_ps(32.0f), acc_offset, acc);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

namespace avx512vnni {

// Register j of a block (j = 2 h + {0, 1}) covers groups 4 j .. 4 j + 3, 8 int16 lanes each: the
// indices that spread the block's 16 group scales over them, made once.
struct q6_k_scale_indices {
  alignas(64) int16_t lanes[4][32];
  constexpr q6_k_scale_indices() : lanes() {
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 32; ++k) lanes[j][k] = static_cast<int16_t>(4 * j + k / 8);
  }
};
constexpr q6_k_scale_indices q6_k_scale_index;

// A half block (128 values) is two registers: ql's 64 bytes hold the low nibbles of values 0..63
// and the high nibbles of 64..127; qh's 32 bytes, in both halves of a register, give each value's
// two high bits after a per-64-bit-lane shift (bits 0-1 and 2-3 for the first register's two halves,
// 4-5 and 6-7 for the second's).
HOTCOLD_VNNI float dot_q6_k_q8_k(const block_q6_k* w, const block_q8_k* x, int64_t n) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x30);
  const __m512i left = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4), right = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
  __m512i scale_index[4];
  for (int j = 0; j < 4; ++j) scale_index[j] = _mm512_load_si512(q6_k_scale_index.lanes[j]);
  __m512 acc = _mm512_setzero_ps();
  __m256 acc_offset = _mm256_setzero_ps();
  // Where the CPU wants it (cpu().stream_ahead), the row's stream asked for that far ahead: into the
  // next rows, which a head's product reads next (prefetches past the weights' end do not fault).
  // Each line once, up to `ahead` past this block's end.
  const int64_t ahead = cpu().stream_ahead;
  uintptr_t next = stream_line(w, ahead);
  for (int64_t b = 0; b < n / qk_k; ++b) {
    if (ahead) prefetch_until(next, reinterpret_cast<uintptr_t>(w + b + 1) + static_cast<uintptr_t>(ahead));
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    __m512i isum = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(w[b].ql + 64 * h);
      const __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * h)));
      const __m512i a = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi64(hv, left), m3));
      const __m512i c = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(_mm512_srlv_epi64(hv, right), m3));
      const __m512i pa = _mm512_maddubs_epi16(a, _mm512_loadu_si512(x[b].qs + 128 * h));
      const __m512i pc = _mm512_maddubs_epi16(c, _mm512_loadu_si512(x[b].qs + 128 * h + 64));
      isum = _mm512_dpwssd_epi32(isum, pa, _mm512_permutexvar_epi16(scale_index[2 * h], sc));
      isum = _mm512_dpwssd_epi32(isum, pc, _mm512_permutexvar_epi16(scale_index[2 * h + 1], sc));
    }
    const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].bsums)));
    const float d = _cvtsh_ss(w[b].d) * x[b].d;
    acc = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum), acc);
    acc_offset = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(offset), acc_offset);
  }
  const __m512 total = _mm512_sub_ps(acc, _mm512_insertf32x8(_mm512_setzero_ps(), _mm256_mul_ps(_mm256_set1_ps(32.0f), acc_offset), 0));
  return _mm512_reduce_add_ps(total);
}

// One row against four tokens (the head's product for several sequences): the row's values and
// scales unpacked once a half block for the four, each token's sums as the one-token kernel makes
// them (the same results, bit for bit).
HOTCOLD_VNNI void dot4t_q6_k_q8_k(const block_q6_k* w, const block_q8_k* const* x, int64_t n, float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(0x30);
  const __m512i left = _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4), right = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0);
  __m512i scale_index[4];
  for (int j = 0; j < 4; ++j) scale_index[j] = _mm512_load_si512(q6_k_scale_index.lanes[j]);
  __m512 acc[4];
  __m256 acc_offset[4];
  for (int t = 0; t < 4; ++t) acc[t] = _mm512_setzero_ps(), acc_offset[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].scales)));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    __m512i isum[4];
    for (int t = 0; t < 4; ++t) isum[t] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      const __m512i l = _mm512_loadu_si512(w[b].ql + 64 * h);
      const __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qh + 32 * h)));
      const __m512i a = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi64(hv, left), m3));
      const __m512i c = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(_mm512_srlv_epi64(hv, right), m3));
      const __m512i sa = _mm512_permutexvar_epi16(scale_index[2 * h], sc), scc = _mm512_permutexvar_epi16(scale_index[2 * h + 1], sc);
      for (int t = 0; t < 4; ++t) {
        const __m512i pa = _mm512_maddubs_epi16(a, _mm512_loadu_si512(x[t][b].qs + 128 * h));
        const __m512i pc = _mm512_maddubs_epi16(c, _mm512_loadu_si512(x[t][b].qs + 128 * h + 64));
        isum[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[t], pa, sa), pc, scc);
      }
    }
    const float wd = _cvtsh_ss(w[b].d);
    for (int t = 0; t < 4; ++t) {
      const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t][b].bsums)));
      const float d = wd * x[t][b].d;
      acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(isum[t]), acc[t]);
      acc_offset[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(offset), acc_offset[t]);
    }
  }
  for (int t = 0; t < 4; ++t)
    out[t] = _mm512_reduce_add_ps(_mm512_sub_ps(acc[t], _mm512_insertf32x8(_mm512_setzero_ps(), _mm256_mul_ps(_mm256_set1_ps(32.0f), acc_offset[t]), 0)));
}

}  // namespace avx512vnni

HOTCOLD_AVX512_END

namespace composed {
// Four tokens one after another, where no four-token kernel is.
void dot4t_q6_k_q8_k(const block_q6_k* w, const block_q8_k* const* x, int64_t n, float* out) {
  for (int t = 0; t < 4; ++t) out[t] = cpu_kernels().dot_q6_k_q8_k(w, x[t], n);
}
}  // namespace composed

void choose_q6_k_kernels(kernel_table& k, const cpu_features& f) {
  k.dot_q6_k_q8_k = f.vnni ? avx512vnni::dot_q6_k_q8_k : f.avx2 ? avx2::dot_q6_k_q8_k : scalar::dot_q6_k_q8_k;
  k.dot4t_q6_k_q8_k = f.vnni ? avx512vnni::dot4t_q6_k_q8_k : composed::dot4t_q6_k_q8_k;
}

}  // namespace hotcold::kernels
