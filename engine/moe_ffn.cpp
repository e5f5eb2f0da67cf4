// A mixture of experts' FFN on the CPU (docs/moe.md): the router's choice of experts for each token,
// then each expert chosen by some token of the batch computed once for all of them — its gate and up
// rows against those tokens' inputs gathered together, then its down rows — as llama.cpp's mul_mat_id
// reads an expert's rows once per batch; qwen2moe's shared expert for every token.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/forward.hpp"
#include "engine/matmul.hpp"
#include "engine/neuron_rules.hpp"
#include "engine/row_groups.hpp"
#include "kernels/cpu/dot.hpp"

namespace hotcold {

void route_experts(const hparams& hp, const float* logits, int64_t n, int32_t* experts, float* weights) {
  const int64_t ne = hp.n_expert, k = hp.n_expert_used;
  std::vector<float> p(static_cast<size_t>(ne));
  std::vector<int32_t> order(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    const float* z = logits + t * ne;
    const float top = *std::max_element(z, z + ne);
    float sum = 0;
    for (int64_t e = 0; e < ne; ++e) sum += p[static_cast<size_t>(e)] = std::exp(z[e] - top);
    for (float& v : p) v /= sum;
    std::iota(order.begin(), order.end(), 0);
    // The k most probable, ties to the lower number, in that order.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)] || (p[static_cast<size_t>(a)] == p[static_cast<size_t>(b)] && a < b);
    });
    float chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += p[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      experts[t * k + j] = e;
      weights[t * k + j] = hp.expert_weights_norm ? p[static_cast<size_t>(e)] / chosen : p[static_cast<size_t>(e)];
    }
  }
}

void inference_context::moe_ffn(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* out) {
  const hparams& hp = model_->hp();
  const int64_t n = B.n, d = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used, nf = hp.n_ff_exp;
  moe_scratch& S = moe_;
  S.logits.resize(static_cast<size_t>(n * ne));
  S.experts.resize(static_cast<size_t>(n * k));
  S.weights.resize(static_cast<size_t>(n * k));
  router_logits(l, on, in, n, S.logits.data());
  route_experts(hp, S.logits.data(), n, S.experts.data(), S.weights.data());
  for (int64_t j = 0; j < n * k; ++j) ++expert_choices_[static_cast<size_t>(layer * ne + S.experts[static_cast<size_t>(j)])];
  // How many of the chosen experts the guess from the layer before had (guess_next_experts).
  if (B.guessed_layer == layer) {
    int64_t had = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int32_t* guess = B.expert_guess.data() + t * k;
      for (int64_t j = 0; j < k; ++j) had += std::find(guess, guess + k, S.experts[static_cast<size_t>(t * k + j)]) != guess + k;
    }
    experts_chosen_[static_cast<size_t>(layer)] += n * k;
    experts_guessed_[static_cast<size_t>(layer)] += had;
    B.guessed_layer = -1;
  }
  if (trace_) {  // each token's chosen experts, as a sparse layer's chosen neurons (docs/traces.md)
    S.chosen.assign(static_cast<size_t>(n * ne), 0);
    for (int64_t j = 0; j < n * k; ++j) S.chosen[static_cast<size_t>(j / k * ne + S.experts[static_cast<size_t>(j)])] = 1;
    trace_->record_active(B.step, layer, n, ne, S.chosen.data());
  }
  std::fill(out, out + n * d, 0.0f);
  const int64_t used = n == 1 ? one_token_experts(l, on, in, out) : batch_experts(n, l, on, in, out);
  if (l.ffn_gate_shexp) {  // qwen2moe's shared expert, for every token, scaled by sigmoid(ffn_gate_inp_shexp . x)
    expert_product(on, l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp, in, n, S.y);
    const float* g = l.ffn_gate_inp_shexp.f32();
    for (int64_t t = 0; t < n; ++t) {
      const float scale = 1.0f / (1.0f + std::exp(-kernels::dot_f32(g, in + t * d, d)));
      for (int64_t c = 0; c < d; ++c) out[t * d + c] += scale * S.y[static_cast<size_t>(t * d + c)];
    }
  }
  // Each token's weight for every expert (zero: not chosen), as its FFN values (observed::ffn_act).
  if (observer_) {
    std::vector<float> w(static_cast<size_t>(ne));
    for (int64_t t = 0; t < n; ++t) {
      std::fill(w.begin(), w.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(S.experts[static_cast<size_t>(t * k + j)])] = S.weights[static_cast<size_t>(t * k + j)];
      observer_(observed::ffn_act, layer, std::span<const float>(w));
    }
  }
  // Counters: the experts' neurons computed (k per token) and read (each expert used once per batch).
  computed_[static_cast<size_t>(layer)] += n * k * nf;
  read_[static_cast<size_t>(layer)] += used * nf;
  down_read_[static_cast<size_t>(layer)] += used * nf;
  ++choices_[static_cast<size_t>(layer)].dense;
}

