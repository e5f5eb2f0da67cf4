#include "model/forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"

namespace hotcold {

using namespace kernels;

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float gelu(float x) {
  constexpr float sqrt_2_over_pi = 0.79788456080286535588f;
  constexpr float coef_a = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * (1.0f + coef_a * x * x)));
}

void dequantize_row(const tensor_view& t, int64_t row, float* out) {
  const uint8_t* p = t.row(row);
  switch (t.type) {
    case tensor_type::f32: std::memcpy(out, p, static_cast<size_t>(t.ne0) * 4); break;
    case tensor_type::f16: fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(p), out, static_cast<size_t>(t.ne0)); break;
    case tensor_type::bf16: bf16_to_fp32_row(reinterpret_cast<const uint16_t*>(p), out, static_cast<size_t>(t.ne0)); break;
    case tensor_type::q8_0: dequantize_row_q8_0(reinterpret_cast<const block_q8_0*>(p), out, t.ne0); break;
    case tensor_type::q4_0: dequantize_row_q4_0(reinterpret_cast<const block_q4_0*>(p), out, t.ne0); break;
    case tensor_type::q6_k: dequantize_row_q6_k(reinterpret_cast<const block_q6_k*>(p), out, t.ne0); break;
    default: throw std::logic_error(fmt::format("dequantize_row: {} not supported", tensor_type_name(t.type)));
  }
}

namespace {

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  float scale = 1.0f / std::sqrt(static_cast<float>(ss / n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
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

// Rotates each head of `v` (n_heads x head_dim) by position `pos`.
void rope(float* v, int64_t n_heads, const hparams& hp, int64_t pos) {
  const int64_t hd = hp.head_dim();
  const float theta_scale = std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(hp.n_rot));
  for (int64_t h = 0; h < n_heads; ++h) {
    float* x = v + h * hd;
    float theta = static_cast<float>(pos) * hp.rope_freq_scale;
    for (int64_t i = 0; i < hp.n_rot / 2; ++i, theta *= theta_scale) {
      float c = std::cos(theta), s = std::sin(theta);
      int64_t a = hp.rope == rope_style::adjacent_pairs ? 2 * i : i;
      int64_t b = hp.rope == rope_style::adjacent_pairs ? 2 * i + 1 : i + hp.n_rot / 2;
      float x0 = x[a], x1 = x[b];
      x[a] = x0 * c - x1 * s;
      x[b] = x0 * s + x1 * c;
    }
  }
}

const float* f32(const tensor_view& t) { return reinterpret_cast<const float*>(t.data); }

}  // namespace

inference_context::inference_context(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads)
    : model_(std::move(m)), n_ctx_(n_ctx > 0 ? n_ctx : model_->hp().n_ctx_train), pool_(n_threads) {
  const hparams& hp = model_->hp();
  x_.resize(hp.n_embd);
  xn_.resize(hp.n_embd);
  xn2_.resize(hp.n_embd);
  qkv_.resize(hp.n_embd + 2 * hp.n_embd_kv());
  attn_out_.resize(hp.n_embd);
  proj_.resize(hp.n_embd);
  ffn_out_.resize(hp.n_embd);
  gate_.resize(hp.n_ff);
  up_.resize(hp.n_ff);
  scores_.resize(static_cast<size_t>(hp.n_head * n_ctx_));
  logits_.resize(hp.n_vocab);
  xq_.resize(static_cast<size_t>(std::max(hp.n_embd, hp.n_ff) / qk8_0 + 1));
  size_t cache = static_cast<size_t>(hp.n_layer * n_ctx_ * hp.n_embd_kv());
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

void inference_context::matvec(const tensor_view& w, const float* x, float* y) {
  const int64_t n = w.ne0;
  const bool q8_input = w.type == tensor_type::q8_0 || w.type == tensor_type::q4_0;
  if (q8_input) quantize_row_q8_0(x, xq_.data(), n);  // once per product, as llama.cpp does
  const block_q8_0* xq = xq_.data();
  pool_.parallel_for(w.ne1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* row = w.row(r);
      switch (w.type) {
        case tensor_type::f32: y[r] = dot_f32(reinterpret_cast<const float*>(row), x, n); break;
        case tensor_type::f16: y[r] = dot_f16(reinterpret_cast<const uint16_t*>(row), x, n); break;
        case tensor_type::bf16: y[r] = dot_bf16(reinterpret_cast<const uint16_t*>(row), x, n); break;
        case tensor_type::q8_0: y[r] = dot_q8_0(reinterpret_cast<const block_q8_0*>(row), xq, n); break;
        case tensor_type::q4_0: y[r] = dot_q4_0(reinterpret_cast<const block_q4_0*>(row), xq, n); break;
        case tensor_type::q6_k: y[r] = dot_q6_k(reinterpret_cast<const block_q6_k*>(row), x, n); break;
        default: break;
      }
    }
  }, 16);
}

