#include "server/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>

#include <prometheus/text_serializer.h>

namespace hotcold::server {

using actors::actor_id;
using actors::live_stats;
using actors::actor_name;
using actors::n_timed_stages;
using actors::n_actors;

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
  prompt_cached_ = &BuildCounter()
                        .Name("hotcold_prompt_tokens_cached_total")
                        .Help("Prompt tokens of the requests that ended whose keys and values were reused from the cache (cache_prompt)")
                        .Register(*registry_)
                        .Add({});
  prompt_computed_ = &BuildCounter()
                          .Name("hotcold_prompt_tokens_computed_total")
                          .Help("Prompt tokens of the requests that ended that were computed (not reused)")
                          .Register(*registry_)
                          .Add({});
  generated_tokens_ = &BuildCounter().Name("hotcold_generated_tokens_total").Help("Tokens generated").Register(*registry_).Add({});
  bad_frames_ = &BuildCounter().Name("hotcold_bad_frames_total").Help("Client frames refused as malformed").Register(*registry_).Add({});
  cut_off_ = &BuildCounter()
                  .Name("hotcold_clients_cut_off_total")
                  .Help("Clients cut off for leaving too many reply bytes unread (their requests cancelled)")
                  .Register(*registry_)
                  .Add({});
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
  client_queued_ = &BuildGauge()
                        .Name("hotcold_client_queue_depth")
                        .Help("Requests waiting for a KV slot, by client (zmq:PEER, curve:KEY, key:DIGEST of an HTTP key, http:ADDRESS); clients with none are left out")
                        .Register(*registry_);
  record_errors_ = &BuildCounter()
                        .Name("hotcold_record_write_errors_total")
                        .Help("Records serve --record could not write (a full disk, a file-size limit): lost")
                        .Register(*registry_)
                        .Add({});
  reply_bytes_ = &BuildGauge()
                      .Name("hotcold_reply_bytes_queued")
                      .Help("Bytes of replies waiting to be written to the clients' connections")
                      .Register(*registry_)
                      .Add({});
}

void metrics::request_done(std::string_view outcome, int64_t prompt_tokens, int64_t generated_tokens, int64_t cached_tokens, int64_t computed_tokens) {
  requests_->Add({{"outcome", std::string(outcome)}}).Increment();
  prompt_tokens_->Increment(static_cast<double>(prompt_tokens));
  prompt_cached_->Increment(static_cast<double>(cached_tokens));
  prompt_computed_->Increment(static_cast<double>(computed_tokens));
  generated_tokens_->Increment(static_cast<double>(generated_tokens));
}

void metrics::time_to_first_token(double seconds) {
  ttft_->Observe(seconds);
  std::lock_guard lock(recent_mu_);
  ttft_recent_.add(seconds);
}
void metrics::inter_token_latency(double seconds) {
  itl_->Observe(seconds);
  std::lock_guard lock(recent_mu_);
  itl_recent_.add(seconds);
}

void metrics::recent_samples::add(double v) {
  const auto now = std::chrono::steady_clock::now();
  values.emplace_back(now, v);
  while (values.size() > 10000 || now - values.front().first > recent_window) values.pop_front();
}

metrics::percentiles metrics::recent_samples::get() const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<double> v;
  for (const auto& [t, x] : values)
    if (now - t <= recent_window) v.push_back(x);
  percentiles p;
  p.count = static_cast<int64_t>(v.size());
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  auto rank = [&](double q) { return v[static_cast<size_t>(std::clamp(std::ceil(q * static_cast<double>(v.size())) - 1, 0.0, static_cast<double>(v.size() - 1)))]; };
  p.p50 = rank(0.50), p.p95 = rank(0.95), p.p99 = rank(0.99);
  return p;
}

