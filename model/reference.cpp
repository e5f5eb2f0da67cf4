#include "model/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quants.hpp"

namespace hotcold {

namespace {

// A row as a cache of type t holds it, by the blocks' definitions: F16 the nearest half; Q8_0 blocks of
// 32 at scale d = max|x| / 127 (kept as a half) and x = d round(x / d); Q4_0 blocks at d = m / -8,
// where m is the value of largest magnitude, and x = d (min(15, trunc(x / d + 8.5)) - 8).
void round_as(tensor_type t, std::vector<double>& row) {
  const auto half = [](double x) { return static_cast<double>(kernels::fp16_to_fp32(kernels::fp32_to_fp16(static_cast<float>(x)))); };
  if (t == tensor_type::f32) return;
  if (t == tensor_type::f16) {
    for (double& e : row) e = half(e);
    return;
  }
  for (size_t b = 0; b + 32 <= row.size(); b += 32) {
    float amax = 0, m = 0;
    for (size_t i = b; i < b + 32; ++i) {
      const float x = static_cast<float>(row[i]);
      if (std::fabs(x) > amax) amax = std::fabs(x), m = x;
    }
    const float d = t == tensor_type::q8_0 ? amax / 127.0f : m / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    const double dh = half(d);
    for (size_t i = b; i < b + 32; ++i) {
      const float x = static_cast<float>(row[i]);
      row[i] = t == tensor_type::q8_0 ? dh * std::round(x * id) : dh * (std::min(15, static_cast<int>(x * id + 8.5f)) - 8);
    }
  }
}

}  // namespace

reference_model::reference_model(const gguf::file& f, kv_types kv, int64_t n_ctx)
    : f_(f), hp_(read_hparams(f)), kv_(kv), rope_factors_(hp_.rope_factors_for(n_ctx > 0 ? n_ctx : hp_.n_ctx_orig)) {}

// Rows of ne[0] values; each row dequantized from its own bytes by the type's block definition.
reference_model::mat reference_model::matrix(const std::string& name) const {
  const auto* t = f_.find_tensor(name);
  if (!t) throw std::runtime_error("reference: the file has no tensor " + name);
  const int64_t cols = t->ne[0], rows = t->n_elements / cols;
  const size_t row_bytes = t->n_bytes / static_cast<size_t>(rows);
  mat m(static_cast<size_t>(rows), vec(static_cast<size_t>(cols)));
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* p = t->data + r * row_bytes;
    switch (t->type) {
      case tensor_type::f32: std::memcpy(tmp.data(), p, static_cast<size_t>(cols) * 4); break;
      case tensor_type::f16:
        for (int64_t c = 0; c < cols; ++c) tmp[c] = kernels::fp16_to_fp32(reinterpret_cast<const uint16_t*>(p)[c]);
        break;
      case tensor_type::bf16:
        for (int64_t c = 0; c < cols; ++c) tmp[c] = kernels::bf16_to_fp32(reinterpret_cast<const uint16_t*>(p)[c]);
        break;
      case tensor_type::q8_0: kernels::dequantize_row_q8_0(reinterpret_cast<const kernels::block_q8_0*>(p), tmp.data(), cols); break;
      case tensor_type::q4_0: kernels::dequantize_row_q4_0(reinterpret_cast<const kernels::block_q4_0*>(p), tmp.data(), cols); break;
      case tensor_type::q6_k: kernels::dequantize_row_q6_k(reinterpret_cast<const kernels::block_q6_k*>(p), tmp.data(), cols); break;
      case tensor_type::q4_k: kernels::dequantize_row_q4_k(reinterpret_cast<const kernels::block_q4_k*>(p), tmp.data(), cols); break;
      case tensor_type::q5_k: kernels::dequantize_row_q5_k(reinterpret_cast<const kernels::block_q5_k*>(p), tmp.data(), cols); break;
      default: throw std::runtime_error("reference: " + name + " has a type the reference does not read");
    }
    for (int64_t c = 0; c < cols; ++c) m[static_cast<size_t>(r)][static_cast<size_t>(c)] = tmp[static_cast<size_t>(c)];
  }
  return m;
}

