// A mixture of experts' FFN on the CPU and a hot device's slots (engine/moe_block.hpp, docs/moe.md).
#include "engine/moe_block.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "engine/layer_ops.hpp"
#include "engine/matmul.hpp"
#include "engine/ram_tier.hpp"
#include "engine/neuron_rules.hpp"
#include "engine/row_groups.hpp"
#include "engine/step_part.hpp"
#include "engine/trace.hpp"
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

ffn_step_counts moe_block::run(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, float* out) {
  const hparams& hp = env_.hp();
  const int64_t n = B.n, d = hp.n_embd, k = hp.n_expert_used, nf = hp.n_ff_exp;
  ffn_step_counts c;
  route(B, layer, l, on, in, c);
  std::fill(out, out + n * d, 0.0f);
  // The experts a slot of the hot device holds go there, computed while the CPU's workers compute the
  // rest (and qwen2moe's shared expert where the device holds it); the two weighted sums join here.
  const bool split = experts_ && experts_->slots(layer) > 0;
  const bool shared_there = l.ffn_gate_shexp && env_.device && env_.device->shared_expert(layer);
  split_by_slots(layer, n, c);
  // One token whose next layer's attention job takes a sum left on the GPU: the hot experts' weighted
  // sum stays there (no copy back, no wait; attention_block::takes_pending) — where the next layer's
  // experts need no guess (every one in a slot, or none guessed: the stream is partial till then).
  const auto& dl = env_.device;
  const bool guess_wanted = experts_ && experts_->guessing() && layer + 1 < hp.n_layer && experts_->slots(layer + 1) > 0 &&
                            experts_->slots(layer + 1) < hp.n_expert;
  const bool defer = B.next_takes_pending && n == 1 && (split || shared_there) && dl && !dl->device().runs_host_work() && !guess_wanted;
  devices::event hot;
  if (split || shared_there) hot = submit_hot_experts(B, layer, in, shared_there, defer ? dl->pending_sums() : nullptr);
  const bool deferred = defer && (!hot_.experts.empty() || shared_there);  // (no hot expert chosen: nothing was summed)
  // Should the CPU's share throw, the device's job (which reads this step's buffers) ends first.
  struct join_on_throw {
    devices::event& e;
    ~join_on_throw() {
      if (e && std::uncaught_exceptions() > 0) try {
          e->wait();
        } catch (...) {
        }
    }
  } joined{hot};
  // The disk tier (--ram-budget): the CPU's experts of the step in memory while it computes them,
  // each at its slot (unit_row).
  std::optional<ram_tier::use> in_memory;
  if (env_.disk) {
    std::vector<int32_t> ids;
    for (int32_t e : S_.experts)
      if (S_.on_host[static_cast<size_t>(e)] && std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
    in_memory.emplace(env_.disk->rows(layer, ids));
    S_.unit_row.assign(static_cast<size_t>(hp.n_expert), -1);
    const auto rows = in_memory->rows_of(ids);
    for (size_t j = 0; j < ids.size(); ++j) S_.unit_row[static_cast<size_t>(ids[j])] = rows[j];
  }
  const auto cold_began = std::chrono::steady_clock::now();
  int64_t used = n == 1 ? one_token_experts(l, on, in, out) : batch_experts(n, l, on, in, out);
  if (split && n > 1) {  // the CPU's seconds per (token, expert) of a batch
    int64_t pairs = 0;
    for (int32_t e : S_.experts) pairs += S_.on_host[static_cast<size_t>(e)];
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - cold_began).count();
    if (pairs > 0) fold_into(rates_.cpu, s / static_cast<double>(pairs));
  }
  if (l.ffn_gate_shexp && !shared_there) {
    expert_product(on, l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp, in, n, S_.y);
    add_shared_expert(l, in, n, S_.y.data(), out);
  }
  if (hot && deferred) {
    used += count_hot(layer, shared_there, c);
    B.pending = dl->pending_sums(), B.pending_done = std::exchange(hot, nullptr);
  } else if (hot) {
    hot->wait();
    used += join_hot(layer, l, in, n, shared_there, out, c);
  }
  // The experts no slot held are uploaded after the layer (queued behind its work), as the policy
  // and the step's allowance let them.
  if (split)
    for (int32_t e : S_.experts)
      if (experts_->slot_of(layer, e) < 0) c.cache_uploads += experts_->upload(layer, e, S_.experts);
  observe(layer, n);
  // The experts' neurons computed (k per token) and read (each expert used once per batch).
  c.computed = n * k * nf;
  c.rows = c.down_rows = used * nf;
  return c;
}

