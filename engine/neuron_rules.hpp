#pragma once
// Which FFN neurons fire and what they are worth: the activations, a thresholded file's rule, the
// margins a predictor learns and the bands its scores are read through. The sparse routines
// (engine/sparse_ffn.hpp), the forward pass and the tools share them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "engine/layer_ops.hpp"
#include "model/arch.hpp"

namespace hotcold {

// act(x): SiLU, GELU, or ReLU (the ReLU family).
inline float activate(activation act, float x) {
  switch (act) {
    case activation::silu: return silu(x);
    case activation::gelu: return gelu(x);
    default: return std::max(x, 0.0f);
  }
}
// A thresholded activation's rule: the neuron counts where |act(v)| >= t (v: the gate, or up without one).
inline bool passes(const hparams& hp, float t, float v) { return std::fabs(activate(hp.act, v)) >= t; }
// Where the gate alone decides (ReLU family, or a thresholded activation): whether gate value g lets
// the neuron fire.
inline bool relu_family(const hparams& hp) { return hp.act == activation::relu || hp.act == activation::drelu; }
inline bool gate_opens(const hparams& hp, float t, float g) { return relu_family(hp) ? g > 0.0f : passes(hp, t, g); }
// Whether the gate alone decides that (a gated FFN of the ReLU family, or with an activation threshold t).
inline bool gate_decides(const hparams& hp, float t) { return hp.gated_ffn && (relu_family(hp) || t > 0.0f); }

// A neuron's hidden value from its gate and up pre-activations (gate unused without a gate), in a
// layer whose activation threshold is t (hparams::act_threshold_of; 0: none): act(g) u, or 0 where
// |act(g)| < t (no gate: act(u), or 0 where |act(u)| < t).
float hidden_value(const hparams& hp, float t, float g, float u);
// out[k] = hidden_value(hp, t, g[k], u[k]) for k < n (g unused without a gate; out may be u).
void hidden_values(const hparams& hp, float t, const float* g, const float* u, float* out, int64_t n);
// A neuron's firing margin: positive exactly when it fires — the gate (ReLU; no gate: up),
// min(gate, up) for dReLU, |act(g)| - t for a thresholded activation.
float firing_margin(const hparams& hp, float t, float g, float u);
// v[k] = |act(v[k])| for k < n: a thresholded file's predictor scores (estimated pre-activations) as
// the magnitudes its threshold is compared with.
void act_magnitudes(activation act, float* v, int64_t n);
// v where keep, else 0, as a bit mask: a branch on "kept" — a coin toss at S = 0.5, and a token's
// choice likewise — would be mispredicted half the time.
inline float kept(float v, bool keep) { return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & (0u - static_cast<uint32_t>(keep))); }
// Where |act(s)| >= theta for SiLU and GELU, which rise from their one minimum (SiLU -0.278 at -1.28,
// GELU -0.170 at -0.75) through 0 at 0: s >= hi, or lo1 <= s <= lo2 (an empty band where theta is
// deeper than the minimum). in_band(s) is that test — |act(s)| >= theta without an exp a value (up to
// the boundaries' last bit).
struct act_band {
  float hi = 0, lo1 = 1, lo2 = 0;
  bool in_band(float s) const { return s >= hi || (s >= lo1 && s <= lo2); }
};
act_band act_band_of(activation act, float theta);
// v[k] = 1 where in_band(v[k]), else 0 (branch-free).
void mark_band(const act_band& b, float* v, int64_t n);

}  // namespace hotcold
