#pragma once
// What an expert cache on a device would have held (docs/moe.md): a mixture's recorded routings
// (FILE.json.activations of a --trace-out run, docs/traces.md) replayed through a cache of C experts a
// layer, token by token in the recorded order. Every expert a token chose that the cache did not hold
// is a miss, uploaded after it (evicting by the policy); hits are the experts computed on the device.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tools/whatif.hpp"

namespace hotcold::tools {

enum class expert_policy {
  lru,        // evict the expert used longest ago
  lfu_decay,  // evict the lowest count, every count multiplied by `decay` each token (recency and popularity)
  popular,    // no uploads: the C experts each layer chose most over the whole record, fixed (a static
              // placement that knew the workload in advance: an upper bound for one learned elsewhere)
};
std::string_view expert_policy_name(expert_policy p);

struct expert_cache_result {
  expert_policy policy = expert_policy::lru;
  int64_t capacity = 0;          // experts a layer
  int64_t tokens = 0;            // tokens replayed
  double hit_rate = 0;           // chosen experts held by the cache / all chosen
  double uploads_per_token = 0;  // experts uploaded a token, all layers
  std::vector<double> layer_hit_rate;
};

// Throws std::invalid_argument for a capacity outside [1, n_expert] or a record without routings.
// learned_from: where `popular` learns its set (null: the record replayed, an oracle's placement;
// another record: a static placement learned on other text), of the same layers and experts.
expert_cache_result replay_expert_cache(const activation_record& rec, expert_policy p, int64_t capacity, double decay = 0.9,
                                        const activation_record* learned_from = nullptr);

}  // namespace hotcold::tools