metrics::percentiles metrics::recent_ttft() const {
  std::lock_guard lock(recent_mu_);
  return ttft_recent_.get();
}
metrics::percentiles metrics::recent_itl() const {
  std::lock_guard lock(recent_mu_);
  return itl_recent_.get();
}
void metrics::bad_frame() { bad_frames_->Increment(); }
void metrics::client_cut_off() { cut_off_->Increment(); }
void metrics::set_reply_bytes_queued(int64_t bytes) { reply_bytes_->Set(static_cast<double>(bytes)); }

void metrics::record_write_error() { record_errors_->Increment(); }

void metrics::set_client_queues(const std::map<std::string, int64_t>& depths) {
  for (auto it = client_gauges_.begin(); it != client_gauges_.end();) {
    if (depths.count(it->first)) {
      ++it;
      continue;
    }
    client_queued_->Remove(it->second);
    it = client_gauges_.erase(it);
  }
  for (const auto& [client, n] : depths) {
    auto& g = client_gauges_[client];
    if (!g) g = &client_queued_->Add({{"client", client}});
    g->Set(static_cast<double>(n));
  }
}

void metrics::set_load(int64_t active_sequences, int64_t queued) {
  active_->Set(static_cast<double>(active_sequences));
  queued_->Set(static_cast<double>(queued));
}

double metrics::prompt_cached_total() const { return prompt_cached_->Value(); }
double metrics::prompt_computed_total() const { return prompt_computed_->Value(); }

std::pair<double, double> metrics::expert_counts() const {
  if (!live_ || live_->n_expert() == 0) return {0, 0};
  double routed = 0, hits = 0;
  for (const auto& l : live_->read().layers) routed += static_cast<double>(l.experts_routed), hits += static_cast<double>(l.expert_hits);
  return {routed, hits};
}

void metrics::attach(std::shared_ptr<const live_stats> stats, double bandwidth_ceiling) {
  live_ = std::move(stats);
  ceiling_ = bandwidth_ceiling;
}

namespace {

double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

struct totals {
  double candidates = 0, computed = 0, hot = 0, truly = 0, found = 0;
  double experts_routed = 0, expert_hits = 0, expert_uploads = 0, experts_chosen = 0, experts_guessed = 0;  // a mixture of experts
  std::map<std::string, double> device_s;
};

// Where layer l's part st ran: the hot device where the places say so (or for the hot FFN), else the CPU.
std::string device_of(const live_stats& s, const std::vector<std::array<bool, 6>>& places, size_t l, step_part st) {
  const auto k = static_cast<size_t>(st);
  const bool on = st == step_part::hot_ffn || (l < places.size() && k < 6 && places[l][k]);
  return on && !s.hot_device().empty() ? s.hot_device() : "cpu";
}

totals sum_layers(const live_stats& s, const live_stats::view& v, const std::vector<std::array<bool, 6>>& places) {
  totals t;
  for (size_t li = 0; li < v.layers.size(); ++li) {
    const auto& l = v.layers[li];
    t.candidates += static_cast<double>(l.candidates), t.computed += static_cast<double>(l.computed), t.hot += static_cast<double>(l.hot);
    t.truly += static_cast<double>(l.truly_active), t.found += static_cast<double>(l.found);
    t.experts_routed += static_cast<double>(l.experts_routed), t.expert_hits += static_cast<double>(l.expert_hits);
    t.expert_uploads += static_cast<double>(l.expert_uploads);
    t.experts_chosen += static_cast<double>(l.experts_chosen), t.experts_guessed += static_cast<double>(l.experts_guessed);
    for (int k = 0; k < n_timed_stages; ++k) {
      const auto st = static_cast<step_part>(k);
      t.device_s[device_of(s, places, li, st)] += l.seconds[static_cast<size_t>(k)];
    }
  }
  if (s.hot_device().empty()) t.device_s.erase("");
  return t;
}

std::string layer_label(const live_stats& s, size_t l) { return static_cast<int64_t>(l) == s.n_layer() ? "output" : std::to_string(l); }

// A stage's labels: its number (from 1), the worker's address and its layers, from where()'s
// "tcp://HOST:PORT (layers A-B)".
std::vector<prometheus::ClientMetric::Label> stage_labels(size_t k, const std::string& where) {
  const auto cut = where.find(" (layers ");
  std::string worker = where.substr(0, cut), layers;
  if (cut != std::string::npos) layers = where.substr(cut + 9, where.size() - cut - 10);
  return {{"stage", std::to_string(k + 1)}, {"worker", worker}, {"layers", layers}};
}

}  // namespace

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// The families of one exposition, as they are added.
struct family_list {
  std::vector<MetricFamily> out;
  family_list() { out.reserve(64); }  // family() hands out references into it (fewer than 40 families)
  MetricFamily& family(std::string name, std::string help, MetricType type) {
    out.push_back(MetricFamily{std::move(name), std::move(help), type, {}});
    return out.back();
  }
  static void add(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter) m.counter.value = value;
    else m.gauge.value = value;
    f.metric.push_back(std::move(m));
  }
  // A counter of each layer's `field`.
  template <class Field>
  void per_layer(const live_stats& s, const live_stats::view& v, std::string name, std::string help, Field field) {
    auto& f = family(std::move(name), std::move(help), MetricType::Counter);
    for (int64_t l = 0; l < s.n_layer(); ++l) add(f, static_cast<double>(field(v.layers[static_cast<size_t>(l)])), {{"layer", std::to_string(l)}});
  }
};