reference_model::vec reference_model::vector(const std::string& name) const { return matrix(name)[0]; }

namespace {

std::vector<double> times(const std::vector<std::vector<double>>& w, const std::vector<double>& x) {
  std::vector<double> y(w.size(), 0.0);
  for (size_t r = 0; r < w.size(); ++r)
    for (size_t c = 0; c < x.size(); ++c) y[r] += w[r][c] * x[c];
  return y;
}

}  // namespace

reference_model::vec reference_model::rms_norm(const vec& x, const vec& w) const {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1 / std::sqrt(ss / static_cast<double>(x.size()) + hp_.norm_eps);
  vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

reference_model::vec reference_model::layer_norm(const vec& x, const vec& w, const vec& b) const {
  double mean = 0, var = 0;
  for (double a : x) mean += a;
  mean /= static_cast<double>(x.size());
  for (double a : x) var += (a - mean) * (a - mean);
  var /= static_cast<double>(x.size());
  vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = (x[i] - mean) / std::sqrt(var + hp_.norm_eps) * w[i] + b[i];
  return y;
}

// Rotates each head's first n_rot dimensions by pos * scale * base^(-2i/n_rot): pairs (2i, 2i+1), or
// for NeoX (i, i + n_rot/2).
void reference_model::rope(vec& x, int64_t heads, int64_t pos) const {
  const int64_t hd = hp_.head_dim(), n_rot = hp_.n_rot;
  const bool neox = hp_.rope == rope_style::neox;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      double theta = static_cast<double>(pos) * hp_.rope_freq_scale * std::pow(static_cast<double>(hp_.rope_freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
      if (!rope_factors_.empty()) theta /= rope_factors_[static_cast<size_t>(i)];  // Llama 3.1's rope_freqs, Phi-3's long or short factors
      const size_t a = static_cast<size_t>(neox ? h * hd + i : h * hd + 2 * i);
      const size_t b = static_cast<size_t>(neox ? h * hd + i + n_rot / 2 : h * hd + 2 * i + 1);
      const double x0 = x[a], x1 = x[b], m = hp_.rope_attn_factor;  // Phi-3's attn_factor scales cos and sin
      x[a] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * m;
      x[b] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * m;
    }
}

double reference_model::activate(double g) const {
  switch (hp_.act) {
    case activation::silu: return g / (1 + std::exp(-g));
    case activation::gelu: return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
    default: return g > 0 ? g : 0;  // relu; drelu applies it to gate and up
  }
}

reference_model::layer_qkv reference_model::queries_keys_values(int64_t l, const std::vector<vec>& x) const {
  const int64_t T = static_cast<int64_t>(x.size()), dq = hp_.n_embd_q(), hd = hp_.head_dim(), kv = hp_.n_embd_kv();
  const bool falcon = hp_.arch == architecture::falcon;
  const std::string b = "blk." + std::to_string(l) + ".";
  layer_qkv r;
  r.q.resize(static_cast<size_t>(T)), r.k.resize(static_cast<size_t>(T)), r.v.resize(static_cast<size_t>(T)), r.ffn_in_falcon.resize(static_cast<size_t>(T));
  // Each weight matrix is read once per layer (a 7B layer's matrices are GiBs of doubles). The llama
  // family's q, k, v: three tensors, or one attn_qkv whose rows are q's, then k's, then v's; with
  // biases (the same split of attn_qkv.bias) where the file has them.
  const bool fused = falcon || f_.find_tensor(b + "attn_qkv.weight");
  const mat wqkv = fused ? matrix(b + "attn_qkv.weight") : mat{};
  const mat wq = fused ? mat{} : matrix(b + "attn_q.weight"), wk = fused ? mat{} : matrix(b + "attn_k.weight"),
            wv = fused ? mat{} : matrix(b + "attn_v.weight");
  vec bias;  // q's, k's, v's biases in a row, or empty
  if (f_.find_tensor(b + "attn_qkv.bias")) {
    bias = vector(b + "attn_qkv.bias");
  } else if (f_.find_tensor(b + "attn_q.bias")) {
    for (const char* part : {"attn_q.bias", "attn_k.bias", "attn_v.bias"}) {
      const vec p = vector(b + part);
      bias.insert(bias.end(), p.begin(), p.end());
    }
  }
  const bool qk_norm = f_.find_tensor(b + "attn_q_norm.weight") != nullptr;
  const vec q_norm = qk_norm ? vector(b + "attn_q_norm.weight") : vec{}, k_norm = qk_norm ? vector(b + "attn_k_norm.weight") : vec{};
  for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
    vec attn_in;
    if (falcon) {
      r.ffn_in_falcon[t] = layer_norm(x[t], vector(b + "attn_norm.weight"), vector(b + "attn_norm.bias"));
      attn_in = f_.find_tensor(b + "attn_norm_2.weight") ? layer_norm(x[t], vector(b + "attn_norm_2.weight"), vector(b + "attn_norm_2.bias"))
                                                         : r.ffn_in_falcon[t];
    } else {
      attn_in = rms_norm(x[t], vector(b + "attn_norm.weight"));
    }
    vec qkv;  // [Q; K; V]
    if (fused) {
      qkv = times(wqkv, attn_in);
    } else {
      for (const mat* w : {&wq, &wk, &wv}) {
        const vec p = times(*w, attn_in);
        qkv.insert(qkv.end(), p.begin(), p.end());
      }
    }
    for (size_t i = 0; i < bias.size(); ++i) qkv[i] += bias[i];
    r.q[t] = vec(qkv.begin(), qkv.begin() + dq);
    r.k[t] = vec(qkv.begin() + dq, qkv.begin() + dq + kv);
    r.v[t] = vec(qkv.begin() + dq + kv, qkv.end());
    if (qk_norm) {  // Qwen3: each head of q and of k through RMSNorm with its own weights, before RoPE
      for (auto [h_of, w] : {std::pair{&r.q[t], &q_norm}, {&r.k[t], &k_norm}})
        for (size_t h = 0; h < h_of->size() / static_cast<size_t>(hd); ++h) {
          const vec head(h_of->begin() + static_cast<std::ptrdiff_t>(h * hd), h_of->begin() + static_cast<std::ptrdiff_t>((h + 1) * hd));
          const vec normed = rms_norm(head, *w);
          std::copy(normed.begin(), normed.end(), h_of->begin() + static_cast<std::ptrdiff_t>(h * hd));
        }
    }
    rope(r.q[t], hp_.n_head, static_cast<int64_t>(t));
    rope(r.k[t], hp_.n_head_kv, static_cast<int64_t>(t));
    round_as(kv_.k, r.k[t]);  // what the cache holds
    round_as(kv_.v, r.v[t]);
    if (traits(kv_.k).quantized) round_as(tensor_type::q8_0, r.q[t]);
  }
  return r;
}

// Causal softmax attention; query head h reads KV head h / (n_head / n_head_kv). Gemma 2: the queries
// scaled by its own factor, each score soft-capped (cap tanh(s / cap)) before the softmax, and in the
// sliding layers (0, 2, 4, ...) a query at t sees positions t - n_swa + 1 .. t only.
std::vector<reference_model::vec> reference_model::attention(int64_t l, const layer_qkv& r) const {
  const int64_t T = static_cast<int64_t>(r.q.size()), dq = hp_.n_embd_q(), hd = hp_.head_dim();
  std::vector<vec> attn(static_cast<size_t>(T), vec(static_cast<size_t>(dq), 0.0));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < hp_.n_head; ++h) {
      const int64_t g = h / (hp_.n_head / hp_.n_head_kv);
      vec s(static_cast<size_t>(t + 1), 0.0);
      double mx = -1e300, sum = 0;
      const bool gemma2 = hp_.arch == architecture::gemma2;
      const int64_t first = gemma2 && l % 2 == 0 ? std::max<int64_t>(0, t - hp_.n_swa + 1) : 0;
      const double scale = gemma2 && hp_.n_layer == 46 ? 1 / std::sqrt(static_cast<double>(hp_.n_embd / hp_.n_head)) : 1 / std::sqrt(static_cast<double>(hd));
      for (int64_t u = first; u <= t; ++u) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i) dot += r.q[static_cast<size_t>(t)][static_cast<size_t>(h * hd + i)] * r.k[static_cast<size_t>(u)][static_cast<size_t>(g * hd + i)];
        double e = dot * scale;
        if (gemma2) e = hp_.attn_softcap * std::tanh(e / hp_.attn_softcap);
        s[static_cast<size_t>(u)] = e;
        mx = std::max(mx, e);
      }
      for (int64_t u = first; u <= t; ++u) sum += (s[static_cast<size_t>(u)] = std::exp(s[static_cast<size_t>(u)] - mx));
      for (int64_t u = first; u <= t; ++u)
        for (int64_t i = 0; i < hd; ++i)
          attn[static_cast<size_t>(t)][static_cast<size_t>(h * hd + i)] += s[static_cast<size_t>(u)] / sum * r.v[static_cast<size_t>(u)][static_cast<size_t>(g * hd + i)];
    }
  return attn;
}

