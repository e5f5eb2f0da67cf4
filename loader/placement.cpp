#include "loader/placement.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "model/placement_file.hpp"
#include "devices/gpu_jobs.hpp"
#include "engine/read_costs.hpp"

namespace hotcold::loader {

placement_solution solve_placement(const placement_problem& p) {
  const size_t L = p.bytes.size();
  placement_solution s;
  s.hot.resize(L);
  // Each layer's best k neurons are its k most frequent: sort once, keep prefix sums.
  std::vector<std::vector<int32_t>> order(L);
  std::vector<std::vector<uint64_t>> prefix(L);
  for (size_t l = 0; l < L; ++l) {
    order[l].resize(p.counts[l].size());
    std::iota(order[l].begin(), order[l].end(), 0);
    std::stable_sort(order[l].begin(), order[l].end(), [&](int32_t a, int32_t b) { return p.counts[l][a] > p.counts[l][b]; });
    prefix[l].assign(order[l].size() + 1, 0);
    for (size_t k = 0; k < order[l].size(); ++k) prefix[l][k + 1] = prefix[l][k] + p.counts[l][order[l][k]];
  }
  std::vector<size_t> take(L, 0);
  bool same_size = std::all_of(p.bytes.begin(), p.bytes.end(), [&](uint64_t b) { return b == p.bytes.front(); });
  uint64_t g = 0;
  for (uint64_t b : p.bytes) g = std::gcd(g, b);
  uint64_t units = g ? p.budget / g : 0;
  size_t max_items = 0;
  for (const auto& c : p.counts) max_items = std::max(max_items, c.size());

  if (L == 0 || g == 0) {
  } else if (same_size) {
    // Equal sizes: the most frequent neurons overall, whatever their layer, are optimal.
    std::vector<std::pair<uint64_t, std::pair<size_t, size_t>>> all;
    for (size_t l = 0; l < L; ++l)
      for (size_t k = 0; k < order[l].size(); ++k) all.push_back({p.counts[l][order[l][k]], {l, k}});
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    size_t fit = static_cast<size_t>(std::min<uint64_t>(all.size(), p.budget / p.bytes.front()));
    for (size_t i = 0; i < fit; ++i) take[all[i].second.first] = std::max(take[all[i].second.first], all[i].second.second + 1);
    // Ties may pick a later rank before an earlier equal one; prefixes keep the same value.
  } else if (static_cast<double>(units) * static_cast<double>(L) * static_cast<double>(max_items) <= 2e8) {
    // Exact: dynamic programming over layers and budget units (multiple-choice knapsack).
    std::vector<uint64_t> best(units + 1, 0), next(units + 1);
    std::vector<std::vector<uint32_t>> choice(L, std::vector<uint32_t>(units + 1, 0));
    for (size_t l = 0; l < L; ++l) {
      uint64_t w = p.bytes[l] / g;
      for (uint64_t u = 0; u <= units; ++u) {
        uint64_t v = best[u];
        uint32_t c = 0;
        for (size_t k = 1; k <= order[l].size() && k * w <= u; ++k) {
          uint64_t cand = best[u - k * w] + prefix[l][k];
          if (cand > v) v = cand, c = static_cast<uint32_t>(k);
        }
        next[u] = v;
        choice[l][u] = c;
      }
      best.swap(next);
    }
    uint64_t u = units;
    for (size_t l = L; l-- > 0;) {
      take[l] = choice[l][u];
      u -= take[l] * (p.bytes[l] / g);
    }
  } else {
    // Too large to solve exactly: greedy by firings per byte over all neurons.
    s.exact = false;
    std::vector<std::pair<double, std::pair<size_t, size_t>>> all;
    for (size_t l = 0; l < L; ++l)
      for (size_t k = 0; k < order[l].size(); ++k)
        all.push_back({static_cast<double>(p.counts[l][order[l][k]]) / static_cast<double>(p.bytes[l]), {l, k}});
    std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    uint64_t used = 0;
    for (const auto& [density, lk] : all) {
      auto [l, k] = lk;
      if (k != take[l] || used + p.bytes[l] > p.budget) continue;
      take[l] = k + 1;
      used += p.bytes[l];
    }
  }
  for (size_t l = 0; l < L; ++l) {
    s.hot[l].assign(order[l].begin(), order[l].begin() + static_cast<ptrdiff_t>(take[l]));
    std::sort(s.hot[l].begin(), s.hot[l].end());
    s.bytes += take[l] * p.bytes[l];
    s.value += prefix[l][take[l]];
  }
  return s;
}

device_residency placement_plan::residency() const {
  device_residency r;
  for (const auto& l : layers) {
    r.attention.push_back(l.attention);
    r.predictor.push_back(l.predictor);
    r.ffn.push_back(l.ffn);
  }
  r.output = output;
  r.ctx = ctx;
  r.n_seq = n_seq;
  r.compute_bytes = fixed.compute;
  if (experts)
    for (const auto& l : layers) r.shared.push_back(l.shared);
  return r;
}

expert_residency placement_plan::expert_slots() const {
  expert_residency r;
  uint64_t largest = 0;
  for (const auto& l : layers) {
    r.slots.push_back(l.expert_slots);
    if (l.expert_slots > 0) largest = std::max(largest, l.expert_bytes / static_cast<uint64_t>(l.expert_slots));
  }
  // --n-cpu-moe's layers hold all their experts (nothing to refill); a cache may upload, a token, the
  // bytes of one expert for every fourth layer (at least one expert).
  r.policy = n_cpu_moe >= 0 ? expert_policy::fixed : expert_policy::lfu_decay;
  r.upload_bytes_per_token = n_cpu_moe >= 0 ? 0 : largest * static_cast<uint64_t>(std::max<size_t>(1, layers.size() / 4));
  return r;
}

namespace {
// The largest predictor's rank (0: none).
int64_t predictor_rank(const model& m) {
  int64_t rank = 0;
  for (const auto& l : m.weights().layers) rank = std::max(rank, l.pred_fc1 ? l.pred_fc1.ne1 : int64_t{0});
  return rank;
}
// A prompt token's scratch in a device's attention job with everything after it: its predictor, the
// residual, the FFN (each value aligned: a few bytes of slack per value a chunk).
uint64_t prompt_token_bytes(const model& m) {
  const auto& hp = m.hp();
  const int64_t n_ff = std::max({hp.n_ff, hp.n_ff_exp, hp.n_ff_shexp});
  return devices::attention_scratch_per_token(hp.n_embd, hp.n_embd_q(), hp.n_embd_kv(), hp.n_rot, n_ff, predictor_rank(m)) +
         devices::dense_ffn_scratch_per_token(hp.n_embd, n_ff) + 8 * static_cast<uint64_t>(hp.n_embd);
}
constexpr uint64_t prompt_chunk_slack = 32 * devices::scratch_align;  // (each of the layout's values rounded up)
}  // namespace

int64_t compute_buffer_prompt_tokens(const model& m) {
  const auto& w = m.weights();
  const uint64_t vocab = w.token_embd.bytes() + (w.output.data != w.token_embd.data ? w.output.bytes() : 0);
  const uint64_t share = (m.weight_bytes() > vocab ? m.weight_bytes() - vocab : 0) / 16;
  if (share <= prompt_chunk_slack) return 0;
  return std::min<int64_t>(device_prompt_chunk, static_cast<int64_t>((share - prompt_chunk_slack) / prompt_token_bytes(m)));
}

uint64_t compute_buffer_bytes(const model& m, int64_t ctx) {
  const auto& hp = m.hp();
  // The residual stream and its norms, q/k/v, attention scores over the context for every head, FFN
  // hidden vectors and scores, logits; float32, doubled for double-buffering.
  const int64_t n_ff = std::max({hp.n_ff, hp.n_ff_exp, hp.n_ff_shexp});  // (a mixture's experts and shared expert)
  const uint64_t step = 2 * 4 * static_cast<uint64_t>(4 * hp.n_embd + 2 * hp.n_embd_q() + 2 * hp.n_embd_kv() + hp.n_head * ctx + 3 * n_ff + hp.n_vocab);
  const int64_t tokens = compute_buffer_prompt_tokens(m);
  return tokens > 1 ? std::max(step, static_cast<uint64_t>(tokens) * prompt_token_bytes(m) + prompt_chunk_slack) : step;
}

namespace {

// A plan being filled: the budget left, and each buffer as the device's allocator charges it (a
// tensor is one buffer; absent ones are 0).
struct device_room {
  placement_plan& plan;
  const plan_options& o;
  const model& m;
  uint64_t left;
  uint64_t charge(const tensor_view& t) const { return o.alloc.charge(t.bytes()); }
  bool take(uint64_t bytes) {
    if (bytes > left) return false;
    left -= bytes;
    return true;
  }
};

// Attention (and a dense file's whole layers), front to back, until a layer does not fit.
void plan_attention(device_room& r) {
  const auto& hp = r.m.hp();
  const auto& o = r.o;
  placement_plan& plan = r.plan;
  fixed_costs& f = plan.fixed;
  if (plan.whole_layers && o.n_gpu_layers > hp.n_layer) throw std::invalid_argument(fmt::format("--n-gpu-layers {}: the model has {} layers", o.n_gpu_layers, hp.n_layer));
  const int64_t max_layers = !o.attention ? 0 : (plan.whole_layers || plan.experts) && o.n_gpu_layers >= 0 ? std::min(o.n_gpu_layers, hp.n_layer) : hp.n_layer;
  for (int64_t il = 0; il < max_layers; ++il) {
    if (!o.holds(il, hp.n_layer)) continue;
    const auto& l = r.m.weights().layers[static_cast<size_t>(il)];
    auto& pl = plan.layers[static_cast<size_t>(il)];
    // The FFN norm goes with the layer's attention: it is applied where the residual stream is when
    // attention ends (Falcon's FFN reads attn_norm, counted with attention).
    uint64_t weights = 0, norms = 0;
    for (const tensor_view* t : attention_weights(l)) weights += r.charge(*t);
    for (const tensor_view* t : attention_extras(l)) norms += r.charge(*t);
    const uint64_t ffn = plan.whole_layers ? r.charge(l.ffn_gate) + r.charge(l.ffn_up) + r.charge(l.ffn_down) + r.charge(l.ffn_down_t) : 0;
    if (!r.take(weights + norms + r.charge(l.ffn_norm) + plan.kv_layer_bytes + ffn)) {
      if (plan.whole_layers && o.n_gpu_layers >= 0)
        throw std::invalid_argument(fmt::format("--n-gpu-layers {}: layer {} does not fit in --vram-budget {:.4g} GiB", o.n_gpu_layers, il,
                                                plan.budget / double(1ull << 30)));
      break;
    }
    pl.attention = true;
    pl.attention_bytes = weights + norms, pl.kv_bytes = plan.kv_layer_bytes;
    f.attention += weights, f.norms += norms, f.kv_cache += plan.kv_layer_bytes;
    pl.ffn_norm = l.ffn_norm.bytes() > 0, pl.ffn_norm_bytes = r.charge(l.ffn_norm), f.norms += r.charge(l.ffn_norm);
    if (plan.whole_layers) pl.ffn = true, pl.ffn_bytes = ffn, f.ffn += ffn;
  }
}

// Predictors, then a mixture's shared experts (beside their layer's attention), then the head.
void plan_predictors_and_head(device_room& r) {
  const auto& hp = r.m.hp();
  const auto& o = r.o;
  const auto& w = r.m.weights();
  placement_plan& plan = r.plan;
  fixed_costs& f = plan.fixed;
  for (int64_t il = 0; il < (o.predictors ? hp.n_layer : 0); ++il) {
    if (!o.holds(il, hp.n_layer)) continue;
    const auto& l = w.layers[static_cast<size_t>(il)];
    auto& pl = plan.layers[static_cast<size_t>(il)];
    const uint64_t bytes = r.charge(l.pred_fc1) + r.charge(l.pred_fc2);
    if (bytes == 0) continue;
    if (!r.take(bytes)) break;
    pl.predictor = true, pl.predictor_bytes = bytes, f.predictors += bytes;
  }
  for (int64_t il = 0; il < (plan.experts && o.shared_experts ? hp.n_layer : 0); ++il) {
    const auto& l = w.layers[static_cast<size_t>(il)];
    auto& pl = plan.layers[static_cast<size_t>(il)];
    const uint64_t bytes = r.charge(l.ffn_gate_shexp) + r.charge(l.ffn_up_shexp) + r.charge(l.ffn_down_shexp);
    if (bytes == 0 || !pl.attention) continue;
    if (!r.take(bytes)) break;
    pl.shared = true, pl.shared_bytes = bytes, f.shared += bytes;
  }
  const uint64_t norm = o.output_norm ? r.charge(w.output_norm) + r.charge(w.output_norm_b) : 0;
  if (o.head && o.whole(hp.n_layer) && r.take(r.charge(w.output) + norm)) plan.output = true, f.output = r.charge(w.output), f.norms += norm;
}

// Expert slots with what is left: --n-cpu-moe N puts every expert of layers N.. on the device (all of
// them must fit); otherwise each layer gets the same number of slots, a cache of its experts, and what
// is left after that one more slot each, front to back. A layer's slots are three buffers (gate, up
// and down rows of `slots` experts each, device_experts).
void plan_experts(device_room& r) {
  const auto& hp = r.m.hp();
  const auto& o = r.o;
  placement_plan& plan = r.plan;
  auto slots_bytes = [&](int64_t il, int64_t slots) {
    uint64_t b = 0;
    for (const uint64_t part : expert_part_bytes(r.m.weights().layers[static_cast<size_t>(il)], hp.n_expert)) b += o.alloc.charge(part * static_cast<uint64_t>(slots));
    return b;
  };
  auto give = [&](int64_t il, int64_t slots) {  // (the layer's slots become `slots` more)
    auto& pl = plan.layers[static_cast<size_t>(il)];
    const uint64_t more = slots_bytes(il, pl.expert_slots + slots) - slots_bytes(il, pl.expert_slots);
    if (!r.take(more)) return false;
    pl.expert_slots += slots, pl.expert_bytes += more, plan.fixed.experts += more;
    return true;
  };
  if (o.n_cpu_moe >= 0) {
    for (int64_t il = o.n_cpu_moe; il < hp.n_layer; ++il)
      if (o.holds(il, hp.n_layer) && !give(il, hp.n_expert))
        throw std::invalid_argument(fmt::format("--n-cpu-moe {}: layer {}'s {} experts ({:.2f} MiB) do not fit in what is left of --vram-budget {:.4g} GiB "
                                                "({:.2f} MiB); raise N or the budget, or leave it out for a cache of experts in every layer",
                                                o.n_cpu_moe, il, hp.n_expert, slots_bytes(il, hp.n_expert) / double(1 << 20), plan.budget / double(1ull << 30),
                                                r.left / double(1 << 20)));
    return;
  }
  // The most slots every layer can have alike, then one more a layer front to back.
  int64_t each = hp.n_expert;
  for (;; --each) {
    uint64_t all = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) all += o.holds(il, hp.n_layer) ? slots_bytes(il, each) : 0;
    if (each == 0 || all <= r.left) break;
  }
  if (each > 0)
    for (int64_t il = 0; il < hp.n_layer; ++il)
      if (o.holds(il, hp.n_layer)) give(il, each);
  if (each < hp.n_expert)
    for (int64_t il = 0; il < hp.n_layer; ++il)
      if (o.holds(il, hp.n_layer)) give(il, 1);
}

}  // namespace

