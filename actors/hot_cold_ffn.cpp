#include "actors/hot_cold_ffn.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "devices/cuda/cuda_memory.hpp"
#include "engine/sparse_ffn.hpp"
#if defined(HOTCOLD_HAVE_CUDA)
#include "kernels/gpu/decode.hpp"
#endif

namespace hotcold::actors {

hot_rows::hot_rows(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot)
    : model_(std::move(m)), hot_(std::move(hot)) {
  const hparams& hp = model_->hp();
  if (static_cast<int64_t>(placement.hot.size()) != hp.n_layer)
    throw std::invalid_argument(fmt::format("the placement has {} layers, the model {}", placement.hot.size(), hp.n_layer));
  if (!hot_->runs_host_work()) {  // a GPU: its kernels read F16 rows
    const layer_weights& l0 = model_->weights().layers.front();
    for (const tensor_view* w : {&l0.ffn_gate, &l0.ffn_up, &l0.ffn_down_t})
      if (*w && w->type != tensor_type::f16)
        throw std::invalid_argument(fmt::format("{}: the GPU's hot FFN kernels take F16 rows, and {}'s FFN rows are {}; use --device cpu or sim",
                                                hot_->name(), model_->path(), tensor_type_name(w->type)));
    if (hp.act != activation::relu && hp.act != activation::silu && hp.act != activation::gelu && hp.act != activation::drelu)
      throw std::invalid_argument(fmt::format("{}: the GPU's hot FFN kernels have no {} activation", hot_->name(), activation_name(hp.act)));
  }
  // Copies run on the device's queue: if a later layer does not fit, the earlier copies must finish
  // before their buffers go away with this half-built object.
  try {
    upload(placement);
    if (!hot_->runs_host_work()) prepare_gpu();
  } catch (...) {
    hot_->synchronize();
    throw;
  }
  hot_->synchronize();  // the copies read the model's memory: done before anyone computes
}

void hot_rows::prepare_gpu() {
  const hparams& hp = model_->hp();
  const auto n = static_cast<uint64_t>(inference_context::max_batch), d = static_cast<uint64_t>(hp.n_embd), n_ff = static_cast<uint64_t>(hp.n_ff);
  gpu_ = std::make_unique<gpu_scratch>();
  gpu_->x = hot_->allocate(n * d * sizeof(float), "hot FFN input");
  gpu_->slots = hot_->allocate(n * n_ff * sizeof(int32_t), "hot FFN rows");
  gpu_->hidden = hot_->allocate(n * n_ff * sizeof(float), "hot FFN values");
  gpu_->out = hot_->allocate(n * d * sizeof(float), "hot FFN output");
  auto pinned = [](uint64_t bytes) { return std::shared_ptr<void>(devices::cuda_host_allocate(bytes), devices::cuda_host_free); };
  gpu_->host_x = std::static_pointer_cast<float>(pinned(n * d * sizeof(float)));
  gpu_->host_slots = std::static_pointer_cast<int32_t>(pinned(n * n_ff * sizeof(int32_t)));
  gpu_->host_hidden = std::static_pointer_cast<float>(pinned(n * n_ff * sizeof(float)));
  gpu_->host_out = std::static_pointer_cast<float>(pinned(n * d * sizeof(float)));
}

// A step's hot share on the GPU, on the device's queue thread: each token's chosen hot rows listed
// (their slots in the device's copy), the inputs and lists copied in through pinned memory, one
// hot_ffn_f16 per token on the device's stream, the sums and values copied back, then handed over.
void hot_rows::gpu_step(const layer_rows& h, const ffn_split& s, const batch_ffn_input& x, float* hidden, float* out) const {
#if defined(HOTCOLD_HAVE_CUDA)
  const hparams& hp = model_->hp();
  const int64_t n = x.n, d = x.d, n_ff = x.n_ff;
  if (n > inference_context::max_batch) throw std::invalid_argument(fmt::format("a step of {} tokens is more than {}", n, inference_context::max_batch));
  gpu_scratch& g = *gpu_;
  float* hx = g.host_x.get();
  int32_t* hs = g.host_slots.get();
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < n; ++t)
    for (size_t k = 0; k < s.hot_ids.size(); ++k)
      if (n == 1 || x.chosen[t * n_ff + s.hot_ids[k]]) hs[t * n_ff + count[static_cast<size_t>(t)]++] = s.hot_slots[k];
  std::copy(x.in, x.in + n * d, hx);
  hot_->make_current();
  void* stream = hot_->stream();
  auto* dx = static_cast<float*>(g.x->data());
  auto* ds = static_cast<int32_t*>(g.slots->data());
  auto* dh = static_cast<float*>(g.hidden->data());
  auto* dout = static_cast<float*>(g.out->data());
  devices::cuda_copy_async(dx, hx, static_cast<uint64_t>(n * d) * sizeof(float), true, stream);
  for (int64_t t = 0; t < n; ++t)
    devices::cuda_copy_async(ds + t * n_ff, hs + t * n_ff, static_cast<uint64_t>(count[static_cast<size_t>(t)]) * sizeof(int32_t), true, stream);
  const auto act = static_cast<kernels::gpu::ffn_act>(hp.act == activation::relu ? 0 : hp.act == activation::silu ? 1 : hp.act == activation::gelu ? 2 : 3);
  for (int64_t t = 0; t < n; ++t) {
    const std::string e = kernels::gpu::hot_ffn_f16(reinterpret_cast<const uint16_t*>(h.gate.data), reinterpret_cast<const uint16_t*>(h.up.data),
                                                    reinterpret_cast<const uint16_t*>(h.down_t.data), ds + t * n_ff, count[static_cast<size_t>(t)], d,
                                                    dx + t * d, hp.gated_ffn, act, dh + t * n_ff, dout + t * d, stream);
    if (!e.empty()) throw std::runtime_error(fmt::format("{}: hot FFN kernel: {}", hot_->name(), e));
  }
  devices::cuda_copy_async(g.host_out.get(), dout, static_cast<uint64_t>(n * d) * sizeof(float), false, stream);
  for (int64_t t = 0; t < n; ++t)
    devices::cuda_copy_async(g.host_hidden.get() + t * n_ff, dh + t * n_ff, static_cast<uint64_t>(count[static_cast<size_t>(t)]) * sizeof(float), false,
                             stream);
  devices::cuda_stream_synchronize(stream);
  std::copy(g.host_out.get(), g.host_out.get() + n * d, out);
  for (int64_t t = 0; t < n; ++t) {  // each value back to its neuron
    int64_t c = 0;
    for (size_t k = 0; k < s.hot_ids.size(); ++k)
      if (n == 1 || x.chosen[t * n_ff + s.hot_ids[k]]) hidden[t * n_ff + s.hot_ids[k]] = g.host_hidden.get()[t * n_ff + c++];
  }
#else
  (void)h, (void)s, (void)x, (void)hidden, (void)out;
  throw std::runtime_error(fmt::format("{}: hotcold was built without CUDA", hot_->name()));
#endif
}

