#include "engine/layer_ops.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/rows.hpp"

namespace hotcold {

using namespace kernels;

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float gelu(float x) {
  constexpr float sqrt_2_over_pi = 0.79788456080286535588f;
  constexpr float coef_a = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

void dequantize_row(const tensor_view& t, int64_t row, float* out) { row_kernels_of(t.type).to_float(t.row(row), out, t.ne0); }

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  // The sum of squares in eight independent double lanes, not one chain of dependent additions.
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += double(x[i + k]) * x[i + k];
  double ss = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int64_t k = 0; k < n; ++k) out[k] = x[k] * scale * w[k];
}

void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t n, float eps) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  float scale = 1.0f / std::sqrt(static_cast<float>(var) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] - mean) * scale * w[i] + b[i];
}

void apply_norm(norm_kind kind, const norm_weights& nw, const float* x, float* out, int64_t n, float eps) {
  const float* w = nw.weight->f32();
  if (kind == norm_kind::layer) layer_norm(x, w, nw.bias->f32(), out, n, eps);
  else rms_norm(x, w, out, n, eps);
}

rope_angles::rope_angles(const hparams& hp, int64_t pos, const std::vector<float>& factors, bool scaled) {
  const float theta_scale = std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(hp.n_rot));
  float theta = static_cast<float>(pos) * hp.rope_freq_scale;
  const float* factor = factors.empty() ? nullptr : factors.data();
  const float m = scaled ? hp.rope_attn_factor : 1.0f;
  for (int64_t i = 0; i < hp.n_rot / 2; ++i, theta *= theta_scale) {
    const float t = factor ? theta / factor[i] : theta;
    c[i] = std::cos(t) * m, s[i] = std::sin(t) * m;
  }
}

void head_rms_norm(float* v, int64_t n_heads, int64_t head_dim, const float* w, float eps) {
  for (int64_t h = 0; h < n_heads; ++h) rms_norm(v + h * head_dim, w, v + h * head_dim, head_dim, eps);
}

void rope(float* v, int64_t n_heads, const hparams& hp, const rope_angles& r) {
  const int64_t hd = hp.head_dim();
  const bool adjacent = hp.rope == rope_style::adjacent_pairs;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* x = v + h * hd;
    for (int64_t i = 0; i < hp.n_rot / 2; ++i) {
      const int64_t a = adjacent ? 2 * i : i, b = adjacent ? 2 * i + 1 : i + hp.n_rot / 2;
      const float x0 = x[a], x1 = x[b];
      x[a] = x0 * r.c[i] - x1 * r.s[i];
      x[b] = x0 * r.s[i] + x1 * r.c[i];
    }
  }
}

}  // namespace hotcold
