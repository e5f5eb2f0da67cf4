#pragma once
// hotcold's metrics, in Prometheus' conventions (prometheus-cpp's registry; text exposition for
// GET /metrics): request latencies as histograms, counters of requests, tokens and refused frames,
// gauges of the queue. Thread-safe: the server's thread observes, an HTTP thread reads.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace hotcold::actors {

class metrics {
 public:
  metrics();
  // A request's end: outcome (the done's finish, or a refusal: "busy", "invalid") and its tokens.
  void request_done(std::string_view outcome, int64_t prompt_tokens, int64_t generated_tokens);
  void time_to_first_token(double seconds);
  void inter_token_latency(double seconds);
  void bad_frame();
  void set_load(int64_t active_sequences, int64_t queued);
  // The text exposition format (version 0.0.4) of everything registered.
  std::string text() const;
  // The same as JSON (GET /api/stats): counters and gauges by name (labelled ones as objects keyed by
  // the label's value), histograms as {count, sum, mean}.
  nlohmann::json snapshot() const;
  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter *prompt_tokens_, *generated_tokens_, *bad_frames_;
  prometheus::Histogram *ttft_, *itl_;
  prometheus::Gauge *active_, *queued_;
};

}  // namespace hotcold::actors
