// Products of interleaved Q4_0 rows (block_q4_0x16) with Q8_0 vectors: the dense matrix-vector and
// matrix-matrix products of Q4_0 weights. Sixteen rows side by side means one broadcast of four
// vector bytes meets four bytes of each of the sixteen rows in one multiply-add, the per-block scale
// multiply is one vector operation for sixteen rows, and no horizontal sums are left at the end.
// Q4_0's nibbles (0..15) enter the unsigned side as they are; the offset of 8 comes off as
// 8 x the vector block's sum.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

// Which blocks of the rows a product reads: every one in order (at(k) = k), or those listed.
struct every_block {
  int64_t operator()(int64_t k) const { return k; }
};
struct listed_blocks {
  const int32_t* list;
  int64_t operator()(int64_t k) const { return list[k]; }
};

namespace scalar {

template <typename At>
static void dot16r(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t count, At at, float* out) {
  for (int j = 0; j < nx; ++j) {
    float acc[16] = {};
    for (int64_t k = 0; k < count; ++k) {
      const int64_t b = at(k);
      const int8_t* xv = x[j][b].qs;
      const float xd = xt[j][b].d;
      for (int i = 0; i < 16; ++i) {
        int32_t s = xt[j][b].offset;
        for (int g = 0; g < 4; ++g)
          for (int k = 0; k < 4; ++k) {
            const uint8_t q = w[b].qs[64 * g + 4 * i + k];
            s += (q & 15) * xv[4 * g + k] + (q >> 4) * xv[16 + 4 * g + k];
          }
        acc[i] += fp16_to_fp32(w[b].d[i]) * xd * static_cast<float>(s);
      }
    }
    for (int i = 0; i < 16; ++i) out[16 * j + i] = acc[i];
  }
}

void dot16r_q4_0(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t n, float* out) {
  dot16r(w, x, xt, nx, n / qk4_0, every_block{}, out);
}
void dot16r_q4_0_at(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, const int32_t* blocks, int64_t count, float* out) {
  dot16r(w, x, xt, nx, count, listed_blocks{blocks}, out);
}

}  // namespace scalar

namespace avx2 {

// Eight rows (one half of the group) at a time: maddubs makes byte pairs' sums in int16 (at most
// 2 x 15 x 128 each, so eight of them add without overflow), madd with ones makes each row's int32.
template <int NX, typename At>
HOTCOLD_AVX2 static void dot16r(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int64_t count, At at, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int h = 0; h < 2; ++h) {
    __m256 acc[NX];
    for (int j = 0; j < NX; ++j) acc[j] = _mm256_setzero_ps();
    for (int64_t k = 0; k < count; ++k) {
      const int64_t b = at(k);
      __m256i lo[4], hi[4];
      for (int g = 0; g < 4; ++g) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs + 64 * g + 32 * h));
        lo[g] = _mm256_and_si256(q, m4);
        hi[g] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].d + 8 * h)));
      for (int j = 0; j < NX; ++j) {
        const int8_t* xv = x[j][b].qs;
        __m256i p = _mm256_maddubs_epi16(lo[0], _mm256_set1_epi32(four_bytes(xv)));
        for (int g = 1; g < 4; ++g) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[g], _mm256_set1_epi32(four_bytes(xv + 4 * g))));
        for (int g = 0; g < 4; ++g) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[g], _mm256_set1_epi32(four_bytes(xv + 16 + 4 * g))));
        const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(p, ones), _mm256_set1_epi32(xt[j][b].offset));
        acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(xt[j][b].d), _mm256_mul_ps(dw, _mm256_cvtepi32_ps(s)), acc[j]);
      }
    }
    for (int j = 0; j < NX; ++j) _mm256_storeu_ps(out + 16 * j + 8 * h, acc[j]);
  }
}

