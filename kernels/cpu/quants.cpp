#include "kernels/cpu/quants.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {

namespace scalar {

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b, x += qk8_0) {
    float amax = 0;
    for (int i = 0; i < qk8_0; ++i) amax = std::max(amax, std::fabs(x[i]));
    float d = amax / 127.0f;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    // Nearest, ties to even: what the vector conversion does, so both give the same bytes.
    for (int i = 0; i < qk8_0; ++i) y[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  }
}

}  // namespace scalar

namespace {

// The same arithmetic eight lanes at a time (decode quantizes every product's input).
HOTCOLD_AVX2 void quantize_row_q8_0_avx2(const float* x, block_q8_0* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / qk8_0; ++b, x += qk8_0) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], vid));  // nearest, ties to even
    // packs work within 128-bit lanes: the permutation puts the 32 bytes back in order.
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs), p8);
  }
}

}  // namespace

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) { cpu_kernels().quantize_row_q8_0(x, y, n); }

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b) {
    float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < qk8_0; ++i) *y++ = d * x[b].qs[i];
  }
}

void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n) {
  for (int64_t b = 0; b < n / qk4_0; ++b, x += qk4_0) {
    // The signed value of largest magnitude maps to -8, so the full range [-8, 7] is used.
    float amax = 0, vmax = 0;
    for (int i = 0; i < qk4_0; ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), vmax = x[i];
    float d = vmax / -8.0f;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < qk4_0 / 2; ++j) {
      int lo = std::clamp(static_cast<int>(std::floor(x[j] * id + 8.5f)), 0, 15);
      int hi = std::clamp(static_cast<int>(std::floor(x[j + 16] * id + 8.5f)), 0, 15);
      y[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk4_0; ++b, y += qk4_0) {
    float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < qk4_0 / 2; ++j) {
      y[j] = d * ((x[b].qs[j] & 0x0F) - 8);
      y[j + 16] = d * ((x[b].qs[j] >> 4) - 8);
    }
  }
}

// Value index v (0..255) within a Q6_K block lives at: half h = v / 128, and within the half at
// l = v % 32, quarter q = (v % 128) / 32. Quarter 0/1 use the low nibble of ql[64h + l + 32q],
// quarters 2/3 the high nibble of ql[64h + l + 32(q-2)]; the two high bits come from
// qh[32h + l] >> (2q). Group scale index: 8h + l / 16 + 2q.
void dequantize_row_q6_k(const block_q6_k* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk_k; ++b) {
    float d = fp16_to_fp32(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        int is = l / 16;
        int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void quantize_row_q6_k(const float* x, block_q6_k* y, int64_t n) {
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    // Per group of 16: scale so that the largest magnitude maps to 31 (quants span -32..31);
    // group scales are then stored as int8 relative to d = max group scale / 127.
    float group_scale[16];
    float max_scale = 0;
    for (int g = 0; g < 16; ++g) {
      float amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(x[16 * g + i]));
      group_scale[g] = amax / 31.0f;
      max_scale = std::max(max_scale, group_scale[g]);
    }
    float d = max_scale / 127.0f;
    y[b].d = fp32_to_fp16(d);
    float dd = fp16_to_fp32(y[b].d);
    int8_t q[qk_k];
    for (int g = 0; g < 16; ++g) {
      int s = dd != 0 ? std::clamp(static_cast<int>(std::lround(group_scale[g] / dd)), -127, 127) : 0;
      y[b].scales[g] = static_cast<int8_t>(s);
      float step = dd * s;
      for (int i = 0; i < 16; ++i) {
        int v = step != 0 ? static_cast<int>(std::lround(x[16 * g + i] / step)) : 0;
        q[16 * g + i] = static_cast<int8_t>(std::clamp(v, -32, 31));
      }
    }
    // Pack with the layout dequantize_row_q6_k reads.
    std::fill(std::begin(y[b].ql), std::end(y[b].ql), 0);
    std::fill(std::begin(y[b].qh), std::end(y[b].qh), 0);
    for (int v = 0; v < qk_k; ++v) {
      int half = v / 128, l = v % 32, quarter = (v % 128) / 32;
      auto u = static_cast<uint8_t>(q[v] + 32);  // 0..63
      uint8_t& lo = y[b].ql[64 * half + l + 32 * (quarter & 1)];
      lo |= quarter < 2 ? (u & 0xF) : static_cast<uint8_t>((u & 0xF) << 4);
      y[b].qh[32 * half + l] |= static_cast<uint8_t>((u >> 4) << (2 * quarter));
    }
  }
}

