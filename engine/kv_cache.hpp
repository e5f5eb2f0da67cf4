#pragma once
// The KV cache: each layer's keys (after RoPE) and values of every (sequence slot, position), in the
// cache's types (kv_types, keys' apart from values') — f16 (llama.cpp's default: rounded to half
// precision as they are stored, read back as floats), f32, or q8_0 / q4_0 (each position's row
// quantized by blocks of 32 as it is stored; attention widens a tile of rows at a time). On a CPU with
// AVX-512, F16 and F32 keys in host memory are kept in tiles of sixteen positions, each dim's sixteen
// values side by side (kernels/cpu/kv_rows.hpp): a decoded token's scores are then the query's values
// broadcast against sixteen keys at once, with no sums to fold (the score pass 3.5x faster at 2,000
// keys); with VNNI too, Q8_0 keys likewise, four dims of sixteen positions a vector for its integer
// products (kernels::keys_in_tiles). Q4_0 keys, values, and a device's layers keep a position's values
// in one row. In host
// memory (a page_buffer: decode's attention reads a layer's rows of every position 8 KB apart at
// n_embd 2048, and only the positions written are backed), except the layers whose attention a hot
// device holds: their cache is the device's (device_layers::k_cache).
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/cache_op.hpp"
#include "engine/device_layers.hpp"
#include "model/model.hpp"
#include "model/page_buffer.hpp"

namespace hotcold {

class kv_cache {
 public:
  // n_ctx positions of n_seq sequence slots for every layer; std::invalid_argument for a type other
  // than f32, f16, q8_0 or q4_0, or a quantized one whose blocks of 32 would cross a head.
  kv_cache(const hparams& hp, int64_t n_ctx, int64_t n_seq, kv_types types);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_seq() const { return n_seq_; }
  kv_types types() const { return types_; }

  // A layer's block of (n_seq, n_ctx, n_embd_kv) values, and the row of (slot, layer, position) in it
  // (keys: where the layer keeps them in rows, !k_tiled).
  uint8_t* k_layer(int64_t layer) const { return k_layers_[static_cast<size_t>(layer)]; }
  uint8_t* v_layer(int64_t layer) const { return v_layers_[static_cast<size_t>(layer)]; }
  uint8_t* k_row(int64_t seq, int64_t layer, int64_t pos) const { return k_layer(layer) + (seq * n_ctx_ + pos) * k_row_bytes_; }
  uint8_t* v_row(int64_t seq, int64_t layer, int64_t pos) const { return v_layer(layer) + (seq * n_ctx_ + pos) * v_row_bytes_; }
  // Whether the layer keeps its keys in tiles, and a slot's first tile (its tiles follow it).
  bool k_tiled(int64_t layer) const { return k_tiled_[static_cast<size_t>(layer)] != 0; }
  // Whether the layer's keys and values are rows of one f16 or f32 type (kv_types::plain), which
  // attention's row kernels read as they are; otherwise it widens them, or reads the tiles.
  bool plain_rows(int64_t layer) const { return types_.plain() && !k_tiled(layer); }
  const uint8_t* k_tiles(int64_t seq, int64_t layer) const { return key_tile(seq, layer, 0); }
  // A position's n_embd_kv keys (or values) stored, in the cache's type and layout for them.
  void store_k(int64_t seq, int64_t layer, int64_t pos, const float* row);
  void store_v(uint8_t* to, const float* row) const;
  // Keys of positions pos .. pos + n - 1, dims at .. at + cols - 1 (multiples of 32 where quantized),
  // widened into rows of cols floats.
  void load_k(int64_t seq, int64_t layer, int64_t pos, int64_t n, int64_t at, int64_t cols, float* out) const;

  // std::out_of_range for a slot or position outside the cache.
  void check_slot(int64_t seq, int64_t pos) const;

