#include "tools/sparse_file.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "model/arch.hpp"
#include "engine/layer_ops.hpp"
#include "model/gguf_writer.hpp"
#include "model/tensor_convert.hpp"

namespace hotcold::tools {

tensor_type predictor_storage_type(tensor_type wanted, int64_t row) { return row % traits(wanted).block_size ? tensor_type::f32 : wanted; }

std::vector<std::vector<int32_t>> firing_order(const std::vector<uint64_t>& counts, int64_t n_layer, int64_t n_ff) {
  if (counts.size() != static_cast<size_t>(n_layer * n_ff))
    throw std::invalid_argument(fmt::format("{} firing counts for {} layers of {} neurons", counts.size(), n_layer, n_ff));
  std::vector<std::vector<int32_t>> order(static_cast<size_t>(n_layer));
  for (int64_t l = 0; l < n_layer; ++l) {
    auto& o = order[static_cast<size_t>(l)];
    o.resize(static_cast<size_t>(n_ff));
    std::iota(o.begin(), o.end(), 0);
    const uint64_t* c = counts.data() + l * n_ff;
    std::stable_sort(o.begin(), o.end(), [&](int32_t a, int32_t b) { return c[a] > c[b]; });
  }
  return order;
}

namespace {

// n_ff rows of one type: a matrix's rows from `first` on.
struct rows {
  tensor_type type;
  size_t row_bytes;
  const uint8_t* data;
  const uint8_t* row(int64_t i) const { return data + static_cast<size_t>(i) * row_bytes; }
};

rows rows_of(const gguf::tensor_info& t, int64_t first) {
  const size_t rb = static_cast<size_t>(t.n_bytes / static_cast<uint64_t>(t.ne[1]));
  return rows{t.type, rb, t.data + static_cast<size_t>(first) * rb};
}

// A dense file rewritten as a sparse one (write_sparse_model), part by part.
class sparse_writer {
 public:
  sparse_writer(const std::string& dense_path, const std::vector<layer_predictor>& predictors, const sparse_file_options& options)
      : path_(dense_path), f_(gguf::file::open(dense_path)), hp_(read_hparams(f_)), predictors_(predictors), options_(options), w_(options.kind) {
    if (predictors.size() != static_cast<size_t>(hp_.n_layer))
      throw std::invalid_argument(fmt::format("{} predictors for {} layers", predictors.size(), hp_.n_layer));
    if (options.kind == gguf::file_kind::powerinfer && (options.bundle || !options.order.empty() || options.down_blocks))
      throw std::invalid_argument("PowerInfer's files keep their own layout: no bundles, neuron order or down blocks");
    if (!options.order.empty() && options.order.size() != static_cast<size_t>(hp_.n_layer))
      throw std::invalid_argument(fmt::format("a neuron order for {} layers of {}", options.order.size(), hp_.n_layer));
  }

  void write(const std::string& out_path) {
    // Tensors on page boundaries in the file (general.alignment): the disk tier's direct reads of a
    // row then land in its memory in place, no bounce buffer and copy (docs/disk.md). PowerInfer's
    // files keep the default.
    if (options_.kind != gguf::file_kind::powerinfer) w_.set_alignment(4096);
    metadata();
    storage_.reserve(f_.tensors().size() + 4 * predictors_.size());
    other_tensors();
    for (int64_t l = 0; l < hp_.n_layer; ++l) ffn_layer(l);
    for (int64_t l = 0; l < hp_.n_layer; ++l) predictor(l);
    auto dir = std::filesystem::path(out_path).parent_path();
    if (!dir.empty()) std::filesystem::create_directories(dir);
    w_.write(out_path);
  }

