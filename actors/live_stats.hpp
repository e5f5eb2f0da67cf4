#pragma once
// What the actor pipeline measures while it runs, for /metrics, /api/stats and the dashboard: per
// layer and stage the compute seconds (and so per device), how many FFN neurons the predictors chose
// and how many of those were on the hot device, the predictors' recall on sampled tokens, the bytes
// of weights each step read from host and device memory, and the actors' mailbox depths.
//
// The compute actors write (relaxed atomics: one add per layer and stage); any thread reads.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "model/model.hpp"
#include "engine/read_costs.hpp"
#include "engine/step_part.hpp"

namespace hotcold::actors {

// Where a layer's time goes. hot_ffn runs on the hot device, everything else on the CPU.
// The stages the actors time (engine/step_part.hpp's first six; the sampler's work is in traces only).
inline constexpr int n_timed_stages = 6;

enum class actor_id : int { scheduler, hot_executor, predictor, cold_pool, sampler, telemetry };
inline constexpr int n_actors = 6;
std::string_view actor_name(actor_id a);

class live_stats {
 public:
  // hot_device: the hot device's name ("" when every FFN neuron is on the CPU).
  live_stats(const model& m, std::string hot_device);

  void add_time(step_part s, int64_t layer, std::chrono::steady_clock::duration d);  // layer n_layer: the head
  // A sparse layer of a step: tokens x n_ff candidates, `computed` chosen (token, neuron) pairs of which
  // `hot` had their rows on the hot device; rows read from host and device memory.
  void add_ffn(int64_t layer, int64_t tokens, int64_t computed, int64_t hot);
  // A sampled check of a predictor: of `truly_active` neurons that fire (computed densely), `found`
  // were among those it chose.
  void add_recall(int64_t layer, int64_t truly_active, int64_t found);
  // A mixture of experts' layer of a step: how often each of its experts was chosen (n_expert counts),
  // and of the experts chosen, how many the guess from the layer before had (docs/moe.md).
  void add_experts(int64_t layer, const int64_t* chosen_counts, int64_t chosen, int64_t guessed);
  // A mixture's experts on a hot device (engine/device_experts.hpp): of `routed` experts a layer's
  // tokens chose, `hits` were in its device slots; `uploads` experts were uploaded into them.
  void add_expert_cache(int64_t layer, int64_t routed, int64_t hits, int64_t uploads);
  // A finished step: tokens, wall seconds, bytes of weights read from host and device memory.
  void add_step(int64_t tokens, double seconds, uint64_t host_bytes, uint64_t device_bytes);
  // Messages waiting in an actor's mailbox, as the actor itself saw when it took its last message.
  void set_mailbox(actor_id a, int64_t depth);
  // The prefix store (actors/prefix_reuse.hpp): blocks held, of how many, evicted so far, and the bytes
  // of a block (every layer's keys and values of its positions).
  void set_prefix_store(int64_t blocks, int64_t capacity, uint64_t evictions, uint64_t block_bytes);

  // Stages of layers on other hosts (docs/distributed.md), by their where() text; set before steps
  // (again once --split auto has planned their layers: the counts so far stay).
  void set_stages(std::vector<std::string> where);
  // A step through stage k: its tokens, the worker's compute and the round trip seen from this
  // process (the hop: the round trip less the compute, both ways over the link with the messages'
  // encoding), and the payload bytes sent (residual stream, slots, positions) and received.
  void add_stage_step(size_t k, int64_t tokens, int64_t compute_ns, int64_t round_trip_ns, uint64_t sent, uint64_t received);
  void set_stage_up(size_t k, bool up);
  int64_t stages_down() const;  // stages whose worker is lost now
  // A heartbeat's round trip to stage k (a few bytes each way, no compute: the link's own cost).
  void add_stage_heartbeat(size_t k, double seconds);
  // Upper bounds of the hop histogram's buckets, seconds (a last bucket takes the rest).
  static constexpr std::array<double, 13> hop_bounds{50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3};

  // A KV slot as the scheduler last saw it: the request it holds (-1: none) and the tokens its cache
  // holds (a free slot keeps its last sequence's, for the prompts that reuse them); GET /slots.
  struct slot_view {
    int64_t request = -1;
    int64_t cached = 0;
  };
  void set_slot(int64_t slot, slot_view v);
  std::vector<slot_view> slots() const;

