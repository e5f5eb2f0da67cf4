#include "tools/expert_cache.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "engine/device_experts.hpp"

namespace hotcold::tools {

std::string_view expert_policy_name(expert_policy p) {
  switch (p) {
    case expert_policy::lru: return "lru";
    case expert_policy::lfu_decay: return "lfu-decay";
    case expert_policy::popular: return "popular";
  }
  return "?";
}

expert_cache_result replay_expert_cache(const activation_record& rec, expert_policy p, int64_t capacity, double decay, const activation_record* learned_from) {
  const int64_t n_layer = rec.n_layer, ne = rec.n_ff;
  if (rec.entries.empty()) throw std::invalid_argument(fmt::format("{}: no routings recorded", rec.source));
  if (capacity < 1 || capacity > ne) throw std::invalid_argument(fmt::format("an expert cache of {} for {} experts a layer: give 1 to {}", capacity, ne, ne));
  auto entries = rec.entries;
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return std::tie(a.step, a.layer) < std::tie(b.step, b.layer); });
  const int64_t row = (ne + 7) / 8;
  auto chosen = [&](const activation_record::entry& e, int64_t t, int64_t x) { return (e.bits[static_cast<size_t>(t * row + x / 8)] >> (x % 8)) & 1; };
  // The policy's layer caches (engine/device_experts.hpp, as the device's slots keep them); the popular
  // set is a fixed one.
  const hotcold::expert_policy engine_policy = p == expert_policy::lru ? hotcold::expert_policy::lru
                                      : p == expert_policy::lfu_decay ? hotcold::expert_policy::lfu_decay
                                                                      : hotcold::expert_policy::fixed;
  std::vector<expert_slots> caches;
  for (int64_t l = 0; l < n_layer; ++l) caches.emplace_back(ne, capacity, engine_policy, decay);
  if (p == expert_policy::popular) {  // the most chosen over the whole record (or the other one), fixed
    const activation_record& from = learned_from ? *learned_from : rec;
    if (from.n_layer != n_layer || from.n_ff != ne)
      throw std::invalid_argument(fmt::format("{} holds {} layers x {} experts, {} {} x {}", from.source, from.n_layer, from.n_ff, rec.source, n_layer, ne));
    const auto order = experts_by_popularity(from);
    for (int64_t l = 0; l < n_layer; ++l)
      for (int64_t k = 0; k < capacity; ++k) caches[static_cast<size_t>(l)].put(order[static_cast<size_t>(l)][static_cast<size_t>(k)]);
  }
  expert_cache_result r;
  r.policy = p, r.capacity = capacity;
  std::vector<int64_t> hits(static_cast<size_t>(n_layer), 0), lookups(static_cast<size_t>(n_layer), 0);
  int64_t uploads = 0;
  std::vector<int64_t> tokens_of_layer(static_cast<size_t>(n_layer), 0);
  std::vector<int32_t> used;
  for (const auto& e : entries) {
    expert_slots& c = caches[static_cast<size_t>(e.layer)];
    for (int64_t t = 0; t < e.tokens; ++t) {
      ++tokens_of_layer[static_cast<size_t>(e.layer)];
      c.next_token();
      used.clear();
      for (int32_t x = 0; x < static_cast<int32_t>(ne); ++x)
        if (chosen(e, t, x)) used.push_back(x);
      for (int32_t x : used) {
        ++lookups[static_cast<size_t>(e.layer)];
        if (c.holds(x)) ++hits[static_cast<size_t>(e.layer)];
        c.use(x);
      }
      // The misses uploaded after the token, each evicting the lowest score (never one the token used).
      for (int32_t x : used)
        if (!c.holds(x) && c.admit(x, used) != -2) ++uploads;
    }
  }
  int64_t all_hits = 0, all_lookups = 0;
  for (int64_t l = 0; l < n_layer; ++l) {
    all_hits += hits[static_cast<size_t>(l)], all_lookups += lookups[static_cast<size_t>(l)];
    r.layer_hit_rate.push_back(lookups[static_cast<size_t>(l)] > 0 ? static_cast<double>(hits[static_cast<size_t>(l)]) / static_cast<double>(lookups[static_cast<size_t>(l)]) : 0.0);
  }
  r.tokens = tokens_of_layer.empty() ? 0 : *std::max_element(tokens_of_layer.begin(), tokens_of_layer.end());
  r.hit_rate = all_lookups > 0 ? static_cast<double>(all_hits) / static_cast<double>(all_lookups) : 0.0;
  r.uploads_per_token = r.tokens > 0 ? static_cast<double>(uploads) / static_cast<double>(r.tokens) : 0.0;
  return r;
}

}  // namespace hotcold::tools
