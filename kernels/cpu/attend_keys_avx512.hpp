#pragma once
// The parts of the decode attention kernels (AVX-512) that attend_keys.cpp (rows, and F16/F32 keys in
// tiles) and attend_keys_q8_0.cpp (Q8_0 keys in tiles, Q8_0 values in integers, VNNI) share: the cache
// readers, the block's softmax, the values' pass, and the pass over keys in tiles. Internal to those
// two files.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"
#include "kernels/cpu/simd_helpers.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::kernels {

inline constexpr int64_t block_keys = 64;  // keys whose scores a pass keeps (every head's, in the scratch)
// How many of a KV head's `group` query heads a score pass takes at once: four, two or one, as they divide it.
inline int heads_at_once(int64_t group) { return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1; }

HOTCOLD_AVX512_BEGIN
namespace avx512 {

HOTCOLD_AVX512 static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
HOTCOLD_AVX512 static inline __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// A cache's rows as the kernel reads them, one reader per type: row(t) where position t's row starts,
// load(row, i) its values i .. i + 15 widened to floats (i a multiple of 16: Q8_0 and Q4_0 blocks of
// 32 hold two such runs, each scaled by its block's half), `bytes` a row's length (what is prefetched).
template <typename T>
struct plain_rows {
  const T* p;
  int64_t stride;  // elements from one row to the next
  int64_t bytes;
  const T* row(int64_t t) const { return p + t * stride; }
  HOTCOLD_AVX512 __m512 load(const T* row, int64_t i) const { return load16(row + i); }
};
struct block_rows {  // rows of blocks, `stride` bytes apart
  const uint8_t* p;
  int64_t stride, bytes;
  const uint8_t* row(int64_t t) const { return p + t * stride; }
};
struct q8_0_rows : block_rows {
  HOTCOLD_AVX512 __m512 load(const uint8_t* row, int64_t i) const {
    const block_q8_0* b = reinterpret_cast<const block_q8_0*>(row) + i / 32;
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + i % 32))));
    return _mm512_mul_ps(q, _mm512_set1_ps(_cvtsh_ss(b->d)));
  }
};
struct q4_0_rows : block_rows {
  HOTCOLD_AVX512 __m512 load(const uint8_t* row, int64_t i) const {
    const block_q4_0* b = reinterpret_cast<const block_q4_0*>(row) + i / 32;
    const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));  // values j and j + 16 in byte j
    const __m512i nibbles = i % 32 ? _mm512_srli_epi32(q, 4) : _mm512_and_si512(q, _mm512_set1_epi32(15));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(nibbles, _mm512_set1_epi32(8))), _mm512_set1_ps(_cvtsh_ss(b->d)));
  }
};

// Q8_0 rows whose values a CPU with VNNI sums in integers (q8_0_int_values).
struct q8_0_int_rows : q8_0_rows {};

// A region of memory asked for into L2 a few lines at a time, spread over a pass's work (a block's
// lines asked for at once fill the core's queue of misses and stall the loads beside them): aimed at
// `bytes` from `from` over about `steps` steps, then step() at each; rest() asks for what is left.
struct line_feed {
  const char* p = nullptr;
  const char* end = nullptr;
  int per_step = 0;
  void aim(const void* from, int64_t bytes, int64_t steps) {
    p = static_cast<const char*>(from), end = p + std::max<int64_t>(0, bytes);
    per_step = static_cast<int>(std::max<int64_t>(1, (bytes / 64 + steps - 1) / std::max<int64_t>(1, steps)));
  }
  void step() {
    for (int i = 0; i < per_step && p < end; ++i, p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
  void rest() {
    for (; p < end; p += 64) _mm_prefetch(p, _MM_HINT_T1);
  }
};

// Rows first .. last - 1 asked for into L2, every line.
template <typename R>
HOTCOLD_AVX512 static inline void prefetch_rows(const R& rows, int64_t first, int64_t last) {
  for (int64_t t = first; t < last; ++t) {
    const char* row = reinterpret_cast<const char*>(rows.row(t));
    for (int64_t b = 0; b < rows.bytes; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
  }
}

// Head h's running sums taken past a block's n scores (s, replaced by their weights): the block's
// maximum joins the running one, what was summed before is rescaled to it. Returns the rescale.
HOTCOLD_AVX512 static float softmax_block(float* s, int64_t n, float& m, float& l) {
  __m512 mx = _mm512_set1_ps(m);
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 valid = n - t >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - t)) - 1);
    mx = _mm512_mask_max_ps(mx, valid, mx, _mm512_maskz_loadu_ps(valid, s + t));
  }
  const float m_new = _mm512_reduce_max_ps(mx);
  const float rescale = m == -INFINITY ? 0.0f : std::exp(m - m_new);
  const __m512 mb = _mm512_set1_ps(m_new);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; t += 16) {
    const __mmask16 valid = n - t >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - t)) - 1);
    const __m512 p = _mm512_maskz_mov_ps(valid, exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(valid, s + t), mb)));
    _mm512_mask_storeu_ps(s + t, valid, p);
    sum = _mm512_add_ps(sum, p);
  }
  m = m_new;
  l = l * rescale + _mm512_reduce_add_ps(sum);
  return rescale;
}

