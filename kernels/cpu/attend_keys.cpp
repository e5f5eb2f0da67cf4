// Decode attention over a range of keys for every head of one token (attention.hpp, attend_keys),
// the range's sums kept apart so that ranges computed by different threads merge exactly as one
// softmax would (each range's own maximum, rescaled to the common one at the merge).
//
// The cache holds a position's keys of every KV head side by side in one row. Head by head, decode
// read 2 of every 16 lines of each row a pass (128 bytes of a 1 KB row at 8 KV heads of 64), and the
// grouped query heads read the same slice again. Here the scores go tile by tile: a few keys' slice
// of one KV head widened to floats once and met by up to four of its query heads (sixteen dot
// products folded into one vector), the keys' rows read in order (every KV head of them before the
// next keys); then a block of 64 keys' softmax per head, online (the running maximum and sum
// rescaled as they grow); then the values, each KV head's slice of the block's rows added into its
// heads' sums held in registers, the value rows asked for into L2 a block ahead and the key rows a
// few tiles ahead (the hardware's prefetch does not follow a slice at a time). Every cache type reads
// through the same kernel: a reader per type widens sixteen values as it loads them. Keys kept in
// tiles of sixteen positions (kv_rows.hpp) skip the folds: F16 and F32 ones here, Q8_0 ones in
// attend_keys_q8_0.cpp; the passes both share are attend_keys_avx512.hpp's.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/cpu/attend_keys_avx512.hpp"
#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/simd_helpers.hpp"

namespace hotcold::kernels {

namespace {
// Key rows asked for this many keys ahead of the tile being scored, a tile's worth each step (16
// layers x 2,000 keys, one thread, four interleaved rounds: F16 9.33 -> 8.91 ms, Q8_0 8.24 -> 7.58,
// Q4_0 7.97 -> 7.53 against the next block's keys asked for all at once; 16 and 64 no better).
constexpr int64_t key_ahead = 32;

inline float elem(const float* p, int64_t i) { return p[i]; }
inline float elem(const uint16_t* p, int64_t i) { return fp16_to_fp32(p[i]); }
}  // namespace

int64_t attend_keys_scratch(int64_t n_head, int64_t) { return n_head * block_keys; }

namespace scalar {

// The reference: key by key, each head's running maximum, its sum and its weighted values (in double),
// rescaled whenever the maximum grows.
template <typename T>
static void attend_keys_t(const float* q, const T* k, const T* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                          float scale, key_range_sums out, float*) {
  const int64_t group = n_head / n_kv;
  std::vector<double> o(static_cast<size_t>(hd));
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t at = h / group * hd;
    const float* qh = q + h * hd;
    double m = -INFINITY, l = 0;
    std::fill(o.begin(), o.end(), 0.0);
    for (int64_t t = t0; t < t1; ++t) {
      double dot = 0;
      for (int64_t e = 0; e < hd; ++e) dot += static_cast<double>(qh[e]) * elem(k, t * stride + at + e);
      const double s = dot * scale, m_new = std::max(m, s);
      const double c = m == -INFINITY ? 0.0 : std::exp(m - m_new), p = std::exp(s - m_new);
      l = l * c + p;
      for (int64_t e = 0; e < hd; ++e) o[static_cast<size_t>(e)] = o[static_cast<size_t>(e)] * c + p * elem(v, t * stride + at + e);
      m = m_new;
    }
    out.m[h] = static_cast<float>(m), out.l[h] = static_cast<float>(l);
    for (int64_t e = 0; e < hd; ++e) out.o[h * hd + e] = static_cast<float>(o[static_cast<size_t>(e)]);
  }
}

void attend_keys(const float* q, const float* k, const float* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                 float scale, key_range_sums out, float* scratch) {
  attend_keys_t(q, k, v, stride, n_head, n_kv, hd, t0, t1, scale, out, scratch);
}
void attend_keys(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                 int64_t t1, float scale, key_range_sums out, float* scratch) {
  attend_keys_t(q, k, v, stride, n_head, n_kv, hd, t0, t1, scale, out, scratch);
}

}  // namespace scalar

