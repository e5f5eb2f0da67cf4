#include "kernels/cpu/fp16.hpp"

#include <immintrin.h>

#include <bit>
#include <cstring>

namespace hotcold::kernels {

float fp16_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half: value = mant * 2^-24 = 1.frac * 2^(p - 24), p = highest set bit.
    int p = 31 - std::countl_zero(mant);
    uint32_t frac = (mant << (10 - p)) & 0x3FF;
    bits = sign | static_cast<uint32_t>(p + 103) << 23 | (frac << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t fp32_to_fp16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x3FF);  // NaN stays NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00;  // rounds to >= 65520: infinity
  if (abs >= 0x38800000u) {                      // normal half range (>= 2^-14)
    uint32_t rounded = abs + 0xFFF + ((abs >> 13) & 1);  // ties to even on the 13 dropped bits
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (abs < 0x33000000u) return sign;  // below half the smallest subnormal: zero
  // Subnormal half: shift the full significand, round to nearest even.
  uint32_t exp = abs >> 23;
  uint32_t mant = (abs & 0x7FFFFF) | 0x800000;
  // value = mant * 2^(exp - 150); in units of the half subnormal step 2^-24 that is
  // mant >> (126 - exp), with 126 - exp in 14..24 for this range.
  uint32_t shift = 126 - exp;
  uint32_t q = mant >> shift;
  uint32_t rem = mant & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  return sign | static_cast<uint16_t>(q);
}

float bf16_to_fp32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

namespace {
// Eight halves at a time with F16C where the CPU has it (the same values: the conversion is exact).
__attribute__((target("avx2,f16c"))) void fp16_to_fp32_row_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}
const bool have_f16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}  // namespace

void fp16_to_fp32_row(const uint16_t* src, float* dst, size_t n) {
  if (have_f16c) return fp16_to_fp32_row_f16c(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}
void fp32_to_fp16_row(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
void bf16_to_fp32_row(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

}  // namespace hotcold::kernels
