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
  hidden_.resize(hp.n_ff);
  active_.reserve(hp.n_ff);
  int64_t max_rank = 0;
  for (const auto& l : model_->weights().layers)
    if (l.pred_fc1) max_rank = std::max(max_rank, l.pred_fc1.ne1);
  pred_h_.resize(static_cast<size_t>(max_rank));
  acc_.resize(static_cast<size_t>(pool_.size() * hp.n_embd));
  stats_.resize(static_cast<size_t>(hp.n_layer));
  computed_.assign(static_cast<size_t>(hp.n_layer), 0);
  scores_.resize(static_cast<size_t>(hp.n_head * n_ctx_));
  logits_.resize(hp.n_vocab);
  // Quantized activations for every product's input: n_embd, n_ff, or a predictor's rank (fc2).
  xq_.resize(static_cast<size_t>(std::max({hp.n_embd, hp.n_ff, max_rank}) / qk8_0 + 1));
  size_t cache = static_cast<size_t>(hp.n_layer * n_ctx_ * hp.n_embd_kv());
  k_cache_.assign(cache, 0.0f);
  v_cache_.assign(cache, 0.0f);
}

void inference_context::quantize_input(const tensor_view& w, const float* x) {
  if (w.type == tensor_type::q8_0 || w.type == tensor_type::q4_0) quantize_row_q8_0(x, xq_.data(), w.ne0);
}

float inference_context::row_dot(const tensor_view& w, int64_t r, const float* x) const {
  const uint8_t* row = w.row(r);
  const int64_t n = w.ne0;
  switch (w.type) {
    case tensor_type::f32: return dot_f32(reinterpret_cast<const float*>(row), x, n);
    case tensor_type::f16: return dot_f16(reinterpret_cast<const uint16_t*>(row), x, n);
    case tensor_type::bf16: return dot_bf16(reinterpret_cast<const uint16_t*>(row), x, n);
    case tensor_type::q8_0: return dot_q8_0(reinterpret_cast<const block_q8_0*>(row), xq_.data(), n);
    case tensor_type::q4_0: return dot_q4_0(reinterpret_cast<const block_q4_0*>(row), xq_.data(), n);
    case tensor_type::q6_k: return dot_q6_k(reinterpret_cast<const block_q6_k*>(row), x, n);
    default: return 0.0f;
  }
}

static void row_axpy(const tensor_view& w, int64_t r, float a, float* y) {
  const uint8_t* row = w.row(r);
  const int64_t n = w.ne0;
  switch (w.type) {
    case tensor_type::f32: axpy_f32(a, reinterpret_cast<const float*>(row), y, n); break;
    case tensor_type::f16: axpy_f16(a, reinterpret_cast<const uint16_t*>(row), y, n); break;
    case tensor_type::bf16: axpy_bf16(a, reinterpret_cast<const uint16_t*>(row), y, n); break;
    case tensor_type::q8_0: axpy_q8_0(a, reinterpret_cast<const block_q8_0*>(row), y, n); break;
    case tensor_type::q4_0: axpy_q4_0(a, reinterpret_cast<const block_q4_0*>(row), y, n); break;
    case tensor_type::q6_k: axpy_q6_k(a, reinterpret_cast<const block_q6_k*>(row), y, n); break;
    default: break;
  }
}

