#pragma once
// Writing sparse model files: a dense GGUF model plus each layer's activation predictor, in
// PowerInfer's tensor conventions (ffn_down_t instead of ffn_down, blk.N.fc1 / blk.N.fc2), either
// with PowerInfer's magic and key or with the GGUF magic and hotcold's keys (docs/model-files.md).
#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::tools {

struct layer_predictor {
  int64_t rank = 0;
  std::vector<float> fc1;  // rank rows of n_embd
  std::vector<float> fc2;  // n_ff rows of rank
  float threshold = 0.0f;
};

struct sparse_file_options {
  gguf::file_kind kind = gguf::file_kind::gguf;  // powerinfer: magic PWRI, one threshold key for all layers
                                                 // (per-layer thresholds folded into fc2 where they share a sign)
  tensor_type predictor_type = tensor_type::f32; // PowerInfer's quantize writes Q4_0 predictors
  // prepare --sparsity: the activation thresholds (hotcold.sparsity.act_thresholds) and the target they
  // were calibrated for (hotcold.sparsity.target); empty: the dense file's own, if any.
  std::vector<float> act_thresholds;
  float sparsity_target = 0;
  // The layout (hotcold's GGUF only; docs/model-files.md): each layer's neurons in order[l] (position i
  // holds the dense file's neuron order[l][i]; empty: as they are), recorded as blk.N.ffn_order; and
  // with `bundle`, a neuron's rows side by side in one tensor blk.N.ffn_bundle.weight — gate, up and
  // down_t, or up and down_t with the gate apart when the file has activation thresholds (every
  // neuron's gate is read each token there) — where those rows share a type.
  std::vector<std::vector<int32_t>> order;
  bool bundle = false;
  // The down matrix kept as ffn_down (n_embd rows of n_ff, its columns in the order) instead of
  // ffn_down_t: the down product then takes each token's hidden values as Q8_0 blocks of 32 neurons
  // and skips the blocks where none fired (prepare --down-layout blocks). No bundle then: the gate and
  // up rows in tensors of their own.
  bool down_blocks = false;
};

// The neurons of each layer, most often firing first (ties by number): n_layer x n_ff counts.
std::vector<std::vector<int32_t>> firing_order(const std::vector<uint64_t>& counts, int64_t n_layer, int64_t n_ff);

// The type a predictor matrix with rows of `row` values is stored in: `wanted` where whole blocks fit,
// F32 otherwise.
tensor_type predictor_storage_type(tensor_type wanted, int64_t row);

// Reads `dense_path`, writes `out_path` with ffn_down transposed into ffn_down_t (same type; quantized
// types are re-quantized from the transposed values) — or with down_blocks, ffn_down as it is (its
// columns in the order: quantized types re-quantized from the reordered values where an order is
// given) — and the predictors added, laid out as `options` says (the predictors' rows follow the
// neurons' order).
void write_sparse_model(const std::string& dense_path, const std::string& out_path, const std::vector<layer_predictor>& predictors,
                        const sparse_file_options& options = {});

}  // namespace hotcold::tools
