// Products of interleaved Q4_K and Q5_K rows (block_q4_kx16, block_q5_kx16) with Q8_K vectors: the
// dense matrix-vector and matrix-matrix products of Q4_K and Q5_K weights (a Q4_K_M or Q5_K_M file's
// attention and most of its FFN; Q5_K's fifth bits ORed into the nibbles on the way). As for
// Q4_0 (dot_q4_0x16.cpp), sixteen rows side by side means one broadcast of four vector bytes meets
// four bytes of each row in one multiply-add, and no horizontal sums are left at the end; here each
// group of 32 values also carries a 6-bit scale and min per row, unpacked for all sixteen rows at
// once from the rows' packed words. Per block and vector: each group's integer sum per row times
// its scale, the mins against the vector's group sums (q8_k_group_sums), then d and dmin.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace {
template <typename B>
constexpr bool five_bits = sizeof(B) == sizeof(block_q5_kx16);
}  // namespace

namespace scalar {

// By the layout's definition, value by value (the reference the vector versions are tested against).
template <typename B>
void dot16r_k(const B* w, const block_q8_k* const* x, int nx, int64_t n, float* out) {
  for (int j = 0; j < nx; ++j)
    for (int i = 0; i < 16; ++i) {
      float acc = 0;
      for (int64_t b = 0; b < n / qk_k; ++b) {
        uint8_t packed[12];
        for (int k = 0; k < 3; ++k) std::memcpy(packed + 4 * k, &w[b].scales[k][i], 4);
        int32_t isum = 0, msum = 0;
        for (int g = 0; g < 8; ++g) {
          uint8_t sc, m;
          k_quant_scale_min(packed, g, sc, m);
          int32_t s = 0;
          for (int v = 0; v < 32; ++v) {
            const uint8_t byte = w[b].qs[512 * (g / 2) + 64 * (v / 4) + 4 * i + v % 4];
            int q = g % 2 ? byte >> 4 : byte & 15;
            if constexpr (five_bits<B>) q |= ((w[b].qh[64 * (v / 4) + 4 * i + v % 4] >> g) & 1) << 4;
            s += q * x[j][b].qs[32 * g + v];
          }
          isum += sc * s;
          msum += m * (x[j][b].bsums[2 * g] + x[j][b].bsums[2 * g + 1]);
        }
        acc += x[j][b].d * (fp16_to_fp32(w[b].d[i]) * static_cast<float>(isum) - fp16_to_fp32(w[b].dmin[i]) * static_cast<float>(msum));
      }
      out[16 * j + i] = acc;
    }
}

void dot16r_q4_k(const block_q4_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const*, int nx, int64_t n, float* out) { dot16r_k(w, x, nx, n, out); }
void dot16r_q5_k(const block_q5_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const*, int nx, int64_t n, float* out) { dot16r_k(w, x, nx, n, out); }

}  // namespace scalar