namespace scalar {
void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n) {
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    float amax = 0;
    for (int i = 0; i < qk_k; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = d;
    for (int g = 0; g < qk_k / 16; ++g) {
      int sum = 0;
      for (int i = 16 * g; i < 16 * g + 16; ++i) sum += y[b].qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
      y[b].bsums[g] = static_cast<int16_t>(sum);
    }
  }
}
}  // namespace scalar

namespace {
HOTCOLD_AVX2 int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}
// The same arithmetic eight lanes at a time (the same bytes, sums and scale): a prompt's products of
// Q4_K rows quantize every token (512 tokens of the ~1B file: ~5% of its prefill in scalar code).
HOTCOLD_AVX2 void quantize_row_q8_k_avx2(const float* x, block_q8_k* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < qk_k / 8; ++k) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = d;
    const __m256 vid = _mm256_set1_ps(id);
    for (int c = 0; c < qk_k / 32; ++c) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * c + 8 * k), vid));  // nearest, ties to even
      const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + 32 * c), p8);
      y[b].bsums[2 * c] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(q[0], q[1])));
      y[b].bsums[2 * c + 1] = static_cast<int16_t>(hsum_epi32(_mm256_add_epi32(q[2], q[3])));
    }
  }
}
}  // namespace

void choose_quantize_kernels(kernel_table& k, const cpu_features& f) {
  k.quantize_row_q8_0 = f.avx2 ? quantize_row_q8_0_avx2 : scalar::quantize_row_q8_0;
  k.quantize_row_q8_k = f.avx2 ? quantize_row_q8_k_avx2 : scalar::quantize_row_q8_k;
}

void quantize_row_q8_k(const float* x, block_q8_k* y, int64_t n) { cpu_kernels().quantize_row_q8_k(x, y, n); }

void round_to_q8_k(float* x, int64_t n) {
  block_q8_k b;
  for (int64_t k = 0; k < n / qk_k; ++k, x += qk_k) {
    quantize_row_q8_k(x, &b, qk_k);
    for (int i = 0; i < qk_k; ++i) x[i] = b.d * static_cast<float>(b.qs[i]);
  }
}

void interleave_q4_0x16(const block_q4_0* rows, int64_t row_blocks, block_q4_0x16* out) {
  for (int64_t b = 0; b < row_blocks; ++b)
    for (int i = 0; i < 16; ++i) {
      const block_q4_0& src = rows[i * row_blocks + b];
      out[b].d[i] = src.d;
      for (int g = 0; g < 4; ++g) std::memcpy(out[b].qs + 64 * g + 4 * i, src.qs + 4 * g, 4);
    }
}

void deinterleave_q4_0x16(const block_q4_0x16* in, int64_t row_blocks, block_q4_0* rows) {
  for (int64_t b = 0; b < row_blocks; ++b)
    for (int i = 0; i < 16; ++i) {
      block_q4_0& dst = rows[i * row_blocks + b];
      dst.d = in[b].d[i];
      for (int g = 0; g < 4; ++g) std::memcpy(dst.qs + 4 * g, in[b].qs + 64 * g + 4 * i, 4);
    }
}

void q8_0_to_x4(const block_q8_0* x, int64_t nb, q8_0_x4* out) {
  for (int64_t g = 0; g < nb / 4; ++g) {
    q8_0_x4& o = out[g];
    for (int j = 0; j < 4; ++j) {
      const block_q8_0& b = x[4 * g + j];
      std::memcpy(o.lo + 16 * j, b.qs, 16);
      std::memcpy(o.hi + 16 * j, b.qs + 16, 16);
      for (int q = 0; q < 4; ++q) {
        int32_t sum = 0;
        for (int i = 0; i < 4; ++i) sum += b.qs[4 * q + i] + b.qs[16 + 4 * q + i];
        o.offset[4 * j + q] = 8 * sum;
        o.d[4 * j + q] = fp16_to_fp32(b.d);
      }
    }
  }
}

void q8_0_block_terms(const block_q8_0* x, int64_t nb, q8_0_terms* out) {
  for (int64_t b = 0; b < nb; ++b) {
    int32_t s = 0;
    for (int j = 0; j < qk8_0; ++j) s += x[b].qs[j];
    out[b] = {fp16_to_fp32(x[b].d), -8 * s};
  }
}