void moe_block::route(step_state& B, int64_t layer, const layer_weights& l, const workers& on, const float* in, ffn_step_counts& c) {
  const hparams& hp = env_.hp();
  const int64_t n = B.n, ne = hp.n_expert, k = hp.n_expert_used;
  scratch& S = S_;
  S.logits.resize(static_cast<size_t>(n * ne));
  S.experts.resize(static_cast<size_t>(n * k));
  S.weights.resize(static_cast<size_t>(n * k));
  router_logits(l, on, in, n, S.logits.data());
  route_experts(hp, S.logits.data(), n, S.experts.data(), S.weights.data());
  // The (token, rank) slots of each expert, in token order: expert e's are slots [first[e], first[e + 1]).
  S.first.assign(static_cast<size_t>(ne + 1), 0);
  for (int32_t e : S.experts) ++S.first[static_cast<size_t>(e) + 1];
  std::partial_sum(S.first.begin(), S.first.end(), S.first.begin());
  S.slots.resize(static_cast<size_t>(n * k));
  {
    std::vector<int64_t> at(S.first.begin(), S.first.end() - 1);
    for (int64_t j = 0; j < n * k; ++j) S.slots[static_cast<size_t>(at[static_cast<size_t>(S.experts[static_cast<size_t>(j)])]++)] = j;
  }
  c.expert_choices.assign(static_cast<size_t>(ne), 0);
  for (int64_t j = 0; j < n * k; ++j) ++c.expert_choices[static_cast<size_t>(S.experts[static_cast<size_t>(j)])];
  // How many of the chosen experts the guess from the layer before had (guess_next).
  if (B.guessed_layer == layer) {
    int64_t had = 0;
    for (int64_t t = 0; t < n; ++t) {
      const int32_t* guess = B.expert_guess.data() + t * k;
      for (int64_t j = 0; j < k; ++j) had += std::find(guess, guess + k, S.experts[static_cast<size_t>(t * k + j)]) != guess + k;
    }
    c.experts_chosen = n * k;
    c.experts_guessed = had;
    B.guessed_layer = -1;
  }
  if (env_.trace) {  // each token's chosen experts, as a sparse layer's chosen neurons (docs/traces.md)
    S.chosen.assign(static_cast<size_t>(n * ne), 0);
    for (int64_t j = 0; j < n * k; ++j) S.chosen[static_cast<size_t>(j / k * ne + S.experts[static_cast<size_t>(j)])] = 1;
    env_.trace->record_active(B.step, layer, n, ne, S.chosen.data());
  }
}

void moe_block::split_by_slots(int64_t layer, int64_t n, ffn_step_counts& c) {
  const hparams& hp = env_.hp();
  const int64_t ne = hp.n_expert, k = hp.n_expert_used;
  scratch& S = S_;
  S.on_host.assign(static_cast<size_t>(ne), 1);
  if (!experts_) return;
  for (int64_t t = 0; t < n; ++t) {  // (counted in every layer: a layer without slots misses every time)
    c.cache_lookups += k;
    c.cache_hits += experts_->chosen(layer, std::span<const int32_t>(S.experts.data() + t * k, static_cast<size_t>(k)));
  }
  if (experts_->slots(layer) == 0) return;
  for (int32_t e : S.experts)
    if (experts_->slot_of(layer, e) >= 0) S.on_host[static_cast<size_t>(e)] = 0;
  if (n == 1 || experts_->slots(layer) >= ne) return;
  // A prompt batch: a cold expert that enough of its tokens chose is uploaded now and computed on the
  // device, where that costs less than the CPU's share of it (stream_min_tokens).
  const double fewest = stream_min_tokens(layer);
  for (int32_t e = 0; e < static_cast<int32_t>(ne); ++e)
    if (S.on_host[static_cast<size_t>(e)] && static_cast<double>(S.first[static_cast<size_t>(e) + 1] - S.first[static_cast<size_t>(e)]) >= fewest &&
        experts_->stream(layer, e, S.experts)) {
      S.on_host[static_cast<size_t>(e)] = 0;
      ++c.cache_uploads;
    }
}

