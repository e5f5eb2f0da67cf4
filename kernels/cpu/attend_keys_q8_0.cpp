// Decode attention over Q8_0 keys in tiles, Q8_0 values summed in integers (VNNI): the integer dot
// products llama.cpp's CPU attention takes with Q8_0 keys, over the tiles' layout (kv_rows.hpp), and
// the values' weighted sums as 16-bit products (attend_keys_avx512.hpp's passes around them).
#include <cstring>

#include "kernels/cpu/attend_keys_avx512.hpp"
#include "kernels/cpu/kv_rows.hpp"

namespace hotcold::kernels {

HOTCOLD_AVX512_BEGIN
namespace avx512 {

// Positions t and t + 1 (rows r0 and r1, blocks 0 .. NB - 1 from where they point) into the sums of
// q8_0_int_values_t: the two rows' quants widened and interleaved dim by dim, met by each head's
// two weights.
template <int NH, int NB>
HOTCOLD_VNNI static inline __attribute__((always_inline)) void q8_0_value_pair(const block_q8_0* r0, const block_q8_0* r1,
                                                                               const int16_t (&wq)[NH][NB][block_keys + 16], int64_t t,
                                                                               __m512i (&lo)[NH][NB], __m512i (&hi)[NH][NB]) {
#pragma GCC unroll 2
  for (int k = 0; k < NB; ++k) {
    const __m512i a = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r0[k].qs)));
    const __m512i c = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r1[k].qs)));
    const __m512i pairs_lo = _mm512_unpacklo_epi16(a, c), pairs_hi = _mm512_unpackhi_epi16(a, c);
#pragma GCC unroll 4
    for (int j = 0; j < NH; ++j) {
      int32_t two;
      std::memcpy(&two, wq[j][k] + t, 4);
      const __m512i wt = _mm512_set1_epi32(two);
      lo[j][k] = _mm512_dpwssd_epi32(lo[j][k], pairs_lo, wt);
      hi[j][k] = _mm512_dpwssd_epi32(hi[j][k], pairs_hi, wt);
    }
  }
}

