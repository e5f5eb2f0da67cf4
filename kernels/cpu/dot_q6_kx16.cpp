// Products of interleaved Q6_K rows (block_q6_kx16) with Q8_K vectors: the dense products of Q6_K
// matrices (the head of most quantized files; a Q4_K_M file's attn_v and part of its ffn_down). As for
// Q4_0 and Q4_K: one broadcast of four vector bytes meets four bytes of each of sixteen rows in one
// multiply-add. The 6-bit quants (0..63) enter the unsigned side whole, their offset of 32 comes off
// as 32 x the scale-weighted sums of 16 that Q8_K carries (bsums), and each group of 16 values'
// integer sum is weighted by its row's int8 scale.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace scalar {

// By the layout's definition, value by value (the reference the vector versions are tested against).
void dot16r_q6_k(const block_q6_kx16* w, const block_q8_k* const* x, int nx, int64_t n, float* out) {
  for (int j = 0; j < nx; ++j)
    for (int i = 0; i < 16; ++i) {
      float acc = 0;
      for (int64_t b = 0; b < n / qk_k; ++b) {
        int32_t isum = 0;
        for (int s = 0; s < 16; ++s) {
          int32_t group = 0;
          for (int v = 16 * s; v < 16 * s + 16; ++v) {
            const int h = v / 128, q = (v % 128) / 32, l = v % 32, t = l / 4, k = l % 4;
            const uint8_t* step = w[b].qs + 192 * (8 * h + t) + 4 * i + k;
            const uint8_t lo = step[64 * (q % 2)], hi = step[128];
            const int value = ((q < 2 ? lo & 15 : lo >> 4) | (((hi >> (2 * q)) & 3) << 4)) - 32;
            group += value * x[j][b].qs[v];
          }
          isum += w[b].scales[s][i] * group;
        }
        acc += fp16_to_fp32(w[b].d[i]) * x[j][b].d * static_cast<float>(isum);
      }
      out[16 * j + i] = acc;
    }
}

}  // namespace scalar

namespace avx2 {

// Eight rows (half r of the group) a register: two steps' maddubs add in int16 (at most 2 x 2 x 63 x
// 128 = 32256), madd with the rows' scale in both halves of each 32-bit lane makes scale x the sum;
// the offset against the scale-weighted sums of 16 by madd of the scales in pairs.
template <int NX>
HOTCOLD_AVX2 static void dot16r(const block_q6_kx16* w, const block_q8_k* const* x, int64_t nb, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30), low16 = _mm256_set1_epi32(0xffff);
  for (int r = 0; r < 2; ++r) {
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const block_q6_kx16& wb = w[b];
      __m256i sc[16], pairs[8];
      for (int s = 0; s < 16; ++s) {
        const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb.scales[s] + 8 * r)));
        sc[s] = v;
      }
      for (int p = 0; p < 8; ++p) pairs[p] = _mm256_or_si256(_mm256_and_si256(sc[2 * p], low16), _mm256_slli_epi32(sc[2 * p + 1], 16));
      for (int s = 0; s < 16; ++s) sc[s] = _mm256_or_si256(_mm256_and_si256(sc[s], low16), _mm256_slli_epi32(sc[s], 16));
      __m256i isum[NX];
      for (int j = 0; j < NX; ++j) isum[j] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h)
        for (int m = 0; m < 2; ++m) {
          __m256i q[4][4];  // [step][quarter]
          for (int u = 0; u < 4; ++u) {
            const int t = 4 * m + u;
            const uint8_t* step = wb.qs + 192 * (8 * h + t) + 32 * r;
            const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step));
            const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 64));
            const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 128));
            q[u][0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
            q[u][1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
            q[u][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
            q[u][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
          }
          for (int j = 0; j < NX; ++j)
            for (int qq = 0; qq < 4; ++qq) {
              const int8_t* xq = x[j][b].qs + 128 * h + 32 * qq + 16 * m;
              const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0][qq], _mm256_set1_epi32(four_bytes(xq))),
                                                   _mm256_maddubs_epi16(q[1][qq], _mm256_set1_epi32(four_bytes(xq + 4))));
              const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2][qq], _mm256_set1_epi32(four_bytes(xq + 8))),
                                                   _mm256_maddubs_epi16(q[3][qq], _mm256_set1_epi32(four_bytes(xq + 12))));
              const __m256i s16 = sc[8 * h + 2 * qq + m];
              isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(p01, s16), _mm256_madd_epi16(p23, s16)));
            }
        }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.d + 8 * r)));
      for (int j = 0; j < NX; ++j) {
        __m256i off = _mm256_setzero_si256();
        for (int p = 0; p < 8; ++p) off = _mm256_add_epi32(off, _mm256_madd_epi16(pairs[p], _mm256_set1_epi32(four_bytes(x[j][b].bsums + 2 * p))));
        const __m256i total = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(off, 5));
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(x[j][b].d), _mm256_mul_ps(d, _mm256_cvtepi32_ps(total)), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) _mm256_storeu_ps(out + 16 * j + 8 * r, acc[j]);
  }
}

HOTCOLD_AVX2 void dot16r_q6_k(const block_q6_kx16* w, const block_q8_k* const* x, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, n / qk_k, out); });
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

