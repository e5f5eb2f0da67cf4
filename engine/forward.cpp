#include "engine/forward.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/dot.hpp"
#include "kernels/cpu/fp16.hpp"
#include "engine/matmul.hpp"
#include "engine/sparse_ffn.hpp"

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
  // The sum of squares in eight independent double lanes (one chain of 2048 dependent additions:
  // 1.6 -> 0.6 us, twice a layer and once for the head each token).
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

// RoPE at position pos: the rotation's cosines and sines (n_rot / 2 pairs), the same for every head,
// computed once and applied to the query heads and the key heads.
struct rope_angles {
  float c[max_rope_dims / 2], s[max_rope_dims / 2];
  rope_angles(const hparams& hp, int64_t pos) {
    const float theta_scale = std::pow(hp.rope_freq_base, -2.0f / static_cast<float>(hp.n_rot));
    float theta = static_cast<float>(pos) * hp.rope_freq_scale;
    for (int64_t i = 0; i < hp.n_rot / 2; ++i, theta *= theta_scale) c[i] = std::cos(theta), s[i] = std::sin(theta);
  }
};

// Rotates each head of `v` (n_heads x head_dim) by one position's angles.
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

const float* f32(const tensor_view& t) { return reinterpret_cast<const float*>(t.data); }

}  // namespace

inference_context::inference_context(std::shared_ptr<const model> m, int64_t n_ctx, int n_threads, int64_t n_seq)
    : model_(std::move(m)), n_ctx_(n_ctx > 0 ? n_ctx : model_->hp().n_ctx_train), n_seq_(std::max<int64_t>(1, n_seq)), pool_(n_threads),
      predictor_(*model_, pool_) {
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
  margin_.resize(hp.n_ff);
  active_.reserve(hp.n_ff);
  int64_t max_rank = 0;
  for (const auto& l : model_->weights().layers)
    if (l.pred_fc1) max_rank = std::max(max_rank, l.pred_fc1.ne1);
  chosen1_.resize(static_cast<size_t>(hp.n_ff));
  acc_.resize(static_cast<size_t>(pool_.size() * hp.n_embd));
  stats_.resize(static_cast<size_t>(hp.n_layer));
  cost_.resize(static_cast<size_t>(hp.n_layer));
  choices_.resize(static_cast<size_t>(hp.n_layer));
  computed_.assign(static_cast<size_t>(hp.n_layer), 0);
  read_.assign(static_cast<size_t>(hp.n_layer), 0);
  down_read_.assign(static_cast<size_t>(hp.n_layer), 0);
  scores_.resize(static_cast<size_t>(hp.n_head * n_ctx_));
  logits_.resize(hp.n_vocab);
  // Quantized activations for every product's input: n_embd, n_ff, or a predictor's rank (fc2).
  xq_.resize(static_cast<size_t>(std::max({hp.n_embd, hp.n_ff, max_rank}) / qk8_0 + 1));
  size_t cache = static_cast<size_t>(n_seq_ * hp.n_layer * n_ctx_ * hp.n_embd_kv());
  k_cache_ = page_buffer(cache * sizeof(float), "the KV cache");
  v_cache_ = page_buffer(cache * sizeof(float), "the KV cache");
}

void inference_context::matvec(const tensor_view& w, const float* x, float* y) { hotcold::matmul(pool_, w, x, 1, y, xq_); }

float* inference_context::k_at(int64_t seq, int64_t layer, int64_t pos) {
  return static_cast<float*>(k_cache_.data()) + ((seq * model_->hp().n_layer + layer) * n_ctx_ + pos) * model_->hp().n_embd_kv();
}
float* inference_context::v_at(int64_t seq, int64_t layer, int64_t pos) {
  return static_cast<float*>(v_cache_.data()) + ((seq * model_->hp().n_layer + layer) * n_ctx_ + pos) * model_->hp().n_embd_kv();
}