// Q8_0 values summed in integers, as its keys' dot products are: heads h0 .. h0 + NH - 1 of a KV head
// (values at .. at + hd - 1 of each row) take a block's n weighted value rows, block of 32 dims by
// block. Each head's weights times the rows' scales of the block are rounded to 15-bit integers
// against their largest (an error under 2^-15 of it, where the values' own rounding is 2^-8 of
// theirs); two positions' quants, widened to 16 bits and interleaved dim by dim, meet a head's two
// weights in one VNNI product of sixteen dims; the sums are scaled back to floats once a block.
template <int NH, int NB>
HOTCOLD_VNNI static void q8_0_int_values_t(const q8_0_rows& v, int64_t b0, int64_t at, int64_t first, int64_t n, int64_t h0, int64_t hd, const float* s,
                                           const float* rescale, float* o, line_feed& feed) {
  // Blocks b0 .. b0 + NB - 1 of the rows (dims at .. of the heads' sums). Where the interleaving leaves
  // a block's dims: 128-bit lane L of the low pairs' sums holds dims 8L .. 8L + 3, of the high pairs'
  // 8L + 4 .. 8L + 7; the permutes put dims 0-15 and 16-31 back in order.
  const __m512i dims_lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i dims_hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  alignas(64) uint16_t d16[NB][block_keys];
  alignas(64) int16_t wq[NH][NB][block_keys + 16];
  float unit[NH][NB];  // what a weight's integer 1 stands for
  for (int64_t t = 0; t < n; ++t) {
    const block_q8_0* row = reinterpret_cast<const block_q8_0*>(v.row(first + t)) + b0;
    for (int k = 0; k < NB; ++k) d16[k][t] = row[k].d;
  }
  for (int k = 0; k < NB; ++k)
    for (int j = 0; j < NH; ++j) {
      const float* p = s + (h0 + j) * block_keys;
      __m512 wf[block_keys / 16];
      __m512 mx = _mm512_setzero_ps();
      for (int64_t i = 0; i * 16 < n; ++i) {
        const int64_t t = i * 16;
        const __mmask16 valid = n - t >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - t)) - 1);
        const __m512 d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d16[k] + t)));
        wf[i] = _mm512_maskz_mul_ps(valid, _mm512_maskz_loadu_ps(valid, p + t), d);
        mx = _mm512_max_ps(mx, wf[i]);
      }
      const float top = _mm512_reduce_max_ps(mx);
      unit[j][k] = top / 32767.0f;
      const __m512 inv = _mm512_set1_ps(top > 0 ? 32767.0f / top : 0.0f);
      for (int64_t i = 0; i * 16 < n; ++i)
        _mm256_store_si256(reinterpret_cast<__m256i*>(wq[j][k] + i * 16), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(wf[i], inv))));
      wq[j][k][n] = 0;  // (an odd n's last pair: its second row is the first again, weighed 0)
    }
  __m512i lo[NH][NB], hi[NH][NB];
  for (int j = 0; j < NH; ++j)
    for (int k = 0; k < NB; ++k) lo[j][k] = _mm512_setzero_si512(), hi[j][k] = _mm512_setzero_si512();
  const uint8_t* row = reinterpret_cast<const uint8_t*>(v.row(first)) + b0 * static_cast<int64_t>(sizeof(block_q8_0));
  const int64_t stride = v.stride;
  int64_t t = 0;
  for (; t + 1 < n; t += 2, row += 2 * stride) {
    feed.step();
    q8_0_value_pair<NH, NB>(reinterpret_cast<const block_q8_0*>(row), reinterpret_cast<const block_q8_0*>(row + stride), wq, t, lo, hi);
  }
  if (t < n) q8_0_value_pair<NH, NB>(reinterpret_cast<const block_q8_0*>(row), reinterpret_cast<const block_q8_0*>(row), wq, t, lo, hi);  // (the second weighed 0)
  for (int j = 0; j < NH; ++j)
    for (int k = 0; k < NB; ++k) {
      float* out = o + (h0 + j) * hd + at + 32 * k;
      const __m512 u = _mm512_set1_ps(unit[j][k]), r = _mm512_set1_ps(rescale[j]);
      const __m512 fl = _mm512_cvtepi32_ps(lo[j][k]), fh = _mm512_cvtepi32_ps(hi[j][k]);
      _mm512_storeu_ps(out, _mm512_fmadd_ps(_mm512_permutex2var_ps(fl, dims_lo, fh), u, _mm512_mul_ps(_mm512_loadu_ps(out), r)));
      _mm512_storeu_ps(out + 16, _mm512_fmadd_ps(_mm512_permutex2var_ps(fl, dims_hi, fh), u, _mm512_mul_ps(_mm512_loadu_ps(out + 16), r)));
    }
}
template <int NH>
HOTCOLD_VNNI static void q8_0_int_values_heads(const q8_0_rows& v, int64_t at, int64_t hd, int64_t first, int64_t n, int64_t h0, const float* s,
                                               const float* rescale, float* o, line_feed& feed) {
  for (int64_t e = 0; e < hd; e += 64) {  // two blocks a pass (sixteen sums in registers for four heads)
    if (hd - e >= 64) q8_0_int_values_t<NH, 2>(v, (at + e) / 32, e, first, n, h0, hd, s, rescale, o, feed);
    else q8_0_int_values_t<NH, 1>(v, (at + e) / 32, e, first, n, h0, hd, s, rescale, o, feed);
  }
}
HOTCOLD_VNNI void q8_0_int_values(const q8_0_rows& v, int64_t at, int64_t hd, int64_t first, int64_t n, int64_t h0, int nh, const float* s,
                                         const float* rescale, float* o, line_feed& feed) {
  if (nh == 4) q8_0_int_values_heads<4>(v, at, hd, first, n, h0, s, rescale, o, feed);
  else if (nh == 3) q8_0_int_values_heads<3>(v, at, hd, first, n, h0, s, rescale, o, feed);
  else if (nh == 2) q8_0_int_values_heads<2>(v, at, hd, first, n, h0, s, rescale, o, feed);
  else q8_0_int_values_heads<1>(v, at, hd, first, n, h0, s, rescale, o, feed);
}

