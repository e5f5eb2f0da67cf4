#include "tools/sparse_file.hpp"

#include <algorithm>
#include <numeric>
#include <optional>

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "model/arch.hpp"
#include "engine/forward.hpp"
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

  if (options.kind == gguf::file_kind::powerinfer && (options.bundle || !options.order.empty() || options.down_blocks))
    throw std::invalid_argument("PowerInfer's files keep their own layout: no bundles, neuron order or down blocks");
  if (!options.order.empty() && options.order.size() != static_cast<size_t>(hp.n_layer))
    throw std::invalid_argument(fmt::format("a neuron order for {} layers of {}", options.order.size(), hp.n_layer));
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(f.tensors().size() + 4 * predictors.size());
  for (const auto& t : f.tensors()) {
    std::string name(t.name);
    for (const char* sparse : {".ffn_down_t.weight", ".ffn_bundle.weight", ".fc1.weight"})
      if (name.ends_with(sparse)) throw std::invalid_argument(fmt::format("{}: {} is a sparse file already; prepare reads a dense one", dense_path, name));
    if (name.ends_with(".ffn_down.weight") || name.ends_with(".ffn_up.weight") || name.ends_with(".ffn_gate.weight")) continue;  // below
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    w.add_tensor(name, t.type, ne, {t.data, static_cast<size_t>(t.n_bytes)});
  }
  const bool thresholded = !options.act_thresholds.empty() || !hp.act_threshold.empty();
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    auto need = [&](const std::string& n) -> const gguf::tensor_info& {
      const auto* t = f.find_tensor(b + n);
      if (!t) throw std::invalid_argument(fmt::format("{}: tensor {}{} is missing", dense_path, b, n));
      return *t;
    };
    // n_ff rows of one type: a matrix's rows from `first` on.
    struct rows {
      tensor_type type;
      size_t row_bytes;
      const uint8_t* data;
      const uint8_t* row(int64_t i) const { return data + static_cast<size_t>(i) * row_bytes; }
    };
    auto rows_of = [&](const gguf::tensor_info& t, int64_t first) {
      const size_t rb = static_cast<size_t>(t.n_bytes / static_cast<uint64_t>(t.ne[1]));
      return rows{t.type, rb, t.data + static_cast<size_t>(first) * rb};
    };
    const gguf::tensor_info& up_t = need("ffn_up.weight");
    const bool fused = hp.gated_ffn && !f.find_tensor(b + "ffn_gate.weight");  // phi3: ffn_up holds gate, then up
    std::optional<rows> gate;
    if (hp.gated_ffn) gate = fused ? rows_of(up_t, 0) : rows_of(need("ffn_gate.weight"), 0);
    const rows up = rows_of(up_t, fused ? hp.n_ff : 0);
    // ffn_down is n_embd rows of n_ff; ffn_down_t is n_ff rows of n_embd.
    const gguf::tensor_info& down = need("ffn_down.weight");
    const int64_t n_ff = down.ne[0], n_embd = down.ne[1];
    if (n_ff != hp.n_ff || n_embd != hp.n_embd)
      throw std::invalid_argument(fmt::format("{}: {}ffn_down.weight is [{}, {}], expected [{}, {}]", dense_path, b, n_ff, n_embd, hp.n_ff, hp.n_embd));
    const std::vector<int32_t>* order = options.order.empty() ? nullptr : &options.order[static_cast<size_t>(l)];
    if (order && order->size() != static_cast<size_t>(n_ff))
      throw std::invalid_argument(fmt::format("layer {}: a neuron order of {} for {} neurons", l, order->size(), n_ff));
    auto source = [&](int64_t i) { return order ? (*order)[static_cast<size_t>(i)] : i; };
    tensor_view v;
    v.type = down.type;
    v.ne0 = n_ff;
    v.ne1 = n_embd;
    v.row_bytes = static_cast<size_t>(down.n_bytes / static_cast<uint64_t>(n_embd));
    v.data = down.data;
    std::vector<float> row(static_cast<size_t>(n_ff));
    std::optional<rows> down_t;
    if (options.down_blocks) {
      // ffn_down's own orientation: its columns (the neurons) in the order; as it is without one.
      const int64_t ne[] = {n_ff, n_embd};
      if (!order) {
        w.add_tensor(b + "ffn_down.weight", down.type, ne, {down.data, static_cast<size_t>(down.n_bytes)});
      } else {
        std::vector<float> reordered(static_cast<size_t>(n_ff * n_embd));
        for (int64_t r = 0; r < n_embd; ++r) {
          dequantize_row(v, r, row.data());
          for (int64_t c = 0; c < n_ff; ++c) reordered[static_cast<size_t>(r * n_ff + c)] = row[static_cast<size_t>(source(c))];
        }
        storage.push_back(convert_rows(reordered, n_ff, down.type));
        w.add_tensor(b + "ffn_down.weight", down.type, ne, storage.back());
      }
    } else {
      std::vector<float> transposed(static_cast<size_t>(n_ff * n_embd));
      for (int64_t r = 0; r < n_embd; ++r) {
        dequantize_row(v, r, row.data());
        for (int64_t c = 0; c < n_ff; ++c) transposed[static_cast<size_t>(c * n_embd + r)] = row[static_cast<size_t>(c)];
      }
      storage.push_back(convert_rows(transposed, n_embd, down.type));
      down_t = rows{down.type, storage.back().size() / static_cast<size_t>(n_ff), storage.back().data()};
    }
    // The rows of `parts`, neuron after neuron in the order, each neuron's parts side by side.
    auto write = [&](const std::string& name, const std::vector<const rows*>& parts, int64_t ne0) {
      size_t rb = 0;
      for (const rows* r : parts) rb += r->row_bytes;
      std::vector<uint8_t> out(rb * static_cast<size_t>(n_ff));
      for (int64_t i = 0; i < n_ff; ++i) {
        uint8_t* at = out.data() + static_cast<size_t>(i) * rb;
        for (const rows* r : parts) at = std::copy_n(r->row(source(i)), r->row_bytes, at);
      }
      storage.push_back(std::move(out));
      int64_t ne[] = {ne0, n_ff};
      w.add_tensor(b + name, parts.front()->type, ne, storage.back());
    };
    const bool gate_in = gate && !thresholded;
    const bool one_type = down_t && up.type == down_t->type && (!gate_in || gate->type == up.type);
    if (options.bundle && one_type) {
      if (gate_in) write("ffn_bundle.weight", {&*gate, &up, &*down_t}, 3 * n_embd);
      else write("ffn_bundle.weight", {&up, &*down_t}, 2 * n_embd);
      if (gate && !gate_in) write("ffn_gate.weight", {&*gate}, n_embd);
    } else {
      if (fused) {  // kept fused, each half in the order
        std::vector<uint8_t> out;
        for (const rows* r : std::initializer_list<const rows*>{&*gate, &up})
          for (int64_t i = 0; i < n_ff; ++i) out.insert(out.end(), r->row(source(i)), r->row(source(i)) + r->row_bytes);
        storage.push_back(std::move(out));
        int64_t ne[] = {n_embd, 2 * n_ff};
        w.add_tensor(b + "ffn_up.weight", up.type, ne, storage.back());
      } else {
        if (gate) write("ffn_gate.weight", {&*gate}, n_embd);
        write("ffn_up.weight", {&up}, n_embd);
      }
      if (down_t) write("ffn_down_t.weight", {&*down_t}, n_embd);
    }
    if (order) {
      storage.emplace_back(reinterpret_cast<const uint8_t*>(order->data()), reinterpret_cast<const uint8_t*>(order->data() + n_ff));
      int64_t ne[] = {n_ff};
      w.add_tensor(b + "ffn_order", tensor_type::i32, ne, storage.back());
    }
  }
  for (int64_t l = 0; l < hp.n_layer; ++l) {
    const auto& p = predictors[static_cast<size_t>(l)];
    if (p.fc1.size() != static_cast<size_t>(p.rank * hp.n_embd) || p.fc2.size() != static_cast<size_t>(hp.n_ff * p.rank))
      throw std::invalid_argument(fmt::format("layer {}: predictor sizes do not match rank {}", l, p.rank));
    const tensor_type t1 = predictor_storage_type(options.predictor_type, hp.n_embd), t2 = predictor_storage_type(options.predictor_type, p.rank);
    storage.push_back(convert_rows(p.fc1, hp.n_embd, t1));
    int64_t ne1[] = {hp.n_embd, p.rank};
    w.add_tensor(fmt::format("blk.{}.fc1.weight", l), t1, ne1, storage.back());
    std::vector<float> fc2(p.fc2.size());
    for (int64_t i = 0; i < hp.n_ff; ++i) {  // neuron i's scores: the row of the neuron now at i
      const int64_t from = options.order.empty() ? i : options.order[static_cast<size_t>(l)][static_cast<size_t>(i)];
      for (int64_t k = 0; k < p.rank; ++k)
        fc2[static_cast<size_t>(i * p.rank + k)] = p.fc2[static_cast<size_t>(from * p.rank + k)] * fc2_scale[static_cast<size_t>(l)];
    }
    storage.push_back(convert_rows(fc2, p.rank, t2));
    int64_t ne2[] = {p.rank, hp.n_ff};
    w.add_tensor(fmt::format("blk.{}.fc2.weight", l), t2, ne2, storage.back());
  }
  auto dir = std::filesystem::path(out_path).parent_path();
  if (!dir.empty()) std::filesystem::create_directories(dir);
  w.write(out_path);
}

}  // namespace hotcold::tools