void inference_context::attend_head4(const float* const* q, int nq, int64_t seq, int64_t layer, int64_t pos0, int64_t h, float* s, float* const* out) {
  const hparams& hp = model_->hp();
  const int64_t hd = hp.head_dim(), kv = hp.n_embd_kv();
  const int64_t kvh = h / (hp.n_head / hp.n_head_kv);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* kc = k_at(seq, layer, 0) + kvh * hd;
  const float* vc = v_at(seq, layer, 0) + kvh * hd;
  const int64_t last = pos0 + nq - 1, stride = pos0 + 4;  // query j sees positions 0..pos0 + j
  const float* qs[4] = {q[0], q[std::min(1, nq - 1)], q[std::min(2, nq - 1)], q[std::min(3, nq - 1)]};
  // Scores: four cached keys against the (up to) four queries per call.
  for (int64_t t = 0; t <= last; t += 4) {
    const float* ks[4] = {kc + t * kv, kc + std::min(t + 1, last) * kv, kc + std::min(t + 2, last) * kv, kc + std::min(t + 3, last) * kv};
    float o[16];
    dot4n_f32(ks, qs, nq, hd, o);
    for (int r = 0; r < 4 && t + r <= last; ++r)
      for (int j = 0; j < nq; ++j) s[j * stride + t + r] = o[4 * r + j] * scale;
  }
  // Softmax of each query over its own positions, then its output: values four rows at a time.
  for (int j = 0; j < nq; ++j) {
    float* sj = s + j * stride;
    const int64_t pos = pos0 + j;
    float max_s = -INFINITY;
    for (int64_t t = 0; t <= pos; ++t) max_s = std::max(max_s, sj[t]);
    double sum = 0;
    for (int64_t t = 0; t <= pos; ++t) sum += (sj[t] = std::exp(sj[t] - max_s));
    const float inv = static_cast<float>(1.0 / sum);
    std::fill(out[j], out[j] + hd, 0.0f);
    int64_t t = 0;
    for (; t + 4 <= pos + 1; t += 4) {
      const float a[4] = {sj[t] * inv, sj[t + 1] * inv, sj[t + 2] * inv, sj[t + 3] * inv};
      const float* vs[4] = {vc + t * kv, vc + (t + 1) * kv, vc + (t + 2) * kv, vc + (t + 3) * kv};
      axpy4_f32(a, vs, out[j], hd);
    }
    for (; t <= pos; ++t) axpy_f32(sj[t] * inv, vc + t * kv, out[j], hd);
  }
}

void inference_context::attend_head(const float* q, int64_t seq, int64_t layer, int64_t pos, int64_t h, float* s, float* out) {
  const hparams& hp = model_->hp();
  const int64_t hd = hp.head_dim(), kv = hp.n_embd_kv();
  const int64_t kvh = h / (hp.n_head / hp.n_head_kv);  // grouped-query: the head's KV head
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* kc = k_at(seq, layer, 0) + kvh * hd;
  const float* vc = v_at(seq, layer, 0) + kvh * hd;
  if (attend_block_vectorized(hd)) return attend_one(q, kc, vc, kv, hd, pos + 1, scale, out, s);
  float max_s = -INFINITY;
  for (int64_t t = 0; t <= pos; ++t) {
    s[t] = dot_f32(q, kc + t * kv, hd) * scale;
    max_s = std::max(max_s, s[t]);
  }
  double sum = 0;
  for (int64_t t = 0; t <= pos; ++t) sum += (s[t] = std::exp(s[t] - max_s));
  const float inv = static_cast<float>(1.0 / sum);
  std::fill(out, out + hd, 0.0f);
  for (int64_t t = 0; t <= pos; ++t) axpy_f32(s[t] * inv, vc + t * kv, out, hd);
}

void inference_context::attention(int64_t seq, int64_t layer, int64_t pos) {
  const int64_t hd = model_->hp().head_dim();
  pool_.parallel_for(model_->hp().n_head, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h) attend_head(qkv_.data() + h * hd, seq, layer, pos, h, scores_.data() + h * n_ctx_, attn_out_.data() + h * hd);
  });
}

void inference_context::set_mode(ffn_mode m) {
  if (m == ffn_mode::sparse && !model_->has_predictors())
    throw model_error(fmt::format("{}: --mode sparse needs a predictor in every layer (make one with `hotcold prepare`)", model_->path()));
  mode_ = m;
}


