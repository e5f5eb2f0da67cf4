#include "engine/kv_cache.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/fp16.hpp"

namespace hotcold {

kv_cache::kv_cache(const hparams& hp, int64_t n_ctx, int64_t n_seq, tensor_type type)
    : n_layer_(hp.n_layer), n_ctx_(n_ctx), n_seq_(n_seq), type_(type), value_bytes_(type == tensor_type::f16 ? 2 : 4), row_bytes_(hp.n_embd_kv() * value_bytes_) {
  if (type != tensor_type::f16 && type != tensor_type::f32)
    throw std::invalid_argument(fmt::format("a KV cache of {} values: the cache holds f16 or f32", tensor_type_name(type)));
  const size_t layer_bytes = static_cast<size_t>(n_seq_ * n_ctx_ * row_bytes_);
  k_ = page_buffer(layer_bytes * static_cast<size_t>(n_layer_), "the KV cache");
  v_ = page_buffer(layer_bytes * static_cast<size_t>(n_layer_), "the KV cache");
  place(nullptr);
}

void kv_cache::store(uint8_t* to, const float* row, int64_t n) const {
  if (type_ == tensor_type::f16) kernels::fp32_to_fp16_row(row, reinterpret_cast<uint16_t*>(to), static_cast<size_t>(n));
  else std::memcpy(to, row, static_cast<size_t>(n) * sizeof(float));
}

void kv_cache::check_slot(int64_t seq, int64_t pos) const {
  if (seq < 0 || seq >= n_seq_) throw std::out_of_range(fmt::format("sequence slot {} is outside the {} this context holds", seq, n_seq_));
  if (pos < 0 || pos >= n_ctx_) throw std::out_of_range(fmt::format("position {} is outside the context of {}", pos, n_ctx_));
}

void kv_cache::place(const device_layers* d) {
  if (d) {
    const device_residency& r = d->residency();
    if (r.ctx != n_ctx_ || r.n_seq != n_seq_ || d->kv_type() != type_)
      throw std::invalid_argument(fmt::format("the device's KV cache holds {} x {} positions of {}, this context {} x {} of {}", r.n_seq, r.ctx,
                                              tensor_type_name(d->kv_type()), n_seq_, n_ctx_, tensor_type_name(type_)));
  }
  const size_t layer_bytes = static_cast<size_t>(n_seq_ * n_ctx_ * row_bytes_);
  k_layers_.assign(static_cast<size_t>(n_layer_), nullptr);
  v_layers_.assign(static_cast<size_t>(n_layer_), nullptr);
  for (int64_t il = 0; il < n_layer_; ++il) {
    const bool there = d && d->attention(il);
    k_layers_[static_cast<size_t>(il)] = there ? d->k_cache(il) : static_cast<uint8_t*>(k_.data()) + layer_bytes * static_cast<size_t>(il);
    v_layers_[static_cast<size_t>(il)] = there ? d->v_cache(il) : static_cast<uint8_t*>(v_.data()) + layer_bytes * static_cast<size_t>(il);
  }
}

}  // namespace hotcold