  // The prefix store: `blocks` blocks of block_tokens positions (every layer's keys and values), in
  // host memory backed only where written, replacing what was there. 0 blocks: none.
  void reserve_store(int64_t blocks, int64_t block_tokens);
  int64_t store_blocks() const { return store_blocks_; }
  int64_t block_tokens() const { return block_tokens_; }
  uint64_t block_bytes() const { return static_cast<uint64_t>(block_tokens_) * position_bytes(); }  // of one block
  uint64_t position_bytes() const { return static_cast<uint64_t>(n_layer_ * (k_row_bytes_ + v_row_bytes_)); }  // every layer's key and value rows
  // Carries out a move (a device's layers through its copies) but a shift; std::out_of_range for a
  // slot, block or position outside what is held.
  void apply(const cache_op& op);
  // n rows of a slot's layer (its keys, or its values) from position pos, out to host memory or in
  // from it (a device's layers through its copies); row_bytes(values) each.
  void read_rows(int64_t slot, int64_t layer, bool values, int64_t pos, int64_t n, uint8_t* dst) const;
  void write_rows(int64_t slot, int64_t layer, bool values, int64_t pos, int64_t n, const uint8_t* src);
  int64_t row_bytes(bool values) const { return values ? v_row_bytes_ : k_row_bytes_; }
  int64_t n_layer() const { return n_layer_; }
  // The layers this context computes (a stage's, or none on a coordinator whose stages hold every
  // one): moves and shifts leave the others' rows alone (default: every layer).
  void hold_layers(std::vector<uint8_t> held) { held_ = std::move(held); }
  bool holds(int64_t layer) const { return held_.empty() || held_[static_cast<size_t>(layer)] != 0; }
  // A shift (cache_op::kind::shift): every layer's rows moved down, each moved key row (n_embd_kv
  // floats) turned by `rotate` on its way.
  void shift(const cache_op& op, const std::function<void(float* key_row)>& rotate);
  // The layers whose attention d holds keep their cache there; the others (and every layer, with d
  // null) here. std::invalid_argument when d's cache has other positions, slots or type.
  void place(const device_layers* d);

 private:
  // The byte offset of rows pos .. pos + n - 1 of a slot in a layer's block of keys (or values);
  // std::out_of_range outside.
  size_t rows_offset(int64_t slot, int64_t pos, int64_t n, bool values) const;
  // Keys in tiles: a slot's tile of a layer; positions pos .. pos + n - 1 gathered into rows or
  // scattered from them; and copied from slot `from` to slot `to` (whole tiles as they are).
  uint8_t* key_tile(int64_t slot, int64_t layer, int64_t tile) const { return k_layer(layer) + (slot * n_tiles_ + tile) * 16 * k_row_bytes_; }
  void tiles_to_rows(int64_t slot, int64_t layer, int64_t pos, int64_t n, uint8_t* dst) const;
  void rows_to_tiles(int64_t slot, int64_t layer, int64_t pos, int64_t n, const uint8_t* src);
  void copy_key_tiles(int64_t layer, int64_t from, int64_t to, int64_t pos, int64_t n);
  // A prefix block's sixteen positions from pos (not a whole tile) into the block in the form of one
  // tile (save), or back.
  void block_tile(int64_t slot, int64_t layer, int64_t pos, uint8_t* block, bool save);
  int64_t n_layer_, n_ctx_, n_seq_, width_;  // width_: n_embd_kv
  int64_t n_tiles_;                          // a slot's tiles of sixteen positions (n_ctx rounded up)
  std::vector<uint8_t> k_tiled_;             // per layer
  kv_types types_;
  int64_t k_row_bytes_, v_row_bytes_;
  page_buffer k_, v_;  // (n_layer, n_seq, n_ctx, n_embd_kv) values each
  std::vector<uint8_t*> k_layers_, v_layers_;
  const device_layers* device_ = nullptr;
  std::vector<uint8_t> held_;  // empty: every layer
  int64_t store_blocks_ = 0, block_tokens_ = 0;
  page_buffer store_;  // (blocks, n_layer, keys then values, block_tokens, n_embd_kv)
  std::vector<uint8_t> staging_;  // a device's rows on their way between two of its slots
};

}  // namespace hotcold
