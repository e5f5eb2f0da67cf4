#pragma once
// hotcold place: what lives on the fast device under a memory budget, in PowerInfer's order: the
// compute buffers, then each layer's attention (its norms, Q/K/V/O and its KV cache at the context)
// front to back, then the predictors, the FFN norms, the output head, and only then hot FFN neurons.
// Each kind fills layers front to back and stops at the first that does not fit; the next kind gets
// what is left. Among the neurons that fit, the choice maximizes the activation mass (profiled firing
// counts) on the fast device.
//
// Placement files (PowerInfer's `<model>.generated.gpuidx`): GGUF layout with the PWRI magic,
// `split.vram_capacity` (u64, bytes of hot FFN rows), per layer `blk.N.gpu_idx` (I32[n_ff], 1 = hot)
// and `blk.N.gpu_bucket` (I32, the hot neuron ids, sorted). Layers are handled by number, never by
// sorting names as strings.
#include <cstdint>
#include <string>
#include <vector>

#include "model/placement_file.hpp"

namespace hotcold {
class model;
}

namespace hotcold::tools {

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
  uint64_t total() const { return attention + predictors + norms + output + kv_cache + compute; }
};

// One layer's share of the device.
struct layer_placement {
  bool attention = false;  // attention's norms and Q/K/V/O products, with the layer's KV cache
  bool predictor = false;
  bool ffn_norm = false;
  int64_t hot_neurons = 0;
  uint64_t attention_bytes = 0, kv_bytes = 0, predictor_bytes = 0, ffn_norm_bytes = 0, hot_bytes = 0;
  uint64_t bytes() const { return attention_bytes + kv_bytes + predictor_bytes + ffn_norm_bytes + hot_bytes; }
};

struct placement_plan {
  fixed_costs fixed;
  uint64_t budget = 0;
  int64_t ctx = 0;
  std::vector<layer_placement> layers;
  bool output = false;  // the output norm and head
  placement_solution solution;
  double hot_mass = 0;  // share of all profiled firings that fall on hot neurons
  uint64_t bytes() const { return fixed.total() + solution.bytes; }
  // Per layer what is on the device and its bytes, then the totals (one line each).
  std::string table() const;
};

// Plans placement for `model_path` from the firing counts in `stats_dir` (hotcold profile).
placement_plan plan_placement(const std::string& model_path, const std::string& stats_dir, double budget_gib, int64_t ctx);
// The same from firing counts in hand (n_layer x n_ff).
placement_plan plan_placement(const model& m, const std::vector<uint64_t>& firing_counts, double budget_gib, int64_t ctx);

// Writes the plan's hot neurons as a placement file (model/placement_file.hpp), with what it was made
// for (the budget, the context, and model_path's size and modification time).
// Returns what it wrote.
placement_data write_placement(const placement_plan& plan, const std::string& path, int64_t n_ff, const std::string& model_path);

}  // namespace hotcold::tools
