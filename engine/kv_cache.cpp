#include "engine/kv_cache.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/kernel_table.hpp"
#include "kernels/cpu/kv_rows.hpp"

namespace hotcold {

namespace {

// The bytes of a row of n values of type t, once the type is one the cache holds (blocks of 32 within
// a head where it is quantized).
int64_t checked_row_bytes(tensor_type t, const hparams& hp, const char* what) {
  if (!is_kv_cache_type(t))
    throw std::invalid_argument(fmt::format("{} cache of {}: the KV cache holds f32, f16, q8_0 or q4_0", what, lower_type_name(t)));
  if (traits(t).quantized && hp.head_dim() % 32 != 0)
    throw std::invalid_argument(fmt::format("{} cache of {}: its blocks of 32 values would cross this model's heads of {} values; use f16 or f32", what,
                                            lower_type_name(t), hp.head_dim()));
  return static_cast<int64_t>(values_bytes(t, hp.n_embd_kv()));
}

}  // namespace

kv_cache::kv_cache(const hparams& hp, int64_t n_ctx, int64_t n_seq, kv_types types)
    : n_layer_(hp.n_layer), n_ctx_(n_ctx), n_seq_(n_seq), width_(hp.n_embd_kv()), types_(types),
      k_row_bytes_(checked_row_bytes(types.k, hp, "a keys'")), v_row_bytes_(checked_row_bytes(types.v, hp, "a values'")) {
  n_tiles_ = (n_ctx + 15) / 16;
  k_ = page_buffer(static_cast<size_t>(n_seq_ * n_tiles_ * 16 * k_row_bytes_) * static_cast<size_t>(n_layer_), "the KV cache");
  v_ = page_buffer(static_cast<size_t>(n_seq_ * n_ctx_ * v_row_bytes_) * static_cast<size_t>(n_layer_), "the KV cache");
  place(nullptr);
}

void kv_cache::store_k(int64_t seq, int64_t layer, int64_t pos, const float* row) {
  if (k_tiled(layer)) return kernels::store_key_tile(types_.k, row, key_tile(seq, layer, 0), width_, pos);
  kernels::kv_store_row(types_.k, row, k_row(seq, layer, pos), width_);
}

void kv_cache::load_k(int64_t seq, int64_t layer, int64_t pos, int64_t n, int64_t at, int64_t cols, float* out) const {
  if (k_tiled(layer)) return kernels::widen_key_tiles(types_.k, k_tiles(seq, layer), width_, pos, n, at, cols, out);
  kernels::kv_load_rows(types_.k, k_row(seq, layer, pos), k_row_bytes_, at, cols, n, out);
}
void kv_cache::store_v(uint8_t* to, const float* row) const { kernels::kv_store_row(types_.v, row, to, width_); }

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

size_t kv_cache::rows_offset(int64_t slot, int64_t pos, int64_t n, bool values) const {
  if (slot < 0 || slot >= n_seq_ || pos < 0 || n < 0 || pos + n > n_ctx_)
    throw std::out_of_range(fmt::format("cached rows {}..{} of slot {}: outside the {} x {} the cache holds", pos, pos + n, slot, n_seq_, n_ctx_));
  return static_cast<size_t>((slot * n_ctx_ + pos) * row_bytes(values));
}

void kv_cache::read_rows(int64_t slot, int64_t layer, bool values, int64_t pos, int64_t n, uint8_t* dst) const {
  const size_t at = rows_offset(slot, pos, n, values), bytes = static_cast<size_t>(n * row_bytes(values));
  if (device_ && device_->attention(layer)) return device_->cache_out(layer, values, at, dst, bytes);
  if (!values && k_tiled(layer)) return tiles_to_rows(slot, layer, pos, n, dst);
  std::memcpy(dst, (values ? v_layer(layer) : k_layer(layer)) + at, bytes);
}

void kv_cache::write_rows(int64_t slot, int64_t layer, bool values, int64_t pos, int64_t n, const uint8_t* src) {
  const size_t at = rows_offset(slot, pos, n, values), bytes = static_cast<size_t>(n * row_bytes(values));
  if (device_ && device_->attention(layer)) return device_->cache_in(layer, values, at, src, bytes);
  if (!values && k_tiled(layer)) return rows_to_tiles(slot, layer, pos, n, src);
  std::memcpy((values ? v_layer(layer) : k_layer(layer)) + at, src, bytes);
}

void kv_cache::tiles_to_rows(int64_t slot, int64_t layer, int64_t pos, int64_t n, uint8_t* dst) const {
  kernels::key_tiles_to_rows(types_.k, key_tile(slot, layer, 0), width_, pos, n, dst);
}

void kv_cache::rows_to_tiles(int64_t slot, int64_t layer, int64_t pos, int64_t n, const uint8_t* src) {
  kernels::rows_to_key_tiles(types_.k, src, key_tile(slot, layer, 0), width_, pos, n);
}

void kv_cache::block_tile(int64_t slot, int64_t layer, int64_t pos, uint8_t* block, bool save) {
  staging_.resize(static_cast<size_t>(16 * k_row_bytes_));  // the sixteen positions as rows on their way
  if (save) {
    tiles_to_rows(slot, layer, pos, 16, staging_.data());
    kernels::rows_to_key_tiles(types_.k, staging_.data(), block, width_, 0, 16);
  } else {
    kernels::key_tiles_to_rows(types_.k, block, width_, 0, 16, staging_.data());
    rows_to_tiles(slot, layer, pos, 16, staging_.data());
  }
}

void kv_cache::copy_key_tiles(int64_t layer, int64_t from, int64_t to, int64_t pos, int64_t n) {
  for (int64_t t = pos / 16; t * 16 < pos + n; ++t) {
    const int64_t lo = std::max(pos, t * 16), hi = std::min(pos + n, t * 16 + 16);
    if (hi - lo == 16) {  // a whole tile
      std::memcpy(key_tile(to, layer, t), key_tile(from, layer, t), static_cast<size_t>(16 * k_row_bytes_));
      continue;
    }
    // Part of a tile: its positions through rows (the tiles' layout is kv_rows' alone).
    staging_.resize(static_cast<size_t>(16 * k_row_bytes_));
    tiles_to_rows(from, layer, lo, hi - lo, staging_.data());
    rows_to_tiles(to, layer, lo, hi - lo, staging_.data());
  }
}

void kv_cache::shift(const cache_op& op, const std::function<void(float* key_row)>& rotate) {
  const int64_t keep = op.pos, drop = op.count, held = op.from;
  if (op.slot < 0 || op.slot >= n_seq_ || keep < 0 || drop < 1 || keep + drop > held || held > n_ctx_)
    throw std::out_of_range(fmt::format("a context shift of slot {} dropping {}..{} of {}: outside the {} x {} the cache holds", op.slot, keep, keep + drop,
                                        held, n_seq_, n_ctx_));
  const int64_t moved = held - keep - drop;
  std::vector<float> row(static_cast<size_t>(width_));
  for (int64_t il = 0; il < n_layer_; ++il)
    for (int values = 0; values < 2 && holds(il); ++values) {
      const bool there = (device_ && device_->attention(il)) || (!values && k_tiled(il));  // (rows in staging, out and back in)
      const int64_t rb = row_bytes(values != 0);
      uint8_t* rows = (values ? v_layer(il) : k_layer(il)) + rows_offset(op.slot, keep, held - keep, values != 0);
      if (there) {  // through the host: the slot's rows from keep on, out and back in
        staging_.resize(static_cast<size_t>((held - keep) * rb));
        read_rows(op.slot, il, values != 0, keep, held - keep, staging_.data());
        rows = staging_.data();
      }
      for (int64_t p = 0; p < moved; ++p) {
        uint8_t* to = rows + p * rb;
        const uint8_t* from = rows + (p + drop) * rb;
        if (values) {
          std::memmove(to, from, static_cast<size_t>(rb));
          continue;
        }
        // (A quantized key widened, turned and quantized again, as llama.cpp's shift does.)
        kernels::kv_load_rows(types_.k, from, rb, 0, width_, 1, row.data());
        rotate(row.data());
        kernels::kv_store_row(types_.k, row.data(), to, width_);
      }
      if (there) write_rows(op.slot, il, values != 0, keep, moved, staging_.data());
    }
}

void kv_cache::apply(const cache_op& op) {
  if (op.what == cache_op::kind::shift) throw std::invalid_argument("a context shift turns keys by RoPE: inference_context::apply does it");
  const bool copy = op.what == cache_op::kind::copy;
  const int64_t n = copy ? op.count : block_tokens_;
  rows_offset(op.slot, op.pos, n, false);  // (checked before anything moves)
  if (copy) rows_offset(op.from, op.pos, n, false);
  else if (op.from < 0 || op.from >= store_blocks_)
    throw std::out_of_range(fmt::format("prefix block {}: outside the {} the store holds", op.from, store_blocks_));
  if (n == 0) return;
  for (int64_t il = 0; il < n_layer_; ++il)
    for (int values = 0; values < 2 && holds(il); ++values) {
      const bool v = values != 0;
      const size_t bytes = static_cast<size_t>(n * row_bytes(v));
      const bool tiled = !v && k_tiled(il);
      if (copy && tiled) {
        copy_key_tiles(il, op.from, op.slot, op.pos, n);
      } else if (copy && !(device_ && device_->attention(il))) {
        uint8_t* layer = v ? v_layer(il) : k_layer(il);
        std::memmove(layer + rows_offset(op.slot, op.pos, n, v), layer + rows_offset(op.from, op.pos, n, v), bytes);
      } else if (copy) {  // a device's rows through the host
        staging_.resize(bytes);
        read_rows(op.from, il, v, op.pos, n, staging_.data());
        write_rows(op.slot, il, v, op.pos, n, staging_.data());
      } else {
        // The block's layer il: its keys' rows, then its values'.
        uint8_t* block = static_cast<uint8_t*>(store_.data()) + static_cast<size_t>(op.from) * block_bytes() +
                         static_cast<size_t>(il * n * (k_row_bytes_ + v_row_bytes_) + (v ? n * k_row_bytes_ : 0));
        if (tiled && n == 16) {  // sixteen positions' keys, kept in the block as one tile (as they are, from a whole tile)
          if (op.pos % 16 == 0 && op.what == cache_op::kind::save) std::memcpy(block, key_tile(op.slot, il, op.pos / 16), bytes);
          else if (op.pos % 16 == 0) std::memcpy(key_tile(op.slot, il, op.pos / 16), block, bytes);
          else block_tile(op.slot, il, op.pos, block, op.what == cache_op::kind::save);
        } else if (op.what == cache_op::kind::save) read_rows(op.slot, il, v, op.pos, n, block);
        else write_rows(op.slot, il, v, op.pos, n, block);
      }
    }
}

void kv_cache::place(const device_layers* d) {
  device_ = d;
  if (d) {
    const device_residency& r = d->residency();
    if (r.ctx != n_ctx_ || r.n_seq != n_seq_ || d->cache_types() != types_)
      throw std::invalid_argument(fmt::format("the device's KV cache holds {} x {} positions of {}, this context {} x {} of {}", r.n_seq, r.ctx,
                                              kv_types_name(d->cache_types()), n_seq_, n_ctx_, kv_types_name(types_)));
  }
  const size_t k_bytes = static_cast<size_t>(n_seq_ * n_tiles_ * 16 * k_row_bytes_), v_bytes = static_cast<size_t>(n_seq_ * n_ctx_ * v_row_bytes_);
  // (Tiles where the CPU has their decode kernel, AVX-512 (and VNNI for Q8_0): elsewhere rows, which its
  // row kernels read as they are, where tiles would be widened element by element.)
  const bool tiles = kernels::keys_in_tiles(types_.k);
  k_tiled_.assign(static_cast<size_t>(n_layer_), 0);
  k_layers_.assign(static_cast<size_t>(n_layer_), nullptr);
  v_layers_.assign(static_cast<size_t>(n_layer_), nullptr);
  for (int64_t il = 0; il < n_layer_; ++il) {
    const bool there = d && d->attention(il);
    k_tiled_[static_cast<size_t>(il)] = tiles && !there;
    k_layers_[static_cast<size_t>(il)] = there ? d->k_cache(il) : static_cast<uint8_t*>(k_.data()) + k_bytes * static_cast<size_t>(il);
    v_layers_[static_cast<size_t>(il)] = there ? d->v_cache(il) : static_cast<uint8_t*>(v_.data()) + v_bytes * static_cast<size_t>(il);
  }
}

}  // namespace hotcold