namespace avx2 {

// Eight rows (half h of the group) a register: each group's maddubs of eight steps add in int16 (at
// most 8 x 2 x 15 x 128 = 30720; Q5_K's values reach 31, so four steps at a time: 31744), madd with the
// rows' scale in both halves of each 32-bit lane makes scale x the group's sum; the mins meet the
// vector's group sums in pairs by madd too.
template <typename B, int NX>
HOTCOLD_AVX2 static void dot16r(const B* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int64_t nb, float* out) {
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m6 = _mm256_set1_epi32(0x3f3f3f3f), m4w = _mm256_set1_epi32(0x0f0f0f0f), m2 = _mm256_set1_epi32(0x03030303);
  // Per 32-bit lane: byte g twice as int16 (the scale of group g), and bytes (0, 1) / (2, 3) as int16 pairs (mins).
  __m256i scale_of[4];
  for (int g = 0; g < 4; ++g) {
    alignas(32) int8_t c[32];
    for (int k = 0; k < 32; ++k) c[k] = (k % 2) ? static_cast<int8_t>(-128) : static_cast<int8_t>((k / 4) * 4 % 16 + g);
    scale_of[g] = _mm256_load_si256(reinterpret_cast<const __m256i*>(c));
  }
  const __m256i pair01 = _mm256_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128, 0, -128, 1, -128, 4, -128, 5, -128, 8,
                                          -128, 9, -128, 12, -128, 13, -128);
  const __m256i pair23 = _mm256_add_epi8(pair01, _mm256_setr_epi8(2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0));
  for (int h = 0; h < 2; ++h) {
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const B& wb = w[b];
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.scales[0] + 8 * h));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.scales[1] + 8 * h));
      const __m256i w2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.scales[2] + 8 * h));
      const __m256i s03 = _mm256_and_si256(w0, m6), n03 = _mm256_and_si256(w1, m6);
      const __m256i s47 = _mm256_or_si256(_mm256_and_si256(w2, m4w), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w0, 6), m2), 4));
      const __m256i n47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), m4w), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w1, 6), m2), 4));
      const __m256i mins[4] = {_mm256_shuffle_epi8(n03, pair01), _mm256_shuffle_epi8(n03, pair23), _mm256_shuffle_epi8(n47, pair01),
                               _mm256_shuffle_epi8(n47, pair23)};
      __m256i isum[NX];
      for (int j = 0; j < NX; ++j) isum[j] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {
        __m256i lo[8], hi[8];
        for (int s = 0; s < 8; ++s) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 512 * c + 64 * s + 32 * h));
          lo[s] = _mm256_and_si256(q, m4);
          hi[s] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          if constexpr (five_bits<B>) {  // bit 2c (2c + 1) of each qh byte, to bit 4
            const __m256i h5 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh + 64 * s + 32 * h));
            lo[s] = _mm256_or_si256(lo[s], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h5, 2 * c), one), 4));
            hi[s] = _mm256_or_si256(hi[s], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h5, 2 * c + 1), one), 4));
          }
        }
        const __m256i& sv = c < 2 ? s03 : s47;
        const __m256i sc_lo = _mm256_shuffle_epi8(sv, scale_of[(2 * c) % 4]), sc_hi = _mm256_shuffle_epi8(sv, scale_of[(2 * c + 1) % 4]);
        for (int j = 0; j < NX; ++j) {
          const int8_t* xq = x[j][b].qs + 64 * c;
          constexpr int run = five_bits<B> ? 4 : 8;  // steps summed in int16
          for (int s0 = 0; s0 < 8; s0 += run) {
            __m256i pl = _mm256_maddubs_epi16(lo[s0], _mm256_set1_epi32(four_bytes(xq + 4 * s0)));
            __m256i ph = _mm256_maddubs_epi16(hi[s0], _mm256_set1_epi32(four_bytes(xq + 32 + 4 * s0)));
            for (int s = s0 + 1; s < s0 + run; ++s) {
              pl = _mm256_add_epi16(pl, _mm256_maddubs_epi16(lo[s], _mm256_set1_epi32(four_bytes(xq + 4 * s))));
              ph = _mm256_add_epi16(ph, _mm256_maddubs_epi16(hi[s], _mm256_set1_epi32(four_bytes(xq + 32 + 4 * s))));
            }
            isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(pl, sc_lo), _mm256_madd_epi16(ph, sc_hi)));
          }
        }
      }
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.d + 8 * h)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.dmin + 8 * h)));
      for (int j = 0; j < NX; ++j) {
        const uint32_t* pr = xg[j][b].pair;
        __m256i msum = _mm256_madd_epi16(mins[0], _mm256_set1_epi32(static_cast<int>(pr[0])));
        for (int p = 1; p < 4; ++p) msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[p], _mm256_set1_epi32(static_cast<int>(pr[p]))));
        const __m256 v = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[j])), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum)));
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(x[j][b].d), v, acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) _mm256_storeu_ps(out + 16 * j + 8 * h, acc[j]);
  }
}

HOTCOLD_AVX2 void dot16r_q4_k(const block_q4_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<block_q4_kx16, decltype(k)::value>(w, x, xg, n / qk_k, out); });
}
HOTCOLD_AVX2 void dot16r_q5_k(const block_q5_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* xg, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<block_q5_kx16, decltype(k)::value>(w, x, xg, n / qk_k, out); });
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

