#include "tools/sparse_file.hpp"

#include <algorithm>

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "model/arch.hpp"
#include "engine/forward.hpp"
#include "model/gguf_writer.hpp"
#include "model/tensor_convert.hpp"

namespace hotcold::tools {

tensor_type predictor_storage_type(tensor_type wanted, int64_t row) { return row % traits(wanted).block_size ? tensor_type::f32 : wanted; }

void write_sparse_model(const std::string& dense_path, const std::string& out_path, const std::vector<layer_predictor>& predictors,
                        const sparse_file_options& options) {
  auto f = gguf::file::open(dense_path);
  hparams hp = read_hparams(f);
  if (predictors.size() != static_cast<size_t>(hp.n_layer))
    throw std::invalid_argument(fmt::format("{} predictors for {} layers", predictors.size(), hp.n_layer));

  gguf::writer w(options.kind);
  for (const auto& kv : f.metadata()) {
    if (kv.key == sparse_thresholds_key || kv.key == powerinfer_threshold_key || kv.key == predictor_input_key) continue;
    if (!options.act_thresholds.empty() && (kv.key == activation_thresholds_key || kv.key == sparsity_target_key)) continue;
    w.set_value(kv.key, kv.val);
  }
  if (!options.act_thresholds.empty()) {
    if (options.act_thresholds.size() != static_cast<size_t>(hp.n_layer))
      throw std::invalid_argument(fmt::format("{} activation thresholds for {} layers", options.act_thresholds.size(), hp.n_layer));
    if (options.kind == gguf::file_kind::powerinfer)
      throw std::invalid_argument("PowerInfer's files have no activation thresholds: a thresholded model is written as hotcold's GGUF");
    w.set_array(activation_thresholds_key, std::span<const float>(options.act_thresholds));
    w.set_f32(sparsity_target_key, options.sparsity_target);
  }
  // PowerInfer files hold one threshold for all layers. Per-layer thresholds of one sign are folded
  // into fc2: score >= t_l is c score >= c t_l for c > 0, so with c_l = T / t_l every layer keeps its
  // own choice under the common T. Mixed signs (or a zero) fall back to the lowest threshold, which
  // keeps every layer's recall.
  std::vector<float> fc2_scale(predictors.size(), 1.0f);
  if (options.kind == gguf::file_kind::powerinfer) {
    float lo = predictors.front().threshold, hi = lo;
    for (const auto& p : predictors) lo = std::min(lo, p.threshold), hi = std::max(hi, p.threshold);
    const bool one_sign = (lo < 0 && hi < 0) || (lo > 0 && hi > 0);
    const float common = one_sign ? (lo < 0 ? lo : hi) : lo;
    if (one_sign)
      for (size_t l = 0; l < predictors.size(); ++l) fc2_scale[l] = common / predictors[l].threshold;
    w.set_f32(powerinfer_threshold_key, common);
  } else {
    std::vector<float> thresholds;
    for (const auto& p : predictors) thresholds.push_back(p.threshold);
    w.set_array(sparse_thresholds_key, std::span<const float>(thresholds));
    // A thresholded model's predictors estimate pre-activations from the FFN's normalized input (a file
    // thresholded already says so in hp.pred_input).
    w.set_string(predictor_input_key, predictor_input_name(options.act_thresholds.empty() ? hp.pred_input : predictor_input::ffn_input));
  }
  if (!f.find(activation_key)) w.set_string(activation_key, activation_name(hp.act));

  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(f.tensors().size() + 2 * predictors.size());
  for (const auto& t : f.tensors()) {
    std::string name(t.name);
    auto dot = name.find(".ffn_down.weight");
    if (dot == std::string::npos) {
      std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      w.add_tensor(name, t.type, ne, {t.data, static_cast<size_t>(t.n_bytes)});
      continue;
    }
    // ffn_down is n_embd rows of n_ff; ffn_down_t is n_ff rows of n_embd.
    const int64_t n_ff = t.ne[0], n_embd = t.ne[1];
    tensor_view v;
    v.type = t.type;
    v.ne0 = n_ff;
    v.ne1 = n_embd;
    v.row_bytes = static_cast<size_t>(t.n_bytes / static_cast<uint64_t>(n_embd));
    v.data = t.data;
    std::vector<float> row(static_cast<size_t>(n_ff)), transposed(static_cast<size_t>(n_ff * n_embd));
    for (int64_t r = 0; r < n_embd; ++r) {
      dequantize_row(v, r, row.data());
      for (int64_t c = 0; c < n_ff; ++c) transposed[static_cast<size_t>(c * n_embd + r)] = row[static_cast<size_t>(c)];
    }
    storage.push_back(convert_rows(transposed, n_embd, t.type));
    int64_t ne[] = {n_embd, n_ff};
    w.add_tensor(name.substr(0, dot) + ".ffn_down_t.weight", t.type, ne, storage.back());
  }
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const auto& p = predictors[static_cast<size_t>(l)];
    if (p.fc1.size() != static_cast<size_t>(p.rank * hp.n_embd) || p.fc2.size() != static_cast<size_t>(hp.n_ff * p.rank))
      throw std::invalid_argument(fmt::format("layer {}: predictor sizes do not match rank {}", l, p.rank));
    const tensor_type t1 = predictor_storage_type(options.predictor_type, hp.n_embd), t2 = predictor_storage_type(options.predictor_type, p.rank);
    storage.push_back(convert_rows(p.fc1, hp.n_embd, t1));
    int64_t ne1[] = {hp.n_embd, p.rank};
    w.add_tensor(fmt::format("blk.{}.fc1.weight", l), t1, ne1, storage.back());
    std::vector<float> fc2 = p.fc2;
    for (float& x : fc2) x *= fc2_scale[static_cast<size_t>(l)];
    storage.push_back(convert_rows(fc2, p.rank, t2));
    int64_t ne2[] = {p.rank, hp.n_ff};
    w.add_tensor(fmt::format("blk.{}.fc2.weight", l), t2, ne2, storage.back());
  }
  auto dir = std::filesystem::path(out_path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  w.write(out_path);
}

}  // namespace hotcold::tools