namespace {

// Without AVX-512 (or a head size its kernel does not take): head by head over the range, a block of
// 64 keys' scores through the dispatched row kernels (AVX2's where the CPU has it), the block's
// softmax folded into the head's running maximum and sum, its values added with axpy.
template <typename T>
void attend_keys_rows(const float* q, const T* k, const T* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                      float scale, key_range_sums out, float* scratch) {
  const int64_t group = n_head / n_kv;
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t at = h / group * hd;
    const float* qh = q + h * hd;
    float* o = out.o + h * hd;
    std::fill(o, o + hd, 0.0f);
    float m = -INFINITY;
    double l = 0;
    for (int64_t b0 = t0; b0 < t1; b0 += block_keys) {
      const int64_t b1 = std::min(t1, b0 + block_keys);
      float bm = -INFINITY;
      for (int64_t t = b0; t < b1; ++t) {
        const T* kr = k + t * stride + at;
        const float sc = (std::is_same_v<T, float> ? dot_f32(reinterpret_cast<const float*>(kr), qh, hd)
                                                   : dot_f16(reinterpret_cast<const uint16_t*>(kr), qh, hd)) * scale;
        scratch[t - b0] = sc;
        bm = std::max(bm, sc);
      }
      if (bm > m) {  // the sums so far rescaled to the new maximum
        if (m != -INFINITY) {
          const float c = std::exp(m - bm);
          l *= c;
          for (int64_t e = 0; e < hd; ++e) o[e] *= c;
        }
        m = bm;
      }
      for (int64_t t = b0; t < b1; ++t) {
        const float p = std::exp(scratch[t - b0] - m);
        l += p;
        const T* vr = v + t * stride + at;
        if constexpr (std::is_same_v<T, float>) axpy_f32(p, vr, o, hd);
        else axpy_f16(p, vr, o, hd);
      }
    }
    out.m[h] = m, out.l[h] = static_cast<float>(l);
  }
}

}  // namespace
HOTCOLD_AVX512_BEGIN
namespace avx512 {

// Scores of NK = 16 / NH keys from b (those before t1; the rest repeat the last) against heads h0 ..
// h0 + NH - 1 of one KV head (values at .. at + hd - 1 of each row): an NH x NK tile of dot products,
// each key's slice widened once and met by the NH queries, the sixteen partial sums folded into one
// vector whose lane r * NH + j is key r's score for head j.
template <int NH, typename R>
HOTCOLD_AVX512 static inline void score_tile(const float* q, const R& k, int64_t at, int64_t hd, int64_t b, int64_t t1, int64_t h0, __m512 sc, float* s,
                                             int64_t col) {
  constexpr int NK = 16 / NH;
  decltype(k.row(0)) rows[NK];
  for (int r = 0; r < NK; ++r) rows[r] = k.row(std::min(b + r, t1 - 1));
  __m512 acc[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t e = 0; e < hd; e += 16) {
    __m512 qv[NH];
#pragma GCC unroll 8
    for (int j = 0; j < NH; ++j) qv[j] = _mm512_loadu_ps(q + (h0 + j) * hd + e);
#pragma GCC unroll 16
    for (int r = 0; r < NK; ++r) {
      const __m512 kr = k.load(rows[r], at + e);
#pragma GCC unroll 8
      for (int j = 0; j < NH; ++j) acc[r * NH + j] = _mm512_fmadd_ps(kr, qv[j], acc[r * NH + j]);
    }
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_mul_ps(reduce16(acc), sc));
  const int64_t n = std::min<int64_t>(NK, t1 - b);
  for (int j = 0; j < NH; ++j)
    for (int64_t r = 0; r < n; ++r) s[(h0 + j) * block_keys + col + r] = lanes[r * NH + j];
}

// Every head's scores of keys b0 .. b0 + n - 1 into s[h * block_keys + ...]: tiles of sixteen dot
// products, a KV head's heads four (or two, or one) at a time, the keys' rows read in order (all of a
// tile's KV heads before the next keys).
// Meanwhile the value rows v_next .. v_end are asked for into L2, spread over the tiles: the values
// are read a KV head's slice at a time, which the hardware's prefetch does not follow; and the key
// rows key_ahead keys on (before k_end), a tile's worth a step.
template <typename RK, typename RV>
HOTCOLD_AVX512 static void scores_of(const float* q, const RK& k, const RV& v, int64_t n_head, int64_t n_kv, int64_t hd, int64_t b0, int64_t n, float scale,
                                     float* s, int64_t v_next, int64_t v_end, int64_t k_end) {
  const int64_t group = n_head / n_kv;
  const int nh = heads_at_once(group);
  const int64_t nk = 16 / nh;
  const __m512 sc = _mm512_set1_ps(scale);
  const int64_t per_step = (v_end - v_next + n / nk) / std::max<int64_t>(1, n / nk);  // value rows asked for a step of nk keys
  for (int64_t b = b0; b < b0 + n; b += nk) {
    prefetch_rows(v, v_next, std::min(v_next + per_step, v_end));
    v_next = std::min(v_next + per_step, v_end);
    prefetch_rows(k, std::min(b + key_ahead, k_end), std::min(b + key_ahead + nk, k_end));  // the keys a few tiles on
    for (int64_t g = 0; g < n_kv; ++g)
      for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += nh) {
        if (nh == 4) score_tile<4>(q, k, g * hd, hd, b, b0 + n, h0, sc, s, b - b0);
        else if (nh == 2) score_tile<2>(q, k, g * hd, hd, b, b0 + n, h0, sc, s, b - b0);
        else score_tile<1>(q, k, g * hd, hd, b, b0 + n, h0, sc, s, b - b0);
      }
  }
}