int64_t moe_block::join_hot(int64_t layer, const layer_weights& l, const float* in, int64_t n, bool shared, float* out, ffn_step_counts& c) {
  const hot_experts& H = hot_;  // (the device's job is done)
  const int64_t d = env_.hp().n_embd;
  for (size_t i = 0; i < H.experts.size(); ++i) {
    const int64_t e = H.experts[i], r0 = H.first[i];
    add_weighted(S_.slots.data() + S_.first[static_cast<size_t>(e)], H.first[i + 1] - r0, H.y.data() + r0 * d, out);
  }
  if (n > 1 && H.first.back() > 0) fold_into(rates_.device, H.seconds / static_cast<double>(H.first.back()));  // seconds per (token, expert)
  if (shared) add_shared_expert(l, in, n, H.shared_y.data(), out);
  return count_hot(layer, shared, c);
}

int64_t moe_block::count_hot(int64_t layer, bool shared, ffn_step_counts& c) {
  const hot_experts& H = hot_;
  for (size_t i = 0; i < H.experts.size(); ++i) c.expert_device_bytes += experts_->expert_bytes(layer);
  c.device_bytes += c.expert_device_bytes;
  if (shared) c.device_bytes += env_.device->ffn_bytes(layer);
  env_.device_read += c.device_bytes;
  return static_cast<int64_t>(H.experts.size());
}

void moe_block::observe(int64_t layer, int64_t n) const {
  // Each token's weight for every expert (zero: not chosen), as its FFN values (observed::ffn_act).
  if (!env_.watch) return;
  const int64_t ne = env_.hp().n_expert, k = env_.hp().n_expert_used;
  std::vector<float> w(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t) {
    std::fill(w.begin(), w.end(), 0.0f);
    for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(S_.experts[static_cast<size_t>(t * k + j)])] = S_.weights[static_cast<size_t>(t * k + j)];
    env_.watch(observed::ffn_act, layer, std::span<const float>(w));
  }
}

void moe_block::router_logits(const layer_weights& l, const workers& on, const float* in, int64_t n, float* logits) {
  const int64_t d = env_.hp().n_embd, ne = env_.hp().n_expert;
  if (l.ffn_gate_inp.type == tensor_type::f32 && n * ne * d <= (int64_t{1} << 18)) {
    // A small F32 router (Mixtral's 8 x 4096) on this thread: a split across the pool costs more
    // than its products.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t e = 0; e < ne; ++e) logits[t * ne + e] = kernels::dot_f32(reinterpret_cast<const float*>(l.ffn_gate_inp.row(e)), in + t * d, d);
  } else {
    matmul(*on.pool, l.ffn_gate_inp, in, n, logits, *on.xq);
  }
}

int64_t moe_block::guess_next(step_state& B, int64_t layer) {
  const hparams& hp = env_.hp();
  const layer_weights& next = env_.m->weights().layers[static_cast<size_t>(layer + 1)];
  const int64_t n = B.n, d = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used;
  scratch& S = S_;
  S.guess_in.resize(static_cast<size_t>(n * d));
  S.guess_logits.resize(static_cast<size_t>(n * ne));
  S.guess_weights.resize(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t) rms_norm(B.x.data() + t * d, next.ffn_norm.f32(), S.guess_in.data() + t * d, d, hp.norm_eps);
  router_logits(next, env_.cpu, S.guess_in.data(), n, S.guess_logits.data());
  B.expert_guess.resize(static_cast<size_t>(n * k));
  route_experts(hp, S.guess_logits.data(), n, B.expert_guess.data(), S.guess_weights.data());
  B.guessed_layer = layer + 1;
  if (env_.disk) {  // (the disk tier's: their bytes read while this layer ends; those a device slot holds need none)
    S.guess_host.clear();
    for (int32_t e : B.expert_guess)
      if (!experts_ || experts_->slot_of(layer + 1, e) < 0) S.guess_host.push_back(e);
    env_.disk->read_ahead(layer + 1, S.guess_host);
  }
  // Guessed experts no slot of the next layer holds: uploaded now, a layer before they are routed.
  int64_t uploads = 0;
  if (experts_ && experts_->guessing() && experts_->slots(layer + 1) > 0)
    for (int32_t e : B.expert_guess)
      if (experts_->slot_of(layer + 1, e) < 0) uploads += experts_->upload(layer + 1, e, B.expert_guess, true);
  return uploads;
}