void inference_context::ffn(int64_t layer, const layer_weights& l, const float* in, const float* pred_in, float* out) {
  const hparams& hp = model_->hp();
  const int64_t n_ff = hp.n_ff, n_embd = hp.n_embd;
  const bool choose = mode_ == ffn_mode::oracle || (mode_ == ffn_mode::sparse && l.pred_fc1);
  bool executed = false;  // out already written by the executor
  if (observer_) observer_("ffn_pred_in", layer, std::span<const float>(pred_in, static_cast<size_t>(n_embd)));

  if (!choose || mode_ == ffn_mode::oracle || stats_on_) {
    trace_scope span(trace_, "ffn", step_, layer);
    // Every neuron: gate/up as matrix-vector products, then the activation.
    if (hp.gated_ffn) {  // gate and up in one pass (one split across the threads, the input quantized once)
      const tensor_view* ws[2] = {&l.ffn_gate, &l.ffn_up};
      float* ys[2] = {gate_.data(), up_.data()};
      matmul_same_input(pool_, ws, in, 1, ys, xq_);
    } else {
      matvec(l.ffn_up, in, up_.data());
    }
    hidden_values(hp, gate_.data(), up_.data(), hidden_.data(), n_ff);
    if (observer_ && (hp.act == activation::relu || hp.act == activation::drelu)) {
      // A neuron's firing margin: positive exactly when it fires (ReLU family).
      for (int64_t i = 0; i < n_ff; ++i)
        margin_[i] = !hp.gated_ffn ? up_[i] : hp.act == activation::drelu ? std::min(gate_[i], up_[i]) : gate_[i];
      observer_("ffn_margin", layer, margin_);
    }
  }

  if (choose && stats_on_) truth_ = hidden_;
  if (choose) {
    active_.clear();
    if (mode_ == ffn_mode::oracle) {
      for (int64_t i = 0; i < n_ff; ++i)
        if (hidden_[i] != 0.0f) active_.push_back(static_cast<int32_t>(i));
    } else {
      trace_scope span(trace_, "predict", step_, layer);
      predictor_.predict(layer, pred_in, 1, chosen1_.data(), active_);
    }
    if (trace_ && mode_ == ffn_mode::sparse) trace_->record_active(step_, layer, 1, n_ff, chosen1_.data());
    // The chosen neurons only: each thread takes a contiguous share of them and owns its rows of
    // hidden_ and its own accumulator; the accumulators are summed afterwards.
    std::fill(hidden_.begin(), hidden_.end(), 0.0f);
    if (executor_ && l.ffn_down_t) {  // or an executor (the hot/cold split) computes them
      executor_->run(step_, layer, in, active_, hidden_.data(), out);
      executed = true;
    } else {
    trace_scope span(trace_, "ffn", step_, layer);
    if (wants_q8_input(l.ffn_up.type) || (hp.gated_ffn && wants_q8_input(l.ffn_gate.type)))  // once for gate and up
      quantize_row_q8_0(in, xq_.data(), n_embd);
    // Each thread its own shard of the chosen neurons first, then what is left of the others'
    // (neuron_shards): static halves left one thread waiting for the other, 3-10% of a Q4_0 token.
    neuron_shards pieces(active_.data(), static_cast<int64_t>(active_.size()), n_ff, pool_.size());
    // With down rows the down projection is the pieces' sums.
    run_pieces(pool_, pieces, n_embd, acc_, l.ffn_down_t ? out : nullptr, [&](int64_t k0, int64_t k1, float* acc) {
      token_neurons(hp, l.ffn_gate, l.ffn_up, l.ffn_down_t, active_.data() + k0, active_.data() + k0, k1 - k0, in, xq_.data(), hidden_.data(), acc);
    });
    executed = static_cast<bool>(l.ffn_down_t);
    }
  }

  computed_[static_cast<size_t>(layer)] += choose ? static_cast<int64_t>(active_.size()) : n_ff;
  read_[static_cast<size_t>(layer)] += choose ? static_cast<int64_t>(active_.size()) : n_ff;
  // Dense (every row of a down matrix, or every transposed row below, zeros included) or the chosen
  // neurons' rows where they fired.
  down_read_[static_cast<size_t>(layer)] += choose && l.ffn_down_t ? fired_rows(hidden_.data(), nullptr, 1, n_ff, active_.data(), static_cast<int64_t>(active_.size())) : n_ff;
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

  if (executed) return;
  if (l.ffn_down_t) {
    // (Sparse layers returned above, their pieces summed.) Dense over AXPY rows: every neuron, zeros
    // included — the baseline sparse mode is measured against — in the same pieces, so that the
    // neurons that fire meet the same float sums as in sparse mode.
    if (static_cast<int64_t>(all_ids_.size()) != n_ff) {
      all_ids_.resize(static_cast<size_t>(n_ff));
      for (int64_t i = 0; i < n_ff; ++i) all_ids_[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    }
    neuron_shards pieces(all_ids_.data(), n_ff, n_ff, pool_.size());
    run_pieces(pool_, pieces, n_embd, acc_, out, [&](int64_t k0, int64_t k1, float* acc) {
      axpy_batcher down(l.ffn_down_t, acc);
      for (int64_t i = k0; i < k1; ++i) down.add(static_cast<int32_t>(i), hidden_[i]);
    });
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
  step_ = steps_++;

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const layer_weights& l = w.layers[static_cast<size_t>(il)];
    float* q = qkv_.data();
    float* k = q + n_embd;
    float* v = k + kv;

    if (!falcon && hp.pred_input == predictor_input::layer_input) layer_in_ = x_;
    {
    trace_scope span(trace_, "attention", step_, il);
    // attention input, q k v
    if (falcon) {
      // xn_ = attn_norm(x) feeds the FFN; attention reads attn_norm_2(x) where the layer has one
      // (Falcon-40B, as llama.cpp and PowerInfer read its files), else xn_ too.
      layer_norm(x_.data(), f32(l.attn_norm), f32(l.attn_norm_b), xn_.data(), n_embd, hp.norm_eps);
      const float* attn_in = xn_.data();
      if (l.attn_norm_2) {
        layer_norm(x_.data(), f32(l.attn_norm_2), f32(l.attn_norm_2_b), xn2_.data(), n_embd, hp.norm_eps);
        attn_in = xn2_.data();
      }
      matvec(l.wqkv, attn_in, qkv_.data());
    } else {
      rms_norm(x_.data(), f32(l.attn_norm), xn_.data(), n_embd, hp.norm_eps);
      const tensor_view* ws[3] = {&l.wq, &l.wk, &l.wv};
      float* ys[3] = {q, k, v};
      matmul_same_input(pool_, ws, xn_.data(), 1, ys, xq_);
    }
    const rope_angles angles(hp, pos);
    rope(q, hp.n_head, hp, angles);
    rope(k, hp.n_head_kv, hp, angles);
    std::memcpy(k_at(0, il, pos), k, static_cast<size_t>(kv) * 4);
    std::memcpy(v_at(0, il, pos), v, static_cast<size_t>(kv) * 4);

    attention(0, il, pos);
    matvec(l.wo, attn_out_.data(), proj_.data());
    }

    if (falcon) {
      // Parallel attention and FFN, both reading the layer's input; the FFN through attn_norm.
      ffn(il, l, xn_.data(), x_.data(), ffn_out_.data());  // the predictor reads the layer's input
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += proj_[i] + ffn_out_[i];
    } else {
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += proj_[i];
      rms_norm(x_.data(), f32(l.ffn_norm), xn2_.data(), n_embd, hp.norm_eps);
      ffn(il, l, xn2_.data(), hp.pred_input == predictor_input::layer_input ? layer_in_.data() : x_.data(), ffn_out_.data());
      for (int64_t i = 0; i < n_embd; ++i) x_[i] += ffn_out_[i];
    }
  }

  trace_scope span(trace_, "output", step_, hp.n_layer);
  if (falcon) layer_norm(x_.data(), f32(w.output_norm), f32(w.output_norm_b), xn_.data(), n_embd, hp.norm_eps);
  else rms_norm(x_.data(), f32(w.output_norm), xn_.data(), n_embd, hp.norm_eps);
  matvec(w.output, xn_.data(), logits_.data());
  return logits_;
}

// ---- Batches ---------------------------------------------------------------------------------

void inference_context::matmul(const tensor_view& w, const float* x, int64_t n, float* y) { hotcold::matmul(pool_, w, x, n, y, xq_); }

void inference_context::ffn_batch(step_state& B, int64_t layer, const layer_weights& l, const float* in, const float* pred_in, int64_t n, bool may_go_dense,
                                  float* out) {
  const hparams& hp = model_->hp();
  const int64_t n_ff = hp.n_ff, d = hp.n_embd;
  auto& cost = cost_[static_cast<size_t>(layer)];
  auto& choice = choices_[static_cast<size_t>(layer)];
  const int c = std::min(batch_cost::classes - 1, static_cast<int>(std::bit_width(static_cast<uint64_t>(n))) - 1);

  // Sparse only where it pays: the predictor's bytes plus the union's share of the FFN rows against
  // all the rows, with the union share this layer measured at this batch size (re-probed every 16
  // dense batches). Bytes, not seconds: the choice, and so the result, is the same on every run.
  bool sparse = mode_ == ffn_mode::sparse && l.pred_fc1;
  if (sparse && may_go_dense && !stats_on_) {
    const double u = cost.union_share[c];
    const double rows = static_cast<double>(l.ffn_gate.bytes() + l.ffn_up.bytes() + l.ffn_down_t.bytes() + l.ffn_down.bytes());
    const double predictor = static_cast<double>(l.pred_fc1.bytes() + l.pred_fc2.bytes());
    if (u >= 0 && predictor + u * rows >= rows && ++cost.dense_since_probe[c] % 16 != 0) sparse = false;
  }

  std::optional<trace_scope> predict_span;
  if (sparse) predict_span.emplace(trace_, "predict", B.step, layer);
  std::vector<int32_t>& chosen_union = active_;
  chosen_union.clear();
  if (static_cast<int64_t>(B.chosen.size()) < n * n_ff) B.chosen.resize(static_cast<size_t>(n * n_ff));
  if (!sparse) std::fill(B.chosen.begin(), B.chosen.begin() + n * n_ff, uint8_t{1});
  if (sparse) {
    predictor_.predict(layer, pred_in, n, B.chosen.data(), chosen_union);
    if (trace_) trace_->record_active(B.step, layer, n, n_ff, B.chosen.data());
  } else {
    for (int64_t i = 0; i < n_ff; ++i) chosen_union.push_back(static_cast<int32_t>(i));
  }
  predict_span.reset();
  trace_scope ffn_span(trace_, "ffn", B.step, layer);

  // The dense truth for stats: every neuron of every token.
  if (stats_on_ && sparse) {
    std::vector<float> g(static_cast<size_t>(hp.gated_ffn ? n * n_ff : 0)), u(static_cast<size_t>(n * n_ff));
    if (hp.gated_ffn) matmul(l.ffn_gate, in, n, g.data());
    matmul(l.ffn_up, in, n, u.data());
    hidden_values(hp, g.data(), u.data(), B.truth.data(), n * n_ff);
  }

  // The neurons of the union: each row read once, each token computing the neurons it chose.
  // Threads take contiguous shares of the union and own their rows of hidden and their accumulators;
  // or the executor (the hot/cold split) computes them.
  std::vector<block_q8_0> xq;
  if (wants_q8_input(l.ffn_up.type)) {
    xq.resize(static_cast<size_t>(n * (d / qk8_0)));
    for (int64_t t = 0; t < n; ++t) quantize_row_q8_0(in + t * d, xq.data() + t * (d / qk8_0), d);
  }
  const batch_ffn_input x{in, xq.empty() ? nullptr : xq.data(), B.chosen.data(), n, d, n_ff};
  std::fill(B.hidden.begin(), B.hidden.begin() + n * n_ff, 0.0f);
  const int threads = pool_.size();
  const int64_t n_union = static_cast<int64_t>(chosen_union.size());
  const bool down_t = static_cast<bool>(l.ffn_down_t);
  // Interleaved gate and up rows (dense Q4_0 files) are readable only as matrices.
  const bool interleaved = l.ffn_gate.interleaved16 || l.ffn_up.interleaved16;
  const bool as_matrices = !sparse && !(executor_ && down_t) && (n >= 8 || interleaved);
  if (as_matrices) {
    // Every neuron of several tokens: gate and up as matrix products (each weight row read once for
    // a tile of tokens held in cache), then the down projection — a matrix product over ffn_down, or
    // over ffn_down_t rows, a block of 64 at a time (in cache) added into each token's sum for the
    // neurons that fired. Neuron by neuron, each row met every token's input again: at a 256-token
    // prompt batch those no longer fit in cache and dense prefill ran at half the speed.
    float* g = B.truth.data();
    float* h = B.hidden.data();
    if (hp.gated_ffn) {
      const tensor_view* ws[2] = {&l.ffn_gate, &l.ffn_up};
      float* ys[2] = {g, h};
      matmul_same_input(pool_, ws, in, n, ys, xq_);
    } else {
      matmul(l.ffn_up, in, n, h);
    }
    hidden_values(hp, g, h, h, n * n_ff);
    if (down_t) {
      pool_.parallel_for(threads, [&](int64_t th0, int64_t th1) {
        for (int64_t th = th0; th < th1; ++th) {
          float* acc = B.acc.data() + th * n * d;
          std::fill(acc, acc + n * d, 0.0f);
          const int64_t i0 = n_ff * th / threads, i1 = n_ff * (th + 1) / threads;
          for (int64_t c0 = i0; c0 < i1; c0 += 64) {
            const int64_t c1 = std::min(i1, c0 + 64);
            for (int64_t t = 0; t < n; ++t) {
              axpy_batcher add(l.ffn_down_t, acc + t * d);
              const float* ht = h + t * n_ff;
              for (int64_t i = c0; i < c1; ++i)
                if (ht[i] != 0.0f) add.add(static_cast<int32_t>(i), ht[i]);
            }
          }
        }
      });
      std::fill(out, out + n * d, 0.0f);
      for (int th = 0; th < threads; ++th) {
        const float* acc = B.acc.data() + th * n * d;
        for (int64_t k = 0; k < n * d; ++k) out[k] += acc[k];
      }
    }
  } else if (executor_ && down_t) {
    executor_->run_batch(B.step, layer, x, chosen_union, B.hidden.data(), out);
  } else {
    neuron_shards pieces(chosen_union.data(), n_union, n_ff, threads);
    run_pieces(pool_, pieces, n * d, B.acc, down_t ? out : nullptr, [&](int64_t k0, int64_t k1, float* acc) {
      batch_neurons(hp, l.ffn_gate, l.ffn_up, l.ffn_down_t, chosen_union.data() + k0, chosen_union.data() + k0, k1 - k0, x, B.hidden.data(), acc);
    });
  }
  // With down rows, out is written above (by the executor, or summed from the threads' or the
  // pieces' accumulators); without, the down projection is a matrix product.
  if (!down_t) matmul(l.ffn_down, B.hidden.data(), n, out);

  // What this batch measured.
  if (sparse) {
    const double u = static_cast<double>(n_union) / static_cast<double>(n_ff);
    double& avg = cost.union_share[c];
    avg = avg < 0 ? u : 0.8 * avg + 0.2 * u;
    choice.union_fraction = u;
    ++choice.sparse;
  } else {
    ++choice.dense;
  }

  int64_t computed = 0;
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* c = B.chosen.data() + t * n_ff;
    int64_t computed_t = sparse ? std::count(c, c + n_ff, uint8_t{1}) : n_ff;
    computed += computed_t;
    if (stats_on_) {
      auto& st = stats_[static_cast<size_t>(layer)];
      st.tokens += 1;
      st.neurons += n_ff;
      st.computed += computed_t;
      const float* truth = (sparse ? B.truth.data() : B.hidden.data()) + t * n_ff;
      for (int64_t i = 0; i < n_ff; ++i) {
        bool truly = truth[i] != 0.0f;
        st.truly_active += truly;
        st.active_computed += truly && c[i];
      }
    }
    if (observer_) {
      observer_("ffn_pred_in", layer, std::span<const float>(pred_in + t * d, static_cast<size_t>(d)));
      observer_("ffn_act", layer, std::span<const float>(B.hidden.data() + t * n_ff, static_cast<size_t>(n_ff)));
    }
  }
  computed_[static_cast<size_t>(layer)] += computed;
  read_[static_cast<size_t>(layer)] += n_union;
  down_read_[static_cast<size_t>(layer)] += down_t ? fired_rows(B.hidden.data(), B.chosen.data(), n, n_ff, chosen_union.data(), n_union) : n_union;
}