// A mixture of experts: each layer's expert histogram, the expert guess and the device slots.
void expert_families(family_list& fl, const live_stats& s, const live_stats::view& v, const totals& t) {
  auto& choices = fl.family("hotcold_expert_choices_total", "Times each expert of each layer was chosen by its router", MetricType::Counter);
  for (int64_t l = 0; l < s.n_layer(); ++l)
    for (size_t e = 0; e < v.layers[static_cast<size_t>(l)].experts.size(); ++e)
      fl.add(choices, static_cast<double>(v.layers[static_cast<size_t>(l)].experts[e]), {{"layer", std::to_string(l)}, {"expert", std::to_string(e)}});
  fl.per_layer(s, v, "hotcold_expert_guess_chosen_total", "Experts chosen in layers after the first (what the guess from the layer before is held to)",
               [](const auto& l) { return l.experts_chosen; });
  fl.per_layer(s, v, "hotcold_expert_guess_found_total", "Of those, the experts the next layer's router on the layer before's output had guessed",
               [](const auto& l) { return l.experts_guessed; });
  fl.per_layer(s, v, "hotcold_expert_routed_total", "Experts the router chose (each token's, each layer's)", [](const auto& l) { return l.experts_routed; });
  fl.per_layer(s, v, "hotcold_expert_device_hits_total", "Of those, the experts a slot of the hot device held (computed there)", [](const auto& l) { return l.expert_hits; });
  fl.per_layer(s, v, "hotcold_expert_uploads_total", "Experts uploaded into the hot device's slots (after a miss, or a layer early from the guess)",
               [](const auto& l) { return l.expert_uploads; });
  fl.add(fl.family("hotcold_expert_hit_ratio", "Routed experts a slot of the hot device held / all routed experts", MetricType::Gauge),
         ratio(t.expert_hits, t.experts_routed));
}