int64_t moe_block::one_token_experts(const layer_weights& l, const workers& on, const float* in, float* out) {
  // Its experts' gate and up rows all read the same input: one split across the threads for all of
  // them; then their down rows, each against its own values, in another.
  const hparams& hp = env_.hp();
  const int64_t d = hp.n_embd, k = hp.n_expert_used, nf = hp.n_ff_exp;
  scratch& S = S_;
  S.views.clear(), S.downs.clear(), S.ranks.clear();
  for (int64_t j = 0; j < k; ++j) {
    const int64_t e = S.experts[static_cast<size_t>(j)];
    if (!S.on_host[static_cast<size_t>(e)]) continue;  // computed on the hot device
    S.ranks.push_back(j);
    const int64_t at = slot_of(e);
    S.views.push_back(expert_rows(l.ffn_gate_exps, at, nf));
    S.views.push_back(expert_rows(l.ffn_up_exps, at, nf));
    S.downs.push_back(expert_rows(l.ffn_down_exps, at, d));
  }
  const auto c = static_cast<int64_t>(S.ranks.size());  // experts the CPU computes
  if (c == 0) return 0;
  S.g.resize(static_cast<size_t>(2 * c * nf));
  S.h.resize(static_cast<size_t>(c * nf));
  S.y.resize(static_cast<size_t>(c * d));
  std::vector<const tensor_view*> ws;
  std::vector<float*> ys, ys_down;
  std::vector<const float*> hs;
  for (int64_t j = 0; j < 2 * c; ++j) ws.push_back(&S.views[static_cast<size_t>(j)]), ys.push_back(S.g.data() + j * nf);
  for (int64_t j = 0; j < c; ++j) hs.push_back(S.h.data() + j * nf), ys_down.push_back(S.y.data() + j * d);
  matmul_same_input(*on.pool, ws, in, 1, ys, *on.xq);
  for (int64_t j = 0; j < c; ++j) hidden_values(hp, 0.0f, S.g.data() + 2 * j * nf, S.g.data() + (2 * j + 1) * nf, S.h.data() + j * nf, nf);
  if (!one_token_own_inputs(*on.pool, S.downs, hs, ys_down))
    for (int64_t j = 0; j < c; ++j) matmul(*on.pool, S.downs[static_cast<size_t>(j)], hs[static_cast<size_t>(j)], 1, ys_down[static_cast<size_t>(j)], *on.xq);
  for (int64_t j = 0; j < c; ++j) {
    const float w = S.weights[static_cast<size_t>(S.ranks[static_cast<size_t>(j)])];
    for (int64_t i = 0; i < d; ++i) out[i] += w * S.y[static_cast<size_t>(j * d + i)];
  }
  return c;
}

int64_t moe_block::batch_experts(int64_t n, const layer_weights& l, const workers& on, const float* in, float* out) {
  const hparams& hp = env_.hp();
  const int64_t d = hp.n_embd, ne = hp.n_expert, k = hp.n_expert_used, nf = hp.n_ff_exp;
  scratch& S = S_;
  int64_t used = 0;
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t s0 = S.first[static_cast<size_t>(e)], m = S.first[static_cast<size_t>(e) + 1] - s0;
    if (m == 0 || !S.on_host[static_cast<size_t>(e)]) continue;  // (or computed on the hot device)
    ++used;
    // The tokens that chose expert e, their inputs side by side; its rows read once for all of them.
    S.x.resize(static_cast<size_t>(m * d));
    for (int64_t i = 0; i < m; ++i) {
      const int64_t t = S.slots[static_cast<size_t>(s0 + i)] / k;
      std::copy(in + t * d, in + (t + 1) * d, S.x.begin() + i * d);
    }
    const int64_t at = slot_of(e);
    expert_product(on, expert_rows(l.ffn_gate_exps, at, nf), expert_rows(l.ffn_up_exps, at, nf), expert_rows(l.ffn_down_exps, at, d), S.x.data(), m, S.y);
    add_weighted(S.slots.data() + s0, m, S.y.data(), out);
  }
  return used;
}

void moe_block::add_weighted(const int64_t* slots, int64_t m, const float* y, float* out) {
  const int64_t d = env_.hp().n_embd, k = env_.hp().n_expert_used;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t j = slots[i];
    const float w = S_.weights[static_cast<size_t>(j)];
    float* o = out + j / k * d;
    const float* yi = y + i * d;
    for (int64_t c = 0; c < d; ++c) o[c] += w * yi[c];
  }
}

