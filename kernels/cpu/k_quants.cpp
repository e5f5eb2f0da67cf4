// Q4_K and Q5_K, the K-quants of llama.cpp's Q4_K_M / Q5_K_M presets: the blocks' reference
// dequantization and a quantizer (gen-model's files), and the products the engine reads rows with —
// against float activations (sparse FFN rows, y += a * row) and against Q8_K activations (integer
// multiply-adds for products of a few tokens). Each has a scalar form; AVX2 where the CPU has it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold::kernels {

namespace {

// A block's eight group scales and mins as floats: d * sc[g] and dmin * m[g].
struct k_groups {
  float scale[8];
  float min[8];
  uint8_t sc[8];
  uint8_t m[8];
};
template <typename B>
k_groups groups_of(const B& b) {
  k_groups g{};
  const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    k_quant_scale_min(b.scales, j, g.sc[j], g.m[j]);
    g.scale[j] = d * g.sc[j];
    g.min[j] = dmin * g.m[j];
  }
  return g;
}

// Value v (0..255) of a block, the quant alone (0..15, Q5_K 0..31): group g = v / 32, l = v % 32.
inline int q4_k_value(const block_q4_k& b, int v) {
  const int g = v / 32, l = v % 32;
  return (b.qs[32 * (g / 2) + l] >> (4 * (g & 1))) & 0xF;
}
inline int q5_k_value(const block_q5_k& b, int v) {
  const int g = v / 32, l = v % 32;
  return ((b.qs[32 * (g / 2) + l] >> (4 * (g & 1))) & 0xF) | (((b.qh[l] >> g) & 1) << 4);
}

// Groups of 32 values quantized to levels 0..nmax with a scale and a (non-negative) min each, the
// scales and mins then to 6 bits against the block's d and dmin: x ~ d sc q - dmin m. Per group the
// range [min(0, lo), hi] is split evenly, then a few scales around it are tried for the least squared
// error (the mins' zero point kept), as the stored 6-bit values give them.
template <typename B>
void quantize_k_block(const float* x, B& out, int nmax, uint8_t* levels) {
  float scale[8], min[8];
  for (int g = 0; g < 8; ++g) {
    const float* xg = x + 32 * g;
    float lo = 0, hi = xg[0];
    for (int i = 0; i < 32; ++i) lo = std::min(lo, xg[i]), hi = std::max(hi, xg[i]);
    hi = std::max(hi, lo);
    min[g] = -lo;
    float best = (hi - lo) / static_cast<float>(nmax), best_err = INFINITY;
    for (int k = -4; k <= 4; ++k) {
      const float s = (hi - lo) / (static_cast<float>(nmax) + 0.25f * static_cast<float>(k));
      if (!(s > 0)) break;
      float err = 0;
      for (int i = 0; i < 32; ++i) {
        const float q = std::clamp(std::nearbyint((xg[i] - lo) / s), 0.0f, static_cast<float>(nmax));
        const float e = q * s + lo - xg[i];
        err += e * e;
      }
      if (err < best_err) best_err = err, best = s;
    }
    scale[g] = best;
  }
  const float max_scale = *std::max_element(scale, scale + 8), max_min = *std::max_element(min, min + 8);
  out.d = fp32_to_fp16(max_scale / 63.0f);
  out.dmin = fp32_to_fp16(max_min / 63.0f);
  const float d = fp16_to_fp32(out.d), dmin = fp16_to_fp32(out.dmin);
  std::memset(out.scales, 0, sizeof(out.scales));
  for (int g = 0; g < 8; ++g) {
    const auto sc = static_cast<uint8_t>(d > 0 ? std::clamp(static_cast<int>(std::lround(scale[g] / d)), 0, 63) : 0);
    const auto m = static_cast<uint8_t>(dmin > 0 ? std::clamp(static_cast<int>(std::lround(min[g] / dmin)), 0, 63) : 0);
    if (g < 4) {
      out.scales[g] |= sc;
      out.scales[g + 4] |= m;
    } else {
      out.scales[g + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
      out.scales[g - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
      out.scales[g] |= static_cast<uint8_t>((m >> 4) << 6);
    }
  }
  // The quants against the stored (rounded) scales and mins.
  for (int g = 0; g < 8; ++g) {
    uint8_t sc, m;
    k_quant_scale_min(out.scales, g, sc, m);
    const float step = d * sc, zero = dmin * m;
    for (int i = 0; i < 32; ++i) {
      const float q = step > 0 ? std::nearbyint((x[32 * g + i] + zero) / step) : 0.0f;
      levels[32 * g + i] = static_cast<uint8_t>(std::clamp(q, 0.0f, static_cast<float>(nmax)));
    }
  }
}

}  // namespace

// As ggml's dequantize_row_q4_K: per 64 values, two groups sharing 32 bytes (low nibbles, then high).
void dequantize_row_q4_k(const block_q4_k* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const k_groups g = groups_of(x[b]);
    const uint8_t* q = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      for (int l = 0; l < 32; ++l) *y++ = g.scale[2 * c] * (q[l] & 0xF) - g.min[2 * c];
      for (int l = 0; l < 32; ++l) *y++ = g.scale[2 * c + 1] * (q[l] >> 4) - g.min[2 * c + 1];
    }
  }
}