placement_plan plan_device(const model& m, uint64_t budget, const plan_options& o) {
  const auto& hp = m.hp();
  if (budget == 0) throw std::invalid_argument("--vram-budget must be positive");
  if (o.n_seq < 1) throw std::invalid_argument("a plan needs at least one sequence");
  if (!is_kv_cache_type(o.kv.k) || !is_kv_cache_type(o.kv.v)) throw std::invalid_argument("the KV cache holds f32, f16, q8_0 or q4_0 values");
  placement_plan plan;
  plan.budget = budget;
  plan.ctx = o.ctx > 0 ? o.ctx : std::min<int64_t>(hp.n_ctx_train, 4096);
  plan.n_seq = o.n_seq;
  plan.experts = hp.moe();
  plan.whole_layers = !m.has_predictors() && !plan.experts;
  plan.n_expert = hp.n_expert;
  plan.n_cpu_moe = plan.experts ? o.n_cpu_moe : -1;
  if (o.n_cpu_moe >= 0 && !plan.experts) throw std::invalid_argument("--n-cpu-moe and --cpu-moe are for a mixture of experts");
  if (o.n_cpu_moe > hp.n_layer) throw std::invalid_argument(fmt::format("--n-cpu-moe {}: the model has {} layers", o.n_cpu_moe, hp.n_layer));
  plan.pinned_host = o.pinned_bytes;
  // Each kind in turn takes layers front to back until one does not fit; the next kind gets what is
  // left (so a head that does not fit leaves its room to the hot rows instead of wasting it).
  device_room room{plan, o, m, plan.budget};
  fixed_costs& f = plan.fixed;
  f.compute = o.alloc.charge(compute_buffer_bytes(m, plan.ctx));
  f.step = m.has_predictors() ? o.step_bytes : 0;  // a dense file has no hot rows, so no FFN-rows jobs
  if (!room.take(f.compute + f.step))
    throw std::invalid_argument(fmt::format("--vram-budget {:.4g} GiB ({:.2f} MiB) is below the compute buffers the device needs for anything: {:.2f} MiB",
                                            budget / double(1ull << 30), budget / double(1 << 20), (f.compute + f.step) / double(1 << 20)));
  plan.layers.resize(static_cast<size_t>(hp.n_layer));
  // The KV cache of each layer whose attention the device runs (attention without its cache would send
  // the cache across every token): K and V, every position of every sequence, in the cache's type.
  plan.kv_layer_bytes = o.alloc.charge(values_bytes(o.kv.k, plan.ctx * o.n_seq * hp.n_embd_kv())) + o.alloc.charge(values_bytes(o.kv.v, plan.ctx * o.n_seq * hp.n_embd_kv()));
  plan_attention(room);
  plan_predictors_and_head(room);
  if (plan.experts && o.experts) plan_experts(room);
  plan.left = room.left;
  return plan;
}