  static constexpr std::chrono::seconds window{5};  // what "recent" means

  const read_costs& costs() const { return costs_; }
  const std::string& hot_device() const { return hot_device_; }
  int64_t n_layer() const { return n_layer_; }
  int64_t n_ff() const { return n_ff_; }
  int64_t n_expert() const { return n_expert_; }  // 0: not a mixture of experts

  struct layer_view {
    std::array<double, n_timed_stages> seconds{};
    int64_t candidates = 0, computed = 0, hot = 0, truly_active = 0, found = 0;
    std::vector<int64_t> experts;                 // a mixture's layer: each expert's choices
    int64_t experts_chosen = 0, experts_guessed = 0;
    int64_t experts_routed = 0, expert_hits = 0, expert_uploads = 0;
  };
  struct stage_view {
    std::string where;
    bool up = true;
    int64_t steps = 0, tokens = 0;
    double compute_s = 0, round_trip_s = 0, hop_s = 0;
    uint64_t sent = 0, received = 0;
    std::array<int64_t, hop_bounds.size() + 1> hops{};  // steps by hop, per bucket (not cumulative)
    // Over the last few seconds (0 when none ran): the worker's compute / the window, and the hop's median and 99th percentile.
    double recent_busy_fraction = 0, recent_hop_p50_s = 0, recent_hop_p99_s = 0;
    int64_t heartbeats = 0;
    double heartbeat_s = 0, last_heartbeat_s = 0;  // their sum, and the last one's
  };
  struct view {
    std::vector<layer_view> layers;  // n_layer + 1: the last is the head
    std::vector<stage_view> stages;  // the stages on other hosts (none: every layer here)
    int64_t steps = 0, tokens = 0;
    double step_seconds = 0;
    uint64_t host_bytes = 0, device_bytes = 0;
    std::array<int64_t, n_actors> mailbox{}, mailbox_max{};
    int64_t prefix_blocks = 0, prefix_capacity = 0;
    uint64_t prefix_evictions = 0, prefix_block_bytes = 0;
    // Over the steps of the last few seconds (0 when none ran).
    double recent_bytes_per_token = 0;       // host + device
    double recent_host_bytes_per_second = 0; // host bytes / the steps' wall time
    double recent_busy_fraction = 0;         // steps' wall time / the window
  };
  view read() const;

 private:
  mutable std::mutex slots_mu_;
  std::vector<slot_view> slots_;
  struct layer_counters {
    std::array<std::atomic<int64_t>, n_timed_stages> ns{};
    std::atomic<int64_t> candidates{0}, computed{0}, hot{0}, truly_active{0}, found{0};
    std::unique_ptr<std::atomic<int64_t>[]> experts;  // n_expert (a mixture of experts)
    std::atomic<int64_t> experts_chosen{0}, experts_guessed{0};
    std::atomic<int64_t> experts_routed{0}, expert_hits{0}, expert_uploads{0};
  };
  read_costs costs_;
  std::string hot_device_;
  int64_t n_layer_, n_ff_, n_expert_;
  std::vector<layer_counters> layers_;
  std::array<std::atomic<int64_t>, n_actors> mailbox_{}, mailbox_max_{};
  std::atomic<int64_t> prefix_blocks_{0}, prefix_capacity_{0};
  std::atomic<uint64_t> prefix_evictions_{0}, prefix_block_bytes_{0};
  struct step_entry {
    std::chrono::steady_clock::time_point end;
    int64_t tokens;
    double seconds;
    uint64_t host, device;
  };
  mutable std::mutex mu_;
  int64_t steps_ = 0, tokens_ = 0;
  double step_seconds_ = 0;
  uint64_t host_bytes_ = 0, device_bytes_ = 0;
  std::deque<step_entry> recent_;
  struct stage_counters {
    stage_view totals;
    std::deque<std::tuple<std::chrono::steady_clock::time_point, double, double>> recent;  // (end, compute s, hop s)
  };
  std::vector<stage_counters> stages_;  // (under mu_)
};

}  // namespace hotcold::actors
