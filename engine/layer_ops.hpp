#pragma once
// The small per-token operations of a layer that every path of the engine shares: norms, RoPE, the
// FFN's activations, and one row of a weight tensor as floats.
#include <cstdint>

#include "model/model.hpp"
#include "model/recipe.hpp"

namespace hotcold {

float silu(float x);
float gelu(float x);  // tanh approximation, as llama.cpp
// Row `row` of t as n_embd floats, for every tensor type hotcold reads.
void dequantize_row(const tensor_view& t, int64_t row, float* out);

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);
void layer_norm(const float* x, const float* w, const float* b, float* out, int64_t n, float eps);
// The norm a recipe names, on one row of n values.
void apply_norm(norm_kind kind, const norm_weights& nw, const float* x, float* out, int64_t n, float eps);

// RoPE at one position: the rotation's cosines and sines (n_rot / 2 pairs), the same for every head,
// computed once and applied to the query heads and the key heads. factors: the per-pair frequency
// factors the context rotates by (hparams::rope_factors_for its size; empty: none). Both are scaled by
// rope_attn_factor (Phi-3's long context; 1 elsewhere), as ggml's rope scales them — unless `scaled`
// is false: the rotation alone (a cached key moved to another position, which was scaled once).
struct rope_angles {
  float c[max_rope_dims / 2], s[max_rope_dims / 2];
  rope_angles(const hparams& hp, int64_t pos, const std::vector<float>& factors, bool scaled = true);
};
// Each head of v (n_heads x head_dim) through RMSNorm with the same weights w (head_dim): Qwen3's
// norms of q and k.
void head_rms_norm(float* v, int64_t n_heads, int64_t head_dim, const float* w, float eps);
// Rotates each head of v (n_heads x head_dim) by one position's angles.
void rope(float* v, int64_t n_heads, const hparams& hp, const rope_angles& r);

}  // namespace hotcold