HOTCOLD_AVX2 void dot16r_q4_0(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, xt, n / qk4_0, every_block{}, out); });
}
HOTCOLD_AVX2 void dot16r_q4_0_at(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, const int32_t* blocks, int64_t count,
                                 float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, xt, count, listed_blocks{blocks}, out); });
}

}  // namespace avx2

HOTCOLD_AVX512_BEGIN

namespace avx512vnni {

// All sixteen rows in one register: lane i is row i. Per block the 256 quant bytes are four loads,
// each split into low and high nibbles; every vector then needs eight dpbusd (two chains) started
// from its offset (worked out once per vector, as its scale), one multiply by the sixteen rows'
// scales and one multiply-add by its own.
struct nibbles {
  __m512i lo[4], hi[4];
};
HOTCOLD_VNNI static inline nibbles unpack(const block_q4_0x16& w) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  nibbles n;
  for (int g = 0; g < 4; ++g) {
    const __m512i q = _mm512_loadu_si512(w.qs + 64 * g);
    n.lo[g] = _mm512_and_si512(q, m4);
    n.hi[g] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
  }
  return n;
}
// acc += the block's sixteen products with vector block x (its terms t), weighted by the rows' scales.
HOTCOLD_VNNI static inline __m512 add_block(const nibbles& n, const uint16_t* d, const block_q8_0& x, const q8_0_terms& t, __m512 acc) {
  __m512i s0 = _mm512_set1_epi32(t.offset), s1 = _mm512_setzero_si512();
  for (int g = 0; g < 4; ++g) {
    s0 = _mm512_dpbusd_epi32(s0, n.lo[g], _mm512_set1_epi32(four_bytes(x.qs + 4 * g)));
    s1 = _mm512_dpbusd_epi32(s1, n.hi[g], _mm512_set1_epi32(four_bytes(x.qs + 16 + 4 * g)));
  }
  const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(d)));
  return _mm512_fmadd_ps(_mm512_set1_ps(t.d), _mm512_mul_ps(dw, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1))), acc);
}

template <int NX, typename At>
HOTCOLD_VNNI static void dot16r(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int64_t count, At at, float* out) {
  __m512 acc[NX];
  for (int j = 0; j < NX; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t b = at(k);
    const nibbles n = unpack(w[b]);
    for (int j = 0; j < NX; ++j) acc[j] = add_block(n, w[b].d, x[j][b], xt[j][b], acc[j]);
  }
  for (int j = 0; j < NX; ++j) _mm512_storeu_ps(out + 16 * j, acc[j]);
}

// Two groups against one vector, block by block: two streams from memory at once. Where the CPU
// wants streams asked for ahead (cpu().stream_ahead: Intel), each is asked for that far (eight blocks,
// 2.3 KB) into L1 besides the hardware's own prefetch, which was faster there; on AMD's Zen 4 the same
// prefetches were slower, as they were for Q4_K (dot_q4_kx16.cpp): there the hardware's streams
// alone (docs/performance.md).
// (Past a group's end the next group's first blocks are asked for: usually the caller's next.)
HOTCOLD_VNNI void dot16r2_q4_0(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, int64_t nb, float* oa, float* ob) {
  static const int64_t ahead = (cpu().stream_ahead + static_cast<int64_t>(sizeof(block_q4_0x16)) - 1) / static_cast<int64_t>(sizeof(block_q4_0x16));
  __m512 acc_a = _mm512_setzero_ps(), acc_b = _mm512_setzero_ps();
  if (ahead == 0) {
    for (int64_t b = 0; b < nb; ++b) {
      acc_a = add_block(unpack(wa[b]), wa[b].d, x[b], xt[b], acc_a);
      acc_b = add_block(unpack(wb[b]), wb[b].d, x[b], xt[b], acc_b);
    }
  } else {
    // Each line asked for once (a block is 4.5 lines): the lines not yet asked for up to the end of
    // the block `ahead` on (+1.4% a sparse Q4_0 token against five prefetches a block, three
    // alternations in one process, Intel Xeon).
    uintptr_t na = stream_line(wa + ahead, 0), nbp = stream_line(wb + ahead, 0);
    for (int64_t b = 0; b < nb; ++b) {
      prefetch_until(na, reinterpret_cast<uintptr_t>(wa + b + ahead + 1));
      prefetch_until(nbp, reinterpret_cast<uintptr_t>(wb + b + ahead + 1));
      acc_a = add_block(unpack(wa[b]), wa[b].d, x[b], xt[b], acc_a);
      acc_b = add_block(unpack(wb[b]), wb[b].d, x[b], xt[b], acc_b);
    }
  }
  _mm512_storeu_ps(oa, acc_a);
  _mm512_storeu_ps(ob, acc_b);
}

