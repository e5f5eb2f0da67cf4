#pragma once
// The KV cache's rows in its types (kv_types: f32, f16, q8_0, q4_0): a position's keys or values
// stored from floats and read back as floats, and decode attention over quantized rows (never a
// widened copy of the cache).
#include <cstdint>

#include "kernels/cpu/attention.hpp"
#include "kernels/tensor_types.hpp"

namespace hotcold::kernels {

// n values (a multiple of t's block) into `to`, as the cache holds them: F16 rounded to the nearest
// half, Q8_0 and Q4_0 quantized by blocks of 32 as ggml quantizes them.
void kv_store_row(tensor_type t, const float* x, void* to, int64_t n);
// Rows 0 .. n - 1 of a cache (`row_bytes` apart from base), values at .. at + width - 1 of each (at and
// width multiples of t's block), widened into y: width floats a row, row after row.
void kv_load_rows(tensor_type t, const uint8_t* base, int64_t row_bytes, int64_t at, int64_t width, int64_t n, float* y);
// Keys in tiles (the layout of a cache's keys in host memory where this CPU's decode reads them so,
// keys_in_tiles; engine/kv_cache.hpp): a slot's positions sixteen to a tile, each tile as many bytes as
// sixteen rows. F16 and F32: `width` dims x 16 positions (position p in lane p % 16 of dim d's sixteen
// values). Q8_0: for each block of 32 dims, its quants for the sixteen positions four dims at a time
// (dims 4i .. 4i + 3 of position p at byte 64 i + 4 p of the block's 512), then every block's sixteen
// scales (F16, position p's at 2 p of the block's 32). Positions pos .. pos + n - 1, dims at .. at +
// cols - 1, widened into rows of `cols` floats; and one position's `width` values stored into its tile.
bool keys_in_tiles(tensor_type t);
// Q8_0 tiles' layout: a tile's bytes; where, within a tile, block b's quants of position p (dims 4i ..
// 4i + 3 of the block) and its sixteen scales start.
inline int64_t q8_0_tile_bytes(int64_t width) { return static_cast<int64_t>(values_bytes(tensor_type::q8_0, width)) * 16; }
inline int64_t q8_0_quads_at(int64_t p, int64_t b, int64_t i) { return b * 512 + i * 64 + p % 16 * 4; }
inline int64_t q8_0_scales_at(int64_t b, int64_t width) { return width / 32 * 512 + b * 32; }
void widen_key_tiles(tensor_type t, const uint8_t* tiles, int64_t width, int64_t pos, int64_t n, int64_t at, int64_t cols, float* out);
void store_key_tile(tensor_type t, const float* row, uint8_t* tiles, int64_t width, int64_t pos);
// Positions pos .. pos + n - 1 of tiles copied out to rows (position after position, `width` values of
// type t each), or in from them, the values as they are.
void key_tiles_to_rows(tensor_type t, const uint8_t* tiles, int64_t width, int64_t pos, int64_t n, uint8_t* rows);
void rows_to_key_tiles(tensor_type t, const uint8_t* rows, uint8_t* tiles, int64_t width, int64_t pos, int64_t n);

// x as Q8_0 leaves it (quantized by blocks of 32 and back), in place: the query a quantized K meets.
// llama.cpp's CPU attention quantizes the query to Q8_0 for its dot products with Q8_0 and Q4_0 keys;
// the float products of the two widened are those integer sums, up to float rounding.
void round_to_q8_0(float* x, int64_t n);

// Decode attention over keys t0 .. t1 - 1 of a cache whose keys and values are of types t (rows
// k_row_bytes and v_row_bytes apart, a position's KV heads side by side), as attend_keys over float
// rows: with AVX-512, attend_keys' kernel with each type's reader widening sixteen values at a time as
// it loads them (a Q8_0 or Q4_0 row is read once, at its own size); elsewhere tiles of 64 keys widened
// in turn and each tile's sums folded into the range's. q: the query rounded by round_to_q8_0 where
// the keys are quantized. scratch: attend_keys_typed_scratch floats.
int64_t attend_keys_typed_scratch(int64_t n_head, int64_t n_kv, int64_t hd);
// The same with the keys in tiles of type t.k (f16, f32 or q8_0; `k_tiles` the slot's first tile):
// each tile's sixteen keys meet a query's value broadcast, no sums to fold; Q8_0 ones in integer dot
// products with the query's Q8_0 blocks (q rounded as above). scratch: as attend_keys_typed's.
void attend_key_tiles(const float* q, kv_types t, const uint8_t* k_tiles, const uint8_t* v, int64_t v_row_bytes, int64_t n_head, int64_t n_kv,
                      int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch);
void attend_keys_typed(const float* q, kv_types t, const uint8_t* k, const uint8_t* v, int64_t k_row_bytes, int64_t v_row_bytes, int64_t n_head,
                       int64_t n_kv, int64_t hd, int64_t t0, int64_t t1, float scale, key_range_sums out, float* scratch);

}  // namespace hotcold::kernels