// As ggml's dequantize_row_q5_K: Q4_K's layout plus the fifth bit, qh's bit pair (2c, 2c + 1).
void dequantize_row_q5_k(const block_q5_k* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const k_groups g = groups_of(x[b]);
    const uint8_t* q = x[b].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      const int lo_bit = 1 << (2 * c), hi_bit = 2 << (2 * c);
      for (int l = 0; l < 32; ++l) *y++ = g.scale[2 * c] * ((q[l] & 0xF) + (x[b].qh[l] & lo_bit ? 16 : 0)) - g.min[2 * c];
      for (int l = 0; l < 32; ++l) *y++ = g.scale[2 * c + 1] * ((q[l] >> 4) + (x[b].qh[l] & hi_bit ? 16 : 0)) - g.min[2 * c + 1];
    }
  }
}

void quantize_row_q4_k(const float* x, block_q4_k* y, int64_t n) {
  uint8_t levels[qk_k];
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    quantize_k_block(x, y[b], 15, levels);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = static_cast<uint8_t>(levels[64 * c + l] | (levels[64 * c + 32 + l] << 4));
  }
}

void quantize_row_q5_k(const float* x, block_q5_k* y, int64_t n) {
  uint8_t levels[qk_k];
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    quantize_k_block(x, y[b], 31, levels);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = static_cast<uint8_t>((levels[64 * c + l] & 0xF) | ((levels[64 * c + 32 + l] & 0xF) << 4));
    for (int v = 0; v < qk_k; ++v) y[b].qh[v % 32] |= static_cast<uint8_t>((levels[v] >> 4) << (v / 32));
  }
}

namespace scalar {

template <typename B, int (*value)(const B&, int)>
float dot_k(const B* w, const float* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    const k_groups g = groups_of(w[b]);
    for (int v = 0; v < qk_k; ++v) s += (g.scale[v / 32] * static_cast<float>(value(w[b], v)) - g.min[v / 32]) * x[v];
  }
  return s;
}
template <typename B, int (*value)(const B&, int)>
void axpy_k(float a, const B* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / qk_k; ++b, y += qk_k) {
    const k_groups g = groups_of(x[b]);
    for (int v = 0; v < qk_k; ++v) y[v] += a * (g.scale[v / 32] * static_cast<float>(value(x[b], v)) - g.min[v / 32]);
  }
}
// Per block: d * xd * sum_g sc[g] (q . x8 over g) - dmin * xd * sum_g m[g] (x8's sum over g).
template <typename B, int (*value)(const B&, int)>
float dot_k_q8_k(const B* w, const block_q8_k* x, int64_t n) {
  float s = 0;
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const k_groups g = groups_of(w[b]);
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      int32_t group = 0;
      for (int l = 0; l < 32; ++l) group += value(w[b], 32 * j + l) * x[b].qs[32 * j + l];
      isum += g.sc[j] * group;
      msum += g.m[j] * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    s += x[b].d * (fp16_to_fp32(w[b].d) * static_cast<float>(isum) - fp16_to_fp32(w[b].dmin) * static_cast<float>(msum));
  }
  return s;
}