namespace avx512vnni {

// All sixteen rows in one register (lane i: row i). A block's scales and mins are unpacked for the
// sixteen rows from the three packed words (k_quant_scale_min's rule, on every byte at once); per
// group and vector eight dpbusd (in two chains, a chunk's low and high nibbles), the group's sum
// times its scale (mullo), the mins by four dpwssd against the vector's group sums in pairs.
struct k_scales {
  __m512i sc[8];
  __m512i mins[4];
  __m512 d, dmin;
};
template <typename B>
HOTCOLD_VNNI static inline void unpack_scales(const B& w, k_scales& k) {
  const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303), byte = _mm512_set1_epi32(0xff);
  const __m512i w0 = _mm512_loadu_si512(w.scales[0]), w1 = _mm512_loadu_si512(w.scales[1]), w2 = _mm512_loadu_si512(w.scales[2]);
  const __m512i s03 = _mm512_and_si512(w0, m6), n03 = _mm512_and_si512(w1, m6);
  const __m512i s47 = _mm512_or_si512(_mm512_and_si512(w2, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m2), 4));
  const __m512i n47 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m2), 4));
  k.sc[0] = _mm512_and_si512(s03, byte), k.sc[4] = _mm512_and_si512(s47, byte);
  k.sc[1] = _mm512_and_si512(_mm512_srli_epi32(s03, 8), byte), k.sc[5] = _mm512_and_si512(_mm512_srli_epi32(s47, 8), byte);
  k.sc[2] = _mm512_and_si512(_mm512_srli_epi32(s03, 16), byte), k.sc[6] = _mm512_and_si512(_mm512_srli_epi32(s47, 16), byte);
  k.sc[3] = _mm512_srli_epi32(s03, 24), k.sc[7] = _mm512_srli_epi32(s47, 24);
  const __m512i pair01 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, 1, -128, 4, -128, 5, -128, 8, -128, 9, -128, 12, -128, 13, -128));
  const __m512i pair23 = _mm512_broadcast_i32x4(_mm_setr_epi8(2, -128, 3, -128, 6, -128, 7, -128, 10, -128, 11, -128, 14, -128, 15, -128));
  k.mins[0] = _mm512_shuffle_epi8(n03, pair01), k.mins[1] = _mm512_shuffle_epi8(n03, pair23);
  k.mins[2] = _mm512_shuffle_epi8(n47, pair01), k.mins[3] = _mm512_shuffle_epi8(n47, pair23);
  k.d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.d)));
  k.dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.dmin)));
}

// acc[j] += block w against the NX vectors' blocks x[j] (their group sums g[j]).
template <typename B, int NX>
HOTCOLD_VNNI static inline void add_block(const B& w, const block_q8_k* const* x, const q8_k_group_sums* const* g, int64_t b, __m512 (&acc)[NX]) {
  const __m512i m4b = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
  k_scales k;
  unpack_scales(w, k);
  __m512i isum[NX];
  for (int j = 0; j < NX; ++j) isum[j] = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    __m512i lo[8], hi[8];
    for (int s = 0; s < 8; ++s) {
      const __m512i q = _mm512_loadu_si512(w.qs + 512 * c + 64 * s);
      lo[s] = _mm512_and_si512(q, m4b);
      hi[s] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4b);
      if constexpr (five_bits<B>) {  // bit 2c (2c + 1) of each qh byte, to bit 4
        const __m512i h5 = _mm512_loadu_si512(w.qh + 64 * s);
        lo[s] = _mm512_or_si512(lo[s], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h5, 2 * c), one), 4));
        hi[s] = _mm512_or_si512(hi[s], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h5, 2 * c + 1), one), 4));
      }
    }
    for (int j = 0; j < NX; ++j) {
      const int8_t* xq = x[j][b].qs + 64 * c;
      __m512i a = _mm512_setzero_si512(), h = _mm512_setzero_si512();
      for (int s = 0; s < 8; ++s) {
        a = _mm512_dpbusd_epi32(a, lo[s], _mm512_set1_epi32(four_bytes(xq + 4 * s)));
        h = _mm512_dpbusd_epi32(h, hi[s], _mm512_set1_epi32(four_bytes(xq + 32 + 4 * s)));
      }
      isum[j] = _mm512_add_epi32(isum[j], _mm512_add_epi32(_mm512_mullo_epi32(a, k.sc[2 * c]), _mm512_mullo_epi32(h, k.sc[2 * c + 1])));
    }
  }
  for (int j = 0; j < NX; ++j) {
    const uint32_t* pr = g[j][b].pair;
    __m512i msum = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) msum = _mm512_dpwssd_epi32(msum, k.mins[p], _mm512_set1_epi32(static_cast<int>(pr[p])));
    const __m512 v = _mm512_sub_ps(_mm512_mul_ps(k.d, _mm512_cvtepi32_ps(isum[j])), _mm512_mul_ps(k.dmin, _mm512_cvtepi32_ps(msum)));
    acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(x[j][b].d), v, acc[j]);
  }
}

