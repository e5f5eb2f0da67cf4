#pragma once
// The plan (the one `hotcold place` prints and the runtime allocates): what lives on the fast device under a memory budget, in PowerInfer's order: the
// compute buffers, then each layer's attention (its norms, Q/K/V/O, its KV cache at the context, and
// the FFN norm applied where attention leaves the residual stream) front to back, then the
// predictors, the output head, and only then hot FFN neurons. Each kind fills layers front to back
// and stops at the first that does not fit; the next kind gets what is left. Among the neurons that
// fit, the choice maximizes the activation mass (profiled firing counts) on the fast device. A dense
// file (no predictors) offloads whole layers instead — attention, then its FFN — as llama.cpp's -ngl
// does. The runtime (engine/device_layers.hpp) allocates exactly what the plan holds.
//
// Placement files (PowerInfer's `<model>.generated.gpuidx`): GGUF layout with the PWRI magic,
// `split.vram_capacity` (u64, bytes of hot FFN rows), per layer `blk.N.gpu_idx` (I32[n_ff], 1 = hot)
// and `blk.N.gpu_bucket` (I32, the hot neuron ids, sorted). Layers are handled by number, never by
// sorting names as strings.
#include <cstdint>
#include <string>
#include <vector>

#include "devices/device.hpp"
#include "engine/device_experts.hpp"
#include "engine/device_layers.hpp"
#include "model/placement_file.hpp"

namespace hotcold {
class model;
struct hparams;
}

