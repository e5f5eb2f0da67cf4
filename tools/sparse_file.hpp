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
};

// The type a predictor matrix with rows of `row` values is stored in: `wanted` where whole blocks fit,
// F32 otherwise.
tensor_type predictor_storage_type(tensor_type wanted, int64_t row);

// Reads `dense_path`, writes `out_path` with ffn_down transposed into ffn_down_t (same type; quantized
// types are re-quantized from the transposed values) and the predictors added.
void write_sparse_model(const std::string& dense_path, const std::string& out_path, const std::vector<layer_predictor>& predictors,
                        const sparse_file_options& options = {});

}  // namespace hotcold::tools