reference_model::vec reference_model::hidden_of(int64_t l, size_t t, const vec& u, const vec& gv, const neuron_mask* mask) const {
  vec hidden(static_cast<size_t>(hp_.n_ff), 0.0);
  for (size_t j = 0; j < hidden.size(); ++j) {
    if (mask && !(*mask)[t][static_cast<size_t>(l)][j]) continue;
    if (!hp_.gated_ffn) hidden[j] = activate(u[j]);
    else if (hp_.act == activation::drelu) hidden[j] = std::max(gv[j], 0.0) * std::max(u[j], 0.0);
    else hidden[j] = activate(gv[j]) * u[j];
    // A thresholded activation (prepare --sparsity): the neuron counts only where |act| >= t_l.
    if (!hp_.act_threshold.empty() && std::fabs(activate(hp_.gated_ffn ? gv[j] : u[j])) < hp_.act_threshold[static_cast<size_t>(l)]) hidden[j] = 0;
  }
  return hidden;
}

// The FFN: down(act(gate) * up), down(relu(gate) * relu(up)) for dReLU, or down(act(up)) for falcon;
// attention's output and the FFN's added to the residual stream (Falcon: both to the layer's input).
void reference_model::ffn(int64_t l, const std::vector<vec>& attn, const layer_qkv& qkv, const neuron_mask* mask, std::vector<vec>& x) const {
  const int64_t d = hp_.n_embd;
  const bool falcon = hp_.arch == architecture::falcon;
  const std::string b = "blk." + std::to_string(l) + ".";
  const mat wo = matrix(b + "attn_output.weight");
  if (hp_.moe()) return experts(l, attn, mask, x);
  mat up, gate, down;
  const bool bundled = f_.find_tensor(b + "ffn_bundle.weight") != nullptr;
  const bool by_neuron = bundled || !f_.find_tensor(b + "ffn_down.weight");  // sparse files: ffn_down_t, a row per neuron
  if (bundled) {  // neuron i's row: its gate row (gated FFNs, unless the gate is apart), its up row, its down_t row, n_embd values each
    for (vec& row : matrix(b + "ffn_bundle.weight")) {
      auto part = [&](int64_t k) { return vec(row.begin() + k * d, row.begin() + (k + 1) * d); };
      const bool gate_in = static_cast<int64_t>(row.size()) == 3 * d;
      if (gate_in) gate.push_back(part(0));
      up.push_back(part(gate_in ? 1 : 0));
      down.push_back(part(gate_in ? 2 : 1));
    }
    if (hp_.gated_ffn && gate.empty()) gate = matrix(b + "ffn_gate.weight");
  } else {
    up = matrix(b + "ffn_up.weight");
    if (hp_.gated_ffn && !f_.find_tensor(b + "ffn_gate.weight")) {  // phi3: ffn_up holds the gate's n_ff rows, then up's
      gate.assign(up.begin(), up.begin() + hp_.n_ff);
      up.erase(up.begin(), up.begin() + hp_.n_ff);
    } else if (hp_.gated_ffn) {
      gate = matrix(b + "ffn_gate.weight");
    }
    down = matrix(by_neuron ? b + "ffn_down_t.weight" : b + "ffn_down.weight");
  }
  const bool post_norms = f_.find_tensor(b + "post_attention_norm.weight") != nullptr;  // gemma2
  for (size_t t = 0; t < x.size(); ++t) {
    vec o = times(wo, attn[t]);
    if (post_norms) o = rms_norm(o, vector(b + "post_attention_norm.weight"));
    vec ffn_in;
    if (falcon) {
      ffn_in = qkv.ffn_in_falcon[t];  // parallel: the FFN reads the layer's input too
    } else {
      for (int64_t i = 0; i < d; ++i) x[t][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
      ffn_in = rms_norm(x[t], vector(b + "ffn_norm.weight"));
    }
    const vec u = times(up, ffn_in), gv = hp_.gated_ffn ? times(gate, ffn_in) : vec{};
    const vec hidden = hidden_of(l, t, u, gv, mask);
    vec fo(static_cast<size_t>(d), 0.0);
    if (by_neuron) {
      for (size_t j = 0; j < hidden.size(); ++j)
        if (hidden[j] != 0)
          for (int64_t i = 0; i < d; ++i) fo[static_cast<size_t>(i)] += hidden[j] * down[j][static_cast<size_t>(i)];
    } else {
      fo = times(down, hidden);
    }
    if (post_norms) fo = rms_norm(fo, vector(b + "post_ffw_norm.weight"));
    for (int64_t i = 0; i < d; ++i) x[t][static_cast<size_t>(i)] += fo[static_cast<size_t>(i)] + (falcon ? o[static_cast<size_t>(i)] : 0.0);
  }
}

// A mixture of experts' FFN (docs/moe.md), as llama.cpp's build_moe_ffn computes it: the router's
// softmax over every expert, the n_expert_used most probable (ties: the lower number), their
// probabilities renormalized to sum 1 where the architecture does (llama, qwen3moe), each chosen
// expert's down(silu(gate x) * up x) weighted by them; qwen2moe adds its shared expert's output times
// sigmoid(ffn_gate_inp_shexp . x). Attention's output and the FFN's added to the residual stream.
void reference_model::experts(int64_t l, const std::vector<vec>& attn, const neuron_mask* mask, std::vector<vec>& x) const {
  const int64_t d = hp_.n_embd, ne = hp_.n_expert, nf = hp_.n_ff_exp;
  const std::string b = "blk." + std::to_string(l) + ".";
  const mat wo = matrix(b + "attn_output.weight");
  const mat router = matrix(b + "ffn_gate_inp.weight");
  const mat gate = matrix(b + "ffn_gate_exps.weight"), up = matrix(b + "ffn_up_exps.weight"), down = matrix(b + "ffn_down_exps.weight");
  const bool shared = f_.find_tensor(b + "ffn_gate_shexp.weight") != nullptr;
  mat gate_s, up_s, down_s;
  vec gate_inp_s;
  if (shared) {
    gate_s = matrix(b + "ffn_gate_shexp.weight"), up_s = matrix(b + "ffn_up_shexp.weight"), down_s = matrix(b + "ffn_down_shexp.weight");
    gate_inp_s = vector(b + "ffn_gate_inp_shexp.weight");
  }
  // down(silu(gate x) * up x) over rows [g0, g0 + n) of gate and up and [d0, d0 + d) of down.
  auto expert = [&](const mat& g, const mat& u, const mat& dn, int64_t g0, int64_t n, int64_t d0, const vec& in) {
    vec h(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double gv = 0, uv = 0;
      for (int64_t c = 0; c < d; ++c) {
        gv += g[static_cast<size_t>(g0 + i)][static_cast<size_t>(c)] * in[static_cast<size_t>(c)];
        uv += u[static_cast<size_t>(g0 + i)][static_cast<size_t>(c)] * in[static_cast<size_t>(c)];
      }
      h[static_cast<size_t>(i)] = gv / (1 + std::exp(-gv)) * uv;
    }
    vec y(static_cast<size_t>(d), 0.0);
    for (int64_t r = 0; r < d; ++r)
      for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(r)] += dn[static_cast<size_t>(d0 + r)][static_cast<size_t>(i)] * h[static_cast<size_t>(i)];
    return y;
  };
  for (size_t t = 0; t < x.size(); ++t) {
    const vec o = times(wo, attn[t]);
    for (int64_t i = 0; i < d; ++i) x[t][static_cast<size_t>(i)] += o[static_cast<size_t>(i)];
    const vec in = rms_norm(x[t], vector(b + "ffn_norm.weight"));
    const vec logit = times(router, in);
    const double top = *std::max_element(logit.begin(), logit.end());
    vec p(static_cast<size_t>(ne));
    double sum = 0;
    for (int64_t e = 0; e < ne; ++e) sum += p[static_cast<size_t>(e)] = std::exp(logit[static_cast<size_t>(e)] - top);
    for (double& v : p) v /= sum;
    std::vector<int64_t> order(static_cast<size_t>(ne));
    for (int64_t e = 0; e < ne; ++e) order[static_cast<size_t>(e)] = e;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return p[static_cast<size_t>(a)] > p[static_cast<size_t>(c)]; });
    if (mask) {  // the experts a path chose, in this order
      const auto& chosen_by_path = (*mask)[t][static_cast<size_t>(l)];
      std::stable_partition(order.begin(), order.end(), [&](int64_t e) { return static_cast<bool>(chosen_by_path[static_cast<size_t>(e)]); });
    }
    double chosen = 0;
    for (int64_t k = 0; k < hp_.n_expert_used; ++k) chosen += p[static_cast<size_t>(order[static_cast<size_t>(k)])];
    vec fo(static_cast<size_t>(d), 0.0);
    for (int64_t k = 0; k < hp_.n_expert_used; ++k) {
      const int64_t e = order[static_cast<size_t>(k)];
      const double w = p[static_cast<size_t>(e)] / (hp_.expert_weights_norm ? chosen : 1.0);
      const vec y = expert(gate, up, down, e * nf, nf, e * d, in);
      for (int64_t i = 0; i < d; ++i) fo[static_cast<size_t>(i)] += w * y[static_cast<size_t>(i)];
    }
    if (shared) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += gate_inp_s[static_cast<size_t>(c)] * in[static_cast<size_t>(c)];
      const vec y = expert(gate_s, up_s, down_s, 0, hp_.n_ff_shexp, 0, in);
      for (int64_t i = 0; i < d; ++i) fo[static_cast<size_t>(i)] += y[static_cast<size_t>(i)] / (1 + std::exp(-s));
    }
    for (int64_t i = 0; i < d; ++i) x[t][static_cast<size_t>(i)] += fo[static_cast<size_t>(i)];
  }
}