void inference_context::router_logits(const layer_weights& l, const workers& on, const float* in, int64_t n, float* logits) {
  const int64_t d = model_->hp().n_embd, ne = model_->hp().n_expert;
  if (l.ffn_gate_inp.type == tensor_type::f32 && n * ne * d <= (int64_t{1} << 18)) {
    // A small F32 router (Mixtral's 8 x 4096) on this thread: a split across the pool costs more
    // than its products.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < ne; ++e) logits[t * ne + e] = kernels::dot_f32(reinterpret_cast<const float*>(l.ffn_gate_inp.row(e)), in + t * d, d);
  } else {
    matmul(on, l.ffn_gate_inp, in, n, logits);
  }
}

void inference_context::guess_next_experts(step_state& B, int64_t layer) {
  const hparams& hp = model_->hp();
  const layer_weights& next = model_->weights().layers[static_cast<size_t>(layer + 1)];
  const int64_t n = B.n, d = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used;
  moe_scratch& S = moe_;
  S.guess_in.resize(static_cast<size_t>(n * d));
  S.guess_logits.resize(static_cast<size_t>(n * ne));
  S.guess_weights.resize(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t) rms_norm(B.x.data() + t * d, next.ffn_norm.f32(), S.guess_in.data() + t * d, d, hp.norm_eps);
  router_logits(next, cpu_workers(), S.guess_in.data(), n, S.guess_logits.data());
  B.expert_guess.resize(static_cast<size_t>(n * k));
  route_experts(hp, S.guess_logits.data(), n, B.expert_guess.data(), S.guess_weights.data());
  B.guessed_layer = layer + 1;
}

int64_t inference_context::one_token_experts(const layer_weights& l, const workers& on, const float* in, float* out) {
  // Its experts' gate and up rows all read the same input: one split across the threads for all of
  // them; then their down rows, each against its own values, in another.
  const hparams& hp = model_->hp();
  const int64_t d = hp.n_embd, k = hp.n_expert_used, nf = hp.n_ff_exp;
  moe_scratch& S = moe_;
  S.views.clear(), S.downs.clear();
  for (int64_t j = 0; j < k; ++j) {
    const int64_t e = S.experts[static_cast<size_t>(j)];
    S.views.push_back(expert_rows(l.ffn_gate_exps, e, nf));
    S.views.push_back(expert_rows(l.ffn_up_exps, e, nf));
    S.downs.push_back(expert_rows(l.ffn_down_exps, e, d));
  }
  S.g.resize(static_cast<size_t>(2 * k * nf));
  S.h.resize(static_cast<size_t>(k * nf));
  S.y.resize(static_cast<size_t>(k * d));
  std::vector<const tensor_view*> ws;
  std::vector<float*> ys, ys_down;
  std::vector<const float*> hs;
  for (int64_t j = 0; j < 2 * k; ++j) ws.push_back(&S.views[static_cast<size_t>(j)]), ys.push_back(S.g.data() + j * nf);
  for (int64_t j = 0; j < k; ++j) hs.push_back(S.h.data() + j * nf), ys_down.push_back(S.y.data() + j * d);
  matmul_same_input(*on.pool, ws, in, 1, ys, *on.xq);
  for (int64_t j = 0; j < k; ++j) hidden_values(hp, 0.0f, S.g.data() + 2 * j * nf, S.g.data() + (2 * j + 1) * nf, S.h.data() + j * nf, nf);
  if (!one_token_own_inputs(*on.pool, S.downs, hs, ys_down))
    for (int64_t j = 0; j < k; ++j) matmul(on, S.downs[static_cast<size_t>(j)], hs[static_cast<size_t>(j)], 1, ys_down[static_cast<size_t>(j)]);
  for (int64_t j = 0; j < k; ++j) {
    const float w = S.weights[static_cast<size_t>(j)];
    for (int64_t c = 0; c < d; ++c) out[c] += w * S.y[static_cast<size_t>(j * d + c)];
  }
  return k;
}