namespace {
// The scales, quants (and Q5_K's high bits) of sixteen Q4_K / Q5_K rows to and from their interleaved
// blocks: interleave copies rows -> groups, else groups -> rows (neither side is written when read).
template <typename Row, typename Group>
void move_k_rows(Row* rows, int64_t row_blocks, Group* groups, bool interleave) {
  auto copy = [&](void* in, void* out, size_t n) {
    if (interleave) std::memcpy(out, in, n);
    else std::memcpy(in, out, n);
  };
  for (int64_t b = 0; b < row_blocks; ++b)
    for (int i = 0; i < 16; ++i) {
      Row& r = rows[i * row_blocks + b];
      Group& g = groups[b];
      copy(&r.d, &g.d[i], 2);
      copy(&r.dmin, &g.dmin[i], 2);
      for (int w = 0; w < 3; ++w) copy(r.scales + 4 * w, &g.scales[w][i], 4);
      for (int c = 0; c < 4; ++c)
        for (int st = 0; st < 8; ++st) copy(r.qs + 32 * c + 4 * st, g.qs + 512 * c + 64 * st + 4 * i, 4);
      if constexpr (sizeof(Row) == sizeof(block_q5_k))
        for (int st = 0; st < 8; ++st) copy(r.qh + 4 * st, g.qh + 64 * st + 4 * i, 4);
    }
}
}  // namespace

void interleave_q4_kx16(const block_q4_k* rows, int64_t row_blocks, block_q4_kx16* out) {
  move_k_rows(const_cast<block_q4_k*>(rows), row_blocks, out, true);
}
void deinterleave_q4_kx16(const block_q4_kx16* in, int64_t row_blocks, block_q4_k* rows) {
  move_k_rows(rows, row_blocks, const_cast<block_q4_kx16*>(in), false);
}
void interleave_q5_kx16(const block_q5_k* rows, int64_t row_blocks, block_q5_kx16* out) {
  move_k_rows(const_cast<block_q5_k*>(rows), row_blocks, out, true);
}
void deinterleave_q5_kx16(const block_q5_kx16* in, int64_t row_blocks, block_q5_k* rows) {
  move_k_rows(rows, row_blocks, const_cast<block_q5_kx16*>(in), false);
}

void interleave_q6_kx16(const block_q6_k* rows, int64_t row_blocks, block_q6_kx16* out) {
  for (int64_t b = 0; b < row_blocks; ++b)
    for (int i = 0; i < 16; ++i) {
      const block_q6_k& src = rows[i * row_blocks + b];
      out[b].d[i] = src.d;
      for (int s = 0; s < 16; ++s) out[b].scales[s][i] = src.scales[s];
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 8; ++t) {
          uint8_t* step = out[b].qs + 192 * (8 * h + t) + 4 * i;
          for (int c = 0; c < 2; ++c) std::memcpy(step + 64 * c, src.ql + 64 * h + 32 * c + 4 * t, 4);
          std::memcpy(step + 128, src.qh + 32 * h + 4 * t, 4);
        }
    }
}

void deinterleave_q6_kx16(const block_q6_kx16* in, int64_t row_blocks, block_q6_k* rows) {
  for (int64_t b = 0; b < row_blocks; ++b)
    for (int i = 0; i < 16; ++i) {
      block_q6_k& dst = rows[i * row_blocks + b];
      dst.d = in[b].d[i];
      for (int s = 0; s < 16; ++s) dst.scales[s] = in[b].scales[s][i];
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 8; ++t) {
          const uint8_t* step = in[b].qs + 192 * (8 * h + t) + 4 * i;
          for (int c = 0; c < 2; ++c) std::memcpy(dst.ql + 64 * h + 32 * c + 4 * t, step + 64 * c, 4);
          std::memcpy(dst.qh + 32 * h + 4 * t, step + 128, 4);
        }
    }
}

void q8_k_block_group_sums(const block_q8_k* x, int64_t nb, q8_k_group_sums* out) {
  for (int64_t b = 0; b < nb; ++b)
    for (int p = 0; p < 4; ++p) {
      const int lo = x[b].bsums[4 * p] + x[b].bsums[4 * p + 1], hi = x[b].bsums[4 * p + 2] + x[b].bsums[4 * p + 3];
      out[b].pair[p] = static_cast<uint32_t>(static_cast<uint16_t>(lo)) | (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16);
    }
}

}  // namespace hotcold::kernels
