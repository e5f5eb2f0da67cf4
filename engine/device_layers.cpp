#include "engine/device_layers.hpp"

#include <cstring>

#include <algorithm>

#include <fmt/format.h>

#include "devices/gpu_jobs.hpp"
#include "kernels/cpu/dot.hpp"

namespace hotcold {


bool attention_runs_on(const devices::device& dev, const hparams& hp, const layer_weights& l) {
  if (!dev.runs_host_work() && (hp.attn_softcap > 0 || hp.n_swa > 0 || hp.q_scale > 0)) return false;
  for (const tensor_view* t : attention_weights(l))
    if (*t && !dev.supports(devices::operation::attention, t->type)) return false;
  return true;
}

bool dense_ffn_reads(const devices::device& dev, std::initializer_list<const tensor_view*> ws) {
  if (dev.runs_host_work()) return true;  // the CPU's routine, whatever the rows
  return std::all_of(ws.begin(), ws.end(), [&](const tensor_view* t) { return !*t || dev.supports(devices::operation::dense_ffn, t->type); });
}

bool dense_ffn_runs_on(const devices::device& dev, const layer_weights& l) {
  if (!dev.runs_host_work() && !l.ffn_down) return false;  // a GPU's job reads the down matrix, not a sparse file's down rows
  return dense_ffn_reads(dev, {&l.ffn_gate, &l.ffn_up, &l.ffn_down});
}

bool device_residency::any() const {
  auto on = [](const std::vector<uint8_t>& v) { return std::any_of(v.begin(), v.end(), [](uint8_t x) { return x != 0; }); };
  return output || on(attention) || on(predictor) || on(ffn) || on(shared);
}

device_layers::device_layers(std::shared_ptr<const model> m, const device_residency& r, std::shared_ptr<devices::device> dev, kv_types kv)
    : model_(std::move(m)), r_(r), dev_(std::move(dev)), kv_types_(kv), pool_(std::make_unique<thread_pool>(1, "hotcold-device")) {
  const hparams& hp = model_->hp();
  const auto n = static_cast<size_t>(hp.n_layer);
  if (r_.attention.size() != n || r_.predictor.size() != n || r_.ffn.size() != n || (!r_.shared.empty() && r_.shared.size() != n))
    throw std::invalid_argument(fmt::format("a device plan of {} layers for a model of {}", r_.attention.size(), n));
  const auto& w0 = model_->weights();
  for (size_t il = 0; il < n; ++il) {
    const auto& l = w0.layers[il];
    if ((r_.attention[il] || r_.ffn[il]) && !attention_runs_on(*dev_, model_->hp(), l))
      throw std::invalid_argument(fmt::format("{}: cannot run layer {}'s attention ({} weights)", dev_->name(), il, tensor_type_name(l.wo.type)));
    if (r_.ffn[il] && !dense_ffn_runs_on(*dev_, l))
      throw std::invalid_argument(fmt::format("{}: cannot run layer {}'s whole FFN ({} weights{})", dev_->name(), il, tensor_type_name(l.ffn_up.type),
                                              l.ffn_down ? "" : ", down rows of a sparse file"));
    if (shared_expert(static_cast<int64_t>(il))) {
      if (!l.ffn_gate_shexp) throw std::invalid_argument(fmt::format("layer {} has no shared expert to put on the device", il));
      if (!dense_ffn_reads(*dev_, {&l.ffn_gate_shexp, &l.ffn_up_shexp, &l.ffn_down_shexp}))
        throw std::invalid_argument(fmt::format("{}: cannot run layer {}'s shared expert ({} / {} / {} weights)", dev_->name(), il,
                                                tensor_type_name(l.ffn_gate_shexp.type), tensor_type_name(l.ffn_up_shexp.type),
                                                tensor_type_name(l.ffn_down_shexp.type)));
    }
    if (r_.predictor[il] && l.pred_fc1 && (!dev_->supports(devices::operation::predict, l.pred_fc1.type) || l.pred_fc2.type != l.pred_fc1.type))
      throw std::invalid_argument(fmt::format("{}: cannot run layer {}'s predictor ({} weights)", dev_->name(), il, tensor_type_name(l.pred_fc1.type)));
  }
  if (r_.output && !dev_->supports(devices::operation::matvec, w0.output.type))
    throw std::invalid_argument(fmt::format("{}: cannot run the output head ({} weights)", dev_->name(), tensor_type_name(w0.output.type)));
  // A GPU's attention kernels read one cache type for keys and values, f16 or f32; a device that runs
  // host work (sim) reads every type the CPU does.
  if (!dev_->runs_host_work() && !kv.plain() && std::any_of(r_.attention.begin(), r_.attention.end(), [](uint8_t a) { return a != 0; }))
    throw std::invalid_argument(fmt::format("{}: its attention kernels read an f16 or f32 cache, not {} (--cache-type-k, --cache-type-v)", dev_->name(),
                                            kv_types_name(kv)));
  const auto& w = model_->weights();
  layers_ = w.layers;
  output_ = w.output, output_norm_ = w.output_norm, output_norm_b_ = w.output_norm_b;
  attention_bytes_.assign(n, 0), predictor_bytes_.assign(n, 0), ffn_bytes_.assign(n, 0);
  k_.resize(n), v_.resize(n);
  // The order of the plan: compute buffers, attention with its cache, predictors, the head.
  if (r_.compute_bytes > 0) {
    compute_ = dev_->allocate(r_.compute_bytes, "compute buffers");
    bytes_ += compute_->charged();
  }
  const uint64_t k_bytes = values_bytes(kv.k, r_.ctx * r_.n_seq * hp.n_embd_kv()), v_bytes = values_bytes(kv.v, r_.ctx * r_.n_seq * hp.n_embd_kv());
  for (size_t il = 0; il < n; ++il) {
    layer_weights& l = layers_[il];
    if (r_.attention[il]) {
      const std::string what = fmt::format("layer {} attention", il);
      // (The FFN norm goes with attention: it is applied where the residual stream is when attention ends.)
      const auto weights = attention_weights(l);
      const auto extras = attention_extras(l);
      std::vector<tensor_view*> held(weights.begin(), weights.end());
      held.insert(held.end(), extras.begin(), extras.end());
      held.push_back(&l.ffn_norm);
      for (tensor_view* t : held) {
        hold(*t, what);
        attention_bytes_[il] += t->bytes();
      }
      k_[il] = dev_->allocate(k_bytes, fmt::format("layer {} K cache", il));
      v_[il] = dev_->allocate(v_bytes, fmt::format("layer {} V cache", il));
      // The CPU's cache starts at zero (page_buffer); a device's new memory holds whatever was there.
      dev_->zero(*k_[il]), dev_->zero(*v_[il]);
      bytes_ += k_[il]->charged() + v_[il]->charged();
    }
    if (shared_expert(static_cast<int64_t>(il)))
      for (tensor_view* t : {&l.ffn_gate_shexp, &l.ffn_up_shexp, &l.ffn_down_shexp}) {
        hold(*t, fmt::format("layer {} shared expert", il));
        ffn_bytes_[il] += t->bytes();
      }
    if (r_.ffn[il]) {
      if (!r_.attention[il]) throw std::invalid_argument(fmt::format("layer {}: a whole FFN on the device needs the layer's attention there too", il));
      for (tensor_view* t : {&l.ffn_gate, &l.ffn_up, &l.ffn_down, &l.ffn_down_t}) {
        hold(*t, fmt::format("layer {} FFN", il));
        ffn_bytes_[il] += t->bytes();
      }
    }
  }
  for (size_t il = 0; il < n; ++il)
    if (r_.predictor[il]) {
      layer_weights& l = layers_[il];
      if (!l.pred_fc1) throw std::invalid_argument(fmt::format("layer {} has no predictor to put on the device", il));
      for (tensor_view* t : {&l.pred_fc1, &l.pred_fc2}) {
        hold(*t, fmt::format("layer {} predictor", il));
        predictor_bytes_[il] += t->bytes();
      }
    }
  if (r_.output) {
    // A device that computes with host code applies the output norm too; a GPU gets the normalized
    // rows (the norm's few values stay in host memory).
    if (dev_->runs_host_work())
      for (tensor_view* t : {&output_norm_, &output_norm_b_}) {
        hold(*t, "output norm");
        output_bytes_ += t->bytes();
      }
    hold(output_, "output head");
    output_bytes_ += output_.bytes();
  }
  dev_->synchronize();  // every copy delivered before the first job reads it
}

void plain_rows(const tensor_view& v, uint8_t* out) {
  if (v.interleaved16) {
    // Groups of sixteen interleaved rows put back in order (same bytes); the tail is plain already.
    for (int64_t r = 0; r < v.ne1; r += 16) {
      const uint8_t* from = v.data + static_cast<size_t>(r) * v.row_bytes;
      uint8_t* at = out + static_cast<size_t>(r) * v.row_bytes;
      if (r >= v.interleaved_rows())
        std::memcpy(at, from, static_cast<size_t>(v.ne1 - r) * v.row_bytes);
      else if (v.type == tensor_type::f16)
        kernels::deinterleave_f16x16(reinterpret_cast<const uint16_t*>(from), v.ne0, reinterpret_cast<uint16_t*>(at));
      else if (v.type == tensor_type::q4_k)
        kernels::deinterleave_q4_kx16(reinterpret_cast<const kernels::block_q4_kx16*>(from), v.ne0 / kernels::qk_k, reinterpret_cast<kernels::block_q4_k*>(at));
      else if (v.type == tensor_type::q5_k)
        kernels::deinterleave_q5_kx16(reinterpret_cast<const kernels::block_q5_kx16*>(from), v.ne0 / kernels::qk_k, reinterpret_cast<kernels::block_q5_k*>(at));
      else if (v.type == tensor_type::q6_k)
        kernels::deinterleave_q6_kx16(reinterpret_cast<const kernels::block_q6_kx16*>(from), v.ne0 / kernels::qk_k, reinterpret_cast<kernels::block_q6_k*>(at));
      else
        kernels::deinterleave_q4_0x16(reinterpret_cast<const kernels::block_q4_0x16*>(from), v.ne0 / 32, reinterpret_cast<kernels::block_q4_0*>(at));
      if (r >= v.interleaved_rows()) break;
    }
  } else if (!v.packed()) {
    for (int64_t r = 0; r < v.ne1; ++r) std::memcpy(out + static_cast<size_t>(r) * v.row_bytes, v.row(r), v.row_bytes);
  } else {
    std::memcpy(out, v.data, v.bytes());
  }
}

void device_layers::hold(tensor_view& v, const std::string& what) {
  if (!v) return;
  auto b = dev_->allocate(v.bytes(), fmt::format("{} {}", what, v.name));
  if ((v.interleaved16 && !dev_->runs_host_work()) || !v.packed()) {
    // A GPU's kernels read plain rows: the private copy's groups of sixteen interleaved rows are put
    // back in order on the way; a view into a bundle (a sparse file's gate, up or down_t rows) is
    // gathered, packed.
    std::vector<uint8_t> rows(v.bytes());
    plain_rows(v, rows.data());
    dev_->copy_in(*b, 0, rows.data(), rows.size())->wait();
    v.interleaved16 = false;
  } else {
    dev_->copy_in(*b, 0, v.data, v.bytes())->wait();
  }
  v.data = static_cast<const uint8_t*>(b->data());
  v.stride = 0;
  bytes_ += b->charged();
  buffers_.push_back(std::move(b));
}

void device_layers::keep_choice(int64_t layer, const float* pred_in, int64_t n, const uint8_t* chosen, int64_t n_ff) const {
  std::lock_guard lock(kept_mu_);
  if (kept_.size() < layers_.size()) kept_.resize(layers_.size());
  kept_choice& k = kept_[static_cast<size_t>(layer)];
  k.pred_in = chosen ? pred_in : nullptr, k.n = n;
  if (chosen) k.chosen.assign(chosen, chosen + n * n_ff);
}

bool device_layers::take_choice(int64_t layer, const float* pred_in, int64_t n, uint8_t* chosen, int64_t n_ff) const {
  std::lock_guard lock(kept_mu_);
  if (static_cast<size_t>(layer) >= kept_.size()) return false;
  kept_choice& k = kept_[static_cast<size_t>(layer)];
  if (!k.pred_in || k.pred_in != pred_in || k.n != n || static_cast<int64_t>(k.chosen.size()) != n * n_ff) return false;
  std::copy(k.chosen.begin(), k.chosen.end(), chosen);
  k.pred_in = nullptr;
  choices_taken_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

uint8_t* device_layers::k_cache(int64_t l) const {
  if (!attention(l)) throw std::out_of_range(fmt::format("layer {}'s KV cache is not on the device", l));
  return static_cast<uint8_t*>(k_[static_cast<size_t>(l)]->data());
}
uint8_t* device_layers::v_cache(int64_t l) const {
  if (!attention(l)) throw std::out_of_range(fmt::format("layer {}'s KV cache is not on the device", l));
  return static_cast<uint8_t*>(v_[static_cast<size_t>(l)]->data());
}

void device_layers::cache_out(int64_t l, bool values, uint64_t offset, void* dst, uint64_t bytes) const {
  if (!attention(l)) throw std::out_of_range(fmt::format("layer {}'s KV cache is not on the device", l));
  if (auto e = dev_->copy_out(dst, *(values ? v_ : k_)[static_cast<size_t>(l)], offset, bytes)) e->wait();
}
void device_layers::cache_in(int64_t l, bool values, uint64_t offset, const void* src, uint64_t bytes) const {
  if (!attention(l)) throw std::out_of_range(fmt::format("layer {}'s KV cache is not on the device", l));
  if (auto e = dev_->copy_in(*(values ? v_ : k_)[static_cast<size_t>(l)], offset, src, bytes)) e->wait();
}

uint64_t device_layers::scratch_beside_pending() const {
  const uint64_t want = 4 * static_cast<uint64_t>(model_->hp().n_embd);
  return scratch_bytes() > 2 * want ? (scratch_bytes() - want) / devices::scratch_align * devices::scratch_align : 0;  // (the sum on its boundary)
}

float* device_layers::pending_sums() const {
  if (scratch_beside_pending() == 0) return nullptr;
  return reinterpret_cast<float*>(static_cast<uint8_t*>(compute_->data()) + scratch_beside_pending());
}

void device_layers::read_pending(float* dst) const {
  if (!pending_sums()) throw std::logic_error("no pending sums: the compute buffers are too small to keep one");
  if (auto e = dev_->copy_out(dst, *compute_, scratch_beside_pending(), 4 * static_cast<uint64_t>(model_->hp().n_embd))) e->wait();
}

namespace {
thread_local bool on_queue = false;  // this thread is running work a device's queue was given
struct queue_scope {
  queue_scope() { on_queue = true; }
  ~queue_scope() { on_queue = false; }
};
}  // namespace

void device_layers::run(const std::function<void()>& work) const {
  if (on_queue) return work();
  dev_->submit([&work] {
        queue_scope here;
        work();
      })
      ->wait();
}

devices::event device_layers::submit(std::function<void()> work) const {
  return dev_->submit([work = std::move(work)] {
    queue_scope here;
    work();
  });
}

}  // namespace hotcold