template <typename B, int NX>
HOTCOLD_VNNI static void dot16r(const B* w, const block_q8_k* const* x, const q8_k_group_sums* const* g, int64_t nb, float* out) {
  __m512 acc[NX];
  for (int j = 0; j < NX; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) add_block<B, NX>(w[b], x, g, b, acc);
  for (int j = 0; j < NX; ++j) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

// Two groups against one vector, block by block: two streams from memory, left to the hardware's
// prefetch. (Asking for a block's 36 lines a block or more ahead, whole or a chunk at a time, was
// slower; docs/performance.md.)
template <typename B>
HOTCOLD_VNNI void dot16r2(const B* wa, const B* wb, const block_q8_k* x, const q8_k_group_sums* g, int64_t nb, float* oa, float* ob) {
  __m512 acc_a[1] = {_mm512_setzero_ps()}, acc_b[1] = {_mm512_setzero_ps()};
  const block_q8_k* xs[1] = {x};
  const q8_k_group_sums* gs[1] = {g};
  for (int64_t b = 0; b < nb; ++b) {
    add_block<B, 1>(wa[b], xs, gs, b, acc_a);
    add_block<B, 1>(wb[b], xs, gs, b, acc_b);
  }
  _mm512_storeu_ps(oa, acc_a[0]);
  _mm512_storeu_ps(ob, acc_b[0]);
}

HOTCOLD_VNNI void dot16r_q4_k(const block_q4_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* g, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<block_q4_kx16, decltype(k)::value>(w, x, g, n / qk_k, out); });
}
HOTCOLD_VNNI void dot16r_q5_k(const block_q5_kx16* w, const block_q8_k* const* x, const q8_k_group_sums* const* g, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<block_q5_kx16, decltype(k)::value>(w, x, g, n / qk_k, out); });
}

}  // namespace avx512vnni

HOTCOLD_AVX512_END

namespace {
// Two groups as one after the other (the same sums), where the CPU has no two-stream version.
template <typename B>
void dot16r2_as_two(const B* wa, const B* wb, const block_q8_k* x, const q8_k_group_sums* g, int64_t n, float* oa, float* ob) {
  const auto one = [&] {
    if constexpr (five_bits<B>) return cpu_kernels().dot16r_q5_k;
    else return cpu_kernels().dot16r_q4_k;
  }();
  one(wa, &x, &g, 1, n, oa);
  one(wb, &x, &g, 1, n, ob);
}
template <typename B>
void dot16r2_vnni(const B* wa, const B* wb, const block_q8_k* x, const q8_k_group_sums* g, int64_t n, float* oa, float* ob) {
  avx512vnni::dot16r2<B>(wa, wb, x, g, n / qk_k, oa, ob);
}
}  // namespace

void choose_q4_kx16_kernels(kernel_table& k, const cpu_features& f) {
  k.dot16r_q4_k = f.vnni ? avx512vnni::dot16r_q4_k : f.avx2 ? avx2::dot16r_q4_k : scalar::dot16r_q4_k;
  k.dot16r2_q4_k = f.vnni ? dot16r2_vnni<block_q4_kx16> : dot16r2_as_two<block_q4_kx16>;
  k.dot16r_q5_k = f.vnni ? avx512vnni::dot16r_q5_k : f.avx2 ? avx2::dot16r_q5_k : scalar::dot16r_q5_k;
  k.dot16r2_q5_k = f.vnni ? dot16r2_vnni<block_q5_kx16> : dot16r2_as_two<block_q5_kx16>;
}

}  // namespace hotcold::kernels