void inference_context::begin(step_state& B, std::span<const token_id> tokens, const int64_t* seqs, const int64_t* positions) {
  const hparams& hp = model_->hp();
  const model_weights& w = model_->weights();
  const int64_t n = static_cast<int64_t>(tokens.size()), d = hp.n_embd, kv = hp.n_embd_kv(), n_ff = hp.n_ff;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(static_cast<size_t>(size));
  };
  for (auto* v : {&B.x, &B.xn, &B.xn2, &B.layer_in, &B.attn, &B.proj, &B.ffn_out}) grow(*v, n * d);
  grow(B.qkv, n * (d + 2 * kv));
  for (auto* v : {&B.hidden, &B.truth}) grow(*v, n * n_ff);
  grow(B.acc, pool_.size() * n * d);
  B.n = n;
  B.seqs.assign(seqs, seqs + n);
  B.positions.assign(positions, positions + n);
  for (int64_t t = 0; t < n; ++t) dequantize_row(w.token_embd, tokens[static_cast<size_t>(t)], B.x.data() + t * d);
  B.step = step_ = steps_++;
}

void inference_context::attention_block(step_state& B, int64_t il) {
  const hparams& hp = model_->hp();
  const layer_weights& l = model_->weights().layers[static_cast<size_t>(il)];
  const int64_t n = B.n, d = hp.n_embd, kv = hp.n_embd_kv();
  const bool falcon = hp.arch == architecture::falcon;
  // q, k, v of token t: falcon's fused product interleaves them per token.
  const int64_t qkv_row = d + 2 * kv;
  auto q_of = [&](int64_t t) { return falcon ? B.qkv.data() + t * qkv_row : B.qkv.data() + t * d; };
  auto k_of = [&](int64_t t) { return falcon ? B.qkv.data() + t * qkv_row + d : B.qkv.data() + n * d + t * kv; };
  auto v_of = [&](int64_t t) { return falcon ? B.qkv.data() + t * qkv_row + d + kv : B.qkv.data() + n * (d + kv) + t * kv; };

  if (!falcon && hp.pred_input == predictor_input::layer_input) std::copy(B.x.begin(), B.x.begin() + n * d, B.layer_in.begin());
  {
    trace_scope span(trace_, "attention", B.step, il, n);
    for (int64_t t = 0; t < n; ++t) {
      if (falcon) layer_norm(B.x.data() + t * d, f32(l.attn_norm), f32(l.attn_norm_b), B.xn.data() + t * d, d, hp.norm_eps);
      else rms_norm(B.x.data() + t * d, f32(l.attn_norm), B.xn.data() + t * d, d, hp.norm_eps);
    }
    if (falcon) {
      // As in forward(): attention reads attn_norm_2(x) where the layer has one, the FFN attn_norm(x).
      const float* attn_in = B.xn.data();
      if (l.attn_norm_2) {
        for (int64_t t = 0; t < n; ++t) layer_norm(B.x.data() + t * d, f32(l.attn_norm_2), f32(l.attn_norm_2_b), B.xn2.data() + t * d, d, hp.norm_eps);
        attn_in = B.xn2.data();
      }
      matmul(l.wqkv, attn_in, n, B.qkv.data());
    } else {
      const tensor_view* ws[3] = {&l.wq, &l.wk, &l.wv};
      float* ys[3] = {q_of(0), k_of(0), v_of(0)};
      matmul_same_input(pool_, ws, B.xn.data(), n, ys, xq_);
    }
    for (int64_t t = 0; t < n; ++t) {
      const rope_angles angles(hp, B.positions[static_cast<size_t>(t)]);
      rope(q_of(t), hp.n_head, hp, angles);
      rope(k_of(t), hp.n_head_kv, hp, angles);
      std::memcpy(k_at(B.seqs[static_cast<size_t>(t)], il, B.positions[static_cast<size_t>(t)]), k_of(t), static_cast<size_t>(kv) * 4);
      std::memcpy(v_at(B.seqs[static_cast<size_t>(t)], il, B.positions[static_cast<size_t>(t)]), v_of(t), static_cast<size_t>(kv) * 4);
    }
    // Every (group, head) pair at once; causal: token t sees its sequence's cache up to its own
    // position. A group is tokens of one sequence at consecutive positions (a prompt chunk), which
    // read each cached key and value row once: up to 32 through the block kernel (scores as small
    // matrix products), else up to four; other tokens are groups of one.
    const int64_t hd = hp.head_dim();
    const bool blocks = attend_block_vectorized(hd);
    const int64_t group_max = blocks ? attend_block_max : 4;
    std::vector<int64_t>& groups = B.groups;  // first token of each group
    groups.clear();
    for (int64_t t = 0; t < n;) {
      groups.push_back(t);
      int64_t e = t + 1;
      while (e < n && e - t < group_max && B.seqs[static_cast<size_t>(e)] == B.seqs[static_cast<size_t>(t)] &&
             B.positions[static_cast<size_t>(e)] == B.positions[static_cast<size_t>(e - 1)] + 1)
        ++e;
      t = e;
    }
    groups.push_back(n);
    const int64_t n_groups = static_cast<int64_t>(groups.size()) - 1;
    pool_.parallel_for(n_groups * hp.n_head, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<float> scores;
      const int64_t need = std::max(4 * (n_ctx_ + 4), blocks ? attend_block_scratch(n_ctx_ + attend_block_max, hd) : 0);
      if (static_cast<int64_t>(scores.size()) < need) scores.resize(static_cast<size_t>(need));
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t g = i / hp.n_head, h = i % hp.n_head;
        const int64_t t0 = groups[static_cast<size_t>(g)], nq = groups[static_cast<size_t>(g) + 1] - t0;
        const int64_t seq = B.seqs[static_cast<size_t>(t0)], pos0 = B.positions[static_cast<size_t>(t0)];
        if (nq == 1) {
          attend_head(q_of(t0) + h * hd, seq, il, pos0, h, scores.data(), B.attn.data() + t0 * d + h * hd);
          continue;
        }
        const float* qs[attend_block_max];
        float* outs[attend_block_max];
        for (int64_t j = 0; j < nq; ++j) qs[j] = q_of(t0 + j) + h * hd, outs[j] = B.attn.data() + (t0 + j) * d + h * hd;
        if (blocks) {
          const int64_t kvh = h / (hp.n_head / hp.n_head_kv);
          attend_block(qs, static_cast<int>(nq), k_at(seq, il, 0) + kvh * hd, v_at(seq, il, 0) + kvh * hd, kv, hd, pos0,
                       1.0f / std::sqrt(static_cast<float>(hd)), outs, scores.data());
        } else {
          attend_head4(qs, static_cast<int>(nq), seq, il, pos0, h, scores.data(), outs);
        }
      }
    });
    matmul(l.wo, B.attn.data(), n, B.proj.data());
  }

  // The FFN's input and what its predictor reads.
  if (falcon) {
    // Parallel attention and FFN, both reading the layer's input; proj is added with the FFN's output.
    B.ffn_in = B.xn.data();
    B.pred_in = B.x.data();
  } else {
    for (int64_t k = 0; k < n * d; ++k) B.x[static_cast<size_t>(k)] += B.proj[static_cast<size_t>(k)];
    for (int64_t t = 0; t < n; ++t) rms_norm(B.x.data() + t * d, f32(l.ffn_norm), B.xn2.data() + t * d, d, hp.norm_eps);
    B.ffn_in = B.xn2.data();
    B.pred_in = hp.pred_input == predictor_input::layer_input ? B.layer_in.data() : B.x.data();
  }
}

