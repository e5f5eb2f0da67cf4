#pragma once
// hotcold plan: what a GPU would give, on paper. From the plan the runtime would make for a budget
// (loader/placement: attention with its KV cache, predictors, the head, then hot FFN rows) and how
// often each neuron fires (a profile, or one active fraction for every neuron), the bytes a decoded
// token reads on each side — counted by engine/read_costs, as the runtime counts them — the
// crossings between them, and the tokens per second each side's bandwidth allows: for the CPU alone,
// for whole layers offloaded at the same budget (llama.cpp's -ngl, every neuron computed) and for the
// hybrid (the hot and cold shares of a layer at the same time), with the side that limits it named.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "loader/placement.hpp"

namespace hotcold::tools {

// A GPU's published memory bandwidth and its host link (PCIe, one direction, as specified).
struct gpu_spec {
  std::string name;
  double bandwidth_gbs = 0;
  double pcie_gbs = 0;
};
const std::vector<gpu_spec>& known_gpus();
// By name, ignoring case, spaces and dashes ("rtx4090", "RTX 4090", "h200"); null when unknown.
const gpu_spec* find_gpu(const std::string& name);

struct planner_options {
  uint64_t budget = 0;             // bytes of the GPU the plan may use
  int64_t ctx = 0;                 // the KV cache's positions (0: the model's, at most 4096)
  kv_types kv;                     // the cache's types (f16)
  double position = -1;            // cached rows a decoded token reads (-1: half the context)
  // Bandwidths, GB/s (1e9 bytes). The CPU's per kind of work: products (attention with its norms and
  // KV cache, the predictors, the head, a whole FFN computed densely), and the FFN as the file runs
  // it (a sparse file's scattered rows; a dense file's products; 0: cpu_gbs).
  double cpu_gbs = 0, gpu_gbs = 0, pcie_gbs = 0;
  double cpu_ffn_gbs = 0;
  double ffn_gbs() const { return cpu_ffn_gbs > 0 ? cpu_ffn_gbs : cpu_gbs; }  // the FFN's rate as used
  double gpu_efficiency = 0.75;    // of the published bandwidth that the kernels reach
  double crossing_us = 10;         // a blocking wait's cost: the host's round trip to the GPU and back
  // What each kernel launch and each host<->device copy call costs the host beside it (the runtime's
  // jobs as a GPU runs them: devices::gpu_traffic counts them; 0 and 0: the flat crossing of before).
  double launch_us = 3, copy_us = 3;
  // How often neurons fire: counts (n_layer x n_ff) over `tokens` tokens, or, when counts are empty,
  // each neuron with probability `active`.
  std::vector<uint64_t> firing_counts;
  uint64_t tokens = 0;
  double active = 0.1;
  // A sparse file: neurons its predictors choose per token, per layer (measure_cpu_rates). The
  // runtime reads the gate and up rows of every chosen neuron (the down rows of those that fire):
  // each neuron's chance of being chosen is its firing probability scaled to this layer's count.
  // Empty: the neurons that fire are the neurons chosen.
  std::vector<double> chosen_per_token;
  // A mixture of experts: the share of routed experts the device's slots hold (a replay what-if's hit
  // rate; -1: each layer's slots over its experts, as for a router that picks them evenly).
  double expert_hit_rate = -1;
};

struct plan_prediction {
  loader::placement_plan plan;             // the hybrid's plan (what the runtime would allocate)
  double cpu_only_bytes = 0;       // a token on the CPU alone
  double host_bytes = 0, device_bytes = 0;  // the hybrid's, per token
  double crossings = 0;            // the hybrid's, per token
  // The hybrid's round trips a token: kernels launched, copies and blocking waits (devices::gpu_traffic
  // over the jobs the plan sends), and what they cost at launch_us, copy_us and crossing_us.
  double launches = 0, copies = 0, syncs = 0, round_trip_seconds = 0;
  double crossing_bytes = 0;       // activations that cross, per token
  double cpu_seconds = 0, gpu_seconds = 0, link_seconds = 0;  // the hybrid's, per token, per side
  int64_t offload_layers = 0;      // whole layers at the same budget
  bool offload_head = false;
  double cpu_only_tokens_per_s = 0, layer_offload_tokens_per_s = 0, hybrid_tokens_per_s = 0;
  std::string limited_by;          // "cpu", "gpu" or "pcie": the hybrid's largest share of a token's time
  // A mixture of experts, against llama.cpp's -ngl 99 --n-cpu-moe N with the smallest N whose other
  // layers' experts fit the budget (every layer's attention, KV cache and shared expert, the head,
  // then whole layers of experts; -1: not even N = every layer fits), each layer's CPU experts after
  // its GPU work rather than beside it; offload_layers / layer_offload_tokens_per_s are those.
  int64_t n_cpu_moe = -1;
  double expert_hit_rate = 0;      // the hybrid's routed experts computed on the GPU
};

// Throws std::invalid_argument for impossible options (a zero bandwidth, counts of another shape).
plan_prediction predict_plan(const model& m, const planner_options& o);

// The CPU's rates on this machine for this file, from its own work: tokens decoded by the engine
// (sparse mode where the file has predictors) after an 8-token prompt and a warm-up pass, with
// `threads` threads, in passes of 16; each kind of work's time from the trace's intervals (attention, predict and output:
// products; ffn) against the bytes it read (engine/read_costs, the rows the FFN read as bench counts
// them, the KV cache at each position), the median over the passes.
struct cpu_rates {
  double products_gbs = 0, ffn_gbs = 0;
  int threads = 0, passes = 0, tokens = 0;
  double ffn_bytes_per_token = 0;
  std::vector<double> chosen_per_token;  // a sparse file's: neurons chosen per token, per layer
  // How far the passes' rates were apart ((largest - smallest) / median, the larger kind's), and
  // whether that is more than a quiet machine shows: another program's work moved them, and the
  // figures built on them are not to be trusted.
  double spread = 0;
  bool noisy = false;
  static constexpr double noisy_spread = 0.3;
};
// threads <= 0: every hardware thread.
cpu_rates measure_cpu_rates(std::shared_ptr<const model> m, int threads);
// The disk tier (`--ram-budget`, engine/ram_tier; a sparse file, or a mixture: see below): what the
// budget holds (plan_ram_tier: each layer's hottest neurons pinned, a window shared by the layers),
// and per decoded token the bytes read from the file: each chosen neuron past its layer's pinned ones
// is read whole (all its rows) unless the window still holds it — a neuron is taken to be there when
// one of the tokens the window has room for chose it (consecutive tokens' choices as if independent:
// real text repeats more, so this reads more than a run does) — and the embedding row of a token
// when the table is not held whole. The token's time: the CPU's work alone (predict_plan's CPU
// only) and the reads at disk_gbs; `tokens_per_s` with the reads after the work (a step's misses
// wait for their rows: what runs measure), `overlapped_tokens_per_s` with the reads beside it (the
// bound a read-ahead that guessed every neuron would reach). A mixture: its experts routed evenly, k
// of n a layer a token, each read whole unless the cache of window_rows experts for all the layers
// holds it (one of the tokens it has room for chose it too).
struct disk_tier_prediction {
  uint64_t budget = 0;
  int64_t pinned_rows = 0, window_rows = 0;  // each layer's pinned neurons (layer 0's); the window's slots
  int64_t device_rows = 0;                   // beside a GPU's plan: layer 0's neurons on the device, which the pinned ones follow
  bool beside_gpu = false;                   // a token's work: the hybrid's (else the CPU's alone)
  bool experts = false;                      // a mixture's: the units are experts (a cache of window_rows for all the layers)
  double disk_gbs = 0;
  double disk_bytes_per_token = 0;
  double neurons_read_per_token = 0;
  std::vector<uint64_t> neuron_bytes;        // per layer: what a neuron's read brings (ram_tier_plan's)
  double ram_hit_rate = 0;                   // of the chosen neurons, those in memory when asked
  double compute_seconds = 0, disk_seconds = 0;  // per token
  double in_memory_tokens_per_s = 0, tokens_per_s = 0, overlapped_tokens_per_s = 0;
};
// beside: a GPU's plan (predict_plan's) that the tier runs with: a sparse layer's first hot_neurons
// are the device's (never read; the pinned ones are the hottest after them, as run --device opens the
// tier) and a token's work is the hybrid's (null: the CPU alone's). A mixture's experts are modelled on
// the CPU alone.
disk_tier_prediction predict_disk_tier(const model& m, const planner_options& o, uint64_t ram_budget, double disk_gbs,
                                       const plan_prediction* beside = nullptr);

// The disk's rate for the tier's reads, GB/s: `pieces` reads of `piece_bytes` at random places in the
// file, direct (past the page cache) where the file system allows it, submitted in batches of `batch`
// (a layer's misses) and each batch waited on, as the tier reads (engine/disk_reads). `direct` says
// whether the reads went past the page cache (else the figure is the cache's, not the disk's).
struct disk_rate {
  double gbs = 0;
  uint64_t reads = 0, bytes = 0;
  bool direct = false;
};
disk_rate measure_disk_rate(const std::string& path, uint64_t piece_bytes, int64_t batch, int64_t pieces);

// The prediction as a table for people (stdout of `hotcold plan`).
std::string prediction_table(const model& m, const planner_options& o, const plan_prediction& p);

}  // namespace hotcold::tools