// The query as Q8_0 blocks meets Q8_0 keys in tiles (kv_rows.hpp) in integer dot products, as
// llama.cpp's do: a block's quants of sixteen keys, four dims each in a 32-bit lane, against a head's
// four quants broadcast (VNNI's unsigned-by-signed products: the keys biased by 128, which adds 128
// times the sum of the query block's quants, taken off again), each block's sums scaled by the keys'
// scales and the query block's. The query's quants, scales and 128 x sums: qs[h * hd + e], d[h * nb +
// b], bias[h * nb + b] (nb = hd / 32).
struct q8_0_tile_scores {
  const int8_t* qs;
  const float* d;
  const int32_t* bias;
  int64_t n_head, n_kv, hd, width;
  float scale;
  template <int NH>
  HOTCOLD_VNNI void heads(const uint8_t* tile, int64_t g, int64_t h0, float* s, line_feed& feed) const {
    const int64_t nb = hd / 32;
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    __m512 acc[NH];
    for (int j = 0; j < NH; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t kb = g * nb + b;  // the block among the tile's
      const uint8_t* quads = tile + q8_0_quads_at(0, kb, 0);
      __m512i sums[2][NH];  // (two chains a head: even and odd runs of four dims)
      for (int j = 0; j < NH; ++j) sums[0][j] = sums[1][j] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        if (i % 4 == 0) feed.step();
        const __m512i k = _mm512_xor_si512(_mm512_loadu_si512(quads + 64 * i), flip);
        for (int j = 0; j < NH; ++j) {
          int32_t four;
          std::memcpy(&four, qs + (h0 + j) * hd + b * 32 + 4 * i, 4);
          sums[i % 2][j] = _mm512_dpbusd_epi32(sums[i % 2][j], k, _mm512_set1_epi32(four));
        }
      }
      const __m512 kd = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + q8_0_scales_at(kb, width))));
      for (int j = 0; j < NH; ++j) {
        const int64_t at = (h0 + j) * nb + b;
        const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_add_epi32(sums[0][j], sums[1][j]), _mm512_set1_epi32(bias[at])));
        acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(dot, kd), _mm512_set1_ps(d[at]), acc[j]);
      }
    }
    for (int j = 0; j < NH; ++j) _mm512_storeu_ps(s + (h0 + j) * block_keys, _mm512_mul_ps(acc[j], _mm512_set1_ps(scale)));
  }
  int64_t steps_a_tile() const { return n_head / heads_at_once(n_head / n_kv) * (hd / 32) * 2; }
  HOTCOLD_VNNI void operator()(const uint8_t* tile, float* s, line_feed& feed) const {
    const int64_t group = n_head / n_kv;
    const int nh = heads_at_once(group);
    for (int64_t g = 0; g < n_kv; ++g)
      for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += nh) {
        if (nh == 4) heads<4>(tile, g, h0, s, feed);
        else if (nh == 2) heads<2>(tile, g, h0, s, feed);
        else heads<1>(tile, g, h0, s, feed);
      }
  }
};

// Over Q8_0 keys in tiles: the query quantized again into its blocks (q as round_to_q8_0 left it: the
// same quants and scales), after the scores in the scratch.
void attend_q8_0_key_tiles(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head,
                                  int64_t n_kv, int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch) {
  const int64_t width = n_kv * hd, nb = hd / 32;
  float* d = scratch + attend_keys_scratch(n_head, hd);
  int32_t* bias = reinterpret_cast<int32_t*>(d + n_head * nb);
  int8_t* qs = reinterpret_cast<int8_t*>(bias + n_head * nb);
  block_q8_0 blocks[8];
  for (int64_t b0 = 0; b0 < n_head * nb; b0 += 8) {
    const int64_t nq = std::min<int64_t>(8, n_head * nb - b0);
    quantize_row_q8_0(q + b0 * 32, blocks, nq * 32);
    for (int64_t b = 0; b < nq; ++b) {
      d[b0 + b] = fp16_to_fp32(blocks[b].d);
      int32_t sum = 0;
      for (int i = 0; i < 32; ++i) sum += blocks[b].qs[i];
      bias[b0 + b] = 128 * sum;
      std::memcpy(qs + (b0 + b) * 32, blocks[b].qs, 32);
    }
  }
  const q8_0_tile_scores score{qs, d, bias, n_head, n_kv, hd, width, scale};
  with_rows(t.v, v, v_row_bytes, width, [&](const auto& vr) { attend_tiles(score, k_tiles, q8_0_tile_bytes(width), vr, n_head, n_kv, hd, t0, t1, out, scratch); });
}

}  // namespace avx512
HOTCOLD_AVX512_END

}  // namespace hotcold::kernels