namespace avx512vnni {

// All sixteen rows in one register (lane i: row i). Per half and per two of its groups of 16 (four
// steps): the four steps' quants for the four quarters built once (low or high nibble, and the two
// high bits shifted into place), then per vector and quarter four dpbusd and one multiply by the
// group's scale; the offset by eight dpwssd of the scales in pairs against the sums of 16.
template <int NX>
HOTCOLD_VNNI static inline void add_block(const block_q6_kx16& w, const block_q8_k* const* x, int64_t b, __m512 (&acc)[NX]) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), low16 = _mm512_set1_epi32(0xffff);
  __m512i sc[16];
  for (int s = 0; s < 16; ++s) sc[s] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales[s])));
  __m512i isum[NX];
  for (int j = 0; j < NX; ++j) isum[j] = _mm512_setzero_si512();
  for (int h = 0; h < 2; ++h)
    for (int m = 0; m < 2; ++m) {
      __m512i q[4][4];  // [step][quarter]
      for (int u = 0; u < 4; ++u) {
        const int t = 4 * m + u;
        const uint8_t* step = w.qs + 192 * (8 * h + t);
        const __m512i l0 = _mm512_loadu_si512(step), l1 = _mm512_loadu_si512(step + 64), hb = _mm512_loadu_si512(step + 128);
        q[u][0] = _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30));
        q[u][1] = _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30));
        q[u][2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(hb, m30));
        q[u][3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4), _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30));
      }
      for (int j = 0; j < NX; ++j)
        for (int qq = 0; qq < 4; ++qq) {
          const int8_t* xq = x[j][b].qs + 128 * h + 32 * qq + 16 * m;
          __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0][qq], _mm512_set1_epi32(four_bytes(xq)));
          s = _mm512_dpbusd_epi32(s, q[1][qq], _mm512_set1_epi32(four_bytes(xq + 4)));
          s = _mm512_dpbusd_epi32(s, q[2][qq], _mm512_set1_epi32(four_bytes(xq + 8)));
          s = _mm512_dpbusd_epi32(s, q[3][qq], _mm512_set1_epi32(four_bytes(xq + 12)));
          isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(s, sc[8 * h + 2 * qq + m]));
        }
    }
  __m512i pairs[8];
  for (int p = 0; p < 8; ++p) pairs[p] = _mm512_or_si512(_mm512_and_si512(sc[2 * p], low16), _mm512_slli_epi32(sc[2 * p + 1], 16));
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.d)));
  for (int j = 0; j < NX; ++j) {
    __m512i off = _mm512_setzero_si512();
    for (int p = 0; p < 8; ++p) off = _mm512_dpwssd_epi32(off, pairs[p], _mm512_set1_epi32(four_bytes(x[j][b].bsums + 2 * p)));
    const __m512i total = _mm512_sub_epi32(isum[j], _mm512_slli_epi32(off, 5));
    acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(x[j][b].d), _mm512_mul_ps(d, _mm512_cvtepi32_ps(total)), acc[j]);
  }
}

template <int NX>
HOTCOLD_VNNI static void dot16r(const block_q6_kx16* w, const block_q8_k* const* x, int64_t nb, float* out) {
  __m512 acc[NX];
  for (int j = 0; j < NX; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) add_block<NX>(w[b], x, b, acc);
  for (int j = 0; j < NX; ++j) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

// Two groups against one vector, block by block: two streams from memory, left to the hardware's
// prefetch (as Q4_K's, dot_q4_kx16.cpp).
HOTCOLD_VNNI void dot16r2_q6_k(const block_q6_kx16* wa, const block_q6_kx16* wb, const block_q8_k* x, int64_t nb, float* oa, float* ob) {
  __m512 acc_a[1] = {_mm512_setzero_ps()}, acc_b[1] = {_mm512_setzero_ps()};
  const block_q8_k* xs[1] = {x};
  for (int64_t b = 0; b < nb; ++b) {
    add_block<1>(wa[b], xs, b, acc_a);
    add_block<1>(wb[b], xs, b, acc_b);
  }
  _mm512_storeu_ps(oa, acc_a[0]);
  _mm512_storeu_ps(ob, acc_b[0]);
}

HOTCOLD_VNNI void dot16r_q6_k(const block_q6_kx16* w, const block_q8_k* const* x, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, n / qk_k, out); });
}

}  // namespace avx512vnni

HOTCOLD_AVX512_END

namespace {
// Two groups as one after the other (the same sums), where the CPU has no two-stream version.
void dot16r2_q6_k_as_two(const block_q6_kx16* wa, const block_q6_kx16* wb, const block_q8_k* x, int64_t n, float* oa, float* ob) {
  cpu_kernels().dot16r_q6_k(wa, &x, 1, n, oa);
  cpu_kernels().dot16r_q6_k(wb, &x, 1, n, ob);
}
void dot16r2_q6_k_vnni(const block_q6_kx16* wa, const block_q6_kx16* wb, const block_q8_k* x, int64_t n, float* oa, float* ob) {
  avx512vnni::dot16r2_q6_k(wa, wb, x, n / qk_k, oa, ob);
}
}  // namespace

void choose_q6_kx16_kernels(kernel_table& k, const cpu_features& f) {
  k.dot16r_q6_k = f.vnni ? avx512vnni::dot16r_q6_k : f.avx2 ? avx2::dot16r_q6_k : scalar::dot16r_q6_k;
  k.dot16r2_q6_k = f.vnni ? dot16r2_q6_k_vnni : dot16r2_q6_k_as_two;
}

}  // namespace hotcold::kernels