 private:
  void metadata() {
    for (const auto& kv : f_.metadata()) {
      if (kv.key == sparse_thresholds_key || kv.key == powerinfer_threshold_key || kv.key == predictor_input_key) continue;
      if (kv.key == "general.alignment") {  // (this file's own: set above, or the source's for PowerInfer's)
        if (options_.kind == gguf::file_kind::powerinfer) w_.set_alignment(f_.alignment());
        continue;
      }
      if (!options_.act_thresholds.empty() && (kv.key == activation_thresholds_key || kv.key == sparsity_target_key)) continue;
      w_.set_value(kv.key, kv.val);
    }
    if (!options_.act_thresholds.empty()) {
      if (options_.act_thresholds.size() != static_cast<size_t>(hp_.n_layer))
        throw std::invalid_argument(fmt::format("{} activation thresholds for {} layers", options_.act_thresholds.size(), hp_.n_layer));
      if (options_.kind == gguf::file_kind::powerinfer)
        throw std::invalid_argument("PowerInfer's files have no activation thresholds: a thresholded model is written as hotcold's GGUF");
      w_.set_array(activation_thresholds_key, std::span<const float>(options_.act_thresholds));
      w_.set_f32(sparsity_target_key, options_.sparsity_target);
    }
    thresholds();
    if (!f_.find(activation_key)) w_.set_string(activation_key, activation_name(hp_.act));
  }

  // PowerInfer files hold one threshold for all layers. Per-layer thresholds of one sign are folded
  // into fc2: score >= t_l is c score >= c t_l for c > 0, so with c_l = T / t_l every layer keeps its
  // own choice under the common T. Mixed signs (or a zero) fall back to the lowest threshold, which
  // keeps every layer's recall.
  void thresholds() {
    fc2_scale_.assign(predictors_.size(), 1.0f);
    if (options_.kind == gguf::file_kind::powerinfer) {
      float lo = predictors_.front().threshold, hi = lo;
      for (const auto& p : predictors_) lo = std::min(lo, p.threshold), hi = std::max(hi, p.threshold);
      const bool one_sign = (lo < 0 && hi < 0) || (lo > 0 && hi > 0);
      const float common = one_sign ? (lo < 0 ? lo : hi) : lo;
      if (one_sign)
        for (size_t l = 0; l < predictors_.size(); ++l) fc2_scale_[l] = common / predictors_[l].threshold;
      w_.set_f32(powerinfer_threshold_key, common);
      return;
    }
    std::vector<float> thresholds;
    for (const auto& p : predictors_) thresholds.push_back(p.threshold);
    w_.set_array(sparse_thresholds_key, std::span<const float>(thresholds));
    // A thresholded model's predictors estimate pre-activations from the FFN's normalized input (a file
    // thresholded already says so in hp.pred_input).
    w_.set_string(predictor_input_key, predictor_input_name(options_.act_thresholds.empty() ? hp_.pred_input : predictor_input::ffn_input));
  }

  // Every tensor but the FFN's as it is.
  void other_tensors() {
    for (const auto& t : f_.tensors()) {
      std::string name(t.name);
      for (const char* sparse : {".ffn_down_t.weight", ".ffn_bundle.weight", ".fc1.weight"})
        if (name.ends_with(sparse)) throw std::invalid_argument(fmt::format("{}: {} is a sparse file already; prepare reads a dense one", path_, name));
      if (name.ends_with(".ffn_down.weight") || name.ends_with(".ffn_up.weight") || name.ends_with(".ffn_gate.weight")) continue;  // ffn_layer
      std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
      w_.add_tensor(name, t.type, ne, {t.data, static_cast<size_t>(t.n_bytes)});
    }
  }

  const gguf::tensor_info& need(const std::string& name) const {
    const auto* t = f_.find_tensor(name);
    if (!t) throw std::invalid_argument(fmt::format("{}: tensor {} is missing", path_, name));
    return *t;
  }

  // The neuron at position i of layer l's order.
  int64_t source(int64_t l, int64_t i) const { return options_.order.empty() ? i : options_.order[static_cast<size_t>(l)][static_cast<size_t>(i)]; }