// Stages of layers on other hosts (docs/distributed.md).
void stage_families(family_list& fl, const live_stats::view& v) {
  auto& up = fl.family("hotcold_stage_up", "1 while a stage's worker answers (heartbeats), 0 while it is gone or silent", MetricType::Gauge);
  auto& busy_stage = fl.family("hotcold_stage_busy_ratio", "Share of the last 5 s a stage's worker spent computing its layers", MetricType::Gauge);
  auto& compute_stage = fl.family("hotcold_stage_compute_seconds_total", "Seconds a stage's worker computed its layers (as the worker measured)", MetricType::Counter);
  auto& hops = fl.family("hotcold_stage_hop_seconds",
                         "A step's round trip to a stage less the worker's compute: both ways over the link, the messages' encoding included",
                         MetricType::Histogram);
  auto& bytes_stage = fl.family("hotcold_stage_bytes_total", "Payload bytes to and from a stage (residual streams, slots, positions)", MetricType::Counter);
  auto& per_token = fl.family("hotcold_stage_bytes_per_token", "Payload bytes both ways a token of a step costs a stage's link", MetricType::Gauge);
  auto& heartbeat = fl.family("hotcold_stage_heartbeat_seconds", "The last heartbeat's round trip to a stage (a few bytes each way: the link's own cost)",
                              MetricType::Gauge);
  for (size_t k = 0; k < v.stages.size(); ++k) {
    const auto& st = v.stages[k];
    const auto labels = stage_labels(k, st.where);
    fl.add(up, st.up ? 1.0 : 0.0, labels);
    fl.add(busy_stage, st.recent_busy_fraction, labels);
    fl.add(compute_stage, st.compute_s, labels);
    ClientMetric h;
    h.label = labels;
    h.histogram.sample_count = static_cast<uint64_t>(st.steps);
    h.histogram.sample_sum = st.hop_s;
    uint64_t seen = 0;
    for (size_t b = 0; b < st.hops.size(); ++b) {
      seen += static_cast<uint64_t>(st.hops[b]);
      h.histogram.bucket.push_back({seen, b < live_stats::hop_bounds.size() ? live_stats::hop_bounds[b] : std::numeric_limits<double>::infinity()});
    }
    hops.metric.push_back(std::move(h));
    auto sent = labels, received = labels;
    sent.push_back({"direction", "sent"}), received.push_back({"direction", "received"});
    fl.add(bytes_stage, static_cast<double>(st.sent), sent);
    fl.add(bytes_stage, static_cast<double>(st.received), received);
    fl.add(per_token, ratio(static_cast<double>(st.sent + st.received), static_cast<double>(st.tokens)), labels);
    fl.add(heartbeat, st.last_heartbeat_s, labels);
  }
}

}  // namespace

