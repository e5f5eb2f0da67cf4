#include "kernels/cpu/quants.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "kernels/cpu/fp16.hpp"

namespace hotcold::kernels {

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / qk8_0; ++b, x += qk8_0) {
    float amax = 0;
    for (int i = 0; i < qk8_0; ++i) amax = std::max(amax, std::fabs(x[i]));
    float d = amax / 127.0f;
    float id = d != 0 ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int i = 0; i < qk8_0; ++i) y[b].qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
  }
}

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

}  // namespace hotcold::kernels
