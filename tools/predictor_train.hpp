#pragma once
// hotcold train-predictor: fits each layer's activation predictor — score = fc2 . relu(fc1 . x), a
// low-rank MLP with no biases, as PowerInfer's files hold it — on the samples `profile` recorded,
// with a recall-favouring loss, then picks each layer's threshold so that at least `target_recall`
// of the truly active neurons of held-out samples score at or above it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/tensor_types.hpp"

#include "loader/profile.hpp"
#include "tools/sparse_file.hpp"

namespace hotcold::tools {

struct train_options {
  int64_t rank = 0;             // 0: chosen per layer (starting at n_embd / 8, doubled while the
                                // predicted fraction exceeds 1.5x the true one + 0.01)
  int epochs = 3;                // Adam refinement after the linear start (kept only where it helps)
  int batch = 64;
  float learning_rate = 2e-3f;  // Adam
  float positive_weight = 4.0f; // missing a firing neuron costs this many false alarms
  double target_recall = 0.997;  // on held-out samples; a margin over 0.99 for text unlike the calibration
  double holdout = 0.1;         // share of samples kept for choosing the threshold
  tensor_type stored_as = tensor_type::f32;  // the sparse file's predictor type: thresholds are chosen
                                             // for the predictor as stored (Q8_0/Q4_0 rows with Q8_0 inputs)
  uint64_t seed = 1;
  int threads = 0;
};

struct layer_fit {
  int64_t rank = 0;
  double recall = 0, precision = 0, active_fraction = 0, true_active_fraction = 0;  // on held-out samples
};

struct trained_predictors {
  std::vector<layer_predictor> layers;
  std::vector<layer_fit> fits;
};

trained_predictors train_predictors(const loader::profile_data& data, const train_options& o,
                                    const std::function<void(int64_t layer, int64_t n_layer)>& progress = {});

// DIR/predictors.gguf: blk.N.fc1 / blk.N.fc2 (F32) and hotcold.sparse.thresholds.
void save_predictors(const trained_predictors& p, const std::string& path);
trained_predictors load_predictors(const std::string& path);

}  // namespace hotcold::tools