float dot_q4_k(const block_q4_k* w, const float* x, int64_t n) { return dot_k<block_q4_k, q4_k_value>(w, x, n); }
float dot_q5_k(const block_q5_k* w, const float* x, int64_t n) { return dot_k<block_q5_k, q5_k_value>(w, x, n); }
void axpy_q4_k(float a, const block_q4_k* x, float* y, int64_t n) { axpy_k<block_q4_k, q4_k_value>(a, x, y, n); }
void axpy_q5_k(float a, const block_q5_k* x, float* y, int64_t n) { axpy_k<block_q5_k, q5_k_value>(a, x, y, n); }
float dot_q4_k_q8_k(const block_q4_k* w, const block_q8_k* x, int64_t n) { return dot_k_q8_k<block_q4_k, q4_k_value>(w, x, n); }
float dot_q5_k_q8_k(const block_q5_k* w, const block_q8_k* x, int64_t n) { return dot_k_q8_k<block_q5_k, q5_k_value>(w, x, n); }

}  // namespace scalar

namespace avx2 {

// A block's eight groups of 32 quants, one register each (bytes in value order).
HOTCOLD_AVX2 inline void unpack(const block_q4_k& b, __m256i (&q)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
    q[2 * c] = _mm256_and_si256(v, m4);
    q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}
HOTCOLD_AVX2 inline void unpack(const block_q5_k& b, __m256i (&q)[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
  for (int c = 0; c < 4; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * c));
    // The high bit of group g is bit g of each qh byte: shifted down per 16-bit lane, then masked to
    // the byte's own bit 0 (what came in from the byte above is masked off), then up to bit 4.
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c), one), 4);
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2 * c + 1), one), 4);
    q[2 * c] = _mm256_or_si256(_mm256_and_si256(v, m4), h0);
    q[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), h1);
  }
}

HOTCOLD_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
HOTCOLD_AVX2 inline __m256 bytes_to_ps(const uint8_t* p) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))); }

// A block's eight 6-bit group scales (bytes 0..7 of out) and mins (bytes 8..15) from its 12 packed
// bytes, a word at a time (k_quant_scale_min's layout): scales 0..3 are the low six bits of bytes
// 0..3 and mins 0..3 those of bytes 4..7; scales 4..7 are the low nibbles of bytes 8..11 under the
// top two bits of bytes 0..3, mins 4..7 the high nibbles under the top two bits of bytes 4..7.
// (Made in registers: four 32-bit stores read back as one 128-bit load would miss store forwarding.)
HOTCOLD_AVX2 inline __m128i k_scales_mins(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  return _mm_set_epi32(static_cast<int>(((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4)), static_cast<int>(w[1] & 0x3f3f3f3fu),
                       static_cast<int>((w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4)), static_cast<int>(w[0] & 0x3f3f3f3fu));
}

// A block's quants as bytes in value order (q: 256, 32-byte aligned), and its groups' scales
// d * sc[g] and mins dmin * m[g] as floats (into 32-byte aligned scale[8], min[8]).
template <typename B>
HOTCOLD_AVX2 inline void unpack_bytes(const B& b, uint8_t* q, float* scale, float* min) {
  __m256i r[8];
  unpack(b, r);
  for (int g = 0; g < 8; ++g) _mm256_store_si256(reinterpret_cast<__m256i*>(q + 32 * g), r[g]);
  const __m128i packed = k_scales_mins(b.scales);
  _mm256_store_ps(scale, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(packed))));
  _mm256_store_ps(min, _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(packed, 8)))));
}

template <typename B>
HOTCOLD_AVX2 float dot_k(const B* w, const float* x, int64_t n) {
  alignas(32) uint8_t q[qk_k];
  alignas(32) float scale[8], min[8];
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / qk_k; ++b, x += qk_k) {
    unpack_bytes(w[b], q, scale, min);
    for (int g = 0; g < 8; ++g) {
      const __m256 s = _mm256_set1_ps(scale[g]), m = _mm256_set1_ps(min[g]);
      for (int k = 0; k < 32; k += 8) {
        const __m256 xv = _mm256_loadu_ps(x + 32 * g + k);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(s, bytes_to_ps(q + 32 * g + k)), xv, acc);
        acc_min = _mm256_fmadd_ps(m, xv, acc_min);
      }
    }
  }
  return hsum(_mm256_sub_ps(acc, acc_min));
}

template <typename B>
HOTCOLD_AVX2 void axpy_k(float a, const B* x, float* y, int64_t n) {
  alignas(32) uint8_t q[qk_k];
  alignas(32) float scale[8], min[8];
  for (int64_t b = 0; b < n / qk_k; ++b, y += qk_k) {
    unpack_bytes(x[b], q, scale, min);
    for (int g = 0; g < 8; ++g) {
      const __m256 s = _mm256_set1_ps(a * scale[g]), m = _mm256_set1_ps(a * min[g]);
      for (int k = 0; k < 32; k += 8) {
        float* yk = y + 32 * g + k;
        _mm256_storeu_ps(yk, _mm256_fmadd_ps(s, bytes_to_ps(q + 32 * g + k), _mm256_sub_ps(_mm256_loadu_ps(yk), m)));
      }
    }
  }
}

