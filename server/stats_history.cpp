#include "server/stats_history.hpp"

namespace hotcold::server {

nlohmann::json sample_json(const stats_sample& s) {
  auto or_null = [](double x) { return x < 0 ? nlohmann::json() : nlohmann::json(x); };
  return {{"t_s", s.t_s},
          {"tokens_per_second", s.tokens_per_second},
          {"ttft_p50_s", s.ttft_p50_s},
          {"itl_p50_s", s.itl_p50_s},
          {"queue_depth", s.queue_depth},
          {"active", s.active},
          {"cache_reuse", or_null(s.cache_reuse)},
          {"expert_hit_rate", or_null(s.expert_hit_rate)}};
}

void stats_history::sample(const serve_status& status, const metrics& m) {
  stats_sample s;
  s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - status.started).count();
  s.tokens_per_second = status.tokens_per_second.load();
  s.ttft_p50_s = m.recent_ttft().p50, s.itl_p50_s = m.recent_itl().p50;
  s.queue_depth = status.queued.load(), s.active = status.active.load();
  const double cached = m.prompt_cached_total(), computed = m.prompt_computed_total();
  const double new_cached = cached - cached_before_, new_computed = computed - computed_before_;
  if (new_cached + new_computed > 0) s.cache_reuse = new_cached / (new_cached + new_computed);
  cached_before_ = cached, computed_before_ = computed;
  const auto [routed, hits] = m.expert_counts();
  if (routed > routed_before_) s.expert_hit_rate = (hits - hits_before_) / (routed - routed_before_);
  routed_before_ = routed, hits_before_ = hits;
  std::lock_guard lock(mu_);
  samples_.push_back(s);
  while (samples_.size() > capacity_) samples_.pop_front();
}

nlohmann::json stats_history::json() const {
  std::lock_guard lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : samples_) out.push_back(sample_json(s));
  return out;
}

}  // namespace hotcold::server
