#include "actors/hot_cold_ffn.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "model/neuron_ops.hpp"

namespace hotcold::actors {

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot,
                           int cold_threads)
    : model_(std::move(m)), hot_(std::move(hot)), own_cold_(std::make_unique<thread_pool>(cold_threads, "hotcold-cold")), cold_(own_cold_.get()) {
  init(placement);
}

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, thread_pool& cold)
    : model_(std::move(m)), hot_(std::move(hot)), cold_(&cold) {
  init(placement);
}

void hot_cold_ffn::init(const placement_data& placement) {
  const hparams& hp = model_->hp();
  if (static_cast<int64_t>(placement.hot.size()) != hp.n_layer)
    throw std::invalid_argument(fmt::format("the placement has {} layers, the model {}", placement.hot.size(), hp.n_layer));
  // Copies run on the device's queue: if a later layer does not fit, the earlier copies must finish
  // before their buffers go away with this half-built object.
  try {
    upload_layers(placement);
  } catch (...) {
    hot_->synchronize();
    throw;
  }
  hot_->synchronize();  // the copies read the model's memory: done before anyone computes
  hot_out_.resize(static_cast<size_t>(hp.n_embd));
  cold_acc_.resize(static_cast<size_t>(cold_->size() * hp.n_embd));
  xq_.resize(static_cast<size_t>(hp.n_embd / kernels::qk8_0 + 1));
}

void hot_cold_ffn::upload_layers(const placement_data& placement) {
  const hparams& hp = model_->hp();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const layer_weights& l = model_->weights().layers[static_cast<size_t>(il)];
    if (!l.ffn_down_t) throw std::invalid_argument(fmt::format("{}: layer {} has no ffn_down_t; the hot/cold split needs a sparse file", model_->path(), il));
    const auto& ids = placement.hot[static_cast<size_t>(il)];
    hot_layer h;
    h.slot.assign(static_cast<size_t>(hp.n_ff), -1);
    // Copies rows `ids` of w into one device buffer, in placement order: row k is neuron ids[k].
    auto upload = [&](const tensor_view& w, const char* what) {
      tensor_view v = w;
      if (!w || ids.empty()) return tensor_view{};
      auto buf = hot_->allocate(w.row_bytes * ids.size(), fmt::format("layer {} hot {} rows", il, what));
      for (size_t k = 0; k < ids.size(); ++k)
        hot_->copy_in(*buf, k * w.row_bytes, w.row(ids[k]), w.row_bytes);
      v.ne1 = static_cast<int64_t>(ids.size());
      v.data = static_cast<const uint8_t*>(buf->data());
      hot_bytes_ += buf->size();
      buffers_.push_back(std::move(buf));
      return v;
    };
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0 || ids[k] >= hp.n_ff) throw std::invalid_argument(fmt::format("layer {}: hot neuron {} is outside 0..{}", il, ids[k], hp.n_ff - 1));
      h.slot[static_cast<size_t>(ids[k])] = static_cast<int32_t>(k);
    }
    if (hp.gated_ffn) h.gate = upload(l.ffn_gate, "gate");
    h.up = upload(l.ffn_up, "up");
    h.down_t = upload(l.ffn_down_t, "down");
    layers_.push_back(std::move(h));
  }
}

