#include "engine/hot_cold_ffn.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/matmul.hpp"
#include "engine/sparse_ffn.hpp"
#include "engine/trace.hpp"

namespace hotcold {

hot_rows::hot_rows(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, ram_tier* disk)
    : model_(std::move(m)), hot_(std::move(hot)) {
  const hparams& hp = model_->hp();
  if (static_cast<int64_t>(placement.hot.size()) != hp.n_layer)
    throw std::invalid_argument(fmt::format("the placement has {} layers, the model {}", placement.hot.size(), hp.n_layer));
  const layer_weights& l0 = model_->weights().layers.front();
  for (const tensor_view* w : {&l0.ffn_gate, &l0.ffn_up, &l0.ffn_down_t})
    if (*w && !hot_->supports(devices::operation::ffn_rows, w->type))
      throw std::invalid_argument(fmt::format("{}: the device does not compute FFN rows of type {} ({}'s); use --device cpu or sim", hot_->name(),
                                              tensor_type_name(w->type), model_->path()));
  // A device that computes as a GPU does reads one type for a neuron's gate, up and down rows (its
  // FFN-rows job); a file whose rows differ (a sparse file made from one whose down matrix was
  // quantized apart) would be read as garbage there. The CPU's routine on a host device reads each.
  if (!hot_->runs_host_work())
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const layer_weights& l = model_->weights().layers[static_cast<size_t>(il)];
      if ((l.ffn_gate && l.ffn_gate.type != l.ffn_up.type) || (l.ffn_down_t && l.ffn_down_t.type != l.ffn_up.type))
        throw std::invalid_argument(fmt::format("{}: layer {}'s FFN rows are of mixed types (gate {}, up {}, down {}); the device's FFN-rows job reads one type "
                                                "for all three: use --device sim (without --sim-kernels) or cpu, or a file whose FFN rows share a type",
                                                hot_->name(), il, l.ffn_gate ? tensor_type_name(l.ffn_gate.type) : "-", tensor_type_name(l.ffn_up.type),
                                                l.ffn_down_t ? tensor_type_name(l.ffn_down_t.type) : "-"));
    }
  // Copies run on the device's queue: if a later layer does not fit, the earlier copies must finish
  // before their buffers go away with this half-built object.
  try {
    upload(placement, disk);
    hot_->reserve(devices::operation::ffn_rows, max_step_tokens, hp.n_embd, hp.n_ff);
  } catch (...) {
    hot_->synchronize();
    throw;
  }
  hot_->synchronize();  // the copies read the model's memory: done before anyone computes
}

void hot_rows::upload(const placement_data& placement, ram_tier* disk) {
  const hparams& hp = model_->hp();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const layer_weights& l = model_->weights().layers[static_cast<size_t>(il)];
    if (!l.ffn_down_t) throw std::invalid_argument(fmt::format("{}: layer {} has no ffn_down_t; the hot/cold split needs a sparse file with the down rows of each neuron (prepare --down-layout rows)", model_->path(), il));
    const auto& ids = placement.hot[static_cast<size_t>(il)];
    for (int32_t id : ids)
      if (id < 0 || id >= hp.n_ff) throw std::invalid_argument(fmt::format("layer {}: hot neuron {} is outside 0..{}", il, id, hp.n_ff - 1));
    // (rows left in the file: read for the copy, where the tier puts them)
    std::optional<ram_tier::use> in;
    if (disk && !ids.empty()) in.emplace(disk->rows(il, ids));
    const std::span<const int32_t> rows = in ? in->rows_of(ids) : std::span<const int32_t>(ids);
    layer_rows h;
    h.slot.assign(static_cast<size_t>(hp.n_ff), -1);
    // Copies rows `ids` of w into one device buffer, in placement order: row k is neuron ids[k].
    std::vector<uint8_t> staging;
    auto copy_rows = [&](const tensor_view& w, const char* what) {
      tensor_view v = w;
      if (!w || ids.empty()) return tensor_view{};
      auto buf = hot_->allocate(w.row_bytes * ids.size(), fmt::format("layer {} hot {} rows", il, what));
      // Gathered into one staging buffer and copied in as one transfer (a copy a row cost a
      // synchronous transfer each on a GPU); the staging memory lives until the copy is done.
      staging.resize(w.row_bytes * ids.size());
      for (size_t k = 0; k < ids.size(); ++k) std::memcpy(staging.data() + k * w.row_bytes, w.row(rows[k]), w.row_bytes);
      hot_->copy_in(*buf, 0, staging.data(), staging.size())->wait();
      v.ne1 = static_cast<int64_t>(ids.size());
      v.data = static_cast<const uint8_t*>(buf->data());
      v.stride = 0;  // packed (a bundle's rows are gathered apart)
      bytes_ += buf->size();
      buffers_.push_back(std::move(buf));
      return v;
    };
    for (size_t k = 0; k < ids.size(); ++k) h.slot[static_cast<size_t>(ids[k])] = static_cast<int32_t>(k);
    if (hp.gated_ffn) h.gate = copy_rows(l.ffn_gate, "gate");
    h.up = copy_rows(l.ffn_up, "up");
    h.down_t = copy_rows(l.ffn_down_t, "down");
    layers_.push_back(std::move(h));
  }
}

