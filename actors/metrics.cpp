#include "actors/metrics.hpp"

#include <sstream>

#include <prometheus/text_serializer.h>

namespace hotcold::actors {

namespace {
// Seconds: from a fraction of a millisecond (a token on a small model) to a minute (a long prompt).
prometheus::Histogram::BucketBoundaries latency_buckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}
}  // namespace

metrics::metrics() : registry_(std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  requests_ = &BuildCounter().Name("hotcold_requests_total").Help("Generate requests that ended, by outcome").Register(*registry_);
  prompt_tokens_ = &BuildCounter().Name("hotcold_prompt_tokens_total").Help("Prompt tokens of the requests that ended").Register(*registry_).Add({});
  generated_tokens_ = &BuildCounter().Name("hotcold_generated_tokens_total").Help("Tokens generated").Register(*registry_).Add({});
  bad_frames_ = &BuildCounter().Name("hotcold_bad_frames_total").Help("Client frames refused as malformed").Register(*registry_).Add({});
  ttft_ = &BuildHistogram()
               .Name("hotcold_time_to_first_token_seconds")
               .Help("From a generate's arrival to its first token")
               .Register(*registry_)
               .Add({}, latency_buckets());
  itl_ = &BuildHistogram()
              .Name("hotcold_inter_token_latency_seconds")
              .Help("Between consecutive tokens of a request")
              .Register(*registry_)
              .Add({}, latency_buckets());
  active_ = &BuildGauge().Name("hotcold_active_sequences").Help("Sequences holding a KV slot").Register(*registry_).Add({});
  queued_ = &BuildGauge().Name("hotcold_queue_depth").Help("Requests waiting for a KV slot").Register(*registry_).Add({});
}

void metrics::request_done(std::string_view outcome, int64_t prompt_tokens, int64_t generated_tokens) {
  requests_->Add({{"outcome", std::string(outcome)}}).Increment();
  prompt_tokens_->Increment(static_cast<double>(prompt_tokens));
  generated_tokens_->Increment(static_cast<double>(generated_tokens));
}

void metrics::time_to_first_token(double seconds) { ttft_->Observe(seconds); }
void metrics::inter_token_latency(double seconds) { itl_->Observe(seconds); }
void metrics::bad_frame() { bad_frames_->Increment(); }

void metrics::set_load(int64_t active_sequences, int64_t queued) {
  active_->Set(static_cast<double>(active_sequences));
  queued_->Set(static_cast<double>(queued));
}

nlohmann::json metrics::snapshot() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& family : registry_->Collect()) {
    std::string name = family.name;
    if (name.rfind("hotcold_", 0) == 0) name = name.substr(8);
    for (const auto& m : family.metric) {
      if (family.type == prometheus::MetricType::Histogram) {
        const auto& h = m.histogram;
        out[name] = {{"count", h.sample_count}, {"sum", h.sample_sum}, {"mean", h.sample_count ? h.sample_sum / static_cast<double>(h.sample_count) : 0.0}};
        continue;
      }
      const double v = family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
      if (m.label.empty()) out[name] = v;
      else out[name][m.label.front().value] = v;
    }
  }
  return out;
}

std::string metrics::text() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace hotcold::actors