std::vector<prometheus::MetricFamily> metrics::live_families(const live_stats::view& v) const {
  const live_stats& s = *live_;
  family_list fl;
  auto family = [&](std::string name, std::string help, MetricType type) -> MetricFamily& { return fl.family(std::move(name), std::move(help), type); };
  auto add = [](MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) { family_list::add(f, value, std::move(labels)); };
  const totals t = sum_layers(s, v, places_);

  auto& compute = family("hotcold_compute_seconds_total", "Compute time by layer (\"output\": the head), stage and device", MetricType::Counter);
  for (size_t l = 0; l < v.layers.size(); ++l)
    for (int k = 0; k < n_timed_stages; ++k) {
      const double sec = v.layers[l].seconds[static_cast<size_t>(k)];
      const auto st = static_cast<step_part>(k);
      if (sec <= 0 && st != step_part::attention) continue;
      if (sec <= 0 && static_cast<int64_t>(l) == s.n_layer()) continue;
      add(compute, sec, {{"layer", layer_label(s, l)}, {"stage", std::string(step_part_name(st))}, {"device", device_of(s, places_, l, st)}});
    }
  auto& busy = family("hotcold_device_busy_seconds_total", "Compute time by device (the hot device's share of the FFN; the CPU's everything else)", MetricType::Counter);
  for (const auto& [d, sec] : t.device_s) add(busy, sec, {{"device", d}});

  fl.per_layer(s, v, "hotcold_ffn_candidate_neurons_total", "(token, neuron) pairs of the sparse FFN layers: tokens x n_ff", [](const auto& l) { return l.candidates; });
  fl.per_layer(s, v, "hotcold_ffn_computed_neurons_total", "(token, neuron) pairs the predictors chose and the FFN computed", [](const auto& l) { return l.computed; });
  fl.per_layer(s, v, "hotcold_ffn_hot_neurons_total", "Chosen (token, neuron) pairs whose rows were on the hot device", [](const auto& l) { return l.hot; });
  fl.per_layer(s, v, "hotcold_predictor_checked_firing_neurons_total", "Neurons that fired in the sampled dense checks of the predictors",
               [](const auto& l) { return l.truly_active; });
  fl.per_layer(s, v, "hotcold_predictor_checked_found_neurons_total", "Of those, the neurons the predictor had chosen", [](const auto& l) { return l.found; });

  add(family("hotcold_predictor_recall_ratio", "Firing neurons the predictors chose / all firing neurons (sampled dense checks)", MetricType::Gauge),
      ratio(t.found, t.truly));
  if (s.n_expert() > 0) expert_families(fl, s, v, t);
  add(family("hotcold_ffn_active_ratio", "Chosen neurons / all neurons of the sparse FFN layers", MetricType::Gauge), ratio(t.computed, t.candidates));
  add(family("hotcold_hot_hit_ratio", "Chosen neurons found on the hot device / all chosen neurons", MetricType::Gauge), ratio(t.hot, t.computed));

  add(family("hotcold_steps_total", "Pipeline steps (each runs every sequence in flight through the model once)", MetricType::Counter),
      static_cast<double>(v.steps));
  add(family("hotcold_step_tokens_total", "Tokens the steps ran (prompt and generated)", MetricType::Counter), static_cast<double>(v.tokens));
  auto& bytes = family("hotcold_weight_read_bytes_total", "Bytes of weights the steps read, by memory (host: the CPU's, device: the hot device's)",
                       MetricType::Counter);
  add(bytes, static_cast<double>(v.host_bytes), {{"memory", "host"}});
  add(bytes, static_cast<double>(v.device_bytes), {{"memory", "device"}});
  add(family("hotcold_read_bytes_per_token", "Bytes of weights read per token over the last 5 s", MetricType::Gauge), v.recent_bytes_per_token);
  add(family("hotcold_memory_read_bytes_per_second", "Host bytes read per second of compute over the last 5 s", MetricType::Gauge),
      v.recent_host_bytes_per_second);
  add(family("hotcold_memory_bandwidth_ceiling_bytes_per_second", "Read bandwidth measured on this machine at start", MetricType::Gauge), ceiling_);
  add(family("hotcold_memory_bandwidth_utilization_ratio", "Host read bandwidth reached / the measured ceiling, over the last 5 s", MetricType::Gauge),
      ratio(v.recent_host_bytes_per_second, ceiling_));
  add(family("hotcold_pipeline_busy_ratio", "Share of the last 5 s with a step in flight", MetricType::Gauge), v.recent_busy_fraction);
  if (!v.stages.empty()) stage_families(fl, v);

  add(family("hotcold_prefix_store_blocks", "Blocks of prompts' keys and values the prefix store holds (--cache-ram)", MetricType::Gauge),
      static_cast<double>(v.prefix_blocks));
  add(family("hotcold_prefix_store_capacity_blocks", "Blocks the prefix store can hold", MetricType::Gauge), static_cast<double>(v.prefix_capacity));
  add(family("hotcold_prefix_store_bytes", "Bytes of the blocks the prefix store holds", MetricType::Gauge),
      static_cast<double>(v.prefix_blocks) * static_cast<double>(v.prefix_block_bytes));
  add(family("hotcold_prefix_store_evictions_total", "Blocks evicted from the prefix store, least recently used first", MetricType::Counter),
      static_cast<double>(v.prefix_evictions));
  auto& depth = family("hotcold_actor_mailbox_depth", "Messages waiting in an actor's mailbox when it last took one", MetricType::Gauge);
  auto& depth_max = family("hotcold_actor_mailbox_depth_max", "The most messages seen waiting in an actor's mailbox", MetricType::Gauge);
  for (int a = 0; a < n_actors; ++a) {
    const std::string name(actor_name(static_cast<actor_id>(a)));
    add(depth, static_cast<double>(v.mailbox[static_cast<size_t>(a)]), {{"actor", name}});
    add(depth_max, static_cast<double>(v.mailbox_max[static_cast<size_t>(a)]), {{"actor", name}});
  }
  return std::move(fl.out);
}

