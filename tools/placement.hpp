#pragma once
// hotcold place: which FFN neurons live on the fast device, under a memory budget, with exact
// accounting of everything else the device must hold first (attention, predictors, norms, output
// head, KV cache at the context, compute buffers). Among the neurons that fit, the choice maximizes
// the activation mass (profiled firing counts) that lands on the fast device.
//
// Placement files (PowerInfer's `<model>.generated.gpuidx`): GGUF layout with the PWRI magic,
// `split.vram_capacity` (u64, bytes of hot FFN rows), per layer `blk.N.gpu_idx` (I32[n_ff], 1 = hot)
// and `blk.N.gpu_bucket` (I32, the hot neuron ids, sorted). Layers are handled by number, never by
// sorting names as strings.
#include <cstdint>
#include <string>
#include <vector>

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

struct fixed_costs {
  uint64_t attention = 0, predictors = 0, norms = 0, output = 0, kv_cache = 0, compute = 0;
  uint64_t total() const { return attention + predictors + norms + output + kv_cache + compute; }
};

struct placement_plan {
  fixed_costs fixed;
  uint64_t budget = 0;
  placement_solution solution;
  double hot_mass = 0;  // share of all profiled firings that fall on hot neurons
};

// Plans placement for `model_path` from the firing counts in `stats_dir` (hotcold profile).
placement_plan plan_placement(const std::string& model_path, const std::string& stats_dir, double budget_gib, int64_t ctx);
// The same from firing counts in hand (n_layer x n_ff).
placement_plan plan_placement(const model& m, const std::vector<uint64_t>& firing_counts, double budget_gib, int64_t ctx);

// Writes the plan's hot neurons as a placement file (model/placement_file.hpp).
void write_placement(const placement_plan& plan, const std::string& path, int64_t n_ff);

}  // namespace hotcold::tools