HOTCOLD_VNNI void dot16r_q4_0(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, int64_t n, float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, xt, n / qk4_0, every_block{}, out); });
}
HOTCOLD_VNNI void dot16r_q4_0_at(const block_q4_0x16* w, const block_q8_0* const* x, const q8_0_terms* const* xt, int nx, const int32_t* blocks, int64_t count,
                                 float* out) {
  for_vector_count(nx, [&](auto k) { dot16r<decltype(k)::value>(w, x, xt, count, listed_blocks{blocks}, out); });
}
// Two groups against one vector over the listed blocks (a sparse layer's down product: the blocks of
// neurons where some value is not zero), both streams at once.
HOTCOLD_VNNI void dot16r2_q4_0_at(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, const int32_t* blocks, int64_t count,
                                  float* oa, float* ob) {
  __m512 acc_a = _mm512_setzero_ps(), acc_b = _mm512_setzero_ps();
  for (int64_t k = 0; k < count; ++k) {
    const int64_t b = blocks[k];
    acc_a = add_block(unpack(wa[b]), wa[b].d, x[b], xt[b], acc_a);
    acc_b = add_block(unpack(wb[b]), wb[b].d, x[b], xt[b], acc_b);
  }
  _mm512_storeu_ps(oa, acc_a);
  _mm512_storeu_ps(ob, acc_b);
}

}  // namespace avx512vnni

HOTCOLD_AVX512_END

namespace {
// Two groups as one after the other (the same sums), where the CPU has no two-stream version.
void dot16r2_q4_0_as_two(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, int64_t n, float* oa, float* ob) {
  cpu_kernels().dot16r_q4_0(wa, &x, &xt, 1, n, oa);
  cpu_kernels().dot16r_q4_0(wb, &x, &xt, 1, n, ob);
}
void dot16r2_q4_0_at_as_two(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, const int32_t* blocks, int64_t count,
                            float* oa, float* ob) {
  cpu_kernels().dot16r_q4_0_at(wa, &x, &xt, 1, blocks, count, oa);
  cpu_kernels().dot16r_q4_0_at(wb, &x, &xt, 1, blocks, count, ob);
}
void dot16r2_q4_0_vnni(const block_q4_0x16* wa, const block_q4_0x16* wb, const block_q8_0* x, const q8_0_terms* xt, int64_t n, float* oa, float* ob) {
  avx512vnni::dot16r2_q4_0(wa, wb, x, xt, n / qk4_0, oa, ob);
}
}  // namespace

void choose_q4_0x16_kernels(kernel_table& k, const cpu_features& f) {
  k.dot16r_q4_0 = f.vnni ? avx512vnni::dot16r_q4_0 : f.avx2 ? avx2::dot16r_q4_0 : scalar::dot16r_q4_0;
  k.dot16r2_q4_0 = f.vnni ? dot16r2_q4_0_vnni : dot16r2_q4_0_as_two;
  k.dot16r_q4_0_at = f.vnni ? avx512vnni::dot16r_q4_0_at : f.avx2 ? avx2::dot16r_q4_0_at : scalar::dot16r_q4_0_at;
  k.dot16r2_q4_0_at = f.vnni ? avx512vnni::dot16r2_q4_0_at : dot16r2_q4_0_at_as_two;
}

}  // namespace hotcold::kernels