// Heads h0 .. h0 + NH - 1 (one KV head's, values at .. at + hd - 1 of each row), dims e0 .. e0 + 16 NV:
// their sums rescaled, then a block's n weighted value rows added.
template <int NH, int NV, typename R>
HOTCOLD_AVX512 static void add_values(const R& v, int64_t at, int64_t hd, int64_t b0, int64_t n, int64_t h0, int64_t e0, const float* s,
                                      const float* rescale, float* o, line_feed& feed) {
  __m512 acc[NH][NV];
  for (int j = 0; j < NH; ++j)
    for (int u = 0; u < NV; ++u) acc[j][u] = _mm512_mul_ps(_mm512_loadu_ps(o + (h0 + j) * hd + e0 + 16 * u), _mm512_set1_ps(rescale[j]));
  for (int64_t t = 0; t < n; ++t) {
    feed.step();
    const auto row = v.row(b0 + t);
    __m512 vr[NV];
    for (int u = 0; u < NV; ++u) vr[u] = v.load(row, at + e0 + 16 * u);
    for (int j = 0; j < NH; ++j) {
      const __m512 p = _mm512_set1_ps(s[(h0 + j) * block_keys + t]);
      for (int u = 0; u < NV; ++u) acc[j][u] = _mm512_fmadd_ps(p, vr[u], acc[j][u]);
    }
  }
  for (int j = 0; j < NH; ++j)
    for (int u = 0; u < NV; ++u) _mm512_storeu_ps(o + (h0 + j) * hd + e0 + 16 * u, acc[j][u]);
}

// Q8_0 values summed in integers (attend_keys_q8_0.cpp; VNNI): heads h0 .. h0 + nh - 1 of a KV head
// as add_values' callers take them.
void q8_0_int_values(const q8_0_rows& v, int64_t at, int64_t hd, int64_t first, int64_t n, int64_t h0, int nh, const float* s, const float* rescale,
                     float* o, line_feed& feed);

// Up to four heads by up to 64 dims a call (sixteen sums in registers).
template <typename R>
HOTCOLD_AVX512 static void values_of(const R& v, int64_t at, int64_t hd, int64_t b0, int64_t n, int64_t h0, int nh, const float* s, const float* rescale,
                                     float* o, line_feed& feed) {
  if constexpr (std::is_same_v<R, q8_0_int_rows>) return q8_0_int_values(v, at, hd, b0, n, h0, nh, s, rescale, o, feed);
  for (int64_t e0 = 0; e0 < hd; e0 += 64) {
    const int nv = static_cast<int>(std::min<int64_t>(4, (hd - e0) / 16));
#define HOTCOLD_VALUES(NH, NV) add_values<NH, NV>(v, at, hd, b0, n, h0, e0, s, rescale, o, feed)
    if (nh == 4 && nv == 4) HOTCOLD_VALUES(4, 4);
    else if (nh == 2 && nv == 4) HOTCOLD_VALUES(2, 4);
    else if (nh == 1 && nv == 4) HOTCOLD_VALUES(1, 4);
    else if (nh == 3 && nv == 4) HOTCOLD_VALUES(3, 4);
    else
      for (int j = 0; j < nh; ++j)
        for (int64_t e = e0; e < e0 + 16 * nv; e += 16) add_values<1, 1>(v, at, hd, b0, n, h0 + j, e, s, rescale + j, o, feed);
#undef HOTCOLD_VALUES
  }
}

// A block's n scores (keys first .. first + n - 1; s[h * block_keys + i] head h's of key first + i)
// taken into every head's running sums: the softmax folded in, then the weighted value rows.
template <typename RV>
HOTCOLD_AVX512 static void weigh_values(const RV& v, int64_t n_head, int64_t n_kv, int64_t hd, int64_t first, int64_t n, float* s, key_range_sums out,
                                        line_feed& feed) {
  const int64_t group = n_head / n_kv;
  float rescale[4];
  for (int64_t g = 0; g < n_kv; ++g)
    for (int64_t h0 = g * group; h0 < (g + 1) * group; h0 += 4) {
      const int nh = static_cast<int>(std::min<int64_t>(4, (g + 1) * group - h0));
      for (int j = 0; j < nh; ++j) rescale[j] = softmax_block(s + (h0 + j) * block_keys, n, out.m[h0 + j], out.l[h0 + j]);
      values_of(v, g * hd, hd, first, n, h0, nh, s, rescale, out.o, feed);
    }
}