void inference_context::attention(int64_t layer, int64_t pos) {
  const hparams& hp = model_->hp();
  const int64_t hd = hp.head_dim(), kv = hp.n_embd_kv();
  const int64_t group = hp.n_head / hp.n_head_kv;  // query heads per KV head
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* kc = k_cache_.data() + layer * n_ctx_ * kv;
  const float* vc = v_cache_.data() + layer * n_ctx_ * kv;
  const float* q = qkv_.data();
  pool_.parallel_for(hp.n_head, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t kvh = h / group;
      float* s = scores_.data() + h * n_ctx_;
      float max_s = -INFINITY;
      for (int64_t t = 0; t <= pos; ++t) {
        s[t] = dot_f32(q + h * hd, kc + t * kv + kvh * hd, hd) * scale;
        max_s = std::max(max_s, s[t]);
      }
      double sum = 0;
      for (int64_t t = 0; t <= pos; ++t) sum += (s[t] = std::exp(s[t] - max_s));
      float inv = static_cast<float>(1.0 / sum);
      float* out = attn_out_.data() + h * hd;
      std::fill(out, out + hd, 0.0f);
      for (int64_t t = 0; t <= pos; ++t) axpy_f32(s[t] * inv, vc + t * kv + kvh * hd, out, hd);
    }
  });
}

void inference_context::ffn(int64_t layer, const layer_weights& l, const float* in, float* out) {
  const hparams& hp = model_->hp();
  if (hp.gated_ffn) {
    matvec(l.ffn_gate, in, gate_.data());
    matvec(l.ffn_up, in, up_.data());
    for (int64_t i = 0; i < hp.n_ff; ++i) {
      float g = gate_[i], u = up_[i];
      switch (hp.act) {
        case activation::silu: gate_[i] = silu(g) * u; break;
        case activation::relu: gate_[i] = std::max(g, 0.0f) * u; break;
        case activation::drelu: gate_[i] = std::max(g, 0.0f) * std::max(u, 0.0f); break;
        case activation::gelu: gate_[i] = gelu(g) * u; break;
      }
    }
  } else {
    matvec(l.ffn_up, in, gate_.data());
    for (int64_t i = 0; i < hp.n_ff; ++i) {
      float u = gate_[i];
      gate_[i] = hp.act == activation::gelu ? gelu(u) : hp.act == activation::silu ? silu(u) : std::max(u, 0.0f);
    }
  }
  if (observer_) observer_("ffn_act", layer, gate_);
  matvec(l.ffn_down, gate_.data(), out);
}

std::span<const float> inference_context::forward(token_id token, int64_t pos) {
  const hparams& hp = model_->hp();
  const model_weights& w = model_->weights();
  if (token < 0 || token >= hp.n_vocab) throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", token));
  if (pos < 0 || pos >= n_ctx_) throw std::out_of_range(fmt::format("position {} is outside the context of {}", pos, n_ctx_));
  const int64_t n_embd = hp.n_embd, kv = hp.n_embd_kv();
  const bool falcon = hp.arch == architecture::falcon;

  dequantize_row(w.token_embd, token, x_.data());

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const layer_weights& l = w.layers[static_cast<size_t>(il)];
    float* q = qkv_.data();
    float* k = q + n_embd;
    float* v = k + kv;

    // attention input, q k v
    if (falcon) {
      layer_norm(x_.data(), f32(l.attn_norm), f32(l.attn_norm_b), xn_.data(), n_embd, hp.norm_eps);
      matvec(l.wqkv, xn_.data(), qkv_.data());
    } else {
      rms_norm(x_.data(), f32(l.attn_norm), xn_.data(), n_embd, hp.norm_eps);
      matvec(l.wq, xn_.data(), q);
      matvec(l.wk, xn_.data(), k);
      matvec(l.wv, xn_.data(), v);
    }
    rope(q, hp.n_head, hp, pos);
    rope(k, hp.n_head_kv, hp, pos);
    std::memcpy(k_cache_.data() + (il * n_ctx_ + pos) * kv, k, static_cast<size_t>(kv) * 4);
    std::memcpy(v_cache_.data() + (il * n_ctx_ + pos) * kv, v, static_cast<size_t>(kv) * 4);

    attention(il, pos);
    matvec(l.wo, attn_out_.data(), proj_.data());

    if (falcon) {
      // Parallel attention and FFN, both reading the layer's input.
      const float* ffn_in = xn_.data();
      if (l.attn_norm_2) {
        layer_norm(x_.data(), f32(l.attn_norm_2), f32(l.attn_norm_2_b), xn2_.data(), n_embd, hp.norm_eps);
        ffn_in = xn2_.data();
      }
      ffn(il, l, ffn_in, ffn_out_.data());
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += proj_[i] + ffn_out_[i];
    } else {
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += proj_[i];
      rms_norm(x_.data(), f32(l.ffn_norm), xn2_.data(), n_embd, hp.norm_eps);
      ffn(il, l, xn2_.data(), ffn_out_.data());
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += ffn_out_[i];
    }
  }

  if (falcon) layer_norm(x_.data(), f32(w.output_norm), f32(w.output_norm_b), xn_.data(), n_embd, hp.norm_eps);
  else rms_norm(x_.data(), f32(w.output_norm), xn_.data(), n_embd, hp.norm_eps);
  matvec(w.output, xn_.data(), logits_.data());
  return logits_;
}

}  // namespace hotcold