nlohmann::json metrics::live_json(const live_stats::view& v) const {
  const live_stats& s = *live_;
  const totals t = sum_layers(s, v, places_);
  nlohmann::json layers = nlohmann::json::array();
  for (int64_t l = 0; l < s.n_layer(); ++l) {
    const auto& L = v.layers[static_cast<size_t>(l)];
    nlohmann::json j{{"layer", l}};
    for (int k = 0; k < n_timed_stages; ++k) j[std::string(step_part_name(static_cast<step_part>(k))) + "_s"] = L.seconds[static_cast<size_t>(k)];
    j["active_ratio"] = ratio(static_cast<double>(L.computed), static_cast<double>(L.candidates));
    j["hot_hit_ratio"] = ratio(static_cast<double>(L.hot), static_cast<double>(L.computed));
    j["recall"] = ratio(static_cast<double>(L.found), static_cast<double>(L.truly_active));
    j["recall_checked"] = L.truly_active;
    if (!L.experts.empty()) {  // a mixture of experts
      j["experts"] = L.experts;
      j["expert_guess_recall"] = ratio(static_cast<double>(L.experts_guessed), static_cast<double>(L.experts_chosen));
      j["expert_hit_rate"] = ratio(static_cast<double>(L.expert_hits), static_cast<double>(L.experts_routed));
      j["expert_uploads"] = L.expert_uploads;
    }
    layers.push_back(std::move(j));
  }
  nlohmann::json mailbox = nlohmann::json::object(), mailbox_max = nlohmann::json::object();
  for (int a = 0; a < n_actors; ++a) {
    const std::string name(actor_name(static_cast<actor_id>(a)));
    mailbox[name] = v.mailbox[static_cast<size_t>(a)];
    mailbox_max[name] = v.mailbox_max[static_cast<size_t>(a)];
  }
  nlohmann::json out = {{"hot_device", s.hot_device()},
          {"layers", std::move(layers)},
          {"output_s", v.layers.back().seconds[static_cast<size_t>(step_part::output)]},
          {"device_busy_s", t.device_s},
          {"steps", v.steps},
          {"step_tokens", v.tokens},
          {"step_s", v.step_seconds},
          {"predictor_recall", ratio(t.found, t.truly)},
          {"recall_checked", t.truly},
          {"active_ratio", ratio(t.computed, t.candidates)},
          {"hot_hit_ratio", ratio(t.hot, t.computed)},
          {"host_bytes", v.host_bytes},
          {"device_bytes", v.device_bytes},
          {"bytes_per_token", v.recent_bytes_per_token},
          {"host_bytes_per_second", v.recent_host_bytes_per_second},
          {"bandwidth_ceiling_bytes_per_second", ceiling_},
          {"bandwidth_utilization", ratio(v.recent_host_bytes_per_second, ceiling_)},
          {"busy_ratio", v.recent_busy_fraction},
          {"mailbox", std::move(mailbox)},
          {"mailbox_max", std::move(mailbox_max)},
          {"prefix_store",
           {{"blocks", v.prefix_blocks},
            {"capacity_blocks", v.prefix_capacity},
            {"bytes", static_cast<double>(v.prefix_blocks) * static_cast<double>(v.prefix_block_bytes)},
            {"evictions", v.prefix_evictions}}}};
  if (!v.stages.empty()) {  // stages of layers on other hosts
    nlohmann::json stages = nlohmann::json::array();
    for (const auto& st : v.stages)
      stages.push_back({{"where", st.where},
                        {"up", st.up},
                        {"steps", st.steps},
                        {"tokens", st.tokens},
                        {"compute_s", st.compute_s},
                        {"hop_s", st.hop_s},
                        {"busy_ratio", st.recent_busy_fraction},
                        {"hop_p50_ms", st.recent_hop_p50_s * 1e3},
                        {"hop_p99_ms", st.recent_hop_p99_s * 1e3},
                        {"bytes_sent", st.sent},
                        {"bytes_received", st.received},
                        {"bytes_per_token", ratio(static_cast<double>(st.sent + st.received), static_cast<double>(st.tokens))},
                        {"heartbeat_ms", ratio(st.heartbeat_s, static_cast<double>(st.heartbeats)) * 1e3}});
    out["stages"] = std::move(stages);
  }
  if (s.n_expert() > 0) {  // a mixture of experts: its experts on the hot device, and the guess, over every layer
    out["expert_hit_rate"] = ratio(t.expert_hits, t.experts_routed);
    out["expert_uploads_per_token"] = ratio(t.expert_uploads, static_cast<double>(v.tokens));
    out["expert_guess_recall"] = ratio(t.experts_guessed, t.experts_chosen);
  }
  return out;
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
  if (live_) out["pipeline"] = live_json(live_->read());
  if (disk_) {
    const auto c = disk_->counted();
    out["disk"] = {{"read_bytes", c.disk_bytes}, {"reads", c.reads}, {"wait_seconds", c.wait_seconds}, {"ram_lookups", c.lookups}, {"ram_hits", c.hits},
                   {"ram_hit_ratio", c.lookups > 0 ? static_cast<double>(c.hits) / static_cast<double>(c.lookups) : 1.0}, {"read_ahead", c.ahead},
                   {"read_ahead_missed", c.missed},
                   {"read_ahead_recall", c.ahead + c.missed > 0 ? static_cast<double>(c.ahead) / static_cast<double>(c.ahead + c.missed) : 1.0},
                   {"held_bytes", c.held_bytes}, {"token_steps", c.token_steps}, {"input_guess_steps", c.guessed_steps}};
  }
  return out;
}