void inference_context::add_ffn_output(step_state& B, const float* out) {
  const hparams& hp = model_->hp();
  const int64_t nd = B.n * hp.n_embd;
  if (hp.arch == architecture::falcon)
    for (int64_t k = 0; k < nd; ++k) B.x[static_cast<size_t>(k)] += B.proj[static_cast<size_t>(k)] + out[k];
  else
    for (int64_t k = 0; k < nd; ++k) B.x[static_cast<size_t>(k)] += out[k];
}

void inference_context::head(step_state& B, std::span<const int64_t> rows, float* logits) {
  const hparams& hp = model_->hp();
  const model_weights& w = model_->weights();
  const int64_t d = hp.n_embd, m = static_cast<int64_t>(rows.size());
  trace_scope span(trace_, "output", B.step, hp.n_layer, m);
  // Row k of xn is token rows[k] normalized (rows ascending, so k <= rows[k]: nothing read is overwritten).
  for (int64_t k = 0; k < m; ++k) {
    const float* x = B.x.data() + rows[static_cast<size_t>(k)] * d;
    if (hp.arch == architecture::falcon) layer_norm(x, f32(w.output_norm), f32(w.output_norm_b), B.xn.data() + k * d, d, hp.norm_eps);
    else rms_norm(x, f32(w.output_norm), B.xn.data() + k * d, d, hp.norm_eps);
  }
  matmul(w.output, B.xn.data(), m, logits);
}