void hot_rows::upload(const placement_data& placement) {
  const hparams& hp = model_->hp();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const layer_weights& l = model_->weights().layers[static_cast<size_t>(il)];
    if (!l.ffn_down_t) throw std::invalid_argument(fmt::format("{}: layer {} has no ffn_down_t; the hot/cold split needs a sparse file", model_->path(), il));
    const auto& ids = placement.hot[static_cast<size_t>(il)];
    layer_rows h;
    h.slot.assign(static_cast<size_t>(hp.n_ff), -1);
    // Copies rows `ids` of w into one device buffer, in placement order: row k is neuron ids[k].
    auto copy_rows = [&](const tensor_view& w, const char* what) {
      tensor_view v = w;
      if (!w || ids.empty()) return tensor_view{};
      auto buf = hot_->allocate(w.row_bytes * ids.size(), fmt::format("layer {} hot {} rows", il, what));
      for (size_t k = 0; k < ids.size(); ++k) hot_->copy_in(*buf, k * w.row_bytes, w.row(ids[k]), w.row_bytes);
      v.ne1 = static_cast<int64_t>(ids.size());
      v.data = static_cast<const uint8_t*>(buf->data());
      bytes_ += buf->size();
      buffers_.push_back(std::move(buf));
      return v;
    };
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0 || ids[k] >= hp.n_ff) throw std::invalid_argument(fmt::format("layer {}: hot neuron {} is outside 0..{}", il, ids[k], hp.n_ff - 1));
      h.slot[static_cast<size_t>(ids[k])] = static_cast<int32_t>(k);
    }
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
                                trace_recorder* trace, live_stats* stats) const {
  const layer_rows& h = layers_[static_cast<size_t>(layer)];
  const hparams& hp = model_->hp();
  return hot_->submit([this, &hp, &h, &s, x, hidden, out, trace, stats, step, layer] {
    trace_scope span(trace, "hot_ffn", step, layer, x.n);
    const auto t0 = std::chrono::steady_clock::now();
    if (gpu_) {
      gpu_step(h, s, x, hidden, out);
    } else {
      std::fill(out, out + x.n * x.d, 0.0f);
      batch_neurons(hp, h.gate, h.up, h.down_t, s.hot_ids.data(), s.hot_slots.data(), static_cast<int64_t>(s.hot_ids.size()), x, hidden, out);
    }
    if (stats) stats->add_time(stage::hot_ffn, layer, std::chrono::steady_clock::now() - t0);
  });
}

void cold_share(thread_pool& pool, const model& m, int64_t step, int64_t layer, std::span<const int32_t> cold_ids, const batch_ffn_input& x,
                float* hidden, std::vector<float>& acc, float* out, trace_recorder* trace) {
  const hparams& hp = m.hp();
  const layer_weights& l = m.weights().layers[static_cast<size_t>(layer)];
  neuron_shards pieces(cold_ids.data(), static_cast<int64_t>(cold_ids.size()), hp.n_ff, pool.size());
  run_pieces(
      pool, pieces, x.n * x.d, acc, out,
      [&](int64_t k0, int64_t k1, float* a) {
        batch_neurons(hp, l.ffn_gate, l.ffn_up, l.ffn_down_t, cold_ids.data() + k0, cold_ids.data() + k0, k1 - k0, x, hidden, a);
      },
      trace, "cold_ffn", step, layer, x.n);
}

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, thread_pool& cold)
    : hot_cold_ffn(m, std::make_shared<const hot_rows>(m, placement, std::move(hot)), cold) {}

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, std::shared_ptr<const hot_rows> rows, thread_pool& cold)
    : model_(std::move(m)), rows_(std::move(rows)), cold_(&cold) {}

hot_cold_ffn::hot_cold_ffn(std::shared_ptr<const model> m, const placement_data& placement, std::shared_ptr<devices::device> hot, int cold_threads)
    : model_(m), rows_(std::make_shared<const hot_rows>(m, placement, std::move(hot))), own_cold_(std::make_unique<thread_pool>(cold_threads, "hotcold-cold")), cold_(own_cold_.get()) {}

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
  cold_share(*cold_, *model_, step, layer, split_.cold_ids, x, hidden, cold_acc_, out, trace_);
  if (hot_done) hot_done->wait();
  for (int64_t k = 0; k < nd; ++k) out[k] += hot_out_[static_cast<size_t>(k)];
}

}  // namespace hotcold::actors