int64_t inference_context::batch_experts(int64_t n, const layer_weights& l, const workers& on, const float* in, float* out) {
  const hparams& hp = model_->hp();
  const int64_t d = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used, nf = hp.n_ff_exp;
  moe_scratch& S = moe_;
  // The (token, rank) slots of each expert, in token order: expert e's are slots [first[e], first[e + 1]).
  S.first.assign(static_cast<size_t>(ne + 1), 0);
  for (int64_t j = 0; j < n * k; ++j) ++S.first[static_cast<size_t>(S.experts[static_cast<size_t>(j)]) + 1];
  std::partial_sum(S.first.begin(), S.first.end(), S.first.begin());
  S.slots.resize(static_cast<size_t>(n * k));
  std::vector<int64_t> at(S.first.begin(), S.first.end() - 1);
  for (int64_t j = 0; j < n * k; ++j) S.slots[static_cast<size_t>(at[static_cast<size_t>(S.experts[static_cast<size_t>(j)])]++)] = j;
  int64_t used = 0;
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t s0 = S.first[static_cast<size_t>(e)], m = S.first[static_cast<size_t>(e) + 1] - s0;
    if (m == 0) continue;
    ++used;
    // The tokens that chose expert e, their inputs side by side; its rows read once for all of them.
    S.x.resize(static_cast<size_t>(m * d));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = S.slots[static_cast<size_t>(s0 + i)] / k;
      std::copy(in + t * d, in + (t + 1) * d, S.x.begin() + i * d);
    }
    expert_product(on, expert_rows(l.ffn_gate_exps, e, nf), expert_rows(l.ffn_up_exps, e, nf), expert_rows(l.ffn_down_exps, e, d), S.x.data(), m, S.y);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t j = S.slots[static_cast<size_t>(s0 + i)], t = j / k;
      const float w = S.weights[static_cast<size_t>(j)];
      float* o = out + t * d;
      const float* y = S.y.data() + i * d;
      for (int64_t c = 0; c < d; ++c) o[c] += w * y[c];
    }
  }
  return used;
}

void inference_context::expert_product(const workers& on, const tensor_view& gate, const tensor_view& up, const tensor_view& down, const float* x, int64_t m,
                                       std::vector<float>& y) {
  const hparams& hp = model_->hp();
  const int64_t nf = gate.ne1, d = down.ne1;
  moe_scratch& S = moe_;
  S.g.resize(static_cast<size_t>(m * nf));
  S.h.resize(static_cast<size_t>(m * nf));
  const tensor_view* ws[2] = {&gate, &up};
  float* ys[2] = {S.g.data(), S.h.data()};
  matmul_same_input(*on.pool, ws, x, m, ys, *on.xq);
  hidden_values(hp, 0.0f, S.g.data(), S.h.data(), S.h.data(), m * nf);
  y.resize(static_cast<size_t>(m * d));
  matmul(on, down, S.h.data(), m, y.data());
}

}  // namespace hotcold
