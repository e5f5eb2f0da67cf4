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

void kv_cache::reserve_store(int64_t blocks, int64_t block_tokens) {
  if (blocks < 0 || (blocks > 0 && block_tokens < 1)) throw std::invalid_argument("a prefix store of a negative size");
  store_ = page_buffer();
  store_blocks_ = blocks, block_tokens_ = block_tokens;
  if (blocks > 0) store_ = page_buffer(static_cast<size_t>(blocks) * block_bytes(), "the prefix store");
}

size_t kv_cache::rows_offset(int64_t slot, int64_t pos, int64_t n) const {
  if (slot < 0 || slot >= n_seq_ || pos < 0 || n < 0 || pos + n > n_ctx_)
    throw std::out_of_range(fmt::format("cached rows {}..{} of slot {}: outside the {} x {} the cache holds", pos, pos + n, slot, n_seq_, n_ctx_));
  return static_cast<size_t>((slot * n_ctx_ + pos) * row_bytes_);
}

void kv_cache::read_rows(int64_t slot, int64_t layer, bool values, int64_t pos, int64_t n, uint8_t* dst) const {
  const size_t at = rows_offset(slot, pos, n), bytes = static_cast<size_t>(n * row_bytes_);
  if (device_ && device_->attention(layer)) return device_->cache_out(layer, values, at, dst, bytes);
  std::memcpy(dst, (values ? v_layer(layer) : k_layer(layer)) + at, bytes);
}

void kv_cache::write_rows(int64_t slot, int64_t layer, bool values, int64_t pos, int64_t n, const uint8_t* src) {
  const size_t at = rows_offset(slot, pos, n), bytes = static_cast<size_t>(n * row_bytes_);
  if (device_ && device_->attention(layer)) return device_->cache_in(layer, values, at, src, bytes);
  std::memcpy((values ? v_layer(layer) : k_layer(layer)) + at, src, bytes);
}

void kv_cache::shift(const cache_op& op, const std::function<void(float* key_row)>& rotate) {
  const int64_t keep = op.pos, drop = op.count, held = op.from;
  if (op.slot < 0 || op.slot >= n_seq_ || keep < 0 || drop < 1 || keep + drop > held || held > n_ctx_)
    throw std::out_of_range(fmt::format("a context shift of slot {} dropping {}..{} of {}: outside the {} x {} the cache holds", op.slot, keep, keep + drop,
                                        held, n_seq_, n_ctx_));
  const int64_t moved = held - keep - drop, width = row_bytes_ / value_bytes_;
  std::vector<float> row(static_cast<size_t>(width));
  for (int64_t il = 0; il < n_layer_; ++il)
    for (int values = 0; values < 2 && holds(il); ++values) {
      const bool there = device_ && device_->attention(il);
      uint8_t* rows = (values ? v_layer(il) : k_layer(il)) + rows_offset(op.slot, keep, held - keep);
      if (there) {  // through the host: the slot's rows from keep on, out and back in
        staging_.resize(static_cast<size_t>((held - keep) * row_bytes_));
        read_rows(op.slot, il, values != 0, keep, held - keep, staging_.data());
        rows = staging_.data();
      }
      for (int64_t p = 0; p < moved; ++p) {
        uint8_t* to = rows + p * row_bytes_;
        const uint8_t* from = rows + (p + drop) * row_bytes_;
        if (values) {
          std::memmove(to, from, static_cast<size_t>(row_bytes_));
          continue;
        }
        if (type_ == tensor_type::f16) kernels::fp16_to_fp32_row(reinterpret_cast<const uint16_t*>(from), row.data(), static_cast<size_t>(width));
        else std::memcpy(row.data(), from, static_cast<size_t>(row_bytes_));
        rotate(row.data());
        store(to, row.data(), width);
      }
      if (there) write_rows(op.slot, il, values != 0, keep, moved, staging_.data());
    }
}

void kv_cache::apply(const cache_op& op) {
  if (op.what == cache_op::kind::shift) throw std::invalid_argument("a context shift turns keys by RoPE: inference_context::apply does it");
  const bool copy = op.what == cache_op::kind::copy;
  const int64_t n = copy ? op.count : block_tokens_;
  rows_offset(op.slot, op.pos, n);  // (checked before anything moves)
  if (copy) rows_offset(op.from, op.pos, n);
  else if (op.from < 0 || op.from >= store_blocks_)
    throw std::out_of_range(fmt::format("prefix block {}: outside the {} the store holds", op.from, store_blocks_));
  const size_t bytes = static_cast<size_t>(n * row_bytes_);
  if (bytes == 0) return;
  for (int64_t il = 0; il < n_layer_; ++il)
    for (int values = 0; values < 2 && holds(il); ++values) {
      const bool v = values != 0;
      if (copy && !(device_ && device_->attention(il))) {
        uint8_t* layer = v ? v_layer(il) : k_layer(il);
        std::memmove(layer + rows_offset(op.slot, op.pos, n), layer + rows_offset(op.from, op.pos, n), bytes);
      } else if (copy) {  // a device's rows through the host
        staging_.resize(bytes);
        read_rows(op.from, il, v, op.pos, n, staging_.data());
        write_rows(op.slot, il, v, op.pos, n, staging_.data());
      } else {
        uint8_t* block = static_cast<uint8_t*>(store_.data()) + static_cast<size_t>(op.from) * block_bytes() + static_cast<size_t>(2 * il + values) * bytes;
        if (op.what == cache_op::kind::save) read_rows(op.slot, il, v, op.pos, n, block);
        else write_rows(op.slot, il, v, op.pos, n, block);
      }
    }
}

void kv_cache::place(const device_layers* d) {
  device_ = d;
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