template <typename RK, typename RV>
HOTCOLD_AVX512 static void attend_rows(const float* q, const RK& k, const RV& v, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                                       float scale, key_range_sums out, float* scratch) {
  float* s = scratch;  // [n_head][block_keys]: a block's scores, then weights
  clear_key_range(out, n_head, hd);
  for (int64_t b0 = t0; b0 < t1; b0 += block_keys) {
    const int64_t n = std::min(block_keys, t1 - b0);
    if (b0 == t0) prefetch_rows(v, b0, b0 + n);  // (the first block's values at once; each later one's a block ahead)
    const int64_t next = std::min(b0 + n + block_keys, t1);
    if (b0 == t0) prefetch_rows(k, b0, std::min(b0 + key_ahead, t1));
    scores_of(q, k, v, n_head, n_kv, hd, b0, n, scale, s, b0 + n, next, t1);
    line_feed none;  // (the rows' own prefetches)
    weigh_values(v, n_head, n_kv, hd, b0, n, s, out, none);
  }
}

template <typename T>
HOTCOLD_AVX512 static void attend_keys(const float* q, const T* k, const T* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                                       int64_t t1, float scale, key_range_sums out, float* scratch) {
  const int64_t bytes = n_kv * hd * static_cast<int64_t>(sizeof(T));
  attend_rows(q, plain_rows<T>{k, stride, bytes}, plain_rows<T>{v, stride, bytes}, n_head, n_kv, hd, t0, t1, scale, out, scratch);
}

static void attend_keys_typed(const float* q, kv_types t, const uint8_t* k, const uint8_t* v, int64_t k_row_bytes, int64_t v_row_bytes, int64_t n_head,
                              int64_t n_kv, int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch) {
  with_rows(t.k, k, k_row_bytes, n_kv * hd, [&](const auto& kr) {
    with_rows(t.v, v, v_row_bytes, n_kv * hd, [&](const auto& vr) { attend_rows(q, kr, vr, n_head, n_kv, hd, t0, t1, scale, out, scratch); });
  });
}

// Keys in tiles (kv_rows.hpp): heads h0 .. h0 + NH - 1 of KV head g against one tile's sixteen keys,
// each of the query's values broadcast against the sixteen keys' values of its dim (two dims a step,
// two chains of sums): sixteen scores a head in one vector, stored at s[(h0 + j) * block_keys].
template <int NH, typename TK>
HOTCOLD_AVX512 static inline void tile_scores(const float* q, const TK* tile, int64_t hd, int64_t g, int64_t h0, __m512 sc, float* s, line_feed& feed) {
  const TK* kt = tile + g * hd * 16;
  __m512 acc[NH], acc2[NH];
  for (int j = 0; j < NH; ++j) acc[j] = _mm512_setzero_ps(), acc2[j] = _mm512_setzero_ps();
  for (int64_t e = 0; e < hd; e += 2) {
    if (e % 8 == 0) feed.step();
    const __m512 k0 = load16(kt + e * 16), k1 = load16(kt + (e + 1) * 16);
#pragma GCC unroll 4
    for (int j = 0; j < NH; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[(h0 + j) * hd + e]), k0, acc[j]);
      acc2[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[(h0 + j) * hd + e + 1]), k1, acc2[j]);
    }
  }
  for (int j = 0; j < NH; ++j) _mm512_storeu_ps(s + (h0 + j) * block_keys, _mm512_mul_ps(_mm512_add_ps(acc[j], acc2[j]), sc));
}

// Every head's scores of a tile's sixteen keys (F16 or F32 tiles): each KV head's heads four (or two, or
// one) at a time.
template <typename TK>
struct float_tile_scores {
  const float* q;
  int64_t n_head, n_kv, hd;
  float scale;
  int64_t steps_a_tile() const { return n_head / heads_at_once(n_head / n_kv) * ((hd + 7) / 8); }
  HOTCOLD_AVX512 void operator()(const uint8_t* bytes, float* s, line_feed& feed) const {
    const TK* tile = reinterpret_cast<const TK*>(bytes);
    const __m512 sc = _mm512_set1_ps(scale);
    const int64_t group = n_head / n_kv;
    const int nh = heads_at_once(group);
    for (int64_t g = 0; g < n_kv; ++g)
      for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += nh) {
        if (nh == 4) tile_scores<4>(q, tile, hd, g, h0, sc, s, feed);
        else if (nh == 2) tile_scores<2>(q, tile, hd, g, h0, sc, s, feed);
        else tile_scores<1>(q, tile, hd, g, h0, sc, s, feed);
      }
  }
};