void inference_context::run_batch(std::span<const token_id> tokens, const int64_t* seqs, const int64_t* positions, bool all_logits, bool may_go_dense,
                                  float* logits) {
  step_state& B = b_;
  begin(B, tokens, seqs, positions);
  for (int64_t il = 0; il < model_->hp().n_layer; ++il) {
    attention_block(B, il);
    ffn_batch(B, il, model_->weights().layers[static_cast<size_t>(il)], B.ffn_in, B.pred_in, B.n, may_go_dense, B.ffn_out.data());
    add_ffn_output(B, B.ffn_out.data());
  }
  std::vector<int64_t>& rows = B.logit_rows;
  rows.clear();
  for (int64_t t = all_logits ? 0 : B.n - 1; t < B.n; ++t) rows.push_back(t);
  head(B, rows, logits);
}

void inference_context::check_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("a step needs at least one token");
  if (seqs.size() != tokens.size() || positions.size() != tokens.size())
    throw std::invalid_argument(fmt::format("a step of {} tokens, {} sequence slots, {} positions", tokens.size(), seqs.size(), positions.size()));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t s = seqs[static_cast<size_t>(t)], p = positions[static_cast<size_t>(t)];
    if (tokens[static_cast<size_t>(t)] < 0 || tokens[static_cast<size_t>(t)] >= model_->hp().n_vocab)
      throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", tokens[static_cast<size_t>(t)]));
    if (s < 0 || s >= n_seq_) throw std::out_of_range(fmt::format("sequence slot {} is outside the {} this context holds", s, n_seq_));
    if (p < 0 || p >= n_ctx_) throw std::out_of_range(fmt::format("position {} is outside the context of {}", p, n_ctx_));
  }
}

