#pragma once
// hotcold's metrics, in Prometheus' conventions (prometheus-cpp's registry; text exposition for
// GET /metrics): request latencies as histograms, counters of requests, tokens and refused frames,
// gauges of the queue. Thread-safe: the server's thread observes, an HTTP thread reads.
#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "actors/live_stats.hpp"
#include "engine/ram_tier.hpp"

namespace hotcold::server {

class metrics {
 public:
  metrics();
  // A request's end: outcome (the done's finish, or a refusal: "busy", "invalid") and its tokens; of
  // the prompt's, those reused from the cache and those computed (fewer than the rest when it ended
  // before its prompt was through).
  void request_done(std::string_view outcome, int64_t prompt_tokens, int64_t generated_tokens, int64_t cached_tokens = 0, int64_t computed_tokens = 0);
  void time_to_first_token(double seconds);
  void inter_token_latency(double seconds);
  void bad_frame();
  // A client cut off for not reading its replies (its queued bytes passed the server's bound).
  void client_cut_off();
  // Bytes of replies ZeroMQ holds, not yet written to the clients' connections (all clients).
  void set_reply_bytes_queued(int64_t bytes);
  // Percentiles (nearest rank) of the latencies observed over the last minute (at most 10000 each).
  struct percentiles {
    double p50 = 0, p95 = 0, p99 = 0;
    int64_t count = 0;
  };
  double prompt_cached_total() const;    // prompt tokens reused, and computed, since the start
  double prompt_computed_total() const;
  // A mixture's routed experts and those a device slot held, since the start (0, 0: none, or no mixture).
  std::pair<double, double> expert_counts() const;
  percentiles recent_ttft() const;
  percentiles recent_itl() const;
  static constexpr std::chrono::seconds recent_window{60};
  void set_load(int64_t active_sequences, int64_t queued);
  // Requests waiting for a slot, by client (those not named have none); called by one thread.
  void set_client_queues(const std::map<std::string, int64_t>& depths);
  // A record serve --record could not write.
  void record_write_error();
  // The pipeline's live measurements, exported with the rest from now on, and the memory read
  // bandwidth measured on this machine (bytes/s; 0: not measured) that bytes read are compared with.
  void attach(std::shared_ptr<const actors::live_stats> stats, double bandwidth_ceiling);
  // The disk tier's counts (--ram-budget; engine/ram_tier), exported from now on: bytes and reads from
  // the file, chosen neurons looked up and found in memory, what the read-ahead brought and missed,
  // the time waited, the bytes held (docs/disk.md).
  void attach_disk(std::shared_ptr<const ram_tier> tier) { disk_ = std::move(tier); }
  // Where each layer's parts run (a row a layer, the head's last; a column a step_part of the first
  // six: true on the hot device), so that each part's seconds are labelled with where they ran (none
  // set: the hot FFN on the hot device, the rest on the CPU). Called before serving starts.
  void set_places(std::vector<std::array<bool, 6>> on_device) { places_ = std::move(on_device); }
  // The KV slots as the pipeline last set them (none before attach).
  std::vector<actors::live_stats::slot_view> slots() const { return live_ ? live_->slots() : std::vector<actors::live_stats::slot_view>{}; }
  // The text exposition format (version 0.0.4) of everything registered.
  std::string text() const;
  // The same as JSON (GET /api/stats): counters and gauges by name (labelled ones as objects keyed by
  // the label's value), histograms as {count, sum, mean}; the pipeline's measurements under
  // "pipeline" (per-layer arrays, totals, ratios: docs/telemetry.md).
  nlohmann::json snapshot() const;
  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<const ram_tier> disk_;
  std::vector<std::array<bool, 6>> places_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter *prompt_tokens_, *generated_tokens_, *bad_frames_, *cut_off_;
  prometheus::Counter *prompt_cached_, *prompt_computed_;
  prometheus::Histogram *ttft_, *itl_;
  prometheus::Gauge *active_, *queued_, *reply_bytes_;
  prometheus::Family<prometheus::Gauge>* client_queued_;
  std::map<std::string, prometheus::Gauge*> client_gauges_;
  prometheus::Counter* record_errors_;
  struct recent_samples {
    std::deque<std::pair<std::chrono::steady_clock::time_point, double>> values;
    void add(double v);
    percentiles get() const;
  };
  mutable std::mutex recent_mu_;
  recent_samples ttft_recent_, itl_recent_;
  std::shared_ptr<const actors::live_stats> live_;
  double ceiling_ = 0;
  std::vector<prometheus::MetricFamily> live_families(const actors::live_stats::view& v) const;
  nlohmann::json live_json(const actors::live_stats::view& v) const;
};

}  // namespace hotcold::server