namespace {
// The disk tier's families (counters since the start, the bytes held now).
std::vector<MetricFamily> disk_families(const ram_tier::counts& c) {
  family_list fl;
  auto counter = [&](const char* name, const char* help, double v) { fl.add(fl.family(name, help, MetricType::Counter), v); };
  counter("hotcold_disk_read_bytes_total", "Bytes the disk tier read from the model's file (its reads' own, block rounding included)", static_cast<double>(c.disk_bytes));
  counter("hotcold_disk_reads_total", "Reads the disk tier made (after coalescing)", static_cast<double>(c.reads));
  counter("hotcold_disk_wait_seconds_total", "Seconds steps waited for the disk tier's reads", c.wait_seconds);
  counter("hotcold_ram_lookups_total", "Chosen neurons whose rows a step asked the disk tier for", static_cast<double>(c.lookups));
  counter("hotcold_ram_hits_total", "Of those, the neurons whose rows were in memory", static_cast<double>(c.hits));
  counter("hotcold_read_ahead_total", "Chosen neurons not in memory before whose rows the layer-early read brought", static_cast<double>(c.ahead));
  counter("hotcold_read_ahead_missed_total", "Chosen neurons read when their layer asked (the read-ahead had not named them)", static_cast<double>(c.missed));
  counter("hotcold_read_ahead_token_steps_total", "Steps of one token at the first layer the process holds (the disk tier's clock)", static_cast<double>(c.token_steps));
  counter("hotcold_read_ahead_input_steps_total", "Of those, the steps with the second guess before attention on (--read-ahead-input)", static_cast<double>(c.guessed_steps));
  fl.add(fl.family("hotcold_ram_held_bytes", "Bytes of FFN rows the disk tier holds in memory now (pinned and window)", MetricType::Gauge), static_cast<double>(c.held_bytes));
  return std::move(fl.out);
}
}  // namespace

std::string metrics::text() const {
  std::ostringstream out;
  auto families = registry_->Collect();
  if (live_) {
    auto more = live_families(live_->read());
    families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  if (disk_) {
    auto more = disk_families(disk_->counted());
    families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace hotcold::server