double moe_block::stream_min_tokens(int64_t layer) const {
  // Streaming an expert pays when its upload costs less than what the device saves on its tokens:
  // bytes x the upload's seconds a byte < tokens x (CPU - device seconds per token). Before the rates
  // are measured, llama.cpp's rule: a batch's expert with 32 tokens or more.
  const double link = experts_->upload_seconds_per_byte();
  if (rates_.cpu <= 0 || rates_.device <= 0 || link <= 0) return 32;
  const double gain = rates_.cpu - rates_.device;
  if (gain <= 0) return std::numeric_limits<double>::infinity();
  return link * static_cast<double>(experts_->expert_bytes(layer)) / gain;
}

namespace {

// An expert's rows, and scratch for its gate's and hidden values.
struct expert_weights {
  const tensor_view &gate, &up, &down;
};
struct expert_scratch {
  std::vector<float>&g, &h;
};

// y (m x n_embd) = down(act(gate x) * up x) for m inputs x, by these workers.
void expert_forward(const hparams& hp, const workers& on, const expert_weights& w, const float* x, int64_t m, expert_scratch s, float* y) {
  const int64_t nf = w.gate.ne1;
  s.g.resize(static_cast<size_t>(m * nf));
  s.h.resize(static_cast<size_t>(m * nf));
  const tensor_view* ws[2] = {&w.gate, &w.up};
  float* ys[2] = {s.g.data(), s.h.data()};
  matmul_same_input(*on.pool, ws, x, m, ys, *on.xq);
  hidden_values(hp, 0.0f, s.g.data(), s.h.data(), s.h.data(), m * nf);
  hotcold::matmul(*on.pool, w.down, s.h.data(), m, y, *on.xq);
}

}  // namespace

void moe_block::expert_product(const workers& on, const tensor_view& gate, const tensor_view& up, const tensor_view& down, const float* x, int64_t m,
                               std::vector<float>& y) {
  y.resize(static_cast<size_t>(m * down.ne1));
  expert_forward(env_.hp(), on, {gate, up, down}, x, m, {S_.g, S_.h}, y.data());
}

namespace {
// qwen2moe's shared expert's weight for a token x: sigmoid(ffn_gate_inp_shexp . x).
float shared_expert_gate(const layer_weights& l, const float* x, int64_t d) {
  return 1.0f / (1.0f + std::exp(-kernels::dot_f32(l.ffn_gate_inp_shexp.f32(), x, d)));
}
}  // namespace

void moe_block::add_shared_expert(const layer_weights& l, const float* in, int64_t n, const float* y, float* out) {
  // qwen2moe's shared expert, for every token, scaled by its gate.
  const int64_t d = env_.hp().n_embd;
  for (int64_t t = 0; t < n; ++t) {
    const float scale = shared_expert_gate(l, in + t * d, d);
    for (int64_t c = 0; c < d; ++c) out[t * d + c] += scale * y[t * d + c];
  }
}