void hot_cold_ffn::run(int64_t step, int64_t layer, const float* in, std::span<const int32_t> chosen, float* hidden, float* out) {
  const hparams& hp = model_->hp();
  const layer_weights& l = model_->weights().layers[static_cast<size_t>(layer)];
  const hot_layer& h = layers_[static_cast<size_t>(layer)];
  const int64_t d = hp.n_embd;
  hot_ids_.clear(), hot_slots_.clear(), cold_ids_.clear();
  for (int32_t i : chosen) {
    const int32_t s = h.slot[static_cast<size_t>(i)];
    if (s >= 0) hot_ids_.push_back(i), hot_slots_.push_back(s);
    else cold_ids_.push_back(i);
  }
  computed_.hot += static_cast<int64_t>(hot_ids_.size());
  computed_.cold += static_cast<int64_t>(cold_ids_.size());
  if (wants_q8_input(l.ffn_up.type)) kernels::quantize_row_q8_0(in, xq_.data(), d);

  // Hot side, on the device's queue: rows from device memory, its own partial sum.
  std::fill(hot_out_.begin(), hot_out_.end(), 0.0f);
  devices::event hot_done;
  if (!hot_ids_.empty())
    hot_done = hot_->submit([&] {
      trace_scope span(trace_, "hot_ffn", step, layer);
      token_neurons(hp, h.gate, h.up, h.down_t, hot_ids_.data(), hot_slots_.data(), static_cast<int64_t>(hot_ids_.size()), in, xq_.data(), hidden,
                    hot_out_.data());
    });

  // Cold side, meanwhile: contiguous shares of the cold neurons, one accumulator per worker.
  const int threads = cold_->size();
  const int64_t n_cold = static_cast<int64_t>(cold_ids_.size());
  cold_->parallel_for(threads, [&](int64_t t0, int64_t t1) {
    trace_scope span(trace_, "cold_ffn", step, layer);
    for (int64_t t = t0; t < t1; ++t) {
      float* acc = cold_acc_.data() + t * d;
      std::fill(acc, acc + d, 0.0f);
      const int64_t k0 = n_cold * t / threads, k1 = n_cold * (t + 1) / threads;
      token_neurons(hp, l.ffn_gate, l.ffn_up, l.ffn_down_t, cold_ids_.data() + k0, cold_ids_.data() + k0, k1 - k0, in, xq_.data(), hidden, acc);
    }
  });

  if (hot_done) hot_done->wait();
  for (int64_t j = 0; j < d; ++j) {
    float s = hot_out_[static_cast<size_t>(j)];
    for (int t = 0; t < threads; ++t) s += cold_acc_[static_cast<size_t>(t * d + j)];
    out[j] = s;
  }
}

void hot_cold_ffn::run_batch(int64_t step, int64_t layer, const batch_ffn_input& x, std::span<const int32_t> union_of_chosen, float* hidden,
                             float* out) {
  const hparams& hp = model_->hp();
  const layer_weights& l = model_->weights().layers[static_cast<size_t>(layer)];
  const hot_layer& h = layers_[static_cast<size_t>(layer)];
  const int64_t d = x.d, n = x.n;
  hot_ids_.clear(), hot_slots_.clear(), cold_ids_.clear();
  for (int32_t i : union_of_chosen) {
    const int32_t s = h.slot[static_cast<size_t>(i)];
    if (s >= 0) hot_ids_.push_back(i), hot_slots_.push_back(s);
    else cold_ids_.push_back(i);
  }
  computed_.hot += static_cast<int64_t>(hot_ids_.size());
  computed_.cold += static_cast<int64_t>(cold_ids_.size());

  // Hot side on the device's queue (rows at their slots in device memory), cold side meanwhile.
  batch_hot_out_.assign(static_cast<size_t>(n * d), 0.0f);
  devices::event hot_done;
  if (!hot_ids_.empty())
    hot_done = hot_->submit([&] {
      trace_scope span(trace_, "hot_ffn", step, layer, 1);
      batch_neurons(hp, h.gate, h.up, h.down_t, hot_ids_.data(), hot_slots_.data(), static_cast<int64_t>(hot_ids_.size()), x, hidden,
                    batch_hot_out_.data());
    });
  const int threads = cold_->size();
  batch_cold_acc_.assign(static_cast<size_t>(threads * n * d), 0.0f);
  const int64_t n_cold = static_cast<int64_t>(cold_ids_.size());
  cold_->parallel_for(threads, [&](int64_t t0, int64_t t1) {
    trace_scope span(trace_, "cold_ffn", step, layer, 1);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t k0 = n_cold * t / threads, k1 = n_cold * (t + 1) / threads;
      batch_neurons(hp, l.ffn_gate, l.ffn_up, l.ffn_down_t, cold_ids_.data() + k0, cold_ids_.data() + k0, k1 - k0, x, hidden,
                    batch_cold_acc_.data() + t * n * d);
    }
  });
  if (hot_done) hot_done->wait();
  for (int64_t k = 0; k < n * d; ++k) {
    float s = batch_hot_out_[static_cast<size_t>(k)];
    for (int t = 0; t < threads; ++t) s += batch_cold_acc_[static_cast<size_t>(t * n * d + k)];
    out[k] = s;
  }
}

}  // namespace hotcold::actors