static void attend_key_tiles(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv,
                             int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch) {
  const int64_t width = n_kv * hd;
  with_rows(t.v, v, v_row_bytes, width, [&](const auto& vr) {
    if (t.k == tensor_type::f16)
      attend_tiles(float_tile_scores<uint16_t>{q, n_head, n_kv, hd, scale}, k_tiles, width * 32, vr, n_head, n_kv, hd, t0, t1, out, scratch);
    else attend_tiles(float_tile_scores<float>{q, n_head, n_kv, hd, scale}, k_tiles, width * 64, vr, n_head, n_kv, hd, t0, t1, out, scratch);
  });
}

// Sixteen vectors transposed in place: r[c] lane i becomes r[i] lane c (unpacks within 128-bit lanes,
// then whole 128-bit lanes moved).
HOTCOLD_AVX512 static inline void transpose16(__m512 (&r)[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]), t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  for (int i = 0; i < 4; ++i) {  // r[4i + j], 128-bit lane L: rows 4i .. 4i + 3 of column 4L + j
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]), c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c)), r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d)), r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88), t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88), r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
    r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88), r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
  }
}

// F16 keys in tiles widened into rows: sixteen dims of a tile's sixteen positions at a time, transposed.
HOTCOLD_AVX512 static void widen_key_tiles(const uint16_t* tiles, int64_t width, int64_t pos, int64_t n, int64_t at, int64_t cols, float* out) {
  for (int64_t p0 = pos - pos % 16; p0 < pos + n; p0 += 16) {
    const uint16_t* tile = tiles + (p0 / 16) * width * 16;
    const int64_t first = std::max(p0, pos) - p0, last = std::min(p0 + 16, pos + n) - p0;
    for (int64_t c = 0; c < cols; c += 16) {
      __m512 r[16];
      for (int i = 0; i < 16; ++i) r[i] = load16(tile + (at + c + i) * 16);
      transpose16(r);
      for (int64_t p = first; p < last; ++p) _mm512_storeu_ps(out + (p0 + p - pos) * cols + c, r[p]);
    }
  }
}

}  // namespace avx512
HOTCOLD_AVX512_END

void choose_attend_keys_kernels(kernel_table& k, const cpu_features& f) {
  if (!f.avx512) return;  // (null: the scalar reference)
  k.attend_keys_f32 = avx512::attend_keys, k.attend_keys_f16 = avx512::attend_keys;
  k.attend_keys_typed = avx512::attend_keys_typed;
  k.attend_key_tiles = avx512::attend_key_tiles;
  if (f.vnni) k.attend_q8_0_key_tiles = avx512::attend_q8_0_key_tiles;
  k.widen_key_tiles = avx512::widen_key_tiles;
}

void attend_keys(const float* q, const float* k, const float* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0, int64_t t1,
                 float scale, key_range_sums out, float* scratch) {
  if (attend_block_vectorized(hd)) return cpu_kernels().attend_keys_f32(q, k, v, stride, n_head, n_kv, hd, t0, t1, scale, out, scratch);
  attend_keys_rows(q, k, v, stride, n_head, n_kv, hd, t0, t1, scale, out, scratch);
}
void attend_keys(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n_head, int64_t n_kv, int64_t hd, int64_t t0,
                 int64_t t1, float scale, key_range_sums out, float* scratch) {
  if (attend_block_vectorized(hd)) return cpu_kernels().attend_keys_f16(q, k, v, stride, n_head, n_kv, hd, t0, t1, scale, out, scratch);
  attend_keys_rows(q, k, v, stride, n_head, n_kv, hd, t0, t1, scale, out, scratch);
}

void clear_key_range(key_range_sums out, int64_t n_head, int64_t hd) {
  std::fill(out.m, out.m + n_head, -INFINITY);
  std::fill(out.l, out.l + n_head, 0.0f);
  std::fill(out.o, out.o + n_head * hd, 0.0f);
}

void merge_key_ranges(const key_range_sums* parts, int n, int64_t n_head, int64_t hd, float* out) {
  for (int64_t h = 0; h < n_head; ++h) {
    float m = -INFINITY;
    for (int r = 0; r < n; ++r) m = std::max(m, parts[r].m[h]);
    double l = 0;
    float* o = out + h * hd;
    std::fill(o, o + hd, 0.0f);
    for (int r = 0; r < n; ++r) {
      if (parts[r].m[h] == -INFINITY) continue;  // (an empty range)
      const float c = std::exp(parts[r].m[h] - m);
      l += static_cast<double>(c) * parts[r].l[h];
      const float* po = parts[r].o + h * hd;
      for (int64_t e = 0; e < hd; ++e) o[e] += c * po[e];
    }
    const float inv = static_cast<float>(1.0 / l);
    for (int64_t e = 0; e < hd; ++e) o[e] *= inv;
  }
}

}  // namespace hotcold::kernels