devices::event moe_block::submit_hot_experts(step_state& B, int64_t layer, const float* in, bool shared, float* into) {
  const hparams& hp = env_.hp();
  const int64_t n = B.n, d = hp.n_embd, k = hp.n_expert_used;
  const scratch& S = S_;
  hot_experts& H = hot_;
  // The hot experts the step chose (moe_'s grouping), their tokens' inputs side by side (expert i's
  // at rows [first[i], first[i + 1])); the slot each one is in now (an upload may refill it after).
  H.experts.clear(), H.slot.clear(), H.first.assign(1, 0);
  H.x.clear();
  if (experts_ && experts_->slots(layer) > 0)
    for (int32_t e = 0; e < static_cast<int32_t>(hp.n_expert); ++e) {
      const int32_t slot = experts_->slot_of(layer, e);
      const int64_t s0 = S.first[static_cast<size_t>(e)], m = S.first[static_cast<size_t>(e) + 1] - s0;
      if (slot < 0 || m == 0) continue;
      for (int64_t i = 0; i < m; ++i) {
        const int64_t t = S.slots[static_cast<size_t>(s0 + i)] / k;
        H.x.insert(H.x.end(), in + t * d, in + (t + 1) * d);
      }
      H.experts.push_back(e), H.slot.push_back(slot), H.first.push_back(H.first.back() + m);
    }
  // A GPU takes the shared expert in the same job: its rows (every token's) after the experts'.
  const std::shared_ptr<const device_layers> dl = env_.device;
  if (shared && !dl->device().runs_host_work()) H.x.insert(H.x.end(), in, in + n * d);
  if (into) {  // one token: each row's router weight, the shared expert's gate (add_shared_expert's)
    H.w.clear();
    for (size_t i = 0; i < H.experts.size(); ++i) H.w.push_back(S.weights[static_cast<size_t>(S.slots[static_cast<size_t>(S.first[static_cast<size_t>(H.experts[i])])])]);
    if (shared) H.w.push_back(shared_expert_gate(env_.m->weights().layers[static_cast<size_t>(layer)], in, d));
  }
  H.y.resize(H.x.size());
  if (shared) H.shared_y.resize(static_cast<size_t>(n * d));
  return dl->submit([this, layer, in, n, d, shared, dl, into] {
    const hparams& hp = env_.hp();
    hot_experts& H = hot_;
    devices::device& dev = dl->device();
    // One expert's product: the CPU's routine on the device's own worker (a device that runs host
    // work), else the device's dense FFN job over its rows.
    auto product = [&](const tensor_view& gate, const tensor_view& up, const tensor_view& down, const float* x, int64_t m, float* y) {
      if (dev.runs_host_work()) return expert_forward(hp, {&dl->pool(), &dl->xq()}, {gate, up, down}, x, m, {H.g, H.h}, y);
      devices::dense_ffn_job job;
      job.gate = gate.data, job.up = up.data, job.down = down.data;
      job.t_gate = gate.type, job.t_up = up.type, job.t_down = down.type;
      job.gated = true, job.act = hp.act;
      job.n = m, job.d = d, job.n_ff = gate.ne1, job.x = x, job.out = y;
      job.scratch = dl->scratch(), job.scratch_bytes = dl->scratch_bytes();
      dev.compute(job);
    };
    const auto began = std::chrono::steady_clock::now();
    if (!dev.runs_host_work()) {
      // A GPU: the layer's hot experts (and its shared expert, its rows after theirs) as one job, one wait.
      H.parts.clear();
      auto part = [&](const tensor_view& gate, const tensor_view& up, const tensor_view& down, int64_t first, int64_t m) {
        H.parts.push_back({gate.data, up.data, down.data, gate.type, up.type, down.type, first, m, gate.ne1});
      };
      for (size_t i = 0; i < H.experts.size(); ++i) {
        const device_experts::rows r = experts_->slot_rows(layer, H.slot[i]);
        part(r.gate, r.up, r.down, H.first[i], H.first[i + 1] - H.first[i]);
      }
      const int64_t rows = H.first.back();
      if (shared) {
        const layer_weights& g = dl->layer(layer);
        part(g.ffn_gate_shexp, g.ffn_up_shexp, g.ffn_down_shexp, rows, n);
      }
      const int64_t total = rows + (shared ? n : 0);
      if (total == 0) return;
      devices::dense_ffn_job job;
      job.parts = H.parts.data(), job.n_parts = static_cast<int64_t>(H.parts.size());
      job.gated = true, job.act = hp.act;
      job.n = total, job.d = d;
      for (const devices::ffn_part& p : H.parts) job.n_ff = std::max(job.n_ff, p.n_ff);
      job.x = H.x.data(), job.out = H.y.data();
      job.scratch = dl->scratch(), job.scratch_bytes = into ? dl->scratch_beside_pending() : dl->scratch_bytes();
      if (into) job.combine_into = into, job.weights = H.w.data();
      dev.compute(job);
      H.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      if (shared && !into) std::copy(H.y.begin() + rows * d, H.y.begin() + total * d, H.shared_y.begin());
      return;
    }
    for (size_t i = 0; i < H.experts.size(); ++i) {
      const device_experts::rows r = experts_->slot_rows(layer, H.slot[i]);
      const int64_t r0 = H.first[i], m = H.first[i + 1] - r0;
      product(r.gate, r.up, r.down, H.x.data() + r0 * d, m, H.y.data() + r0 * d);
    }
    H.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (shared) {
      const layer_weights& g = dl->layer(layer);
      product(g.ffn_gate_shexp, g.ffn_up_shexp, g.ffn_down_shexp, in, n, H.shared_y.data());
    }
  });
}

}  // namespace hotcold
