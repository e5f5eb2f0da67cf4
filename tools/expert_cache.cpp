#include "tools/expert_cache.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace hotcold::tools {

std::string_view expert_policy_name(expert_policy p) {
  switch (p) {
    case expert_policy::lru: return "lru";
    case expert_policy::lfu_decay: return "lfu-decay";
    case expert_policy::popular: return "popular";
  }
  return "?";
}

namespace {

// One layer's cache: which experts it holds and the policy's score of each (higher: kept longer).
struct layer_cache {
  std::vector<uint8_t> held;
  std::vector<double> score;
  int64_t size = 0;
};

}  // namespace

expert_cache_result replay_expert_cache(const activation_record& rec, expert_policy p, int64_t capacity, double decay) {
  const int64_t n_layer = rec.n_layer, ne = rec.n_ff;
  if (rec.entries.empty()) throw std::invalid_argument(fmt::format("{}: no routings recorded", rec.source));
  if (capacity < 1 || capacity > ne) throw std::invalid_argument(fmt::format("an expert cache of {} for {} experts a layer: give 1 to {}", capacity, ne, ne));
  auto entries = rec.entries;
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return std::tie(a.step, a.layer) < std::tie(b.step, b.layer); });
  const int64_t row = (ne + 7) / 8;
  auto chosen = [&](const activation_record::entry& e, int64_t t, int64_t x) { return (e.bits[static_cast<size_t>(t * row + x / 8)] >> (x % 8)) & 1; };
  std::vector<layer_cache> caches(static_cast<size_t>(n_layer), layer_cache{std::vector<uint8_t>(static_cast<size_t>(ne), 0), std::vector<double>(static_cast<size_t>(ne), 0), 0});
  if (p == expert_policy::popular) {  // the most chosen over the whole record, fixed
    std::vector<std::vector<int64_t>> count(static_cast<size_t>(n_layer), std::vector<int64_t>(static_cast<size_t>(ne), 0));
    for (const auto& e : entries)
      for (int64_t t = 0; t < e.tokens; ++t)
        for (int64_t x = 0; x < ne; ++x) count[static_cast<size_t>(e.layer)][static_cast<size_t>(x)] += chosen(e, t, x);
    for (int64_t l = 0; l < n_layer; ++l) {
      std::vector<int64_t> order(static_cast<size_t>(ne));
      std::iota(order.begin(), order.end(), 0);
      const auto& c = count[static_cast<size_t>(l)];
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return c[static_cast<size_t>(a)] > c[static_cast<size_t>(b)]; });
      for (int64_t k = 0; k < capacity; ++k) caches[static_cast<size_t>(l)].held[static_cast<size_t>(order[static_cast<size_t>(k)])] = 1;
    }
  }
  expert_cache_result r;
  r.policy = p, r.capacity = capacity;
  std::vector<int64_t> hits(static_cast<size_t>(n_layer), 0), lookups(static_cast<size_t>(n_layer), 0);
  int64_t uploads = 0, clock = 0;
  std::vector<int64_t> tokens_of_layer(static_cast<size_t>(n_layer), 0);
  for (const auto& e : entries) {
    layer_cache& c = caches[static_cast<size_t>(e.layer)];
    for (int64_t t = 0; t < e.tokens; ++t) {
      ++clock, ++tokens_of_layer[static_cast<size_t>(e.layer)];
      if (p == expert_policy::lfu_decay)
        for (double& s : c.score) s *= decay;
      std::vector<int64_t> missed;
      for (int64_t x = 0; x < ne; ++x) {
        if (!chosen(e, t, x)) continue;
        ++lookups[static_cast<size_t>(e.layer)];
        if (c.held[static_cast<size_t>(x)]) ++hits[static_cast<size_t>(e.layer)];
        else missed.push_back(x);
        // The policy's score: the last use (LRU), a decayed count (LFU with decay).
        c.score[static_cast<size_t>(x)] = p == expert_policy::lru ? static_cast<double>(clock) : c.score[static_cast<size_t>(x)] + 1.0;
      }
      if (p == expert_policy::popular) continue;
      for (int64_t x : missed) {  // uploaded after the token, each evicting the lowest score unless there is room
        if (c.size == capacity) {
          int64_t victim = -1;
          for (int64_t y = 0; y < ne; ++y)
            if (c.held[static_cast<size_t>(y)] && (victim < 0 || c.score[static_cast<size_t>(y)] < c.score[static_cast<size_t>(victim)]) &&
                !(chosen(e, t, y)))
              victim = y;
          if (victim < 0) continue;  // every held expert is in use by this token: no room
          c.held[static_cast<size_t>(victim)] = 0, --c.size;
        }
        c.held[static_cast<size_t>(x)] = 1, ++c.size, ++uploads;
      }
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