void inference_context::matvec(const tensor_view& w, const float* x, float* y) {
  quantize_input(w, x);  // once per product, as llama.cpp does
  pool_.parallel_for(w.ne1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) y[r] = row_dot(w, r, x);
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

void inference_context::set_mode(ffn_mode m) {
  if (m == ffn_mode::sparse && !model_->has_predictors())
    throw model_error(fmt::format("{}: --mode sparse needs a predictor in every layer (make one with `hotcold prepare`)", model_->path()));
  mode_ = m;
}

static float activate(activation act, float x) {
  switch (act) {
    case activation::silu: return silu(x);
    case activation::gelu: return gelu(x);
    default: return std::max(x, 0.0f);
  }
}

// A neuron's hidden value from its gate and up pre-activations (gate unused without a gate).
static float hidden_value(const hparams& hp, float g, float u) {
  if (!hp.gated_ffn) return activate(hp.act, u);
  if (hp.act == activation::drelu) return std::max(g, 0.0f) * std::max(u, 0.0f);
  return activate(hp.act, g) * u;
}

float inference_context::neuron(const layer_weights& l, int64_t i, const float* in) const {
  const hparams& hp = model_->hp();
  float u = row_dot(l.ffn_up, i, in);
  return hidden_value(hp, hp.gated_ffn ? row_dot(l.ffn_gate, i, in) : 0.0f, u);
}

void inference_context::ffn(int64_t layer, const layer_weights& l, const float* in, const float* pred_in, float* out) {
  const hparams& hp = model_->hp();
  const int64_t n_ff = hp.n_ff, n_embd = hp.n_embd;
  const bool choose = mode_ == ffn_mode::oracle || (mode_ == ffn_mode::sparse && l.pred_fc1);
  if (observer_) observer_("ffn_pred_in", layer, std::span<const float>(pred_in, static_cast<size_t>(n_embd)));

  if (!choose || mode_ == ffn_mode::oracle || stats_on_) {
    // Every neuron: gate/up as matrix-vector products, then the activation.
    if (hp.gated_ffn) matvec(l.ffn_gate, in, gate_.data());
    matvec(l.ffn_up, in, up_.data());
    for (int64_t i = 0; i < n_ff; ++i) hidden_[i] = hidden_value(hp, hp.gated_ffn ? gate_[i] : 0.0f, up_[i]);
  }

  if (choose && stats_on_) truth_ = hidden_;
  if (choose) {
    active_.clear();
    if (mode_ == ffn_mode::oracle) {
      for (int64_t i = 0; i < n_ff; ++i)
        if (hidden_[i] != 0.0f) active_.push_back(static_cast<int32_t>(i));
    } else {
      // score = fc2 . relu(fc1 . x); neuron i runs iff score_i >= the layer's threshold.
      const int64_t rank = l.pred_fc1.ne1;
      matvec(l.pred_fc1, pred_in, pred_h_.data());
      for (int64_t k = 0; k < rank; ++k) pred_h_[k] = std::max(pred_h_[k], 0.0f);
      matvec(l.pred_fc2, pred_h_.data(), gate_.data());
      const float threshold = hp.sparse_threshold[static_cast<size_t>(layer)];
      for (int64_t i = 0; i < n_ff; ++i)
        if (gate_[i] >= threshold) active_.push_back(static_cast<int32_t>(i));
    }
    // The chosen neurons only: each thread takes a contiguous share of them and owns its rows of
    // hidden_ and its own accumulator; the accumulators are summed afterwards.
    std::fill(hidden_.begin(), hidden_.end(), 0.0f);
    quantize_input(l.ffn_up, in);
    if (hp.gated_ffn) quantize_input(l.ffn_gate, in);
    const int64_t n_active = static_cast<int64_t>(active_.size());
    const int threads = pool_.size();
    pool_.parallel_for(threads, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        float* acc = acc_.data() + t * n_embd;
        std::fill(acc, acc + n_embd, 0.0f);
        for (int64_t k = n_active * t / threads; k < n_active * (t + 1) / threads; ++k) {
          int64_t i = active_[static_cast<size_t>(k)];
          float h = neuron(l, i, in);
          hidden_[i] = h;
          if (l.ffn_down_t && h != 0.0f) row_axpy(l.ffn_down_t, i, h, acc);
        }
      }
    });
  }

  computed_[static_cast<size_t>(layer)] += choose ? static_cast<int64_t>(active_.size()) : n_ff;
  if (stats_on_) {
    auto& st = stats_[static_cast<size_t>(layer)];
    st.tokens += 1;
    st.neurons += n_ff;
    if (!choose) {  // every neuron computed: each truly active one is found
      int64_t truly = 0;
      for (int64_t i = 0; i < n_ff; ++i) truly += hidden_[i] != 0.0f;
      st.computed += n_ff;
      st.truly_active += truly;
      st.active_computed += truly;
    } else {
      // truth_ is this token's dense hidden vector, saved before the sparse path ran.
      std::vector<uint8_t> computed(static_cast<size_t>(n_ff), 0);
      for (int32_t i : active_) computed[static_cast<size_t>(i)] = 1;
      st.computed += static_cast<int64_t>(active_.size());
      for (int64_t i = 0; i < n_ff; ++i) {
        bool truly = truth_[static_cast<size_t>(i)] != 0.0f;
        st.truly_active += truly;
        st.active_computed += truly && computed[static_cast<size_t>(i)];
      }
    }
  }
  if (observer_) observer_("ffn_act", layer, hidden_);

  if (l.ffn_down_t) {
    if (!choose) {  // dense over AXPY rows: the same per-thread accumulators over all neurons
      const int threads = pool_.size();
      pool_.parallel_for(threads, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          float* acc = acc_.data() + t * n_embd;
          std::fill(acc, acc + n_embd, 0.0f);
          // Dense means every neuron, zeros included: this is the baseline sparse mode is measured against.
          for (int64_t i = n_ff * t / threads; i < n_ff * (t + 1) / threads; ++i) row_axpy(l.ffn_down_t, i, hidden_[i], acc);
        }
      });
    }
    std::fill(out, out + n_embd, 0.0f);
    for (int t = 0; t < pool_.size(); ++t)
      for (int64_t j = 0; j < n_embd; ++j) out[j] += acc_[t * n_embd + j];
  } else {
    matvec(l.ffn_down, hidden_.data(), out);
  }
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

    if (!falcon && hp.pred_input == predictor_input::layer_input) layer_in_ = x_;
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
      ffn(il, l, ffn_in, x_.data(), ffn_out_.data());  // the predictor reads the layer's input
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += proj_[i] + ffn_out_[i];
    } else {
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += proj_[i];
      rms_norm(x_.data(), f32(l.ffn_norm), xn2_.data(), n_embd, hp.norm_eps);
      ffn(il, l, xn2_.data(), hp.pred_input == predictor_input::layer_input ? layer_in_.data() : x_.data(), ffn_out_.data());
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += ffn_out_[i];
    }
  }

  if (falcon) layer_norm(x_.data(), f32(w.output_norm), f32(w.output_norm_b), xn_.data(), n_embd, hp.norm_eps);
  else rms_norm(x_.data(), f32(w.output_norm), xn_.data(), n_embd, hp.norm_eps);
  matvec(w.output, xn_.data(), logits_.data());
  return logits_;
}

}  // namespace hotcold