// ---- Stages, for the actor pipeline ------------------------------------------------------------

void inference_context::step_begin(step_state& s, std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  check_step(tokens, seqs, positions);
  if (static_cast<int64_t>(tokens.size()) > max_batch)
    throw std::invalid_argument(fmt::format("a step of {} tokens is more than {}", tokens.size(), max_batch));
  begin(s, tokens, seqs.data(), positions.data());
}

void inference_context::step_attention(step_state& s, int64_t layer) { attention_block(s, layer); }

inference_context::ffn_inputs inference_context::step_ffn_inputs(const step_state& s) const { return {s.ffn_in, s.pred_in, s.n, s.step}; }

void inference_context::step_ffn(step_state& s, int64_t layer) {
  ffn_batch(s, layer, model_->weights().layers[static_cast<size_t>(layer)], s.ffn_in, s.pred_in, s.n, false, s.ffn_out.data());
  add_ffn_output(s, s.ffn_out.data());
}

void inference_context::step_ffn_done(step_state& s, int64_t layer, const float* out, int64_t computed, int64_t read, int64_t down_read) {
  computed_[static_cast<size_t>(layer)] += computed;
  read_[static_cast<size_t>(layer)] += read;
  down_read_[static_cast<size_t>(layer)] += down_read;
  add_ffn_output(s, out);
}