placement_plan plan_placement(const model& m, const std::vector<uint64_t>& firing_counts, uint64_t budget, const plan_options& o) {
  const auto& hp = m.hp();
  if (static_cast<int64_t>(firing_counts.size()) != hp.n_layer * hp.n_ff)
    throw std::invalid_argument(fmt::format("{} firing counts for a model of {} layers x {} neurons", firing_counts.size(), hp.n_layer, hp.n_ff));
  placement_plan plan = plan_device(m, budget, o);
  // Hot FFN neurons with what is left.
  placement_problem p;
  p.budget = plan.left;
  uint64_t all = 0;
  const read_costs costs(m);
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    p.bytes.push_back(costs.neuron[static_cast<size_t>(l)]);
    auto begin = firing_counts.begin() + l * hp.n_ff;
    if (!o.holds(l, hp.n_layer)) {  // (another stage's layer: no neuron of it)
      p.counts.emplace_back();
      continue;
    }
    p.counts.emplace_back(begin, begin + hp.n_ff);
    all = std::accumulate(begin, begin + hp.n_ff, all);
  }
  // A layer's hot rows are a buffer each of gate, up and down rows (hot_cold_ffn), charged in the
  // allocator's granules: the knapsack counts the rows' own bytes, so where the granules pass what is
  // left its budget shrinks by the excess and it is solved again.
  auto hot_bytes = [&](int64_t l, uint64_t count) {
    const auto& lw = m.weights().layers[static_cast<size_t>(l)];
    uint64_t b = 0;
    for (const tensor_view* t : {&lw.ffn_gate, &lw.ffn_up, &lw.ffn_down_t})
      if (*t) b += o.alloc.charge(t->row_bytes * count);
    return b;
  };
  for (;;) {
    plan.solution = solve_placement(p);
    uint64_t charged = 0;
    for (int64_t l = 0; l < hp.n_layer; ++l) charged += hot_bytes(l, plan.solution.hot[static_cast<size_t>(l)].size());
    if (charged <= plan.left || p.budget == 0) {
      plan.solution.bytes = charged;
      break;
    }
    p.budget -= std::min(p.budget, charged - plan.left);
  }
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    auto& pl = plan.layers[static_cast<size_t>(l)];
    pl.hot_neurons = static_cast<int64_t>(plan.solution.hot[static_cast<size_t>(l)].size());
    pl.hot_bytes = hot_bytes(l, static_cast<uint64_t>(pl.hot_neurons));
  }
  plan.left -= plan.solution.bytes;
  plan.hot_mass = all ? static_cast<double>(plan.solution.value) / static_cast<double>(all) : 0.0;
  return plan;
}