  void ffn_layer(int64_t l) {
    const std::string b = fmt::format("blk.{}.", l);
    const gguf::tensor_info& up_t = need(b + "ffn_up.weight");
    const bool fused = hp_.gated_ffn && !f_.find_tensor(b + "ffn_gate.weight");  // phi3: ffn_up holds gate, then up
    std::optional<rows> gate;
    if (hp_.gated_ffn) gate = fused ? rows_of(up_t, 0) : rows_of(need(b + "ffn_gate.weight"), 0);
    const rows up = rows_of(up_t, fused ? hp_.n_ff : 0);
    if (!options_.order.empty() && options_.order[static_cast<size_t>(l)].size() != static_cast<size_t>(hp_.n_ff))
      throw std::invalid_argument(fmt::format("layer {}: a neuron order of {} for {} neurons", l, options_.order[static_cast<size_t>(l)].size(), hp_.n_ff));
    const std::optional<rows> down_t = down_rows(l, b);
    const int64_t n_embd = hp_.n_embd;
    const bool thresholded = !options_.act_thresholds.empty() || !hp_.act_threshold.empty();
    const bool gate_in = gate && !thresholded;
    const bool one_type = down_t && up.type == down_t->type && (!gate_in || gate->type == up.type);
    if (options_.bundle && one_type) {
      if (gate_in) neuron_rows(l, b + "ffn_bundle.weight", {&*gate, &up, &*down_t}, 3 * n_embd);
      else neuron_rows(l, b + "ffn_bundle.weight", {&up, &*down_t}, 2 * n_embd);
      if (gate && !gate_in) neuron_rows(l, b + "ffn_gate.weight", {&*gate}, n_embd);
    } else {
      if (fused) {  // kept fused, each half in the order
        std::vector<uint8_t> out;
        for (const rows* r : std::initializer_list<const rows*>{&*gate, &up})
          for (int64_t i = 0; i < hp_.n_ff; ++i) out.insert(out.end(), r->row(source(l, i)), r->row(source(l, i)) + r->row_bytes);
        storage_.push_back(std::move(out));
        int64_t ne[] = {n_embd, 2 * hp_.n_ff};
        w_.add_tensor(b + "ffn_up.weight", up.type, ne, storage_.back());
      } else {
        if (gate) neuron_rows(l, b + "ffn_gate.weight", {&*gate}, n_embd);
        neuron_rows(l, b + "ffn_up.weight", {&up}, n_embd);
      }
      if (down_t) neuron_rows(l, b + "ffn_down_t.weight", {&*down_t}, n_embd);
    }
    if (!options_.order.empty()) {
      const auto& order = options_.order[static_cast<size_t>(l)];
      storage_.emplace_back(reinterpret_cast<const uint8_t*>(order.data()), reinterpret_cast<const uint8_t*>(order.data() + hp_.n_ff));
      int64_t ne[] = {hp_.n_ff};
      w_.add_tensor(b + "ffn_order", tensor_type::i32, ne, storage_.back());
    }
  }

  // ffn_down (n_embd rows of n_ff) as ffn_down_t (n_ff rows of n_embd), returned to be written in the
  // order; or with down blocks in its own orientation, its columns (the neurons) in the order, written here.
  std::optional<rows> down_rows(int64_t l, const std::string& b) {
    const gguf::tensor_info& down = need(b + "ffn_down.weight");
    const int64_t n_ff = down.ne[0], n_embd = down.ne[1];
    if (n_ff != hp_.n_ff || n_embd != hp_.n_embd)
      throw std::invalid_argument(fmt::format("{}: {}ffn_down.weight is [{}, {}], expected [{}, {}]", path_, b, n_ff, n_embd, hp_.n_ff, hp_.n_embd));
    tensor_view v;
    v.type = down.type, v.ne0 = n_ff, v.ne1 = n_embd;
    v.row_bytes = static_cast<size_t>(down.n_bytes / static_cast<uint64_t>(n_embd));
    v.data = down.data;
    std::vector<float> row(static_cast<size_t>(n_ff)), out(static_cast<size_t>(n_ff * n_embd));
    const int64_t ne[] = {n_ff, n_embd};
    if (options_.down_blocks && options_.order.empty()) {
      w_.add_tensor(b + "ffn_down.weight", down.type, ne, {down.data, static_cast<size_t>(down.n_bytes)});
      return std::nullopt;
    }
    for (int64_t r = 0; r < n_embd; ++r) {
      dequantize_row(v, r, row.data());
      for (int64_t c = 0; c < n_ff; ++c) {
        if (options_.down_blocks) out[static_cast<size_t>(r * n_ff + c)] = row[static_cast<size_t>(source(l, c))];
        else out[static_cast<size_t>(c * n_embd + r)] = row[static_cast<size_t>(c)];
      }
    }
    storage_.push_back(convert_rows(out, options_.down_blocks ? n_ff : n_embd, down.type));
    if (options_.down_blocks) {
      w_.add_tensor(b + "ffn_down.weight", down.type, ne, storage_.back());
      return std::nullopt;
    }
    return rows{down.type, storage_.back().size() / static_cast<size_t>(n_ff), storage_.back().data()};
  }

