#pragma once
// The last minutes of serve's figures, a sample a second (tokens/s, time to first token, inter-token
// latency, queue depth, sequences running, prompt cache reuse, a mixture's expert hits), kept by the
// serving loop for the dashboard's graphs (GET /api/history, docs/telemetry.md).
#include <cstdint>
#include <deque>
#include <mutex>

#include <nlohmann/json.hpp>

#include "server/metrics.hpp"
#include "server/serve_monitor.hpp"

namespace hotcold::server {

struct stats_sample {
  double t_s = 0;  // since the server started
  double tokens_per_second = 0, ttft_p50_s = 0, itl_p50_s = 0;
  int64_t queue_depth = 0, active = 0;
  double cache_reuse = -1;      // of the prompt tokens since the last sample, the share reused (-1: none came)
  double expert_hit_rate = -1;  // a mixture's routed experts a device slot held (-1: not a mixture on a device)
};

class stats_history {
 public:
  explicit stats_history(size_t capacity = 600) : capacity_(capacity) {}
  // A sample of what the loop and the metrics say now (called about once a second).
  void sample(const serve_status& status, const metrics& m);
  nlohmann::json json() const;  // the samples, oldest first: [{t_s, tokens_per_second, ...}]

 private:
  mutable std::mutex mu_;
  std::deque<stats_sample> samples_;
  size_t capacity_;
  double cached_before_ = 0, computed_before_ = 0;  // the prompt totals at the last sample
  double routed_before_ = 0, hits_before_ = 0;      // and a mixture's experts
};

nlohmann::json sample_json(const stats_sample& s);

}  // namespace hotcold::server