std::span<const float> inference_context::step_logits(step_state& s, std::span<const int64_t> rows) {
  const int64_t n_vocab = model_->hp().n_vocab;
  for (size_t k = 0; k < rows.size(); ++k)
    if (rows[k] < 0 || rows[k] >= s.n || (k > 0 && rows[k] <= rows[k - 1]))
      throw std::out_of_range(fmt::format("logit rows must be ascending rows of the step's {} tokens", s.n));
  s.logits.resize(rows.size() * static_cast<size_t>(n_vocab));
  head(s, rows, s.logits.data());
  return s.logits;
}

std::span<const float> inference_context::forward_batch(std::span<const token_id> tokens, int64_t pos, bool all_logits) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("forward_batch: no tokens");
  if (pos < 0 || pos + n > n_ctx_)
    throw std::out_of_range(fmt::format("positions {}..{} are outside the context of {}", pos, pos + n - 1, n_ctx_));
  std::vector<int64_t> seqs(static_cast<size_t>(n), 0), positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[static_cast<size_t>(t)] = pos + t;
  return run_batches(tokens, seqs, positions, all_logits, true);
}

std::span<const float> inference_context::forward_step(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions) {
  check_step(tokens, seqs, positions);
  return run_batches(tokens, seqs, positions, true, false);
}

std::span<const float> inference_context::run_batches(std::span<const token_id> tokens, std::span<const int64_t> seqs, std::span<const int64_t> positions,
                                                      bool all_logits, bool may_go_dense) {
  const hparams& hp = model_->hp();
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (token_id t : tokens)
    if (t < 0 || t >= hp.n_vocab) throw std::out_of_range(fmt::format("token id {} is outside the vocabulary", t));
  if (all_logits) batch_logits_.resize(static_cast<size_t>(n * hp.n_vocab));
  for (int64_t s = 0; s < n; s += max_batch) {
    const int64_t m = std::min(max_batch, n - s);
    float* out = all_logits ? batch_logits_.data() + s * hp.n_vocab : logits_.data();
    run_batch(tokens.subspan(static_cast<size_t>(s), static_cast<size_t>(m)), seqs.data() + s, positions.data() + s, all_logits, may_go_dense, out);
  }
  if (all_logits) return std::span<const float>(batch_logits_.data(), static_cast<size_t>(n * hp.n_vocab));
  return logits_;
}

}  // namespace hotcold
