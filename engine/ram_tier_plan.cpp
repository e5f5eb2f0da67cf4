// The disk tier's plan for a budget (engine/ram_tier.hpp): what is held whole, each layer's pinned
// units, the window; and the line that says it.
#include <algorithm>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/ram_tier.hpp"

namespace hotcold {

std::vector<tensor_view> tier_tensors(const model& m, int64_t il) {
  if (!m.holds_layer(il)) return {};
  return tier_units(m.weights().layers[static_cast<size_t>(il)], m.hp().n_expert);
}

uint64_t tier_unit_bytes(const model& m, int64_t il) {
  uint64_t b = 0;
  for (const tensor_view& t : tier_tensors(m, il)) b += t.row_bytes;
  return b;
}

int64_t tier_units_per_layer(const model& m) { return m.hp().moe() ? m.hp().n_expert : m.hp().n_ff; }

namespace {
// What the budget holds, without a device.
ram_tier_plan plan_for_budget(const model& m, uint64_t budget) {
  const auto& hp = m.hp();
  ram_tier_plan p;
  uint64_t per_neuron = 0;  // one neuron of every layer
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    for (const tensor_view& t : tier_tensors(m, il)) p.row_bytes += t.bytes();
    p.neuron_bytes.push_back(tier_unit_bytes(m, il));
    per_neuron += p.neuron_bytes.back();
  }
  if (p.row_bytes == 0)
    throw std::invalid_argument(fmt::format("--ram-budget: {} has no FFN rows read by neuron (a sparse file's: `hotcold prepare`) or by expert", m.path()));
  const int64_t units = tier_units_per_layer(m);
  p.experts = hp.moe();
  p.fixed_bytes = m.held_weight_bytes() > p.row_bytes ? m.held_weight_bytes() - p.row_bytes : 0;
  if (m.embeddings_from_disk()) {  // (rows of the tokens a conversation uses: a quarter of the table, a thousand at most)
    const tensor_view& e = m.weights().token_embd;
    p.fixed_bytes -= std::min(p.fixed_bytes, e.bytes());
    const bool whole = budget >= p.fixed_bytes + e.bytes() + p.row_bytes;  // (everything fits: the table read at the start)
    const int64_t least_rows = std::clamp<int64_t>(e.ne1 / 4, 1, 1024);
    p.least_bytes = p.fixed_bytes + static_cast<uint64_t>(least_rows) * e.row_bytes;
    p.token_rows = whole ? e.ne1 : least_rows;
    p.fixed_bytes += static_cast<uint64_t>(p.token_rows) * e.row_bytes;
  } else {
    p.least_bytes = p.fixed_bytes;
  }
  if (budget < p.fixed_bytes)
    throw std::invalid_argument(fmt::format("--ram-budget {:.3f} GiB is below what {} holds besides its FFN rows: {:.3f} GiB (attention, embeddings, head, "
                                            "predictors, norms)",
                                            budget / double(1ull << 30), m.path(), p.fixed_bytes / double(1ull << 30)));
  const uint64_t left = std::min(budget - p.fixed_bytes, p.row_bytes);
  if (left == p.row_bytes) {
    p.pinned_rows.assign(static_cast<size_t>(hp.n_layer), units);
    return p;
  }
  const uint64_t layer_neuron = *std::max_element(p.neuron_bytes.begin(), p.neuron_bytes.end());  // (a window slot: the widest layer's neuron)
  if (p.experts) {
    // A mixture: no profile says which experts are hot, so nothing is pinned; every expert slot is the
    // window's (the least recently used out first), which holds what consecutive tokens share.
    p.window_rows = std::min<int64_t>(units * hp.n_layer, static_cast<int64_t>(left / std::max<uint64_t>(layer_neuron, 1)));
    p.window_bytes = static_cast<uint64_t>(p.window_rows) * layer_neuron;
    p.pinned_rows.assign(static_cast<size_t>(hp.n_layer), 0);
    return p;
  }
  p.window_rows = std::min<int64_t>(units / 4, static_cast<int64_t>(left / 2 / std::max<uint64_t>(layer_neuron, 1)));
  p.window_bytes = static_cast<uint64_t>(p.window_rows) * layer_neuron;
  const int64_t rows = std::min<int64_t>(units - p.window_rows, static_cast<int64_t>((left - p.window_bytes) / std::max<uint64_t>(per_neuron, 1)));
  p.pinned_rows.assign(static_cast<size_t>(hp.n_layer), rows);
  return p;
}
}  // namespace

ram_tier_plan plan_ram_tier(const model& m, uint64_t budget, std::span<const int64_t> device_rows) {
  const auto& hp = m.hp();
  ram_tier_plan p = plan_for_budget(m, budget);
  if (device_rows.empty() || p.experts) return p;
  if (static_cast<int64_t>(device_rows.size()) != hp.n_layer)
    throw std::invalid_argument(fmt::format("a hot device's rows for {} layers in a model of {}", device_rows.size(), hp.n_layer));
  p.device_rows.assign(device_rows.begin(), device_rows.end());
  for (size_t l = 0; l < p.pinned_rows.size(); ++l) {
    p.device_rows[l] = std::clamp<int64_t>(p.device_rows[l], 0, hp.n_ff);
    p.pinned_rows[l] = std::min(p.pinned_rows[l], hp.n_ff - p.device_rows[l]);
  }
  return p;
}

std::string describe(const ram_tier_plan& p, uint64_t budget, const std::string& path) {
  constexpr double gib = double(1ull << 30);
  const int64_t pinned = p.pinned_rows.empty() ? 0 : p.pinned_rows[0];
  if (p.experts && pinned == 0)  // (a mixture whose experts do not all fit: no pinned ones, a cache)
    return fmt::format("--ram-budget {:.3f} GiB: {:.3f} GiB held whole and a cache of {} recently used experts ({:.3f} GiB) for all the layers; the "
                       "experts ({:.3f} GiB) read from {} as tokens choose them",
                       budget / gib, p.fixed_bytes / gib, p.window_rows, p.window_bytes / gib, p.row_bytes / gib, path);
  const int64_t device = p.device_rows.empty() ? 0 : p.device_rows[0];
  return fmt::format("--ram-budget {:.3f} GiB: {:.3f} GiB held whole, each layer's {} {}{} and a window of {:.3f} GiB; the other {} ({:.3f} GiB) read "
                     "from {} as tokens choose them",
                     budget / gib, p.fixed_bytes / gib, pinned, p.experts ? "experts" : "hottest neurons",
                     device > 0 ? fmt::format(" past the device's {} (layer 0's)", device) : "", p.window_bytes / gib, p.experts ? "experts" : "FFN rows",
                     p.row_bytes / gib, path);
}

}  // namespace hotcold