  // The rows of `parts`, neuron after neuron in the order, each neuron's parts side by side.
  void neuron_rows(int64_t l, const std::string& name, const std::vector<const rows*>& parts, int64_t ne0) {
    size_t rb = 0;
    for (const rows* r : parts) rb += r->row_bytes;
    std::vector<uint8_t> out(rb * static_cast<size_t>(hp_.n_ff));
    for (int64_t i = 0; i < hp_.n_ff; ++i) {
      uint8_t* at = out.data() + static_cast<size_t>(i) * rb;
      for (const rows* r : parts) at = std::copy_n(r->row(source(l, i)), r->row_bytes, at);
    }
    storage_.push_back(std::move(out));
    int64_t ne[] = {ne0, hp_.n_ff};
    w_.add_tensor(name, parts.front()->type, ne, storage_.back());
  }

  void predictor(int64_t l) {
    const auto& p = predictors_[static_cast<size_t>(l)];
    if (p.fc1.size() != static_cast<size_t>(p.rank * hp_.n_embd) || p.fc2.size() != static_cast<size_t>(hp_.n_ff * p.rank))
      throw std::invalid_argument(fmt::format("layer {}: predictor sizes do not match rank {}", l, p.rank));
    const tensor_type t1 = predictor_storage_type(options_.predictor_type, hp_.n_embd), t2 = predictor_storage_type(options_.predictor_type, p.rank);
    storage_.push_back(convert_rows(p.fc1, hp_.n_embd, t1));
    int64_t ne1[] = {hp_.n_embd, p.rank};
    w_.add_tensor(fmt::format("blk.{}.fc1.weight", l), t1, ne1, storage_.back());
    std::vector<float> fc2(p.fc2.size());
    for (int64_t i = 0; i < hp_.n_ff; ++i)  // neuron i's scores: the row of the neuron now at i
      for (int64_t k = 0; k < p.rank; ++k)
        fc2[static_cast<size_t>(i * p.rank + k)] = p.fc2[static_cast<size_t>(source(l, i) * p.rank + k)] * fc2_scale_[static_cast<size_t>(l)];
    storage_.push_back(convert_rows(fc2, p.rank, t2));
    int64_t ne2[] = {p.rank, hp_.n_ff};
    w_.add_tensor(fmt::format("blk.{}.fc2.weight", l), t2, ne2, storage_.back());
  }

  const std::string& path_;
  gguf::file f_;
  hparams hp_;
  const std::vector<layer_predictor>& predictors_;
  const sparse_file_options& options_;
  gguf::writer w_;
  std::vector<float> fc2_scale_;
  std::vector<std::vector<uint8_t>> storage_;  // what the writer's tensors point at until it writes
};

}  // namespace

void write_sparse_model(const std::string& dense_path, const std::string& out_path, const std::vector<layer_predictor>& predictors,
                        const sparse_file_options& options) {
  sparse_writer(dense_path, predictors, options).write(out_path);
}

}  // namespace hotcold::tools
