#include "actors/live_stats.hpp"

#include <algorithm>

namespace hotcold::actors {

std::string_view actor_name(actor_id a) {
  static constexpr std::string_view names[n_actors] = {"scheduler", "hot_executor", "predictor", "cold_pool", "sampler", "telemetry"};
  return names[static_cast<int>(a)];
}

live_stats::live_stats(const model& m, std::string hot_device)
    : costs_(m), hot_device_(std::move(hot_device)), n_layer_(m.hp().n_layer), n_ff_(m.hp().n_ff), n_expert_(m.hp().n_expert),
      layers_(static_cast<size_t>(m.hp().n_layer + 1)) {
  if (n_expert_ > 0)
    for (auto& l : layers_) {
      l.experts = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(n_expert_));
      for (int64_t e = 0; e < n_expert_; ++e) l.experts[static_cast<size_t>(e)].store(0, std::memory_order_relaxed);
    }
}

void live_stats::add_expert_cache(int64_t layer, int64_t routed, int64_t hits, int64_t uploads) {
  if (layer < 0 || layer >= n_layer_) return;
  layer_counters& c = layers_[static_cast<size_t>(layer)];
  c.experts_routed.fetch_add(routed, std::memory_order_relaxed);
  c.expert_hits.fetch_add(hits, std::memory_order_relaxed);
  c.expert_uploads.fetch_add(uploads, std::memory_order_relaxed);
}

void live_stats::add_experts(int64_t layer, const int64_t* chosen_counts, int64_t chosen, int64_t guessed) {
  if (layer < 0 || layer >= n_layer_ || n_expert_ == 0) return;
  auto& c = layers_[static_cast<size_t>(layer)];
  for (int64_t e = 0; e < n_expert_; ++e)
    if (chosen_counts[e]) c.experts[static_cast<size_t>(e)].fetch_add(chosen_counts[e], std::memory_order_relaxed);
  c.experts_chosen.fetch_add(chosen, std::memory_order_relaxed);
  c.experts_guessed.fetch_add(guessed, std::memory_order_relaxed);
}

void live_stats::add_time(step_part s, int64_t layer, std::chrono::steady_clock::duration d) {
  if (layer < 0 || layer > n_layer_) return;
  layers_[static_cast<size_t>(layer)].ns[static_cast<size_t>(s)].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(),
                                                                           std::memory_order_relaxed);
}

void live_stats::add_ffn(int64_t layer, int64_t tokens, int64_t computed, int64_t hot) {
  if (layer < 0 || layer >= n_layer_) return;
  auto& c = layers_[static_cast<size_t>(layer)];
  c.candidates.fetch_add(tokens * n_ff_, std::memory_order_relaxed);
  c.computed.fetch_add(computed, std::memory_order_relaxed);
  c.hot.fetch_add(hot, std::memory_order_relaxed);
}

void live_stats::add_recall(int64_t layer, int64_t truly_active, int64_t found) {
  if (layer < 0 || layer >= n_layer_) return;
  auto& c = layers_[static_cast<size_t>(layer)];
  c.truly_active.fetch_add(truly_active, std::memory_order_relaxed);
  c.found.fetch_add(found, std::memory_order_relaxed);
}

void live_stats::add_step(int64_t tokens, double seconds, uint64_t host_bytes, uint64_t device_bytes) {
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  ++steps_;
  tokens_ += tokens;
  step_seconds_ += seconds;
  host_bytes_ += host_bytes;
  device_bytes_ += device_bytes;
  recent_.push_back({now, tokens, seconds, host_bytes, device_bytes});
  while (recent_.size() > 4096 || (!recent_.empty() && now - recent_.front().end > window)) recent_.pop_front();
}

void live_stats::set_mailbox(actor_id a, int64_t depth) {
  const auto k = static_cast<size_t>(a);
  mailbox_[k].store(depth, std::memory_order_relaxed);
  int64_t m = mailbox_max_[k].load(std::memory_order_relaxed);
  while (depth > m && !mailbox_max_[k].compare_exchange_weak(m, depth, std::memory_order_relaxed)) {
  }
}

void live_stats::set_stages(std::vector<std::string> where) {
  std::lock_guard lock(mu_);
  stages_.resize(where.size());  // (what was counted stays: the links count before their plan's names are final)
  for (size_t k = 0; k < where.size(); ++k) stages_[k].totals.where = std::move(where[k]);
}

void live_stats::add_stage_step(size_t k, int64_t tokens, int64_t compute_ns, int64_t round_trip_ns, uint64_t sent, uint64_t received) {
  const auto now = std::chrono::steady_clock::now();
  const double compute = static_cast<double>(compute_ns) * 1e-9, round_trip = static_cast<double>(round_trip_ns) * 1e-9;
  const double hop = std::max(0.0, round_trip - compute);
  std::lock_guard lock(mu_);
  if (k >= stages_.size()) return;
  auto& s = stages_[k];
  auto& t = s.totals;
  ++t.steps, t.tokens += tokens, t.compute_s += compute, t.round_trip_s += round_trip, t.hop_s += hop, t.sent += sent, t.received += received;
  ++t.hops[static_cast<size_t>(std::lower_bound(hop_bounds.begin(), hop_bounds.end(), hop) - hop_bounds.begin())];
  s.recent.emplace_back(now, compute, hop);
  while (s.recent.size() > 4096 || now - std::get<0>(s.recent.front()) > window) s.recent.pop_front();
}