namespace hotcold::loader {

// The knapsack at the heart of placement: layer l offers n neurons of `bytes[l]` each, whose values
// are `counts[l][i]`; choose neurons within `budget` bytes maximizing the total value.
struct placement_problem {
  std::vector<uint64_t> bytes;               // per layer: bytes one neuron's rows take
  std::vector<std::vector<uint64_t>> counts; // per layer, per neuron: firing count
  uint64_t budget = 0;
};

struct placement_solution {
  std::vector<std::vector<int32_t>> hot;  // per layer: chosen neuron ids, sorted
  uint64_t bytes = 0;
  uint64_t value = 0;
  bool exact = true;  // false when the instance was too large for the exact solver (greedy by value per byte)
};

placement_solution solve_placement(const placement_problem& p);

// Bytes of each kind the plan puts on the device (what is left on the CPU is not counted).
struct fixed_costs {
  uint64_t attention = 0, predictors = 0, norms = 0, output = 0, kv_cache = 0, compute = 0;
  uint64_t ffn = 0;   // dense files: the FFN weights of the layers offloaded whole
  uint64_t step = 0;  // what the device reserves for its FFN-rows jobs (plan_options::step_bytes)
  uint64_t shared = 0, experts = 0;  // a mixture's shared experts, and its experts' slots
  uint64_t total() const { return attention + predictors + norms + output + kv_cache + compute + ffn + step + shared + experts; }
};

// One layer's share of the device.
struct layer_placement {
  bool attention = false;  // attention's norms and Q/K/V/O products, with the layer's KV cache
  bool predictor = false;
  bool ffn_norm = false;
  bool ffn = false;  // dense files: the whole FFN
  int64_t hot_neurons = 0;
  bool shared = false;       // a mixture: its shared expert
  int64_t expert_slots = 0;  // a mixture: experts the device holds (a cache of them, or all)
  uint64_t attention_bytes = 0, kv_bytes = 0, predictor_bytes = 0, ffn_norm_bytes = 0, hot_bytes = 0, ffn_bytes = 0, shared_bytes = 0, expert_bytes = 0;
  uint64_t bytes() const { return attention_bytes + kv_bytes + predictor_bytes + ffn_norm_bytes + hot_bytes + ffn_bytes + shared_bytes + expert_bytes; }
};

struct placement_plan {
  fixed_costs fixed;
  uint64_t budget = 0;
  int64_t ctx = 0;     // positions of each sequence's KV cache
  int64_t n_seq = 1;   // sequences whose caches the device holds
  uint64_t kv_layer_bytes = 0;  // one layer's K and V on the device
  bool whole_layers = false;    // a dense file: layers offloaded whole
  bool experts = false;         // a mixture of experts: attention, shared experts, the head, then expert slots
  int64_t n_expert = 0;         // (a mixture) experts a layer
  int64_t n_cpu_moe = -1;       // (a mixture) --n-cpu-moe: the first layers whose experts stay on the CPU (-1: a cache in every layer)
  uint64_t left = 0;            // of the budget, after everything the plan holds
  std::vector<layer_placement> layers;
  bool output = false;  // the output norm and head
  placement_solution solution;
  uint64_t pinned_host = 0;  // plan_options::pinned_bytes
  double hot_mass = 0;  // share of all profiled firings that fall on hot neurons
  uint64_t bytes() const { return fixed.total() + solution.bytes; }
  // Per layer what is on the device and its bytes, then the totals (one line each).
  std::string table() const;
  // What the runtime puts on the device besides the hot rows.
  device_residency residency() const;
  // A mixture's expert slots per layer (a fixed set where --n-cpu-moe placed them).
  expert_residency expert_slots() const;
};

struct plan_options {
  int64_t ctx = 0;             // positions of each sequence's KV cache (0: the model's, at most 4096)
  int64_t n_seq = 1;           // sequences
  kv_types kv;  // the cache's types (--cache-type-k, --cache-type-v)
  // What the device can run besides hot FFN rows (a GPU: what its kernels read; sim: everything).
  bool attention = true, predictors = true, head = true;
  // Whether the device holds the output norm with the head (a device running host code applies it; a
  // GPU is given the normalized rows, the norm staying on the host).
  bool output_norm = true;
  int64_t n_gpu_layers = -1;   // dense files: layers offloaded whole (-1: as many as fit; more than fit is an error)
  // Bytes the device sets aside for its FFN-rows jobs when hot rows go there (a GPU's step buffers:
  // devices::device::reserve_bytes; 0 for sim and cpu), taken before anything else.
  uint64_t step_bytes = 0;
  // A mixture of experts: whether the device computes its experts and shared experts (a GPU: their
  // weights' types), and --n-cpu-moe N: the experts of layers 0..N-1 stay on the CPU and every other
  // layer's are all on the device (-1: what is left after the rest is a cache of experts in every layer).
  bool experts = true, shared_experts = true;
  int64_t n_cpu_moe = -1;
  // How the device's allocator charges each buffer the runtime makes (devices::device::allocation():
  // a GPU's granules): the plan counts every tensor, cache, compute buffer and slot buffer so.
  devices::allocation_rule alloc;
  // Pinned host memory the device keeps for its copies (devices::device::pinned_bytes): host RAM, not
  // the budget's; the plan reports it.
  uint64_t pinned_bytes = 0;
  // A stage's layers (docs/distributed.md: a worker's): the device holds these alone, and the head
  // only where they are the whole model (last_layer -1: to the end).
  int64_t first_layer = 0, last_layer = -1;
  bool holds(int64_t il, int64_t n_layer) const { return il >= first_layer && il < (last_layer < 0 ? n_layer : last_layer); }
  bool whole(int64_t n_layer) const { return first_layer == 0 && (last_layer < 0 || last_layer >= n_layer); }
};

// The compute buffers a plan sets aside first: a decode step's float32 activations, doubled (the
// flash-decoding partial sums of a long past live there), or where it is larger a prompt chunk's
// scratch — device_prompt_chunk tokens of an attention job with its predictor and the FFN after it,
// so a prompt re-reads each layer's weights once every 128 tokens (not every ~9) —, fewer tokens where
// that would pass 1/16 of the layers' weights (a small model's weights are cheap to re-read; its plan
// keeps its room for them). The model's alone decides it: a larger budget never shrinks what is left.
inline constexpr int64_t device_prompt_chunk = 128;
uint64_t compute_buffer_bytes(const model& m, int64_t ctx);
// The tokens of a prompt chunk that compute_buffer_bytes sizes for.
int64_t compute_buffer_prompt_tokens(const model& m);
// Everything but the hot rows, within `budget` bytes (plan.left: what is left for them).
placement_plan plan_device(const model& m, uint64_t budget, const plan_options& o);
// plan_device, then the hot neurons with what is left.
placement_plan plan_placement(const model& m, const std::vector<uint64_t>& firing_counts, uint64_t budget, const plan_options& o);

// The same with a budget in GiB, a context and the cache's types, as `hotcold place` takes them.
placement_plan plan_placement(const model& m, const std::vector<uint64_t>& firing_counts, double budget_gib, int64_t ctx, kv_types kv = {});

// Writes the plan's hot neurons as a placement file (model/placement_file.hpp), with what it was made
// for (the budget, the context, and model_path's size and modification time).
// Returns what it wrote.
placement_data write_placement(const placement_plan& plan, const std::string& path, int64_t n_ff, const std::string& model_path);

}  // namespace hotcold::loader