placement_plan plan_placement(const model& m, const std::vector<uint64_t>& firing_counts, double budget_gib, int64_t ctx, kv_types kv) {
  if (!(budget_gib > 0)) throw std::invalid_argument("--vram-budget must be positive");
  plan_options o;
  o.ctx = ctx, o.kv = kv;
  return plan_placement(m, firing_counts, static_cast<uint64_t>(budget_gib * double(1ull << 30)), o);
}

std::string placement_plan::table() const {
  auto mib = [](uint64_t b) { return b / double(1 << 20); };
  auto pinned = [&] { return pinned_host ? fmt::format("host memory pinned for the device's copies (outside the budget): {:.2f} MiB\n", mib(pinned_host)) : std::string(); };
  auto yes = [&](bool on, uint64_t b) { return on ? fmt::format("{:.2f}", mib(b)) : std::string("cpu"); };
  if (experts) {
    std::string t = "| layer | attention MiB | KV cache MiB | FFN norm MiB | shared expert MiB | experts held | experts MiB | device MiB |\n"
                    "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
    int64_t held = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      const auto& p = layers[l];
      held += p.expert_slots;
      t += fmt::format("| {} | {} | {} | {} | {} | {} of {} | {:.2f} | {:.2f} |\n", l, yes(p.attention, p.attention_bytes), yes(p.attention, p.kv_bytes),
                       yes(p.ffn_norm, p.ffn_norm_bytes), p.shared ? fmt::format("{:.2f}", mib(p.shared_bytes)) : std::string("-"),
                       p.expert_slots, n_expert, mib(p.expert_bytes), mib(p.bytes()));
    }
    const int64_t on = std::count_if(layers.begin(), layers.end(), [](const layer_placement& p) { return p.attention; });
    t += fmt::format("| total | {} of {} layers | {:.2f} | | {:.2f} | {} of {} | {:.2f} | {:.2f} |\n", on, layers.size(), mib(fixed.kv_cache), mib(fixed.shared),
                     held, n_expert * static_cast<int64_t>(layers.size()), mib(fixed.experts), mib(bytes()));
    t += fmt::format("experts: {}; the router on the CPU (it decides which experts go where); output head: {}; compute buffers {:.2f} MiB; {:.2f} of {:.2f} MiB used "
                     "(context {}{})\n",
                     n_cpu_moe >= 0 ? fmt::format("--n-cpu-moe {}: layers 0..{} on the CPU, the others' all on the device", n_cpu_moe, n_cpu_moe - 1)
                     : held == n_expert * static_cast<int64_t>(layers.size()) ? std::string("all on the device")
                                                                               : std::string("a cache in each layer's slots, refilled from the CPU's copy as tokens route"),
                     output ? "device" : "cpu", mib(fixed.compute), mib(bytes()), mib(budget), ctx, n_seq > 1 ? fmt::format(" x {} sequences", n_seq) : "");
    return t + pinned();
  }
  std::string t = whole_layers ? "| layer | attention MiB | KV cache MiB | FFN norm MiB | FFN MiB | device MiB |\n| --- | --- | --- | --- | --- | --- |\n"
                                : "| layer | attention MiB | KV cache MiB | predictor MiB | FFN norm MiB | hot neurons | hot rows MiB | device MiB |\n"
                                  "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& p = layers[l];
    if (whole_layers)
      t += fmt::format("| {} | {} | {} | {} | {} | {:.2f} |\n", l, yes(p.attention, p.attention_bytes), yes(p.attention, p.kv_bytes),
                       yes(p.ffn_norm, p.ffn_norm_bytes), yes(p.ffn, p.ffn_bytes), mib(p.bytes()));
    else
      t += fmt::format("| {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} |\n", l, yes(p.attention, p.attention_bytes), yes(p.attention, p.kv_bytes),
                       yes(p.predictor, p.predictor_bytes), yes(p.ffn_norm, p.ffn_norm_bytes), p.hot_neurons, mib(p.hot_bytes), mib(p.bytes()));
  }
  const auto count = [&](bool layer_placement::*on) {
    return std::count_if(layers.begin(), layers.end(), [&](const layer_placement& p) { return p.*on; });
  };
  if (whole_layers)
    t += fmt::format("| total | {} of {} layers | {:.2f} | {} norms | {:.2f} | {:.2f} |\n", count(&layer_placement::attention), layers.size(),
                     mib(fixed.kv_cache), count(&layer_placement::ffn_norm), mib(fixed.ffn), mib(bytes()));
  else
  t += fmt::format("| total | {} of {} layers | {:.2f} | {} predictors | {} norms | {} | {:.2f} | {:.2f} |\n", count(&layer_placement::attention),
                   layers.size(), mib(fixed.kv_cache), count(&layer_placement::predictor), count(&layer_placement::ffn_norm),
                   std::accumulate(layers.begin(), layers.end(), int64_t{0}, [](int64_t a, const layer_placement& p) { return a + p.hot_neurons; }),
                   mib(solution.bytes), mib(bytes()));
  t += fmt::format("output head: {}; compute buffers {:.2f} MiB{}; {:.2f} of {:.2f} MiB used (context {}{})\n{}", output ? "device" : "cpu", mib(fixed.compute),
                   fixed.step ? fmt::format(" and {:.2f} MiB of FFN-rows step buffers", mib(fixed.step)) : "", mib(bytes()), mib(budget), ctx,
                   n_seq > 1 ? fmt::format(" x {} sequences", n_seq) : "", pinned());
  return t;
}

placement_data write_placement(const placement_plan& plan, const std::string& path, int64_t n_ff, const std::string& model_path) {
  placement_data data{plan.solution.bytes, plan.solution.hot, placement_origin_of(model_path, plan.budget, static_cast<uint64_t>(plan.ctx))};
  data.origin.kv_layer_bytes = plan.kv_layer_bytes;
  write_placement_file(data, path, n_ff);
  return data;
}

}  // namespace hotcold::loader