void live_stats::add_stage_heartbeat(size_t k, double seconds) {
  std::lock_guard lock(mu_);
  if (k >= stages_.size()) return;
  auto& t = stages_[k].totals;
  ++t.heartbeats, t.heartbeat_s += seconds, t.last_heartbeat_s = seconds;
}

void live_stats::set_stage_up(size_t k, bool up) {
  std::lock_guard lock(mu_);
  if (k < stages_.size()) stages_[k].totals.up = up;
}

int64_t live_stats::stages_down() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  for (const auto& s : stages_) n += !s.totals.up;
  return n;
}

void live_stats::set_prefix_store(int64_t blocks, int64_t capacity, uint64_t evictions, uint64_t block_bytes) {
  prefix_blocks_.store(blocks, std::memory_order_relaxed);
  prefix_capacity_.store(capacity, std::memory_order_relaxed);
  prefix_evictions_.store(evictions, std::memory_order_relaxed);
  prefix_block_bytes_.store(block_bytes, std::memory_order_relaxed);
}

void live_stats::set_slot(int64_t slot, slot_view v) {
  std::lock_guard lock(slots_mu_);
  if (slot < 0) return;
  if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(static_cast<size_t>(slot) + 1);
  slots_[static_cast<size_t>(slot)] = v;
}

std::vector<live_stats::slot_view> live_stats::slots() const {
  std::lock_guard lock(slots_mu_);
  return slots_;
}

live_stats::view live_stats::read() const {
  view v;
  v.prefix_blocks = prefix_blocks_.load(std::memory_order_relaxed);
  v.prefix_capacity = prefix_capacity_.load(std::memory_order_relaxed);
  v.prefix_evictions = prefix_evictions_.load(std::memory_order_relaxed);
  v.prefix_block_bytes = prefix_block_bytes_.load(std::memory_order_relaxed);
  v.layers.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const auto& c = layers_[l];
    auto& o = v.layers[l];
    for (int s = 0; s < n_timed_stages; ++s) o.seconds[static_cast<size_t>(s)] = static_cast<double>(c.ns[static_cast<size_t>(s)].load(std::memory_order_relaxed)) * 1e-9;
    o.candidates = c.candidates.load(std::memory_order_relaxed);
    o.computed = c.computed.load(std::memory_order_relaxed);
    o.hot = c.hot.load(std::memory_order_relaxed);
    o.truly_active = c.truly_active.load(std::memory_order_relaxed);
    o.found = c.found.load(std::memory_order_relaxed);
    if (c.experts)
      for (int64_t e = 0; e < n_expert_; ++e) o.experts.push_back(c.experts[static_cast<size_t>(e)].load(std::memory_order_relaxed));
    o.experts_chosen = c.experts_chosen.load(std::memory_order_relaxed);
    o.experts_guessed = c.experts_guessed.load(std::memory_order_relaxed);
    o.experts_routed = c.experts_routed.load(std::memory_order_relaxed);
    o.expert_hits = c.expert_hits.load(std::memory_order_relaxed);
    o.expert_uploads = c.expert_uploads.load(std::memory_order_relaxed);
  }
  for (int a = 0; a < n_actors; ++a) {
    v.mailbox[static_cast<size_t>(a)] = mailbox_[static_cast<size_t>(a)].load(std::memory_order_relaxed);
    v.mailbox_max[static_cast<size_t>(a)] = mailbox_max_[static_cast<size_t>(a)].load(std::memory_order_relaxed);
  }
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  v.steps = steps_, v.tokens = tokens_, v.step_seconds = step_seconds_, v.host_bytes = host_bytes_, v.device_bytes = device_bytes_;
  int64_t tokens = 0;
  double seconds = 0, host = 0, device = 0;
  for (const auto& e : recent_) {
    if (now - e.end > window) continue;
    tokens += e.tokens, seconds += e.seconds, host += static_cast<double>(e.host), device += static_cast<double>(e.device);
  }
  if (tokens > 0) v.recent_bytes_per_token = (host + device) / static_cast<double>(tokens);
  if (seconds > 0) v.recent_host_bytes_per_second = host / seconds;
  v.recent_busy_fraction = std::min(1.0, seconds / std::chrono::duration<double>(window).count());
  for (const auto& s : stages_) {
    stage_view o = s.totals;
    double compute = 0;
    std::vector<double> hops;
    for (const auto& [end, c, h] : s.recent)
      if (now - end <= window) compute += c, hops.push_back(h);
    o.recent_busy_fraction = std::min(1.0, compute / std::chrono::duration<double>(window).count());
    if (!hops.empty()) {
      std::sort(hops.begin(), hops.end());
      o.recent_hop_p50_s = hops[(hops.size() - 1) / 2];
      o.recent_hop_p99_s = hops[std::min(hops.size() - 1, static_cast<size_t>(0.99 * static_cast<double>(hops.size())))];
    }
    v.stages.push_back(std::move(o));
  }
  return v;
}

}  // namespace hotcold::actors