// Blocks to floats (a prompt's products convert rows a block at a time in cache): the values
// dequantize_row_q4_k / _q5_k give, bit for bit (a product, then a difference: no fused multiply-add).
template <typename B>
HOTCOLD_AVX2 void to_float_k(const B* x, float* y, int64_t n) {
  alignas(32) uint8_t q[qk_k];
  alignas(32) float scale[8], min[8];
  for (int64_t b = 0; b < n / qk_k; ++b) {
    unpack_bytes(x[b], q, scale, min);
    for (int g = 0; g < 8; ++g) {
      const __m256 s = _mm256_set1_ps(scale[g]), m = _mm256_set1_ps(min[g]);
      for (int k = 0; k < 32; k += 8, y += 8) {
        __m256 v = _mm256_mul_ps(s, bytes_to_ps(q + 32 * g + k));
        __asm__("" : "+x"(v));  // (keeps the compiler from fusing the product into the difference)
        _mm256_storeu_ps(y, _mm256_sub_ps(v, m));
      }
    }
  }
}

// Per group: unsigned quants x signed Q8_K bytes in pairs (maddubs: at most 2 x 31 x 127, fits 16
// bits), times the group's 6-bit scale (broadcast from a register of the eight by a byte shuffle)
// into 32-bit sums (madd); the mins against Q8_K's sums of 16, two per group, in one madd. The
// block's two f16 scales converted in registers.
template <typename B>
HOTCOLD_AVX2 float dot_k_q8_k(const B* w, const block_q8_k* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps(), acc_min = _mm256_setzero_ps();
  // Shuffle g (a 16-bit lane broadcast): bytes 2g, 2g + 1 of each 128-bit half, everywhere.
  __m256i lane[8];
  for (int g = 0; g < 8; ++g) lane[g] = _mm256_set1_epi16(static_cast<short>((2 * g) | ((2 * g + 1) << 8)));
  for (int64_t b = 0; b < n / qk_k; ++b) {
    const __m128i packed = k_scales_mins(w[b].scales);  // 8 scales, then 8 mins
    const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(packed));
    // Each min twice (it meets two sums of 16), against the sixteen sums.
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_srli_si128(packed, 8), _mm_srli_si128(packed, 8)));
    const __m256i msum = _mm256_madd_epi16(mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].bsums)));
    __m256i r[8];
    unpack(w[b], r);
    __m256i isum = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i p = _mm256_maddubs_epi16(r[g], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * g)));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_shuffle_epi8(scales, lane[g])));
    }
    const float xd = x[b].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(w[b].d) * xd), _mm256_cvtepi32_ps(isum), acc);
    acc_min = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(w[b].dmin) * xd), _mm256_cvtepi32_ps(msum), acc_min);
  }
  return hsum(_mm256_sub_ps(acc, acc_min));
}

}  // namespace avx2

void choose_k_quant_kernels(kernel_table& k, const cpu_features& f) {
  k.dot_q4_k = scalar::dot_q4_k, k.dot_q5_k = scalar::dot_q5_k, k.axpy_q4_k = scalar::axpy_q4_k, k.axpy_q5_k = scalar::axpy_q5_k;
  k.dot_q4_k_q8_k = scalar::dot_q4_k_q8_k, k.dot_q5_k_q8_k = scalar::dot_q5_k_q8_k;
  k.to_float_q4_k = dequantize_row_q4_k, k.to_float_q5_k = dequantize_row_q5_k;
  if (!f.avx2) return;
  k.dot_q4_k = avx2::dot_k<block_q4_k>, k.dot_q5_k = avx2::dot_k<block_q5_k>, k.axpy_q4_k = avx2::axpy_k<block_q4_k>, k.axpy_q5_k = avx2::axpy_k<block_q5_k>;
  k.dot_q4_k_q8_k = avx2::dot_k_q8_k<block_q4_k>, k.dot_q5_k_q8_k = avx2::dot_k_q8_k<block_q5_k>;
  k.to_float_q4_k = avx2::to_float_k<block_q4_k>, k.to_float_q5_k = avx2::to_float_k<block_q5_k>;
}

}  // namespace hotcold::kernels
