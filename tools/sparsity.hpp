#pragma once
// Sparsity without retraining for SiLU / GELU files (prepare --sparsity): a threshold t_l per layer on
// |act(gate . x)| (no gate: |act(up . x)|) below which a neuron counts as not firing. Calibrated on the
// same tokens profile reads, so that a fraction S of each layer's neurons is skipped on average.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hotcold::tools {

struct sparsity_options {
  std::string model_path;
  std::string calibration_path;  // empty: text the model samples itself (as profile)
  double target = 0.5;           // S: the mean fraction of each layer's neurons to skip
  int64_t tokens = 512;
  int64_t chunk = 256;
  int threads = 0;
};

struct sparsity_result {
  std::vector<float> thresholds;  // t_l per layer
  std::vector<double> skipped;    // the fraction of the calibration's activations below t_l, per layer
  int64_t tokens = 0;
};

// Runs the dense model over the calibration tokens and sets each layer's t_l to the S-quantile of its
// |act| values (up to 2^20 values a layer, spread evenly over the tokens and neurons).
sparsity_result calibrate_act_thresholds(const sparsity_options& o, const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace hotcold::tools
