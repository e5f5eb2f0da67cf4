#include "engine/neuron_rules.hpp"

#include <limits>

namespace hotcold {

float hidden_value(const hparams& hp, float t, float g, float u) {
  if (!hp.gated_ffn) {
    const float a = activate(hp.act, u);
    return std::fabs(a) >= t ? a : 0.0f;
  }
  if (hp.act == activation::drelu) return std::max(g, 0.0f) * std::max(u, 0.0f);
  const float a = activate(hp.act, g);
  return std::fabs(a) >= t ? a * u : 0.0f;
}

float firing_margin(const hparams& hp, float t, float g, float u) {
  if (hp.act == activation::relu) return hp.gated_ffn ? g : u;
  if (hp.act == activation::drelu) return std::min(g, u);
  return std::fabs(activate(hp.act, hp.gated_ffn ? g : u)) - t;
}

void act_magnitudes(activation act, float* v, int64_t n) {
  for (int64_t k = 0; k < n; ++k) v[k] = std::fabs(activate(act, v[k]));
}

act_band act_band_of(activation act, float theta) {
  auto f = [&](double s) { return static_cast<double>(activate(act, static_cast<float>(s))); };
  // Bisection on a monotone piece between `out` (where `holds` is false) and `in` (where it is true),
  // to the float at which it starts to hold.
  auto edge = [](double out, double in, const auto& holds) {
    for (int i = 0; i < 200 && static_cast<float>(out) != static_cast<float>(in); ++i) {
      const double m = 0.5 * (out + in);
      (holds(m) ? in : out) = m;
    }
    return static_cast<float>(in);
  };
  act_band band;
  if (theta <= 0.0f) {  // every score passes
    band.hi = -std::numeric_limits<float>::infinity();
    return band;
  }
  band.hi = edge(0.0, 64.0 + theta, [&](double s) { return f(s) >= theta; });  // act rises from 0 through theta
  // The minimum on the negative side (golden-section search), and the band where -act >= theta.
  double a = -8.0, b = 0.0;
  for (int i = 0; i < 200; ++i) {
    const double m1 = b - 0.618033988749895 * (b - a), m2 = a + 0.618033988749895 * (b - a);
    if (f(m1) < f(m2)) b = m2;
    else a = m1;
  }
  const double s_min = 0.5 * (a + b);
  const auto deep = [&](double s) { return -f(s) >= theta; };
  if (deep(s_min)) {
    band.lo1 = edge(-64.0, s_min, deep);  // left of the minimum, -act rises towards it
    band.lo2 = edge(0.0, s_min, deep);    // right of it, -act falls towards 0
  }
  return band;
}

void mark_band(const act_band& b, float* v, int64_t n) {
  for (int64_t k = 0; k < n; ++k) v[k] = (v[k] >= b.hi) | ((v[k] >= b.lo1) & (v[k] <= b.lo2)) ? 1.0f : 0.0f;
}

void hidden_values(const hparams& hp, float t, const float* g, const float* u, float* out, int64_t n) {
  // The ReLU forms as plain loops the compiler vectorizes; the others one value at a time.
  const bool relu = hp.act != activation::silu && hp.act != activation::gelu;
  if (hp.gated_ffn && hp.act == activation::drelu) {
    for (int64_t k = 0; k < n; ++k) out[k] = std::max(g[k], 0.0f) * std::max(u[k], 0.0f);
  } else if (hp.gated_ffn && relu) {
    for (int64_t k = 0; k < n; ++k) out[k] = std::max(g[k], 0.0f) * u[k];
  } else if (relu) {
    for (int64_t k = 0; k < n; ++k) out[k] = std::max(u[k], 0.0f);
  } else if (hp.gated_ffn && hp.act == activation::silu) {
    // SwiGLU written out (silu's expression, layer_ops): no switch a value, and the rule as a mask, not
    // a branch (kept or not is a coin toss at S = 0.5: the branch's misses made this loop 4x slower a
    // value on a thresholded layer than on a dense one).
    for (int64_t k = 0; k < n; ++k) {
      const float a = g[k] / (1.0f + std::exp(-g[k]));
      out[k] = kept(a * u[k], std::fabs(a) >= t);
    }
  } else {
    for (int64_t k = 0; k < n; ++k) out[k] = hidden_value(hp, t, hp.gated_ffn ? g[k] : 0.0f, u[k]);
  }
}

}  // namespace hotcold