void hot_rows::split(int64_t layer, std::span<const int32_t> chosen, ffn_split& out) const {
  const layer_rows& h = layers_[static_cast<size_t>(layer)];
  out.hot_ids.clear(), out.hot_slots.clear(), out.cold_ids.clear();
  for (int32_t i : chosen) {
    const int32_t s = h.slot[static_cast<size_t>(i)];
    if (s >= 0) out.hot_ids.push_back(i), out.hot_slots.push_back(s);
    else out.cold_ids.push_back(i);
  }
}


devices::event hot_rows::submit(int64_t step, int64_t layer, const ffn_split& s, const batch_ffn_input& x, float* hidden, float* out,
                                trace_recorder* trace, const timing& timed) const {
  const layer_rows& h = layers_[static_cast<size_t>(layer)];
  const hparams& hp = model_->hp();
  devices::ffn_rows_job job;
  job.type = h.up.type;
  job.gate = h.gate.data, job.up = h.up.data, job.down_t = h.down_t.data;
  job.gated = hp.gated_ffn;
  job.act = hp.act;
  job.act_threshold = hp.act_threshold_of(layer);
  job.n = x.n, job.d = x.d, job.n_ff = x.n_ff;
  job.x = x.in;
  job.chosen = x.n == 1 ? nullptr : x.chosen;
  job.ids = s.hot_ids.data(), job.slots = s.hot_slots.data(), job.count = static_cast<int64_t>(s.hot_ids.size());
  job.hidden = hidden, job.out = out;
  // The CPU's routine, for a device that computes with host code.
  job.host = [&hp, &h, &s, x, hidden, out, t = job.act_threshold] {
    std::fill(out, out + x.n * x.d, 0.0f);
    batch_neurons(hp, t, {h.gate, h.up, h.down_t}, {s.hot_ids.data(), s.hot_slots.data(), static_cast<int64_t>(s.hot_ids.size())}, x, hidden, out);
  };
  return hot_->submit([this, job = std::move(job), trace, timed, step, layer, n = x.n] {
    trace_scope span(trace, step_part::hot_ffn, step, layer, n);
    const auto t0 = std::chrono::steady_clock::now();
    hot_->compute(job);
    if (timed) timed(layer, std::chrono::steady_clock::now() - t0);
  });
}