std::vector<std::vector<double>> reference_model::logits(std::span<const token_id> tokens, const neuron_mask* mask) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const bool falcon = hp_.arch == architecture::falcon;
  const mat embd = matrix("token_embd.weight");
  std::vector<vec> x(static_cast<size_t>(T));  // the residual stream of each position
  const bool gemma2 = hp_.arch == architecture::gemma2;
  for (int64_t t = 0; t < T; ++t) {
    x[static_cast<size_t>(t)] = embd.at(static_cast<size_t>(tokens[static_cast<size_t>(t)]));
    if (gemma2)  // Gemma 2 scales its embeddings by sqrt(n_embd)
      for (double& e : x[static_cast<size_t>(t)]) e *= std::sqrt(static_cast<double>(hp_.n_embd));
  }
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const layer_qkv qkv = queries_keys_values(l, x);
    ffn(l, attention(l, qkv), qkv, mask, x);
  }
  const mat out = f_.find_tensor("output.weight") ? matrix("output.weight") : embd;  // tied: the embeddings
  const vec out_b = f_.find_tensor("output.bias") ? vector("output.bias") : vec{};
  std::vector<vec> result;
  for (size_t t = 0; t < static_cast<size_t>(T); ++t) {
    const vec n = falcon ? layer_norm(x[t], vector("output_norm.weight"), vector("output_norm.bias")) : rms_norm(x[t], vector("output_norm.weight"));
    result.push_back(times(out, n));
    for (size_t i = 0; i < out_b.size(); ++i) result.back()[i] += out_b[i];
    if (gemma2)  // and caps its logits softly: cap tanh(logit / cap)
      for (double& e : result.back()) e = hp_.final_softcap * std::tanh(e / hp_.final_softcap);
  }
  return result;
}

}  // namespace hotcold