// The line feed's steps in a values pass of n keys: a step a row (Q8_0 in integers: a pair of rows) for
// each call of up to four heads and 64 dims.
template <typename RV>
static int64_t values_steps(const RV&, int64_t n_head, int64_t n_kv, int64_t hd, int64_t n) {
  const int64_t calls = n_kv * ((n_head / n_kv + 3) / 4) * ((hd + 63) / 64);
  return calls * (std::is_same_v<RV, q8_0_int_rows> ? (n + 1) / 2 : n);
}

// A cache of any of kv_types' types (rows k_row_bytes and v_row_bytes apart), each read by its reader.
template <typename F>
static void with_rows(tensor_type t, const uint8_t* p, int64_t row_bytes, int64_t width, F&& f) {
  switch (t) {
    case tensor_type::f32: return f(plain_rows<float>{reinterpret_cast<const float*>(p), row_bytes / 4, width * 4});
    case tensor_type::f16: return f(plain_rows<uint16_t>{reinterpret_cast<const uint16_t*>(p), row_bytes / 2, width * 2});
    case tensor_type::q8_0:
      if (cpu().vnni) return f(q8_0_int_rows{{{p, row_bytes, static_cast<int64_t>(values_bytes(t, width))}}});
      return f(q8_0_rows{{p, row_bytes, static_cast<int64_t>(values_bytes(t, width))}});
    default: return f(q4_0_rows{{p, row_bytes, static_cast<int64_t>(values_bytes(t, width))}});
  }
}

// attend_rows with the keys in tiles (kt: the slot's first tile, tile_bytes from one to the next; score
// their keys into s[h * block_keys], stepping a line feed as it goes): blocks of 64 keys from t0's tile
// on, every tile's scores, then the softmax and values of the block's keys within t0 .. t1 - 1 alone.
// Meanwhile the next block's value rows are asked for over the scores, its key tiles over the values.
template <typename Scores, typename RV>
HOTCOLD_AVX512 static void attend_tiles(const Scores& score, const uint8_t* kt, int64_t tile_bytes, const RV& v, int64_t n_head, int64_t n_kv, int64_t hd,
                                        int64_t t0, int64_t t1, key_range_sums out, float* scratch) {
  float* s = scratch;  // [n_head][block_keys]
  clear_key_range(out, n_head, hd);
  line_feed feed;
  const int64_t first = t0 - t0 % 16;
  feed.aim(kt + first / 16 * tile_bytes, (std::min(first + block_keys, t1) - first + 15) / 16 * tile_bytes, 1);
  feed.rest();
  prefetch_rows(v, t0, std::min(first + block_keys, t1));  // (the first block's keys and values at once)
  auto bytes_between = [&](int64_t a, int64_t b) { return reinterpret_cast<const char*>(v.row(b)) - reinterpret_cast<const char*>(v.row(a)); };
  for (int64_t b0 = first; b0 < t1; b0 += block_keys) {
    const int64_t lo = std::max(b0, t0), hi = std::min(b0 + block_keys, t1);
    const int64_t next = b0 + block_keys, next_end = std::min(next + block_keys, t1);
    const int64_t tiles = (hi - b0 + 15) / 16;
    if (next < t1) feed.aim(v.row(next), bytes_between(next, next_end), tiles * score.steps_a_tile());
    for (int64_t tt = b0; tt < hi; tt += 16) score(kt + (tt / 16) * tile_bytes, s + (tt - b0), feed);
    feed.rest();
    const int64_t n = hi - lo, off = lo - b0;
    if (next < t1) feed.aim(kt + next / 16 * tile_bytes, (next_end - next + 15) / 16 * tile_bytes, values_steps(v, n_head, n_kv, hd, n));
    weigh_values(v, n_head, n_kv, hd, lo, n, s + off, out, feed);
    feed.rest();
  }
}

// Decode attention over Q8_0 keys in tiles (attend_keys_q8_0.cpp; VNNI).
void attend_q8_0_key_tiles(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv,
                           int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch);

}  // namespace avx512
HOTCOLD_AVX512_END

}  // namespace hotcold::kernels