void cold_share(thread_pool& pool, const model& m, const trace_span& at, const cold_neurons& cold, const batch_ffn_input& x, float* hidden,
                std::vector<float>& acc, float* out) {
  const int64_t layer = at.layer;
  const trace_span span{at.trace, step_part::cold_ffn, at.step, layer, x.n};
  const hparams& hp = m.hp();
  const layer_weights& l = m.weights().layers[static_cast<size_t>(layer)];
  const float t = hp.act_threshold_of(layer);
  const int64_t n = x.n, n_ff = hp.n_ff;
  if (t > 0.0f && n >= 16 && cold.set.count == n_ff && hp.gated_ffn && transposed_product_reads(l.ffn_down_t)) {
    trace_scope interval(span);
    if (cold.disk) cold.disk->ready();  // (the products read the tensors whole: every row in first)
    // A prompt batch of a thresholded layer chooses every neuron for some token (each keeps about
    // half): gate and up of every neuron as matrix products, each token's values kept for the neurons
    // it chose (under the rule), the down rows as one product — what the neuron-by-neuron pass
    // computes, at the products' speed (~1B SiLU F16, S = 0.5: pp128 ~100 tokens/s neuron by neuron).
    thread_local std::vector<float> g;
    thread_local std::vector<kernels::block_q8_0> xq;
    g.resize(static_cast<size_t>(n * n_ff));
    const tensor_view* ws[2] = {&l.ffn_gate, &l.ffn_up};
    float* ys[2] = {g.data(), hidden};
    matmul_same_input(pool, ws, x.in, n, ys, xq);
    // (The rule and the choice as masks: both are coin tosses a branch would miss half the time.)
    hidden_values(hp, t, g.data(), hidden, hidden, n * n_ff);
    for (int64_t k = 0; k < n * n_ff; ++k) hidden[k] = kept(hidden[k], x.chosen[k] != 0);
    transposed_product(pool, l.ffn_down_t, hidden, n, out);
    return;
  }
  neuron_shards pieces(cold.set.count, pool.size());
  // (a piece whose rows are still being read waits for them; one whose read failed is skipped, and the
  // error thrown after)
  run_pieces(
      pool, pieces, x.n * x.d, acc, out,
      [&](int64_t k0, int64_t k1, float* a) {
        if (!cold.disk || cold.disk->ready(k0, k1)) batch_neurons(hp, t, {l.ffn_gate, l.ffn_up, l.ffn_down_t}, cold.set.from(k0, k1), x, hidden, a);
      },
      span);
  if (cold.disk) cold.disk->ready();
}

std::optional<ram_tier::use> cold_rows(ram_tier* tier, int64_t layer, std::span<const int32_t> cold_ids, int64_t n_ff) {
  if (!tier) return std::nullopt;
  return static_cast<int64_t>(cold_ids.size()) == n_ff ? tier->all_rows(layer) : tier->rows(layer, cold_ids, true);
}

cold_neurons cold_of(std::span<const int32_t> cold_ids, const std::optional<ram_tier::use>& rows) {
  return {{cold_ids.data(), rows ? rows->rows_of(cold_ids).data() : cold_ids.data(), static_cast<int64_t>(cold_ids.size())}, rows ? &*rows : nullptr};
}

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, std::shared_ptr<const hot_rows> rows, thread_pool& cold)
    : model_(std::move(m)), rows_(std::move(rows)), cold_(&cold), costs_(*model_) {}

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, int cold_threads)
    : model_(m), rows_(std::make_shared<const hot_rows>(m, placement, std::move(hot))), own_cold_(std::make_unique<thread_pool>(cold_threads, "hotcold-cold")), cold_(own_cold_.get()), costs_(*model_) {}

void hot_rows::keep_cold(int64_t layer, std::vector<int32_t>& ids) const {
  ffn_split s;
  split(layer, ids, s);
  ids = std::move(s.cold_ids);
}

void hot_cold_ffn::keep_cold(int64_t il, std::vector<int32_t>& ids) const { rows_->keep_cold(il, ids); }

void hot_cold_ffn::run_batch(int64_t step, int64_t layer, const batch_ffn_input& x, std::span<const int32_t> union_of_chosen, float* hidden,
                             float* out) {
  const int64_t nd = x.n * x.d;
  rows_->split(layer, union_of_chosen, split_);
  computed_.hot += static_cast<int64_t>(split_.hot_ids.size());
  computed_.cold += static_cast<int64_t>(split_.cold_ids.size());
  // Hot side on the device's queue, cold side meanwhile on the pool.
  hot_out_.assign(static_cast<size_t>(nd), 0.0f);
  devices::event hot_done;
  if (!split_.hot_ids.empty()) hot_done = rows_->submit(step, layer, split_, x, hidden, hot_out_.data(), trace_);
  const std::optional<ram_tier::use> in = cold_rows(disk_, layer, split_.cold_ids, x.n_ff);
  cold_share(*cold_, *model_, {trace_, step_part::cold_ffn, step, layer}, cold_of(split_.cold_ids, in), x, hidden, cold_acc_, out);
  if (hot_done) {
    hot_done->wait();
    const auto hot = static_cast<int64_t>(split_.hot_ids.size());
    const int64_t fired = fired_rows(hidden, x.n == 1 ? nullptr : x.chosen, x.n, x.n_ff, split_.hot_ids.data(), hot);
    computed_.hot_read += costs_.ffn_rows(static_cast<size_t>(layer), static_cast<uint64_t>(hot), static_cast<uint64_t>(fired));
  }
  for (int64_t k = 0; k < nd; ++k) out[k] += hot_out_[static_cast<size_t>(k)];
}

}  // namespace hotcold
